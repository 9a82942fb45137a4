# The CUDA kernels of core/ and trainer/ on shapes and paths beyond the conformance test's
# (tests/test_cuda_kernels.c): on a GPU or under the emulator; skipped (77) without the CUDA
# backend.
sluice_test(test_cuda_kernels SOURCES test_cuda_kernels.c LABELS core TIMEOUT 600)
