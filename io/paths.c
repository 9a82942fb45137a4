/* io/paths.c - see paths.h. */
#include "io/paths.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/log.h"
#include "io/shard.h"

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n > m && strcmp(s + n - m, suf) == 0;
}

/* A growing list of paths, each with the origin it was found by. */
typedef struct {
    char **files;
    sl_data_origin *origins;
    int n, cap;
} path_list;

static void push(path_list *l, char *path, sl_data_origin origin) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->files = sl_xrealloc(l->files, (size_t)l->cap * sizeof *l->files);
        l->origins = sl_xrealloc(l->origins, (size_t)l->cap * sizeof *l->origins);
    }
    l->files[l->n] = path;
    l->origins[l->n++] = origin;
}

/* Appends the shards of directory `dir` (sorted by name) to l: the number appended, or -1 with
 * err set when it cannot be read. */
static int list_dir(const char *dir, path_list *l, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "%s: cannot read directory: %s", dir, strerror(errno));
        return -1;
    }
    const int first = l->n;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !has_suffix(e->d_name, SL_SHARD_SUFFIX)) continue;
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        char *p = sl_xmalloc(len);
        snprintf(p, len, "%s/%s", dir, e->d_name);
        struct stat fs;
        if (stat(p, &fs) != 0 || !S_ISREG(fs.st_mode)) {
            free(p);
            continue;
        }
        push(l, p, SL_DATA_IN_DIR);
    }
    closedir(d);
    qsort(l->files + first, (size_t)(l->n - first), sizeof *l->files, cmp_str);
    return l->n - first;
}

static void list_free(path_list *l) {
    sl_data_paths_free(l->files, l->n);
    free(l->origins);
}

/* sl_data_resolve and sl_data_resolve_arg: `dirs` whether a glob's directories are listed
 * (each without shards as itself). */
static int resolve(const char *spec, bool dirs, path_list *l, char *err, size_t errlen) {
    if (!spec || !*spec) {
        snprintf(err, errlen, "empty data path");
        return -1;
    }
    if (strpbrk(spec, "*?[")) {
        glob_t g;
        int rc = glob(spec, 0, NULL, &g);
        if (rc == GLOB_NOMATCH) {
            snprintf(err, errlen, "%s: no files match this pattern", spec);
            return -1;
        }
        if (rc != 0) {
            snprintf(err, errlen, "%s: glob failed", spec);
            return -1;
        }
        for (size_t i = 0; i < g.gl_pathc && rc == 0; i++) {
            struct stat st;
            if (stat(g.gl_pathv[i], &st) != 0) continue;
            if (S_ISREG(st.st_mode)) {
                push(l, sl_xstrdup(g.gl_pathv[i]), SL_DATA_GLOB_MATCH);
            } else if (dirs && S_ISDIR(st.st_mode)) {
                const int got = list_dir(g.gl_pathv[i], l, err, errlen);
                if (got < 0) rc = -1;
                if (got == 0) push(l, sl_xstrdup(g.gl_pathv[i]), SL_DATA_EMPTY_DIR);
            }
        }
        globfree(&g);
        if (rc != 0) return -1;
        if (l->n == 0) {
            snprintf(err, errlen, "%s: the pattern matches no regular files", spec);
            return -1;
        }
        return 0;
    }
    struct stat st;
    if (stat(spec, &st) != 0) {
        snprintf(err, errlen, "%s: cannot open: %s", spec, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        push(l, sl_xstrdup(spec), SL_DATA_NAMED);
        return 0;
    }
    const int got = list_dir(spec, l, err, errlen);
    if (got == 0)
        snprintf(err, errlen, "%s: empty corpus: no *%s shards in this directory", spec,
                 SL_SHARD_SUFFIX);
    return got > 0 ? 0 : -1;
}

int sl_data_resolve(const char *spec, char ***files, int *n, char *err, size_t errlen) {
    path_list l = {0};
    *files = NULL;
    *n = 0;
    if (resolve(spec, false, &l, err, errlen) != 0) {
        list_free(&l);
        return -1;
    }
    free(l.origins);
    *files = l.files;
    *n = l.n;
    return 0;
}

int sl_data_resolve_arg(const char *spec, char ***files, sl_data_origin **origins, int *n,
                        char *err, size_t errlen) {
    path_list l = {0};
    *files = NULL;
    *origins = NULL;
    *n = 0;
    if (resolve(spec, true, &l, err, errlen) != 0) {
        list_free(&l);
        return -1;
    }
    *files = l.files;
    *origins = l.origins;
    *n = l.n;
    return 0;
}

void sl_data_paths_free(char **files, int n) {
    for (int i = 0; i < n; i++) free(files[i]);
    free(files);
}
