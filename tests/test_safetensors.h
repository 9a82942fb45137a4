/* tests/test_safetensors.h - what the files of test_safetensors share (tests/test_safetensors.c,
 * test_safetensors_corrupt.c). */
#ifndef SL_TEST_SAFETENSORS_H
#define SL_TEST_SAFETENSORS_H

#include <stddef.h>

/* The test's temporary directory (mkdtemp), a path in it (one of 8 rotating buffers), and a
 * file written whole (exits on failure). */
extern char tst_dir[256];
const char *tst_path(const char *name);
void tst_write_bytes(const char *path, const void *data, size_t n);

/* test_safetensors_corrupt.c */
void test_corrupt(void);

#endif
