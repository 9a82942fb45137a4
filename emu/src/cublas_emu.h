/*
 * emu/src/cublas_emu.h - the handle of the emulator's cuBLAS (a cublasContext), shared by
 * cublas_emu.cc (the handle and its settings) and cublas_emu_gemm.cc (the GEMMs).
 */
#ifndef SL_EMU_CUBLAS_EMU_H
#define SL_EMU_CUBLAS_EMU_H

#include <cstddef>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

struct cublasContext {
    cudaStream_t stream = nullptr;
    cublasMath_t math = CUBLAS_DEFAULT_MATH;
    cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
    void *workspace = nullptr;
    size_t workspace_bytes = 0;
};

#endif
