# The emulator's NCCL (emu/src/nccl_emu.cc, over MPI) against hand-computed results, in the
# emulated build only (-DSLUICE_CUDA=EMULATED), under mpirun with 1, 2 and 4 ranks, each rank on
# its own emulated device (SLUICE_EMU_DEVICES = the rank count; NCCL refuses two ranks on one
# device, and so does the fake, which the test checks too). Labels emu
# (tests/run.sh runs them with the emulated build) and parallel. It links the emulator alone.
if(SLUICE_CUDA_EMULATED)
  add_executable(test_nccl_emu emu/test_nccl_emu.cc emu/test_nccl_emu_c.c)
  target_include_directories(test_nccl_emu PRIVATE ${CMAKE_SOURCE_DIR})
  target_link_libraries(test_nccl_emu PRIVATE sluice_emu)
  foreach(np 1 2 4)
    add_test(NAME test_nccl_emu_np${np}
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} --oversubscribe
                     $<TARGET_FILE:test_nccl_emu>)
    # The environment of tests/parallel.cmake's sluice_mpi_test (which the sorted glob
    # includes after this file).
    set_tests_properties(test_nccl_emu_np${np} PROPERTIES TIMEOUT 120 LABELS "emu;parallel"
      PROCESSORS ${np} ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OMPI_MCA_rmaps_base_oversubscribe=1;SLUICE_EMU_DEVICES=${np}")
  endforeach()
endif()
