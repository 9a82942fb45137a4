# io/: token shards, importers, the streaming reader, `sluice data`, and the shard parser fuzzer.
sluice_test(test_io_format SOURCES test_io_format.c LABELS io TIMEOUT 120)
sluice_test(test_io_build SOURCES test_io_build.c LABELS io TIMEOUT 120)
sluice_test(test_io_reader SOURCES test_io_reader.c LABELS io TIMEOUT 120)
