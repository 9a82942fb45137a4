# io/checkpoint*.c: sharded crash-safe checkpoints (label "checkpoint"). test_checkpoint acts as
# several ranks in one process; test_checkpoint_torture kills a saving child with SIGKILL at
# random moments; the MPI tests write with 4 and 2 real ranks and read at other world sizes.
sluice_test(test_checkpoint SOURCES test_checkpoint.c test_checkpoint_tamper.c
            test_checkpoint_torture.c checkpoint_model.c LABELS checkpoint io
            ARGS ${CMAKE_CURRENT_BINARY_DIR}/checkpoint_work TIMEOUT 120)
add_test(NAME test_checkpoint_torture
         COMMAND test_checkpoint --torture 30 ${CMAKE_CURRENT_BINARY_DIR}/checkpoint_torture)
set_tests_properties(test_checkpoint_torture PROPERTIES TIMEOUT 240 LABELS "checkpoint;io"
                     ENVIRONMENT "OMP_NUM_THREADS=1")
# Real parallel writes: 4 and 2 MPI ranks (the environment of tests/parallel.cmake, which is
# included after this file).
add_executable(test_checkpoint_mpi test_checkpoint_mpi.c checkpoint_model.c)
target_link_libraries(test_checkpoint_mpi PRIVATE sluice_testutil)
foreach(np 2 4)
  add_test(NAME test_checkpoint_mpi_np${np}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe
                   $<TARGET_FILE:test_checkpoint_mpi> ${CMAKE_CURRENT_BINARY_DIR}/checkpoint_mpi)
  set_tests_properties(test_checkpoint_mpi_np${np} PROPERTIES TIMEOUT 120
    LABELS "checkpoint;io;parallel" PROCESSORS ${np}
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OMPI_MCA_rmaps_base_oversubscribe=1")
endforeach()
# `sluice ckpt info | verify | export`; the exports are read back with /usr/bin/python3 +
# PyTorch (a missing PyTorch fails under CI=true, tests/skip_or_fail.sh).
add_test(NAME test_checkpoint_cli
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_checkpoint_cli.sh $<TARGET_FILE:sluice>
                 $<TARGET_FILE:test_checkpoint> ${CMAKE_CURRENT_BINARY_DIR}/checkpoint_cli
                 ${PROJECT_SOURCE_DIR}/configs/tiny.json)
set_tests_properties(test_checkpoint_cli PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                     LABELS "checkpoint;io;cli")
# libFuzzer harness for the manifest, COMMIT and train-state parsers and the coverage index,
# under ASan+UBSan, bounded like the shard parser's (test_io_fuzz); SLUICE_FUZZ_SECONDS
# overrides the 20 s.
add_test(NAME test_checkpoint_fuzz
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/run_fuzz_ckpt.sh ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/fuzz_ckpt_work $<TARGET_FILE:test_checkpoint> 20)
set_tests_properties(test_checkpoint_fuzz PROPERTIES TIMEOUT 240 SKIP_RETURN_CODE 77
                     LABELS "checkpoint;io;fuzz")
