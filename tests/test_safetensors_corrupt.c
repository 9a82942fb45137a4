/* tests/test_safetensors_corrupt.c - part of test_safetensors (tests/test_safetensors.c): a
 * catalog of corrupt files, each rejected with a message naming the file and the problem. */
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"
#include "tests/test_safetensors.h"
#include "tests/test_util.h"

/* ---- corrupt files ---- */

/* 8-byte length `hl` + header bytes + data_len bytes of data. */
static void make_raw(const char *path, uint64_t hl, const char *hdr, size_t hdr_n,
                     size_t data_len) {
    size_t n = 8 + hdr_n + data_len;
    unsigned char *b = calloc(n, 1);
    for (int k = 0; k < 8; k++) b[k] = (unsigned char)(hl >> (8 * k));
    memcpy(b + 8, hdr, hdr_n);
    for (size_t k = 0; k < data_len; k++) b[8 + hdr_n + k] = (unsigned char)k;
    tst_write_bytes(path, b, n);
    free(b);
}

/* A well-formed envelope around `json` (padded with spaces) followed by data_len bytes. */
static void make_st(const char *path, const char *json, size_t data_len) {
    size_t n = strlen(json), padded = (n + 7) / 8 * 8;
    char *h = malloc(padded);
    memcpy(h, json, n);
    memset(h + n, ' ', padded - n);
    make_raw(path, padded, h, padded, data_len);
    free(h);
}

static void expect_reject(const char *what, const char *path, const char *needle) {
    char err[1024] = "";
    sl_st_file *f = sl_st_open(path, err, sizeof err);
    CHECK(f == NULL, "%s: accepted", what);
    CHECK(strstr(err, path) != NULL, "%s: message does not name the file: %s", what, err);
    CHECK(strstr(err, needle) != NULL, "%s: expected '%s' in: %s", what, needle, err);
    printf("  rejected %-28s %s\n", what, err + strlen(tst_dir) + 1);
    sl_st_close(f);
}

void test_corrupt(void) {
    const char *p = tst_path("bad.safetensors");
    printf("corrupt files:\n");
    tst_write_bytes(p, "\x10\x00\x00", 3);
    expect_reject("file shorter than 8 bytes", p, "too short for the 8-byte header length");
    make_raw(p, 16, "{\"a\":", 5, 0);
    expect_reject("truncated header", p, "header length 16 (file offset 0) extends past the end");
    make_raw(p, 1000, "{}      ", 8, 16);
    expect_reject("header length beyond file", p, "header length 1000");
    make_raw(p, UINT64_C(200000000), "{}      ", 8, 0);
    expect_reject("header length over 100 MB", p, "exceeds the 100000000-byte limit");
    make_raw(p, UINT64_MAX, "{}      ", 8, 0);
    expect_reject("header length 2^64-1", p, "exceeds");
    make_raw(p, 0, "", 0, 0);
    expect_reject("header length 0", p, "too small");
    make_st(p, "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]", 4);
    expect_reject("bad JSON (unterminated)", p, "header is not valid JSON");
    make_st(p, "{\"a\": {\"dtype\": F32}}", 0);
    expect_reject("bad JSON (bare word)", p, "header is not valid JSON");
    make_st(p, "[{\"a\": 1}]", 0);
    expect_reject("header not an object", p, "does not start with '{'");
    make_st(p, "{} {}", 0);
    expect_reject("trailing JSON", p, "other than space padding");
    make_raw(p, 8, "{}\0\0\0\0\0\0", 8, 0);
    expect_reject("NUL padding", p,
                  "contains a NUL byte (padding must be spaces) (file offset 10)");
    make_st(p, "{\"a\xff\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}", 1);
    expect_reject("invalid UTF-8", p, "not valid UTF-8 text (file offset 11)");
    make_st(p,
            "{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]},"
            " \"b\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [8, 24]}}",
            24);
    expect_reject("overlapping offsets", p,
                  "tensor 'b': data_offsets [8, 24] overlap tensor 'a' [0, 16]");
    make_st(p,
            "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
            " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}",
            8);
    expect_reject("identical offsets", p, "overlap tensor 'a'");
    make_st(p,
            "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
            " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [16, 24]}}",
            24);
    expect_reject("gap between tensors", p, "data bytes [8, 16) belong to no tensor");
    make_st(p, "{\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}", 8);
    expect_reject("offsets past EOF", p,
                  "tensor 'a': data_offsets [0, 16] extend past the end of the file");
    make_st(p, "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 12);
    expect_reject("trailing data bytes", p, "the tensors cover only 8");
    make_st(p, "{\"x\": {\"dtype\": \"F32\", \"shape\": [2, 2], \"data_offsets\": [0, 12]}}", 12);
    expect_reject("shape/size mismatch", p,
                  "tensor 'x': data_offsets [0, 12] do not match shape [2, 2] of F32 (16 bytes)");
    make_st(p, "{\"x\": {\"dtype\": \"BF16\", \"shape\": [3], \"data_offsets\": [0, 12]}}", 12);
    expect_reject("dtype/size mismatch", p, "do not match shape [3] of BF16 (6 bytes)");
    make_st(p, "{\"x\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [0, 8]}}", 8);
    expect_reject("scalar with 2 elements", p, "do not match shape [] of F32 (4 bytes)");
    make_st(p,
            "{\"x\": {\"dtype\": \"F32\", \"shape\": [1099511627776, 1099511627776], "
            "\"data_offsets\": [0, 8]}}",
            8);
    expect_reject("shape overflow", p, "more than 2^53 bytes");
    make_st(p, "{\"x\": {\"dtype\": \"F17\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 8);
    expect_reject("unknown dtype", p, "tensor 'x': unknown dtype 'F17'");
    make_st(p, "{\"x\": {\"dtype\": \"f32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 8);
    expect_reject("lower-case dtype", p, "unknown dtype 'f32'");
    make_st(p, "{\"x\": {\"shape\": [2], \"data_offsets\": [0, 8]}}", 8);
    expect_reject("missing dtype", p, "tensor 'x': \"dtype\" is missing");
    make_st(p, "{\"x\": {\"dtype\": \"U8\", \"shape\": 2, \"data_offsets\": [0, 2]}}", 2);
    expect_reject("shape not an array", p, "\"shape\" is not an array");
    make_st(p, "{\"x\": {\"dtype\": \"U8\", \"shape\": [-2], \"data_offsets\": [0, 2]}}", 2);
    expect_reject("negative dimension", p, "shape[0] is not a non-negative integer");
    make_st(p,
            "{\"x\": {\"dtype\": \"U8\", \"shape\": [1,1,1,1,1,1,1,1,1], "
            "\"data_offsets\": [0, 1]}}",
            1);
    expect_reject("too many dimensions", p, "shape has 9 dimensions");
    make_st(p, "{\"x\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [0, 1, 2]}}", 2);
    expect_reject("3 data_offsets", p, "\"data_offsets\" is not an array of 2 integers");
    make_st(p, "{\"x\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [0.5, 2]}}", 2);
    expect_reject("fractional offset", p, "data_offsets are not non-negative integers");
    make_st(p, "{\"x\": {\"dtype\": \"U8\", \"shape\": [0], \"data_offsets\": [2, 0]}}", 2);
    expect_reject("begin after end", p, "data_offsets [2, 0]: begin is after end");
    make_st(p,
            "{\"x\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [0, 2]},"
            " \"x\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [2, 4]}}",
            4);
    expect_reject("duplicate tensor name", p, "tensor 'x' appears twice");
    make_st(p,
            "{\"x\": {\"dtype\": \"U8\", \"dtype\": \"F32\", \"shape\": [2], "
            "\"data_offsets\": [0, 2]}}",
            2);
    expect_reject("duplicate field", p, "field \"dtype\" appears twice");
    make_st(p, "{\"x\": [1, 2]}", 0);
    expect_reject("entry not an object", p, "tensor 'x': entry is not a JSON object");
    make_st(p, "{\"__metadata__\": {\"epoch\": 3}}", 0);
    expect_reject("metadata value not a string", p, "__metadata__ 'epoch': value is not a string");
    make_st(p, "{\"__metadata__\": [\"a\"]}", 0);
    expect_reject("metadata not an object", p, "\"__metadata__\" is not a JSON object");
    make_st(p, "{\"__metadata__\": {\"k\": \"1\", \"k\": \"2\"}}", 0);
    expect_reject("duplicate metadata key", p, "__metadata__ 'k': key appears twice");
    expect_reject("missing file", tst_path("does-not-exist.safetensors"), "cannot open");

    /* accepted edge cases: no tensors; only metadata; JSON whitespace before the padding */
    char err[512];
    make_st(p, "{}", 0);
    sl_st_file *f = sl_st_open(p, err, sizeof err);
    CHECK(f && sl_st_count(f) == 0 && sl_st_metadata_count(f) == 0, "empty header: %s", err);
    sl_st_close(f);
    make_st(p,
            "{\n \"__metadata__\": {\"a\": \"b\"},\n \"z\": {\"dtype\": \"U8\", \"shape\": [0], "
            "\"data_offsets\": [0, 0]}\n}\n",
            0);
    f = sl_st_open(p, err, sizeof err);
    CHECK(f && sl_st_count(f) == 1 && !strcmp(sl_st_metadata(f, "a"), "b"), "pretty JSON: %s", err);
    sl_st_close(f);
}
