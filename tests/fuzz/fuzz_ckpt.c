/*
 * tests/fuzz/fuzz_ckpt.c - libFuzzer harness for the checkpoint's JSON parsers and the coverage
 * index (io/checkpoint_manifest.c, checkpoint_print.c, checkpoint_index.c), built with clang
 * -fsanitize=fuzzer,address,undefined by tests/fuzz/run_fuzz_ckpt.sh.
 *
 * The first input byte picks a mode; the rest is the file:
 *   0: a rank manifest;  1: the COMMIT index;  2: train_state.json;
 *   3: up to four manifests separated by NUL bytes, indexed together (coverage across ranks).
 * Besides the sanitizers' checks, the harness asserts that whatever a parser accepts prints
 * back (ck_*_print) to text the same parser accepts with the same content, and that the coverage
 * index is consistent with the pieces it was built from (every piece in exactly one tensor, in
 * begin order).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/checkpoint_internal.h"
#include "tests/fuzz/fuzz_util.h"

static void count_line(void *user, const char *line) {
    REQUIRE(line && strlen(line) < 1024);
    (*(int *)user)++;
}

static void check_index(const ck_manifest *ms, int n) {
    const char *names[4] = {"m0", "m1", "m2", "m3"};
    ck_index idx;
    int problems = 0;
    int reported = ck_index_build(ms, n, names, "fuzz", count_line, &problems, &idx);
    REQUIRE(reported == problems);
    int total = 0;
    for (int i = 0; i < n; i++) total += ms[i].npieces;
    REQUIRE(idx.nrefs == total);
    int covered = 0;
    for (int t = 0; t < idx.ntensors; t++) {
        const ck_tensor *x = &idx.tensors[t];
        REQUIRE(x->count >= 1 && x->start == covered);
        if (t > 0) REQUIRE(strcmp(idx.tensors[t - 1].name, x->name) < 0);
        for (int k = x->start; k < x->start + x->count; k++) {
            REQUIRE(strcmp(idx.refs[k].piece->tensor, x->name) == 0);
            if (k > x->start) REQUIRE(idx.refs[k - 1].piece->begin <= idx.refs[k].piece->begin);
        }
        REQUIRE(ck_index_find(&idx, x->name) == t);
        covered += x->count;
    }
    REQUIRE(covered == total);
    ck_index_free(&idx);
}

static void manifest(const char *b, size_t n) {
    ck_manifest m, m2;
    char err[1024];
    if (ck_manifest_parse(b, n, "fuzz", &m, err, sizeof err) != 0) {
        REQUIRE(strncmp(err, "fuzz: ", 6) == 0);
        return;
    }
    char *text = ck_manifest_print(&m);
    REQUIRE(ck_manifest_parse(text, strlen(text), "reprint", &m2, err, sizeof err) == 0);
    REQUIRE(m2.step == m.step && m2.rank == m.rank && m2.world_size == m.world_size);
    REQUIRE(m2.nfiles == m.nfiles && m2.npieces == m.npieces);
    for (int i = 0; i < m.npieces; i++) {
        const ck_piece *a = &m.pieces[i], *c = &m2.pieces[i];
        REQUIRE(strcmp(a->tensor, c->tensor) == 0 && a->dtype == c->dtype && a->ndim == c->ndim);
        REQUIRE(a->begin == c->begin && a->end == c->end && a->offset == c->offset);
        REQUIRE(a->crc32c == c->crc32c && a->numel == c->numel && strcmp(a->file, c->file) == 0);
        REQUIRE(a->begin <= a->end && a->end <= a->numel);
    }
    free(text);
    check_index(&m, 1);
    ck_manifest_free(&m2);
    ck_manifest_free(&m);
}

static void commit(const char *b, size_t n) {
    ck_commit c, c2;
    char err[1024];
    if (ck_commit_parse(b, n, "fuzz", &c, err, sizeof err) != 0) return;
    char *text = ck_commit_print(&c);
    REQUIRE(ck_commit_parse(text, strlen(text), "reprint", &c2, err, sizeof err) == 0);
    REQUIRE(c2.step == c.step && c2.world_size == c.world_size);
    REQUIRE(c2.state.bytes == c.state.bytes && c2.state.crc32c == c.state.crc32c);
    for (int i = 0; i < c.world_size; i++)
        REQUIRE(strcmp(c.manifests[i].file, c2.manifests[i].file) == 0 &&
                c.manifests[i].crc32c == c2.manifests[i].crc32c);
    free(text);
    ck_commit_free(&c2);
    ck_commit_free(&c);
}

static void state(const char *b, size_t n) {
    ck_state s, s2;
    char err[1024];
    if (ck_state_parse(b, n, "fuzz", &s, err, sizeof err) != 0) return;
    REQUIRE(cJSON_IsObject(s.trainer));
    char *text = ck_state_print(s.step, s.world_size, s.sluice_version, s.trainer);
    REQUIRE(ck_state_parse(text, strlen(text), "reprint", &s2, err, sizeof err) == 0);
    REQUIRE(s2.step == s.step && s2.world_size == s.world_size);
    REQUIRE(strcmp(s2.sluice_version, s.sluice_version) == 0);
    free(text);
    ck_state_free(&s2);
    ck_state_free(&s);
}

static void several(const char *b, size_t n) {
    ck_manifest ms[4];
    int k = 0;
    size_t start = 0;
    for (size_t i = 0; i <= n && k < 4; i++) {
        if (i == n || b[i] == 0) {
            if (ck_manifest_parse(b + start, i - start, "fuzz", &ms[k], NULL, 0) == 0) k++;
            start = i + 1;
        }
    }
    check_index(ms, k);
    for (int i = 0; i < k; i++) ck_manifest_free(&ms[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int mode = data[0] & 3;
    size_t n = size - 1;
    /* an exact-size copy without a terminating NUL: a read past it is caught by ASan */
    char *b = malloc(n ? n : 1);
    memcpy(b, data + 1, n);
    switch (mode) {
    case 0:
        manifest(b, n);
        break;
    case 1:
        commit(b, n);
        break;
    case 2:
        state(b, n);
        break;
    default:
        several(b, n);
        break;
    }
    free(b);
    return 0;
}
