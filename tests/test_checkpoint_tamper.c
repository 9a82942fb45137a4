/*
 * tests/test_checkpoint_tamper.c - part of test_checkpoint (tests/test_checkpoint.c): saved
 * checkpoints edited on disk: coverage and consistency problems the loader must name (a
 * missing expert, a doubled range, a shape conflict), and checksum corruption named by file
 * and tensor.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/fsutil.h"
#include "io/checkpoint.h"
#include "io/checkpoint_internal.h"
#include "io/crc32c.h"
#include "io/safetensors.h"
#include "tests/checkpoint_model.h"
#include "tests/test_checkpoint.h"
#include "tests/test_util.h"

/* ---- coverage and consistency problems caught by the loader ---- */

/* Rewrites rank r's manifest of checkpoint dir through edit, and COMMIT to match it (what a
 * buggy writer would have committed). */
static void tamper(const char *dir, int r, void (*edit)(ck_manifest *m)) {
    char mp[8192], cp[8192], e[1024];
    snprintf(mp, sizeof mp, "%s/rank-%05d.manifest.json", dir, r);
    snprintf(cp, sizeof cp, "%s/COMMIT", dir);
    size_t n;
    char *text = tck_slurp(mp, &n);
    ck_manifest m;
    if (!text || ck_manifest_parse(text, n, mp, &m, e, sizeof e) != 0) {
        fprintf(stderr, "tamper: %s\n", e);
        exit(1);
    }
    free(text);
    edit(&m);
    char *out = ck_manifest_print(&m);
    size_t on = strlen(out);
    tck_put(mp, out, on);
    text = tck_slurp(cp, &n);
    ck_commit cm;
    if (!text || ck_commit_parse(text, n, cp, &cm, e, sizeof e) != 0) {
        fprintf(stderr, "tamper: %s\n", e);
        exit(1);
    }
    free(text);
    cm.manifests[r].bytes = on;
    cm.manifests[r].crc32c = sl_crc32c(0, out, on);
    free(out);
    out = ck_commit_print(&cm);
    tck_put(cp, out, strlen(out));
    free(out);
    ck_commit_free(&cm);
    /* the edit may have freed pieces' strings: ck_manifest_free handles what is left */
    ck_manifest_free(&m);
}

static int find_piece(const ck_manifest *m, const char *tensor) {
    for (int i = 0; i < m->npieces; i++)
        if (strcmp(m->pieces[i].tensor, tensor) == 0) return i;
    return -1;
}

static void drop_down_proj(ck_manifest *m) {
    int i = find_piece(m, "layers.0.mlp.experts.down_proj");
    free(m->pieces[i].tensor);
    free(m->pieces[i].file);
    m->pieces[i] = m->pieces[--m->npieces];
}

static void overlap_down_proj(ck_manifest *m) {
    int i = find_piece(m, "layers.0.mlp.experts.down_proj");
    m->pieces[i].begin -= 8; /* into rank 0's experts */
}

static void reshape_flat(ck_manifest *m) {
    int i = find_piece(m, "optim.exp_avg.flat");
    m->pieces[i].shape[0] += 1;
    m->pieces[i].numel += 1;
}

void test_coverage_load(void) {
    ckm_model m;
    ckm_model_init(&m, 8);
    char root[4096];
    snprintf(root, sizeof root, "%s", tck_path("cl"));
    tck_save_ok(root, &m, 10, 4, 0, 0);
    char err[4096];
    char good[4096];
    snprintf(good, sizeof good, "%s", tck_path("cl/checkpoints/step-10"));

    char d1[4096];
    snprintf(d1, sizeof d1, "%s", tck_path("cl/missing"));
    tck_copy_dir(good, d1);
    tamper(d1, 2, drop_down_proj);
    sl_ckpt *c = sl_ckpt_open(d1, err, sizeof err);
    CHECK(c == NULL && strstr(err, "layers.0.mlp.experts.down_proj") && strstr(err, "missing") &&
              strstr(err, "[4, 6) of dimension 0"),
          "a missing expert is an error naming the tensor and the experts: %s", err);
    sl_ckpt_close(c);
    tck_lines v = {.n = 0};
    int np = sl_ckpt_verify(d1, tck_collect, &v, NULL);
    CHECK(np >= 2 && tck_any_line_has(&v, "down_proj", "missing") &&
              tck_any_line_has(&v, "rank-00002.safetensors", "manifest lists"),
          "verify lists the gap and the unlisted piece (%d problems)", np);

    char d2[4096];
    snprintf(d2, sizeof d2, "%s", tck_path("cl/overlap"));
    tck_copy_dir(good, d2);
    tamper(d2, 1, overlap_down_proj);
    c = sl_ckpt_open(d2, err, sizeof err);
    CHECK(c == NULL && strstr(err, "layers.0.mlp.experts.down_proj") && strstr(err, "twice") &&
              strstr(err, "rank-00000.manifest.json") && strstr(err, "rank-00001.manifest.json"),
          "a doubled range names the tensor and both manifests: %s", err);
    sl_ckpt_close(c);

    char d3[4096];
    snprintf(d3, sizeof d3, "%s", tck_path("cl/shape"));
    tck_copy_dir(good, d3);
    tamper(d3, 1, reshape_flat);
    c = sl_ckpt_open(d3, err, sizeof err);
    CHECK(c == NULL && strstr(err, "optim.exp_avg.flat") &&
              strstr(err, "rank-00001.manifest.json") && strstr(err, "has shape"),
          "pieces of different shapes name the tensor and the manifests: %s", err);
    sl_ckpt_close(c);
}

/* ---- checksums ---- */

static void flip_byte(const char *path, uint64_t off) {
    int fd = open(path, O_RDWR);
    unsigned char b = 0;
    if (fd < 0 || pread(fd, &b, 1, (off_t)off) != 1) exit(1);
    b ^= 0x20;
    if (pwrite(fd, &b, 1, (off_t)off) != 1) exit(1);
    close(fd);
}

void test_corruption(void) {
    ckm_model m;
    ckm_model_init(&m, 8);
    char root[4096];
    snprintf(root, sizeof root, "%s", tck_path("crc"));
    tck_save_ok(root, &m, 10, 4, 0, 0);
    char err[4096];
    char good[4096];
    snprintf(good, sizeof good, "%s", tck_path("crc/checkpoints/step-10"));
    char d[4096];
    snprintf(d, sizeof d, "%s", tck_path("crc/flipped"));
    tck_copy_dir(good, d);
    /* a byte inside rank 2's piece of down_proj */
    char mp[8192];
    snprintf(mp, sizeof mp, "%s/rank-00002.manifest.json", d);
    size_t n;
    char *text = tck_slurp(mp, &n);
    ck_manifest man;
    CHECK(text && ck_manifest_parse(text, n, mp, &man, err, sizeof err) == 0, "parse: %s", err);
    free(text);
    int i = find_piece(&man, "layers.0.mlp.experts.down_proj");
    int64_t pb = man.pieces[i].begin, pe = man.pieces[i].end;
    char dp[8192];
    snprintf(dp, sizeof dp, "%s/rank-00002.safetensors", d);
    flip_byte(dp, man.pieces[i].offset + 13);
    ck_manifest_free(&man);

    sl_ckpt *c = sl_ckpt_open(d, err, sizeof err);
    CHECK(c != NULL, "open does not read data: %s", err);
    if (c) {
        float *buf = sl_xmalloc((size_t)(pe - pb) * 4);
        CHECK(sl_ckpt_read(c, "layers.0.mlp.experts.down_proj", pb, pe, buf, err, sizeof err) !=
                      0 &&
                  strstr(err, "rank-00002.safetensors") &&
                  strstr(err, "layers.0.mlp.experts.down_proj") && strstr(err, "CRC"),
              "a flipped byte names the file and tensor: %s", err);
        /* a slice of it too: the whole piece is checked */
        CHECK(sl_ckpt_read(c, "layers.0.mlp.experts.down_proj", pe - 2, pe, buf, err, sizeof err) !=
                  0,
              "a sub-range of the damaged piece fails too");
        CHECK(sl_ckpt_read(c, "layers.0.mlp.experts.down_proj", 0, pb, NULL, err, sizeof err) != 0,
              "NULL destination refused");
        float *all = sl_xmalloc((size_t)pb * 4);
        CHECK(sl_ckpt_read(c, "layers.0.mlp.experts.down_proj", 0, pb, all, err, sizeof err) == 0,
              "other ranks' pieces still read: %s", err);
        free(all);
        free(buf);
        sl_ckpt_close(c);
    }
    tck_lines v = {.n = 0};
    int np = sl_ckpt_verify(d, tck_collect, &v, NULL);
    CHECK(np == 1 &&
              tck_any_line_has(&v, "rank-00002.safetensors", "layers.0.mlp.experts.down_proj"),
          "verify: one problem naming file and tensor (%d: %s)", np, v.n ? v.lines[0] : "");

    /* a damaged manifest: its checksum in COMMIT no longer matches */
    char d2[4096];
    snprintf(d2, sizeof d2, "%s", tck_path("crc/manifest"));
    tck_copy_dir(good, d2);
    snprintf(mp, sizeof mp, "%s/rank-00001.manifest.json", d2);
    flip_byte(mp, 40);
    c = sl_ckpt_open(d2, err, sizeof err);
    CHECK(c == NULL && strstr(err, "rank-00001.manifest.json") && strstr(err, "damaged"),
          "damaged manifest: %s", err);
    sl_ckpt_close(c);

    /* a checkpoint of a newer format version is refused, not guessed at */
    char d5[4096];
    snprintf(d5, sizeof d5, "%s", tck_path("crc/newer"));
    tck_copy_dir(good, d5);
    char cp[8192];
    snprintf(cp, sizeof cp, "%s/COMMIT", d5);
    text = tck_slurp(cp, &n);
    char *ver = text ? strstr(text, "\"format_version\":") : NULL;
    if (ver) {
        ver = strchr(ver, '1');
        *ver = '2';
        tck_put(cp, text, n);
    }
    free(text);
    c = sl_ckpt_open(d5, err, sizeof err);
    CHECK(ver && c == NULL && strstr(err, "COMMIT") && strstr(err, "format_version 2") &&
              strstr(err, "newer sluice"),
          "newer format refused: %s", err);
    sl_ckpt_close(c);

    /* a truncated data file */
    char d3[4096];
    snprintf(d3, sizeof d3, "%s", tck_path("crc/truncated"));
    tck_copy_dir(good, d3);
    snprintf(dp, sizeof dp, "%s/rank-00003.safetensors", d3);
    CHECK(truncate(dp, 100) == 0, "truncate");
    c = sl_ckpt_open(d3, err, sizeof err);
    CHECK(c == NULL && strstr(err, "rank-00003.safetensors") && strstr(err, "truncated"),
          "truncated data file: %s", err);
    sl_ckpt_close(c);

    /* a missing data file and a damaged train_state.json */
    char d4[4096];
    snprintf(d4, sizeof d4, "%s", tck_path("crc/gone"));
    tck_copy_dir(good, d4);
    snprintf(dp, sizeof dp, "%s/rank-00000.safetensors", d4);
    unlink(dp);
    snprintf(mp, sizeof mp, "%s/train_state.json", d4);
    flip_byte(mp, 3);
    v.n = 0;
    np = sl_ckpt_verify(d4, tck_collect, &v, NULL);
    CHECK(np >= 2 && tck_any_line_has(&v, "rank-00000.safetensors", "missing") &&
              tck_any_line_has(&v, "train_state.json", "damaged"),
          "verify lists a missing file and a damaged state (%d problems)", np);
}
