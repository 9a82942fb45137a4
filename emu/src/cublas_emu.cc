/*
 * emu/src/cublas_emu.cc - cuBLAS for the CPU SIMT test double (-DSLUICE_CUDA=EMULATED), on
 * OpenBLAS.
 *
 * The functions keep the real declarations of <cublas_v2.h> (included below, so a signature
 * that drifts from the toolkit's does not compile) and cuBLAS's column-major semantics:
 * transposes (N, T, and C = T for real types), leading dimensions, alpha and beta (host
 * pointers, or "device" pointers, which are host memory here), beta = 0 meaning C is not read.
 * Device memory is host memory and streams complete synchronously, so every call computes
 * before it returns.
 *
 * This file holds the handle, its settings and the status strings; cublas_emu_gemm.cc the GEMMs
 * (and the arithmetic they do); cublas_emu.h the handle they share.
 *
 * Honesty rules, so that the fake cannot hide a call that fails on a GPU:
 *   - arguments are validated as cuBLAS documents it (negative sizes, bad transposes, leading
 *     dimensions below max(1, rows), negative batch or group counts -> INVALID_VALUE; a NULL
 *     handle -> NOT_INITIALIZED);
 *   - a combination of data and compute types that real cuBLAS rejects returns NOT_SUPPORTED.
 *     A combination real cuBLAS accepts but this fake does not compute (integer, fp64, complex,
 *     half-precision accumulation) also returns NOT_SUPPORTED, with a line on stderr saying
 *     that it is the fake's limit;
 *   - every matrix a call reads or writes, and every pointer array, must lie inside one
 *     allocation of the emulated device (cudaMalloc, or pinned host memory, which a GPU can
 *     address): a host pointer or a region running past an allocation's end is a fault
 *     (cudaErrorIllegalAddress, as the GPU would raise), reported like an out-of-bounds write
 *     in a kernel. A call on an unknown stream, or after a sticky CUDA error, fails
 *     (EXECUTION_FAILED), and cublasCreate fails (NOT_INITIALIZED) where the emulated machine
 *     has no GPU (SLUICE_EMU_DEVICES=0);
 *   - the grouped GEMM accepts only A, B and C of one type (fp32 with CUBLAS_COMPUTE_32F or
 *     _FAST_TF32, bf16 or fp16 with CUBLAS_COMPUTE_32F): the combinations cuBLAS documents for
 *     cublasGemmGroupedBatchedEx. If a newer cuBLAS accepts more, refusing here costs the caller
 *     a fallback, while accepting here what a GPU refuses would fail only on the GPU.
 */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdint.h>

#include "cublas_emu.h"

namespace {

const char *status_name(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS:
        return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
        return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
        return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
        return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
        return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
        return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
        return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
        return "CUBLAS_STATUS_LICENSE_ERROR";
    default:
        return "CUBLAS_STATUS_UNKNOWN";
    }
}

} // namespace

/* ---- handle -------------------------------------------------------------------------------- */

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle) {
    if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        cudaGetLastError(); /* cuBLAS reports it as its own status */
        return CUBLAS_STATUS_NOT_INITIALIZED;
    }
    *handle = new cublasContext();
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetVersion_v2(cublasHandle_t handle, int *version) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!version) return CUBLAS_STATUS_INVALID_VALUE;
    *version = CUBLAS_VERSION;
    return CUBLAS_STATUS_SUCCESS;
}

/* The header's version: like cuBLAS, it needs no handle (and no device). */
cublasStatus_t cublasGetProperty(libraryPropertyType type, int *value) {
    if (!value) return CUBLAS_STATUS_INVALID_VALUE;
    switch (type) {
    case MAJOR_VERSION:
        *value = CUBLAS_VER_MAJOR;
        return CUBLAS_STATUS_SUCCESS;
    case MINOR_VERSION:
        *value = CUBLAS_VER_MINOR;
        return CUBLAS_STATUS_SUCCESS;
    case PATCH_LEVEL:
        *value = CUBLAS_VER_PATCH;
        return CUBLAS_STATUS_SUCCESS;
    }
    return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = streamId;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t *streamId) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!streamId) return CUBLAS_STATUS_INVALID_VALUE;
    *streamId = handle->stream;
    return CUBLAS_STATUS_SUCCESS;
}

/* cuBLAS requires a workspace aligned to 256 bytes; the fake needs none but checks that. */
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace,
                                     size_t workspaceSizeInBytes) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (workspaceSizeInBytes > 0 && (!workspace || (uintptr_t)workspace % 256 != 0))
        return CUBLAS_STATUS_INVALID_VALUE;
    handle->workspace = workspace;
    handle->workspace_bytes = workspaceSizeInBytes;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t *mode) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = handle->pointer_mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE)
        return CUBLAS_STATUS_INVALID_VALUE;
    handle->pointer_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = handle->math;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    /* A base mode in the low bits, optionally the reduced-precision-reduction flag. */
    const int base = (int)mode & ~(int)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    if (base != CUBLAS_DEFAULT_MATH && base != CUBLAS_TENSOR_OP_MATH &&
        base != CUBLAS_PEDANTIC_MATH && base != CUBLAS_TF32_TENSOR_OP_MATH &&
        base != CUBLAS_FP32_EMULATED_BF16X9_MATH && base != CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH)
        return CUBLAS_STATUS_INVALID_VALUE;
    handle->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusName(cublasStatus_t status) {
    return status_name(status);
}

const char *cublasGetStatusString(cublasStatus_t status) {
    switch (status) {
    case CUBLAS_STATUS_SUCCESS:
        return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
        return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH:
        return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR:
        return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED:
        return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR:
        return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED:
        return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR:
        return "an error was detected when checking the current licensing";
    default:
        return "unknown cuBLAS status";
    }
}
