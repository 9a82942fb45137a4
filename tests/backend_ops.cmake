# The backend conformance test (tests/test_backend_ops.c, the cases in backends/conformance*.c):
# every sl_ops_i operation on the backend under test against the reference. It reads
# core/backend_impl.h to name a slot that has no conformance case.
sluice_test(test_backend_ops SOURCES test_backend_ops.c LABELS core TIMEOUT 120)
target_compile_definitions(test_backend_ops PRIVATE SLUICE_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
# The same cases on the CUDA backend against the CPU, in fp32 and in bf16, every operation
# required: in the emulated build (label cuda; label asan: also in the sanitizer build) and on a
# GPU; skipped (77) without a CUDA backend.
foreach(dt f32 bf16)
  add_test(NAME test_backend_ops_cuda_${dt} COMMAND test_backend_ops cuda --require-all)
  set_tests_properties(test_backend_ops_cuda_${dt} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                       LABELS "core;cuda;asan" ENVIRONMENT "OMP_NUM_THREADS=2;SLUICE_TEST_DTYPE=${dt}")
endforeach()
# The harness must fail when an operation's result is wrong: SLUICE_TEST_PERTURB moves
# scatter_add_rows' first output element (on the CPU against the double references), and the
# run must report exactly that operation failed (its exit status is then 1; the expression
# decides).
add_test(NAME test_backend_ops_perturbed COMMAND test_backend_ops cpu)
set_tests_properties(test_backend_ops_perturbed PROPERTIES TIMEOUT 120 LABELS "core"
                     ENVIRONMENT "OMP_NUM_THREADS=2;SLUICE_TEST_PERTURB=scatter_add_rows"
                     PASS_REGULAR_EXPRESSION "FAIL  scatter_add_rows .* operations: [0-9]+ OK, 1 failed, 0 not implemented")
