/*
 * io/checkpoint_save_internal.h - what the checkpoint writer's three files share (io/
 * checkpoint_save.c: the writer and each rank's part; io/checkpoint_commit.c: rank 0's commit
 * and the end of a save; io/checkpoint_publish.c: the renames and removals in the checkpoints
 * directory): the writer's layout and its helpers. Internal to them.
 */
#ifndef SL_IO_CHECKPOINT_SAVE_INTERNAL_H
#define SL_IO_CHECKPOINT_SAVE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/log.h"
#include "io/checkpoint.h"
#include "io/checkpoint_internal.h"

typedef struct {
    char *name;
    const char *dtype;
    size_t esize;
    int ndim;
    int64_t shape[SL_CKPT_MAX_DIMS];
    int64_t begin, end;
    const void *data;
    sl_ckpt_fetch_fn fetch;
    void *user;
    int order; /* declaration order (a tie-break that keeps the sort stable) */
} wpiece;

struct sl_ckpt_writer {
    int64_t step;
    int rank, world;
    sl_ckpt_agree_fn agree;
    void *agree_user;
    int keep_last;
    int64_t keep_every;
    int64_t *keep_steps; /* owned copy of the option */
    int n_keep_steps;
    char *ckdir, *tmpdir, *final;
    wpiece *p;
    int n, cap;
    bool failed, written;
    char err[2048];
};

/* ---- helpers (io/checkpoint_save.c) ---- */

/* "<a>/<b>", malloc'ed. */
char *ck_join(const char *a, const char *b);
/* Marks the save failed; the first failure's message is the one kept, in w->err. */
void ck_wfail(sl_ckpt_writer *w, const char *fmt, ...) SL_PRINTF(2, 3);

/* ---- the checkpoints directory (io/checkpoint_publish.c) ---- */

/* Rank 0: removes what interrupted saves left in the checkpoints directory. */
int ck_clean_leftovers(const char *ckdir, char *err, size_t errlen);
/* Puts the temporary directory in place as step-<N>, replacing an existing one atomically
 * (ck_replace_dir, io/checkpoint_internal.h). */
int ck_install(sl_ckpt_writer *w);
/* keep_last / keep_every / keep_steps, after the new checkpoint is committed and `latest` names
 * it. */
void ck_retention(sl_ckpt_writer *w);

#endif
