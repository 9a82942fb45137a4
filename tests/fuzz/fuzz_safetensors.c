/*
 * tests/fuzz/fuzz_safetensors.c - libFuzzer harness for the safetensors reader
 * (io/safetensors_reader.c, safetensors_common.c) and, on what it accepts, the writer
 * (safetensors_writer.c), built with clang -fsanitize=fuzzer,address,undefined by
 * tests/fuzz/run_fuzz_safetensors.sh.
 *
 * The input is a .safetensors file, opened by sl_st_open from a memfd named by its
 * /proc/self/fd path, so the reader runs exactly as on a user's file. A refused file must say
 * so with a message that starts with that path. For an accepted one the harness asserts, besides
 * the sanitizers' checks, what sl_st_open promises: names unique and found by sl_st_find, known
 * dtypes, sizes that are numel x dtype size, byte ranges inside the data section that together
 * cover it, every tensor's bytes read back as they are in the input, reads outside a tensor
 * refused, metadata keys found. Then it writes the tensors and metadata again with the writer
 * (into a temporary directory) and asserts that the reader accepts that file with the same
 * tensors, bytes and metadata.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

static char g_out[512];

/* Tensor i of f in a malloc'ed buffer (at least one byte). */
static unsigned char *read_tensor(const sl_st_file *f, int i) {
    size_t nb = sl_st_nbytes(f, i);
    unsigned char *b = malloc(nb ? nb : 1);
    char err[1024];
    if (sl_st_read(f, i, b, nb, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_safetensors: reading tensor %d: %s\n", i, err);
        abort();
    }
    return b;
}

static int by_offset(const void *a, const void *b, void *f) {
    uint64_t x = sl_st_file_offset(f, *(const int *)a), y = sl_st_file_offset(f, *(const int *)b);
    return (x > y) - (x < y);
}

/* Writes f's tensors and metadata to g_out with the writer and checks what the reader makes of
 * that file. */
static void rewrite(const sl_st_file *f) {
    char err[1024];
    const int n = sl_st_count(f);
    sl_st_writer *w = sl_st_writer_open(g_out, err, sizeof err);
    REQUIRE(w);
    for (int k = 0; k < sl_st_metadata_count(f); k++) {
        const char *key = sl_st_metadata_key_at(f, k);
        REQUIRE(sl_st_writer_set_metadata(w, key, sl_st_metadata(f, key)) == 0);
    }
    /* in file order, the order the writer lays them out in */
    int *order = malloc(sizeof(int) * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) order[i] = i;
    qsort_r(order, (size_t)n, sizeof *order, by_offset, (void *)f);
    for (int k = 0; k < n; k++) {
        const int i = order[k];
        if (sl_st_writer_declare(w, sl_st_name_at(f, i), sl_st_dtype(f, i), sl_st_ndim(f, i),
                                 sl_st_shape(f, i)) != k) {
            fprintf(stderr, "fuzz_safetensors: the writer refuses tensor '%s': %s\n",
                    sl_st_name_at(f, i), sl_st_writer_error(w));
            abort();
        }
    }
    for (int k = 0; k < n; k++) {
        unsigned char *b = read_tensor(f, order[k]);
        REQUIRE(sl_st_writer_write(w, sl_st_name_at(f, order[k]), b, sl_st_nbytes(f, order[k])) ==
                0);
        free(b);
    }
    free(order);
    if (sl_st_writer_close(w, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_safetensors: the writer fails: %s\n", err);
        abort();
    }
    sl_st_file *g = sl_st_open(g_out, err, sizeof err);
    if (!g) {
        fprintf(stderr, "fuzz_safetensors: the rewritten file is refused: %s\n", err);
        abort();
    }
    REQUIRE(sl_st_count(g) == n && sl_st_metadata_count(g) == sl_st_metadata_count(f));
    for (int i = 0; i < n; i++) {
        const int j = sl_st_find(g, sl_st_name_at(f, i));
        REQUIRE(j >= 0 && strcmp(sl_st_dtype(g, j), sl_st_dtype(f, i)) == 0);
        REQUIRE(sl_st_ndim(g, j) == sl_st_ndim(f, i));
        for (int d = 0; d < sl_st_ndim(f, i); d++)
            REQUIRE(sl_st_shape(g, j)[d] == sl_st_shape(f, i)[d]);
        unsigned char *a = read_tensor(f, i), *b = read_tensor(g, j);
        REQUIRE(memcmp(a, b, sl_st_nbytes(f, i)) == 0);
        free(a), free(b);
    }
    for (int k = 0; k < sl_st_metadata_count(f); k++) {
        const char *key = sl_st_metadata_key_at(f, k), *v = sl_st_metadata(g, key);
        REQUIRE(v && strcmp(v, sl_st_metadata(f, key)) == 0);
    }
    sl_st_close(g);
}

static void check(const sl_st_file *f, const uint8_t *data, size_t size) {
    char err[1024];
    uint64_t hlen = 0;
    for (int k = 7; k >= 0; k--) hlen = hlen << 8 | data[k];
    REQUIRE(hlen >= 2 && hlen <= size - 8);
    const uint64_t data_start = 8 + hlen;
    uint64_t covered = 0;
    const int n = sl_st_count(f);
    for (int i = 0; i < n; i++) {
        const char *name = sl_st_name_at(f, i);
        REQUIRE(name[0] && sl_st_find(f, name) == i);
        const size_t es = sl_st_dtype_size(sl_st_dtype(f, i));
        REQUIRE(es > 0);
        const int nd = sl_st_ndim(f, i);
        REQUIRE(nd >= 0 && nd <= SL_ST_MAX_DIMS);
        uint64_t numel = 1;
        for (int d = 0; d < nd; d++) {
            REQUIRE(sl_st_shape(f, i)[d] >= 0);
            numel *= (uint64_t)sl_st_shape(f, i)[d];
        }
        const size_t nb = sl_st_nbytes(f, i);
        REQUIRE((uint64_t)sl_st_numel(f, i) == numel && nb == numel * es);
        const uint64_t off = sl_st_file_offset(f, i);
        REQUIRE(off >= data_start && off <= size && nb <= size - off);
        unsigned char *b = read_tensor(f, i);
        REQUIRE(nb == 0 || memcmp(b, data + off, nb) == 0);
        /* reads outside the tensor are refused */
        REQUIRE(sl_st_read(f, i, b, nb + 1, err, sizeof err) != 0);
        REQUIRE(sl_st_read_part(f, i, nb, b, 1, err, sizeof err) != 0);
        REQUIRE(sl_st_read_part(f, i, nb, NULL, 0, err, sizeof err) == 0);
        free(b);
        covered += nb;
    }
    REQUIRE(sl_st_read_part(f, n, 0, NULL, 0, err, sizeof err) != 0);
    REQUIRE(data_start + covered == size);
    for (int k = 0; k < sl_st_metadata_count(f); k++)
        REQUIRE(sl_st_metadata(f, sl_st_metadata_key_at(f, k)) != NULL);
    rewrite(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_out[0]) {
        const char *tmp = getenv("TMPDIR");
        char dir[400];
        snprintf(dir, sizeof dir, "%s/fuzz_safetensors_XXXXXX", tmp && *tmp ? tmp : "/tmp");
        REQUIRE(mkdtemp(dir));
        snprintf(g_out, sizeof g_out, "%s/out.safetensors", dir);
    }
    const char *in_path = fuzz_file("fuzz.safetensors", data, size);
    char err[1024];
    sl_st_file *f = sl_st_open(in_path, err, sizeof err);
    if (!f) {
        REQUIRE(strncmp(err, in_path, strlen(in_path)) == 0);
        return 0;
    }
    check(f, data, size);
    sl_st_close(f);
    return 0;
}
