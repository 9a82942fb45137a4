# core/ptx.cuh's PTX wrappers against the ISA's fragment layouts (tests/test_ptx.cu). Emulated
# build: label emu, the wrappers' emulated twins. nvcc build: compiled for sm_80 and sm_90a like
# the library (so the inline PTX is checked by ptxas), label gpu, run on a GPU and skipped (77)
# without one.
if(SLUICE_CUDA_EMULATED)
  sluice_emu_test(test_ptx SOURCES test_ptx.cu)
elseif(SLUICE_WITH_CUDA)
  add_executable(test_ptx test_ptx.cu)
  target_include_directories(test_ptx PRIVATE ${CMAKE_SOURCE_DIR})
  target_compile_options(test_ptx PRIVATE
    "SHELL:-gencode arch=compute_80,code=sm_80"
    "SHELL:-gencode arch=compute_90a,code=sm_90a"
    "SHELL:-Werror all-warnings"
    "SHELL:-Xptxas -warn-spills,-warn-lmem-usage"
    "-Xcompiler=-Wall,-Wextra,-Werror")
  target_link_libraries(test_ptx PRIVATE CUDA::cudart)
  add_test(NAME test_ptx COMMAND test_ptx)
  set_tests_properties(test_ptx PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 LABELS gpu)
endif()
