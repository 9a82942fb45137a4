# The NCCL transport (core/comm_nccl.c): built with the CUDA backend; in the emulated build NCCL
# is the fake over MPI in emu/, so these run under mpirun in CI. Label cuda: tests/run.sh runs
# them in the emulated build.
if(SLUICE_WITH_CUDA)
  add_executable(test_comm_nccl test_comm_nccl.c)
  target_link_libraries(test_comm_nccl PRIVATE sluice_testutil)
  sluice_nccl_test(test_comm_nccl_np1 1 test_comm_nccl)
  sluice_nccl_test(test_comm_nccl_np2 2 test_comm_nccl)
  sluice_nccl_test(test_comm_nccl_np4 4 test_comm_nccl)
  # The equivalence cases of tests/parallel.cmake with the distributed run on the cuda backend
  # and the nccl transport, against the CPU + MPI single-process reference (2 steps: the
  # emulated backend is slow; every step exchanges, reduces and gathers).
  set(NCCL_EQ --backend cuda --transport nccl --steps 2)
  sluice_nccl_test(test_parallel_nccl_np1_ep1 1 test_parallel_equivalence --ep 1 ${NCCL_EQ})
  sluice_nccl_test(test_parallel_nccl_np2_ep1 2 test_parallel_equivalence --ep 1 ${NCCL_EQ})
  sluice_nccl_test(test_parallel_nccl_np2_ep2 2 test_parallel_equivalence --ep 2 ${NCCL_EQ})
  sluice_nccl_test(test_parallel_nccl_np4_ep2 4 test_parallel_equivalence --ep 2 ${NCCL_EQ})
  sluice_nccl_test(test_parallel_nccl_np4_ep4 4 test_parallel_equivalence --ep 4 ${NCCL_EQ})
  sluice_nccl_test(test_parallel_nccl_np4_ep2_zero1 4 test_parallel_equivalence --ep 2 --zero1
                   ${NCCL_EQ})
  sluice_nccl_test(test_parallel_nccl_np4_ep4_capacity 4 test_parallel_equivalence --ep 4
                   --capacity 1.0 ${NCCL_EQ})
  sluice_nccl_test(test_parallel_nccl_np2_ep2_bf16 2 test_parallel_equivalence --ep 2 --bf16
                   ${NCCL_EQ})
  # bf16 with ZeRO-1: the compute copy from AdamW's shard and the gathered dense shard (EDP 1:
  # the expert group has one rank, nothing to gather)
  sluice_nccl_test(test_parallel_nccl_np2_ep2_zero1_bf16 2 test_parallel_equivalence --ep 2
                   --zero1 --bf16 ${NCCL_EQ})
  # A rank that crashes or errors during training on the nccl transport ends every rank within
  # 30 s, naming the rank (tests/test_nccl_fault.sh). A device per rank (SLUICE_EMU_DEVICES: the
  # emulated build; on a real machine, fewer GPUs than ranks make the script skip).
  add_test(NAME test_nccl_fault
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_nccl_fault.sh $<TARGET_FILE:sluice>
                   ${CMAKE_CURRENT_BINARY_DIR}/nccl_fault ${MPIEXEC_EXECUTABLE})
  set_tests_properties(test_nccl_fault PROPERTIES TIMEOUT 900 LABELS "parallel;cuda" PROCESSORS 4
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${SLUICE_MPI_ENV};SLUICE_EMU_DEVICES=4")
endif()
