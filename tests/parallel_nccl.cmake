# The NCCL transport (core/comm_nccl.c): built with the CUDA backend; in the emulated build NCCL
# is the fake over MPI in emu/, so these run under mpirun in CI. Label cuda: tests/run.sh runs
# them in the emulated build.
if(SLUICE_WITH_CUDA)
  add_executable(test_comm_nccl test_comm_nccl.c)
  target_link_libraries(test_comm_nccl PRIVATE sluice_testutil)
  # sluice_nccl_test(NAME NP TARGET ARGS...): sluice_mpi_test (tests/parallel.cmake) for a test
  # of the cuda backend (skips with 77 where there is no device).
  function(sluice_nccl_test name np target)
    sluice_mpi_test(${name} ${np} ${target} ${ARGN})
    set_tests_properties(${name} PROPERTIES LABELS "parallel;cuda" SKIP_RETURN_CODE 77 TIMEOUT 120)
  endfunction()
  sluice_nccl_test(test_comm_nccl_np1 1 test_comm_nccl)
  sluice_nccl_test(test_comm_nccl_np2 2 test_comm_nccl)
  sluice_nccl_test(test_comm_nccl_np4 4 test_comm_nccl)
endif()
