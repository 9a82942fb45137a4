/*
 * emu/src/simt_racecheck.cc - the race check of the SIMT scheduler (emu/README.md, "The race
 * check"). simt.cc runs the launches; simt.h is the state they share.
 *
 * Race check: each launch runs under several thread orders - forward, then reverse (threads
 * within each pass, and blocks), then optionally seeded shuffles - from the same device memory,
 * and every allocation must come out bitwise identical (checked_run).
 *
 * Before the first order the device memory (and pinned host memory a kernel argument points
 * into) is copied; after it, the chunks that changed are kept as the expected result and the
 * copy is put back; after each further order every allocation is compared with that result.
 */
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "simt.h"

namespace sl_emu {
using namespace simt;

namespace {

struct region {
    char *p;
    size_t n;
    const allocation *a;
    size_t off; /* in the snapshot */
};
struct chunk {
    size_t region, off, res_off;
};
constexpr size_t k_chunk = 16384;
std::vector<region> g_regions;
std::vector<chunk> g_changed;
std::vector<char> g_snap, g_res;

/* Device memory, and pinned or registered host memory a kernel argument points into. */
void collect_regions(const launch_desc &d) {
    g_regions.clear();
    std::vector<const allocation *> host;
    for (size_t o = 0; o + sizeof(uintptr_t) <= d.arg_size; o += sizeof(uintptr_t)) {
        uintptr_t w;
        memcpy(&w, (const char *)d.arg_bytes + o, sizeof w);
        const allocation *a = find_allocation((const void *)w, 0);
        if (a && a->kind != k_device) host.push_back(a);
    }
    size_t off = 0;
    for (const auto &kv : allocations()) {
        const allocation &a = kv.second;
        if (a.kind != k_device && std::find(host.begin(), host.end(), &a) == host.end()) continue;
        g_regions.push_back(region{a.user, a.size, &a, off});
        off += a.size;
    }
    if (g_snap.size() < off) g_snap.resize(off);
}

/* The expected content of region ri's chunk at `off` (order 0's result). */
const char *expected_chunk(size_t ri, size_t off, size_t &cursor) {
    while (cursor < g_changed.size() &&
           (g_changed[cursor].region < ri ||
            (g_changed[cursor].region == ri && g_changed[cursor].off < off)))
        cursor++;
    if (cursor < g_changed.size() && g_changed[cursor].region == ri && g_changed[cursor].off == off)
        return g_res.data() + g_changed[cursor].res_off;
    return g_snap.data() + g_regions[ri].off + off;
}

void race_fault(size_t ri, int order) {
    const region &r = g_regions[ri];
    size_t first = SIZE_MAX, ndiff = 0, cursor = 0;
    uint32_t wa = 0, wb = 0; /* the 32-bit word holding the first difference */
    bool have_word = false;
    for (size_t off = 0; off < r.n; off += k_chunk) {
        const size_t len = std::min(k_chunk, r.n - off);
        const char *e = expected_chunk(ri, off, cursor);
        for (size_t i = 0; i < len; i++)
            if (e[i] != r.p[off + i]) {
                if (first == SIZE_MAX) {
                    first = off + i;
                    const size_t f = first / 4 * 4;
                    if (f >= off && f + 4 <= off + len) {
                        memcpy(&wa, e + (f - off), 4);
                        memcpy(&wb, r.p + f, 4);
                        have_word = true;
                    }
                }
                ndiff++;
            }
    }
    char what[256], ob[64], word[160] = "";
    describe(*r.a, what, sizeof what);
    if (have_word) {
        float fa, fb;
        memcpy(&fa, &wa, 4);
        memcpy(&fb, &wb, 4);
        snprintf(word, sizeof word, " (32-bit word %zu: 0x%08x vs 0x%08x, as fp32 %.9g vs %.9g)",
                 first / 4, wa, wb, (double)fa, (double)fb);
    }
    launch_fault(nullptr,
                 "results differ between the forward and the %s thread order - a race: %s: "
                 "%zu byte(s) differ, the first at byte offset %zu%s. Typical causes: shared "
                 "memory written by one thread and read by another without __syncthreads() "
                 "between, a read of global memory that another thread or block of the same "
                 "launch writes, atomics whose order changes the result (floating-point sums, "
                 "a returned old value)",
                 order_name(order, ob, sizeof ob), what, ndiff, first, word);
}

} // namespace

namespace simt {

void checked_run(const launch_desc &d) {
    collect_regions(d);
    for (const region &r : g_regions) memcpy(g_snap.data() + r.off, r.p, r.n);
    run_grid(0);
    if (g_failed) return;
    /* Keep order 0's result where it changed memory, and put the snapshot back. */
    g_changed.clear();
    g_res.clear();
    for (size_t ri = 0; ri < g_regions.size(); ri++) {
        const region &r = g_regions[ri];
        for (size_t off = 0; off < r.n; off += k_chunk) {
            const size_t len = std::min(k_chunk, r.n - off);
            char *snap = g_snap.data() + r.off + off;
            if (memcmp(r.p + off, snap, len) == 0) continue;
            g_changed.push_back(chunk{ri, off, g_res.size()});
            g_res.insert(g_res.end(), r.p + off, r.p + off + len);
            memcpy(r.p + off, snap, len);
        }
    }
    for (int order = 1; order < cfg().orders; order++) {
        run_grid(order);
        if (g_failed) return;
        size_t cursor = 0;
        for (size_t ri = 0; ri < g_regions.size(); ri++) {
            const region &r = g_regions[ri];
            for (size_t off = 0; off < r.n; off += k_chunk) {
                const size_t len = std::min(k_chunk, r.n - off);
                if (memcmp(r.p + off, expected_chunk(ri, off, cursor), len) != 0) {
                    race_fault(ri, order);
                    return;
                }
            }
        }
        if (order + 1 < cfg().orders)
            for (const chunk &c : g_changed) {
                const region &r = g_regions[c.region];
                memcpy(r.p + c.off, g_snap.data() + r.off + c.off, std::min(k_chunk, r.n - c.off));
            }
    }
}

} // namespace simt
} // namespace sl_emu
