/*
 * emu/src/sm90_sync.cc - the emulated Hopper synchronization instructions of
 * core/ptx_sm90.cuh (emu/README.md, "Hopper instructions"): mbarriers (init, arrive,
 * expect-tx, complete-tx by TMA loads, try_wait / test_wait with phase parity), named barriers
 * (bar.sync / bar.arrive id, count), fence.proxy.async and fence.mbarrier_init, setmaxnreg;
 * and the scheduler's hooks for all Hopper state (block start and end, thread exit, idle,
 * deadlock descriptions).
 *
 * An mbarrier's 8 bytes of shared memory hold a token (a magic, the block's generation and an
 * index into this block's table): an mbarrier used before mbarrier.init, overwritten by a
 * store, or left over from another block is found instead of read as garbage. Waiting blocks
 * the fiber (block_current) until the phase completes. A TMA load issued on an mbarrier is
 * performed only when a thread needs the phase (a wait on it, or nothing else can move), so a
 * thread reading the tile without waiting reads the 0xff bytes its issue left there.
 */
#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "internal.h"
#include "sl_emu.h"
#include "sm90.h"

namespace sl_emu {

using sm90::faultf;

namespace {

constexpr uint64_t k_mbar_magic = 0x4d42; /* the token's top 16 bits */
constexpr uint32_t k_max_count = (1u << 20) - 1;

struct waiter {
    unsigned thread;
    uint32_t parity;
};

struct mbarrier {
    uint64_t *addr;
    uint32_t expected, pending; /* arrival count per phase, arrivals still missing */
    int64_t tx;                 /* transaction bytes still expected in this phase */
    uint32_t phase;             /* phases completed */
    uint64_t init_fences;       /* g_init_fences when it was initialized */
    const char *file;
    int line;
    bool valid;
    std::vector<waiter> waiters; /* blocked in try_wait */
    std::vector<sm90::tma_load> loads;
};

struct named_bar {
    int count;     /* threads of the current generation (0: none arrived yet) */
    int arrived;   /* threads arrived */
    int warps[32]; /* arrivals per warp */
    std::vector<unsigned> waiters;
};

std::deque<mbarrier> g_bars; /* this block's, by token index */
uint16_t g_generation;       /* of the block, in tokens */
named_bar g_named[16];
uint64_t g_proxy_fences, g_init_fences;
std::vector<unsigned char> g_shadow; /* dynamic shared memory as the async proxy saw it */
std::vector<uint64_t> g_chunk_fences;
std::vector<std::vector<int>> g_maxnreg; /* per thread: setmaxnreg counts, negative = dec */
/* setmaxnreg's register pool (emu/README.md, "Hopper instructions"): each warpgroup holds the
 * block's launch registers per thread until its setmaxnreg; a .dec returns registers to the
 * block's pool, an .inc takes them from there only, and waits until they are there. */
struct wg_regs {
    int regs;                      /* per thread, now */
    size_t applied;                /* setmaxnreg instructions the warpgroup has performed */
    int pending;                   /* the count of an .inc that waits for registers, or 0 */
    std::vector<unsigned> waiters; /* its threads blocked at that .inc */
};
std::vector<wg_regs> g_wg_regs;
int64_t g_reg_pool; /* registers released by .dec and not yet taken */
int g_launch_regs;  /* per thread at launch */
/* Per thread: the last test_wait that returned false, to tell a probe from a spin. */
struct spin_rec {
    const uint64_t *bar;
    uint32_t parity;
    uint64_t events;
};
std::vector<spin_rec> g_spin;
unsigned g_nthreads;

mbarrier *lookup(uint64_t *bar, const char *who) {
    current_thread(who);
    if ((uintptr_t)bar % 8) faultf("%s: the mbarrier address %p is not 8-byte aligned", who, bar);
    uint64_t tok;
    memcpy(&tok, bar, 8);
    const uint64_t idx = tok & 0xffffffffu;
    if ((tok >> 48) != k_mbar_magic || (uint16_t)(tok >> 32) != g_generation ||
        idx >= g_bars.size() || g_bars[idx].addr != bar || !g_bars[idx].valid)
        faultf("%s: %p is not an initialized mbarrier of this block (not initialized by "
               "mbarrier.init, invalidated, or overwritten by a store since)",
               who, (void *)bar);
    return &g_bars[idx];
}

/* Where an mbarrier lives, for messages. */
std::string where(const mbarrier &b) {
    char s[300];
    const unsigned char *p = (const unsigned char *)b.addr;
    if (p >= smem_base() && p < smem_base() + smem_size())
        snprintf(s, sizeof s, "the mbarrier at dynamic shared memory offset %zu",
                 (size_t)(p - smem_base()));
    else
        snprintf(s, sizeof s, "the mbarrier at %p", (const void *)p);
    std::string r = s;
    snprintf(s, sizeof s, " (initialized at %s:%d with arrival count %u)", b.file, b.line,
             b.expected);
    return r + s;
}

/* Completes the current phase when nothing is missing; wakes the waiters it releases (a
 * waiter of parity P is released once the current phase's parity differs from P). */
void try_complete(mbarrier &b) {
    if (b.pending != 0 || b.tx != 0) return;
    b.phase++;
    b.pending = b.expected;
    size_t keep = 0;
    for (const waiter &w : b.waiters) {
        if ((b.phase & 1) != w.parity)
            wake(w.thread);
        else
            b.waiters[keep++] = w;
    }
    b.waiters.resize(keep);
    note_progress();
}

void complete_tx(mbarrier &b, size_t bytes) {
    b.tx -= (int64_t)bytes;
    if (b.tx < -(int64_t)k_max_count)
        faultf("complete_tx of %zu bytes leaves %s with a transaction count of %lld, below "
               "-(2^20 - 1) (more bytes arrived than any expect_tx announced)",
               bytes, where(b).c_str(), (long long)b.tx);
    try_complete(b);
}

/* Performs the TMA loads issued on b (they complete their bytes). */
bool perform_loads(mbarrier &b) {
    if (b.loads.empty()) return false;
    std::vector<sm90::tma_load> loads;
    loads.swap(b.loads);
    for (const sm90::tma_load &l : loads) {
        sm90::perform_load(l);
        complete_tx(b, sm90::box_bytes(l.map));
    }
    return true;
}

void check_count(int id, int count, const char *who) {
    if (id < 1 || id > 15)
        faultf("%s %d, %d: the barrier id must be in 1..15 (0 is __syncthreads()'s barrier)", who,
               id, count);
    if (count < 32 || count % 32 || (unsigned)count > (g_nthreads + 31) / 32 * 32)
        faultf("%s %d, %d: the thread count must be a multiple of 32 (the warp size), at least "
               "32 and at most the block's %u threads",
               who, id, count, g_nthreads);
}

/* Warp w of the block has this many threads. */
int warp_threads(unsigned w) {
    return (int)std::min(32u, g_nthreads - 32 * w);
}

} // namespace

/* ---- mbarrier ---------------------------------------------------------------------------- */

void mbar_init(uint64_t *bar, uint32_t count, const char *file, int line) {
    current_thread("mbarrier.init");
    if ((uintptr_t)bar % 8)
        faultf("mbarrier.init: the mbarrier address %p is not 8-byte aligned", (void *)bar);
    if (find_allocation(bar, 8))
        faultf("mbarrier.init: %p is global memory; an mbarrier lives in shared memory",
               (void *)bar);
    if (count < 1 || count > k_max_count)
        faultf("mbarrier.init at %s:%d: arrival count %u outside 1..2^20-1", file, line, count);
    uint64_t tok;
    memcpy(&tok, bar, 8);
    const uint64_t idx = tok & 0xffffffffu;
    if ((tok >> 48) == k_mbar_magic && (uint16_t)(tok >> 32) == g_generation &&
        idx < g_bars.size() && g_bars[idx].addr == bar && g_bars[idx].valid) {
        mbarrier &o = g_bars[idx];
        if (!o.waiters.empty() || !o.loads.empty())
            faultf("mbarrier.init at %s:%d of %s, which has waiting threads or TMA loads in "
                   "flight",
                   file, line, where(o).c_str());
        o.valid = false; /* the new initialization replaces it */
    }
    mbarrier b{};
    b.addr = bar;
    b.expected = b.pending = count;
    b.init_fences = g_init_fences;
    b.file = file;
    b.line = line;
    b.valid = true;
    g_bars.push_back(b);
    tok = k_mbar_magic << 48 | (uint64_t)g_generation << 32 | (uint64_t)(g_bars.size() - 1);
    memcpy(bar, &tok, 8);
    note_progress();
}

void mbar_inval(uint64_t *bar) {
    mbarrier *b = lookup(bar, "mbarrier.inval");
    if (!b->waiters.empty() || !b->loads.empty())
        faultf("mbarrier.inval of %s, which has waiting threads or TMA loads in flight",
               where(*b).c_str());
    b->valid = false;
    memset(bar, 0, 8);
}

void mbar_arrive(uint64_t *bar, uint32_t tx_bytes, bool arrive) {
    mbarrier *b = lookup(bar, arrive ? "mbarrier.arrive" : "mbarrier.expect_tx");
    if (tx_bytes > k_max_count)
        faultf("expect_tx of %u bytes on %s: at most 2^20 - 1", tx_bytes, where(*b).c_str());
    b->tx += tx_bytes;
    if (b->tx > (int64_t)k_max_count)
        faultf("expect_tx of %u bytes leaves %s with a transaction count of %lld, above "
               "2^20 - 1",
               tx_bytes, where(*b).c_str(), (long long)b->tx);
    note_progress();
    if (!arrive) return;
    if (b->pending == 0)
        faultf("mbarrier.arrive on %s, whose current phase %u has no arrivals left to wait for "
               "(only its transaction bytes): more arrivals than the count, or an arrival for "
               "the next phase before this one completed",
               where(*b).c_str(), b->phase);
    b->pending--;
    try_complete(*b);
}

bool mbar_wait(uint64_t *bar, uint32_t parity, bool test, const char *file, int line) {
    const char *who = test ? "mbarrier.test_wait.parity" : "mbarrier.try_wait.parity";
    mbarrier *b = lookup(bar, who);
    if (parity > 1)
        faultf("%s at %s:%d: the parity must be 0 or 1, not %u", who, file, line, parity);
    if ((b->phase & 1) != parity) return true;
    /* The phase waited for is the current one: the TMA loads it waits for happen now. */
    if (perform_loads(*b) && (b->phase & 1) != parity) return true;
    const wait_desc w{wk_mbarrier, bar, parity, test ? 1u : 0u, file, line};
    const unsigned t = current_thread(who);
    if (test) {
        /* A probe returns false at once. The same probe again with nothing happened in the
         * block since is a spin: the thread gives way until something does (a spin that
         * nothing can end is reported as a deadlock). */
        spin_rec &r = g_spin[t];
        if (r.bar == bar && r.parity == parity && r.events == progress_events()) yield_current(w);
        r = spin_rec{bar, parity, progress_events()};
        return false;
    }
    b->waiters.push_back(waiter{t, parity});
    block_current(w);
    return true;
}

void fence_mbarrier_init() {
    current_thread("fence.mbarrier_init");
    g_init_fences++;
}

void fence_proxy_async() {
    current_thread("fence.proxy.async");
    g_proxy_fences++;
}

/* ---- named barriers ---------------------------------------------------------------------- */

void named_barrier(int id, int count, bool wait, const char *file, int line) {
    const char *who = wait ? "bar.sync" : "bar.arrive";
    const unsigned t = current_thread(who);
    check_count(id, count, who);
    named_bar &nb = g_named[id];
    if (nb.count == 0) nb.count = count;
    if (nb.count != count)
        faultf("%s %d, %d at %s:%d, while the threads already at barrier %d count %d", who, id,
               count, file, line, id, nb.count);
    nb.arrived++;
    nb.warps[t / 32]++;
    note_progress();
    if (nb.arrived == nb.count) {
        /* bar.sync/bar.arrive are warp instructions (.aligned): whole warps take part. */
        for (unsigned w = 0; w < 32; w++)
            if (nb.warps[w] && nb.warps[w] % warp_threads(w))
                faultf("%s %d, %d at %s:%d completes the barrier with %d thread(s) of warp %u: "
                       "every thread of a warp must execute it (the hardware counts warps)",
                       who, id, count, file, line, nb.warps[w], w);
        for (unsigned u : nb.waiters) wake(u);
        nb.waiters.clear();
        nb.count = nb.arrived = 0;
        memset(nb.warps, 0, sizeof nb.warps);
        return;
    }
    if (nb.arrived > nb.count)
        faultf("%s %d, %d at %s:%d: more threads arrived than the count", who, id, count, file,
               line);
    if (!wait) return;
    nb.waiters.push_back(t);
    block_current(wait_desc{wk_named_barrier, &nb, (uint32_t)id, (uint32_t)count, file, line});
}

/* ---- setmaxnreg ---------------------------------------------------------------------------- */

/* Performs warpgroup w's pending .inc once the pool holds its registers; wakes its threads. */
void grant_pending(wg_regs &w) {
    const int64_t need = (int64_t)(w.pending - w.regs) * 128;
    if (!w.pending || need > g_reg_pool) return;
    g_reg_pool -= need;
    w.regs = w.pending;
    w.pending = 0;
    w.applied++;
    for (unsigned u : w.waiters) wake(u);
    w.waiters.clear();
    note_progress();
}

void setmaxnreg(int count, bool inc) {
    const char *who = inc ? "setmaxnreg.inc" : "setmaxnreg.dec";
    const unsigned t = current_thread(who);
    if (count < 24 || count > 256 || count % 8)
        faultf("%s.sync.aligned.u32 %d: the register count must be a multiple of 8 in 24..256", who,
               count);
    if ((t / 128 + 1) * 128 > g_nthreads)
        faultf("%s: the thread is in warpgroup %u, which the block's %u threads do not fill "
               "(setmaxnreg is executed by all 128 threads of a warpgroup)",
               who, t / 128, g_nthreads);
    const size_t k = g_maxnreg[t].size(); /* the thread's k-th setmaxnreg */
    g_maxnreg[t].push_back(inc ? count : -count);
    wg_regs &w = g_wg_regs[t / 128];
    /* its warpgroup has performed it (the sequences are compared at the block's end) */
    if (k < w.applied) return;
    if (k == w.applied && !w.pending) {
        /* The launch count is the most a block of this size can hold (ptxas may give fewer):
         * a count at or above it asks for nothing, one below it releases nothing. */
        if (!inc) {
            if (count < w.regs) {
                g_reg_pool += (int64_t)(w.regs - count) * 128;
                w.regs = count;
            }
            w.applied++;
            note_progress();
            for (wg_regs &o : g_wg_regs) grant_pending(o);
            return;
        }
        if (count <= w.regs) {
            w.applied++;
            return;
        }
        w.pending = count;
        grant_pending(w);
        if (!w.pending) return;
    }
    /* the warpgroup's .inc waits for registers: so does each of its threads that reaches it */
    w.waiters.push_back(t);
    block_current(wait_desc{wk_setmaxnreg, &w, (uint32_t)w.pending, 0, nullptr, 0});
}

/* ---- shared memory and the async proxy ------------------------------------------------------ */

uint32_t smem_offset(const void *p) {
    return sm90::smem_range(p, 0, "a shared-memory matrix descriptor");
}

namespace sm90 {

void faultf(const char *fmt, ...) {
    char m[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    device_fault(m);
}

uint32_t smem_range(const void *p, size_t n, const char *who) {
    const unsigned char *c = (const unsigned char *)p, *base = smem_base();
    if (c < base || c + n > base + smem_size() || (n == 0 && c >= base + smem_size()))
        faultf("%s: [%p, +%zu) is not inside the block's %zu bytes of dynamic shared memory "
               "(under the emulator, operands of TMA and wgmma live in dynamic shared memory)",
               who, p, n, smem_size());
    return (uint32_t)(c - base);
}

void async_read(const unsigned char *p, size_t n, const char *who) {
    const size_t off = (size_t)(p - smem_base());
    for (size_t c = off / 16; c * 16 < off + n; c++) {
        unsigned char *shadow = &g_shadow[c * 16];
        const unsigned char *real = smem_base() + c * 16;
        if (memcmp(shadow, real, 16) == 0) continue;
        if (g_chunk_fences[c] == g_proxy_fences)
            faultf("%s reads dynamic shared memory at offset %zu, written by ordinary stores "
                   "after the async proxy last accessed it, with no fence.proxy.async "
                   "(sl_fence_proxy_async) executed in the block since: the async proxy may "
                   "not see those stores",
                   who, c * 16);
        memcpy(shadow, real, 16);
        g_chunk_fences[c] = g_proxy_fences;
    }
}

void async_write(const unsigned char *p, size_t n) {
    const size_t off = (size_t)(p - smem_base());
    for (size_t c = off / 16; c * 16 < off + n; c++) {
        memcpy(&g_shadow[c * 16], smem_base() + c * 16, 16);
        g_chunk_fences[c] = g_proxy_fences;
    }
}

void mbar_add_load(uint64_t *bar, const tma_load &l) {
    mbarrier *b = lookup(bar, "cp.async.bulk.tensor (its mbarrier)");
    if (b->init_fences == g_init_fences)
        faultf("cp.async.bulk.tensor completes on %s, but no fence.mbarrier_init "
               "(sl_fence_mbarrier_init) was executed after its initialization: the TMA unit "
               "may not see it initialized",
               where(*b).c_str());
    b->loads.push_back(l);
    note_progress();
}

} // namespace sm90

/* ---- the scheduler's hooks ------------------------------------------------------------------ */

void sm90_block_start(unsigned nthreads) {
    g_nthreads = nthreads;
    g_bars.clear();
    g_generation++;
    for (named_bar &nb : g_named) {
        nb.count = nb.arrived = 0;
        memset(nb.warps, 0, sizeof nb.warps);
        nb.waiters.clear();
    }
    g_proxy_fences = g_init_fences = 0;
    g_shadow.assign(smem_base(), smem_base() + smem_size());
    g_chunk_fences.assign((smem_size() + 15) / 16, 0);
    if (g_maxnreg.size() < nthreads) g_maxnreg.resize(nthreads);
    g_spin.assign(nthreads, spin_rec{nullptr, 0, 0});
    for (unsigned i = 0; i < nthreads; i++) g_maxnreg[i].clear();
    /* a block of nthreads with one block per SM: the SM's 65,536 registers over the threads, at
     * most 255, in units of 8 (sl_launch_regs in core/ptx_sm90.cuh) */
    g_launch_regs = (int)std::min(65536u / std::max(nthreads, 1u), 255u) / 8 * 8;
    g_reg_pool = 0;
    g_wg_regs.assign((nthreads + 127) / 128, wg_regs{g_launch_regs, 0, 0, {}});
    sm90::tma_block_start(nthreads);
    sm90::wgmma_block_start(nthreads);
}

void sm90_thread_exit(unsigned thread) {
    sm90::wgmma_thread_exit(thread);
    sm90::tma_thread_exit(thread);
}

void sm90_block_end() {
    for (const mbarrier &b : g_bars)
        if (b.valid && !b.loads.empty()) {
            block_fault("%zu TMA load(s) on %s never completed: no thread waited for the "
                        "mbarrier's phase before the block ended (the copy would write shared "
                        "memory the block no longer owns)",
                        b.loads.size(), where(b).c_str());
            return;
        }
    for (unsigned wg = 0; wg * 128 < g_nthreads; wg++) {
        const unsigned first = wg * 128, end = std::min(g_nthreads, first + 128);
        for (unsigned t = first + 1; t < end; t++)
            if (g_maxnreg[t] != g_maxnreg[first]) {
                block_fault("setmaxnreg: threads %u and %u of warpgroup %u executed different "
                            "setmaxnreg sequences (%zu and %zu instructions): all 128 threads of "
                            "a warpgroup execute the same setmaxnreg",
                            first, t, wg, g_maxnreg[first].size(), g_maxnreg[t].size());
                return;
            }
    }
    sm90::wgmma_block_end();
}

bool sm90_idle() {
    bool woke = false;
    for (mbarrier &b : g_bars) {
        if (!b.valid || b.waiters.empty() || b.loads.empty()) continue;
        const size_t before = b.waiters.size();
        perform_loads(b);
        woke |= b.waiters.size() != before;
    }
    return woke;
}

void describe_wait(const wait_desc &w, char *buf, size_t len) {
    switch (w.kind) {
    case wk_mbarrier: {
        const uint64_t *bar = (const uint64_t *)w.obj;
        const mbarrier *b = nullptr;
        for (const mbarrier &c : g_bars)
            if (c.addr == bar && c.valid) b = &c;
        if (!b) {
            snprintf(buf, len, "%s at %s:%d on an invalidated mbarrier",
                     w.b ? "spins on mbarrier.test_wait.parity" : "mbarrier.try_wait.parity",
                     w.file, w.line);
            return;
        }
        snprintf(buf, len,
                 "%s %u at %s:%d on %s: its phase %u waits for %u of %u arrival(s) and %lld "
                 "transaction byte(s)",
                 w.b ? "spins on mbarrier.test_wait.parity" : "mbarrier.try_wait.parity", w.a,
                 w.file, w.line, where(*b).c_str(), b->phase, b->pending, b->expected,
                 (long long)b->tx);
        return;
    }
    case wk_named_barrier: {
        const named_bar *nb = (const named_bar *)w.obj;
        snprintf(buf, len, "bar.sync %u, %u at %s:%d: %d of its %u threads have arrived", w.a, w.b,
                 w.file, w.line, nb->arrived, w.b);
        return;
    }
    case wk_wgmma:
        sm90::describe_wgmma_wait(w.obj, buf, len);
        return;
    case wk_setmaxnreg: {
        const wg_regs *r = (const wg_regs *)w.obj;
        snprintf(buf, len,
                 "setmaxnreg.inc %u in warpgroup %u: it needs %lld more registers (128 x %d -> "
                 "%u) and the block's pool has %lld (an .inc takes only registers a .dec "
                 "released; the block holds %d per thread from its launch)",
                 w.a, (unsigned)(r - g_wg_regs.data()), (long long)(w.a - r->regs) * 128, r->regs,
                 w.a, (long long)g_reg_pool, g_launch_regs);
        return;
    }
    default:
        snprintf(buf, len, "an unknown wait");
    }
}

} // namespace sl_emu
