# Expert and data parallelism over MPI: equivalence with the single-process run, dispatch,
# launch and failure handling. Each case runs under mpirun with 1-4 ranks.
# The setup shared by the distributed-training tests (tests/parallel_run.h); also
# test_moe_overlap and test_defer_wgrad (tests/parallel_overlap.cmake).
add_library(sluice_parallel_run STATIC parallel_run.c)
target_link_libraries(sluice_parallel_run PUBLIC sluice_testutil)
add_executable(test_parallel_equivalence test_parallel_equivalence.c)
target_link_libraries(test_parallel_equivalence PRIVATE sluice_parallel_run)

set(SLUICE_MPI_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OMPI_MCA_rmaps_base_oversubscribe=1")

# sluice_mpi_test(NAME NP TARGET ARGS...)
function(sluice_mpi_test name np target)
  add_test(NAME ${name}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe
                   $<TARGET_FILE:${target}> ${ARGN})
  set_tests_properties(${name} PROPERTIES TIMEOUT 300 LABELS "parallel" PROCESSORS ${np}
                       ENVIRONMENT "${SLUICE_MPI_ENV}")
endfunction()

# sluice_nccl_test(NAME NP TARGET ARGS...): sluice_mpi_test for a test of the cuda backend
# (tests/parallel_nccl.cmake, parallel_overlap.cmake; skips with 77 where there is no device).
# In the emulated build every rank gets an emulated device of its own (SLUICE_EMU_DEVICES =
# NP; the backend picks the local rank's), as NCCL needs one GPU per rank.
function(sluice_nccl_test name np target)
  sluice_mpi_test(${name} ${np} ${target} ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS "parallel;cuda" SKIP_RETURN_CODE 77 TIMEOUT 120
                       ENVIRONMENT "${SLUICE_MPI_ENV};SLUICE_EMU_DEVICES=${np}")
endfunction()

sluice_mpi_test(test_parallel_np1_ep1 1 test_parallel_equivalence --ep 1)
sluice_mpi_test(test_parallel_np2_ep1 2 test_parallel_equivalence --ep 1)
sluice_mpi_test(test_parallel_np2_ep2 2 test_parallel_equivalence --ep 2)
sluice_mpi_test(test_parallel_np4_ep1 4 test_parallel_equivalence --ep 1)
sluice_mpi_test(test_parallel_np4_ep2 4 test_parallel_equivalence --ep 2)
sluice_mpi_test(test_parallel_np4_ep4 4 test_parallel_equivalence --ep 4)
sluice_mpi_test(test_parallel_np2_ep2_zero1 2 test_parallel_equivalence --ep 2 --zero1)
sluice_mpi_test(test_parallel_np4_ep2_zero1 4 test_parallel_equivalence --ep 2 --zero1)
sluice_mpi_test(test_parallel_np4_ep4_capacity 4 test_parallel_equivalence --ep 4 --capacity 1.0)
# the memory modes under expert parallelism 2 (tests/test_recompute.c)
sluice_mpi_test(test_recompute_np2_ep2 2 test_recompute cpu)

# Global-batch load balancing and the aux-loss-free router bias.
add_executable(test_balance_mpi test_balance_mpi.c)
target_link_libraries(test_balance_mpi PRIVATE sluice_testutil)
sluice_mpi_test(test_balance_np1 1 test_balance_mpi)
sluice_mpi_test(test_balance_np2 2 test_balance_mpi)
