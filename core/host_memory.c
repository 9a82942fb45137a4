/* core/host_memory.c - the memory this host can still give a process (core/host_memory.h). */
#include "core/host_memory.h"

#include "core/fsutil.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The value of the line "key value" (or "key: value kB", scaled by 1024) in the text of a
 * /proc or cgroup file; false when the key is missing. */
static bool keyed_value(const char *text, const char *key, uint64_t *out) {
    const size_t klen = strlen(key);
    for (const char *line = text; line && *line;
         line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (strncmp(line, key, klen) != 0) continue;
        const char *p = line + klen;
        if (*p == ':') p++;
        if (*p != ' ' && *p != '\t') continue; /* a longer key with this prefix */
        char *end;
        const unsigned long long v = strtoull(p, &end, 10);
        if (end == p) continue;
        const char *eol = strchr(end, '\n');
        const char *kb = strstr(end, "kB");
        *out = kb && (!eol || kb < eol) ? (uint64_t)v * 1024 : (uint64_t)v;
        return true;
    }
    return false;
}

/* The sum of the keys' values in a file (missing keys count 0); false when it cannot be read. */
static bool read_keyed_sum(const char *path, const char *const *keys, int n, uint64_t *out) {
    char err[64];
    char *text = sl_read_file(path, NULL, err, sizeof err);
    if (!text) return false;
    *out = 0;
    for (int i = 0; i < n; i++) {
        uint64_t v;
        if (keyed_value(text, keys[i], &v)) *out += v;
    }
    free(text);
    return true;
}

/* A cgroup file holding one number, or "max" (no limit: false). */
static bool read_number(const char *path, uint64_t *out) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    unsigned long long v = 0;
    const bool ok = fscanf(f, "%llu", &v) == 1;
    fclose(f);
    *out = v;
    return ok;
}

/* Limits at or above this are "none" (cgroup v1 writes PAGE_COUNTER_MAX pages, about 2^63). */
#define NO_LIMIT ((uint64_t)1 << 60)

/* The headroom of the cgroup at `dir` (v2 when `v2`), or false when it has no limit. */
static bool cgroup_headroom(const char *dir, bool v2, uint64_t *out) {
    char path[8500];
    uint64_t limit, usage, cache = 0;
    snprintf(path, sizeof path, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
    if (!read_number(path, &limit) || limit >= NO_LIMIT) return false;
    snprintf(path, sizeof path, "%s/%s", dir, v2 ? "memory.current" : "memory.usage_in_bytes");
    if (!read_number(path, &usage)) return false;
    snprintf(path, sizeof path, "%s/memory.stat", dir);
    /* the page cache (both LRU lists: MemAvailable counts both as free) is in the usage, and
     * the kernel drops it before it kills; v1's totals include the child cgroups' */
    static const char *const v2_file[] = {"active_file", "inactive_file"};
    static const char *const v1_file[] = {"total_active_file", "total_inactive_file"};
    if (!read_keyed_sum(path, v2 ? v2_file : v1_file, 2, &cache)) cache = 0;
    const uint64_t used = usage > cache ? usage - cache : 0;
    *out = limit > used ? limit - used : 0;
    return true;
}

/* Lowers *bytes to the tightest limit of the cgroup `rel` (a path of /proc/self/cgroup) and its
 * ancestors, mounted under `mount`; names the one that bounded it in source. */
static void cgroup_bound(const char *mount, const char *rel, bool v2, uint64_t *bytes, char *source,
                         size_t len) {
    char cur[4096];
    snprintf(cur, sizeof cur, "%s", rel);
    for (;;) {
        char dir[8400];
        snprintf(dir, sizeof dir, "%s%s", mount, strcmp(cur, "/") == 0 ? "" : cur);
        uint64_t room;
        if (cgroup_headroom(dir, v2, &room) && room < *bytes) {
            *bytes = room;
            /* "/" is the namespace's root: a container's own limit */
            snprintf(source, len, "the memory cgroup %s%s", cur,
                     strcmp(cur, "/") == 0 ? " (this container's)" : "");
        }
        char *slash = strrchr(cur, '/');
        if (!slash || strcmp(cur, "/") == 0) break;
        if (slash == cur)
            cur[1] = '\0';
        else
            *slash = '\0';
    }
}

int sl_host_memory_available(uint64_t *bytes, char *source, size_t len) {
    return sl_host_memory_available_at("", bytes, source, len);
}

int sl_host_memory_budget(int64_t assume, uint64_t *bytes, char *source, size_t len) {
    if (assume <= 0) return sl_host_memory_available(bytes, source, len);
    *bytes = (uint64_t)assume;
    snprintf(source, len, "SLUICE_HOST_MEMORY");
    return 0;
}

int sl_host_memory_available_at(const char *root, uint64_t *bytes, char *source, size_t len) {
    char path[4300], err[64];
    snprintf(path, sizeof path, "%s/proc/meminfo", root);
    char *meminfo = sl_read_file(path, NULL, err, sizeof err);
    uint64_t avail, swap = 0;
    const bool known = meminfo && keyed_value(meminfo, "MemAvailable", &avail);
    if (known) (void)keyed_value(meminfo, "SwapFree", &swap);
    free(meminfo);
    if (!known) return -1;
    *bytes = avail + swap;
    snprintf(source, len, "MemAvailable + SwapFree of /proc/meminfo");
    snprintf(path, sizeof path, "%s/proc/self/cgroup", root);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    /* "0::/path" is cgroup v2 (mounted at /sys/fs/cgroup, or .../unified beside v1);
     * "N:...memory...:/path" is v1's memory controller */
    char v2_mount[4300], v1_mount[4300];
    snprintf(path, sizeof path, "%s/sys/fs/cgroup/cgroup.controllers", root);
    snprintf(v2_mount, sizeof v2_mount, "%s/sys/fs/cgroup%s", root,
             access(path, F_OK) == 0 ? "" : "/unified");
    snprintf(v1_mount, sizeof v1_mount, "%s/sys/fs/cgroup/memory", root);
    char line[4200];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || c2[1] != '/') continue;
        *c2 = '\0';
        const char *controllers = c1 + 1, *rel = c2 + 1;
        if (*controllers == '\0') {
            cgroup_bound(v2_mount, rel, true, bytes, source, len);
        } else {
            /* the list is comma-separated: "memory" alone, not "memory_foo" */
            char list[256];
            snprintf(list, sizeof list, ",%s,", controllers);
            if (strstr(list, ",memory,")) cgroup_bound(v1_mount, rel, false, bytes, source, len);
        }
    }
    fclose(f);
    return 0;
}
