/*
 * emu/src/internal.h - state shared by the emulator's runtime (runtime*.cc) and its SIMT
 * scheduler (simt*.cc): the registry of allocations, configuration from the environment,
 * error state, sanitizer hooks.
 */
#ifndef SL_EMU_INTERNAL_H
#define SL_EMU_INTERNAL_H

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include <cuda_runtime_api.h>

#if defined(__SANITIZE_ADDRESS__)
#define SL_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SL_EMU_ASAN 1
#endif
#endif
#ifndef SL_EMU_ASAN
#define SL_EMU_ASAN 0
#endif

namespace sl_emu {

/* SLUICE_EMU_DEVICES is clamped to this (a node's GPU count, with room). */
constexpr int k_max_devices = 64;

/* ---- configuration (environment, read once; emu/README.md lists the variables) ---- */
struct config {
    bool racecheck;     /* SLUICE_EMU_RACECHECK (default 1) */
    int orders;         /* SLUICE_EMU_ORDERS: thread orders per launch when checking (>= 2) */
    uint64_t seed;      /* SLUICE_EMU_SEED: seed of the shuffled orders (order 3 onwards) */
    bool fatal;         /* SLUICE_EMU_FATAL (default 1): a fault aborts the process */
    size_t stack_bytes; /* SLUICE_EMU_STACK: fiber stack size */
    size_t mem_limit;   /* SLUICE_EMU_MEM_LIMIT: device memory the emulated GPU has */
    int devices;        /* SLUICE_EMU_DEVICES: emulated devices (0: a machine without a GPU) */
    bool stats;         /* SLUICE_EMU_STATS: per-kernel statistics on stderr at exit */
    int sms;            /* SLUICE_EMU_SMS: the multiprocessor count the devices report */
};
const config &cfg();

/* One big lock: the emulator runs one launch or runtime call at a time. Recursive because a
 * host function (cudaLaunchHostFunc) may call the runtime again. */
std::recursive_mutex &big_lock();

/* ---- allocations ---- */
enum alloc_kind : int { k_device, k_pinned, k_registered };
struct allocation {
    char *raw;   /* what was allocated (guards included); null for registered host memory */
    char *user;  /* what the program sees */
    size_t size; /* the program's size */
    alloc_kind kind;
    uint64_t serial; /* n-th allocation of this process: names it in messages */
};
/* Guard zones: bytes before and after each allocation, filled with k_guard_byte. */
constexpr size_t k_guard = 64;
constexpr unsigned char k_guard_byte = 0xfd;
constexpr size_t k_front = 256; /* keeps the user pointer 256-byte aligned, like cudaMalloc */

/* Allocations by user address. */
std::map<uintptr_t, allocation> &allocations();
/* The allocation containing [p, p + n), or null. */
const allocation *find_allocation(const void *p, size_t n);
/* Checks every allocation's guard zones; reports the first damaged one as written by `who`
 * (a kernel name or an API function) and returns false. */
bool check_guards(const char *who);
bool check_guard(const allocation &a, const char *who);
/* Printable description of an allocation ("device allocation #12 of 4096 bytes at 0x...") */
void describe(const allocation &a, char *buf, size_t len);

/* Whether the runtime knows stream s (a message names it when not; runtime.cc). */
bool valid_stream(cudaStream_t s);

/* ---- errors ---- */
void set_last_error(cudaError_t e);
cudaError_t sticky_error();
void set_sticky_error(cudaError_t e);
/* A fault found by the emulator (race, out-of-bounds write, divergent barrier, ...): prints
 * the message and aborts, or, with SLUICE_EMU_FATAL=0, makes `e` the sticky error. */
void fault(cudaError_t e, const char *msg);

/* The largest dynamic shared memory a kernel may use (cudaFuncSetAttribute). */
size_t dynamic_smem_limit(const void *kernel);

/* ---- the scheduler and core/ptx.cuh's instructions (emu/src/ptx.cc) ---- */
/* The running thread's linear index in its block; aborts naming `what` outside a kernel. */
unsigned current_thread(const char *what);
/* Completes a warp-wide instruction (w_mma_bf16_16816, w_ldmatrix_*): lanes[j] is what lane
 * j passed to warp_op. */
void complete_ptx(int kind, void *const lanes[32]);
/* A block starts: no thread has copies in flight. */
void ptx_block_start(unsigned nthreads);

/* ---- blocking waits (simt_sync.cc, simt.cc), for the Hopper instructions (sm90*.cc) ---- */
/* What a blocked thread waits for: the deadlock report asks describe_wait() to say it. */
enum wait_kind : int { wk_mbarrier, wk_named_barrier, wk_wgmma, wk_setmaxnreg };
struct wait_desc {
    int kind;
    const void *obj; /* the mbarrier, the named barrier's state, the wgmma operation, the
                      * warpgroup's registers */
    uint32_t a, b;   /* kind-specific: parity, id and count, ... */
    const char *file;
    int line;
};
/* The running thread waits until another thread (or the scheduler, between passes) calls
 * wake() with its index; returns then. A wait nothing can end is reported as a deadlock. */
void block_current(const wait_desc &w);
/* The running thread gives way and runs again in the next pass (a spin on
 * mbarrier.test_wait): without progress elsewhere, spinning threads are reported as stuck. */
void yield_current(const wait_desc &w);
void wake(unsigned thread);
/* Something happened that a spinning thread may be waiting for; the count of such events. */
void note_progress();
uint64_t progress_events();
unsigned block_threads();
bool thread_exited(unsigned thread);
/* The running thread's fiber stack (lo, size), for liveness checks of register operands. */
void current_stack(const char **lo, size_t *size);
/* A fault not tied to the running thread (block-end checks): formats like device_fault. */
void block_fault(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The dynamic shared memory of the running block and its size. */
unsigned char *smem_base();
size_t smem_size();

/* Hooks of the Hopper instructions (sm90_sync.cc), called by the scheduler. */
void sm90_block_start(unsigned nthreads);
/* The running thread returns from the kernel: pending asynchronous work is a fault. */
void sm90_thread_exit(unsigned thread);
/* All threads exited: work still in flight is a fault. */
void sm90_block_end();
/* Between passes when nothing else can move: performs deferred asynchronous copies that
 * blocked threads wait for; returns whether it woke a thread. */
bool sm90_idle();
/* One line saying what a blocked thread waits for (deadlock reports). */
void describe_wait(const wait_desc &w, char *buf, size_t len);

/* ---- sanitizer hooks ---- */
void poison(const void *p, size_t n);
void unpoison(const void *p, size_t n);

} // namespace sl_emu

#endif
