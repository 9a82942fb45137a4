/*
 * emu/src/simt_sync.cc - the scheduling points of the SIMT scheduler (emu/README.md,
 * "Scheduling"): what a thread calls at the block barrier (__syncthreads and its _count, _and,
 * _or forms), at a warp collective (__syncwarp, shuffles, votes, reductions, matches,
 * core/ptx.cuh's warp-wide instructions) and at a blocking wait (mbarriers, named barriers,
 * wgmma results: sm90_*.cc), and what completes them between passes (resolve). simt.cc runs
 * the passes; simt.h is the state they share.
 *
 * Between passes the scheduler completes what can complete: warp collectives whose named
 * lanes have all arrived, then - when every live thread waits there - the block barrier.
 * Anything else (a lane that exited or waits elsewhere while named in a collective's mask,
 * threads exited while others wait at a barrier) is a fault naming the kernel and the thread.
 */
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "simt.h"

namespace sl_emu {
using namespace simt;

namespace {

uint64_t g_events_seen; /* g_events at the end of the last resolve() */

const char *kind_name(ts state, int kind) {
    if (state == ts::at_barrier) {
        static const char *const bars[] = {"__syncthreads()", "__syncthreads_count()",
                                           "__syncthreads_and()", "__syncthreads_or()"};
        return bars[kind];
    }
    static const char *const warps[] = {
        "__syncwarp",        "__shfl_sync",       "__shfl_up_sync",    "__shfl_down_sync",
        "__shfl_xor_sync",   "__ballot_sync",     "__any_sync",        "__all_sync",
        "__reduce_add_sync", "__reduce_min_sync", "__reduce_max_sync", "__reduce_min_sync",
        "__reduce_max_sync", "__reduce_and_sync", "__reduce_or_sync",  "__reduce_xor_sync",
        "__match_any_sync",  "__match_all_sync",  "mma.m16n8k16",      "ldmatrix.x1",
        "ldmatrix.x2",       "ldmatrix.x4",       "ldmatrix.x1.trans", "ldmatrix.x2.trans",
        "ldmatrix.x4.trans"};
    return warps[kind];
}

/* Computes a completed warp collective: lanes `m` of the warp starting at thread `base`. */
void complete_warp(int kind, unsigned m, unsigned base) {
    thread_rec *w = &g_threads[base];
    uint64_t r = 0;
    switch (kind) {
    case w_syncwarp:
        return;
    case w_shfl_idx:
    case w_shfl_up:
    case w_shfl_down:
    case w_shfl_bfly:
        /* PTX shfl.sync: c = segmask << 8 | clamp; a source outside [minLane, maxLane] reads
         * the lane's own value; a source lane that is not in the mask gives an undefined value
         * on the GPU, here all-ones bits (NaN) so that using it shows. */
        for (unsigned j = 0; j < 32; j++) {
            if (!(m >> j & 1)) continue;
            thread_rec *u = &w[j];
            const int lane = (int)j, bval = u->b & 31, seg = (u->c >> 8) & 31, clamp = u->c & 31;
            const int min_lane = lane & seg, max_lane = min_lane | (clamp & ~seg);
            int src = lane;
            bool ok = true;
            switch (kind) {
            case w_shfl_up:
                src = lane - bval;
                ok = src >= max_lane;
                break;
            case w_shfl_down:
                src = lane + bval;
                ok = src <= max_lane;
                break;
            case w_shfl_bfly:
                src = lane ^ bval;
                ok = src <= max_lane;
                break;
            default:
                src = min_lane | (bval & ~seg);
                ok = src <= max_lane;
                break;
            }
            if (!ok) src = lane;
            u->result = (m >> src & 1) ? w[src].value : ~(uint64_t)0;
        }
        return;
    case w_ballot:
    case w_any:
    case w_all:
        for (unsigned j = 0; j < 32; j++)
            if ((m >> j & 1) && w[j].value) r |= 1u << j;
        if (kind == w_any) r = r != 0;
        if (kind == w_all) r = r == m;
        break;
    case w_reduce_add:
    case w_reduce_and:
    case w_reduce_or:
    case w_reduce_xor:
    case w_reduce_min_u:
    case w_reduce_max_u:
    case w_reduce_min_i:
    case w_reduce_max_i: {
        bool first = true;
        uint32_t acc = 0;
        for (unsigned j = 0; j < 32; j++) {
            if (!(m >> j & 1)) continue;
            const uint32_t v = (uint32_t)w[j].value;
            if (first) {
                acc = v;
                first = false;
                continue;
            }
            switch (kind) {
            case w_reduce_add:
                acc += v;
                break;
            case w_reduce_and:
                acc &= v;
                break;
            case w_reduce_or:
                acc |= v;
                break;
            case w_reduce_xor:
                acc ^= v;
                break;
            case w_reduce_min_u:
                acc = std::min(acc, v);
                break;
            case w_reduce_max_u:
                acc = std::max(acc, v);
                break;
            case w_reduce_min_i:
                acc = (uint32_t)std::min((int32_t)acc, (int32_t)v);
                break;
            default:
                acc = (uint32_t)std::max((int32_t)acc, (int32_t)v);
                break;
            }
        }
        r = acc;
        break;
    }
    case w_match_any:
        for (unsigned j = 0; j < 32; j++) {
            if (!(m >> j & 1)) continue;
            uint64_t same = 0;
            for (unsigned k = 0; k < 32; k++)
                if ((m >> k & 1) && w[k].value == w[j].value) same |= 1u << k;
            w[j].result = same;
        }
        return;
    case w_match_all: {
        bool all = true;
        unsigned first = (unsigned)__builtin_ctz(m);
        for (unsigned j = 0; j < 32; j++)
            if ((m >> j & 1) && w[j].value != w[first].value) all = false;
        r = all ? ((uint64_t)1 << 32 | m) : 0;
        break;
    }
    default: {
        /* core/ptx.cuh's instructions (full warp, checked by the wrappers' mask): each lane's
         * value is a pointer to its operands on its (suspended) fiber's stack. */
        void *lanes[32];
        for (unsigned j = 0; j < 32; j++) lanes[j] = (void *)(uintptr_t)w[j].value;
        complete_ptx(kind, lanes);
        return;
    }
    }
    for (unsigned j = 0; j < 32; j++)
        if (m >> j & 1) w[j].result = r;
}

/* What thread u is doing, for fault messages. */
const char *what_waits(const thread_rec *u, char *buf, size_t len) {
    switch (u->state) {
    case ts::at_barrier:
        snprintf(buf, len, "%s", kind_name(u->state, u->kind));
        break;
    case ts::at_warp:
        snprintf(buf, len, "%s with mask 0x%08x", kind_name(u->state, u->kind), u->mask);
        break;
    case ts::blocked:
    case ts::yielded:
        describe_wait(u->wait, buf, len);
        break;
    case ts::exited:
        snprintf(buf, len, "has exited");
        break;
    default:
        snprintf(buf, len, "runs");
        break;
    }
    return buf;
}

/* Nothing can move: every live thread waits for something only another waiting thread could
 * give. Reports each distinct wait with the threads at it (consecutive threads with the same
 * wait share a line). */
bool deadlock() {
    std::string msg = "deadlock: no thread of the block can proceed:";
    unsigned i = 0, lines = 0;
    while (i < g_nthreads) {
        char what[512], next[512];
        what_waits(&g_threads[i], what, sizeof what);
        unsigned j = i + 1;
        while (j < g_nthreads && strcmp(what_waits(&g_threads[j], next, sizeof next), what) == 0)
            j++;
        if (lines++ < 12) {
            char head[96];
            if (j - i == 1)
                snprintf(head, sizeof head, "\n  thread %u [warp %u lane %u]: ", i, i / 32, i % 32);
            else
                snprintf(head, sizeof head, "\n  threads %u-%u [warps %u-%u]: ", i, j - 1, i / 32,
                         (j - 1) / 32);
            msg += head;
            msg += what;
        }
        i = j;
    }
    if (lines > 12) msg += "\n  ...";
    return launch_fault(nullptr, "%s", msg.c_str());
}

} // namespace

namespace simt {

/* Between passes: completes warp collectives and the barrier, or reports why nothing can
 * complete. Threads woken during the pass (mbarriers, named barriers, wgmma results) are
 * already ready; spinning threads (yielded) run again while anything moves. Fills g_pass with
 * the next pass; returns false after a fault (non-fatal mode). */
bool resolve() {
    const unsigned n = g_nthreads;
    bool progress = false;
    for (unsigned i = 0; i < n; i++) g_threads[i].handled = false;
    for (unsigned base = 0; base < n; base += 32) {
        const unsigned lanes = std::min(32u, n - base);
        for (unsigned l = 0; l < lanes; l++) {
            thread_rec *t = &g_threads[base + l];
            if (t->state != ts::at_warp || t->handled) continue;
            const unsigned m = t->mask;
            if (!(m >> l & 1))
                return launch_fault(t,
                                    "%s with mask 0x%08x, which does not include the calling "
                                    "lane %u",
                                    kind_name(t->state, t->kind), m, l);
            /* __syncwarp waits for the named lanes that have not exited (CUDA's rule); the
             * collectives exchange values, so every named lane must take part. */
            const bool sync_only = t->kind == w_syncwarp;
            if (!sync_only && lanes < 32 && (m >> lanes))
                return launch_fault(t,
                                    "%s with mask 0x%08x names lanes that do not exist (the "
                                    "block's last warp has %u threads)",
                                    kind_name(t->state, t->kind), m, lanes);
            bool complete = true;
            for (unsigned j = 0; j < lanes; j++) {
                if (!(m >> j & 1)) continue;
                const thread_rec *u = &g_threads[base + j];
                if (u->state == ts::exited && sync_only) continue;
                if (u->state == ts::exited)
                    return launch_fault(t,
                                        "%s with mask 0x%08x: lane %u, named in the mask, has "
                                        "exited (a lane that exited must not feed a stale "
                                        "value; keep every named lane alive to the "
                                        "collective)",
                                        kind_name(t->state, t->kind), m, j);
                if (u->state != ts::at_warp || u->kind != t->kind || u->mask != m) complete = false;
            }
            if (!complete) continue;
            complete_warp(t->kind, m, base);
            for (unsigned j = 0; j < lanes; j++)
                if ((m >> j & 1) && g_threads[base + j].state == ts::at_warp) {
                    g_threads[base + j].handled = true;
                    g_threads[base + j].state = ts::ready;
                }
            g_kstat->collectives++;
            progress = true;
        }
    }
    bool spinning = false;
    for (unsigned i = 0; i < n && !progress; i++) progress = g_threads[i].state == ts::ready;
    for (unsigned i = 0; i < n; i++) spinning |= g_threads[i].state == ts::yielded;
    /* Deferred TMA copies complete when nothing else can move (sm90_sync.cc). */
    if (!progress && sm90_idle()) progress = true;
    /* Spinning threads run again if anything happened during the pass; otherwise they wait
     * for something only a waiting thread could do. */
    if (spinning && (progress || g_events != g_events_seen)) {
        for (unsigned i = 0; i < n; i++)
            if (g_threads[i].state == ts::yielded) g_threads[i].state = ts::ready;
        progress = true;
    }
    g_events_seen = g_events;
    if (!progress) {
        /* No collective can complete: every live thread must wait at the barrier. */
        thread_rec *waiting = nullptr, *exited = nullptr;
        bool stuck = false; /* a thread waits for something other than the barrier */
        for (unsigned i = 0; i < n; i++) {
            thread_rec *t = &g_threads[i];
            if (t->state == ts::at_warp) {
                const unsigned base = i / 32 * 32;
                for (unsigned j = 0; j < 32 && base + j < n; j++) {
                    const thread_rec *u = &g_threads[base + j];
                    if (!(t->mask >> j & 1) ||
                        (u->state == ts::at_warp && u->kind == t->kind && u->mask == t->mask) ||
                        (u->state == ts::exited && t->kind == w_syncwarp))
                        continue;
                    char other[512];
                    return launch_fault(t,
                                        "waits at %s with mask 0x%08x, but lane %u, named in "
                                        "the mask, waits at %s: the named lanes never meet",
                                        kind_name(t->state, t->kind), t->mask, j,
                                        what_waits(u, other, sizeof other));
                }
            }
            if (t->state == ts::at_barrier && !waiting) waiting = t;
            if (t->state == ts::exited && !exited) exited = t;
            if (t->state == ts::blocked || t->state == ts::yielded) stuck = true;
        }
        if (stuck || !waiting) return deadlock();
        if (exited)
            return launch_fault(waiting,
                                "waits at %s, but thread (%u,%u,%u) has exited: every "
                                "thread of a block must reach every barrier (no early "
                                "return before __syncthreads)",
                                kind_name(waiting->state, waiting->kind), exited->idx.x,
                                exited->idx.y, exited->idx.z);
        unsigned count = 0;
        for (unsigned i = 0; i < n; i++) {
            const thread_rec *t = &g_threads[i];
            if (t->kind != waiting->kind)
                return launch_fault(t, "waits at %s while thread (%u,%u,%u) waits at %s",
                                    kind_name(t->state, t->kind), waiting->idx.x, waiting->idx.y,
                                    waiting->idx.z, kind_name(waiting->state, waiting->kind));
            count += t->value != 0;
        }
        uint64_t r = 0;
        if (waiting->kind == bar_count) r = count;
        if (waiting->kind == bar_and) r = count == n;
        if (waiting->kind == bar_or) r = count > 0;
        for (unsigned i = 0; i < n; i++) {
            g_threads[i].result = r;
            g_threads[i].state = ts::ready;
        }
        g_kstat->barriers++;
    }
    g_pass.clear();
    for (unsigned i = 0; i < n; i++)
        if (g_threads[i].state == ts::ready) g_pass.push_back(i);
    order_pass();
    return true;
}

} // namespace simt

int barrier(int kind, int pred) {
    thread_rec *t = current("__syncthreads");
    t->state = ts::at_barrier;
    t->kind = kind;
    t->value = pred != 0;
    suspend(t);
    g_events++;
    return (int)t->result;
}

uint64_t warp_op(int kind, unsigned mask, uint64_t value, int b, int c) {
    thread_rec *t = current(kind_name(ts::at_warp, kind));
    t->state = ts::at_warp;
    t->kind = kind;
    t->mask = mask;
    t->value = value;
    t->b = b;
    t->c = c;
    suspend(t);
    g_events++;
    return t->result;
}

unsigned active_lanes() {
    thread_rec *t = current("__activemask");
    const unsigned lin = (unsigned)(t - g_threads.data()), base = lin / 32 * 32;
    unsigned m = 0;
    for (unsigned j = 0; j < 32 && base + j < g_nthreads; j++)
        if (g_threads[base + j].state != ts::exited) m |= 1u << j;
    return m;
}

void block_current(const wait_desc &w) {
    thread_rec *t = current("a blocking wait");
    t->state = ts::blocked;
    t->wait = w;
    suspend(t);
    g_events++;
}

void yield_current(const wait_desc &w) {
    thread_rec *t = current("a spinning wait");
    t->state = ts::yielded;
    t->wait = w;
    suspend(t);
}

void wake(unsigned thread) {
    thread_rec *t = &g_threads[thread];
    if (t->state == ts::blocked || t->state == ts::yielded) t->state = ts::ready;
    g_events++;
}

void note_progress() {
    g_events++;
}

uint64_t progress_events() {
    return g_events;
}

} // namespace sl_emu
