# trainer/config.c, model/config.c and model/counts.c: parsing, validation, overrides, HF json, counts.
sluice_test(test_config SOURCES test_config.c test_config_bad.c test_config_model.c test_config_docs.c LABELS core config)
target_compile_definitions(test_config PRIVATE SLUICE_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
# libFuzzer harness for the run config's parser and validation, --set overrides and a model's
# config.json, under ASan+UBSan, bounded like the shard parser's (test_io_fuzz);
# SLUICE_FUZZ_SECONDS overrides the 15 s. Skipped (77) only without clang's fuzzer runtime, and
# under CI=true not even then (a failure).
add_test(NAME test_config_fuzz
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/run_fuzz_config.sh ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/fuzz_config_work 15)
set_tests_properties(test_config_fuzz PROPERTIES TIMEOUT 240 SKIP_RETURN_CODE 77
                     LABELS "config;fuzz")
