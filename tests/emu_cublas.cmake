# The emulator's cuBLAS (emu/src/cublas_emu.cc) against a naive double loop, in the emulated
# build only (-DSLUICE_CUDA=EMULATED), where that file stands in for the real library. It links
# the emulator alone (sluice_emu_test, tests/emu.cmake, which the sorted glob includes first).
if(SLUICE_CUDA_EMULATED)
  sluice_emu_test(test_cublas_emu SOURCES emu/test_cublas_emu.cc)
endif()
