# The backend conformance test (tests/test_backend_ops.c): every sl_ops_i operation on the
# backend under test against the reference. It reads core/backend_impl.h to name a slot that
# has no conformance case.
sluice_test(test_backend_ops SOURCES test_backend_ops.c LABELS core TIMEOUT 120)
target_compile_definitions(test_backend_ops PRIVATE SLUICE_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
# The same cases on the CUDA backend against the CPU; skipped (77) in a build or on a machine
# without it.
add_test(NAME test_backend_ops_cuda COMMAND test_backend_ops cuda)
set_tests_properties(test_backend_ops_cuda PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "core;gpu" ENVIRONMENT "OMP_NUM_THREADS=2")
