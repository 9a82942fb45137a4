/* trainer/trainer_eval.c - batches and held-out evaluation (see trainer_impl.h). */
#include <math.h>
#include <string.h>

#include "core/log.h"
#include "trainer/trainer_impl.h"

int sl_trainer_next_batch(trainer *t, sl_reader *r, int32_t *tokens, char *err, size_t errlen) {
    const sl_train_config *tc = &sl_trainer_stage(t)->train;
    const int seq = tc->seq_len;
    const bool docs = tc->document_mask;
    int rc = 1;
    for (int b = 0; b < tc->micro_batch_size && rc == 1; b++)
        rc = sl_reader_next(r, tokens + (int64_t)b * (seq + 1),
                            docs ? t->doc_starts + (int64_t)b * (seq + 1) : NULL,
                            docs ? t->n_docs + b : NULL, err, errlen);
    if (rc == 1 && docs) sl_model_set_documents(t->model, t->doc_starts, t->n_docs);
    return rc;
}

/* Ranks may hold different amounts of held-out data, but with expert parallelism every
 * forward is a collective: all ranks step together, and a rank whose data has run out keeps
 * running forwards it does not count until no rank has data left. */
double sl_trainer_evaluate(trainer *t) {
    const sl_stage *st = sl_trainer_stage(t);
    const sl_train_config *tc = &st->train;
    if (!st->data.eval_path[0]) return NAN;
    sl_reader_opts o = {.data = &st->data,
                        .dp_rank = t->topo.dp_rank,
                        .dp_size = t->topo.dp_size,
                        .seq_len = tc->seq_len,
                        .eval = true};
    char key[160], src[SL_PATH_MAX + 16];
    sl_config_stage_data_key(t->cfg, t->cur, true, key, sizeof key);
    sl_reader *r = sl_reader_open(&o, t->err, sizeof t->err);
    if (!r) /* where the key came from, on the error path only: this runs every evaluation */
        sl_error_hold("%s: %s: %s", sl_trainer_data_key_source(t, key, src, sizeof src), key,
                      t->err);
    if (sl_comm_agree(t->topo.world, r == NULL || sl_trainer_check_data(t, st, r, key) != 0)) {
        if (r) sl_reader_close(r);
        return -1.0;
    }
    const int64_t per_batch = (int64_t)tc->micro_batch_size * tc->seq_len;
    sl_model_begin_step(t->model, false); /* the held-out loss needs no metrics */
    double sums[2] = {0.0, 0.0};          /* this rank's loss sum and tokens */
    double seen = 0.0;                    /* tokens evaluated by all ranks */
    bool have_batch = false;
    for (;;) {
        double flags[2] = {0.0, 0.0}; /* [0]: some rank has a batch, [1]: some rank failed */
        int rc = 0;
        if (tc->eval_tokens <= 0 || seen < tc->eval_tokens) {
            rc = sl_trainer_next_batch(t, r, t->tokens, t->err, sizeof t->err);
            flags[0] = rc == 1;
            flags[1] = rc < 0;
            have_batch |= rc == 1;
        }
        sl_comm_allreduce_max_f64(t->topo.world, flags, 2);
        if (flags[1] > 0) {
            if (rc < 0) sl_error("%s: %s: %s", src, key, t->err);
            sl_reader_close(r);
            return -1.0;
        }
        if (flags[0] == 0) break;
        double counted = 0.0;
        /* A rank without held-out data (or whose data ran out) still joins the forward:
         * with a batch of token 0 when it never had one, its last batch otherwise. */
        if (!have_batch)
            memset(t->tokens, 0,
                   (size_t)tc->micro_batch_size * (tc->seq_len + 1) * sizeof(int32_t));
        sl_fwd_stats fs;
        sl_model_forward(t->model, t->tokens, &fs);
        if (rc == 1) {
            sums[0] += fs.loss_sum;
            sums[1] += (double)per_batch;
            counted = (double)per_batch;
        }
        sl_comm_allreduce_sum_f64(t->topo.world, &counted, 1);
        seen += counted;
    }
    sl_reader_close(r);
    sl_comm_allreduce_sum_f64(t->topo.world, sums, 2);
    return sums[1] > 0 ? sums[0] / sums[1] : NAN;
}
