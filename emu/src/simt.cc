/*
 * emu/src/simt.cc - the SIMT scheduler of the CPU test double: launches, blocks, threads as
 * fibers (emu/README.md). Its siblings share the running launch's state through simt.h:
 * simt_sync.cc (barriers, warp collectives, blocking waits) and simt_racecheck.cc (the race
 * check).
 *
 * A launch runs its blocks one after another. A block's threads run as Boost.Context fibers
 * on the calling OS thread, in passes: a pass resumes every runnable thread once, in the
 * pass's order, and each runs until it reaches a scheduling point (__syncthreads, __syncwarp,
 * a warp collective) or exits. Between passes the scheduler completes what can complete
 * (resolve, simt_sync.cc).
 *
 * Cheap common case: a thread that runs to its end without blocking hands its fiber (and
 * stack) to the next unstarted thread of the pass, so a kernel without scheduling points costs
 * one fiber per block; a thread that blocks keeps its fiber and the next thread gets a new one
 * (stacks come from a pool).
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
#include "simt.h"

#if SL_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

uint3 threadIdx;
uint3 blockIdx;
dim3 blockDim;
dim3 gridDim;

namespace sl_emu {
using namespace simt;

namespace {

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

} // namespace

/* ---- the state of the running launch: shared with the siblings (simt.h) ------------------- */

namespace simt {

const launch_desc *g_desc; /* null outside a launch */
std::vector<thread_rec> g_threads;
unsigned g_nthreads;
std::vector<unsigned> g_pass; /* the current pass: thread indices in resumption order */
uint64_t g_events;            /* things that happened (note_progress), for spinning threads */
bool g_failed;                /* a fault with SLUICE_EMU_FATAL=0: the launch is being abandoned */
kstat *g_kstat;

} // namespace simt

namespace {

/* The rest of it, used in this file only. */
size_t g_pass_pos;
thread_rec *g_cur; /* the running thread */
unsigned g_exited;
int g_order;           /* 0 forward, 1 reverse, >= 2 shuffled */
std::mt19937_64 g_rng; /* shuffled orders */
uint64_t g_launch_serial;
bool g_abandon; /* waiting threads are resumed only to unwind */

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

/* ---- shared with simt_sync.cc and simt_racecheck.cc (simt.h) ------------------------------ */

namespace simt {

const char *order_name(int order, char *buf, size_t len) {
    if (order == 0) return "forward";
    if (order == 1) return "reverse";
    snprintf(buf, len, "shuffled #%d (SLUICE_EMU_SEED=%llu)", order - 1,
             (unsigned long long)cfg().seed);
    return buf;
}

/* Formats "kernel 'k' <<<grid, block, smem>>> [order], block (..), thread (..): msg" and hands
 * it to fault(). Returns false (non-fatal mode) after marking the launch failed. */
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

} // namespace simt

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

unsigned current_thread(const char *what) {
    return (unsigned)(current(what) - g_threads.data());
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
