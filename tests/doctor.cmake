# `sluice doctor` (launch/cmd_doctor.c; tests/test_doctor.sh). In the emulated build (label
# cuda): a full run passes with every JSON key, an injected wrong op result fails it (exit 1),
# no device is exit 3; the race check is off (the doctor's kernels are the conformance test's,
# checked there). Elsewhere: on a real GPU the full run must pass (label gpu), and on a machine
# without one the doctor must say so and exit 3 (label cli; skipped where a GPU exists).
if(SLUICE_CUDA_EMULATED)
  add_test(NAME test_doctor
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_doctor.sh $<TARGET_FILE:sluice>
                   ${CMAKE_CURRENT_BINARY_DIR}/doctor emulated)
  set_tests_properties(test_doctor PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "cuda;cli"
                       ENVIRONMENT "OMP_NUM_THREADS=2;SLUICE_EMU_RACECHECK=0")
else()
  add_test(NAME test_doctor_gpu
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_doctor.sh $<TARGET_FILE:sluice>
                   ${CMAKE_CURRENT_BINARY_DIR}/doctor_gpu gpu)
  set_tests_properties(test_doctor_gpu PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS "gpu")
  add_test(NAME test_doctor_nodevice
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_doctor.sh $<TARGET_FILE:sluice>
                   ${CMAKE_CURRENT_BINARY_DIR}/doctor_nodevice nodevice)
  set_tests_properties(test_doctor_nodevice PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
                       LABELS "cli")
endif()
