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

# The experts' weight gradients over pairs of micro-batches against the immediate ones
# (training.defer_expert_wgrad): bitwise on the CPU, within bounds where the CUDA backend's
# one-pass kernel runs (tests/test_defer_wgrad.c).
add_executable(test_defer_wgrad test_defer_wgrad.c)
target_link_libraries(test_defer_wgrad PRIVATE sluice_parallel_run)
sluice_mpi_test(test_defer_wgrad_np1 1 test_defer_wgrad)
sluice_mpi_test(test_defer_wgrad_np2_ep2 2 test_defer_wgrad --ep 2)
sluice_mpi_test(test_defer_wgrad_np2_ep2_capacity 2 test_defer_wgrad --ep 2 --capacity 1.0)
# capacity drops without expert parallelism: the parked tokens' regather through gather_idx and
# combine_pos (dropped slots included)
sluice_mpi_test(test_defer_wgrad_np1_capacity 1 test_defer_wgrad --capacity 1.0)
# expert gradients all-reduced over EDP 2 in buckets during the last (paired) backward
sluice_mpi_test(test_defer_wgrad_np4_ep2 4 test_defer_wgrad --ep 2)
if(SLUICE_WITH_CUDA)
  sluice_nccl_test(test_defer_wgrad_cuda 1 test_defer_wgrad --backend cuda --steps 2)
  sluice_nccl_test(test_defer_wgrad_cuda_bf16 1 test_defer_wgrad --backend cuda --bf16 --steps 2)
  sluice_nccl_test(test_defer_wgrad_nccl_np2_ep2_bf16 2 test_defer_wgrad --ep 2 --transport nccl
                   --bf16 --backend cuda --steps 2)
endif()
