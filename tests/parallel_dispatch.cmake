# Expert-parallel dispatch, capacity drops, a bad expert_parallel value and failure handling
# of `sluice train` under mpirun (label "parallel"). sluice_mpi_test comes from parallel.cmake.
add_executable(test_dispatcher_mpi test_dispatcher_mpi.c)
target_link_libraries(test_dispatcher_mpi PRIVATE sluice_testutil)
sluice_mpi_test(test_dispatcher_np2_ep2 2 test_dispatcher_mpi --ep 2)
sluice_mpi_test(test_dispatcher_np4_ep4 4 test_dispatcher_mpi --ep 4)
sluice_mpi_test(test_dispatcher_np4_ep2 4 test_dispatcher_mpi --ep 2)
foreach(t test_dispatcher_np2_ep2 test_dispatcher_np4_ep4 test_dispatcher_np4_ep2)
  set_tests_properties(${t} PROPERTIES TIMEOUT 120)
endforeach()

sluice_test(test_capacity_drop SOURCES test_capacity_drop.c LABELS parallel moe TIMEOUT 60)

add_test(NAME test_parallel_cli
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_parallel_cli.sh $<TARGET_FILE:sluice>
                 ${CMAKE_CURRENT_BINARY_DIR}/parallel_cli ${MPIEXEC_EXECUTABLE})
set_tests_properties(test_parallel_cli PROPERTIES TIMEOUT 300 LABELS "parallel;cli" PROCESSORS 2
                     ENVIRONMENT "${SLUICE_MPI_ENV}")
# A loss or gradient that is not finite stops `sluice train` at 1 and 2 ranks: exit 1, the
# message once, no checkpoint, metrics record or final/ of that step (tests/test_nonfinite_stop.sh).
add_test(NAME test_nonfinite_stop
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_nonfinite_stop.sh $<TARGET_FILE:sluice>
                 ${CMAKE_CURRENT_BINARY_DIR}/nonfinite_stop ${MPIEXEC_EXECUTABLE})
set_tests_properties(test_nonfinite_stop PROPERTIES TIMEOUT 120 LABELS "parallel;cli" PROCESSORS 2
                     ENVIRONMENT "${SLUICE_MPI_ENV}")
