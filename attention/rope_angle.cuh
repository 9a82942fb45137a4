/*
 * attention/rope_angle.cuh - the rotation's cos and sin on the GPU, shared by attention/rope.cu
 * and attention/qk_norm_rope.cu: c = (float)(mscale cos a), s = (float)(sign mscale sin a) with
 * a = pos * inv_freq in double, the CPU twin's expressions (attention/rope_cpu.c).
 */
#ifndef SL_ROPE_ANGLE_CUH
#define SL_ROPE_ANGLE_CUH

#include "core/cuda_common.cuh"

/* cos and sin of a (double). On the GPU through sincospi(a / pi): CUDA's double cos/sin carry a
 * Payne-Hanek reduction for huge arguments that lives in local memory (40 bytes, which the build
 * rejects), while sincospi reduces exactly without it. The extra rounding of a / pi moves the
 * angle by about 1e-16 relative (1e-11 rad at a = 1.3e5), far below the float the result is
 * rounded to. The emulated build calls the C library, as the CPU twin does. */
__device__ __forceinline__ void sl_rope_cos_sin(double a, double *c, double *s) {
#ifdef SLUICE_CUDA_EMULATED
    *c = cos(a);
    *s = sin(a);
#else
    sincospi(a * 0.31830988618379067154, s, c);
#endif
}

/* The rotation of frequency i at position pos: *c, *s as above (sign -1: the backward). */
__device__ __forceinline__ void sl_rope_coef(int32_t pos, float inv_freq, float mscale, int sign,
                                             float *c, float *s) {
    const double a = (double)pos * (double)inv_freq;
    double ca, sa;
    sl_rope_cos_sin(a, &ca, &sa);
    *c = (float)(mscale * ca);
    *s = (float)(sign * mscale * sa);
}

#endif
