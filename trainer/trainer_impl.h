/*
 * trainer/trainer_impl.h - the trainer's state and the functions its files share (internal to
 * trainer/trainer*.c; users include trainer/trainer.h).
 *
 *   trainer.c        set-up and the step loop
 *   trainer_stages.c the staged schedule: stages' steps, entering a stage, its evaluation event
 *   trainer_eval.c   batches and held-out evaluation
 *   trainer_ckpt.c   checkpoints: train state, saving, resuming, the final weights
 *   trainer_sample.c samples from the model during training (training.sample_every)
 *   trainer_profile.c the step profile of `sluice train --profile`
 */
#ifndef SL_TRAINER_IMPL_H
#define SL_TRAINER_IMPL_H

#include <time.h>

#include "core/backend.h"
#include "io/reader.h"
#include "io/tokenizer.h"
#include "model/model.h"
#include "trainer/checkpoint.h"
#include "trainer/config.h"
#include "trainer/metrics.h"
#include "trainer/optimizer.h"
#include "trainer/topology.h"

typedef struct {
    const sl_config *cfg;
    /* the --set overrides cfg was made with (sl_train_opts), to tag a key they set in messages */
    const char *const *sets;
    int n_sets;
    sl_topology topo;
    sl_backend *be;
    sl_model *model;
    sl_optimizer opt;
    sl_metrics metrics;
    /* the schedule (docs/stages.md) */
    int n_stages;
    sl_stage *stages;      /* [n_stages], resolved from the config */
    int *first_step;       /* [n_stages + 1]: steps before stage i; [n_stages]: all steps */
    int64_t *first_tokens; /* [n_stages + 1]: training tokens before stage i */
    int64_t *keep_steps;   /* the last step of every training stage (kept by retention) */
    int n_keep_steps;
    int cur;             /* the stage running */
    int micro_batches;   /* per rank per step, in the current stage */
    int32_t *tokens;     /* [micro_batch_size, seq_len + 1] of the current stage */
    int32_t *doc_starts; /* the same shape: each row's document starts (NULL without
                          * document_mask) */
    int *n_docs;         /* [micro_batch_size] */
    sl_reader *train_reader;
    int reader_stage;    /* the stage whose training data train_reader (or resume_cursor)
                          * belongs to; -1: none yet */
    char *resume_cursor; /* the resumed checkpoint's data cursor, until a reader takes it */
    int start_step;      /* steps already taken (a resumed run) */
    bool resumed;        /* continues a checkpoint (a "resume" metrics event, not "start") */
    char resumed_from[SL_PATH_MAX]; /* the checkpoint directory it continues */
    sl_train_ckpt_async *pending;   /* an asynchronous save in flight */
    int pending_step;
    /* data.tokenizer, when set: checked at set-up; the shards must record it (when they
     * record one), and the final weights carry a copy of its files */
    bool has_tokenizer;
    bool tok_warned; /* the shards' tokenizer without data.tokenizer: warned once */
    uint8_t tok_hash[SL_TOKENIZER_HASH_BYTES];
    struct sl_text_codec *sample_codec; /* training.sample_every's codec, opened at the first */
    double peak_flops;    /* per rank, for MFU (backend.peak_tflops or the GPU's datasheet);
                           * 0: unknown, MFU not reported */
    char peak_source[96]; /* where peak_flops comes from, for the banner */
    /* the step profile (trainer_profile.c): global steps [prof_from, prof_from + prof_steps),
     * 1-based; prof_steps 0: off */
    int prof_from, prof_steps;
    int prof_first, prof_last; /* the steps profiled so far (prof_first 0: none yet) */
    bool prof_on;              /* profiling is enabled on the backend */
    char err[1024];
} trainer;

/* Checks a reader's shards against the model and the tokenizer: every id must be below
 * model.vocab_size, and the tokenizer the shards record (if any) must be data.tokenizer (if
 * set). `what` names the data's config key in messages (sl_config_stage_data_key), after the
 * config file. 0, or -1 with the error held (the caller's
 * sl_comm_agree prints it once). */
int sl_trainer_check_data(trainer *t, const sl_stage *st, const sl_reader *r, const char *what);

/* Seconds on the monotonic clock. */
static inline double sl_trainer_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The training tokens after global step `step` of the schedule. */
static inline int64_t sl_trainer_tokens_after(const trainer *t, int step) {
    for (int i = 0; i < t->n_stages; i++)
        if (step <= t->first_step[i + 1])
            return t->first_tokens[i] +
                   (int64_t)(step - t->first_step[i]) * t->stages[i].train.global_batch_tokens;
    return t->first_tokens[t->n_stages];
}

/* The current stage. */
static inline const sl_stage *sl_trainer_stage(const trainer *t) {
    return &t->stages[t->cur];
}

/* The staged schedule (trainer_stages.c). plan_schedule: the stages, their first steps and
 * tokens, every stage's batch checked against the number of ranks (0, or -1 after printing an
 * error). stage_at: the stage to start with at global step `step` (the one holding it, or after
 * a stage that ends exactly there, the next, so that evaluation-only stages at a boundary run).
 * step_flops: model FLOPs of one step of stage i. micro_batches: per rank per step.
 * describe_rope: "RoPE base B[ + YaRN xF (original N)]". enter_stage: makes stage i current at
 * global step `step` (collective: RoPE table, activation shape, reader, the optimizer reset of
 * a stage that starts there). evaluate_event: the current stage's held-out loss as an "eval"
 * event (NaN without an eval set, -1 on error; collective). */
int sl_trainer_plan_schedule(trainer *t);
/* Every stage's data (training corpora and eval set), the first stage's included, resolved and
 * each shard's header and index read, on rank 0, before the model is allocated or a checkpoint
 * read: a bad path fails in a second at start-up, naming the config and the key, not after
 * minutes of set-up or after stages 1 and 2 have trained. Before a resume the stage it re-enters
 * is not yet known, so stages it has finished are checked too. 0, or -1 with the error held
 * (sl_error_hold_shared). */
int sl_trainer_check_stage_data(trainer *t);
/* The eval sets of the stages still to run (from the one at start_step), on rank 0: each is
 * opened, and one that no rank can fill a micro-batch from (an eval reader drops a rank's last
 * piece shorter than a batch) is an error for an evaluation-only stage and otherwise a warning.
 * Called once the start step is known (after a resume). 0, or -1 with the error held. */
int sl_trainer_check_eval_sets(trainer *t);
/* The name a message gives the config for the data key `where` (sl_config_stage_data_key's
 * "data.train", or `training.stages[j] ("name"): data.train`): its file, tagged "(--set)" when
 * a --set gave that key, as the config's other errors of an override are. */
const char *sl_trainer_data_key_source(const trainer *t, const char *where, char *buf, size_t n);
/* trainer/fit_host.c, on the CPU backend only (a no-op on a device): this rank's memory
 * estimate (sluice plan's, for the stage with the most tokens per micro-batch) times
 * `host_ranks`, the job's ranks on this rank's node, against what the node can still give
 * (core/host_memory.h), or against `assume` bytes when positive; `assume` < 0 skips the check.
 * 0, or -1 with the error held (sl_error_hold), before anything is allocated. */
int sl_trainer_check_host_memory(trainer *t, int host_ranks, int64_t assume);
int sl_trainer_stage_at(const trainer *t, int step);
/* Whether two stages train on the same data (corpora, weights, seed): a stage entered with the
 * previous stage's data continues its reader where it stopped. */
bool sl_trainer_same_train_data(const sl_data_config *a, const sl_data_config *b);
double sl_trainer_step_flops(const trainer *t, int i);
int sl_trainer_micro_batches(const sl_train_config *tc, int ranks);
void sl_trainer_describe_rope(const sl_model_config *m, char *buf, size_t n);
int sl_trainer_enter_stage(trainer *t, int i, int step);
double sl_trainer_evaluate_event(trainer *t, int step, const char *when);

/* Fills one micro-batch of the current stage from a reader into `tokens`. 1, 0 at the end of
 * an eval set, -1 on error (message in err). With training.document_mask the model gets the
 * batch's document starts for its next forward (sl_model_set_documents). */
int sl_trainer_next_batch(trainer *t, sl_reader *r, int32_t *tokens, char *err, size_t errlen);
/* Mean held-out loss of the current stage's eval set at its sequence length (all ranks
 * together): NaN without an eval set, -1 after printing an error. Collective. */
double sl_trainer_evaluate(trainer *t);

/* Checkpoint of step `step` (collective); asynchronous with training.async_save unless `last`.
 * 0, or -1 after printing an error. */
int sl_trainer_save(trainer *t, int step, bool last);
/* Commits the asynchronous save in flight, if any (collective). */
int sl_trainer_finish_pending(trainer *t);
/* Continues from a checkpoint ("auto" or a path): weights, optimizer, step, and the data
 * cursor for the stage reader to take (t->resume_cursor). 0 (also for a fresh start), or -1
 * after printing an error. */
int sl_trainer_resume(trainer *t, const char *resume);
/* After every rank's sl_trainer_resume succeeded: "resumed from DIR at step N" and the "resume"
 * metrics event (rank 0), so that a rank whose part of the checkpoint fails is not preceded by
 * rank 0's success. */
void sl_trainer_resumed(trainer *t);
/* A sample from the model after global step `step` (training.sample_*), printed and recorded as
 * a "sample" metrics event by rank 0 (collective). 0, or -1 after printing an error. */
int sl_trainer_sample(trainer *t, int step);
/* Hugging Face weights of the final model in <out_dir>/final (collective). */
int sl_trainer_save_final(trainer *t);

/* The step profile (`sluice train --profile`). set: resolves the window against the schedule
 * and the step this process starts at (0, or -1 after printing an error once: a window after the
 * schedule's last step). begin / end: around global step `step` (1-based) of the loop, on every
 * rank. after: once the step's progress line is out, reports after the window's last step
 * (collective). finish: at the end of a run that went well, reports a window the schedule cut
 * short, or warns that no step was profiled (collective). */
int sl_trainer_profile_set(trainer *t, int steps, int from);
void sl_trainer_profile_begin(trainer *t, int step);
void sl_trainer_profile_end(trainer *t, int step);
void sl_trainer_profile_after(trainer *t, int step);
void sl_trainer_profile_finish(trainer *t);

#endif
