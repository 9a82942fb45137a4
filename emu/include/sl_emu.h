/*
 * emu/include/sl_emu.h - launching a kernel on the CPU SIMT test double (emu/README.md).
 *
 * core/cuda_common.cuh maps its two non-C++ constructs here in the emulated build:
 *   SL_LAUNCH(kernel, grid, block, smem, stream, args...)
 *       -> sl_emu_launch(#kernel, kernel, grid, block, smem, stream, args...)
 *   SL_DYNAMIC_SMEM(type, name) -> type *name = (type *)sl_emu_dynamic_smem()
 *
 * sl_emu_launch converts the arguments to the kernel's parameter types as a call would,
 * captures them by value (a kernel's parameters are copies, as on the GPU), validates the
 * configuration the way CUDA does (the error goes to cudaGetLastError) and runs the grid to
 * completion before returning: streams are synchronous.
 */
#ifndef SL_EMU_H
#define SL_EMU_H

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include <cuda_runtime.h>

namespace sl_emu {

struct launch_desc {
    const char *name;   /* the kernel's expression as written at SL_LAUNCH */
    const void *kernel; /* identity for cudaFuncSetAttribute's limits */
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    void (*invoke)(const void *closure); /* runs the kernel body for the current thread */
    const void *closure;
    const void *arg_bytes; /* the captured arguments' bytes: pointers in them are scanned */
    size_t arg_size;
};
void launch(const launch_desc &d);

template <class... P> struct closure {
    void (*kernel)(P...);
    std::tuple<P...> args;
    static void invoke(const void *c) {
        const closure *self = static_cast<const closure *>(c);
        std::apply(self->kernel, self->args);
    }
};
/* Implicit conversion to the parameter type, exactly as in a function call. */
template <class T> inline T convert_arg(T v) {
    return v;
}

} // namespace sl_emu

template <class... P, class... A>
inline void sl_emu_launch(const char *name, void (*kernel)(P...), dim3 grid, dim3 block,
                          size_t smem, cudaStream_t stream, A &&...args) {
    static_assert(sizeof...(P) == sizeof...(A),
                  "SL_LAUNCH: the number of arguments differs from the kernel's parameters");
    const sl_emu::closure<P...> c{
        kernel, std::tuple<P...>(sl_emu::convert_arg<P>(std::forward<A>(args))...)};
    sl_emu::launch_desc d;
    d.name = name;
    d.kernel = (const void *)kernel;
    d.grid = grid;
    d.block = block;
    d.smem = smem;
    d.stream = stream;
    d.invoke = &sl_emu::closure<P...>::invoke;
    d.closure = &c;
    d.arg_bytes = &c.args;
    d.arg_size = sizeof c.args;
    sl_emu::launch(d);
}

/* The running block's dynamic shared memory (the launch's `smem` bytes, 16-byte aligned). */
void *sl_emu_dynamic_smem();

/* Declares that `kernel`'s blocks wait for blocks of lower index (a spin on a counter that
 * earlier blocks advance, which the GPU's launch order in index order allows, and which hangs
 * when the earlier block has not run). Its launches then run their blocks in index order in
 * every order of the race check, which permutes only the threads within each block. */
void sl_emu_blocks_in_order(const void *kernel);

#endif
