/*
 * tests/test_checkpoint.c - the checkpoint library (io/checkpoint.h) in one process acting as
 * several ranks: a 4-rank save read back by 4, 3, 2 and 1 readers (every byte compared), the
 * trainer state, `latest` and "auto", uncommitted directories ignored and cleaned, coverage
 * errors found at save and at load (a missing expert, a doubled range, a shape conflict),
 * checksum corruption named by file and tensor, keep_last / keep_every, replacing a step, a full
 * disk (RLIMIT_FSIZE in a child) leaving the previous checkpoint intact, the fetch interface,
 * and the Hugging Face export. The loader's coverage checks and the checksums: in
 * tests/test_checkpoint_tamper.c, part of the same program.
 *
 * `test_checkpoint --torture N DIR` is the kill -9 test, `--example DIR WORLD [CONFIG]` writes an
 * example checkpoint (tests/test_checkpoint_torture.c).
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

char tck_work[2048];

const char *tck_path(const char *fmt, ...) {
    static char buf[8][4096];
    static int k;
    char *p = buf[k++ % 8];
    int n = snprintf(p, 4096, "%s/", tck_work);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p + n, 4096 - (size_t)n, fmt, ap);
    va_end(ap);
    return p;
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f) {
    (void)st, (void)flag, (void)f;
    return remove(p);
}

void tck_rmrf(const char *p) {
    nftw(p, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static bool exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

char *tck_slurp(const char *p, size_t *n) {
    char e[512];
    return sl_read_file(p, n, e, sizeof e);
}

void tck_put(const char *p, const void *d, size_t n) {
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(d, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", p);
        exit(1);
    }
}

/* Copies the files of directory `from` into `to` (created). */
void tck_copy_dir(const char *from, const char *to) {
    char e[512];
    sl_mkdirs(to, e, sizeof e);
    DIR *d = opendir(from);
    struct dirent *x;
    while (d && (x = readdir(d))) {
        if (x->d_name[0] == '.') continue;
        char a[4096], b[4096];
        snprintf(a, sizeof a, "%s/%s", from, x->d_name);
        snprintf(b, sizeof b, "%s/%s", to, x->d_name);
        size_t n;
        char *s = tck_slurp(a, &n);
        if (s) tck_put(b, s, n);
        free(s);
    }
    if (d) closedir(d);
}

int tck_count_prefix(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
    if (d) closedir(d);
    return n;
}

static char *latest_of(const char *root) {
    char p[4096];
    snprintf(p, sizeof p, "%s/checkpoints/latest", root);
    size_t n;
    char *s = tck_slurp(p, &n);
    return s ? s : sl_xstrdup("(none)");
}

void tck_collect(void *user, const char *line) {
    tck_lines *c = user;
    if (c->n < 16) snprintf(c->lines[c->n], sizeof c->lines[0], "%s", line);
    c->n++;
}

bool tck_any_line_has(const tck_lines *c, const char *a, const char *b) {
    for (int i = 0; i < c->n && i < 16; i++)
        if (strstr(c->lines[i], a) && (!b || strstr(c->lines[i], b))) return true;
    return false;
}

/* ---- round trip at other world sizes ---- */

static void test_roundtrip(void) {
    ckm_model m;
    ckm_model_init(&m, 16);
    char root[4096];
    snprintf(root, sizeof root, "%s", tck_path("rt"));
    char err[4096];
    int rc = ckm_save_sequential(root, &m, 10, 4, 0, 0, NULL, err, sizeof err);
    CHECK(rc == 0, "4-rank save: %s", err);
    char *l = latest_of(root);
    CHECK(strcmp(l, "step-10\n") == 0, "latest = '%s'", l);
    free(l);
    CHECK(exists(tck_path("rt/checkpoints/step-10/COMMIT")), "COMMIT present");
    CHECK(exists(tck_path("rt/checkpoints/step-10/train_state.json")), "train_state.json present");
    for (int r = 0; r < 4; r++) {
        CHECK(exists(tck_path("rt/checkpoints/step-10/rank-%05d.safetensors", r)), "rank %d data",
              r);
        CHECK(exists(tck_path("rt/checkpoints/step-10/rank-%05d.manifest.json", r)), "manifest %d",
              r);
    }
    CHECK(tck_count_prefix(tck_path("rt/checkpoints"), ".tmp-") == 0,
          "no temporary directory left");
    /* each rank's file is a plain safetensors file of 1-D pieces named <tensor>@<begin> */
    sl_st_file *f =
        sl_st_open(tck_path("rt/checkpoints/step-10/rank-00001.safetensors"), err, sizeof err);
    CHECK(f != NULL, "rank 1 file opens as safetensors: %s", err);
    if (f) {
        int64_t b, e;
        ckm_range(&m.t[1], 1, 4, &b, &e);
        char key[256];
        snprintf(key, sizeof key, "%s@%lld", m.t[1].name, (long long)b);
        int j = sl_st_find(f, key);
        CHECK(j >= 0 && sl_st_ndim(f, j) == 1 && sl_st_shape(f, j)[0] == e - b, "piece %s", key);
        sl_st_close(f);
    }

    sl_ckpt *c = sl_ckpt_open(root, err, sizeof err);
    CHECK(c != NULL, "open: %s", err);
    if (!c) return;
    CHECK(sl_ckpt_step(c) == 10, "step %lld", (long long)sl_ckpt_step(c));
    CHECK(sl_ckpt_world_size(c) == 4, "world size %d", sl_ckpt_world_size(c));
    CHECK(sl_ckpt_format_version(c) == SL_CKPT_FORMAT_VERSION, "format version");
    CHECK(sl_ckpt_sluice_version(c)[0] != 0, "sluice version recorded");
    CHECK(sl_ckpt_tensor_count(c) == m.n, "%d tensors", sl_ckpt_tensor_count(c));
    const cJSON *ts = sl_ckpt_train_state(c);
    const cJSON *tok = cJSON_GetObjectItem(ts, "tokens");
    CHECK(tok && tok->valuedouble == 10000, "trainer state tokens");
    const cJSON *lay = cJSON_GetObjectItem(ts, "layout");
    CHECK(lay && cJSON_GetObjectItem(lay, "world") &&
              cJSON_GetObjectItem(lay, "world")->valueint == 4,
          "trainer state layout");
    uint64_t total = 0;
    for (int k = 0; k < m.n; k++) {
        total += (uint64_t)ckm_numel(&m.t[k]) * ckm_esize(&m.t[k]);
        CHECK(sl_ckpt_expect(c, m.t[k].name, m.t[k].dtype, m.t[k].ndim, m.t[k].shape, err,
                             sizeof err) == 0,
              "expect %s: %s", m.t[k].name, err);
    }
    CHECK(sl_ckpt_data_bytes(c) == total, "data bytes %llu vs %llu",
          (unsigned long long)sl_ckpt_data_bytes(c), (unsigned long long)total);
    CHECK(sl_ckpt_file_count(c) == 4, "4 data files");
    int64_t wrong[3] = {8, 7, 16};
    CHECK(sl_ckpt_expect(c, "layers.0.mlp.experts.gate_up_proj", "F32", 3, wrong, err,
                         sizeof err) != 0 &&
              strstr(err, "layers.0.mlp.experts.gate_up_proj") && strstr(err, "[8, 6, 16]") &&
              strstr(err, "[8, 7, 16]"),
          "shape mismatch names the tensor and both shapes: %s", err);
    CHECK(sl_ckpt_expect(c, "no.such", NULL, 1, wrong, err, sizeof err) != 0 &&
              strstr(err, "no.such"),
          "missing tensor named: %s", err);
    for (int w = 1; w <= 4; w++)
        CHECK(ckm_check_world(c, &m, 10, w) == 0, "reads at world size %d identical", w);
    CHECK(ckm_check_random(c, &m, 10, 25, 7) == 0, "random ranges identical");
    CHECK(sl_ckpt_read(c, "embed.weight", 5, 4, err, err, sizeof err) != 0 &&
              strstr(err, "embed.weight"),
          "reversed range refused: %s", err);
    sl_ckpt_close(c);

    tck_lines v = {.n = 0};
    sl_ckpt_verify_stats st;
    int np = sl_ckpt_verify(root, tck_collect, &v, &st);
    CHECK(np == 0, "verify: %d problems (%s)", np, v.n ? v.lines[0] : "");
    CHECK(st.step == 10 && st.tensors == m.n && st.bytes_checked == total,
          "verify stats: step %lld, %d tensors, %llu bytes", (long long)st.step, st.tensors,
          (unsigned long long)st.bytes_checked);
}

/* ---- latest, auto, uncommitted directories ---- */

void tck_save_ok(const char *root, const ckm_model *m, int64_t step, int world, int keep,
                 int64_t every) {
    char err[4096];
    int rc = ckm_save_sequential(root, m, step, world, keep, every, NULL, err, sizeof err);
    CHECK(rc == 0, "save step %lld: %s", (long long)step, err);
}

static void test_latest(void) {
    ckm_model m;
    ckm_model_init(&m, 8);
    char root[4096];
    snprintf(root, sizeof root, "%s", tck_path("lt"));
    char dir[4096], err[4096];
    CHECK(sl_ckpt_find_latest(root, dir, sizeof dir, err, sizeof err) == 0,
          "nothing there yet: a fresh start");
    tck_save_ok(root, &m, 10, 4, 0, 0);
    tck_save_ok(root, &m, 20, 4, 0, 0);
    CHECK(sl_ckpt_find_latest(root, dir, sizeof dir, err, sizeof err) == 1 &&
              strstr(dir, "step-20"),
          "latest: %s", dir);
    CHECK(sl_ckpt_find_latest(tck_path("lt/checkpoints"), dir, sizeof dir, err, sizeof err) == 1 &&
              strstr(dir, "step-20"),
          "latest from the checkpoints dir: %s", dir);

    /* an interrupted save: every rank wrote, nobody committed */
    sl_ckpt_writer *w[4];
    void **bufs[4];
    int nb[4];
    for (int r = 0; r < 4; r++) {
        sl_ckpt_save_opts o = {.root = root, .step = 30, .rank = r, .world_size = 4};
        w[r] = sl_ckpt_save_begin(&o, err, sizeof err);
        CHECK(w[r] != NULL, "begin: %s", err);
    }
    for (int r = 0; r < 4; r++) {
        ckm_add_pieces(w[r], &m, r, 4, 30, NULL, &bufs[r], &nb[r]);
        CHECK(sl_ckpt_save_write(w[r], err, sizeof err) == 0, "write: %s", err);
        sl_ckpt_save_abort(w[r]);
        ckm_free_bufs(bufs[r], nb[r]);
    }
    CHECK(exists(tck_path("lt/checkpoints/.tmp-step-30/rank-00003.manifest.json")),
          "the interrupted save's files are there");
    CHECK(sl_ckpt_find_latest(root, dir, sizeof dir, err, sizeof err) == 1 &&
              strstr(dir, "step-20"),
          "the uncommitted save is ignored: %s", dir);
    sl_ckpt *c = sl_ckpt_open(tck_path("lt/checkpoints/.tmp-step-30"), err, sizeof err);
    CHECK(c == NULL && strstr(err, "not a committed checkpoint"), "tmp dir refused: %s", err);
    sl_ckpt_close(c);
    /* a step-* directory without COMMIT (copied by hand, say) is never loaded either */
    tck_copy_dir(tck_path("lt/checkpoints/.tmp-step-30"), tck_path("lt/checkpoints/step-30"));
    c = sl_ckpt_open(tck_path("lt/checkpoints/step-30"), err, sizeof err);
    CHECK(c == NULL && strstr(err, "not a committed checkpoint"), "no COMMIT refused: %s", err);
    sl_ckpt_close(c);
    c = sl_ckpt_open(tck_path("lt/checkpoints/step-30//"), err, sizeof err);
    CHECK(c == NULL && strstr(err, "not a committed checkpoint"), "the same with a slash: %s", err);
    sl_ckpt_close(c);
    /* without `latest` the newest committed directory is found by its name */
    rename(tck_path("lt/checkpoints/latest"), tck_path("lt/latest.saved"));
    CHECK(sl_ckpt_find_latest(root, dir, sizeof dir, err, sizeof err) == 1 &&
              strstr(dir, "step-20"),
          "fallback skips step-30 without COMMIT: %s", dir);
    /* a dangling `latest` falls back the same way */
    tck_put(tck_path("lt/checkpoints/latest"), "step-99\n", 8);
    CHECK(sl_ckpt_find_latest(root, dir, sizeof dir, err, sizeof err) == 1 &&
              strstr(dir, "step-20"),
          "dangling latest: %s", dir);
    rename(tck_path("lt/latest.saved"), tck_path("lt/checkpoints/latest"));
    tck_rmrf(tck_path("lt/checkpoints/step-30"));

    /* the next save removes the leftover and moves `latest` */
    tck_save_ok(root, &m, 40, 4, 0, 0);
    CHECK(!exists(tck_path("lt/checkpoints/.tmp-step-30")), "leftover removed by the next save");
    char *l = latest_of(root);
    CHECK(strcmp(l, "step-40\n") == 0, "latest = '%s'", l);
    free(l);
    CHECK(tck_count_prefix(tck_path("lt/checkpoints"), "latest.tmp") == 0, "no latest.tmp left");
    c = sl_ckpt_open(root, err, sizeof err);
    CHECK(c && sl_ckpt_step(c) == 40 && ckm_check_world(c, &m, 40, 2) == 0, "auto opens 40: %s",
          c ? "" : err);
    sl_ckpt_close(c);
    c = sl_ckpt_open(tck_path("lt/checkpoints/step-20"), err, sizeof err);
    CHECK(c && sl_ckpt_step(c) == 20 && ckm_check_world(c, &m, 20, 1) == 0,
          "an explicit older checkpoint: %s", c ? "" : err);
    sl_ckpt_close(c);
    c = sl_ckpt_open(tck_path("nowhere"), err, sizeof err);
    CHECK(c == NULL && strstr(err, "nowhere"), "missing path named: %s", err);
}

/* ---- coverage problems caught by the save ---- */

static void test_coverage_save(void) {
    ckm_model m;
    ckm_model_init(&m, 8);
    char root[4096];
    snprintf(root, sizeof root, "%s", tck_path("cov"));
    char err[4096];
    tck_save_ok(root, &m, 10, 4, 0, 0);
    ckm_fault drop = {2, "layers.0.mlp.experts.gate_up_proj", 0};
    int rc = ckm_save_sequential(root, &m, 20, 4, 0, 0, &drop, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "layers.0.mlp.experts.gate_up_proj") && strstr(err, "missing") &&
              strstr(err, "[4, 6) of dimension 0"),
          "a missing expert fails the save, naming tensor and experts: %s", err);
    ckm_fault dup = {1, "optim.exp_avg.flat", 1};
    rc = ckm_save_sequential(root, &m, 20, 4, 0, 0, &dup, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "optim.exp_avg.flat") && strstr(err, "saved twice") &&
              strstr(err, "rank-00001") && strstr(err, "rank-00002"),
          "a doubled range fails the save, naming both ranks: %s", err);
    char *l = latest_of(root);
    CHECK(strcmp(l, "step-10\n") == 0, "latest unchanged: '%s'", l);
    free(l);
    CHECK(!exists(tck_path("cov/checkpoints/step-20")), "nothing committed");
    CHECK(tck_count_prefix(tck_path("cov/checkpoints"), ".tmp-") == 0, "failed save cleaned up");

    /* misuse of the writer */
    sl_ckpt_save_opts o = {.root = root, .step = 30, .rank = 0, .world_size = 1};
    sl_ckpt_writer *w = sl_ckpt_save_begin(&o, err, sizeof err);
    int64_t sh[1] = {10};
    float d[10] = {0};
    CHECK(sl_ckpt_save_piece(w, "x", "F32", 1, sh, 0, 11, d) != 0, "range past the end refused");
    CHECK(sl_ckpt_save(w, NULL, err, sizeof err) != 0 && strstr(err, "'x'"), "sticky: %s", err);
    w = sl_ckpt_save_begin(&o, err, sizeof err);
    sl_ckpt_save_piece(w, "x", "F32", 1, sh, 0, 10, d);
    sl_ckpt_save_piece(w, "x", "F32", 1, sh, 0, 10, d);
    CHECK(sl_ckpt_save(w, NULL, err, sizeof err) != 0 && strstr(err, "declared twice"),
          "same piece twice: %s", err);
    w = sl_ckpt_save_begin(&o, err, sizeof err);
    CHECK(sl_ckpt_save_piece(w, "x", "Q7", 1, sh, 0, 10, d) != 0, "unknown dtype refused");
    sl_ckpt_save_abort(w);
}

/* ---- retention and replacement ---- */

static void test_retention(void) {
    ckm_model m;
    ckm_model_init(&m, 4);
    char root[4096];
    snprintf(root, sizeof root, "%s", tck_path("keep"));
    for (int s = 10; s <= 70; s += 10) tck_save_ok(root, &m, s, 2, 2, 30);
    for (int s = 10; s <= 70; s += 10) {
        bool want = s == 30 || s == 60 || s == 70;
        CHECK(exists(tck_path("keep/checkpoints/step-%d", s)) == want, "step-%d %s", s,
              want ? "kept" : "removed");
    }
    CHECK(tck_count_prefix(tck_path("keep/checkpoints"), ".tmp-") == 0, "no leftovers");
    /* keep_last 0 keeps everything */
    char all[4096];
    snprintf(all, sizeof all, "%s", tck_path("keepall"));
    for (int s = 1; s <= 4; s++) tck_save_ok(all, &m, s, 1, 0, 0);
    CHECK(tck_count_prefix(tck_path("keepall/checkpoints"), "step-") == 4, "keep_last 0 keeps all");

    /* saving an existing step again replaces it whole (here with another world size) */
    tck_save_ok(root, &m, 70, 3, 2, 30);
    char err[4096];
    sl_ckpt *c = sl_ckpt_open(root, err, sizeof err);
    CHECK(c && sl_ckpt_step(c) == 70 && sl_ckpt_world_size(c) == 3 &&
              ckm_check_world(c, &m, 70, 2) == 0,
          "replaced step-70: %s", c ? "" : err);
    sl_ckpt_close(c);
    CHECK(exists(tck_path("keep/checkpoints/step-70/rank-00002.safetensors")) &&
              !exists(tck_path("keep/checkpoints/step-70/rank-00003.safetensors")),
          "no file of the replaced checkpoint remains");
    CHECK(tck_count_prefix(tck_path("keep/checkpoints"), ".tmp-") == 0, "replaced copy removed");
}

/* ---- a full disk ---- */

static void test_write_failure(void) {
    ckm_model m;
    ckm_model_init(&m, 64);
    char root[4096];
    snprintf(root, sizeof root, "%s", tck_path("full"));
    tck_save_ok(root, &m, 10, 2, 0, 0);
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        /* files may not grow beyond 16 KiB: each rank's data file is larger */
        struct rlimit rl = {16384, 16384};
        signal(SIGXFSZ, SIG_IGN);
        setrlimit(RLIMIT_FSIZE, &rl);
        char err[4096];
        int rc = ckm_save_sequential(root, &m, 20, 2, 0, 0, NULL, err, sizeof err);
        printf("child: save returned %d: %s\n", rc, err);
        _exit(rc != 0 && strstr(err, "/checkpoints/.tmp-step-20/rank-0000") &&
                      strstr(err, "File too large")
                  ? 0
                  : 1);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the failed save reported the file it could not "
                                                 "write");
    char *l = latest_of(root);
    CHECK(strcmp(l, "step-10\n") == 0, "latest unchanged: '%s'", l);
    free(l);
    CHECK(!exists(tck_path("full/checkpoints/step-20")), "nothing committed");
    CHECK(!exists(tck_path("full/checkpoints/.tmp-step-20")), "the failed save was removed");
    char err[4096];
    sl_ckpt *c = sl_ckpt_open(root, err, sizeof err);
    CHECK(c && sl_ckpt_step(c) == 10 && ckm_check_world(c, &m, 10, 2) == 0,
          "the previous checkpoint loads: %s", c ? "" : err);
    sl_ckpt_close(c);
    CHECK(sl_ckpt_verify(root, NULL, NULL, NULL) == 0, "and verifies");
}

/* ---- the fetch interface, a rank without pieces ---- */

typedef struct {
    int fail_at; /* byte offset at which to fail, -1 never */
    int calls;
} fetch_ctx;

static int fetch(void *user, uint64_t off, void *dst, size_t n) {
    fetch_ctx *f = user;
    f->calls++;
    if (f->fail_at >= 0 && off >= (uint64_t)f->fail_at) return -1;
    for (size_t i = 0; i < n / 4; i++) {
        float v = (float)((off / 4) + i);
        memcpy((char *)dst + 4 * i, &v, 4);
    }
    return 0;
}

static void test_fetch(void) {
    char root[4096];
    snprintf(root, sizeof root, "%s", tck_path("fetch"));
    const int64_t n = 3 * 1024 * 1024; /* 12 MiB: two fetch calls */
    char err[4096];
    for (int fail = 0; fail < 2; fail++) {
        fetch_ctx f = {fail ? 8 << 20 : -1, 0};
        sl_ckpt_writer *w[2];
        for (int r = 0; r < 2; r++) {
            sl_ckpt_save_opts o = {.root = root, .step = 5 + fail, .rank = r, .world_size = 2};
            w[r] = sl_ckpt_save_begin(&o, err, sizeof err);
        }
        CHECK(sl_ckpt_save_piece_fn(w[0], "big", "F32", 1, &n, 0, n, fetch, &f) == 0, "piece");
        /* rank 1 owns nothing: it still writes a manifest */
        int r1 = sl_ckpt_save(w[1], NULL, err, sizeof err);
        int r0 = sl_ckpt_save(w[0], NULL, err, sizeof err);
        if (!fail) {
            CHECK(r1 == 0 && r0 == 0 && f.calls == 2, "fetch save: %s (%d calls)", err, f.calls);
        } else {
            CHECK(r0 != 0 && strstr(err, "data source failed") && strstr(err, "'big'"),
                  "a failing fetch fails the save: %s", err);
        }
    }
    sl_ckpt *c = sl_ckpt_open(root, err, sizeof err);
    CHECK(c && sl_ckpt_step(c) == 5 && sl_ckpt_file_count(c) == 1, "open: %s", c ? "" : err);
    if (c) {
        float v[4];
        CHECK(sl_ckpt_read(c, "big", n - 4, n, v, err, sizeof err) == 0 && v[0] == (float)(n - 4) &&
                  v[3] == (float)(n - 1),
              "fetched data read back: %s", err);
        sl_ckpt_close(c);
    }
}

/* ---- export ---- */

float tck_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_export(void) {
    ckm_model m;
    ckm_model_init(&m, 16);
    char root[4096];
    snprintf(root, sizeof root, "%s", tck_path("exp"));
    tck_save_ok(root, &m, 10, 4, 0, 0);
    char err[4096];
    sl_ckpt *c = sl_ckpt_open(root, err, sizeof err);
    CHECK(c != NULL, "open: %s", err);
    if (!c) return;
    char out[4096];
    snprintf(out, sizeof out, "%s", tck_path("exp/hf"));
    sl_ckpt_export_opts o = {.dtype = "BF16",
                             .max_shard_bytes = 1024,
                             .config_json = "{\"model_type\": \"qwen3_moe\"}\n",
                             .skip_prefix = "optim."};
    int n = sl_ckpt_export_hf(c, out, &o, err, sizeof err);
    CHECK(n == 5, "exported %d tensors (5 without optim.*): %s", n, err);
    size_t len;
    char *idx = tck_slurp(tck_path("exp/hf/model.safetensors.index.json"), &len);
    cJSON *j = idx ? cJSON_Parse(idx) : NULL;
    const cJSON *map = cJSON_GetObjectItem(j, "weight_map");
    CHECK(map && cJSON_GetArraySize(map) == 5 && !cJSON_GetObjectItem(map, "optim.exp_avg.flat"),
          "index lists 5 tensors, no optimizer state");
    int files = tck_count_prefix(out, "model-");
    CHECK(files >= 3, "%d shards of at most 1 KiB (one tensor may exceed it)", files);
    for (int k = 0; map && k < m.n; k++) {
        const ckm_tensor *t = &m.t[k];
        const cJSON *fj = cJSON_GetObjectItem(map, t->name);
        if (strncmp(t->name, "optim.", 6) == 0) continue;
        CHECK(fj && cJSON_IsString(fj), "%s in the index", t->name);
        if (!fj) continue;
        char p[4096];
        ck_path(p, sizeof p, "%s/%s", out, fj->valuestring);
        sl_st_file *f = sl_st_open(p, err, sizeof err);
        CHECK(f != NULL, "%s: %s", p, err);
        if (!f) continue;
        int ji = sl_st_find(f, t->name);
        const int64_t ne = ckm_numel(t);
        CHECK(ji >= 0 && strcmp(sl_st_dtype(f, ji), "BF16") == 0 && sl_st_ndim(f, ji) == t->ndim,
              "%s: BF16 with the global shape", t->name);
        if (ji >= 0 && ne > 0) {
            uint16_t *h = sl_xmalloc((size_t)ne * 2);
            void *src = sl_xmalloc((size_t)ne * ckm_esize(t));
            ckm_fill(t, 10, 0, ne, src);
            sl_st_read(f, ji, h, (size_t)ne * 2, err, sizeof err);
            int bad = 0;
            for (int64_t q = 0; q < ne; q++) {
                float want = strcmp(t->dtype, "F32") == 0 ? sl_test_bf16_round(((float *)src)[q])
                                                          : tck_bf16_to_f32(((uint16_t *)src)[q]);
                if (tck_bf16_to_f32(h[q]) != want) bad++;
            }
            CHECK(bad == 0, "%s: %d values differ from bf16 rounding", t->name, bad);
            free(h);
            free(src);
        }
        sl_st_close(f);
    }
    cJSON_Delete(j);
    free(idx);
    char *cfg = tck_slurp(tck_path("exp/hf/config.json"), &len);
    CHECK(cfg && strstr(cfg, "qwen3_moe"), "config.json written");
    free(cfg);
    /* again as F32 in one shard: the old shards are replaced */
    sl_ckpt_export_opts o2 = {.dtype = "F32", .skip_prefix = "optim."};
    n = sl_ckpt_export_hf(c, out, &o2, err, sizeof err);
    CHECK(n == 5 && tck_count_prefix(out, "model-") == 0 &&
              exists(tck_path("exp/hf/model.safetensors")),
          "re-export to one file: %d, %s", n, err);
    sl_st_file *f = sl_st_open(tck_path("exp/hf/model.safetensors"), err, sizeof err);
    int ji = f ? sl_st_find(f, "layers.0.mlp.router.bias") : -1;
    CHECK(ji >= 0 && strcmp(sl_st_dtype(f, ji), "F32") == 0, "bf16 tensor widened to F32");
    if (f) sl_st_close(f);
    sl_ckpt_export_opts o3 = {.dtype = "I8"};
    CHECK(sl_ckpt_export_hf(c, out, &o3, err, sizeof err) < 0 && strstr(err, "I8"), "bad dtype: %s",
          err);
    sl_ckpt_close(c);
}

/* Integers up to 2^53 survive printing: cJSON's own number printing wrote 7999999999999999 as
 * 8e+15 (found by the checkpoint fuzzer, 2026-11-28), so a step read back differed. */
static void test_big_integers(void) {
    const int64_t steps[] = {0, 1, 2147483647, 2147483648, 7999999999999999, INT64_C(1) << 53};
    char err[256];
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        cJSON *trainer = cJSON_CreateObject();
        char *text = ck_state_print(steps[i], 3, "0.1.0", trainer);
        ck_state s;
        const int rc = ck_state_parse(text, strlen(text), "test", &s, err, sizeof err);
        CHECK(rc == 0 && s.step == steps[i], "step %lld printed as %s reads back",
              (long long)steps[i], text);
        if (rc == 0) ck_state_free(&s);
        free(text);
        cJSON_Delete(trainer);
    }
}

int main(int argc, char **argv) {
    if (argc >= 4 && strcmp(argv[1], "--torture") == 0) return tck_torture(atoi(argv[2]), argv[3]);
    if (argc >= 4 && strcmp(argv[1], "--example") == 0)
        return tck_example(argv[2], atoi(argv[3]), argc >= 5 ? argv[4] : NULL);
    const char *dir = argc >= 2 ? argv[1] : "test_checkpoint_work";
    if (dir[0] != '/') {
        char cwd[1024];
        if (!getcwd(cwd, sizeof cwd)) return 1;
        ck_path(tck_work, sizeof tck_work, "%s/%s", cwd, dir);
    } else {
        snprintf(tck_work, sizeof tck_work, "%s", dir);
    }
    tck_rmrf(tck_work);
    char err[512];
    sl_mkdirs(tck_work, err, sizeof err);
    test_roundtrip();
    test_latest();
    test_coverage_save();
    test_coverage_load();
    test_corruption();
    test_retention();
    test_write_failure();
    test_fetch();
    test_export();
    test_big_integers();
    return sl_test_finish("test_checkpoint");
}
