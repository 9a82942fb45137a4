# trainer/config.c, model/config.c and model/counts.c: parsing, validation, overrides, HF json, counts.
sluice_test(test_config SOURCES test_config.c test_config_bad.c test_config_model.c test_config_docs.c LABELS core config)
target_compile_definitions(test_config PRIVATE SLUICE_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
