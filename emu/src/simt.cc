/*
 * emu/src/simt.cc - the SIMT scheduler of the CPU test double: launches, blocks, threads as
 * fibers, barriers, warp collectives, and the race check (emu/README.md).
 *
 * A launch runs its blocks one after another. A block's threads run as Boost.Context fibers
 * on the calling OS thread, in passes: a pass resumes every runnable thread once, in the
 * pass's order, and each runs until it reaches a scheduling point (__syncthreads, __syncwarp,
 * a warp collective) or exits. Between passes the scheduler completes what can complete:
 * warp collectives whose named lanes have all arrived, then - when every live thread waits
 * there - the block barrier. Anything else (a lane that exited or waits elsewhere while named
 * in a collective's mask, threads exited while others wait at a barrier) is a fault naming the
 * kernel and the thread.
 *
 * Cheap common case: a thread that runs to its end without blocking hands its fiber (and
 * stack) to the next unstarted thread of the pass, so a kernel without scheduling points costs
 * one fiber per block; a thread that blocks keeps its fiber and the next thread gets a new one
 * (stacks come from a pool).
 *
 * Race check: each launch runs under several thread orders - forward, then reverse (threads
 * within each pass, and blocks), then optionally seeded shuffles - from the same device memory,
 * and every allocation must come out bitwise identical (checked_run).
 */
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <boost/context/fiber.hpp>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"
#include "sl_emu.h"

#if SL_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

uint3 threadIdx;
uint3 blockIdx;
dim3 blockDim;
dim3 gridDim;

namespace sl_emu {
namespace bc = boost::context;

namespace {

/* blocked: waits for a wake() (mbarrier, named barrier, wgmma results); yielded: spins
 * (mbarrier.test_wait) and runs again next pass while something else moves. */
enum class ts : uint8_t {
    unstarted,
    ready,
    running,
    at_barrier,
    at_warp,
    blocked,
    yielded,
    exited
};

struct thread_rec {
    bc::fiber fib;        /* this thread's continuation while it waits */
    bc::fiber *sink;      /* where the fiber it runs on keeps the scheduler's continuation */
    const void *stack_lo; /* the stack it runs on (sanitizer annotations, overflow notes) */
    size_t stack_size;
    uint3 idx;
    ts state;
    bool handled;
    int kind;        /* what it waits at */
    unsigned mask;   /* warp collectives: the named lanes */
    int b, c;        /* shuffle operands */
    uint64_t value;  /* what it contributes */
    uint64_t result; /* what it gets back */
    wait_desc wait;  /* blocked, yielded: what for */
};

/* Thrown into a waiting thread to unwind it when a launch is abandoned after a fault with
 * SLUICE_EMU_FATAL=0. */
struct abandon_launch {};

/* ---- fiber stacks: mmap'ed once with a guard page below, then reused ---------------------- */

class stack_pool {
  public:
    bc::stack_context allocate() {
        bc::stack_context sc;
        if (!free_.empty()) {
            sc = free_.back();
            free_.pop_back();
        } else {
            const size_t page = (size_t)sysconf(_SC_PAGESIZE);
            const size_t size = (cfg().stack_bytes + page - 1) / page * page;
            char *base = (char *)mmap(nullptr, size + page, PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (base == MAP_FAILED) throw std::bad_alloc();
            /* A stack overflow faults on this page instead of corrupting the next stack. */
            mprotect(base, page, PROT_NONE);
            sc.size = size;
            sc.sp = base + page + size;
            created_++;
        }
#if SL_EMU_ASAN
        /* A reused stack may carry poisoned frames of a fiber that ended by a jump. */
        ASAN_UNPOISON_MEMORY_REGION((char *)sc.sp - sc.size, sc.size);
#endif
        return sc;
    }
    void deallocate(bc::stack_context &sc) noexcept {
        free_.push_back(sc);
    }
    size_t created() const {
        return created_;
    }

  private:
    std::vector<bc::stack_context> free_;
    size_t created_ = 0;
};

stack_pool g_stacks;
bc::stack_context g_new_stack; /* the stack of the fiber created last */

struct pool_alloc {
    bc::stack_context allocate() {
        g_new_stack = g_stacks.allocate();
        return g_new_stack;
    }
    void deallocate(bc::stack_context &sc) noexcept { g_stacks.deallocate(sc); }
};

/* ---- per-kernel statistics (SLUICE_EMU_STATS=1) ------------------------------------------ */

struct kstat {
    uint64_t launches = 0, blocks = 0, threads = 0, resumes = 0, fibers = 0, barriers = 0,
             collectives = 0;
    double seconds = 0, check_seconds = 0;
};
std::map<std::string, kstat> *g_stats;

void print_stats() {
    if (!g_stats) return;
    fprintf(stderr, "sluice emu statistics (per kernel; resumes = fiber switch round trips):\n");
    fprintf(stderr, "%-44s %8s %10s %12s %12s %10s %10s %10s\n", "kernel", "launches", "blocks",
            "threads", "resumes", "fibers", "ms", "check ms");
    for (const auto &kv : *g_stats) {
        const kstat &s = kv.second;
        fprintf(stderr, "%-44s %8llu %10llu %12llu %12llu %10llu %10.1f %10.1f\n", kv.first.c_str(),
                (unsigned long long)s.launches, (unsigned long long)s.blocks,
                (unsigned long long)s.threads, (unsigned long long)s.resumes,
                (unsigned long long)s.fibers, s.seconds * 1e3, s.check_seconds * 1e3);
    }
    fprintf(stderr, "fiber stacks created: %zu of %zu bytes\n", g_stacks.created(),
            cfg().stack_bytes);
}

/* ---- the state of the running launch -------------------------------------------------------- */

const launch_desc *g_desc; /* null outside a launch */
std::vector<thread_rec> g_threads;
unsigned g_nthreads;
std::vector<unsigned> g_pass; /* the current pass: thread indices in resumption order */
size_t g_pass_pos;
thread_rec *g_cur; /* the running thread */
unsigned g_exited;
int g_order;           /* 0 forward, 1 reverse, >= 2 shuffled */
std::mt19937_64 g_rng; /* shuffled orders */
uint64_t g_launch_serial;
uint64_t g_events;      /* things that happened (note_progress), for spinning threads */
uint64_t g_events_seen; /* g_events at the end of the last resolve() */
bool g_failed;          /* a fault with SLUICE_EMU_FATAL=0: the launch is being abandoned */
bool g_abandon;         /* waiting threads are resumed only to unwind */
kstat *g_kstat;

const void *g_sched_lo; /* the scheduler's (the launching thread's) stack, for ASan */
size_t g_sched_size;

/* The dynamic shared memory buffer: the largest opt-in size plus a guard zone. */
constexpr size_t k_smem_max = 232448; /* 227 KiB */
unsigned char *g_smem;
size_t g_smem_size; /* this launch's */

inline void asan_start(void **fake, const void *lo, size_t size) {
#if SL_EMU_ASAN
    __sanitizer_start_switch_fiber(fake, lo, size);
#else
    (void)fake, (void)lo, (void)size;
#endif
}
inline void asan_finish(void *fake, const void **lo, size_t *size) {
#if SL_EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, lo, size);
#else
    (void)fake, (void)lo, (void)size;
#endif
}

const char *order_name(int order, char *buf, size_t len) {
    if (order == 0) return "forward";
    if (order == 1) return "reverse";
    snprintf(buf, len, "shuffled #%d (SLUICE_EMU_SEED=%llu)", order - 1,
             (unsigned long long)cfg().seed);
    return buf;
}

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

/* Formats "kernel 'k' <<<grid, block, smem>>> [order], block (..), thread (..): msg" and hands
 * it to fault(). Returns false (non-fatal mode) after marking the launch failed. */
bool launch_fault(const thread_rec *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
bool launch_fault(const thread_rec *t, const char *fmt, ...) {
    char msg[4096], ctx[512], ob[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const launch_desc &d = *g_desc;
    int n = snprintf(ctx, sizeof ctx, "kernel '%s' <<<(%u,%u,%u), (%u,%u,%u), %zu>>> (%s order)",
                     d.name, d.grid.x, d.grid.y, d.grid.z, d.block.x, d.block.y, d.block.z, d.smem,
                     order_name(g_order, ob, sizeof ob));
    if (t) {
        const unsigned lin = (unsigned)(t - g_threads.data());
        snprintf(ctx + n, sizeof ctx - n, ", block (%u,%u,%u), thread (%u,%u,%u) [warp %u lane %u]",
                 blockIdx.x, blockIdx.y, blockIdx.z, t->idx.x, t->idx.y, t->idx.z, lin / 32,
                 lin % 32);
    }
    char full[4700];
    snprintf(full, sizeof full, "%s: %s", ctx, msg);
    fault(cudaErrorLaunchFailure, full);
    g_failed = true;
    return false;
}

void enter(thread_rec *t) {
    g_cur = t;
    threadIdx = t->idx;
}

/* Switches from the scheduler into fiber f (which runs on the given stack) until it waits or
 * its worker ends; returns its continuation (empty when it ended). */
bc::fiber switch_to(bc::fiber &&f, const void *lo, size_t size) {
    void *fake = nullptr;
    asan_start(&fake, lo, size);
    bc::fiber r = std::move(f).resume();
    asan_finish(fake, nullptr, nullptr);
    return r;
}

/* A worker fiber: runs the thread the scheduler started it for, and when that one exits
 * without having waited, the next unstarted threads of the pass (see the file comment). */
bc::fiber worker_main(bc::fiber &&sink) {
    asan_finish(nullptr, &g_sched_lo, &g_sched_size);
    bc::fiber s = std::move(sink);
    const bc::stack_context mine = g_new_stack;
    thread_rec *t = g_cur;
    for (;;) {
        t->sink = &s;
        t->stack_lo = (const char *)mine.sp - mine.size;
        t->stack_size = mine.size;
        t->state = ts::running;
        try {
            g_desc->invoke(g_desc->closure);
            /* Asynchronous work the thread leaves in flight (wgmma, TMA stores) is a fault. */
            sm90_thread_exit((unsigned)(t - g_threads.data()));
        } catch (abandon_launch &) {
        }
        t->state = ts::exited;
        g_exited++;
        g_events++;
        if (g_failed || g_pass_pos >= g_pass.size()) break;
        thread_rec *next = &g_threads[g_pass[g_pass_pos]];
        if (next->state != ts::unstarted) break;
        g_pass_pos++;
        t = next;
        enter(t);
    }
    asan_start(nullptr, g_sched_lo, g_sched_size);
    return s;
}

/* From a thread: back to the scheduler until its wait completes. */
void suspend(thread_rec *t) {
    void *fake = nullptr;
    asan_start(&fake, g_sched_lo, g_sched_size);
    *t->sink = std::move(*t->sink).resume();
    asan_finish(fake, nullptr, nullptr);
    if (g_abandon) throw abandon_launch();
}

thread_rec *current(const char *what) {
    if (!g_cur || !g_desc || g_cur->state != ts::running) {
        fprintf(stderr, "sluice emu: %s called outside a kernel\n", what);
        abort();
    }
    return g_cur;
}

/* Orders the runnable threads (indices ascending in g_pass) for the next pass. */
void order_pass() {
    if (g_order == 1)
        std::reverse(g_pass.begin(), g_pass.end());
    else if (g_order >= 2)
        std::shuffle(g_pass.begin(), g_pass.end(), g_rng);
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

/* After a fault in non-fatal mode: unwinds every waiting thread. */
void abandon_block() {
    g_abandon = true;
    for (unsigned i = 0; i < g_nthreads; i++) {
        thread_rec *t = &g_threads[i];
        if (!t->fib) continue;
        enter(t);
        t->state = ts::running;
        bc::fiber f = switch_to(std::move(t->fib), t->stack_lo, t->stack_size);
        if (f) g_cur->fib = std::move(f); /* cannot happen: the worker ends */
    }
    g_abandon = false;
}

void run_block(uint64_t b) {
    const launch_desc &d = *g_desc;
    blockIdx.x = (unsigned)(b % d.grid.x);
    blockIdx.y = (unsigned)(b / d.grid.x % d.grid.y);
    blockIdx.z = (unsigned)(b / ((uint64_t)d.grid.x * d.grid.y));
    /* Dynamic shared memory starts as NaN in every block: a read before any write shows. */
    if (g_smem_size) memset(g_smem, 0xff, g_smem_size);
    ptx_block_start(g_nthreads);
    sm90_block_start(g_nthreads);
    for (unsigned i = 0; i < g_nthreads; i++) g_threads[i].state = ts::unstarted;
    g_exited = 0;
    g_pass.resize(g_nthreads);
    for (unsigned i = 0; i < g_nthreads; i++) g_pass[i] = i;
    order_pass();
    for (;;) {
        g_pass_pos = 0;
        while (g_pass_pos < g_pass.size()) {
            thread_rec *t = &g_threads[g_pass[g_pass_pos++]];
            enter(t);
            bc::fiber f;
            if (t->state == ts::unstarted) {
                f = bc::fiber(std::allocator_arg, pool_alloc(), worker_main);
                g_kstat->fibers++;
                f = switch_to(std::move(f), (const char *)g_new_stack.sp - g_new_stack.size,
                              g_new_stack.size);
            } else {
                t->state = ts::running;
                f = switch_to(std::move(t->fib), t->stack_lo, t->stack_size);
            }
            g_kstat->resumes++;
            if (f) g_cur->fib = std::move(f);
            if (g_failed) {
                abandon_block();
                return;
            }
        }
        if (g_exited == g_nthreads) break;
        if (!resolve()) {
            abandon_block();
            return;
        }
    }
    g_cur = nullptr;
    sm90_block_end();
    if (g_failed) return;
#if !SL_EMU_ASAN
    for (size_t i = 0; i < k_guard; i++)
        if (g_smem[g_smem_size + i] != k_guard_byte) {
            launch_fault(nullptr,
                         "block (%u,%u,%u) wrote past the end of its %zu bytes of dynamic "
                         "shared memory (at byte offset %zu)",
                         blockIdx.x, blockIdx.y, blockIdx.z, g_smem_size, g_smem_size + i);
            return;
        }
#endif
}

/* Kernels declared with sl_emu_blocks_in_order. */
std::set<const void *> &in_order_kernels() {
    static std::set<const void *> k;
    return k;
}

void run_grid(int order) {
    const launch_desc &d = *g_desc;
    g_order = order;
    g_rng.seed(cfg().seed * 0x9e3779b97f4a7c15ull + g_launch_serial * 1000003u + (uint64_t)order);
    const uint64_t nblocks = (uint64_t)d.grid.x * d.grid.y * d.grid.z;
    if (in_order_kernels().count(d.kernel)) { /* only the threads within a block are permuted */
        for (uint64_t i = 0; i < nblocks && !g_failed; i++) run_block(i);
    } else if (order >= 2) {
        std::vector<uint64_t> perm(nblocks);
        for (uint64_t b = 0; b < nblocks; b++) perm[b] = b;
        std::shuffle(perm.begin(), perm.end(), g_rng);
        for (uint64_t b = 0; b < nblocks && !g_failed; b++) run_block(perm[b]);
    } else {
        for (uint64_t i = 0; i < nblocks && !g_failed; i++)
            run_block(order == 1 ? nblocks - 1 - i : i);
    }
    g_kstat->blocks += nblocks;
    g_kstat->threads += nblocks * g_nthreads;
}

/* ---- the race check ------------------------------------------------------------------------- */

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

#if !SL_EMU_ASAN
/* A fiber stack overflow lands on the guard page: say so instead of a bare segfault. */
void on_segv(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    const thread_rec *t = g_cur;
    if (g_desc && t && t->stack_lo) {
        const char *a = (const char *)si->si_addr, *lo = (const char *)t->stack_lo;
        if (a < lo && a >= lo - sysconf(_SC_PAGESIZE)) {
            char buf[512];
            int n = snprintf(buf, sizeof buf,
                             "sluice emu: kernel '%s': thread (%u,%u,%u) of block (%u,%u,%u) "
                             "overflowed its %zu-byte fiber stack; raise SLUICE_EMU_STACK\n",
                             g_desc->name, t->idx.x, t->idx.y, t->idx.z, blockIdx.x, blockIdx.y,
                             blockIdx.z, t->stack_size);
            if (write(2, buf, (size_t)n) < 0) {
            }
        }
    }
    signal(sig, SIG_DFL); /* returning re-runs the access, which now kills the process */
}

#endif

/* Under ASan its own handler reports stack overflows. */
void install_segv_note() {
#if !SL_EMU_ASAN
    static bool done = false;
    if (done) return;
    done = true;
    static char altstack[65536];
    stack_t ss;
    ss.ss_sp = altstack;
    ss.ss_size = sizeof altstack;
    ss.ss_flags = 0;
    sigaltstack(&ss, nullptr);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, nullptr);
#endif
}

/* Rejects a launch the way CUDA does: the error goes to cudaGetLastError, nothing runs. */
bool valid_config(const launch_desc &d) {
    const uint64_t threads = (uint64_t)d.block.x * d.block.y * d.block.z;
    cudaError_t e = cudaSuccess;
    char why[256] = "";
    if (!d.block.x || !d.block.y || !d.block.z || threads > 1024 || d.block.x > 1024 ||
        d.block.y > 1024 || d.block.z > 64) {
        e = cudaErrorInvalidConfiguration;
        snprintf(why, sizeof why,
                 "block (%u,%u,%u): at most 1024 threads, (1024, 1024, 64) per dimension, none 0",
                 d.block.x, d.block.y, d.block.z);
    } else if (!d.grid.x || !d.grid.y || !d.grid.z || d.grid.x > 2147483647u || d.grid.y > 65535 ||
               d.grid.z > 65535) {
        e = cudaErrorInvalidConfiguration;
        snprintf(why, sizeof why,
                 "grid (%u,%u,%u): x at most 2^31-1, y and z at most 65535, none 0", d.grid.x,
                 d.grid.y, d.grid.z);
    } else if (d.smem > dynamic_smem_limit(d.kernel)) {
        e = cudaErrorInvalidValue;
        snprintf(why, sizeof why,
                 "%zu bytes of dynamic shared memory, above this kernel's limit of %zu (48 KiB "
                 "unless raised with cudaFuncSetAttribute(kernel, "
                 "cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), at most 227 KiB)",
                 d.smem, dynamic_smem_limit(d.kernel));
    }
    if (e == cudaSuccess) return true;
    fprintf(stderr, "sluice emu: launch of kernel '%s' rejected (%s): %s\n", d.name,
            cudaGetErrorName(e), why);
    set_last_error(e);
    return false;
}

} // namespace

void launch(const launch_desc &d) {
    std::lock_guard<std::recursive_mutex> lock(big_lock());
    if (cudaError_t e = sticky_error()) {
        set_last_error(e);
        return;
    }
    if (g_desc) {
        fprintf(stderr,
                "sluice emu: kernel '%s' launched from inside kernel '%s' (dynamic "
                "parallelism is not emulated)\n",
                d.name, g_desc->name);
        abort();
    }
    if (!valid_config(d)) return;
    if (!valid_stream(d.stream)) {
        set_last_error(cudaErrorInvalidResourceHandle);
        return;
    }
    if (!g_stats) {
        g_stats = new std::map<std::string, kstat>();
        if (cfg().stats) atexit(print_stats);
        install_segv_note();
        /* 1024-byte aligned, as `extern __shared__ __align__(1024)` is on the GPU: the swizzle
         * patterns of TMA and wgmma repeat every 1024 bytes of the shared address. */
        g_smem = (unsigned char *)aligned_alloc(1024, k_smem_max + 1024);
    }
    const auto t0 = std::chrono::steady_clock::now();
    g_kstat = &(*g_stats)[d.name];
    g_kstat->launches++;
    g_desc = &d;
    g_launch_serial++;
    g_failed = false;
    g_nthreads = d.block.x * d.block.y * d.block.z;
    if (g_threads.size() < g_nthreads) g_threads.resize(g_nthreads);
    for (unsigned i = 0; i < g_nthreads; i++) {
        thread_rec &t = g_threads[i];
        t.idx.x = i % d.block.x;
        t.idx.y = i / d.block.x % d.block.y;
        t.idx.z = i / (d.block.x * d.block.y);
        t.stack_lo = nullptr;
    }
    blockDim = d.block;
    gridDim = d.grid;
    g_smem_size = d.smem;
    memset(g_smem + d.smem, k_guard_byte, k_guard);
#if SL_EMU_ASAN
    /* Under ASan the bytes past the launch's dynamic shared memory are unaddressable. */
    unpoison(g_smem, k_smem_max + 128);
    poison(g_smem + d.smem, k_smem_max + 128 - d.smem);
#endif
    double check = 0;
    if (cfg().racecheck) {
        checked_run(d);
        check = 1;
    } else {
        run_grid(0);
    }
    g_desc = nullptr;
    g_cur = nullptr;
#if SL_EMU_ASAN
    unpoison(g_smem, k_smem_max + 128);
#endif
    if (!g_failed) {
        char who[300];
        snprintf(who, sizeof who, "kernel '%s' <<<(%u,%u,%u), (%u,%u,%u), %zu>>>", d.name, d.grid.x,
                 d.grid.y, d.grid.z, d.block.x, d.block.y, d.block.z, d.smem);
        check_guards(who);
    }
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    g_kstat->seconds += sec;
    if (check) g_kstat->check_seconds += sec;
}

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

unsigned current_thread(const char *what) {
    return (unsigned)(current(what) - g_threads.data());
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

unsigned block_threads() {
    return g_nthreads;
}

bool thread_exited(unsigned thread) {
    return g_threads[thread].state == ts::exited;
}

void current_stack(const char **lo, size_t *size) {
    const thread_rec *t = current("current_stack");
    *lo = (const char *)t->stack_lo;
    *size = t->stack_size;
}

void block_fault(const char *fmt, ...) {
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    launch_fault(nullptr, "block (%u,%u,%u): %s", blockIdx.x, blockIdx.y, blockIdx.z, msg);
}

unsigned char *smem_base() {
    return g_smem;
}

size_t smem_size() {
    return g_smem_size;
}

void device_fault(const char *what) {
    thread_rec *t = current(what);
    launch_fault(t, "%s", what);
    throw abandon_launch();
}

} // namespace sl_emu

void sl_emu_blocks_in_order(const void *kernel) {
    sl_emu::in_order_kernels().insert(kernel);
}

void *sl_emu_dynamic_smem() {
    sl_emu::current("sl_emu_dynamic_smem (SL_DYNAMIC_SMEM)");
    return sl_emu::g_smem;
}
