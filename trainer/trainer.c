/*
 * trainer/trainer.c - the training loop (see trainer.h).
 *
 * One optimizer step = micro_batches x ranks micro-batches of [micro_batch_size, seq_len]
 * tokens, with micro_batches = global_batch_tokens / (seq_len * micro_batch_size * ranks).
 * Every token of the global batch weighs the same: each micro-batch's cross-entropy gradient
 * is scaled by 1 / global_batch_tokens and gradients are summed over ranks, so the step
 * follows the gradient of the global mean loss whatever the number of ranks.
 */
#include "trainer/trainer.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/backend.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "core/ops.h"
#include "core/rng.h"
#include "io/reader.h"
#include "model/counts.h"
#include "model/hf_export.h"
#include "model/model.h"
#include "trainer/checkpoint.h"
#include "trainer/metrics.h"
#include "trainer/optimizer.h"
#include "trainer/topology.h"
#include "trainer/train_step.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    const sl_config *cfg;
    sl_topology topo;
    sl_backend *be;
    sl_model *model;
    sl_reader *train_reader;
    sl_optimizer opt;
    sl_metrics metrics;
    int micro_batches;
    int32_t *tokens;              /* [micro_batch_size, seq_len + 1] */
    int start_step;               /* steps already taken (a resumed run) */
    sl_train_ckpt_async *pending; /* an asynchronous save in flight */
    int pending_step;
    char err[1024];
} trainer;

/* Fills one micro-batch from a reader. Returns 1, 0 at the end of an eval set, -1 on error. */
static int next_batch(sl_reader *r, int rows, int seq, int32_t *tokens, char *err, size_t errlen) {
    for (int b = 0; b < rows; b++) {
        int rc = sl_reader_next(r, tokens + (int64_t)b * (seq + 1), NULL, NULL, err, errlen);
        if (rc != 1) return rc;
    }
    return 1;
}

/* Mean held-out loss over up to eval_tokens tokens (all ranks together). NaN without an
 * eval set. Ranks may hold different amounts of held-out data, but with expert parallelism
 * every forward is a collective: all ranks step together, and a rank whose data has run out
 * keeps running forwards it does not count until no rank has data left. */
static double evaluate(trainer *t) {
    const sl_config *c = t->cfg;
    if (!c->data.eval_path[0]) return NAN;
    sl_reader_opts o = {.data = &c->data,
                        .dp_rank = t->topo.dp_rank,
                        .dp_size = t->topo.dp_size,
                        .seq_len = c->train.seq_len,
                        .eval = true};
    sl_reader *r = sl_reader_open(&o, t->err, sizeof t->err);
    double fail = r == NULL;
    sl_comm_allreduce_max_f64(t->topo.world, &fail, 1);
    if (fail > 0) {
        if (!r) sl_error("evaluation data: %s", t->err);
        if (r) sl_reader_close(r);
        return -1.0;
    }
    const int64_t per_batch = (int64_t)c->train.micro_batch_size * c->train.seq_len;
    sl_model_begin_step(t->model, false); /* the held-out loss needs no metrics */
    double sums[2] = {0.0, 0.0};          /* this rank's loss sum and tokens */
    double seen = 0.0;                    /* tokens evaluated by all ranks */
    bool have_batch = false;
    for (;;) {
        double flags[2] = {0.0, 0.0}; /* [0]: some rank has a batch, [1]: some rank failed */
        int rc = 0;
        if (c->train.eval_tokens <= 0 || seen < c->train.eval_tokens) {
            rc = next_batch(r, c->train.micro_batch_size, c->train.seq_len, t->tokens, t->err,
                            sizeof t->err);
            flags[0] = rc == 1;
            flags[1] = rc < 0;
            have_batch |= rc == 1;
        }
        sl_comm_allreduce_max_f64(t->topo.world, flags, 2);
        if (flags[1] > 0) {
            if (rc < 0) sl_error("evaluation data: %s", t->err);
            sl_reader_close(r);
            return -1.0;
        }
        if (flags[0] == 0) break;
        double counted = 0.0;
        /* A rank without held-out data (or whose data ran out) still joins the forward:
         * with a batch of token 0 when it never had one, its last batch otherwise. */
        if (!have_batch)
            memset(t->tokens, 0,
                   (size_t)c->train.micro_batch_size * (c->train.seq_len + 1) * sizeof(int32_t));
        sl_fwd_stats st;
        sl_model_forward(t->model, t->tokens, &st);
        if (rc == 1) {
            sums[0] += st.loss_sum;
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

static int setup(trainer *t) {
    const sl_config *c = t->cfg;
    const sl_train_config *tc = &c->train;
    if (sl_topology_init(&t->topo, t->topo.world, c->parallel.expert_parallel, c->model.num_experts,
                         t->err, sizeof t->err) != 0) {
        sl_error("%s: %s", c->path, t->err);
        return -1;
    }
    const int64_t per_micro = (int64_t)tc->seq_len * tc->micro_batch_size * t->topo.size;
    if (tc->global_batch_tokens % per_micro != 0) {
        sl_error("%s: training.global_batch_tokens = %lld is not a multiple of seq_len x "
                 "micro_batch_size x ranks = %d x %d x %d",
                 c->path, (long long)tc->global_batch_tokens, tc->seq_len, tc->micro_batch_size,
                 t->topo.size);
        return -1;
    }
    t->micro_batches = (int)(tc->global_batch_tokens / per_micro);
    sl_moe_options mo = {
        .capacity_factor = c->parallel.capacity_factor,
        .drop_policy =
            strcmp(c->parallel.drop_policy, "position") == 0 ? SL_DROP_POSITION : SL_DROP_PROBS,
        .lbl_comm = tc->global_batch_lbl ? t->topo.world : NULL,
        .selection_bias = tc->router_bias_update_rate > 0,
    };
    t->model =
        sl_model_create_mem(&c->model, t->be, t->topo.ep, tc->micro_batch_size, tc->seq_len, &mo,
                            sl_config_compute_dtype(c), sl_memory_mode_of_recompute(tc->recompute),
                            t->err, sizeof t->err);
    if (!t->model) {
        sl_error("%s: %s", c->path, t->err);
        return -1;
    }
    sl_params_randomize(&t->model->params, tc->seed);
    /* the global batch is global_batch_tokens / seq_len sequences of the global data order,
     * each rank reading its contiguous share (io/reader.h) */
    sl_reader_opts o = {.data = &c->data,
                        .dp_rank = t->topo.dp_rank,
                        .dp_size = t->topo.dp_size,
                        .seq_len = tc->seq_len,
                        .global_batch_sequences = tc->global_batch_tokens / tc->seq_len,
                        .eval = false};
    t->train_reader = sl_reader_open(&o, t->err, sizeof t->err);
    if (!t->train_reader) {
        sl_error("training data: %s", t->err);
        return -1;
    }
    if (sl_reader_vocab_size(t->train_reader) > c->model.vocab_size) {
        sl_error("%s: model.vocab_size = %d is smaller than the data's vocabulary (%d)", c->path,
                 c->model.vocab_size, sl_reader_vocab_size(t->train_reader));
        return -1;
    }
    t->tokens = sl_xmalloc((size_t)tc->micro_batch_size * (tc->seq_len + 1) * sizeof(int32_t));
    sl_optimizer_params op = {.dense = t->topo.world,
                              .expert = t->topo.edp,
                              .ep = t->topo.ep_size > 1 ? t->topo.ep : NULL,
                              .zero1 = c->parallel.zero1,
                              .bucket_bytes = (int64_t)c->parallel.bucket_mb << 20,
                              .layers = c->model.num_hidden_layers};
    sl_optimizer_init(&t->opt, &t->model->params, &op);
    /* training.metrics_file is never empty: the config derives it from out_dir */
    if (t->topo.rank == 0) {
        if (sl_mkdirs(tc->out_dir, t->err, sizeof t->err) != 0 ||
            sl_metrics_open(&t->metrics, tc->metrics_file, t->err, sizeof t->err) != 0) {
            sl_error("%s", t->err);
            return -1;
        }
    }
    return 0;
}

static void print_banner(const trainer *t) {
    const sl_config *c = t->cfg;
    int64_t total = 0, active = 0;
    sl_model_param_count(&c->model, &total, &active);
    const double flops = sl_model_flops_per_token(&c->model, c->train.seq_len);
    const char *gate = sl_gate_mode_name(c->model.attn_output_gate);
    sl_info("sluice: %s | backend %s x %d threads | %d ranks (expert parallel %d)", c->path,
            sl_backend_name(t->be), sl_backend_threads(t->be), t->topo.size, t->topo.ep_size);
    sl_info("model: %d layers, hidden %d, %d/%d heads x %d, gate %s, %d experts top-%d",
            c->model.num_hidden_layers, c->model.hidden_size, c->model.num_attention_heads,
            c->model.num_key_value_heads, c->model.head_dim, gate, c->model.num_experts,
            c->model.num_experts_per_tok);
    sl_info("parameters: %.3fM total, %.3fM active per token | %.4g model FLOPs per token "
            "(seq %d)",
            total / 1e6, active / 1e6, flops, c->train.seq_len);
    sl_info("batch: %lld tokens per step = %d micro-batches x %d ranks x %d x %d tokens",
            (long long)c->train.global_batch_tokens, t->micro_batches, t->topo.size,
            c->train.micro_batch_size, c->train.seq_len);
}

static void summarize_load(const trainer *t, double *load_max, double *load_mean,
                           int64_t *counts_acc) {
    const sl_model_config *mc = &t->cfg->model;
    for (int l = 0; l < mc->num_hidden_layers; l++) {
        if (!sl_layer_is_moe(mc, l)) {
            load_max[l] = load_mean[l] = NAN;
            continue;
        }
        const int64_t *c = counts_acc + (int64_t)l * mc->num_experts;
        double mx = 0, sum = 0;
        for (int e = 0; e < mc->num_experts; e++) {
            mx = c[e] > mx ? (double)c[e] : mx;
            sum += (double)c[e];
        }
        load_max[l] = mx;
        load_mean[l] = sum / mc->num_experts;
    }
}

/* Saves the weights to <out_dir>/final, or <out_dir>/step-N for intermediate saves. The
 * first expert-parallel group writes (one shard per EP rank); every rank learns the result. */
/* The train state rank 0 stores with a checkpoint (docs/checkpoint-format.md, "What the
 * trainer stores"): everything besides the tensors that continues the run exactly. */
static cJSON *train_state(trainer *t, int step) {
    const sl_config *c = t->cfg;
    cJSON *s = cJSON_CreateObject();
    cJSON_AddNumberToObject(s, "step", step);
    cJSON_AddNumberToObject(s, "optimizer_step", t->opt.step);
    cJSON_AddNumberToObject(s, "tokens", (double)step * (double)c->train.global_batch_tokens);
    char *cursor = sl_reader_cursor_json(t->train_reader);
    cJSON *cj = cJSON_Parse(cursor);
    free(cursor);
    cJSON_AddItemToObject(s, "data_cursor", cj ? cj : cJSON_CreateNull());
    cJSON *world = cJSON_AddObjectToObject(s, "layout");
    cJSON_AddNumberToObject(world, "ranks", t->topo.size);
    cJSON_AddNumberToObject(world, "expert_parallel", t->topo.ep_size);
    cJSON_AddBoolToObject(world, "zero1", c->parallel.zero1);
    char *cfg = sl_config_to_json(c), *hf = sl_model_config_to_hf_json(&c->model);
    char hash[24];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)sl_hash_str(cfg));
    cJSON_AddStringToObject(s, "config_hash", hash); /* of the config JSON below */
    cJSON *cfgj = cJSON_Parse(cfg), *hfj = cJSON_Parse(hf);
    free(cfg), free(hf);
    cJSON_AddItemToObject(s, "config", cfgj ? cfgj : cJSON_CreateNull());
    cJSON_AddItemToObject(s, "hf_config", hfj ? hfj : cJSON_CreateNull());
    return s;
}

/* Commits the asynchronous save in flight, if any (collective). */
static int finish_pending(trainer *t) {
    if (!t->pending) return 0;
    const double t0 = now_s();
    const int rc = sl_train_ckpt_save_finish(t->pending, t->err, sizeof t->err);
    t->pending = NULL;
    if (rc != 0) {
        sl_error("checkpoint of step %d: %s", t->pending_step, t->err);
        return -1;
    }
    sl_info("committed checkpoint %s/checkpoints/step-%d (written in the background; the commit "
            "waited %.3f s)",
            t->cfg->train.out_dir, t->pending_step, now_s() - t0);
    return 0;
}

/* A checkpoint of step `step` (every rank writes its pieces; collective). With
 * training.async_save (and not at the end) the step waits only for the copy to host memory;
 * the commit follows after the next step (finish_pending). */
static int save_checkpoint(trainer *t, int step, bool last) {
    const sl_train_config *tc = &t->cfg->train;
    const sl_train_ckpt parts = {.model = t->model, .opt = &t->opt, .topo = &t->topo};
    const sl_train_ckpt_save_opts o = {.out_dir = tc->out_dir,
                                       .step = step,
                                       .keep_last = tc->keep_last,
                                       .keep_every = tc->keep_every};
    if (finish_pending(t) != 0) return -1; /* at most one save in flight */
    cJSON *state = t->topo.rank == 0 ? train_state(t, step) : NULL;
    const double t0 = now_s();
    if (tc->async_save && !last) {
        t->pending = sl_train_ckpt_save_async(&parts, &o, state, t->err, sizeof t->err);
        if (!t->pending) {
            sl_error("checkpoint of step %d: %s", step, t->err);
            return -1;
        }
        t->pending_step = step;
        sl_info("checkpoint of step %d: the step waited %.3f s (copy to host memory); writing in "
                "the background",
                step, now_s() - t0);
        return 0;
    }
    const int rc = sl_train_ckpt_save(&parts, &o, state, t->err, sizeof t->err);
    cJSON_Delete(state);
    if (rc != 0) {
        sl_error("checkpoint of step %d: %s", step, t->err);
        return -1;
    }
    sl_info("saved checkpoint %s/checkpoints/step-%d in %.2f s", tc->out_dir, step, now_s() - t0);
    return 0;
}

/* Lists, in a warning, the run settings that differ from those the checkpoint was saved with:
 * allowed (a new learning rate, schedule or batch size is how runs are steered), but said. */
static void warn_changed_settings(const trainer *t, const cJSON *saved_cfg) {
    char *now_s = sl_config_to_json(t->cfg);
    cJSON *now = cJSON_Parse(now_s);
    free(now_s);
    char list[1024] = "";
    const char *sections[] = {"training", "parallel", "data", "backend"};
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(saved_cfg, sections[i]);
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(now, sections[i]);
        const cJSON *item;
        cJSON_ArrayForEach(item, b) {
            const cJSON *old = cJSON_GetObjectItemCaseSensitive(a, item->string);
            if (old && cJSON_Compare(old, item, true)) continue;
            const size_t n = strlen(list);
            snprintf(list + n, sizeof list - n, "%s%s.%s", n ? ", " : "", sections[i],
                     item->string);
        }
    }
    cJSON_Delete(now);
    if (list[0] && t->topo.rank == 0)
        sl_warn("--resume: settings changed since the checkpoint: %s", list);
}

/* Continues from a checkpoint: `resume` is "auto" (the newest under out_dir, or none) or a
 * path. Returns 0 (also for a fresh start), or -1 with a message printed. */
static int resume_from(trainer *t, const char *resume) {
    const sl_train_config *tc = &t->cfg->train;
    char path[SL_PATH_MAX + 64];
    if (strcmp(resume, "auto") == 0) {
        const int found =
            sl_ckpt_find_latest(tc->out_dir, path, sizeof path, t->err, sizeof t->err);
        if (found < 0) {
            sl_error("--resume auto: %s", t->err);
            return -1;
        }
        if (found == 0) {
            sl_info("--resume auto: no checkpoint under %s: a fresh start", tc->out_dir);
            return 0;
        }
    } else {
        snprintf(path, sizeof path, "%s", resume);
    }
    sl_ckpt *ck = sl_ckpt_open(path, t->err, sizeof t->err);
    if (!ck) {
        sl_error("--resume: %s", t->err);
        return -1;
    }
    const cJSON *st = sl_ckpt_train_state(ck);
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(st, "step");
    const cJSON *ostep = cJSON_GetObjectItemCaseSensitive(st, "optimizer_step");
    const cJSON *cursor = cJSON_GetObjectItemCaseSensitive(st, "data_cursor");
    int rc = 0;
    if (!cJSON_IsNumber(step) || !cJSON_IsNumber(ostep) || !cJSON_IsObject(cursor)) {
        sl_error("%s/train_state.json: step, optimizer_step or data_cursor missing",
                 sl_ckpt_dir(ck));
        rc = -1;
    }
    const sl_train_ckpt parts = {.model = t->model, .opt = &t->opt, .topo = &t->topo};
    if (rc == 0 && sl_train_ckpt_load(&parts, ck, t->err, sizeof t->err) != 0) {
        sl_error("--resume: %s", t->err);
        rc = -1;
    }
    if (rc == 0) {
        char *cj = cJSON_PrintUnformatted(cursor);
        if (sl_reader_restore(t->train_reader, cj, t->err, sizeof t->err) != 0) {
            sl_error("--resume: %s/train_state.json: data_cursor: %s", sl_ckpt_dir(ck), t->err);
            rc = -1;
        }
        free(cj);
    }
    if (rc == 0) {
        const cJSON *saved = cJSON_GetObjectItemCaseSensitive(st, "config");
        if (cJSON_IsObject(saved)) warn_changed_settings(t, saved);
        t->start_step = (int)step->valuedouble;
        t->opt.step = (int)ostep->valuedouble;
        sl_info("resumed from %s at step %d", sl_ckpt_dir(ck), t->start_step);
        if (t->topo.rank == 0) {
            char fields[SL_PATH_MAX + 96];
            snprintf(fields, sizeof fields, "\"step\": %d, \"checkpoint\": \"%s\"", t->start_step,
                     sl_ckpt_dir(ck));
            sl_metrics_event(&t->metrics, "resume", fields);
        }
    }
    sl_ckpt_close(ck);
    return rc;
}

/* Hugging Face weights of the final model in <out_dir>/final. */
static int save_final_weights(trainer *t) {
    char dir[SL_PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/final", t->cfg->train.out_dir);
    double fail = 0;
    if (t->topo.rank < t->topo.ep_size &&
        sl_hf_save(t->model, dir, t->topo.ep, t->err, sizeof t->err) != 0) {
        sl_error("saving weights to %s: %s", dir, t->err);
        fail = 1;
    }
    sl_comm_allreduce_max_f64(t->topo.world, &fail, 1);
    if (fail == 0) sl_info("saved weights to %s (safetensors + config.json)", dir);
    return fail == 0 ? 0 : -1;
}

/* Debugging aid for the failure tests (docs/parallelism.md): SLUICE_FAULT="rank:step:kind"
 * makes that rank fail at that step, kind "error" (a reported error) or "crash" (killed). */
static void maybe_inject_fault(const trainer *t, int step) {
    const char *f = getenv("SLUICE_FAULT");
    int rank = -1, at = -1;
    char kind[16] = "";
    if (!f || sscanf(f, "%d:%d:%15s", &rank, &at, kind) != 3) return;
    if (rank != t->topo.rank || at != step) return;
    if (strcmp(kind, "crash") == 0) {
        fprintf(stderr, "sluice[rank %d]: SLUICE_FAULT: killing this rank at step %d\n", rank,
                step);
        raise(SIGKILL);
    }
    sl_error("SLUICE_FAULT: injected error at step %d", step);
    sl_comm_abort(1);
}

static int train_batch(void *user, int micro, int32_t *tokens, char *err, size_t errlen) {
    (void)micro;
    trainer *t = user;
    const sl_train_config *tc = &t->cfg->train;
    return next_batch(t->train_reader, tc->micro_batch_size, tc->seq_len, tokens, err, errlen) == 1
               ? 0
               : -1;
}

static int train_loop(trainer *t) {
    const sl_config *c = t->cfg;
    const sl_train_config *tc = &c->train;
    const sl_model_config *mc = &c->model;
    const int nl = mc->num_hidden_layers, ne = mc->num_experts > 0 ? mc->num_experts : 1;
    const int64_t step_tokens = tc->global_batch_tokens;
    int64_t *counts = sl_xcalloc((size_t)nl * ne, sizeof(int64_t));
    double *load_max = sl_xcalloc((size_t)nl, sizeof(double));
    double *load_mean = sl_xcalloc((size_t)nl, sizeof(double));
    double *rank_load = sl_xcalloc((size_t)t->topo.ep_size, sizeof(double));
    const sl_stepper stepper = {.model = t->model,
                                .opt = &t->opt,
                                .world = t->topo.world,
                                .micro_batches = t->micro_batches,
                                .tokens = t->tokens};
    int rc = 0;

    double ev = evaluate(t);
    if (ev < 0) return -1;
    if (!isnan(ev)) sl_info("held-out loss at start: %.4f (perplexity %.2f)", ev, exp(ev));
    const double t0 = now_s();
    for (int step = t->start_step; step < tc->max_steps; step++) {
        const double ts = now_s();
        maybe_inject_fault(t, step + 1);
        const int done = step + 1;
        const bool do_eval =
            done == tc->max_steps || (tc->eval_every > 0 && done % tc->eval_every == 0);
        /* Logged steps also compute the metrics-only statistics (gate score, router
         * statistics); other steps read just the loss from the device. */
        const bool logged =
            done % (tc->log_every > 0 ? tc->log_every : 1) == 0 || do_eval || done == tc->max_steps;
        sl_step_result res = {.counts = mc->num_experts > 0 ? counts : NULL, .metrics = logged};
        if (sl_train_step(&stepper, tc, step, train_batch, t, &res, t->err, sizeof t->err) != 0) {
            sl_error("training data: %s", t->err);
            sl_comm_abort(1);
        }
        /* the background write of the previous checkpoint overlapped this step: commit it */
        if (finish_pending(t) != 0) {
            rc = -1;
            break;
        }
        /* the hash of the step's global batch: the ranks' shares add up (docs/data.md) */
        int64_t hash_parts[2];
        sl_hash_split(sl_reader_take_hash(t->train_reader), hash_parts);
        sl_comm_allreduce_sum_i64(t->topo.world, hash_parts, 2);
        const double gnorm = res.grad_norm, lr = res.lr;
        summarize_load(t, load_max, load_mean, counts);
        /* tokens each expert-parallel rank received per step, summed over MoE layers and
         * averaged over the expert-parallel groups */
        const int groups = t->topo.size / t->topo.ep_size, per = ne / t->topo.ep_size;
        for (int p = 0; p < t->topo.ep_size; p++) {
            rank_load[p] = 0;
            for (int l = 0; l < nl; l++)
                for (int e = p * per; e < (p + 1) * per; e++)
                    rank_load[p] += (double)counts[(int64_t)l * ne + e] / groups;
        }
        const double elapsed = now_s() - t0, dt = now_s() - ts;
        sl_step_metrics sm = {
            .step = done,
            .max_steps = tc->max_steps,
            .loss = res.loss,
            .lbl = res.lbl,
            .zloss = res.zloss,
            .lr = lr,
            .grad_norm = gnorm,
            .tokens_per_s = (double)step_tokens / dt,
            .elapsed_s = elapsed,
            .eta_s = elapsed / (done - t->start_step) * (tc->max_steps - done),
            .gate_score = res.gate_score,
            .n_layers = nl,
            .load_max = load_max,
            .load_mean = load_mean,
            .expert_counts = counts,
            .n_experts = mc->num_experts,
            .rank_load = t->topo.ep_size > 1 ? rank_load : NULL,
            .ep_size = t->topo.ep_size,
            .has_batch_hash = true,
            .batch_hash = sl_hash_join(hash_parts),
        };
        sm.lbl_normalized = mc->num_experts_per_tok > 0 ? sm.lbl / mc->num_experts_per_tok : 0;
        if (!isfinite(gnorm) || !isfinite(sm.loss)) {
            sl_error("step %d: the loss or gradient is not finite (loss %g, grad norm %g); "
                     "stopping. Try a lower training.lr.",
                     done, sm.loss, gnorm);
            rc = -1;
            break;
        }
        if (do_eval) {
            sm.eval_loss = evaluate(t);
            if (sm.eval_loss < 0) {
                rc = -1;
                break;
            }
            sm.has_eval = !isnan(sm.eval_loss);
        }
        if (t->topo.rank == 0) sl_metrics_step(&t->metrics, &sm, logged || sm.has_eval);
        if (tc->save_every > 0 && done % tc->save_every == 0 && done < tc->max_steps &&
            save_checkpoint(t, done, false) != 0) {
            rc = -1;
            break;
        }
        if (done == tc->max_steps && sm.has_eval)
            sl_info("held-out loss at end: %.4f (perplexity %.2f) after %d steps, %s", sm.eval_loss,
                    exp(sm.eval_loss), done, sl_format_duration(elapsed, (char[32]){0}, 32));
    }
    if (finish_pending(t) != 0) rc = -1; /* a save in flight is finished (or fails) cleanly */
    if (rc == 0 && t->start_step < tc->max_steps) rc = save_checkpoint(t, tc->max_steps, true);
    if (rc == 0) rc = save_final_weights(t);
    free(counts);
    free(load_max);
    free(load_mean);
    free(rank_load);
    return rc;
}

int sl_train(const sl_config *cfg, sl_comm *world, sl_backend *be, const char *resume) {
    trainer t;
    memset(&t, 0, sizeof t);
    t.cfg = cfg;
    t.topo.world = world;
    t.be = be;
    int rc = setup(&t);
    /* Every rank must agree before the first collective of the loop, or the healthy ones
     * would wait forever for the one that failed. */
    double fail = rc != 0;
    sl_comm_allreduce_max_f64(world, &fail, 1);
    rc = fail > 0 ? -1 : 0;
    if (rc == 0 && resume && *resume) {
        fail = resume_from(&t, resume) != 0;
        sl_comm_allreduce_max_f64(world, &fail, 1);
        rc = fail > 0 ? -1 : 0;
    }
    if (rc == 0) {
        print_banner(&t);
        rc = train_loop(&t);
    }
    if (t.train_reader) sl_reader_close(t.train_reader);
    if (t.model) sl_optimizer_free(&t.opt);
    sl_model_free(t.model);
    if (t.topo.ep) sl_topology_free(&t.topo);
    sl_metrics_close(&t.metrics);
    free(t.tokens);
    return rc == 0 ? 0 : 1;
}
