/*
 * trainer/trainer_stages.c - the staged schedule (docs/stages.md): the stages' steps and tokens,
 * entering a stage (RoPE table, activation shape, the stage's reader at the exact token where
 * the previous stage stopped, the optimizer reset) and the held-out evaluation at its start.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "io/paths.h"
#include "io/shard.h"
#include "model/counts.h"
#include "trainer/trainer_impl.h"

/* ---- the schedule ------------------------------------------------------------------------- */

/* What would make a stage's batch fit `ranks` ranks, for the error: the micro_batch_size values
 * up to the configured one that divide global_batch_tokens / (seq_len x ranks), or when none
 * does, a global_batch_tokens that works. */
static void batch_suggestion(const char *key, const sl_train_config *tc, int ranks, char *out,
                             size_t n) {
    const int64_t gbt = tc->global_batch_tokens, row = (int64_t)tc->seq_len * ranks;
    int used = 0;
    if (gbt % row == 0) {
        const int64_t q = gbt / row; /* micro-batches x micro_batch_size per rank and step */
        int64_t fits[4];
        int k = 0;
        for (int64_t d = tc->micro_batch_size; d >= 1 && k < 4; d--)
            if (q % d == 0) fits[k++] = d;
        used = snprintf(out, n, "%s.micro_batch_size = ", key);
        for (int j = 0; j < k && used >= 0 && (size_t)used < n; j++)
            used += snprintf(out + used, n - (size_t)used, "%s%lld",
                             j == 0       ? ""
                             : j + 1 == k ? " or "
                                          : ", ",
                             (long long)fits[j]);
        if (used >= 0 && (size_t)used < n && strcmp(key, "training") == 0)
            snprintf(out + used, n - (size_t)used,
                     " would divide it (e.g. --set training.micro_batch_size=%lld)",
                     (long long)fits[0]);
        else if (used >= 0 && (size_t)used < n)
            snprintf(out + used, n - (size_t)used, " would divide it");
        return;
    }
    /* no micro-batch size divides it: the nearest global batch below with a micro-batch size up
     * to the configured one, and the next multiple of the configured micro-batch */
    int64_t m = gbt / row;
    m = m < 1 ? 1 : m > tc->micro_batch_size ? tc->micro_batch_size : m;
    const int64_t per = row * tc->micro_batch_size;
    snprintf(out, n,
             "no micro_batch_size divides it (seq_len x ranks = %lld does not); "
             "%s.micro_batch_size = %lld with global_batch_tokens = %lld would, or, keeping "
             "micro_batch_size = %d, a global_batch_tokens that is a multiple of %lld (e.g. %lld)",
             (long long)row, key, (long long)m, (long long)(row * m), tc->micro_batch_size,
             (long long)per, (long long)((gbt / per + 1) * per));
}

/* Resolves the stages and their step and token offsets; checks every stage's batch against
 * the number of ranks up front, so that no stage fails hours into a run. */
int sl_trainer_plan_schedule(trainer *t) {
    const sl_config *c = t->cfg;
    t->n_stages = sl_config_stage_count(c);
    t->stages = sl_xcalloc((size_t)t->n_stages, sizeof *t->stages);
    t->first_step = sl_xcalloc((size_t)t->n_stages + 1, sizeof *t->first_step);
    t->first_tokens = sl_xcalloc((size_t)t->n_stages + 1, sizeof *t->first_tokens);
    t->keep_steps = sl_xcalloc((size_t)t->n_stages, sizeof *t->keep_steps);
    for (int i = 0; i < t->n_stages; i++) {
        sl_stage *st = &t->stages[i];
        sl_config_stage_at(c, i, st);
        const sl_train_config *tc = &st->train;
        const int64_t per_micro = (int64_t)tc->seq_len * tc->micro_batch_size * t->topo.size;
        if (st->steps > 0 && tc->global_batch_tokens % per_micro != 0) {
            char key[64] = "training";
            if (c->stages_given) snprintf(key, sizeof key, "training.stages[%d]", i);
            char fix[320];
            batch_suggestion(key, tc, t->topo.size, fix, sizeof fix);
            sl_error_hold("%s: %s.global_batch_tokens = %lld is not a multiple of seq_len x "
                          "micro_batch_size x ranks = %d x %d x %d; %s",
                          c->path, key, (long long)tc->global_batch_tokens, tc->seq_len,
                          tc->micro_batch_size, t->topo.size, fix);
            return -1;
        }
        t->first_step[i + 1] = t->first_step[i] + st->steps;
        t->first_tokens[i + 1] = t->first_tokens[i] + (int64_t)st->steps * tc->global_batch_tokens;
        if (st->steps > 0) t->keep_steps[t->n_keep_steps++] = t->first_step[i + 1];
    }
    return 0;
}

const char *sl_trainer_data_key_source(const trainer *t, const char *where, char *buf, size_t n) {
    /* a stage's own data comes from training.stages (or the whole training section) */
    const bool stage = strncmp(where, "training.stages", 15) == 0;
    const bool set = sl_config_set_covers(t->sets, t->n_sets, stage ? "training.stages" : where);
    snprintf(buf, n, "%s%s", t->cfg->path, set ? " (--set)" : "");
    return buf;
}

/* Resolves `spec` and opens every shard it names (header and index, nothing decompressed):
 * 0, or -1 with the error held, naming the config (tagged "(--set)" when an override gave the
 * path) and the stage's key. */
static int check_data_path(const trainer *t, int i, bool eval, const char *spec) {
    char err[1024], where[160], src[SL_PATH_MAX + 16];
    sl_config_stage_data_key(t->cfg, i, eval, where, sizeof where);
    sl_trainer_data_key_source(t, where, src, sizeof src);
    char **files = NULL;
    int n = 0;
    if (sl_data_resolve(spec, &files, &n, err, sizeof err) != 0) {
        sl_error_hold_shared("%s: %s: %s", src, where, err);
        return -1;
    }
    int rc = 0;
    for (int f = 0; f < n && rc == 0; f++) {
        sl_shard *s = sl_shard_open(files[f], err, sizeof err);
        if (!s) {
            sl_error_hold_shared("%s: %s: %s", src, where, err);
            rc = -1;
        }
        sl_shard_close(s);
    }
    sl_data_paths_free(files, n);
    return rc;
}

/* Whether a stage before i names `path` as its eval set (eval) or as a training corpus: checked
 * there. An evaluation-only stage's corpora are not read, so not checked there. */
static bool named_before(const trainer *t, int i, const char *path, bool eval) {
    for (int j = 0; j < i; j++) {
        const sl_data_config *d = &t->stages[j].data;
        if (eval && strcmp(d->eval_path, path) == 0) return true;
        for (int m = 0; !eval && t->stages[j].steps > 0 && m < d->n_train; m++)
            if (strcmp(d->train[m].path, path) == 0) return true;
    }
    return false;
}

int sl_trainer_check_stage_data(trainer *t) {
    if (t->topo.rank != 0) return 0;
    /* in the order a stage opens them: its training corpora, then its eval set */
    for (int i = 0; i < t->n_stages; i++) {
        const sl_stage *st = &t->stages[i];
        const sl_data_config *d = &st->data;
        for (int k = 0; st->steps > 0 && k < d->n_train; k++)
            if (!named_before(t, i, d->train[k].path, false) &&
                check_data_path(t, i, false, d->train[k].path) != 0)
                return -1;
        if (d->eval_path[0] && !named_before(t, i, d->eval_path, true) &&
            check_data_path(t, i, true, d->eval_path) != 0)
            return -1;
    }
    return 0;
}

/* Whether stage i's evaluation gets a batch: in eval mode each rank reads every dp-th frame of
 * the eval set and evaluates whole micro-batches of its own sequences, so a set split into
 * shares shorter than micro_batch_size x seq_len + 1 tokens evaluates nothing on any rank. An
 * evaluation-only stage that would is an error (-1, held); a training stage's evaluations (at
 * its start, every eval_every steps, at its end) a warning. `share` has dp entries. */
static int check_eval_set(trainer *t, int i, uint64_t *share) {
    const sl_stage *st = &t->stages[i];
    const sl_train_config *tc = &st->train;
    const int dp = t->topo.dp_size;
    char key[160], err[1024], src[SL_PATH_MAX + 16];
    sl_config_stage_data_key(t->cfg, i, true, key, sizeof key);
    sl_trainer_data_key_source(t, key, src, sizeof src);
    uint64_t total = 0, largest = 0;
    uint32_t max_frame = 0;
    if (sl_reader_eval_shares(st->data.eval_path, dp, share, &total, &max_frame, err, sizeof err) !=
        0) {
        sl_error_hold_shared("%s: %s: %s", src, key, err);
        return -1;
    }
    for (int r = 0; r < dp; r++) {
        if (sl_reader_eval_sequences(share[r], tc->seq_len) >= (uint64_t)tc->micro_batch_size)
            return 0; /* this rank has a batch: the evaluation has a loss */
        if (share[r] > largest) largest = share[r];
    }
    const long long need = (long long)tc->micro_batch_size * tc->seq_len + 1;
    char split[160] = "";
    if (dp > 1)
        snprintf(split, sizeof split,
                 "; split by frame over %d ranks (frames of up to %u tokens), the largest rank's "
                 "share is %llu tokens",
                 dp, max_frame, (unsigned long long)largest);
    char stage[64] = "";
    if (t->cfg->stages_given) snprintf(stage, sizeof stage, " of stage \"%s\"", st->name);
    char what[2 * SL_PATH_MAX + 512];
    snprintf(what, sizeof what,
             "%s: %s: %s holds %llu tokens%s, but one evaluation batch%s (micro_batch_size %d x "
             "seq_len %d) needs %lld tokens in one rank's share",
             src, key, st->data.eval_path, (unsigned long long)total, split, stage,
             tc->micro_batch_size, tc->seq_len, need);
    char advice[160];
    snprintf(advice, sizeof advice, "more held-out tokens%s%s",
             tc->micro_batch_size > 1 ? ", a smaller micro_batch_size" : "",
             dp > 1 ? ", smaller frames (sluice data build --frame-tokens) or fewer ranks" : "");
    if (st->steps == 0) {
        sl_error_hold_shared("%s: the evaluation-only stage would evaluate nothing (%s)", what,
                             advice);
        return -1;
    }
    sl_warn("%s: its held-out evaluations (at the start, every eval_every steps, at the end) "
            "will be skipped, no eval_loss reported (%s)",
            what, advice);
    return 0;
}

int sl_trainer_check_eval_sets(trainer *t) {
    if (t->topo.rank != 0) return 0;
    uint64_t *share = sl_xcalloc((size_t)t->topo.dp_size, sizeof *share);
    int rc = 0;
    for (int i = sl_trainer_stage_at(t, t->start_step); i < t->n_stages && rc == 0; i++)
        if (t->stages[i].data.eval_path[0]) rc = check_eval_set(t, i, share);
    free(share);
    return rc;
}

/* The stage to start with at global step `step`: the one holding it, or after a stage that
 * ends exactly there, the next (so evaluation-only stages at a boundary run). */
int sl_trainer_stage_at(const trainer *t, int step) {
    int next = 0;
    for (int i = 0; i < t->n_stages; i++) {
        if (t->stages[i].steps == 0) continue;
        if (step < t->first_step[i + 1]) return step >= t->first_step[i] ? i : next;
        next = i + 1;
    }
    return next;
}

/* Model FLOPs of one step of stage i (for the ETA over the whole schedule). */
double sl_trainer_step_flops(const trainer *t, int i) {
    const sl_stage *st = &t->stages[i];
    return (double)st->train.global_batch_tokens *
           sl_model_flops_per_token(&st->model, st->train.seq_len);
}

bool sl_trainer_same_train_data(const sl_data_config *a, const sl_data_config *b) {
    if (a->n_train != b->n_train || a->seed != b->seed) return false;
    for (int i = 0; i < a->n_train; i++)
        if (strcmp(a->train[i].path, b->train[i].path) != 0 ||
            a->train[i].weight != b->train[i].weight)
            return false;
    return true;
}

/* The training reader of stage i: at the position the previous stage's reader (or the resumed
 * checkpoint) reached when the data is the same, at the start of the stage's own data
 * otherwise. */
static int open_stage_reader(trainer *t, int i) {
    const sl_stage *st = &t->stages[i];
    char *cursor = NULL;
    if (t->reader_stage >= 0 &&
        sl_trainer_same_train_data(&t->stages[t->reader_stage].data, &st->data))
        cursor = t->train_reader ? sl_reader_cursor_json(t->train_reader) : t->resume_cursor;
    if (cursor == t->resume_cursor) t->resume_cursor = NULL; /* taken */
    if (t->train_reader) sl_reader_close(t->train_reader);
    free(t->resume_cursor);
    t->resume_cursor = NULL;
    /* the global batch is global_batch_tokens / seq_len sequences of the global data order,
     * each rank reading its contiguous share (io/reader.h) */
    sl_reader_opts o = {.data = &st->data,
                        .dp_rank = t->topo.dp_rank,
                        .dp_size = t->topo.dp_size,
                        .seq_len = st->train.seq_len,
                        .global_batch_sequences = st->train.global_batch_tokens / st->train.seq_len,
                        .eval = false};
    t->train_reader = sl_reader_open(&o, t->err, sizeof t->err);
    t->reader_stage = i;
    int rc = 0;
    char key[160], src[SL_PATH_MAX + 16];
    sl_config_stage_data_key(t->cfg, i, false, key, sizeof key);
    if (!t->train_reader) {
        sl_error_hold("%s: %s: %s", sl_trainer_data_key_source(t, key, src, sizeof src), key,
                      t->err);
        rc = -1;
    } else if (sl_trainer_check_data(t, st, t->train_reader, key) != 0) {
        rc = -1;
    } else if (cursor && sl_reader_restore(t->train_reader, cursor, t->err, sizeof t->err) != 0) {
        sl_error_hold("stage \"%s\": %s", st->name, t->err);
        rc = -1;
    }
    free(cursor);
    return rc;
}

void sl_trainer_describe_rope(const sl_model_config *m, char *buf, size_t n) {
    if (m->rope_scaling.type == SL_ROPE_YARN)
        snprintf(buf, n, "RoPE base %g + YaRN x%g (original %d)", m->rope_theta,
                 m->rope_scaling.factor, m->rope_scaling.original_max_position_embeddings);
    else
        snprintf(buf, n, "RoPE base %g", m->rope_theta);
}

/* Micro-batches per rank per step of a stage (trainer.c's header comment). */
int sl_trainer_micro_batches(const sl_train_config *tc, int ranks) {
    return (int)(tc->global_batch_tokens / ((int64_t)tc->seq_len * tc->micro_batch_size * ranks));
}

/* Makes stage i current at global step `step` (collective): RoPE table, activation shape,
 * reader, and the optimizer reset of a stage that starts here. */
int sl_trainer_enter_stage(trainer *t, int i, int step) {
    const sl_stage *st = &t->stages[i];
    const sl_train_config *tc = &st->train;
    t->cur = i;
    sl_model_config *mc = &t->model->cfg;
    mc->rope_theta = st->model.rope_theta;
    mc->rope_scaling = st->model.rope_scaling;
    mc->max_position_embeddings = st->model.max_position_embeddings;
    double fail = 0;
    if (sl_model_set_rope(t->model, t->err, sizeof t->err) != 0 ||
        sl_model_set_shape(t->model, tc->micro_batch_size, tc->seq_len, t->err, sizeof t->err) !=
            0) {
        sl_error_hold("stage \"%s\": %s", st->name, t->err);
        fail = 1;
    }
    const size_t rows = (size_t)tc->micro_batch_size, row_len = (size_t)tc->seq_len + 1;
    free(t->tokens);
    free(t->doc_starts);
    free(t->n_docs);
    t->tokens = sl_xmalloc(rows * row_len * sizeof(int32_t));
    /* document starts only where the stage masks by document (sl_trainer_next_batch) */
    t->doc_starts = tc->document_mask ? sl_xmalloc(rows * row_len * sizeof(int32_t)) : NULL;
    t->n_docs = tc->document_mask ? sl_xmalloc(rows * sizeof(int)) : NULL;
    t->micro_batches = sl_trainer_micro_batches(tc, t->topo.size);
    if (fail == 0 && st->steps > 0 && open_stage_reader(t, i) != 0) fail = 1;
    if (sl_comm_agree(t->topo.world, fail > 0)) return -1;
    if (st->reset_optimizer && st->steps > 0 && step == t->first_step[i]) {
        sl_optimizer_reset(&t->opt);
        sl_info("stage \"%s\": AdamW moments reset", st->name);
    }
    if (t->n_stages > 1 || t->cfg->stages_given) {
        char rope[160];
        sl_trainer_describe_rope(mc, rope, sizeof rope);
        sl_info("stage %d/%d \"%s\" at step %d: %s%d tokens per sequence, %s", i + 1, t->n_stages,
                st->name, step, st->steps > 0 ? "" : "evaluation only, ", tc->seq_len, rope);
        if (t->topo.rank == 0) {
            char fields[512];
            snprintf(fields, sizeof fields,
                     "\"stage\": \"%s\", \"index\": %d, \"step\": %d, \"tokens\": %lld, "
                     "\"seq_len\": %d, \"rope_theta\": %.17g, \"yarn_factor\": %.17g",
                     st->name, i, step, (long long)t->first_tokens[i], tc->seq_len, mc->rope_theta,
                     mc->rope_scaling.type == SL_ROPE_YARN ? mc->rope_scaling.factor : 1.0);
            sl_metrics_event(&t->metrics, "stage", fields);
        }
    }
    return 0;
}

/* Evaluates the current stage's held-out set and records it as an "eval" event (at a stage's
 * start and for evaluation-only stages; step evaluations go into the step record). NaN when
 * there is no eval set, -1 on error. */
double sl_trainer_evaluate_event(trainer *t, int step, const char *when) {
    const double ev = sl_trainer_evaluate(t);
    if (ev < 0 || isnan(ev)) return ev;
    const sl_stage *st = sl_trainer_stage(t);
    char where[96] = "";
    if (t->cfg->stages_given)
        snprintf(where, sizeof where, " | stage \"%s\", %d tokens per sequence", st->name,
                 st->train.seq_len);
    sl_info("held-out loss %s: %.4f (perplexity %.2f)%s", when, ev, exp(ev), where);
    if (t->topo.rank == 0) {
        char fields[256];
        snprintf(fields, sizeof fields,
                 "\"stage\": \"%s\", \"step\": %d, \"tokens\": %lld, \"seq_len\": %d, "
                 "\"eval_loss\": %.6g",
                 st->name, step, (long long)sl_trainer_tokens_after(t, step), st->train.seq_len,
                 ev);
        sl_metrics_event(&t->metrics, "eval", fields);
    }
    return ev;
}
