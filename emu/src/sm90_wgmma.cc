/*
 * emu/src/sm90_wgmma.cc - wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16 and its fence,
 * commit_group and wait_group (emu/README.md, "Hopper instructions"; the layouts are written
 * out in core/ptx_sm90.cuh).
 *
 * One operation per warpgroup, not per thread: the k-th wgmma a thread issues is the k-th of
 * its warpgroup. The first of the 128 threads to issue it reads the shared-memory operands
 * through the descriptors (and checks that ordinary stores to them were fenced for the async
 * proxy); every thread hands over its accumulators (or, chained, the pending result of its
 * previous wgmma on the same registers) and, for A from registers, its A fragment, and gets
 * its accumulators filled with 0xff (NaN); the last one computes the 64 x N product once.
 * Nobody waits at the issue, as on the GPU. wgmma.wait_group retires the thread's oldest
 * groups: it waits until the warpgroup's last thread has issued each operation, checks that
 * the shared-memory operands did not change since the issue (at the first thread's retiring
 * wait, and again at the last thread's: a stage must not be refilled while any thread of the
 * warpgroup has yet to wait for the wgmma reading it) and that the accumulators still hold the
 * 0xff they got (nothing wrote them in between), then writes the results.
 */
#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "internal.h"
#include "sl_emu.h"
#include "sm90.h"

namespace sl_emu {
namespace sm90 {

namespace {

struct wg_op {
    int n, trans_a, trans_b, accumulate;
    bool rs;
    uint64_t desc_a, desc_b;
    unsigned wg;
    uint64_t seq; /* the warpgroup's seq-th wgmma */
    unsigned issued, refs;
    unsigned retired; /* threads whose wait_group has retired it */
    bool computed;
    std::vector<float> A;         /* [64][16] */
    std::vector<float> B;         /* [16][n] */
    std::vector<uint16_t> ra, rb; /* the shared-memory operands as read: [mn][k] */
    std::vector<float> acc;       /* [128][n / 2]: C, then D, in fragment order */
    float *d[128];
    wg_op *chain[128]; /* C of thread i comes from chain[i]'s result */
    std::vector<unsigned> waiters;
};

struct wg_thread {
    uint64_t issued;            /* wgmma instructions issued in this block */
    std::vector<wg_op *> queue; /* issued, not retired, oldest first */
    std::vector<size_t> group_ends;
    bool fenced; /* a wgmma.fence since the start or the last retiring wait_group */
};

struct wg_group {
    std::deque<wg_op *> open; /* not yet issued by all 128 threads, by seq */
    uint64_t base;            /* seq of open.front() */
};

/* Operations are recycled (their buffers keep their capacity): every one ever made is in
 * g_all, the free ones in g_pool; a block starts with all of them free. */
std::vector<std::unique_ptr<wg_op>> g_all;
std::vector<wg_op *> g_pool;
std::vector<wg_thread> g_thr;
std::vector<wg_group> g_groups;
unsigned g_nthreads;

wg_op *new_op() {
    if (g_pool.empty()) {
        g_all.emplace_back(new wg_op());
        return g_all.back().get();
    }
    wg_op *op = g_pool.back();
    g_pool.pop_back();
    op->issued = 0;
    op->retired = 0;
    op->computed = false;
    memset(op->d, 0, sizeof op->d);
    memset(op->chain, 0, sizeof op->chain);
    op->waiters.clear();
    return op;
}

void release(wg_op *op) {
    if (--op->refs == 0) g_pool.push_back(op);
}

/* ---- shared-memory matrix descriptors -------------------------------------------------------- */

struct desc_fields {
    uint32_t start, lbo, sbo;
    int base_offset, mode; /* mode: 0 none, 1 128B, 2 64B, 3 32B (the descriptor's encoding) */
};

desc_fields decode(uint64_t desc) {
    desc_fields f;
    f.start = (uint32_t)(desc & 0x3fff) << 4;
    f.lbo = (uint32_t)((desc >> 16) & 0x3fff) << 4;
    f.sbo = (uint32_t)((desc >> 32) & 0x3fff) << 4;
    f.base_offset = (int)((desc >> 49) & 7);
    f.mode = (int)((desc >> 62) & 3);
    return f;
}

/* Shared address of element (mn, k) of a 16-bit operand (mn: the row of A or the column of
 * B). The canonical layouts, in 16-byte chunks of 8 elements (PTX ISA "Shared Memory Matrix
 * Layout"; row = one swizzle-span line):
 *   K-major, no swizzle: core matrices of 8 rows x 16 bytes; rows 16 bytes apart, 8-row
 *     groups SBO apart, the second 8 of k LBO away;
 *   K-major, swizzled: rows one span (32/64/128 bytes) apart, 8-row groups SBO apart, the
 *     second 8 of k 16 bytes on (LBO unused);
 *   MN-major, no swizzle: 8 mn per chunk, 8 k rows 16 bytes apart, 8-mn groups SBO apart,
 *     8-k groups LBO apart;
 *   MN-major, swizzled: a span line holds 16/32/64 mn of one k; k rows one span apart, 8-k
 *     groups SBO apart, the next 16/32/64 mn LBO away.
 * Swizzled: address bits [4, 7) XOR bits [7, 10) (as many as the mode has), on the shared
 * address itself (base offset 0: patterns start at multiples of their repeat). */
uint32_t element_addr(const desc_fields &f, bool mn_major, int mn, int k) {
    static const uint32_t span[4] = {16, 128, 64, 32};
    static const uint32_t mask[4] = {0, 7, 3, 1};
    const uint32_t row = span[f.mode];
    uint32_t off;
    if (!mn_major) {
        if (f.mode == 0)
            off = (uint32_t)(mn % 8) * 16 + (uint32_t)(mn / 8) * f.sbo + (uint32_t)(k / 8) * f.lbo;
        else
            off = (uint32_t)(mn % 8) * row + (uint32_t)(mn / 8) * f.sbo + (uint32_t)(k / 8) * 16;
        off += (uint32_t)(k % 8) * 2;
    } else {
        if (f.mode == 0) {
            off = (uint32_t)(mn % 8) * 2 + (uint32_t)(mn / 8) * f.sbo + (uint32_t)(k % 8) * 16 +
                  (uint32_t)(k / 8) * f.lbo;
        } else {
            const int w = (int)row / 2;
            off = (uint32_t)(mn % w) * 2 + (uint32_t)(mn / w) * f.lbo + (uint32_t)(k % 8) * row +
                  (uint32_t)(k / 8) * f.sbo;
        }
    }
    uint32_t a = f.start + off;
    a ^= ((a >> 7) & mask[f.mode]) << 4;
    return a;
}

/* Reads a 16-bit operand of `mns` rows (mn) by 16 (k), 16 bytes (8 elements along the
 * contiguous dimension) at a time, into raw[mn][k]; `check` runs the async-proxy check on each
 * chunk. */
void gather(uint64_t desc, bool mn_major, int mns, std::vector<uint16_t> &raw, bool check,
            const char *what) {
    const desc_fields f = decode(desc);
    if (f.base_offset)
        faultf("wgmma.mma_async: the %s descriptor has base offset %d: not emulated (keep each "
               "swizzled tile at a multiple of its pattern's repeat, base offset 0)",
               what, f.base_offset);
    const unsigned char *base = smem_base();
    const size_t size = smem_size();
    raw.resize((size_t)mns * 16);
    uint16_t chunk[8];
    for (int mn = 0; mn < mns; mn += mn_major ? 8 : 1)
        for (int k = 0; k < 16; k += mn_major ? 1 : 8) {
            const uint32_t a = element_addr(f, mn_major, mn, k);
            if ((size_t)a + 16 > size)
                faultf("wgmma.mma_async: elements (%d, %d) of the %s (descriptor 0x%016llx) are at "
                       "shared address %u, outside the block's %zu bytes of dynamic shared memory",
                       mn, k, what, (unsigned long long)desc, a, size);
            if (check) async_read(base + a, 16, "wgmma.mma_async");
            memcpy(chunk, base + a, 16);
            for (int e = 0; e < 8; e++)
                raw[mn_major ? (size_t)(mn + e) * 16 + (size_t)k
                             : (size_t)mn * 16 + (size_t)(k + e)] = chunk[e];
        }
}

inline float bf16_to_float(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float v;
    memcpy(&v, &u, 4);
    return v;
}

/* Accumulator registers 4j .. 4j + 3 of thread i (of the warpgroup) hold D[r0][c0], D[r0][c0 +
 * 1], D[r0 + 8][c0], D[r0 + 8][c0 + 1] with r0 = 16w + g, c0 = 8j + 2q (core/ptx_sm90.cuh). */
inline void acc_origin(int i, int &r0, int &c0) {
    const int w = i / 32, lane = i % 32;
    r0 = 16 * w + lane / 4;
    c0 = 2 * (lane % 4);
}

/* Only the emulator's own buffers: left out of the sanitizers, which would make the product
 * ten times slower (emu/README.md, "What it costs"). */
__attribute__((no_sanitize("address", "undefined"))) void compute(wg_op *op) {
    const int n = op->n, regs = n / 2;
    static std::vector<float> D;
    D.resize((size_t)64 * (size_t)n);
    if (!op->accumulate) std::fill(D.begin(), D.end(), 0.0f);
    for (int i = 0; i < 128 && op->accumulate; i++) {
        const float *c = op->chain[i] ? &op->chain[i]->acc[(size_t)i * (size_t)regs]
                                      : &op->acc[(size_t)i * (size_t)regs];
        int r0, c0;
        acc_origin(i, r0, c0);
        float *top = &D[(size_t)r0 * (size_t)n + (size_t)c0], *bot = top + 8 * (size_t)n;
        for (int j = 0; j < n / 8; j++, c += 4) {
            top[8 * j] = c[0];
            top[8 * j + 1] = c[1];
            bot[8 * j] = c[2];
            bot[8 * j + 1] = c[3];
        }
    }
    for (int i = 0; i < 128; i++)
        if (op->chain[i]) {
            release(op->chain[i]);
            op->chain[i] = nullptr;
        }
    /* d = c; d += a[m][k] * b[k][n] for k = 0..15 in order, fp32 (bf16 products are exact). */
    for (int m = 0; m < 64; m++) {
        float *__restrict drow = &D[(size_t)m * (size_t)n];
        for (int k = 0; k < 16; k++) {
            const float a = op->A[(size_t)m * 16 + (size_t)k];
            const float *__restrict brow = &op->B[(size_t)k * (size_t)n];
            for (int c = 0; c < n; c++) drow[c] += a * brow[c];
        }
    }
    for (int i = 0; i < 128; i++) {
        float *c = &op->acc[(size_t)i * (size_t)regs];
        int r0, c0;
        acc_origin(i, r0, c0);
        const float *top = &D[(size_t)r0 * (size_t)n + (size_t)c0], *bot = top + 8 * (size_t)n;
        for (int j = 0; j < n / 8; j++, c += 4) {
            c[0] = top[8 * j];
            c[1] = top[8 * j + 1];
            c[2] = bot[8 * j];
            c[3] = bot[8 * j + 1];
        }
    }
    op->computed = true;
    for (unsigned t : op->waiters) wake(t);
    op->waiters.clear();
    note_progress();
}

void verify(wg_op *op) {
    std::vector<uint16_t> a, b;
    bool same = true;
    if (!op->rs) {
        gather(op->desc_a, op->trans_a, 64, a, false, "A operand");
        same = a == op->ra;
    }
    gather(op->desc_b, op->trans_b, op->n, b, false, "B operand");
    if (!same || b != op->rb)
        faultf("wgmma.wait_group: the shared memory that wgmma.mma_async #%llu of warpgroup %u "
               "reads (its %s, descriptor 0x%016llx) changed between the issue and the wait %s: "
               "the tensor core may read either (a TMA load into a stage still in use, a store "
               "before the wait, or a stage released by a thread before its own wait retired "
               "the wgmma)",
               (unsigned long long)op->seq, op->wg, same ? "B operand" : "A operand",
               (unsigned long long)(same ? op->desc_b : op->desc_a),
               op->retired ? "of its warpgroup's last thread to retire it"
                           : "that first retires it");
}

} // namespace

void wgmma_block_start(unsigned nthreads) {
    g_pool.clear();
    for (const auto &op : g_all) g_pool.push_back(op.get());
    g_nthreads = nthreads;
    if (g_thr.size() < nthreads) g_thr.resize(nthreads);
    for (unsigned i = 0; i < nthreads; i++) {
        g_thr[i].issued = 0;
        g_thr[i].queue.clear();
        g_thr[i].group_ends.clear();
        g_thr[i].fenced = false;
    }
    g_groups.assign((nthreads + 127) / 128, wg_group{});
}

void wgmma_thread_exit(unsigned thread) {
    const wg_thread &th = g_thr[thread];
    if (!th.queue.empty())
        faultf("the thread ends with %zu wgmma.mma_async not retired by wgmma.wait_group (%zu "
               "committed group(s)): their accumulators are never written",
               th.queue.size(), th.group_ends.size());
}

void wgmma_block_end() {
    for (unsigned wg = 0; wg < g_groups.size(); wg++)
        if (!g_groups[wg].open.empty()) {
            const wg_op *op = g_groups[wg].open.front();
            block_fault("wgmma.mma_async #%llu of warpgroup %u was issued by only %u of its 128 "
                        "threads (every thread of the warpgroup executes each wgmma)",
                        (unsigned long long)op->seq, wg, op->issued);
            return;
        }
}

void describe_wgmma_wait(const void *p, char *buf, size_t len) {
    const wg_op *op = (const wg_op *)p;
    snprintf(buf, len,
             "wgmma.wait_group waits for wgmma.mma_async #%llu of warpgroup %u, issued by %u of "
             "its 128 threads so far",
             (unsigned long long)op->seq, op->wg, op->issued);
}

} // namespace sm90

using namespace sm90;

void wgmma(int n, int trans_a, int trans_b, float *d, const uint32_t *a_regs, uint64_t desc_a,
           uint64_t desc_b, int accumulate) {
    const char *who = "wgmma.mma_async";
    const unsigned t = current_thread(who);
    const unsigned wg = t / 128, i = t % 128;
    if ((wg + 1) * 128 > g_nthreads)
        faultf("%s: the thread is in warpgroup %u, which the block's %u threads do not fill (a "
               "warpgroup is 4 consecutive warps, 128 threads, all executing each wgmma)",
               who, wg, g_nthreads);
    if (n < 8 || n > 256 || n % 8 || (trans_a | trans_b) >> 1 || (a_regs && trans_a))
        faultf("%s: shape m64n%dk16 with trans-a %d, trans-b %d%s is not a bf16 wgmma", who, n,
               trans_a, trans_b, a_regs ? " (A from registers)" : "");
    wg_thread &th = g_thr[t];
    if (!th.fenced)
        faultf("%s without a wgmma.fence (sl_wgmma_fence) before it: one is needed before the "
               "first wgmma of the thread and after each wgmma.wait_group, before registers the "
               "wgmma reads or writes are used again",
               who);
    wg_group &grp = g_groups[wg];
    const uint64_t seq = th.issued++;
    wg_op *op;
    if (seq - grp.base == grp.open.size()) {
        op = new_op();
        op->n = n;
        op->trans_a = trans_a;
        op->trans_b = trans_b;
        op->accumulate = accumulate != 0;
        op->rs = a_regs != nullptr;
        op->desc_a = a_regs ? 0 : desc_a;
        op->desc_b = desc_b;
        op->wg = wg;
        op->seq = seq;
        op->refs = 128;
        op->acc.resize((size_t)128 * (size_t)(n / 2)); /* every value is written before use */
        op->A.assign(64 * 16, 0.0f);
        if (!a_regs) {
            gather(desc_a, trans_a, 64, op->ra, true, "A operand");
            for (size_t e = 0; e < op->A.size(); e++) op->A[e] = bf16_to_float(op->ra[e]);
        }
        gather(desc_b, trans_b, n, op->rb, true, "B operand");
        op->B.resize((size_t)16 * (size_t)n);
        for (int c = 0; c < n; c++)
            for (int k = 0; k < 16; k++)
                op->B[(size_t)k * (size_t)n + (size_t)c] =
                    bf16_to_float(op->rb[(size_t)c * 16 + (size_t)k]);
        grp.open.push_back(op);
    } else {
        op = grp.open[seq - grp.base];
        if (op->n != n || op->trans_a != trans_a || op->trans_b != trans_b ||
            op->accumulate != (accumulate != 0) || op->rs != (a_regs != nullptr) ||
            (!a_regs && op->desc_a != desc_a) || op->desc_b != desc_b)
            faultf("%s #%llu of warpgroup %u: this thread's operands (n %d, trans %d/%d, "
                   "accumulate %d, descriptors 0x%016llx / 0x%016llx) differ from those of the "
                   "warpgroup's first thread to issue it (n %d, trans %d/%d, accumulate %d, "
                   "0x%016llx / 0x%016llx): all 128 threads execute the same wgmma",
                   who, (unsigned long long)seq, wg, n, trans_a, trans_b, accumulate != 0,
                   (unsigned long long)desc_a, (unsigned long long)desc_b, op->n, op->trans_a,
                   op->trans_b, op->accumulate, (unsigned long long)op->desc_a,
                   (unsigned long long)op->desc_b);
    }
    const int regs = n / 2;
    /* The newest of this thread's wgmmas in flight on these registers: the same registers and
     * shape chain (the hardware orders them), any other overlap is a fault. */
    wg_op *prev = nullptr;
    for (size_t q = th.queue.size(); q-- > 0;) {
        wg_op *p = th.queue[q];
        const float *pd = p->d[i];
        if (pd + p->n / 2 <= d || d + regs <= pd) continue;
        if (pd != d || p->n != n)
            faultf("%s: its accumulators overlap those of wgmma #%llu (m64n%dk16), still in "
                   "flight, with a different shape or offset",
                   who, (unsigned long long)p->seq, p->n);
        prev = p;
        break;
    }
    op->d[i] = d;
    if (op->accumulate) {
        if (prev) {
            op->chain[i] = prev;
            prev->refs++;
        } else {
            memcpy(&op->acc[(size_t)i * (size_t)regs], d, sizeof(float) * (size_t)regs);
        }
    }
    if (a_regs) {
        const int w = (int)i / 32, lane = (int)i % 32, g = lane / 4, tq = lane % 4;
        for (int q = 0; q < 4; q++) {
            const int row = 16 * w + g + 8 * (q & 1), col = 2 * tq + 8 * (q >> 1);
            const uint32_t lo = a_regs[q] << 16, hi = a_regs[q] & 0xffff0000u;
            memcpy(&op->A[(size_t)row * 16 + (size_t)col], &lo, 4);
            memcpy(&op->A[(size_t)row * 16 + (size_t)col + 1], &hi, 4);
        }
    }
    /* Undefined until the wait retires the wgmma: a read in between sees NaN. */
    memset(d, 0xff, sizeof(float) * (size_t)regs);
    th.queue.push_back(op);
    note_progress();
    if (++op->issued == 128) {
        compute(op);
        while (!grp.open.empty() && grp.open.front()->issued == 128) {
            grp.open.pop_front();
            grp.base++;
        }
    }
}

void wgmma_fence() {
    g_thr[current_thread("wgmma.fence")].fenced = true;
}

void wgmma_commit() {
    wg_thread &th = g_thr[current_thread("wgmma.commit_group")];
    th.group_ends.push_back(th.queue.size());
}

void wgmma_wait(int n, const char *file, int line) {
    const unsigned t = current_thread("wgmma.wait_group");
    const unsigned i = t % 128;
    wg_thread &th = g_thr[t];
    if (n < 0 || th.group_ends.size() <= (size_t)n) return;
    const size_t retire = th.group_ends.size() - (size_t)n, end = th.group_ends[retire - 1];
    for (size_t q = 0; q < end; q++) {
        wg_op *op = th.queue[q];
        while (!op->computed) {
            op->waiters.push_back(t);
            block_current(wait_desc{wk_wgmma, op, 0, 0, file, line});
        }
        /* the operands must be unchanged when the first thread learns the wgmma complete, and
         * still when the last does: until then a thread of the warpgroup may still rely on them
         * (a stage released for reuse before the releasing thread's own wait shows here) */
        if (op->retired == 0 || op->retired == 127) verify(op);
        op->retired++;
        const int regs = op->n / 2;
        float *d = op->d[i];
        bool superseded = false;
        for (size_t r = q + 1; r < th.queue.size() && !superseded; r++)
            superseded = th.queue[r]->d[i] == d;
        if (!superseded) {
            for (int r = 0; r < regs; r++) {
                uint32_t u;
                memcpy(&u, &d[r], 4);
                if (u != 0xffffffffu)
                    faultf("wgmma.wait_group at %s:%d: accumulator register %d of wgmma.mma_async "
                           "#%llu was written while the wgmma was in flight (between its issue "
                           "and this wait)",
                           file, line, r, (unsigned long long)op->seq);
            }
            memcpy(d, &op->acc[(size_t)i * (size_t)regs], sizeof(float) * (size_t)regs);
        }
        release(op);
    }
    th.queue.erase(th.queue.begin(), th.queue.begin() + (ptrdiff_t)end);
    th.group_ends.erase(th.group_ends.begin(), th.group_ends.begin() + (ptrdiff_t)retire);
    for (size_t &e : th.group_ends) e -= end;
    /* The retired accumulators are the thread's again: the next wgmma needs a fence. */
    if (end) th.fenced = false;
    note_progress();
}

} // namespace sl_emu
