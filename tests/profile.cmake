# The step profile (core/profile.h, core/profile_table.h; tests/test_profile.sh): every
# expected row present, the rows adding up to the step's wall time within 5%, the host reads
# attributed. On the cuda backend through gpu_train_bench (label cuda: the emulated build in
# CI; a GPU build runs it on the GPU), and on the CPU backend through bench_train.
if(SLUICE_WITH_CUDA)
  add_test(NAME test_profile_cuda
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_profile.sh cuda
                   $<TARGET_FILE:gpu_train_bench> ${CMAKE_SOURCE_DIR}
                   ${CMAKE_CURRENT_BINARY_DIR}/profile_cuda
                   $<IF:$<BOOL:${SLUICE_CUDA_EMULATED}>,emulated,gpu>)
  set_tests_properties(test_profile_cuda PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                       LABELS "cuda;profile" ENVIRONMENT "OMP_NUM_THREADS=2;SLUICE_EMU_RACECHECK=0"
                       RESOURCE_LOCK profile_cuda_work) # test_gpu_check runs it too
endif()
add_test(NAME test_profile_cpu
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_profile.sh cpu $<TARGET_FILE:bench_train>
                 ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/profile_cpu)
set_tests_properties(test_profile_cpu PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "profile" ENVIRONMENT "OMP_NUM_THREADS=2")
# `sluice train --profile` (tests/test_train_profile.sh): the profile of a training run, its
# window, its metrics event, its flags' errors and two ranks on the CPU backend; the same table
# from CUDA events on the cuda backend (label cuda: the emulated build in CI; skipped (77) in a
# GPU build on a machine without a GPU).
add_test(NAME test_train_profile
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_train_profile.sh cpu $<TARGET_FILE:sluice>
                 ${CMAKE_CURRENT_BINARY_DIR}/train_profile ${MPIEXEC_EXECUTABLE})
set_tests_properties(test_train_profile PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "profile;cli" ENVIRONMENT "OMP_NUM_THREADS=2")
if(SLUICE_WITH_CUDA)
  add_test(NAME test_train_profile_cuda
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_train_profile.sh cuda
                   $<TARGET_FILE:sluice> ${CMAKE_CURRENT_BINARY_DIR}/train_profile_cuda
                   ${MPIEXEC_EXECUTABLE})
  set_tests_properties(test_train_profile_cuda PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                       LABELS "cuda;profile" ENVIRONMENT "OMP_NUM_THREADS=2;SLUICE_EMU_RACECHECK=0")
endif()
# bench/profile_diff.py (tests/test_profile_diff.sh): two profiles side by side, row by row.
add_test(NAME test_profile_diff
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_profile_diff.sh ${CMAKE_SOURCE_DIR}
                 $<TARGET_FILE:sluice> ${CMAKE_CURRENT_BINARY_DIR}/profile_diff)
set_tests_properties(test_profile_diff PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                     LABELS "profile;bench" ENVIRONMENT "OMP_NUM_THREADS=1")
# gpu_train_bench --estimate (tests/test_gpu_train_bench_estimate.sh): the layer count and the
# parked expert rows of pairs and groups of 4, without a GPU.
if(SLUICE_WITH_CUDA)
  add_test(NAME test_gpu_train_bench_estimate
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_gpu_train_bench_estimate.sh
                   $<TARGET_FILE:gpu_train_bench> ${CMAKE_SOURCE_DIR})
  set_tests_properties(test_gpu_train_bench_estimate PROPERTIES TIMEOUT 60 LABELS "profile;plan")
endif()
