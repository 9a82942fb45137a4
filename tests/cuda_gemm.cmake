# The CUDA GEMM launchers' edge paths against a double loop; runs wherever the CUDA backend is
# built and starts (the emulated build in CI), skipped elsewhere.
sluice_test(test_cuda_gemm SOURCES test_cuda_gemm.c LABELS "core;emu")
# The SM clock read through NVML between a benchmark's passes (core/cuda_clock.h): the reasons'
# names everywhere, a clock read on a GPU, the emulated build's refusal. Built with the CUDA
# backend only.
if(SLUICE_WITH_CUDA)
  sluice_test(test_cuda_clock SOURCES test_cuda_clock.c LABELS "core;cuda")
endif()
