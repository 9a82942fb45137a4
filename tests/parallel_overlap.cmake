# The overlapped MoE backward (parallel.overlap_moe) against the plain order: bitwise equal
# weights after a few steps, under mpirun with expert parallelism. After parallel.cmake (the
# glob includes areas in name order), whose helpers it uses.
add_executable(test_moe_overlap test_moe_overlap.c)
target_link_libraries(test_moe_overlap PRIVATE sluice_parallel_run)
sluice_mpi_test(test_moe_overlap_np2_ep2 2 test_moe_overlap --ep 2)
sluice_mpi_test(test_moe_overlap_np4_ep2 4 test_moe_overlap --ep 2)
sluice_mpi_test(test_moe_overlap_np4_ep4 4 test_moe_overlap --ep 4)
sluice_mpi_test(test_moe_overlap_np4_ep4_capacity 4 test_moe_overlap --ep 4 --capacity 1.0)
if(SLUICE_WITH_CUDA)
  # The cuda backend with each transport (2 steps: the emulated backend is slow).
  set(OVERLAP_CUDA --backend cuda --steps 2)
  sluice_nccl_test(test_moe_overlap_nccl_np2_ep2 2 test_moe_overlap --ep 2 --transport nccl
                   ${OVERLAP_CUDA})
  sluice_nccl_test(test_moe_overlap_nccl_np4_ep4 4 test_moe_overlap --ep 4 --transport nccl
                   ${OVERLAP_CUDA})
  sluice_nccl_test(test_moe_overlap_nccl_np4_ep2_bf16 4 test_moe_overlap --ep 2 --transport nccl
                   --bf16 ${OVERLAP_CUDA})
  sluice_nccl_test(test_moe_overlap_mpi_np2_ep2 2 test_moe_overlap --ep 2 --transport mpi
                   ${OVERLAP_CUDA})
endif()
