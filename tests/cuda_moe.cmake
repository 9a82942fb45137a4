# The CUDA kernels of moe/ on shapes and paths beyond the conformance test's
# (tests/test_cuda_moe.c): on a GPU or under the emulator; skipped (77) without the CUDA backend.
sluice_test(test_cuda_moe SOURCES test_cuda_moe.c LABELS "moe;emu" TIMEOUT 600)
