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

#include "core/fsutil.h"
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

int ck_replace_dir(const char *dir, const char *tmp, const char *aside, const char *what, char *err,
                   size_t errlen) {
    struct stat st;
    if (lstat(dir, &st) != 0) {
        if (rename(tmp, dir) != 0)
            return sl_fail(err, errlen, "renaming %s to %s: %s", tmp, dir, strerror(errno));
    } else if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE) == 0) {
        /* the old one now sits at the temporary name */
        if (sl_fsync_parent_dir(dir) != 0 || ck_rmtree(tmp) != 0)
            sl_warn("%s: %s: could not remove the replaced one: %s", what, tmp, strerror(errno));
    } else if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) {
        /* a file system without atomic exchange: move the old one aside first (a crash in
         * between leaves it at `aside` and nothing at `dir`) */
        ck_rmtree(aside);
        if (rename(dir, aside) != 0)
            return sl_fail(err, errlen, "replacing %s: %s", dir, strerror(errno));
        if (rename(tmp, dir) != 0) {
            const int e = errno;
            rename(aside, dir); /* the old one back where it was */
            return sl_fail(err, errlen, "replacing %s: %s", dir, strerror(e));
        }
        ck_rmtree(aside);
    } else {
        return sl_fail(err, errlen, "replacing %s by %s: %s", dir, tmp, strerror(errno));
    }
    if (sl_fsync_parent_dir(dir) != 0)
        return sl_fail(err, errlen, "%s: fsync of its directory after the rename: %s", dir,
                       strerror(errno));
    return 0;
}

int ck_install(sl_ckpt_writer *w) {
    /* the aside name is a .tmp-* one: if a crash leaves it, `latest` names a step-<N> that
     * sl_ckpt_find_latest then misses, falling back to the newest committed checkpoint, and
     * the next save removes it */
    char *aside = sl_xmalloc(strlen(w->ckdir) + 48);
    sprintf(aside, "%s/.tmp-replaced-step-%" PRId64, w->ckdir, w->step);
    char e[2048];
    const int rc = ck_replace_dir(w->final, w->tmpdir, aside, "checkpoint", e, sizeof e);
    free(aside);
    if (rc != 0) ck_wfail(w, "%s", e);
    return rc;
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
    if (removed) sl_fsync_dir(w->ckdir);
    free(steps);
}
