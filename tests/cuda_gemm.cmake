# The CUDA GEMM launchers' edge paths against a double loop; runs wherever the CUDA backend is
# built and starts (the emulated build in CI), skipped elsewhere.
sluice_test(test_cuda_gemm SOURCES test_cuda_gemm.c LABELS "core;emu")
