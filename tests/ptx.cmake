# core/ptx.cuh's and core/ptx_sm90.cuh's PTX wrappers against the ISA's layouts
# (tests/test_ptx.cu, tests/test_ptx_sm90.cu). Emulated build: label emu, the wrappers' emulated
# twins. nvcc build: compiled for sm_80 and sm_90a like the library (so the inline PTX is checked
# by ptxas), label gpu, run on a GPU and skipped (77) without one (test_ptx_sm90 also on a GPU
# other than compute capability 9.x, which cannot run sm_90a code). test_ptx_sm90 runs each of
# its sections in a child process (tests/test_ptx_sm90_main.cu; `test_ptx_sm90 --list`).
set(PTX_SM90_SOURCES test_ptx_sm90_main.cu test_ptx_sm90.cu test_ptx_sm90_tma.cu
    test_ptx_sm90_iso.cu test_ptx_sm90_gemm.cu)
if(SLUICE_CUDA_EMULATED)
  sluice_emu_test(test_ptx SOURCES test_ptx.cu)
  sluice_emu_test(test_ptx_sm90 SOURCES ${PTX_SM90_SOURCES})
elseif(SLUICE_WITH_CUDA)
  foreach(t test_ptx test_ptx_sm90)
    if(t STREQUAL "test_ptx_sm90")
      add_executable(${t} ${PTX_SM90_SOURCES})
    else()
      add_executable(${t} ${t}.cu)
    endif()
    target_include_directories(${t} PRIVATE ${CMAKE_SOURCE_DIR})
    target_compile_options(${t} PRIVATE
      "SHELL:-gencode arch=compute_80,code=sm_80"
      "SHELL:-gencode arch=compute_90a,code=sm_90a"
      "SHELL:-Werror all-warnings"
      "SHELL:-Xptxas -warn-spills,-warn-lmem-usage"
      "-Xcompiler=-Wall,-Wextra,-Werror")
    target_link_libraries(${t} PRIVATE CUDA::cudart)
    add_test(NAME ${t} COMMAND ${t})
    set_tests_properties(${t} PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77 LABELS gpu)
  endforeach()
endif()
