/*
 * io/safetensors_internal.h - what the safetensors reader and writer share: a header's tensor
 * entry, the dtype table, shape arithmetic and the UTF-8 check (io/safetensors_common.c).
 * Internal to io/safetensors_*.c; users include io/safetensors.h.
 */
#ifndef SL_IO_SAFETENSORS_INTERNAL_H
#define SL_IO_SAFETENSORS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/safetensors.h"

/* Largest integer accepted in a header: the range a JSON parser that stores numbers as doubles
 * (cJSON) represents exactly. The writer refuses files larger than that. */
#define ST_INT_MAX (UINT64_C(1) << 53)

typedef unsigned long long ull; /* what %llu prints */

/* One tensor of a header. */
typedef struct {
    char *name;
    const char *dtype; /* static, from the dtype table */
    int ndim;
    int64_t shape[SL_ST_MAX_DIMS];
    uint64_t nbytes;
    uint64_t begin, end; /* relative to the data section */
} st_entry;

/* The canonical (static) spelling of a dtype name, or NULL if unknown; *size (when size is not
 * NULL) gets its bytes per element. */
const char *sl_st_dtype_lookup(const char *dtype, size_t *size);

/* "[2, 3]" into buf (truncated to fit); returns buf. */
const char *sl_st_fmt_shape(char *buf, size_t len, int ndim, const int64_t *shape);

/* Element count of a shape; false when it exceeds ST_INT_MAX. */
bool sl_st_shape_numel(int ndim, const int64_t *shape, uint64_t *numel);

/* Offset of the first byte of s[0..n) that is not valid UTF-8 (or is NUL), or -1 if all is
 * valid. */
long long sl_st_utf8_invalid_at(const unsigned char *s, size_t n);

#endif
