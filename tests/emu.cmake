# The CPU SIMT test double's own tests (emu/README.md), in the emulated build only
# (-DSLUICE_CUDA=EMULATED). Label emu. Their .cu files compile as the library's do: C++ against
# emu/, cuda_runtime.h force-included; they link the emulator alone, not sluice.
if(SLUICE_CUDA_EMULATED)
  function(sluice_emu_test name)
    cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;ARGS" ${ARGN})
    set(srcs)
    foreach(f ${T_SOURCES})
      get_filename_component(abs ${f} ABSOLUTE)
      list(APPEND srcs ${abs})
      if(abs MATCHES "\\.cu$")
        set_source_files_properties(${abs} PROPERTIES LANGUAGE CXX
                                    COMPILE_OPTIONS "-x;c++;-include;cuda_runtime.h;-fstack-clash-protection;-Wno-unknown-pragmas;-Wno-class-memaccess;-Wno-maybe-uninitialized;-Wno-psabi")
      endif()
    endforeach()
    add_executable(${name} ${srcs})
    target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR})
    target_compile_definitions(${name} PRIVATE SLUICE_CUDA_EMULATED)
    target_link_libraries(${name} PRIVATE sluice_emu)
    add_test(NAME ${name} COMMAND ${name} ${T_ARGS})
    if(NOT T_TIMEOUT)
      set(T_TIMEOUT 120)
    endif()
    set_tests_properties(${name} PROPERTIES TIMEOUT ${T_TIMEOUT} SKIP_RETURN_CODE 77 LABELS emu)
  endfunction()

  # Correct kernels give the right answers under both thread orders.
  sluice_emu_test(test_emu_simt SOURCES emu/test_emu_simt.cu)
  # Faulty kernels (races, out-of-bounds writes, lanes or threads missing at a collective or a
  # barrier, ...) are flagged, each in a child process.
  sluice_emu_test(test_emu_faults SOURCES emu/test_emu_faults.cu)
  # The runtime: device, memory, copies, streams, events, CUDA's error rules.
  sluice_emu_test(test_emu_runtime SOURCES emu/test_emu_runtime.cu)
  # What the emulator costs (printed, not asserted).
  sluice_emu_test(test_emu_bench SOURCES emu/test_emu_bench.cu)
  # The Hopper instructions' misuses (core/ptx_sm90.cuh) are flagged, each in a child process.
  sluice_emu_test(test_emu_sm90 SOURCES emu/test_emu_sm90.cu)
  # AddressSanitizer inside kernels (-DSLUICE_SANITIZE=ON; skipped otherwise).
  sluice_emu_test(test_emu_asan SOURCES emu/test_emu_asan.cu)
endif()
