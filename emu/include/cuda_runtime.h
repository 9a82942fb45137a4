/*
 * emu/include/cuda_runtime.h - what a .cu file includes, in the emulated build (emu/README.md).
 *
 * The emulated build puts emu/include before the CUDA toolkit's include directory, so
 * `#include <cuda_runtime.h>` lands here. The toolkit's own header comes first (through
 * #include_next): it declares the runtime API (cudaMalloc, cudaMemcpy, streams, events, error
 * codes, cudaDeviceProp, dim3) with the exact signatures emu/src implements, and its host-side
 * C++ templates (cudaMalloc<T>, ...). What nvcc adds on top - the device-side language - comes
 * from sl_emu_device.h. nvcc includes cuda_runtime.h implicitly in every .cu file; the emulated
 * build does the same with `-include cuda_runtime.h`.
 */
#ifndef SL_EMU_CUDA_RUNTIME_H
#define SL_EMU_CUDA_RUNTIME_H

#include_next <cuda_runtime.h>

/* C files include this too, through nccl.h (core/comm_nccl.c): they get the runtime API only,
 * the device language is C++. */
#ifdef __cplusplus
#include "sl_emu_device.h"
#endif

#endif
