/*
 * emu/src/ptx.cc - the emulated twins of core/ptx.cuh's PTX instructions (emu/README.md,
 * "Tensor-core and async-copy instructions"); the fragment layouts are documented in
 * core/ptx.cuh.
 *
 * mma and ldmatrix are warp collectives: each lane passes the scheduler a pointer to its
 * operands (on its fiber's stack, alive while it waits), and when all 32 lanes have arrived
 * complete_ptx gathers every lane's registers, computes once and writes each lane's results:
 * one rendezvous per instruction, not one per element.
 *
 * cp.async keeps a queue per thread: a copy poisons its 16 destination bytes (0xff) at issue
 * and is performed when a wait_group retires its group, so that a kernel that reads the
 * destination before waiting reads NaN - wrong results under the emulator instead of a race
 * that a GPU may or may not show.
 */
#include <cstdint>
#include <cstring>
#include <vector>

#include "internal.h"
#include "sl_emu.h"

namespace sl_emu {

namespace {

struct mma_args {
    float *d;
    const uint32_t *a, *b;
    const float *c;
};
struct ldmatrix_args {
    uint32_t *r;
    const void *row;
};

inline float bf16_lo(uint32_t v) {
    return from_bits<float>((uint64_t)(v << 16));
}
inline float bf16_hi(uint32_t v) {
    return from_bits<float>((uint64_t)(v & 0xffff0000u));
}

void complete_mma(void *const lanes[32]) {
    /* Gather A (16x16), B (16x8, [k][n]) and C (16x8) from the fragments (core/ptx.cuh). */
    float A[16][16], B[16][8], C[16][8];
    for (int lane = 0; lane < 32; lane++) {
        const mma_args *p = (const mma_args *)lanes[lane];
        const int g = lane >> 2, t = lane & 3;
        for (int i = 0; i < 4; i++) {
            const int row = g + (i & 1) * 8, col = 2 * t + (i >> 1) * 8;
            A[row][col] = bf16_lo(p->a[i]);
            A[row][col + 1] = bf16_hi(p->a[i]);
        }
        for (int i = 0; i < 2; i++) {
            B[2 * t + 8 * i][g] = bf16_lo(p->b[i]);
            B[2 * t + 8 * i + 1][g] = bf16_hi(p->b[i]);
        }
        for (int i = 0; i < 4; i++) C[g + (i >> 1) * 8][2 * t + (i & 1)] = p->c[i];
    }
    /* d = c + sum over k in order, fp32 (bf16 products are exact in fp32). */
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 8; n++) {
            float acc = C[m][n];
            for (int k = 0; k < 16; k++) acc += A[m][k] * B[k][n];
            C[m][n] = acc;
        }
    /* Scatter D after the gather: d may be the same registers as c. */
    for (int lane = 0; lane < 32; lane++) {
        const mma_args *p = (const mma_args *)lanes[lane];
        const int g = lane >> 2, t = lane & 3;
        for (int i = 0; i < 4; i++) p->d[i] = C[g + (i >> 1) * 8][2 * t + (i & 1)];
    }
}

void complete_ldmatrix(void *const lanes[32], int num, bool trans) {
    /* Rows of the num 8x8 matrices: lane 8i + r addresses row r of matrix i. */
    uint16_t M[4][8][8];
    for (int i = 0; i < num; i++)
        for (int r = 0; r < 8; r++) {
            const ldmatrix_args *p = (const ldmatrix_args *)lanes[8 * i + r];
            memcpy(M[i][r], p->row, 16);
        }
    for (int lane = 0; lane < 32; lane++) {
        const ldmatrix_args *p = (const ldmatrix_args *)lanes[lane];
        const int g = lane >> 2, t = lane & 3;
        for (int i = 0; i < num; i++) {
            const uint32_t lo = trans ? M[i][2 * t][g] : M[i][g][2 * t];
            const uint32_t hi = trans ? M[i][2 * t + 1][g] : M[i][g][2 * t + 1];
            p->r[i] = lo | hi << 16;
        }
    }
}

/* ---- cp.async: per-thread queues ------------------------------------------------------------ */

struct async_copy {
    void *dst;
    const void *src;
    int src_bytes;
};
struct copy_queue {
    std::vector<async_copy> copies; /* issued, oldest first */
    std::vector<size_t> group_ends; /* committed groups: end index in copies, oldest first */
};
std::vector<copy_queue> g_queues; /* by linear thread index in the block */

copy_queue &my_queue(const char *what) {
    const unsigned t = current_thread(what);
    return g_queues[t];
}

} // namespace

void complete_ptx(int kind, void *const lanes[32]) {
    switch (kind) {
    case w_mma_bf16_16816:
        complete_mma(lanes);
        return;
    case w_ldmatrix_x1:
    case w_ldmatrix_x2:
    case w_ldmatrix_x4:
        complete_ldmatrix(lanes, 1 << (kind - w_ldmatrix_x1), false);
        return;
    default:
        complete_ldmatrix(lanes, 1 << (kind - w_ldmatrix_x1_trans), true);
        return;
    }
}

void ptx_block_start(unsigned nthreads) {
    if (g_queues.size() < nthreads) g_queues.resize(nthreads);
    for (unsigned i = 0; i < nthreads; i++) {
        g_queues[i].copies.clear();
        g_queues[i].group_ends.clear();
    }
}

void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
    mma_args args{d, a, b, c};
    warp_op(w_mma_bf16_16816, 0xffffffffu, (uint64_t)(uintptr_t)&args, 0, 0);
}

void ldmatrix(uint32_t *r, const void *row, int num, bool trans) {
    ldmatrix_args args{r, row};
    /* Checked by each lane before the rendezvous, where a fault can name the thread. Lanes past
     * 8 * num give no address (their operand is ignored). */
    if ((int)(current_thread("ldmatrix") % 32) < 8 * num && (uintptr_t)row % 16)
        device_fault("ldmatrix: this lane's row address is not 16-byte aligned (lane 8i + r "
                     "gives row r of matrix i: 16 contiguous, aligned bytes of shared memory)");
    const int kind = (trans ? w_ldmatrix_x1_trans : w_ldmatrix_x1) + (num == 4 ? 2 : num - 1);
    warp_op(kind, 0xffffffffu, (uint64_t)(uintptr_t)&args, 0, 0);
}

void cp_async_16(void *dst, const void *src, int src_bytes) {
    copy_queue &q = my_queue("cp.async (sl_cp_async_16)");
    if ((uintptr_t)dst % 16 || (src_bytes > 0 && (uintptr_t)src % 16))
        device_fault("cp.async of 16 bytes: source and destination must be 16-byte aligned");
    if (src_bytes < 0 || src_bytes > 16) device_fault("cp.async: the source size must be in 0..16");
    memset(dst, 0xff, 16);
    q.copies.push_back(async_copy{dst, src, src_bytes});
}

void cp_async_commit() {
    copy_queue &q = my_queue("cp.async.commit_group (sl_cp_async_commit)");
    /* An empty group is legal (PTX) and counts like any other. */
    q.group_ends.push_back(q.copies.size());
}

void cp_async_wait(int n) {
    copy_queue &q = my_queue("cp.async.wait_group (sl_cp_async_wait)");
    if (q.group_ends.size() <= (size_t)n) return;
    const size_t retire = q.group_ends.size() - (size_t)n, end = q.group_ends[retire - 1];
    for (size_t i = 0; i < end; i++) {
        const async_copy &c = q.copies[i];
        char buf[16] = {0};
        if (c.src_bytes) memcpy(buf, c.src, (size_t)c.src_bytes);
        memcpy(c.dst, buf, 16);
    }
    q.copies.erase(q.copies.begin(), q.copies.begin() + (ptrdiff_t)end);
    q.group_ends.erase(q.group_ends.begin(), q.group_ends.begin() + (ptrdiff_t)retire);
    for (size_t &e : q.group_ends) e -= end;
}

} // namespace sl_emu
