/*
 * io/safetensors_common.c - the dtype table, shape arithmetic and the UTF-8 check that the
 * safetensors reader and writer share (safetensors_internal.h).
 */
#include "io/safetensors_internal.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
} st_dtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
    {"F32", 4},  {"I64", 8}, {"U64", 8}, {"F64", 8},
};

void sl_st_hf_shard_name(char *buf, size_t n, int shard, int count) {
    if (count == 1)
        snprintf(buf, n, "model.safetensors");
    else
        snprintf(buf, n, "model-%05d-of-%05d.safetensors", shard + 1, count);
}

bool sl_st_hf_weights_file(const char *name) {
    const size_t n = strlen(name);
    return (strncmp(name, "model", 5) == 0 && n > 12 &&
            strcmp(name + n - 12, ".safetensors") == 0) ||
           strcmp(name, SL_ST_HF_INDEX) == 0;
}

const char *sl_st_dtype_lookup(const char *dtype, size_t *size) {
    if (!dtype) return NULL;
    for (size_t k = 0; k < sizeof st_dtypes / sizeof st_dtypes[0]; k++)
        if (strcmp(dtype, st_dtypes[k].name) == 0) {
            if (size) *size = st_dtypes[k].size;
            return st_dtypes[k].name;
        }
    return NULL;
}

size_t sl_st_dtype_size(const char *dtype) {
    size_t s = 0;
    return sl_st_dtype_lookup(dtype, &s) ? s : 0;
}

const char *sl_st_fmt_shape(char *buf, size_t len, int ndim, const int64_t *shape) {
    size_t o = 0;
    o += (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < ndim && o < len; d++)
        o += (size_t)snprintf(buf + o, len - o, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (o < len) snprintf(buf + o, len - o, "]");
    return buf;
}

bool sl_st_shape_numel(int ndim, const int64_t *shape, uint64_t *numel) {
    uint64_t n = 1;
    for (int d = 0; d < ndim; d++)
        if (shape[d] == 0) {
            *numel = 0;
            return true;
        }
    for (int d = 0; d < ndim; d++) {
        uint64_t s = (uint64_t)shape[d];
        if (n > ST_INT_MAX / s) return false;
        n *= s;
    }
    *numel = n;
    return true;
}

long long sl_st_utf8_invalid_at(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len;
        uint32_t cp, min;
        if (c == 0) return (long long)i;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            len = 2, cp = c & 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3, cp = c & 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return (long long)i;
        }
        if (n - i < len) return (long long)i;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return (long long)i;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return (long long)i;
        i += len;
    }
    return -1;
}
