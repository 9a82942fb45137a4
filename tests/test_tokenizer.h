/* tests/test_tokenizer.h - what the files of test_tokenizer share (tests/test_tokenizer.c,
 * test_tokenizer_load.c): hand-made tokenizer.json files and their loading. */
#ifndef SL_TEST_TOKENIZER_H
#define SL_TEST_TOKENIZER_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/tokenizer.h"

/* The test's temporary directory (mkdtemp). */
extern char tt_dir[256];
/* The ByteLevel string of byte b, and of text s (out large enough: 2 bytes per input byte). */
void tt_byte_str(uint8_t b, char out[8]);
void tt_bl(const char *s, char *out);
/* The base tokenizer.json (tests/test_tokenizer.c says its vocabulary and merges). */
cJSON *tt_base(void);
/* Adds an added token to root. */
void tt_add_token(cJSON *root, int id, const char *content, bool special, bool normalized,
                  bool lstrip, bool rstrip);
/* Writes root (consumed) to tt_dir/name and loads it; NULL with the message in err. */
sl_tokenizer *tt_load_json(cJSON *root, const char *name, char *err, size_t n);

/* test_tokenizer_load.c */
void test_refusals(void);
void test_translation(void);

#endif
