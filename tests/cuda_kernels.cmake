# The CUDA kernels of core/ and trainer/ on shapes and paths beyond the conformance test's
# (tests/test_cuda_kernels.c): on a GPU or under the emulator; skipped (77) without the CUDA
# backend.
sluice_test(test_cuda_kernels SOURCES test_cuda_kernels.c LABELS "core;cuda" TIMEOUT 600)
# The embedding backward's atomic variant alone (`test_cuda_kernels atomic`), within the fp32
# any-order summation bound of its summands; under the emulator with the race check off (float
# atomics differ between thread orders by design), as test_cuda_moe_atomic.
add_test(NAME test_cuda_kernels_atomic COMMAND test_cuda_kernels atomic)
set_tests_properties(test_cuda_kernels_atomic PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "core;cuda" ENVIRONMENT "OMP_NUM_THREADS=2;SLUICE_EMU_RACECHECK=0")
