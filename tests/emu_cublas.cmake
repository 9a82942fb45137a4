# The emulator's cuBLAS (emu/src/cublas_emu.cc) against a naive double loop. Built only in the
# emulated CUDA build (-DSLUICE_CUDA=EMULATED), where that file stands in for the real library.
if(SLUICE_CUDA STREQUAL "EMULATED")
  sluice_test(test_cublas_emu SOURCES emu/test_cublas_emu.cc LABELS emu)
endif()
