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
# bench/adamw_bench (label cuda: the emulated build in CI, or a GPU): --check runs every form of
# trainer/adamw.cu from one state, the four AdamW forms must give the same bits and the
# bench-only "streams" form (AdamW's loads and stores without its arithmetic) must not; then
# one timed pass of every row at an odd size (a tail past the 16-byte units); a bad flag exits 2.
if(SLUICE_WITH_CUDA)
  add_test(NAME test_adamw_bench
           COMMAND bash -c "$0 --check --params 4099 && $0 --params 4099 --reps 1 | grep -c '^{' | grep -qx 6 && { $0 --reps x; test $? = 2; }"
                   $<TARGET_FILE:adamw_bench>)
  set_tests_properties(test_adamw_bench PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                       LABELS "trainer;cuda" ENVIRONMENT "OMP_NUM_THREADS=2")
endif()
# trainer/eta.c: the progress line's ETA at the last 64 steps' rate (a machine that slows down,
# an evaluation in and out of the window).
sluice_test(test_eta SOURCES test_eta.c LABELS trainer)
