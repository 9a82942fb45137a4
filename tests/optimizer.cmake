# trainer/optimizer.c, lr_schedule.c, train_step.c: schedule, AdamW, the weight-decay mask and
# gradient clipping against hand-computed values, and the PyTorch AdamW reference.
sluice_test(test_optimizer SOURCES test_optimizer.c LABELS trainer TIMEOUT 120)
add_executable(dump_optimizer dump_optimizer.c)
target_link_libraries(dump_optimizer PRIVATE sluice_testutil)
add_test(NAME test_torch_optimizer
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/torch_optimizer.sh $<TARGET_FILE:dump_optimizer>
                 ${CMAKE_CURRENT_BINARY_DIR}/torch_optimizer)
set_tests_properties(test_torch_optimizer PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                     LABELS "trainer;torch" ENVIRONMENT "OMP_NUM_THREADS=2")
# How often a training step makes the host wait for the device (reads and synchronizations
# counted by the tensor layer, so the CPU build checks the budget too); the same test on the
# CUDA backend runs in the emulated build (label cuda) and on a GPU.
sluice_test(test_step_syncs SOURCES test_step_syncs.c ARGS cpu LABELS trainer TIMEOUT 120)
add_test(NAME test_step_syncs_cuda COMMAND test_step_syncs cuda)
set_tests_properties(test_step_syncs_cuda PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
                     LABELS "cuda" ENVIRONMENT "OMP_NUM_THREADS=2")
