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

int sl_data_resolve(const char *spec, char ***files, int *n, char *err, size_t errlen) {
    *files = NULL;
    *n = 0;
    if (!spec || !*spec) {
        snprintf(err, errlen, "empty data path");
        return -1;
    }
    char **list = NULL;
    int cnt = 0, cap = 0;
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
        for (size_t i = 0; i < g.gl_pathc; i++) {
            struct stat st;
            if (stat(g.gl_pathv[i], &st) != 0 || !S_ISREG(st.st_mode)) continue;
            if (cnt == cap) cap = cap ? 2 * cap : 16, list = sl_xrealloc(list, cap * sizeof *list);
            list[cnt++] = sl_xstrdup(g.gl_pathv[i]);
        }
        globfree(&g);
        if (cnt == 0) {
            snprintf(err, errlen, "%s: the pattern matches no regular files", spec);
            free(list);
            return -1;
        }
    } else {
        struct stat st;
        if (stat(spec, &st) != 0) {
            snprintf(err, errlen, "%s: cannot open: %s", spec, strerror(errno));
            return -1;
        }
        if (S_ISDIR(st.st_mode)) {
            DIR *d = opendir(spec);
            if (!d) {
                snprintf(err, errlen, "%s: cannot read directory: %s", spec, strerror(errno));
                return -1;
            }
            struct dirent *e;
            while ((e = readdir(d))) {
                if (e->d_name[0] == '.' || !has_suffix(e->d_name, SL_SHARD_SUFFIX)) continue;
                size_t l = strlen(spec) + strlen(e->d_name) + 2;
                char *p = sl_xmalloc(l);
                snprintf(p, l, "%s/%s", spec, e->d_name);
                struct stat fs;
                if (stat(p, &fs) != 0 || !S_ISREG(fs.st_mode)) {
                    free(p);
                    continue;
                }
                if (cnt == cap)
                    cap = cap ? 2 * cap : 16, list = sl_xrealloc(list, cap * sizeof *list);
                list[cnt++] = p;
            }
            closedir(d);
            if (cnt == 0) {
                snprintf(err, errlen, "%s: empty corpus: no *%s shards in this directory", spec,
                         SL_SHARD_SUFFIX);
                return -1;
            }
            qsort(list, (size_t)cnt, sizeof *list, cmp_str);
        } else {
            list = sl_xmalloc(sizeof *list);
            list[cnt++] = sl_xstrdup(spec);
        }
    }
    *files = list;
    *n = cnt;
    return 0;
}

void sl_data_paths_free(char **files, int n) {
    for (int i = 0; i < n; i++) free(files[i]);
    free(files);
}
