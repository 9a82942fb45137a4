/* tests/test_config.h - what the files of test_config share (tests/test_config.c,
 * test_config_bad.c, test_config_model.c,
 * test_config_docs.c): the helpers and each file's test functions. */
#ifndef SL_TEST_CONFIG_H
#define SL_TEST_CONFIG_H

#include <stdbool.h>

#include "trainer/config.h"

#ifndef SLUICE_SOURCE_DIR
#error "SLUICE_SOURCE_DIR must be defined (tests/config.cmake)"
#endif

/* Loads a config by its path relative to the source tree; false (and a failed check) where it
 * does not load. */
bool tc_load(const char *rel, sl_config *cfg);
/* Field-by-field equality, naming the first field that differs on stderr. */
bool tc_model_eq(const sl_model_config *a, const sl_model_config *b);
bool tc_config_eq(const sl_config *a, const sl_config *b);

/* test_config_bad.c */
/* A valid base config; each bad case patches it (section keys replaced, "<delete>" removes). */
extern const char *const tc_base;
void test_bad_configs(void);
void test_data_forms(void);
/* test_config_model.c */
void test_hf(void);
void test_counts_15a2b(void);
void test_counts_dense(void);
void test_counts_variants(void);
void test_logits_chunks(void);
/* test_config_docs.c */
void test_keys_documented(void);

#endif
