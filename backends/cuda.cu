/*
 * backends/cuda.cu - the CUDA backend's operation table. Empty until the CUDA kernels land:
 * each kernel is written beside its CPU twin (moe/router.cu beside moe/router_cpu.c) and
 * listed here with one line, in the order of backends/cpu.c. A missing entry stays NULL, and
 * calling it stops the run naming the op and the backend (core/ops.c); the conformance test
 * (tests/test_backend_ops.c) reports it as not implemented.
 */
extern "C" {
#include "backends/backends.h"
#include "core/backend_impl.h"
}

static const sl_ops_i k_cuda_ops = {};

extern "C" const sl_ops_i *sl_backends_cuda_ops(void) {
    return &k_cuda_ops;
}
