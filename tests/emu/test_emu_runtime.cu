/*
 * tests/emu/test_emu_runtime.cu - the CUDA runtime of the CPU SIMT test double: the emulated
 * device, memory (NaN fill, copies of every kind, range checks, the memory cap), streams and
 * events, CUDA's error rules (last error, launch configuration errors, the dynamic shared memory
 * limit and its opt-in), pinned memory written by a kernel, dynamic shared memory poisoning.
 * Cases that need a fresh emulator (its environment is read once) run in a child process.
 */
#include <chrono>
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

#include "core/cuda_common.cuh"
#include "tests/emu/emu_test.h"

__global__ void flag_kernel(int *flag) {
    flag[threadIdx.x] = 7;
}

__global__ void scale_kernel(float *y, const float *x, float a, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}

/* Reads dynamic shared memory nobody wrote: NaN bytes. */
__global__ void smem_unwritten_kernel(float *out) {
    SL_DYNAMIC_SMEM(float, s);
    out[threadIdx.x] = s[threadIdx.x];
}

static void host_fn(void *p) {
    *(int *)p += 1;
}

static int child_case(const char *name) {
    const std::string c = name;
    if (c == "mem_limit") {
        /* SLUICE_EMU_MEM_LIMIT=1M */
        size_t free_b = 0, total = 0;
        if (cudaMemGetInfo(&free_b, &total) || total != 1024 * 1024) return 3;
        void *a = nullptr, *b = nullptr;
        if (cudaMalloc(&a, 2 * 1024 * 1024) != cudaErrorMemoryAllocation || a) return 4;
        if (cudaGetLastError() != cudaErrorMemoryAllocation) return 5;
        if (cudaGetLastError() != cudaSuccess) return 6; /* not sticky */
        if (cudaMalloc(&a, 600 * 1024) != cudaSuccess) return 7;
        if (cudaMalloc(&b, 600 * 1024) != cudaErrorMemoryAllocation) return 8;
        cudaFree(a);
        if (cudaMalloc(&b, 600 * 1024) != cudaSuccess) return 9;
        return 0;
    }
    if (c == "no_device") {
        /* SLUICE_EMU_DEVICES=0: a machine without a GPU */
        int n = -1;
        if (cudaGetDeviceCount(&n) != cudaErrorNoDevice || n != 0) return 3;
        cudaDeviceProp p;
        return cudaGetDeviceProperties(&p, 0) == cudaErrorNoDevice ? 0 : 4;
    }
    if (c == "three_devices") {
        /* SLUICE_EMU_DEVICES=3: three devices, each its own identity; the current device is
         * the calling thread's */
        int n = -1, dev = -1;
        if (cudaGetDeviceCount(&n) != cudaSuccess || n != 3) return 3;
        if (cudaSetDevice(2) != cudaSuccess || cudaGetDevice(&dev) != cudaSuccess || dev != 2)
            return 4;
        if (cudaSetDevice(3) != cudaErrorInvalidDevice) return 5;
        (void)cudaGetLastError();
        char bus[3][32];
        cudaDeviceProp p[3];
        for (int d = 0; d < 3; d++)
            if (cudaDeviceGetPCIBusId(bus[d], sizeof bus[d], d) != cudaSuccess ||
                cudaGetDeviceProperties(&p[d], d) != cudaSuccess || p[d].pciBusID != 0x10 + d)
                return 6;
        if (strcmp(bus[1], "0000:11:00.0") != 0) return 7;
        for (int d = 1; d < 3; d++)
            if (strcmp(bus[d], bus[0]) == 0 || memcmp(p[d].uuid.bytes, p[0].uuid.bytes, 16) == 0)
                return 8;
        return cudaDeviceGetPCIBusId(bus[0], sizeof bus[0], 3) == cudaErrorInvalidDevice ? 0 : 9;
    }
    return 2;
}

int main(int argc, char **argv) {
    if (argc > 1) return child_case(argv[1]);

    /* The device. */
    {
        int n = 0, dev = -1;
        CUDA_CHECK(cudaGetDeviceCount(&n));
        CHECK(n == 1, "one emulated device, got %d", n);
        CUDA_CHECK(cudaSetDevice(0));
        CUDA_CHECK(cudaGetDevice(&dev));
        CHECK(cudaSetDevice(1) == cudaErrorInvalidDevice, "device 1 does not exist");
        CHECK(cudaGetLastError() == cudaErrorInvalidDevice, "the failed call set the last error");
        CHECK(cudaGetLastError() == cudaSuccess, "cudaGetLastError resets it");
        cudaDeviceProp p;
        CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
        CHECK(strstr(p.name, "sluice SIMT emulator") != nullptr, "name: %s", p.name);
        /* the identity comes from the host name and the ordinal: the same every call (and in
         * every process of this host) */
        char bus[32] = "";
        cudaDeviceProp p2;
        CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, 0));
        CUDA_CHECK(cudaGetDeviceProperties(&p2, 0));
        CHECK(strcmp(bus, "0000:10:00.0") == 0 && p.pciBusID == 0x10, "PCI bus id %s", bus);
        CHECK(memcmp(p.uuid.bytes, p2.uuid.bytes, 16) == 0, "the UUID is stable");
        CHECK(p.major == 9 && p.minor == 0 && p.multiProcessorCount == 132 &&
                  p.maxThreadsPerBlock == 1024 && p.warpSize == 32 &&
                  p.sharedMemPerBlock == 49152 && p.sharedMemPerBlockOptin == 232448 &&
                  p.maxGridSize[1] == 65535,
              "H100-like properties");
        int v = 0;
        CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
        CHECK(v == 232448, "opt-in shared memory attribute %d", v);
        CHECK(strcmp(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory") == 0 &&
                  strcmp(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue") == 0,
              "error strings");
    }
    /* Memory. */
    {
        size_t free0 = 0, free1 = 0, total = 0;
        CUDA_CHECK(cudaMemGetInfo(&free0, &total));
        float *d = nullptr, *d2 = nullptr;
        CUDA_CHECK(cudaMalloc((void **)&d, 1000 * 4));
        CUDA_CHECK(cudaMalloc((void **)&d2, 1000 * 4));
        CHECK((uintptr_t)d % 256 == 0, "256-byte aligned like cudaMalloc");
        CUDA_CHECK(cudaMemGetInfo(&free1, &total));
        CHECK(free0 - free1 == 8000, "cudaMemGetInfo counts allocations: %zu", free0 - free1);
        std::vector<float> h(1000), back(1000);
        CUDA_CHECK(cudaMemcpy(back.data(), d, 4000, cudaMemcpyDeviceToHost));
        CHECK(std::isnan(back[0]) && std::isnan(back[999]), "fresh device memory reads as NaN");
        for (int i = 0; i < 1000; i++) h[i] = (float)i;
        CUDA_CHECK(cudaMemcpy(d, h.data(), 4000, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(d2, d, 4000, cudaMemcpyDeviceToDevice));
        CUDA_CHECK(cudaMemcpy(back.data(), d2, 4000, cudaMemcpyDefault));
        CHECK(memcmp(back.data(), h.data(), 4000) == 0, "host -> device -> device -> host");
        CUDA_CHECK(cudaMemset(d2 + 10, 0, 8));
        CUDA_CHECK(cudaMemcpy(back.data(), d2, 4000, cudaMemcpyDeviceToHost));
        CHECK(back[9] == 9.0f && back[10] == 0.0f && back[11] == 0.0f && back[12] == 12.0f,
              "cudaMemset of a range");
        CHECK(cudaMemcpy(d, h.data(), 4004, cudaMemcpyHostToDevice) == cudaErrorInvalidValue,
              "a copy running past the allocation is refused");
        CHECK(cudaMemcpy(back.data(), d + 1, 4000, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue,
              "a copy from inside the allocation past its end is refused");
        CHECK(cudaMemcpy(d, d2, 4, cudaMemcpyHostToDevice) == cudaErrorInvalidValue,
              "device memory as the host side of a copy is refused");
        CHECK(cudaMemcpy(h.data(), back.data(), 4, cudaMemcpyHostToDevice) == cudaErrorInvalidValue,
              "host memory as the device side of a copy is refused");
        CHECK(cudaMemset(d, 0, 4001) == cudaErrorInvalidValue, "memset past the end is refused");
        CHECK(cudaFree(d + 1) == cudaErrorInvalidValue, "cudaFree of an inner pointer");
        CUDA_CHECK(cudaFree(nullptr));
        CUDA_CHECK(cudaFree(d));
        CHECK(cudaFree(d) == cudaErrorInvalidValue, "a second cudaFree is refused");
        cudaGetLastError();
        CUDA_CHECK(cudaFree(d2));
    }
    /* Streams, events, host functions. */
    {
        cudaStream_t s;
        CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        float *d = nullptr;
        CUDA_CHECK(cudaMallocAsync((void **)&d, 64, s));
        CUDA_CHECK(cudaMemsetAsync(d, 0, 64, s));
        cudaEvent_t a, b, nt;
        CUDA_CHECK(cudaEventCreate(&a));
        CUDA_CHECK(cudaEventCreate(&b));
        CUDA_CHECK(cudaEventCreateWithFlags(&nt, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventRecord(a, s));
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        CUDA_CHECK(cudaEventRecord(b, s));
        CUDA_CHECK(cudaEventRecord(nt, s));
        CUDA_CHECK(cudaStreamWaitEvent(s, nt, 0));
        CUDA_CHECK(cudaEventSynchronize(b));
        CUDA_CHECK(cudaEventQuery(b));
        float ms = -1;
        CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        CHECK(ms >= 19.0f && ms < 2000.0f, "elapsed time between events: %g ms", ms);
        CHECK(cudaEventElapsedTime(&ms, a, nt) == cudaErrorInvalidResourceHandle,
              "no timing from an event created with cudaEventDisableTiming");
        int counter = 0;
        CUDA_CHECK(cudaLaunchHostFunc(s, host_fn, &counter));
        CHECK(counter == 1, "a host function runs when enqueued");
        CUDA_CHECK(cudaStreamSynchronize(s));
        CUDA_CHECK(cudaFreeAsync(d, s));
        CUDA_CHECK(cudaEventDestroy(a));
        CUDA_CHECK(cudaEventDestroy(b));
        CUDA_CHECK(cudaEventDestroy(nt));
        CUDA_CHECK(cudaStreamDestroy(s));
        CHECK(cudaStreamSynchronize(s) == cudaErrorInvalidResourceHandle,
              "a destroyed stream is an invalid handle");
        cudaGetLastError();
    }
    /* Launch configuration errors: nothing runs, the error goes to cudaGetLastError. */
    {
        int *flag;
        CUDA_CHECK(cudaMalloc((void **)&flag, 4 * 1024));
        CUDA_CHECK(cudaMemset(flag, 0, 4 * 1024));
        SL_LAUNCH(flag_kernel, 1, 1025, 0, 0, flag);
        CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "1025 threads per block");
        SL_LAUNCH(flag_kernel, dim3(1, 65536), 32, 0, 0, flag);
        CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "gridDim.y 65536");
        SL_LAUNCH(flag_kernel, 0, 32, 0, 0, flag);
        CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "an empty grid");
        SL_LAUNCH(flag_kernel, 1, dim3(2, 2, 65), 0, 0, flag);
        CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "blockDim.z 65");
        SL_LAUNCH(flag_kernel, 1, 32, 49153, 0, flag);
        CHECK(cudaPeekAtLastError() == cudaErrorInvalidValue,
              "48 KiB + 1 of dynamic shared memory without the opt-in");
        CHECK(cudaPeekAtLastError() == cudaErrorInvalidValue, "cudaPeekAtLastError keeps it");
        cudaGetLastError();
        cudaStream_t bogus = (cudaStream_t)&flag;
        SL_LAUNCH(flag_kernel, 1, 32, 0, bogus, flag);
        CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle, "an unknown stream");
        int h[32];
        CUDA_CHECK(cudaMemcpy(h, flag, sizeof h, cudaMemcpyDeviceToHost));
        CHECK(h[0] == 0, "no rejected launch ran");
        CUDA_CHECK(
            cudaFuncSetAttribute(flag_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 60000));
        SL_LAUNCH(flag_kernel, 1, 32, 60000, 0, flag);
        CUDA_CHECK(cudaGetLastError());
        SL_LAUNCH(flag_kernel, 1, 32, 60001, 0, flag);
        CHECK(cudaGetLastError() == cudaErrorInvalidValue, "above the raised limit");
        CHECK(cudaFuncSetAttribute(flag_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   232449) == cudaErrorInvalidValue,
              "227 KiB is the most a block can opt into");
        cudaGetLastError();
        CUDA_CHECK(cudaMemcpy(h, flag, sizeof h, cudaMemcpyDeviceToHost));
        CHECK(h[0] == 7 && h[31] == 7, "the accepted launch ran");
        cudaFree(flag);
    }
    /* A kernel writing into mapped pinned memory (checked under both thread orders too). */
    {
        float *ph = nullptr, *pd = nullptr, *x = nullptr;
        CUDA_CHECK(cudaHostAlloc((void **)&ph, 100 * 4, cudaHostAllocMapped));
        CUDA_CHECK(cudaHostGetDevicePointer((void **)&pd, ph, 0));
        CUDA_CHECK(cudaMalloc((void **)&x, 100 * 4));
        std::vector<float> h(100);
        for (int i = 0; i < 100; i++) h[i] = (float)i;
        CUDA_CHECK(cudaMemcpy(x, h.data(), 400, cudaMemcpyHostToDevice));
        SL_LAUNCH(scale_kernel, 2, 64, 0, 0, pd, x, 3.0f, 100);
        CUDA_CHECK(cudaGetLastError());
        CHECK(ph[0] == 0.0f && ph[99] == 297.0f, "pinned results %g %g", ph[0], ph[99]);
        cudaPointerAttributes at;
        CUDA_CHECK(cudaPointerGetAttributes(&at, x));
        CHECK(at.type == cudaMemoryTypeDevice, "device pointer attributes");
        CUDA_CHECK(cudaPointerGetAttributes(&at, ph));
        CHECK(at.type == cudaMemoryTypeHost, "pinned pointer attributes");
        CUDA_CHECK(cudaFreeHost(ph));
        CUDA_CHECK(cudaFree(x));
    }
    /* Dynamic shared memory starts as NaN in every block. */
    {
        float *out;
        CUDA_CHECK(cudaMalloc((void **)&out, 32 * 4));
        SL_LAUNCH(smem_unwritten_kernel, 1, 32, 32 * 4, 0, out);
        CUDA_CHECK(cudaGetLastError());
        float h[32];
        CUDA_CHECK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
        CHECK(std::isnan(h[0]) && std::isnan(h[31]), "unwritten dynamic shared memory is NaN");
        cudaFree(out);
    }
    /* Cases with their own environment. */
    {
        const char *env[] = {"SLUICE_EMU_MEM_LIMIT=1M", nullptr};
        const emu_child r = emu_run_child(argv[0], "mem_limit", env);
        CHECK(r.exited && r.code == 0, "SLUICE_EMU_MEM_LIMIT caps device memory: exit %d %s",
              r.code, r.err.c_str());
        const char *env0[] = {"SLUICE_EMU_DEVICES=0", nullptr};
        const emu_child r0 = emu_run_child(argv[0], "no_device", env0);
        CHECK(r0.exited && r0.code == 0, "SLUICE_EMU_DEVICES=0: no device: exit %d %s", r0.code,
              r0.err.c_str());
        const char *env3[] = {"SLUICE_EMU_DEVICES=3", nullptr};
        const emu_child r3 = emu_run_child(argv[0], "three_devices", env3);
        CHECK(r3.exited && r3.code == 0, "SLUICE_EMU_DEVICES=3: three devices: exit %d %s", r3.code,
              r3.err.c_str());
    }
    return emu_finish("test_emu_runtime");
}
