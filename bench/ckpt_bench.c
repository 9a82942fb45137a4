/*
 * bench/ckpt_bench.c - save and load throughput of io/checkpoint.h (driven by
 * bench/ckpt_bench.sh, which also times `cp` of the same bytes on the same disk).
 *
 *   ckpt_bench save DIR [--mb N] [--ranks W] [--tensors T] [--step S]
 *   ckpt_bench load DIR [--ranks R]      (reads every byte once, as R ranks' shares)
 *   ckpt_bench evict PATH...             (drops the files' pages from the page cache)
 *
 * save: a model of T float32 tensors, N MiB in all, each split into W contiguous pieces (one
 * per rank, as expert stacks and ZeRO-1 shards are). Under mpirun every rank writes its own
 * pieces in parallel (agreement over MPI); in a plain process the W ranks write one after the
 * other. Timed: begin to committed (all data and manifests fsynced, renamed, `latest`
 * replaced). load: opening the newest checkpoint under DIR and reading every tensor (the CRC of
 * every piece checked), with the pages evicted first unless --warm. Prints one JSON line each.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/log.h"
#include "io/checkpoint.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int evict_file(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    fdatasync(fd); /* only clean pages can be dropped */
    int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    return rc;
}

/* Every regular file under path (one level of directories is enough for a checkpoint). */
static void evict(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return;
    if (!S_ISDIR(st.st_mode)) {
        evict_file(path);
        return;
    }
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        evict(p);
    }
    if (d) closedir(d);
}

static long arg_long(int argc, char **argv, const char *name, long def) {
    for (int i = 0; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) return atol(argv[i + 1]);
    return def;
}

static bool has_flag(int argc, char **argv, const char *name) {
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], name) == 0) return true;
    return false;
}

static int run_save(sl_comm *world, const char *dir, int argc, char **argv) {
    const int nproc = sl_comm_size(world), me = sl_comm_rank(world);
    const long mb = arg_long(argc, argv, "--mb", 1024);
    const int ranks = nproc > 1 ? nproc : (int)arg_long(argc, argv, "--ranks", 4);
    const int ntens = (int)arg_long(argc, argv, "--tensors", 64);
    const int64_t step = arg_long(argc, argv, "--step", 1);
    const int64_t per_tensor = (int64_t)mb * (1 << 20) / 4 / ntens;
    /* the ranks this process plays */
    const int r0 = nproc > 1 ? me : 0, r1 = nproc > 1 ? me + 1 : ranks;
    int64_t mine = 0;
    for (int r = r0; r < r1; r++)
        mine += (per_tensor * (r + 1) / ranks - per_tensor * r / ranks) * ntens;
    float *data = sl_xmalloc((size_t)mine * 4 + 4);
    uint64_t x = 88172645463325252ull ^ (uint64_t)me;
    for (int64_t i = 0; i < mine; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        data[i] = (float)(int32_t)(x >> 40) * 1e-6f;
    }
    char err[4096];
    sl_ckpt_writer **w = sl_xcalloc((size_t)ranks, sizeof *w);
    sl_comm_barrier(world);
    const double t0 = now();
    for (int r = r0; r < r1; r++) {
        sl_ckpt_save_opts o = {.root = dir,
                               .step = step,
                               .rank = r,
                               .world_size = ranks,
                               .agree = nproc > 1 ? sl_ckpt_agree_comm : NULL,
                               .agree_user = world,
                               .keep_last = 1};
        w[r] = sl_ckpt_save_begin(&o, err, sizeof err);
        if (!w[r]) sl_fatal("save begin: %s", err);
    }
    int64_t off = 0;
    for (int r = r0; r < r1; r++)
        for (int t = 0; t < ntens; t++) {
            char name[64];
            snprintf(name, sizeof name, "layers.%d.weight", t);
            int64_t b = per_tensor * r / ranks, e = per_tensor * (r + 1) / ranks;
            sl_ckpt_save_piece(w[r], name, "F32", 1, &per_tensor, b, e, data + off);
            off += e - b;
        }
    for (int r = r0; r < r1; r++)
        if (sl_ckpt_save_write(w[r], err, sizeof err) != 0) sl_fatal("save: %s", err);
    cJSON *state = cJSON_CreateObject();
    for (int r = r1 - 1; r >= r0; r--)
        if (sl_ckpt_save_commit(w[r], r == 0 ? state : NULL, err, sizeof err) != 0)
            sl_fatal("commit: %s", err);
    sl_comm_barrier(world);
    const double dt = now() - t0;
    cJSON_Delete(state);
    const double bytes = (double)per_tensor * ntens * 4;
    if (me == 0)
        printf("{\"op\": \"save\", \"bytes\": %.0f, \"ranks\": %d, \"processes\": %d, \"tensors\": "
               "%d, \"seconds\": %.3f, \"GBps\": %.3f}\n",
               bytes, ranks, nproc, ntens, dt, bytes / dt / 1e9);
    free(data);
    free(w);
    return 0;
}

static int run_load(sl_comm *world, const char *dir, int argc, char **argv) {
    const int nproc = sl_comm_size(world), me = sl_comm_rank(world);
    char err[4096], path[4096];
    if (sl_ckpt_find_latest(dir, path, sizeof path, err, sizeof err) != 1)
        sl_fatal("no checkpoint under %s", dir);
    if (!has_flag(argc, argv, "--warm") && me == 0) evict(path);
    sl_comm_barrier(world);
    const double t0 = now();
    sl_ckpt *c = sl_ckpt_open(path, err, sizeof err);
    if (!c) sl_fatal("%s", err);
    const int n = sl_ckpt_tensor_count(c);
    size_t cap = 0;
    void *buf = NULL;
    double bytes = 0;
    for (int i = 0; i < n; i++) {
        sl_ckpt_tensor t;
        sl_ckpt_tensor_at(c, i, &t);
        /* this process's share, as after a resume on nproc ranks */
        int64_t b = t.numel * me / nproc, e = t.numel * (me + 1) / nproc;
        size_t need = (size_t)(e - b) * t.elem_size;
        if (need > cap) buf = sl_xrealloc(buf, cap = need);
        if (sl_ckpt_read(c, t.name, b, e, buf, err, sizeof err) != 0) sl_fatal("%s", err);
        bytes += (double)need;
    }
    sl_ckpt_close(c);
    double total = bytes;
    sl_comm_allreduce_sum_f64(world, &total, 1);
    const double dt = now() - t0;
    if (me == 0)
        printf("{\"op\": \"load\", \"bytes\": %.0f, \"processes\": %d, \"cache\": \"%s\", "
               "\"seconds\": %.3f, \"GBps\": %.3f}\n",
               total, nproc, has_flag(argc, argv, "--warm") ? "warm" : "evicted", dt,
               total / dt / 1e9);
    free(buf);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "evict") == 0) {
        for (int i = 2; i < argc; i++) evict(argv[i]);
        return 0;
    }
    if (argc < 3 || (strcmp(argv[1], "save") != 0 && strcmp(argv[1], "load") != 0)) {
        fprintf(stderr,
                "usage: ckpt_bench save DIR [--mb MB] [--ranks N] [--tensors N] [--step S]\n"
                "       ckpt_bench load DIR [--warm]\n"
                "       ckpt_bench evict PATH...\n"
                "  save: a checkpoint of MB MiB (default 1024) of float32 in N tensors (default\n"
                "        64), each split over the ranks (the MPI ranks, or --ranks N played by\n"
                "        one process; default 4), as step S (default 1)\n"
                "  load: read the newest checkpoint under DIR, its files evicted from the page\n"
                "        cache first unless --warm\n"
                "  evict: drop the files from the page cache\n"
                "(bench/ckpt_bench.sh times both against cp; docs/checkpoint-format.md)\n");
        return 2;
    }
    sl_comm *world = sl_comm_init_world(&argc, &argv);
    int rc = strcmp(argv[1], "save") == 0 ? run_save(world, argv[2], argc, argv)
                                          : run_load(world, argv[2], argc, argv);
    sl_comm_finalize(world);
    return rc;
}
