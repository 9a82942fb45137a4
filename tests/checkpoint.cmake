# io/checkpoint*.c: sharded crash-safe checkpoints (label "checkpoint"). test_checkpoint acts as
# several ranks in one process; test_checkpoint_torture kills a saving child with SIGKILL at
# random moments; the MPI tests write with 4 and 2 real ranks and read at other world sizes.
sluice_test(test_checkpoint SOURCES test_checkpoint.c checkpoint_model.c LABELS checkpoint io
            ARGS ${CMAKE_CURRENT_BINARY_DIR}/checkpoint_work TIMEOUT 120)
add_test(NAME test_checkpoint_torture
         COMMAND test_checkpoint --torture 30 ${CMAKE_CURRENT_BINARY_DIR}/checkpoint_torture)
set_tests_properties(test_checkpoint_torture PROPERTIES TIMEOUT 240 LABELS "checkpoint;io"
                     ENVIRONMENT "OMP_NUM_THREADS=1")
