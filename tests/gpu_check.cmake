# The one-call GPU check (bench/gpu_check.sh; tests/test_gpu_check.sh): its plumbing in the
# emulated build at tiny shapes (label cuda and bundle): from a bundle made with --with-tests,
# every part listed with its status; failing parts reported FAIL with exit 1.
if(SLUICE_CUDA_EMULATED)
  add_test(NAME test_gpu_check
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_gpu_check.sh ${CMAKE_SOURCE_DIR}
                   ${CMAKE_BINARY_DIR} ${CMAKE_CURRENT_BINARY_DIR}/gpu_check
                   $<TARGET_FILE:sluice> $<TARGET_FILE:gpu_train_bench> $<TARGET_FILE:attn_bench>)
  # it runs test_profile_cuda's command itself, in that test's work directory (from the build
  # tree): never at the same time as that test (one removed the other's output once, in CI)
  set_tests_properties(test_gpu_check PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
                       LABELS "cuda;bundle" ENVIRONMENT "OMP_NUM_THREADS=2"
                       RESOURCE_LOCK profile_cuda_work)
endif()
