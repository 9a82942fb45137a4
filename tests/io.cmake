# io/: token shards, importers, the streaming reader, `sluice data`, and the shard parser fuzzer.
sluice_test(test_io_format SOURCES test_io_format.c LABELS io TIMEOUT 120)
sluice_test(test_io_build SOURCES test_io_build.c LABELS io TIMEOUT 120)
sluice_test(test_io_reader SOURCES test_io_reader.c reader_fixture.c LABELS io TIMEOUT 120)
sluice_test(test_io_order SOURCES test_io_order.c reader_fixture.c LABELS io TIMEOUT 300)
sluice_test(test_io_shuffle SOURCES test_io_shuffle.c reader_fixture.c LABELS io TIMEOUT 120)
# libFuzzer harness for the shard header/index/frame parser under ASan+UBSan, bounded run
# (SLUICE_FUZZ_SECONDS overrides the 30 s); skipped (77) only without clang's fuzzer runtime,
# and under CI=true not even then (a failure).
add_test(NAME test_io_fuzz
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/run_fuzz.sh ${CMAKE_SOURCE_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/fuzz_shard_work $<TARGET_FILE:sluice> 30)
set_tests_properties(test_io_fuzz PROPERTIES TIMEOUT 240 SKIP_RETURN_CODE 77 LABELS "io;fuzz")
