/*
 * tests/emu/test_emu_asan.cu - with -DSLUICE_SANITIZE=ON, AddressSanitizer sees inside emulated
 * kernels: an out-of-bounds write to a static __shared__ array (a function static, so ASan's
 * redzones surround it), past a cudaMalloc'ed buffer (its guard zones are poisoned) and past the
 * launch's dynamic shared memory is reported at the faulting access, with the kernel's frames
 * on the stack (the fiber switches are annotated for ASan). Each case runs in a child process.
 * Skipped (77) in a build without ASan.
 */
#include "core/cuda_common.cuh"
#include "tests/emu/emu_test.h"

/* Through a pointer in a function not inlined: UBSan's bounds and object-size checks see
 * only what the compiler can see, so this one is ASan's to catch (in the kernel itself UBSan
 * reports it first). */
__device__ __attribute__((noinline)) void store(float *p, int i, float v) {
    p[i] = v;
}

__global__ void static_smem_oob_kernel(float *out) {
    __shared__ float s[32];
    store(s, threadIdx.x, (float)threadIdx.x); /* 64 threads */
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x & 31];
}

__global__ void global_oob_kernel(float *out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) out[i] = 1.0f;
}

__global__ void dynamic_smem_oob_kernel(float *out) {
    SL_DYNAMIC_SMEM(float, s);
    s[threadIdx.x + 1] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x];
}

__global__ void clean_kernel(float *out) {
    __shared__ float s[64];
    s[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = s[63 - threadIdx.x];
}

static int run_case(const char *c) {
    float *out;
    cudaMalloc((void **)&out, 64 * 4);
    if (!strcmp(c, "static"))
        SL_LAUNCH(static_smem_oob_kernel, 1, 64, 0, 0, out);
    else if (!strcmp(c, "global"))
        SL_LAUNCH(global_oob_kernel, 1, 128, 0, 0, out, 64);
    else if (!strcmp(c, "dynamic"))
        SL_LAUNCH(dynamic_smem_oob_kernel, 1, 64, 64 * 4, 0, out);
    else
        SL_LAUNCH(clean_kernel, 1, 64, 0, 0, out);
    return cudaGetLastError() == cudaSuccess ? 0 : 3;
}

int main(int argc, char **argv) {
#if !defined(__SANITIZE_ADDRESS__)
    (void)argc, (void)argv, (void)run_case;
    printf("SKIP: not built with AddressSanitizer (-DSLUICE_SANITIZE=ON)\n");
    return 77;
#else
    if (argc > 1) return run_case(argv[1]);
    const char *env[] = {"ASAN_OPTIONS=detect_leaks=0", nullptr};
    struct {
        const char *name, *what, *kernel;
    } cases[] = {{"static", "global-buffer-overflow", "static_smem_oob_kernel"},
                 {"global", "use-after-poison", "global_oob_kernel"},
                 {"dynamic", "use-after-poison", "dynamic_smem_oob_kernel"}};
    for (const auto &k : cases) {
        const emu_child r = emu_run_child(argv[0], k.name, env);
        CHECK(!(r.exited && r.code == 0) && emu_has(r, "AddressSanitizer") && emu_has(r, k.what) &&
                  emu_has(r, k.kernel),
              "case %s: expected an ASan %s report in %s; exit %d signal %d, output:\n%s", k.name,
              k.what, k.kernel, r.code, r.signal, r.err.c_str());
    }
    const emu_child r = emu_run_child(argv[0], "clean", env);
    CHECK(r.exited && r.code == 0 && !emu_has(r, "AddressSanitizer"),
          "a clean kernel under ASan with fibers: exit %d, output:\n%s", r.code, r.err.c_str());
    return emu_finish("test_emu_asan");
#endif
}
