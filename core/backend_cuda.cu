/*
 * core/backend_cuda.cu - the CUDA backend: device memory, one stream, one cuBLAS handle.
 *
 * This translation unit provides the memory half of the backend interface. Operation
 * kernels are added per concern beside their CPU versions (attention/gated_attn.cu beside
 * attention/gated_attn_cpu.c, ...); until a kernel exists its table entry is NULL and
 * calling it stops the run with the operation's name.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "core/backend_impl.h"
#include "core/log.h"
}

#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) sl_fatal("CUDA: %s failed: %s", #call, cudaGetErrorString(e_));     \
    } while (0)

typedef struct {
    int device;
    cudaStream_t stream;
    cublasHandle_t cublas;
} cuda_ctx;

static void *cuda_alloc(void *ctx, size_t bytes) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    void *p = NULL;
    CUDA_OK(cudaMalloc(&p, bytes ? bytes : 1));
    CUDA_OK(cudaMemsetAsync(p, 0, bytes, c->stream));
    return p;
}

static void cuda_free(void *ctx, void *p) {
    (void)ctx;
    CUDA_OK(cudaFree(p));
}

static void cuda_memset0(void *ctx, void *p, size_t bytes) {
    CUDA_OK(cudaMemsetAsync(p, 0, bytes, ((cuda_ctx *)ctx)->stream));
}

static void cuda_to_host(void *ctx, void *host, const void *src, size_t bytes) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    CUDA_OK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    CUDA_OK(cudaStreamSynchronize(c->stream));
}

static void cuda_from_host(void *ctx, void *dst, const void *host, size_t bytes) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    CUDA_OK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, c->stream));
    /* The host buffer may be reused as soon as we return. */
    CUDA_OK(cudaStreamSynchronize(c->stream));
}

static void cuda_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ((cuda_ctx *)ctx)->stream));
}

static void cuda_synchronize(void *ctx) {
    CUDA_OK(cudaStreamSynchronize(((cuda_ctx *)ctx)->stream));
}

static int cuda_threads(void *ctx) {
    (void)ctx;
    return 1;
}

static void cuda_free_ctx(void *ctx) {
    cuda_ctx *c = (cuda_ctx *)ctx;
    cublasDestroy(c->cublas);
    cudaStreamDestroy(c->stream);
    free(c);
}

extern "C" sl_backend *sl_backend_cuda_create(const sl_backend_params *params, const sl_ops_i *ops,
                                              char *err, size_t errlen) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(err, errlen, "no CUDA device available (%s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return NULL;
    }
    int device = params->device;
    if (device < 0) {
        /* Map local ranks round-robin onto the node's GPUs (launchers export these). */
        const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"};
        device = 0;
        for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
            const char *v = getenv(vars[i]);
            if (v) {
                device = atoi(v) % count;
                break;
            }
        }
    }
    if (device >= count) {
        snprintf(err, errlen, "CUDA device %d requested but only %d present", device, count);
        return NULL;
    }
    CUDA_OK(cudaSetDevice(device));
    cuda_ctx *c = (cuda_ctx *)sl_xcalloc(1, sizeof *c);
    c->device = device;
    CUDA_OK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    if (cublasCreate(&c->cublas) != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "cublasCreate failed on device %d", device);
        cudaStreamDestroy(c->stream);
        free(c);
        return NULL;
    }
    cublasSetStream(c->cublas, c->stream);
    sl_backend *be = (sl_backend *)sl_xcalloc(1, sizeof *be);
    be->iface.name = "cuda";
    be->iface.host_memory = false;
    be->iface.alloc = cuda_alloc;
    be->iface.free = cuda_free;
    be->iface.memset0 = cuda_memset0;
    be->iface.to_host = cuda_to_host;
    be->iface.from_host = cuda_from_host;
    be->iface.copy = cuda_copy;
    be->iface.synchronize = cuda_synchronize;
    be->iface.threads = cuda_threads;
    be->iface.free_ctx = cuda_free_ctx;
    be->ops = ops;
    be->ctx = c;
    return be;
}
