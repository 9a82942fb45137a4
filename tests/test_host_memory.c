/*
 * tests/test_host_memory.c - core/host_memory.h on fake hosts (a /proc and /sys/fs/cgroup
 * written under a temporary root, sl_host_memory_available_at): MemAvailable + SwapFree alone;
 * a cgroup v2 limit (memory.max less memory.current plus the page cache, active_file and
 * inactive_file), the tightest of a nested pair, "max" meaning none; a container's own limit
 * at the namespace's root ("0::/"); a cgroup v1 memory controller among others (its
 * total_active_file and total_inactive_file), its PAGE_COUNTER_MAX meaning none; v2 under
 * /sys/fs/cgroup/unified beside v1; a limit above what the node has changes nothing; no
 * /proc/meminfo is -1. The real host's call reads its files (its figure may be 0 on a host at
 * its limit). And core/placement.h's count of a rank's
 * host's ranks.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fsutil.h"
#include "core/host_memory.h"
#include "core/placement.h"
#include "test_util.h"

#define MIB (1024ull * 1024ull)

static char g_root[256];

/* Writes `text` to root/rel, creating its folders. */
static void put(const char *rel, const char *fmt, ...) {
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/%s", g_root, rel);
    char dir[512];
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = '\0';
    CHECK(sl_mkdirs(dir, err, sizeof err) == 0, "mkdir %s: %s", dir, err);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fclose(f);
}

/* A fresh fake host with MemAvailable `avail_mib` and SwapFree `swap_mib`. */
static void host(const char *name, unsigned avail_mib, unsigned swap_mib) {
    const char *tmp = getenv("TMPDIR");
    snprintf(g_root, sizeof g_root, "%s/sluice_%d_%s", tmp && *tmp ? tmp : "/tmp", (int)getpid(),
             name);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
    CHECK(system(cmd) == 0, "%s", cmd);
    put("proc/meminfo",
        "MemTotal:       %u kB\nMemFree:        1 kB\nMemAvailable:   %u kB\n"
        "SwapTotal:      %u kB\nSwapFree:       %u kB\n",
        4 * avail_mib * 1024, avail_mib * 1024, swap_mib * 1024, swap_mib * 1024);
}

/* The figure of the current fake host, in MiB; its source in src. */
static unsigned long long measure(char *src, size_t len) {
    uint64_t b = 0;
    CHECK(sl_host_memory_available_at(g_root, &b, src, len) == 0, "%s: -1", g_root);
    return (unsigned long long)(b / MIB);
}

int main(void) {
    char src[160];
    unsigned long long mib;

    host("hm_plain", 4096, 512);
    mib = measure(src, sizeof src);
    CHECK(mib == 4608, "plain: %llu MiB, expected 4096 + 512", mib);
    CHECK(strcmp(src, "MemAvailable + SwapFree of /proc/meminfo") == 0, "plain: '%s'", src);

    /* cgroup v2, nested: the job's 1024 MiB limit with 300 used of which 100 reclaimable
     * (headroom 824) under a parent of 2048 MiB with 1900 used (headroom 148) */
    host("hm_v2", 8192, 0);
    put("proc/self/cgroup", "0::/slurm/job_7/step_0\n");
    put("sys/fs/cgroup/cgroup.controllers", "cpu memory\n");
    put("sys/fs/cgroup/slurm/job_7/step_0/memory.max", "max\n");
    put("sys/fs/cgroup/slurm/job_7/step_0/memory.current", "0\n");
    put("sys/fs/cgroup/slurm/job_7/memory.max", "%llu\n", 1024 * MIB);
    put("sys/fs/cgroup/slurm/job_7/memory.current", "%llu\n", 300 * MIB);
    put("sys/fs/cgroup/slurm/job_7/memory.stat",
        "anon 1\nfile 2\nactive_anon 9\ninactive_file %llu\n", 100 * MIB);
    mib = measure(src, sizeof src);
    CHECK(mib == 824, "v2 job limit: %llu MiB, expected 1024 - 300 + 100", mib);
    CHECK(strcmp(src, "the memory cgroup /slurm/job_7") == 0, "v2 job limit: '%s'", src);
    /* the active page cache is as reclaimable (shards read by a data build in the same job) */
    put("sys/fs/cgroup/slurm/job_7/memory.stat",
        "anon 1\nactive_file %llu\ninactive_file %llu\nactive_anon 9\n", 150 * MIB, 100 * MIB);
    mib = measure(src, sizeof src);
    CHECK(mib == 974, "v2 job limit, active cache: %llu MiB, expected 1024 - 300 + 250", mib);
    put("sys/fs/cgroup/slurm/memory.max", "%llu\n", 2048 * MIB);
    put("sys/fs/cgroup/slurm/memory.current", "%llu\n", 1900 * MIB);
    mib = measure(src, sizeof src);
    CHECK(mib == 148, "v2 nested: %llu MiB, expected the parent's 2048 - 1900", mib);
    CHECK(strcmp(src, "the memory cgroup /slurm") == 0, "v2 nested: '%s'", src);
    /* a limit above what the node has: the node's figure */
    put("sys/fs/cgroup/slurm/memory.max", "%llu\n", 100000 * MIB);
    put("sys/fs/cgroup/slurm/job_7/memory.max", "max\n");
    mib = measure(src, sizeof src);
    CHECK(mib == 8192, "v2 roomy: %llu MiB, expected the node's 8192", mib);
    CHECK(strcmp(src, "MemAvailable + SwapFree of /proc/meminfo") == 0, "v2 roomy: '%s'", src);
    /* usage above the limit less reclaimable: no headroom at all */
    put("sys/fs/cgroup/slurm/memory.max", "%llu\n", 1000 * MIB);
    mib = measure(src, sizeof src);
    CHECK(mib == 0, "v2 over its limit: %llu MiB, expected 0", mib);

    /* cgroup v1: the memory controller's line among others; a "memory" lookalike ignored;
     * PAGE_COUNTER_MAX at the root means no limit */
    host("hm_v1", 8192, 1024);
    put("proc/self/cgroup", "5:memory_x:/other\n4:memory,foo:/process_api/abc\n3:cpuset:/\n"
                            "0::/\n");
    put("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    put("sys/fs/cgroup/memory/memory.usage_in_bytes", "12345\n");
    put("sys/fs/cgroup/memory/other/memory.limit_in_bytes", "%llu\n", 16 * MIB);
    put("sys/fs/cgroup/memory/other/memory.usage_in_bytes", "0\n");
    put("sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes", "%llu\n", 3072 * MIB);
    put("sys/fs/cgroup/memory/process_api/abc/memory.usage_in_bytes", "%llu\n", 1024 * MIB);
    put("sys/fs/cgroup/memory/process_api/abc/memory.stat",
        "cache 1\ninactive_file 7\nactive_file 3\ntotal_inactive_file %llu\n"
        "total_active_file %llu\n",
        384 * MIB, 128 * MIB);
    mib = measure(src, sizeof src);
    CHECK(mib == 2560, "v1: %llu MiB, expected 3072 - 1024 + 384 + 128", mib);
    CHECK(strcmp(src, "the memory cgroup /process_api/abc") == 0, "v1: '%s'", src);
    /* v2 mounted at /sys/fs/cgroup/unified beside v1 (hybrid): its limit counts too */
    put("proc/self/cgroup", "4:memory:/process_api/abc\n0::/user.slice\n");
    put("sys/fs/cgroup/unified/user.slice/memory.max", "%llu\n", 600 * MIB);
    put("sys/fs/cgroup/unified/user.slice/memory.current", "%llu\n", 100 * MIB);
    mib = measure(src, sizeof src);
    CHECK(mib == 500, "hybrid: %llu MiB, expected the v2 600 - 100", mib);
    CHECK(strcmp(src, "the memory cgroup /user.slice") == 0, "hybrid: '%s'", src);

    /* a container (cgroup namespace): /proc/self/cgroup says "0::/", its limit is the root's */
    host("hm_ns", 8192, 0);
    put("proc/self/cgroup", "0::/\n");
    put("sys/fs/cgroup/cgroup.controllers", "memory\n");
    put("sys/fs/cgroup/memory.max", "%llu\n", 4096 * MIB);
    put("sys/fs/cgroup/memory.current", "%llu\n", 3072 * MIB);
    put("sys/fs/cgroup/memory.stat", "active_file %llu\ninactive_file %llu\n", 2048 * MIB,
        1024 * MIB);
    mib = measure(src, sizeof src);
    CHECK(mib == 4096, "namespace: %llu MiB, expected 4096 - 3072 + 3072", mib);
    CHECK(strcmp(src, "the memory cgroup / (this container's)") == 0, "namespace: '%s'", src);
    put("sys/fs/cgroup/memory.stat", "active_file 0\n");
    mib = measure(src, sizeof src);
    CHECK(mib == 1024, "namespace, no cache: %llu MiB, expected 4096 - 3072", mib);

    /* no /proc/meminfo: nothing known */
    host("hm_none", 1, 0);
    char path[400];
    snprintf(path, sizeof path, "%s/proc/meminfo", g_root);
    unlink(path);
    uint64_t b = 7;
    CHECK(sl_host_memory_available_at(g_root, &b, src, sizeof src) == -1, "no meminfo: not -1");

    /* this machine: a positive figure from the real files */
    CHECK(sl_host_memory_available(&b, src, sizeof src) == 0, "this host: no /proc/meminfo");
    printf("this host: %.2f GiB (%s)\n", (double)b / 1073741824.0, src);
    /* the budget: SLUICE_HOST_MEMORY's bytes when given, the host's figure otherwise */
    uint64_t budget = 0;
    char bsrc[160];
    CHECK(sl_host_memory_budget(12345, &budget, bsrc, sizeof bsrc) == 0 && budget == 12345 &&
              strcmp(bsrc, "SLUICE_HOST_MEMORY") == 0,
          "budget 12345: %llu (%s)", (unsigned long long)budget, bsrc);
    CHECK(sl_host_memory_budget(0, &budget, bsrc, sizeof bsrc) == 0 && budget > 0 &&
              strcmp(bsrc, src) == 0,
          "budget 0: %llu (%s), the host's source is %s", (unsigned long long)budget, bsrc, src);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf \"${TMPDIR:-/tmp}\"/sluice_%d_hm_*", (int)getpid());
    CHECK(system(cmd) == 0, "%s", cmd);

    /* ranks by host: 0, 2 and 3 on n1, 1 on n2 */
    sl_rank_place places[4];
    memset(places, 0, sizeof places);
    const char *const hosts[4] = {"n1", "n2", "n1", "n1"};
    for (int r = 0; r < 4; r++) snprintf(places[r].host, sizeof places[r].host, "%s", hosts[r]);
    CHECK(sl_placement_host_ranks(places, 4, 0) == 3, "n1: %d ranks",
          sl_placement_host_ranks(places, 4, 0));
    CHECK(sl_placement_host_ranks(places, 4, 1) == 1, "n2: %d ranks",
          sl_placement_host_ranks(places, 4, 1));
    CHECK(sl_placement_host_ranks(places, 1, 0) == 1, "one rank: %d",
          sl_placement_host_ranks(places, 1, 0));
    return sl_test_finish("test_host_memory");
}
