/*
 * io/checkpoint_commit.c - the end of a checkpoint save: the collective sl_ckpt_save_commit and
 * rank 0's commit under it (every rank's manifest read back and the coverage checked,
 * train_state.json, COMMIT, the rename to step-<N>, `latest`, retention), or an abort. The
 * writer and each rank's part: io/checkpoint_save.c; the renames and removals in the
 * checkpoints directory: io/checkpoint_publish.c.
 *
 * Crash safety rests on the order of durable operations: a checkpoint becomes visible under its
 * final name only by one rename, after every file in it (COMMIT last) and the directory itself
 * were fsynced; `latest` is replaced by another rename afterwards; old checkpoints are removed
 * only after that, each first renamed back to a .tmp-* name so that a half-deleted one is never
 * mistaken for a checkpoint. A kill at any moment therefore leaves the previous `latest` valid.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fsutil.h"
#include "core/log.h"
#include "io/checkpoint_save_internal.h"
#include "io/crc32c.h"

#ifndef SLUICE_VERSION
#error "SLUICE_VERSION must be defined (io/CMakeLists.txt passes the CMake project version)"
#endif

/* ---- rank 0's commit ---- */

typedef struct {
    char first[1024];
    int count;
} problems;

static void collect(void *user, const char *line) {
    problems *p = user;
    if (p->count++ == 0) snprintf(p->first, sizeof p->first, "%s", line);
}

static uint32_t crc_of(const char *s, size_t n) {
    return sl_crc32c(0, s, n);
}

/* Reads every manifest of the temporary directory and checks the whole checkpoint before it is
 * committed: a rank that wrote nothing, or pieces that do not cover a tensor exactly once,
 * fail the save instead of producing a checkpoint that cannot be loaded. */
static int check_and_index(sl_ckpt_writer *w, ck_commit *cm) {
    ck_manifest *ms = sl_xcalloc((size_t)w->world, sizeof *ms);
    char **names = sl_xcalloc((size_t)w->world, sizeof *names);
    int rc = 0;
    char e[1024];
    for (int r = 0; r < w->world && rc == 0; r++) {
        char mname[64];
        ck_manifest_name(mname, sizeof mname, r);
        char *path = ck_join(w->tmpdir, mname);
        size_t len = 0;
        char *text = sl_read_file(path, &len, e, sizeof e);
        if (!text) {
            ck_wfail(w,
                     "%s (rank %d did not write its part, or wrote it to a file system rank 0 does "
                     "not see: every rank must see the same directory)",
                     e, r);
            rc = -1;
        } else if (ck_manifest_parse(text, len, path, &ms[r], e, sizeof e) != 0) {
            ck_wfail(w, "%s", e);
            rc = -1;
        } else if (ms[r].rank != r || ms[r].world_size != w->world || ms[r].step != w->step) {
            ck_wfail(
                w, "%s: rank %d of %d at step %" PRId64 ", expected rank %d of %d at step %" PRId64,
                path, ms[r].rank, ms[r].world_size, ms[r].step, r, w->world, w->step);
            rc = -1;
        } else {
            for (int k = 0; k < ms[r].nfiles && rc == 0; k++) {
                char *fp = ck_join(w->tmpdir, ms[r].files[k].name);
                struct stat st;
                if (stat(fp, &st) != 0 || (uint64_t)st.st_size != ms[r].files[k].bytes) {
                    ck_wfail(w, "%s: missing or not %" PRIu64 " bytes as %s says", fp,
                             ms[r].files[k].bytes, path);
                    rc = -1;
                }
                free(fp);
            }
            cm->manifests[r].file = sl_xstrdup(mname);
            cm->manifests[r].rank = r;
            cm->manifests[r].bytes = len;
            cm->manifests[r].crc32c = crc_of(text, len);
        }
        free(text);
        free(path);
        names[r] = sl_xstrdup(mname);
    }
    if (rc == 0) {
        ck_index idx;
        problems pr = {"", 0};
        ck_index_build(ms, w->world, (const char *const *)names, w->tmpdir, collect, &pr, &idx);
        ck_index_free(&idx);
        if (pr.count) {
            if (pr.count > 1)
                ck_wfail(w, "%s (and %d more problems)", pr.first, pr.count - 1);
            else
                ck_wfail(w, "%s", pr.first);
            rc = -1;
        }
    }
    for (int r = 0; r < w->world; r++) {
        ck_manifest_free(&ms[r]);
        free(names[r]);
    }
    free(ms);
    free(names);
    return rc;
}

static int commit_rank0(sl_ckpt_writer *w, const cJSON *state) {
    ck_commit cm = {
        .format_version = SL_CKPT_FORMAT_VERSION, .step = w->step, .world_size = w->world};
    cm.manifests = sl_xcalloc((size_t)w->world, sizeof *cm.manifests);
    int rc = check_and_index(w, &cm);
    char e[1024];
    if (rc == 0) {
        char *js = ck_state_print(w->step, w->world, SLUICE_VERSION, state);
        char *sp = ck_join(w->tmpdir, CK_STATE_FILE);
        size_t n = strlen(js);
        if (sl_write_file_atomic(sp, js, n, e, sizeof e) != 0) {
            ck_wfail(w, "%s", e);
            rc = -1;
        }
        cm.state = (ck_indexed){sl_xstrdup(CK_STATE_FILE), -1, n, crc_of(js, n)};
        free(js);
        free(sp);
    }
    if (rc == 0) {
        /* COMMIT last: sl_write_file_atomic fsyncs it and the directory */
        char *cj = ck_commit_print(&cm);
        char *cp = ck_join(w->tmpdir, CK_COMMIT_FILE);
        if (sl_write_file_atomic(cp, cj, strlen(cj), e, sizeof e) != 0) {
            ck_wfail(w, "%s", e);
            rc = -1;
        }
        free(cj);
        free(cp);
    }
    ck_commit_free(&cm);
    if (rc == 0) rc = ck_install(w);
    if (rc == 0) {
        char *lp = ck_join(w->ckdir, CK_LATEST_FILE);
        char text[64];
        int n = snprintf(text, sizeof text, "step-%" PRId64 "\n", w->step);
        if (sl_write_file_atomic(lp, text, (size_t)n, e, sizeof e) != 0) {
            /* committed, but `latest` still names the previous checkpoint: a resume would
             * repeat steps; report it as a failure of this save */
            ck_wfail(w, "%s (the checkpoint %s is complete, `latest` was not updated)", e,
                     w->final);
            rc = -1;
        }
        free(lp);
    }
    if (rc == 0) ck_retention(w);
    return rc;
}

/* ---- the end of a save, on every rank ---- */

static void writer_free(sl_ckpt_writer *w) {
    for (int i = 0; i < w->n; i++) free(w->p[i].name);
    free(w->p);
    free(w->ckdir);
    free(w->tmpdir);
    free(w->final);
    free(w->keep_steps);
    free(w);
}

void sl_ckpt_save_abort(sl_ckpt_writer *w) {
    if (w) writer_free(w);
}

int sl_ckpt_save_commit(sl_ckpt_writer *w, const cJSON *state, char *err, size_t errlen) {
    if (!w) return sl_fail(err, errlen, "checkpoint save: NULL writer");
    if (!w->failed && !w->written) ck_wfail(w, "checkpoint: committed before sl_ckpt_save_write");
    const bool local = w->failed;
    const int nfail = w->agree(w->agree_user, local);
    int mine = 0; /* rank 0: the commit itself failed */
    if (w->rank == 0) {
        if (nfail == 0) mine = commit_rank0(w, state) != 0;
        if (nfail || mine) ck_rmtree(w->tmpdir); /* nothing committed: free the space */
    }
    const int nfail2 = w->agree(w->agree_user, mine);
    int rc = 0;
    if (local || mine) {
        sl_fail(err, errlen, "checkpoint step %" PRId64 " not committed: %s", w->step, w->err);
        rc = -1;
    } else if (nfail) {
        sl_fail(err, errlen,
                "checkpoint step %" PRId64 " not committed: %d of %d ranks failed to write their "
                "part (their messages name the files)",
                w->step, nfail, w->world);
        rc = -1;
    } else if (nfail2) {
        sl_fail(err, errlen,
                "checkpoint step %" PRId64 " not committed: rank 0 failed to commit it (its "
                "message names the cause)",
                w->step);
        rc = -1;
    }
    writer_free(w);
    return rc;
}

int sl_ckpt_save(sl_ckpt_writer *w, const cJSON *state, char *err, size_t errlen) {
    if (!w) return sl_fail(err, errlen, "checkpoint save: NULL writer");
    char e[2048] = "";
    int wr = sl_ckpt_save_write(w, e, sizeof e);
    int rc = sl_ckpt_save_commit(w, state, err, errlen);
    (void)wr; /* the commit reports a failed write (w->err) itself */
    return rc;
}
