# core/: tensors, backend dispatch, core CPU kernels.
sluice_test(test_core_ops SOURCES test_core_ops.c LABELS core)
# core/rng.c: the skip and the parallel normal fill against the one-thread loop.
sluice_test(test_rng SOURCES test_rng.c LABELS core)
sluice_test(test_cuda_backend SOURCES test_cuda_backend.c LABELS "core;gpu")
add_test(NAME test_clang_format COMMAND bash ${CMAKE_SOURCE_DIR}/tests/check_format.sh)
set_tests_properties(test_clang_format PROPERTIES LABELS "style" SKIP_RETURN_CODE 77)
# core/cuda_driver.c: "no NVIDIA driver on this machine" instead of the runtime's "driver version
# is insufficient" where libcuda.so.1 is missing (sluice doctor, the cuda backend).
sluice_test(test_cuda_driver SOURCES test_cuda_driver.c LABELS core)
# core/host_memory.c: the node's free memory from /proc/meminfo and the memory cgroups (v1, v2,
# nested, hybrid) of fake hosts written under a temporary root.
sluice_test(test_host_memory SOURCES test_host_memory.c LABELS core)
