/*
 * emu/src/simt.h - the state of the running launch, shared by the files of the SIMT scheduler
 * (emu/README.md): simt.cc (launches, blocks, threads as fibers), simt_sync.cc (scheduling
 * points: the block barrier, warp collectives, blocking waits, and what completes them between
 * passes) and simt_racecheck.cc (the race check). Everything here is in sl_emu::simt, which
 * nothing outside these three files sees.
 */
#ifndef SL_EMU_SIMT_H
#define SL_EMU_SIMT_H

#include <cstddef>
#include <cstdint>
#include <vector>

#include <boost/context/fiber.hpp>

#include "internal.h"
#include "sl_emu.h"

namespace sl_emu {
namespace bc = boost::context;

namespace simt {

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

/* Per-kernel statistics (SLUICE_EMU_STATS=1; simt.cc prints them at exit). */
struct kstat {
    uint64_t launches = 0, blocks = 0, threads = 0, resumes = 0, fibers = 0, barriers = 0,
             collectives = 0;
    double seconds = 0, check_seconds = 0;
};

/* ---- the state of the running launch (defined in simt.cc) ---- */
extern const launch_desc *g_desc; /* null outside a launch */
extern std::vector<thread_rec> g_threads;
extern unsigned g_nthreads;
extern std::vector<unsigned> g_pass; /* the current pass: thread indices in resumption order */
extern uint64_t g_events; /* things that happened (note_progress), for spinning threads */
extern bool g_failed;     /* a fault with SLUICE_EMU_FATAL=0: the launch is being abandoned */
extern kstat *g_kstat;

/* ---- simt.cc ---- */
/* The name of thread order `order` ("forward", "reverse", "shuffled #n ..."), in buf if needed. */
const char *order_name(int order, char *buf, size_t len);
/* Formats "kernel 'k' <<<grid, block, smem>>> [order], block (..), thread (..): msg" and hands
 * it to fault(). Returns false (non-fatal mode) after marking the launch failed. */
bool launch_fault(const thread_rec *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* From a thread: back to the scheduler until its wait completes. */
void suspend(thread_rec *t);
/* The running thread; aborts naming `what` when called outside a kernel. */
thread_rec *current(const char *what);
/* Orders the runnable threads (indices ascending in g_pass) for the next pass. */
void order_pass();
/* Runs every block of the launch under thread order `order` (0 forward, 1 reverse, >= 2
 * shuffled). */
void run_grid(int order);

/* ---- simt_sync.cc ---- */
/* Between passes: completes warp collectives and the barrier, or reports why nothing can
 * complete; fills g_pass with the next pass. Returns false after a fault (non-fatal mode). */
bool resolve();

/* ---- simt_racecheck.cc ---- */
/* Runs the launch under every thread order of the race check from the same device memory and
 * compares the results (a difference is a fault). */
void checked_run(const launch_desc &d);

} // namespace simt
} // namespace sl_emu

#endif
