# io/safetensors_*.c: the safetensors reader and writer (uses /usr/bin/python3 + numpy for
# the interop checks when available; their absence fails under CI=true).
sluice_test(test_safetensors SOURCES test_safetensors.c test_safetensors_corrupt.c LABELS trainer io)
# libFuzzer harness for the reader (and the writer on what it accepts), under ASan+UBSan,
# bounded like the shard parser's (test_io_fuzz); test_safetensors_corrupt.c is the catalog of
# known corruptions, this mutates files at random. SLUICE_FUZZ_SECONDS overrides the 15 s.
# Skipped (77) only without clang's fuzzer runtime or python3, and under CI=true not even then.
add_test(NAME test_safetensors_fuzz
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/run_fuzz_safetensors.sh ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/fuzz_safetensors_work 15)
set_tests_properties(test_safetensors_fuzz PROPERTIES TIMEOUT 240 SKIP_RETURN_CODE 77
                     LABELS "io;fuzz")
