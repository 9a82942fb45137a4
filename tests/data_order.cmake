# The data order does not depend on the world size: `sluice train` at 1, 2 and 4 ranks logs the
# same per-step batch hashes (io/reader.h) and losses.
add_test(NAME test_data_order_cli
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_data_order_cli.sh $<TARGET_FILE:sluice>
                 ${CMAKE_CURRENT_BINARY_DIR}/data_order_cli ${MPIEXEC_EXECUTABLE})
set_tests_properties(test_data_order_cli PROPERTIES TIMEOUT 300 LABELS "io;parallel;cli" PROCESSORS 2
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1;OMPI_MCA_rmaps_base_oversubscribe=1")
