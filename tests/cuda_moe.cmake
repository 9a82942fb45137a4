# The CUDA kernels of moe/ on shapes and paths beyond the conformance test's
# (tests/test_cuda_moe.c): on a GPU or under the emulator; skipped (77) without the CUDA backend.
sluice_test(test_cuda_moe SOURCES test_cuda_moe.c LABELS "moe;emu" TIMEOUT 600)
# The atomic scatter-add of non-deterministic mode alone (`test_cuda_moe atomic`): within the
# fp32 any-order summation bound of each element's summands. Under the emulator with the race
# check off (it replays every launch in a second thread order, which float atomics fail by
# design), as test_attention_tc_atomic.
add_test(NAME test_cuda_moe_atomic COMMAND test_cuda_moe atomic)
set_tests_properties(test_cuda_moe_atomic PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "moe;emu" ENVIRONMENT "OMP_NUM_THREADS=2;SLUICE_EMU_RACECHECK=0")
