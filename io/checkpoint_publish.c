/*
 * io/checkpoint_publish.c - the renames, removals and fsyncs of a save in the checkpoints
 * directory: removing what interrupted saves left, putting a committed .tmp-step-<N> in place
 * as step-<N> (replacing an existing one atomically), and retention of old checkpoints. The
 * writer: io/checkpoint_save.c; the commit that calls these, and the order of durable
 * operations that crash safety rests on: io/checkpoint_commit.c.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "io/checkpoint_save_internal.h"

/* rm -rf of a directory tree (or a single file); symlinks are removed, never followed. */
static int rmtree_at(int dfd, const char *name) {
    if (unlinkat(dfd, name, 0) == 0 || errno == ENOENT) return 0;
    if (errno != EISDIR && errno != EPERM) return -1;
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (rmtree_at(fd, e->d_name) != 0) rc = -1;
    }
    closedir(d);
    if (unlinkat(dfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT) rc = -1;
    return rc;
}

int ck_rmtree(const char *path) {
    return rmtree_at(AT_FDCWD, path);
}

static int fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int ck_clean_leftovers(const char *ckdir, char *err, size_t errlen) {
    DIR *d = opendir(ckdir);
    if (!d) return sl_fail(err, errlen, "%s: cannot list: %s", ckdir, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) != NULL) {
        bool tmp = strncmp(e->d_name, ".tmp-", 5) == 0;
        bool latest_tmp =
            strncmp(e->d_name, CK_LATEST_FILE ".tmp.", strlen(CK_LATEST_FILE) + 5) == 0;
        if (!tmp && !latest_tmp) continue;
        char *p = ck_join(ckdir, e->d_name);
        if (ck_rmtree(p) != 0 && rc == 0)
            rc = sl_fail(err, errlen, "%s: cannot remove the leftover of an interrupted save: %s",
                         p, strerror(errno));
        free(p);
    }
    closedir(d);
    return rc;
}

int ck_install(sl_ckpt_writer *w) {
    struct stat st;
    if (lstat(w->final, &st) != 0) {
        if (rename(w->tmpdir, w->final) != 0)
            return ck_wfail(w, "renaming %s to %s: %s", w->tmpdir, w->final, strerror(errno)), -1;
    } else if (renameat2(AT_FDCWD, w->tmpdir, AT_FDCWD, w->final, RENAME_EXCHANGE) == 0) {
        /* the old step-<N> now sits at the temporary name */
        if (fsync_dir(w->ckdir) != 0 || ck_rmtree(w->tmpdir) != 0)
            sl_warn("checkpoint: %s: could not remove the replaced checkpoint: %s", w->tmpdir,
                    strerror(errno));
    } else if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) {
        /* a file system without atomic exchange: move the old one aside first (a crash in
         * between leaves `latest` naming the old one, which sl_ckpt_find_latest then misses
         * and falls back to the newest committed checkpoint) */
        char *aside = sl_xmalloc(strlen(w->final) + 32);
        sprintf(aside, "%s/.tmp-replaced-step-%" PRId64, w->ckdir, w->step);
        ck_rmtree(aside);
        if (rename(w->final, aside) != 0 || rename(w->tmpdir, w->final) != 0) {
            ck_wfail(w, "replacing %s: %s", w->final, strerror(errno));
            free(aside);
            return -1;
        }
        ck_rmtree(aside);
        free(aside);
    } else {
        return ck_wfail(w, "replacing %s by %s: %s", w->final, w->tmpdir, strerror(errno)), -1;
    }
    if (fsync_dir(w->ckdir) != 0)
        return ck_wfail(w, "%s: fsync after the rename: %s", w->ckdir, strerror(errno)), -1;
    return 0;
}

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

void ck_retention(sl_ckpt_writer *w) {
    if (w->keep_last <= 0) return;
    int n = 0;
    int64_t *steps = ck_committed_steps(w->ckdir, &n);
    if (n > 1) qsort(steps, (size_t)n, sizeof *steps, cmp_desc);
    int kept = 0;
    bool removed = false;
    for (int i = 0; i < n; i++) {
        int64_t s = steps[i];
        if (s > w->step) continue; /* another run's newer checkpoint: never ours to delete */
        if (kept < w->keep_last || s == w->step) {
            kept++;
            continue;
        }
        if (w->keep_every > 0 && s % w->keep_every == 0) continue;
        bool pinned = false;
        for (int k = 0; k < w->n_keep_steps; k++) pinned |= w->keep_steps[k] == s;
        if (pinned) continue;
        char from[CK_PATH_MAX], to[CK_PATH_MAX];
        ck_path(from, sizeof from, "%s/step-%" PRId64, w->ckdir, s);
        ck_path(to, sizeof to, "%s/.tmp-delete-step-%" PRId64, w->ckdir, s);
        /* renamed first: a deletion cut short leaves a .tmp-* directory, never a partial
         * checkpoint under a step-* name */
        if (rename(from, to) != 0) {
            sl_warn("checkpoint: cannot remove old checkpoint %s: %s", from, strerror(errno));
            continue;
        }
        removed = true;
        if (ck_rmtree(to) != 0)
            sl_warn("checkpoint: %s: cannot remove: %s (removed at the next save)", to,
                    strerror(errno));
    }
    if (removed) fsync_dir(w->ckdir);
    free(steps);
}
