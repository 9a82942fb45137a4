/*
 * tests/test_checkpoint_torture.c - part of test_checkpoint (tests/test_checkpoint.c): its two
 * other modes. `--torture N DIR` is the kill -9 test: a child saving repeatedly is killed at
 * random moments N times; after each kill the newest committed checkpoint must load, verify,
 * hold exactly its step's bytes and never be older than the one found before.
 * `--example DIR WORLD [CONFIG]` saves one checkpoint for the command-line tests.
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

/* ---- kill -9 torture ---- */

static void child_saver(const char *root, const ckm_model *m, int64_t first) {
    char err[4096];
    for (int64_t s = first;; s++) {
        if (ckm_save_sequential(root, m, s, 4, 2, 0, NULL, err, sizeof err) != 0) {
            fprintf(stderr, "child: save %lld: %s\n", (long long)s, err);
            _exit(3);
        }
    }
}

int tck_torture(int rounds, const char *dir) {
    snprintf(tck_work, sizeof tck_work, "%s", dir);
    tck_rmrf(dir);
    char err[4096], found[4096];
    sl_mkdirs(dir, err, sizeof err);
    char root[4096];
    snprintf(root, sizeof root, "%s", tck_path("run"));
    ckm_model m;
    ckm_model_init(&m, 512); /* about 2 MB per checkpoint */
    /* how long one save takes here, to spread the kills over whole saves */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    tck_save_ok(tck_path("timing"), &m, 1, 4, 1, 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double save_s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("torture: one save takes %.1f ms; %d kills\n", 1e3 * save_s, rounds);
    uint64_t rng = 12345;
    int64_t last = -1;
    int none = 0, mid_save = 0, before_latest = 0, stalled = 0;
    double max_delay_s = 3 * save_s;
    for (int i = 0; i < rounds; i++) {
        fflush(stdout), fflush(stderr);
        pid_t pid = fork();
        if (pid == 0) child_saver(root, &m, last + 1);
        /* up to three saves' time, so that kills land in every phase of a save; longer when
         * the child keeps being killed before it commits anything (saves here vary in time) */
        double u = sl_test_rand_unif(&rng);
        useconds_t us = (useconds_t)(u * max_delay_s * 1e6) + 200;
        usleep(us);
        kill(pid, SIGKILL);
        int st = 0;
        waitpid(pid, &st, 0);
        CHECK(WIFSIGNALED(st), "round %d: the child died of the kill, not on its own (status %d)",
              i, st);
        /* where the kill landed: inside a save (its temporary directory is there), or between
         * the rename of a step directory and the update of `latest` */
        char ckdir[4096];
        ck_path(ckdir, sizeof ckdir, "%s/checkpoints", root);
        if (tck_count_prefix(ckdir, ".tmp-") > 0) mid_save++;
        int nsteps = 0;
        int64_t *steps = ck_committed_steps(ckdir, &nsteps), newest = -1;
        for (int k = 0; k < nsteps; k++) newest = steps[k] > newest ? steps[k] : newest;
        free(steps);
        int f = sl_ckpt_find_latest(root, found, sizeof found, err, sizeof err);
        CHECK(f >= 0, "round %d: find: %s", i, err);
        if (f == 1) {
            char want[64];
            snprintf(want, sizeof want, "/step-%lld", (long long)newest);
            if (!strstr(found, want)) before_latest++;
        }
        if (f == 0) {
            CHECK(last < 0, "round %d: a committed checkpoint disappeared", i);
            none++;
            if (++stalled >= 3) max_delay_s *= 2, stalled = 0;
            continue;
        }
        sl_ckpt *c = sl_ckpt_open(found, err, sizeof err);
        CHECK(c != NULL, "round %d: the newest committed checkpoint %s does not open: %s", i, found,
              err);
        if (!c) continue;
        int64_t s = sl_ckpt_step(c);
        CHECK(s >= last, "round %d: step %lld older than the %lld found before", i, (long long)s,
              (long long)last);
        CHECK(ckm_check_world(c, &m, s, 3) == 0, "round %d: step %lld content", i, (long long)s);
        sl_ckpt_close(c);
        tck_lines v = {.n = 0};
        int np = sl_ckpt_verify(found, tck_collect, &v, NULL);
        CHECK(np == 0, "round %d: verify %s: %s", i, found, v.n ? v.lines[0] : "");
        stalled = s > last ? 0 : stalled + 1;
        if (stalled >= 3) max_delay_s *= 2, stalled = 0;
        if (getenv("SLUICE_TORTURE_VERBOSE"))
            printf("round %d: killed after %u us, newest committed step %lld\n", i, (unsigned)us,
                   (long long)s);
        last = s;
    }
    printf("torture: %d kills: %d inside a save, %d with a committed step newer than `latest` "
           "(killed between the rename and the update of `latest`), %d before the first commit; "
           "newest checkpoint at the end: step %lld\n",
           rounds, mid_save, before_latest, none, (long long)last);
    CHECK(last >= 1, "some checkpoint was committed during the test");
    return sl_test_finish("test_checkpoint --torture");
}

/* `--example DIR WORLD [CONFIG]`: a checkpoint of step 7 written by WORLD ranks under DIR/run
 * (the run config CONFIG stored as the trainer state's "config"), and the expected values of
 * its model tensors as float32 files DIR/expected/<tensor>.f32, for the CLI test. */
int tck_example(const char *dir, int world, const char *config) {
    char err[4096], p[8192];
    cJSON *extra = cJSON_CreateObject();
    cJSON_AddStringToObject(extra, "stage", "pretrain");
    if (config) {
        size_t n;
        char *text = sl_read_file(config, &n, err, sizeof err);
        cJSON *cfg = text ? cJSON_Parse(text) : NULL;
        free(text);
        if (!cfg) {
            fprintf(stderr, "example: %s: not readable JSON\n", config);
            return 1;
        }
        cJSON_AddItemToObject(extra, "config", cfg);
    }
    ckm_extra_state = extra;
    ckm_model m;
    ckm_model_init(&m, 24);
    ck_path(p, sizeof p, "%s/run", dir);
    int rc = ckm_save_sequential(p, &m, 7, world, 0, 0, NULL, err, sizeof err);
    ckm_extra_state = NULL;
    cJSON_Delete(extra);
    if (rc != 0) {
        fprintf(stderr, "example: %s\n", err);
        return 1;
    }
    ck_path(p, sizeof p, "%s/expected", dir);
    if (sl_mkdirs(p, err, sizeof err) != 0) return 1;
    for (int k = 0; k < m.n; k++) {
        const ckm_tensor *t = &m.t[k];
        if (strcmp(t->dtype, "I64") == 0) continue;
        const int64_t n = ckm_numel(t);
        void *src = sl_xmalloc((size_t)n * ckm_esize(t) + 1);
        float *f = sl_xmalloc((size_t)n * 4 + 1);
        ckm_fill(t, 7, 0, n, src);
        for (int64_t i = 0; i < n; i++)
            f[i] = strcmp(t->dtype, "F32") == 0 ? ((float *)src)[i]
                                                : tck_bf16_to_f32(((uint16_t *)src)[i]);
        ck_path(p, sizeof p, "%s/expected/%s.f32", dir, t->name);
        tck_put(p, f, (size_t)n * 4);
        free(src);
        free(f);
    }
    return 0;
}
