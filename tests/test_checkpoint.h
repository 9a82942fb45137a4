/* tests/test_checkpoint.h - what the files of test_checkpoint share (tests/test_checkpoint.c,
 * test_checkpoint_tamper.c): paths under the work directory, whole-file reads and writes, the
 * lines a verify reports, and each file's test functions. */
#ifndef SL_TEST_CHECKPOINT_H
#define SL_TEST_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tests/checkpoint_model.h"

/* The test's work directory (absolute), and a path under it (printf-style; one of 8 rotating
 * buffers). */
extern char tck_work[2048];
const char *tck_path(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Removes the tree at p (missing is fine). */
void tck_rmrf(const char *p);
/* How many entries of dir have names starting with prefix. */
int tck_count_prefix(const char *dir, const char *prefix);
/* The whole file (malloc'ed, *n its size), or NULL. */
char *tck_slurp(const char *p, size_t *n);
/* Writes (replaces) the file with n bytes of d. */
void tck_put(const char *p, const void *d, size_t n);
/* Copies the directory tree `from` to `to`. */
void tck_copy_dir(const char *from, const char *to);

/* A bf16 value (its bits) as a float, exactly. */
float tck_bf16_to_f32(uint16_t h);

/* The first 16 lines sl_ckpt_verify reports (tck_collect is its line callback) and their
 * count. */
typedef struct {
    char lines[16][1024];
    int n;
} tck_lines;
void tck_collect(void *user, const char *line);
/* Whether a collected line contains a (and b, if not NULL). */
bool tck_any_line_has(const tck_lines *c, const char *a, const char *b);
/* A sequential save of m at `step` by `world` ranks that must succeed. */
void tck_save_ok(const char *root, const ckm_model *m, int64_t step, int world, int keep,
                 int64_t every);

/* test_checkpoint_tamper.c */
void test_coverage_load(void);
void test_corruption(void);
/* test_checkpoint_torture.c: the program's --torture and --example modes (exit statuses) */
int tck_torture(int rounds, const char *dir);
int tck_example(const char *dir, int world, const char *config);

#endif
