# The CUDA backend end to end (tests/test_cuda_train.sh): training on backend cuda matches the
# CPU backend, fp32 and bf16, one rank and two ranks with expert parallelism. Label `cuda`:
# runs in the emulated build (-DSLUICE_CUDA=EMULATED) and on a GPU; skipped (77) elsewhere.
add_test(NAME test_cuda_train
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_cuda_train.sh $<TARGET_FILE:sluice>
                 ${CMAKE_CURRENT_BINARY_DIR}/cuda_train ${MPIEXEC_EXECUTABLE})
set_tests_properties(test_cuda_train PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77 LABELS "cuda"
                     ENVIRONMENT "OMP_NUM_THREADS=2")
# A 15A2B-shaped smoke test (2 layers, seq 4096, 20 steps in fp32 and in bf16: the two agree
# at first and both learn; tests/test_gpu_smoke.sh) on a real GPU only (label gpu). Its tiny twin runs
# the same steps and checks at tiny widths on any CUDA backend: the emulated build in CI (label
# cuda), so the test's logic runs there too.
add_test(NAME test_gpu_smoke
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_gpu_smoke.sh $<TARGET_FILE:sluice>
                 ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/gpu_smoke
                 $<IF:$<BOOL:${SLUICE_CUDA_EMULATED}>,emulated,gpu>)
set_tests_properties(test_gpu_smoke PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77 LABELS "gpu")
add_test(NAME test_gpu_smoke_tiny
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_gpu_smoke.sh $<TARGET_FILE:sluice>
                 ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/gpu_smoke_tiny tiny)
# The race check is off for it (the kernels' races are other tests' concern): seconds, not a
# minute.
set_tests_properties(test_gpu_smoke_tiny PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "cuda"
                     ENVIRONMENT "OMP_NUM_THREADS=2;SLUICE_EMU_RACECHECK=0")
# The Hopper attention kernel in training (tests/test_attention_sm90_train.sh): a few bf16 steps
# with it agree with the mma.sync kernel's; label cuda (the emulated build runs it).
add_test(NAME test_attention_sm90_train
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_attention_sm90_train.sh $<TARGET_FILE:sluice>
                 ${CMAKE_CURRENT_BINARY_DIR}/attention_sm90_train)
set_tests_properties(test_attention_sm90_train PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
                     LABELS "attention;cuda" ENVIRONMENT "OMP_NUM_THREADS=2;SLUICE_EMU_RACECHECK=0")
# The CUDA compiler launcher (cmake/nvcc_resource_usage.sh) with a stand-in nvcc: resource lines
# into the report, and ptxas's C75xx advisories (a wgmma serialized) failing the compile.
add_test(NAME test_nvcc_wrapper
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_nvcc_wrapper.sh ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/nvcc_wrapper)
set_tests_properties(test_nvcc_wrapper PROPERTIES TIMEOUT 60 LABELS "cuda;emu")
