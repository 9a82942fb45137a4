/*
 * tests/test_checkpoint_mpi.c - checkpoints written by real MPI ranks in parallel (mpirun -np 4
 * and -np 2): every rank writes only its own pieces, the agreement collective is an all-reduce
 * over the world communicator. Then each rank reads the slices it would own at other world
 * sizes (1 to 8) and compares every byte; keep_last removes old checkpoints; a rank whose data
 * source fails, and a rank that skips a piece, make the save fail on every rank while `latest`
 * keeps naming the last good checkpoint.
 *
 * usage: mpirun -np N test_checkpoint_mpi WORK_DIR
 */
#include <dirent.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/comm.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "io/checkpoint.h"
#include "tests/checkpoint_model.h"
#include "tests/test_util.h"

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f) {
    (void)st, (void)flag, (void)f;
    return remove(p);
}

static int failing_fetch(void *user, uint64_t off, void *dst, size_t n) {
    (void)user, (void)off, (void)dst, (void)n;
    return -1;
}

/* Every rank saves its pieces of `step`; returns this rank's status. */
static int save(sl_comm *world, const char *root, const ckm_model *m, int64_t step, int keep,
                const ckm_fault *fault, bool fail_fetch, char *err, size_t errlen) {
    const int rank = sl_comm_rank(world), size = sl_comm_size(world);
    sl_ckpt_save_opts o = {.root = root,
                           .step = step,
                           .rank = rank,
                           .world_size = size,
                           .agree = sl_ckpt_agree_comm,
                           .agree_user = world,
                           .keep_last = keep};
    sl_ckpt_writer *w = sl_ckpt_save_begin(&o, err, errlen);
    if (!w) return -1;
    void **bufs = NULL;
    int nb = 0;
    ckm_add_pieces(w, m, rank, size, step, fault, &bufs, &nb);
    if (fail_fetch) {
        int64_t n = 1000;
        sl_ckpt_save_piece_fn(w, "extra", "F32", 1, &n, 0, n, failing_fetch, NULL);
    }
    cJSON *state = cJSON_CreateObject();
    cJSON_AddNumberToObject(state, "tokens", (double)step * 1000);
    int rc = sl_ckpt_save(w, rank == 0 ? state : NULL, err, errlen);
    cJSON_Delete(state);
    ckm_free_bufs(bufs, nb);
    return rc;
}

int main(int argc, char **argv) {
    sl_comm *world = sl_comm_init_world(&argc, &argv);
    const int rank = sl_comm_rank(world), size = sl_comm_size(world);
    if (argc < 2) {
        fprintf(stderr, "usage: test_checkpoint_mpi WORK_DIR\n");
        sl_comm_finalize(world);
        return 2;
    }
    char root[1024], err[4096];
    snprintf(root, sizeof root, "%s/np%d", argv[1], size);
    if (rank == 0) {
        nftw(root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        sl_mkdirs(root, err, sizeof err);
    }
    sl_comm_barrier(world);
    ckm_model m;
    ckm_model_init(&m, 256);

    for (int64_t s = 1; s <= 3; s++) {
        int rc = save(world, root, &m, s, 2, NULL, false, err, sizeof err);
        CHECK(rc == 0, "rank %d: save step %lld: %s", rank, (long long)s, err);
    }
    sl_comm_barrier(world);
    sl_ckpt *c = sl_ckpt_open(root, err, sizeof err);
    CHECK(c != NULL, "rank %d: open: %s", rank, err);
    if (c) {
        CHECK(sl_ckpt_step(c) == 3 && sl_ckpt_world_size(c) == size, "rank %d: step %lld of %d",
              rank, (long long)sl_ckpt_step(c), sl_ckpt_world_size(c));
        /* as rank `rank` of every other world size that has one */
        for (int w = 1; w <= 8; w++)
            if (rank < w)
                CHECK(ckm_check_rank(c, &m, 3, rank, w) == 0,
                      "rank %d: its slices at world size %d", rank, w);
        sl_ckpt_close(c);
    }
    if (rank == 0) {
        char p[2048];
        snprintf(p, sizeof p, "%s/checkpoints/step-1", root);
        struct stat st;
        CHECK(stat(p, &st) != 0, "keep_last 2 removed step-1");
        snprintf(p, sizeof p, "%s/checkpoints/step-2/COMMIT", root);
        CHECK(stat(p, &st) == 0, "step-2 kept");
        CHECK(sl_ckpt_verify(root, NULL, NULL, NULL) == 0, "verify");
    }

    if (size > 1) {
        /* rank 1's data source fails: nobody commits */
        int rc = save(world, root, &m, 4, 2, NULL, rank == 1, err, sizeof err);
        CHECK(rc != 0, "rank %d: a failed rank fails the save everywhere", rank);
        if (rank == 1)
            CHECK(strstr(err, "data source failed") && strstr(err, "rank-00001.safetensors"),
                  "rank 1 names its file: %s", err);
        if (rank == 0) CHECK(strstr(err, "1 of"), "rank 0 counts the failed ranks: %s", err);
        /* rank 1 skips its experts: rank 0 refuses to commit, naming tensor and range */
        ckm_fault drop = {1, "layers.0.mlp.experts.down_proj", 0};
        rc = save(world, root, &m, 5, 2, &drop, false, err, sizeof err);
        CHECK(rc != 0, "rank %d: a missing piece fails the save everywhere", rank);
        if (rank == 0)
            CHECK(strstr(err, "layers.0.mlp.experts.down_proj") && strstr(err, "missing"),
                  "rank 0 names the tensor: %s", err);
        sl_comm_barrier(world);
        char dir[2048];
        CHECK(sl_ckpt_find_latest(root, dir, sizeof dir, err, sizeof err) == 1 &&
                  strstr(dir, "step-3"),
              "rank %d: latest still step-3: %s", rank, dir);
    }
    sl_comm_barrier(world);
    char name[64];
    snprintf(name, sizeof name, "test_checkpoint_mpi rank %d/%d", rank, size);
    int rc = sl_test_finish(name);
    int64_t total = rc != 0;
    sl_comm_allreduce_sum_i64(world, &total, 1);
    sl_comm_finalize(world);
    return total ? 1 : 0;
}
