/*
 * tests/emu/test_emu_faults.cu - faulty kernels are flagged by the CPU SIMT test double.
 *
 * Each case runs in a child process (this executable with the case's name as argument): a
 * fault aborts the process with a message naming the kernel, so the parent checks that the
 * child died of SIGABRT and that its stderr says what went wrong. A case whose kernel is NOT
 * flagged exits 0, which fails the check. The "correct" twins of some cases (the same kernel
 * with the barrier in place) must run clean, so that the checks cannot pass for the wrong
 * reason. Also: a vector access at an address the GPU would fault on (misaligned).
 */
#include <cstdint>
#include <vector>

#include <sys/resource.h>

#include "core/cuda_common.cuh"
#include "core/cuda_pack.cuh"
#include "tests/emu/emu_test.h"

/* ---- faulty kernels ---------------------------------------------------------------------- */

/* Shared memory written by one thread and read by another without __syncthreads between. */
template <bool kSync> __global__ void smem_neighbour_kernel(const float *x, float *out) {
    __shared__ float s[128];
    const int t = threadIdx.x;
    s[t] = x[blockIdx.x * 128 + t] * 2.0f;
    if (kSync) __syncthreads();
    out[blockIdx.x * 128 + t] = s[(t + 1) % 128];
}

/* Writes one element past the end of `out`. */
__global__ void oob_write_kernel(float *out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) out[i] = 1.0f; /* should be i < n */
}

/* Lane 5 leaves before a full-warp shuffle. */
__global__ void early_exit_shfl_kernel(float *out) {
    float v = (float)threadIdx.x;
    if (threadIdx.x == 5) return;
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    out[threadIdx.x] = v;
}

/* Half the block returns before a barrier the other half waits at. */
__global__ void early_exit_barrier_kernel(float *out) {
    __shared__ float s[64];
    if (threadIdx.x >= 48) return;
    s[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = s[63 - threadIdx.x];
}

/* Lanes 0-15 wait at __syncthreads while 16-31 wait at a full-warp shuffle. */
__global__ void divergent_collective_kernel(float *out) {
    float v = 1.0f;
    if (threadIdx.x < 16)
        __syncthreads();
    else
        v = __shfl_down_sync(0xffffffffu, v, 1);
    out[threadIdx.x] = v;
}

/* Writes one float past its dynamic shared memory. */
__global__ void smem_overflow_kernel(float *out, int n) {
    SL_DYNAMIC_SMEM(float, s);
    s[threadIdx.x + 1] = (float)threadIdx.x; /* thread n-1 writes s[n] */
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x] + (float)n;
}

/* Float atomics: the sum's rounding depends on the order of the additions. */
__global__ void float_atomic_kernel(const float *x, float *sum) {
    atomicAdd(sum, x[blockIdx.x * blockDim.x + threadIdx.x]);
}

/* Block b reads what block b-1 writes in the same launch (no ordering between blocks). */
__global__ void interblock_kernel(float *y) {
    const int b = blockIdx.x;
    if (threadIdx.x == 0) y[b + 1] = y[b] + 1.0f;
}

/* Which of three threads comes second: the same under the forward and the reverse order (the
 * middle one both times), different under most shuffles - found only with
 * SLUICE_EMU_ORDERS > 2. */
__global__ void middle_kernel(int *counter, int *out) {
    if (atomicAdd(counter, 1) == 1) *out = (int)threadIdx.x;
}

/* A pack of 8 bf16 read from `offset` elements into a buffer: a 16-byte access, misaligned
 * unless offset is a multiple of 8 (core/cuda_pack.cuh's sl_ld8); and an fp32 element stored
 * through the cache-hinted store at a byte offset. */
__global__ void misaligned_pack_kernel(const sl_bf16 *x, int offset, float *out) {
    float v[8];
    sl_ld8(x + offset, v);
    out[threadIdx.x] = v[0] + v[7];
}
__global__ void misaligned_hint_kernel(char *out, int byte_offset) {
    __stcs(reinterpret_cast<float *>(out + byte_offset), 1.0f);
}

__global__ void trap_kernel(int *flag) {
    if (threadIdx.x == 3 && blockIdx.x == 1) __trap();
    flag[threadIdx.x] = 1;
}

/* A local array larger than the fiber stack. */
__global__ void big_stack_kernel(float *out, int n) {
    volatile float local[64 * 1024]; /* 256 KiB */
    for (int i = 0; i < n; i++) local[i] = (float)i;
    out[threadIdx.x] = local[n - 1];
}

/* ---- the cases (run in the child) -------------------------------------------------------------
 */

static float *dev_floats(size_t n, float v) {
    std::vector<float> h(n, v);
    for (size_t i = 0; i < n; i++) h[i] = v + (float)i;
    float *d = nullptr;
    cudaMalloc((void **)&d, n * 4);
    cudaMemcpy(d, h.data(), n * 4, cudaMemcpyHostToDevice);
    return d;
}

static int run_case(const char *name) {
    const std::string c = name;
    if (c == "race" || c == "race_fixed") {
        float *x = dev_floats(4 * 128, 1.0f), *out = dev_floats(4 * 128, 0.0f);
        if (c == "race")
            SL_LAUNCH(smem_neighbour_kernel<false>, 4, 128, 0, 0, x, out);
        else
            SL_LAUNCH(smem_neighbour_kernel<true>, 4, 128, 0, 0, x, out);
        std::vector<float> h(4 * 128);
        cudaMemcpy(h.data(), out, h.size() * 4, cudaMemcpyDeviceToHost);
        /* the fixed kernel's results are right */
        for (int b = 0; b < 4; b++)
            for (int t = 0; t < 128; t++)
                if (h[b * 128 + t] != 2.0f * (1.0f + (float)(b * 128 + (t + 1) % 128))) return 3;
        return cudaGetLastError() == cudaSuccess ? 0 : 4;
    }
    if (c == "oob") {
        float *out = dev_floats(1000, 0.0f);
        SL_LAUNCH(oob_write_kernel, 4, 256, 0, 0, out, 1000);
        return 0;
    }
    if (c == "lane_exit") {
        float *out = dev_floats(32, 0.0f);
        SL_LAUNCH(early_exit_shfl_kernel, 1, 32, 0, 0, out);
        return 0;
    }
    if (c == "barrier_exit") {
        float *out = dev_floats(64, 0.0f);
        SL_LAUNCH(early_exit_barrier_kernel, 1, 64, 0, 0, out);
        return 0;
    }
    if (c == "divergent") {
        float *out = dev_floats(32, 0.0f);
        SL_LAUNCH(divergent_collective_kernel, 1, 32, 0, 0, out);
        return 0;
    }
    if (c == "smem_overflow") {
        float *out = dev_floats(64, 0.0f);
        SL_LAUNCH(smem_overflow_kernel, 1, 64, 64 * 4, 0, out, 64);
        return 0;
    }
    if (c == "float_atomic") {
        std::vector<float> h(256);
        for (int i = 0; i < 256; i++) h[i] = i % 2 ? 1e8f : 1.0f + (float)i;
        float *x = dev_floats(256, 0.0f), *sum = dev_floats(1, 0.0f);
        cudaMemcpy(x, h.data(), 256 * 4, cudaMemcpyHostToDevice);
        SL_LAUNCH(float_atomic_kernel, 2, 128, 0, 0, x, sum);
        return 0;
    }
    if (c == "interblock") {
        std::vector<float> h(65);
        for (int i = 0; i < 65; i++) h[i] = (float)(i * i);
        float *y = dev_floats(65, 0.0f);
        cudaMemcpy(y, h.data(), 65 * 4, cudaMemcpyHostToDevice);
        SL_LAUNCH(interblock_kernel, 64, 32, 0, 0, y);
        return 0;
    }
    if (c == "middle") {
        int *counter, *out;
        cudaMalloc((void **)&counter, 4);
        cudaMalloc((void **)&out, 4);
        cudaMemset(counter, 0, 4);
        cudaMemset(out, 0, 4);
        SL_LAUNCH(middle_kernel, 1, 3, 0, 0, counter, out);
        int h = -1;
        cudaMemcpy(&h, out, 4, cudaMemcpyDeviceToHost);
        return h == 1 ? 0 : 11;
    }
    if (c == "misaligned" || c == "aligned") {
        sl_bf16 *x;
        cudaMalloc((void **)&x, 64 * sizeof(sl_bf16));
        cudaMemset(x, 0, 64 * sizeof(sl_bf16));
        float *out = dev_floats(32, 0.0f);
        SL_LAUNCH(misaligned_pack_kernel, 1, 32, 0, 0, x, c == "aligned" ? 8 : 4, out);
        return 0;
    }
    if (c == "misaligned_hint") {
        char *out;
        cudaMalloc((void **)&out, 64);
        SL_LAUNCH(misaligned_hint_kernel, 1, 1, 0, 0, out, 2);
        return 0;
    }
    if (c == "trap") {
        int *flag;
        cudaMalloc((void **)&flag, 64 * 4);
        SL_LAUNCH(trap_kernel, 2, 64, 0, 0, flag);
        return 0;
    }
    if (c == "stack") {
        float *out = dev_floats(32, 0.0f);
        SL_LAUNCH(big_stack_kernel, 1, 32, 0, 0, out, 64 * 1024);
        return 0;
    }
    if (c == "sticky") {
        /* SLUICE_EMU_FATAL=0: the fault becomes CUDA's sticky error. */
        float *out = dev_floats(1000, 0.0f);
        SL_LAUNCH(oob_write_kernel, 4, 256, 0, 0, out, 1000);
        if (cudaGetLastError() != cudaErrorIllegalAddress) return 5;
        if (cudaGetLastError() != cudaErrorIllegalAddress) return 6; /* still there */
        void *p = nullptr;
        if (cudaMalloc(&p, 16) != cudaErrorIllegalAddress) return 7;
        SL_LAUNCH(early_exit_shfl_kernel, 1, 32, 0, 0, out);
        if (cudaPeekAtLastError() != cudaErrorIllegalAddress) return 8;
        cudaDeviceReset();
        if (cudaMalloc(&p, 16) != cudaSuccess) return 9;
        return 0;
    }
    if (c == "sticky_race") {
        float *x = dev_floats(4 * 128, 1.0f), *out = dev_floats(4 * 128, 0.0f);
        SL_LAUNCH(smem_neighbour_kernel<false>, 4, 128, 0, 0, x, out);
        return cudaGetLastError() == cudaErrorLaunchFailure ? 0 : 10;
    }
    fprintf(stderr, "unknown case %s\n", name);
    return 2;
}

/* ---- the parent: runs each case and checks how it ended ------------------------------------- */

static void expect_fault(const char *self, const char *name, const char *const *needles) {
    const emu_child r = emu_run_child(self, name);
    bool ok = r.signal == SIGABRT;
    for (const char *const *n = needles; *n; n++) ok &= emu_has(r, *n);
    CHECK(ok, "case %s: expected an abort naming %s; got exit %d signal %d, output:\n%s", name,
          needles[0], r.code, r.signal, r.err.c_str());
}

/* Memory errors: the emulator's guard zones and its stack guard report them after the fact;
 * in an ASan build (-DSLUICE_SANITIZE=ON) the same zones are poisoned and ASan stops the
 * process at the faulting access instead, naming the kernel in its stack trace. */
#if defined(__SANITIZE_ADDRESS__)
constexpr bool k_asan = true;
#else
constexpr bool k_asan = false;
#endif
static void expect_memory_fault(const char *self, const char *name, const char *asan_what,
                                const char *kernel, const char *const *needles) {
    if (!k_asan) {
        expect_fault(self, name, needles);
        return;
    }
    const emu_child r = emu_run_child(self, name);
    CHECK(!(r.exited && r.code == 0) && emu_has(r, "AddressSanitizer") && emu_has(r, asan_what) &&
              emu_has(r, kernel),
          "case %s: expected an ASan %s report in %s; got exit %d signal %d, output:\n%s", name,
          asan_what, kernel, r.code, r.signal, r.err.c_str());
}

int main(int argc, char **argv) {
    if (argc > 1) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        return run_case(argv[1]);
    }
    const char *self = argv[0];
    {
        const char *n[] = {"smem_neighbour_kernel<false>", "results differ", "reverse",
                           "device allocation", nullptr};
        expect_fault(self, "race", n);
        const emu_child r = emu_run_child(self, "race_fixed");
        CHECK(r.exited && r.code == 0, "the kernel with its barrier runs clean: exit %d, %s",
              r.code, r.err.c_str());
    }
    {
        const char *n[] = {"oob_write_kernel", "out-of-bounds write", "4000 bytes", "offset 4000",
                           nullptr};
        expect_memory_fault(self, "oob", "use-after-poison", "oob_write_kernel", n);
    }
    {
        /* a 16-byte pack at 8 bytes past an aligned allocation: the GPU's misaligned address */
        const char *n[] = {"misaligned_pack_kernel", "misaligned address", "16-byte access",
                           "cuda_pack.cuh", nullptr};
        expect_fault(self, "misaligned", n);
        const char *h[] = {"misaligned_hint_kernel", "misaligned address", "4-byte access",
                           nullptr};
        expect_fault(self, "misaligned_hint", h);
        const emu_child r = emu_run_child(self, "aligned");
        CHECK(r.exited && r.code == 0, "the same pack at 16 bytes runs clean: exit %d, %s", r.code,
              r.err.c_str());
    }
    {
        const char *n[] = {"early_exit_shfl_kernel", "lane 5", "has exited", "__shfl_xor_sync",
                           nullptr};
        expect_fault(self, "lane_exit", n);
    }
    {
        const char *n[] = {"early_exit_barrier_kernel", "__syncthreads()", "has exited", nullptr};
        expect_fault(self, "barrier_exit", n);
    }
    {
        const char *n[] = {"divergent_collective_kernel", "__shfl_down_sync", "__syncthreads()",
                           nullptr};
        expect_fault(self, "divergent", n);
    }
    {
        const char *n[] = {"smem_overflow_kernel", "past the end", "dynamic shared memory",
                           nullptr};
        expect_memory_fault(self, "smem_overflow", "use-after-poison", "smem_overflow_kernel", n);
    }
    {
        const char *n[] = {"float_atomic_kernel", "results differ", nullptr};
        expect_fault(self, "float_atomic", n);
    }
    {
        const char *n[] = {"interblock_kernel", "results differ", nullptr};
        expect_fault(self, "interblock", n);
    }
    {
        /* Forward and reverse agree on this race; the seeded shuffles find it. */
        const emu_child r2 = emu_run_child(self, "middle");
        CHECK(r2.exited && r2.code == 0, "two orders do not see the middle-thread race: exit %d %s",
              r2.code, r2.err.c_str());
        const char *env[] = {"SLUICE_EMU_ORDERS=6", nullptr};
        const emu_child r6 = emu_run_child(self, "middle", env);
        CHECK(r6.signal == SIGABRT && emu_has(r6, "middle_kernel") && emu_has(r6, "shuffled"),
              "SLUICE_EMU_ORDERS=6 finds it: exit %d signal %d, output:\n%s", r6.code, r6.signal,
              r6.err.c_str());
        const char *env5[] = {"SLUICE_EMU_ORDERS=5", nullptr};
        const emu_child rf = emu_run_child(self, "race_fixed", env5);
        CHECK(rf.exited && rf.code == 0, "a correct kernel under 5 orders: exit %d %s", rf.code,
              rf.err.c_str());
    }
    {
        const char *n[] = {"trap_kernel", "__trap()", "block (1,0,0)", "thread (3,0,0)", nullptr};
        expect_fault(self, "trap", n);
    }
    if (k_asan) {
        const emu_child r = emu_run_child(self, "stack");
        CHECK(emu_has(r, "AddressSanitizer: stack-overflow") && emu_has(r, "big_stack_kernel"),
              "stack overflow under ASan: exit %d signal %d, output:\n%s", r.code, r.signal,
              r.err.c_str());
    } else {
        const emu_child r = emu_run_child(self, "stack");
        CHECK(r.signal == SIGSEGV && emu_has(r, "big_stack_kernel") &&
                  emu_has(r, "overflowed its 65536-byte fiber stack"),
              "stack overflow: exit %d signal %d, output:\n%s", r.code, r.signal, r.err.c_str());
    }
    {
        const char *env[] = {"SLUICE_EMU_FATAL=0", nullptr};
        emu_child r;
        if (!k_asan) { /* under ASan the out-of-bounds write ends the process */
            r = emu_run_child(self, "sticky", env);
            CHECK(r.exited && r.code == 0 && emu_has(r, "oob_write_kernel"),
                  "SLUICE_EMU_FATAL=0: a fault is a sticky cudaErrorIllegalAddress until "
                  "cudaDeviceReset: exit %d, output:\n%s",
                  r.code, r.err.c_str());
        }
        r = emu_run_child(self, "sticky_race", env);
        CHECK(r.exited && r.code == 0 && emu_has(r, "results differ"),
              "SLUICE_EMU_FATAL=0: a race is a sticky cudaErrorLaunchFailure: exit %d, output:\n%s",
              r.code, r.err.c_str());
    }
    {
        /* With the race check off a racy kernel is not flagged (the switch works). */
        const char *env[] = {"SLUICE_EMU_RACECHECK=0", nullptr};
        const emu_child r = emu_run_child(self, "float_atomic", env);
        CHECK(r.exited && r.code == 0, "SLUICE_EMU_RACECHECK=0: exit %d, output:\n%s", r.code,
              r.err.c_str());
    }
    return emu_finish("test_emu_faults");
}
