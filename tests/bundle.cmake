# launch/bundle.sh: the relocatable folder for GPU nodes without sluice's dependencies. The
# test builds it from this build tree and runs sluice, singleton and under the bundle's mpirun,
# in a mount namespace that hides the system's copies (tests/test_bundle.sh). Skipped (77)
# where mount namespaces are unavailable, except under CI=true as root (a failure).
add_test(NAME test_bundle
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_bundle.sh ${CMAKE_SOURCE_DIR}
                 ${CMAKE_BINARY_DIR} ${CMAKE_CURRENT_BINARY_DIR}/bundle_work)
set_tests_properties(test_bundle PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS "bundle;cli"
                     PROCESSORS 2 ENVIRONMENT "OMP_NUM_THREADS=1")
