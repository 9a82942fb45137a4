/*
 * trainer/trainer.c - the training loop (see trainer.h); its staged schedule is in
 * trainer_stages.c (docs/stages.md).
 *
 * One optimizer step = micro_batches x ranks micro-batches of [micro_batch_size, seq_len]
 * tokens, with micro_batches = global_batch_tokens / (seq_len * micro_batch_size * ranks).
 * Every token of the global batch weighs the same: each micro-batch's cross-entropy gradient
 * is scaled by 1 / global_batch_tokens and gradients are summed over ranks, so the step
 * follows the gradient of the global mean loss whatever the number of ranks.
 *
 * A run walks its stages in order; steps are numbered over the whole schedule. Entering a
 * stage sets the model's RoPE table and activation shape, switches the data reader to the
 * stage's sequence length at the exact token where the previous stage stopped (the cursor is
 * in tokens), optionally resets the AdamW moments, and starts the stage's learning-rate
 * schedule. A training stage ends with a checkpoint, so a boundary is a resume point like
 * any other; an evaluation-only stage (tokens = 0) evaluates and changes nothing but the RoPE
 * settings the final weights are exported with.
 */
#include "trainer/trainer.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "core/fsutil.h"
#include "core/log.h"
#include "core/profile.h"
#include "core/device_peak.h"
#include "trainer/stop_signal.h"
#include "io/shard.h"
#include "io/text_codec.h"
#include "model/counts.h"
#include "trainer/eta.h"
#include "trainer/train_step.h"
#include "trainer/trainer_impl.h"

/* ---- set-up ------------------------------------------------------------------------------- */

int sl_trainer_check_data(trainer *t, const sl_stage *st, const sl_reader *r, const char *what) {
    const sl_config *c = t->cfg;
    /* the config, "(--set)" when an override named the data: worked out where a message needs
     * it (this runs at every evaluation) */
    char buf[SL_PATH_MAX + 16];
    if (sl_reader_vocab_size(r) > st->model.vocab_size) {
        sl_error_hold("%s: %s: %s: vocabulary size %d does not fit model.vocab_size = %d: "
                      "every token id must be below it",
                      sl_trainer_data_key_source(t, what, buf, sizeof buf), what,
                      sl_reader_first_shard(r), sl_reader_vocab_size(r), st->model.vocab_size);
        return -1;
    }
    const char *shard;
    const uint8_t *h = sl_reader_tokenizer(r, &shard);
    if (h && t->has_tokenizer && memcmp(h, t->tok_hash, SL_SHARD_TOKENIZER_HASH) != 0) {
        char a[33], b[33];
        sl_shard_tokenizer_hex(h, a);
        sl_shard_tokenizer_hex(t->tok_hash, b);
        sl_error_hold("%s: %s: %s: built with tokenizer sha256 %s..., but data.tokenizer = %s "
                      "is sha256 %s...",
                      sl_trainer_data_key_source(t, what, buf, sizeof buf), what, shard, a,
                      c->data.tokenizer, b);
        return -1;
    }
    /* shards built with a tokenizer and no data.tokenizer: the run trains, but its weights
     * leave without the tokenizer that reads them (once per run, by rank 0) */
    if (h && !t->has_tokenizer && !t->tok_warned && t->topo.rank == 0) {
        char a[33];
        sl_shard_tokenizer_hex(h, a);
        sl_warn("%s: %s: %s was built with a tokenizer (sha256 %s...) but data.tokenizer is "
                "not set: final/ and sluice ckpt export will carry no tokenizer.json, and sluice "
                "generate will need --tokenizer; set data.tokenizer to the tokenizer.json the "
                "shards were built with (docs/config.md)",
                sl_trainer_data_key_source(t, what, buf, sizeof buf), what, shard, a);
        t->tok_warned = true;
    }
    return 0;
}

/* data.tokenizer: loads it (every field checked), keeps its hash, and checks that its ids fit
 * model.vocab_size. 0, or -1 (printed once). */
static int check_tokenizer(trainer *t) {
    const sl_config *c = t->cfg;
    if (!c->data.tokenizer[0]) return 0;
    sl_tokenizer *tok = sl_tokenizer_load(c->data.tokenizer, t->err, sizeof t->err);
    if (!tok) {
        sl_error_once("%s: data.tokenizer: %s", c->path, t->err);
        return -1;
    }
    const uint32_t v = sl_tokenizer_vocab_size(tok);
    memcpy(t->tok_hash, sl_tokenizer_hash(tok), sizeof t->tok_hash);
    sl_tokenizer_free(tok);
    t->has_tokenizer = true;
    if (v > (uint32_t)c->model.vocab_size) {
        sl_error_once("%s: data.tokenizer: %s has %u tokens, more than model.vocab_size = %d",
                      c->path, c->data.tokenizer, v, c->model.vocab_size);
        return -1;
    }
    return 0;
}

/* What the config asks for that can be checked in a second, before the costly set-up: the
 * rank layout, the tokenizer, every stage's batch and every data path the schedule reads (rank
 * 0 alone, after the topology's collectives, so that its failing leaves no rank waiting in
 * one). A user who mistyped a path learns it before the model is allocated or a checkpoint read.
 * Then, on the CPU backend, whether the node's ranks fit its memory (every rank, for its node).
 * 0, or -1 with the error held or printed once. */
static int check_config(trainer *t, const sl_train_opts *o) {
    const sl_config *c = t->cfg;
    t->reader_stage = -1;
    if (sl_topology_init(&t->topo, t->topo.world, c->parallel.expert_parallel, c->model.num_experts,
                         t->err, sizeof t->err) != 0) {
        sl_error_hold("%s: %s", c->path, t->err);
        return -1;
    }
    if (check_tokenizer(t) != 0) return -1;
    if (sl_trainer_plan_schedule(t) != 0) return -1;
    if (sl_trainer_check_stage_data(t) != 0) return -1;
    return sl_trainer_check_host_memory(t, o->host_ranks, o->host_memory);
}

static int setup(trainer *t) {
    const sl_config *c = t->cfg;
    const sl_train_config *tc = &c->train;
    sl_moe_options mo = {
        .capacity_factor = c->parallel.capacity_factor,
        .drop_policy =
            strcmp(c->parallel.drop_policy, "position") == 0 ? SL_DROP_POSITION : SL_DROP_PROBS,
        .lbl_comm = tc->global_batch_lbl ? t->topo.world : NULL,
        .selection_bias = tc->router_bias_update_rate > 0,
        .overlap_exchange = c->parallel.overlap_moe,
    };
    /* created at the first stage's shape; sl_trainer_enter_stage re-sizes it as the schedule moves
     * on */
    const sl_train_config *first = &t->stages[0].train;
    t->model =
        sl_model_create_mem(&c->model, t->be, t->topo.ep, first->micro_batch_size, first->seq_len,
                            &mo, sl_config_compute_dtype(c),
                            sl_memory_mode_of_recompute(tc->recompute), t->err, sizeof t->err);
    if (!t->model) {
        sl_error_hold("%s: %s", c->path, t->err);
        return -1;
    }
    sl_params_randomize(&t->model->params, tc->seed);
    sl_optimizer_params op = {.dense = t->topo.world,
                              .expert = t->topo.edp,
                              .ep = t->topo.ep_size > 1 ? t->topo.ep : NULL,
                              .zero1 = c->parallel.zero1,
                              .bucket_bytes = (int64_t)c->parallel.bucket_mb << 20,
                              .layers = c->model.num_hidden_layers};
    sl_optimizer_init(&t->opt, &t->model->params, &op);
    /* rank 0 alone from here on: after every collective of the set-up, so that its failing
     * leaves no rank waiting in one */
    /* training.metrics_file is never empty: the config derives it from out_dir */
    if (t->topo.rank == 0) {
        if (sl_mkdirs(tc->out_dir, t->err, sizeof t->err) != 0 ||
            sl_metrics_open(&t->metrics, tc->metrics_file, t->err, sizeof t->err) != 0) {
            sl_error_hold("%s", t->err);
            return -1;
        }
    }
    return 0;
}

/* The peak per rank that MFU divides by: backend.peak_tflops, else the datasheet figure of this
 * rank's GPU (core/device_peak.h); unknown on the CPU and on GPUs not in the table. */
static void resolve_peak(trainer *t) {
    sl_device_info dev;
    const char *model = NULL;
    if (t->cfg->backend.peak_tflops > 0) {
        t->peak_flops = t->cfg->backend.peak_tflops * 1e12;
        snprintf(t->peak_source, sizeof t->peak_source, "backend.peak_tflops");
    } else if (sl_backend_device(t->be, &dev) &&
               (t->peak_flops = 1e12 * sl_device_datasheet_bf16_tflops(dev.name, &model)) > 0) {
        snprintf(t->peak_source, sizeof t->peak_source, "%s datasheet, dense bf16", model);
    } else {
        t->peak_flops = 0;
        snprintf(t->peak_source, sizeof t->peak_source, "unknown: set backend.peak_tflops for MFU");
    }
}

static void print_banner(const trainer *t, const char *placement) {
    const sl_config *c = t->cfg;
    const sl_stage *s0 = &t->stages[0];
    int64_t total = 0, active = 0;
    sl_model_param_count(&c->model, &total, &active);
    const double flops = sl_model_flops_per_token(&c->model, s0->train.seq_len);
    const char *gate = sl_gate_mode_name(c->model.attn_output_gate);
    sl_info("sluice: %s | backend %s x %d thread%s | %d rank%s (expert parallel %d, transport %s)",
            c->path, sl_backend_name(t->be), sl_backend_threads(t->be),
            sl_backend_threads(t->be) == 1 ? "" : "s", t->topo.size, t->topo.size == 1 ? "" : "s",
            t->topo.ep_size, sl_comm_transport(t->topo.world));
    /* the launcher's lines: how the transport was chosen, each rank's device */
    for (const char *line = placement; line && *line;) {
        const char *end = strchr(line, '\n');
        const int len = end ? (int)(end - line) : (int)strlen(line);
        sl_info("%.*s", len, line);
        line = end ? end + 1 : line + len;
    }
    sl_info("model: %d layer%s, hidden %d, %d/%d heads x %d, gate %s, %d expert%s top-%d",
            c->model.num_hidden_layers, c->model.num_hidden_layers == 1 ? "" : "s",
            c->model.hidden_size, c->model.num_attention_heads, c->model.num_key_value_heads,
            c->model.head_dim, gate, c->model.num_experts, c->model.num_experts == 1 ? "" : "s",
            c->model.num_experts_per_tok);
    sl_info("parameters: %.3fM total, %.3fM active per token | %.4g model FLOPs per token "
            "(seq %d)",
            total / 1e6, active / 1e6, flops, s0->train.seq_len);
    const int micro = sl_trainer_micro_batches(&s0->train, t->topo.size);
    const int eff = sl_train_wgrad_group_in_step(&s0->train, t->be, t->model, micro);
    if (eff > 1) {
        const bool tokens = sl_train_park_tokens(&s0->train, t->be, t->model, micro);
        char group[16] = "auto";
        if (s0->train.expert_wgrad_group)
            snprintf(group, sizeof group, "%d", s0->train.expert_wgrad_group);
        sl_info("expert weight gradients: over groups of %d micro-batches, the parked ones "
                "kept as %s (training.defer_expert_wgrad = %s, expert_wgrad_group = %s, "
                "park_expert_rows = %s)",
                eff, tokens ? "tokens" : "rows", s0->train.defer_expert_wgrad, group,
                s0->train.park_expert_rows);
    }
    if (t->prof_steps > 0)
        sl_info("profile: steps %d-%d (--profile; the table follows the window's last step)",
                t->prof_from, t->prof_from + t->prof_steps - 1);
    if (t->peak_flops > 0)
        sl_info("peak for MFU: %.1f TFLOP/s per rank (%s)", t->peak_flops / 1e12, t->peak_source);
    else
        sl_info("peak for MFU: %s", t->peak_source);
    char order[96];
    if (c->data.shuffle_window == 0)
        snprintf(order, sizeof order, "stream order (no sequence shuffle)");
    else if (c->data.shuffle_window == SL_SHUFFLE_EPOCH)
        snprintf(order, sizeof order, "sequences shuffled per epoch");
    else
        snprintf(order, sizeof order, "sequences shuffled in windows of %llu tokens",
                 (unsigned long long)c->data.shuffle_window);
    sl_info("data: %d training %s, seed %llu, %s", s0->data.n_train,
            s0->data.n_train == 1 ? "corpus" : "corpora", (unsigned long long)c->data.seed, order);
    if (!c->stages_given) {
        sl_info("batch: %lld tokens per step = %d micro-batch%s x %d rank%s x %d x %d tokens",
                (long long)s0->train.global_batch_tokens, micro, micro == 1 ? "" : "es",
                t->topo.size, t->topo.size == 1 ? "" : "s", s0->train.micro_batch_size,
                s0->train.seq_len);
        return;
    }
    sl_info("schedule: %d stage%s, %d step%s, %lld training tokens", t->n_stages,
            t->n_stages == 1 ? "" : "s", t->first_step[t->n_stages],
            t->first_step[t->n_stages] == 1 ? "" : "s", (long long)t->first_tokens[t->n_stages]);
    for (int i = 0; i < t->n_stages; i++) {
        const sl_stage *st = &t->stages[i];
        char rope[160];
        sl_trainer_describe_rope(&st->model, rope, sizeof rope);
        if (st->steps == 0) {
            sl_info("  %d. %-12s evaluation only at %d tokens per sequence, %s", i + 1, st->name,
                    st->train.seq_len, rope);
            continue;
        }
        sl_info("  %d. %-12s steps %d-%d: %lld tokens, %lld per step at %d per sequence, %s, "
                "lr %.3g %s%s",
                i + 1, st->name, t->first_step[i] + 1, t->first_step[i + 1],
                (long long)((int64_t)st->steps * st->train.global_batch_tokens),
                (long long)st->train.global_batch_tokens, st->train.seq_len, rope, st->train.lr,
                sl_lr_schedule_name(st->train.schedule),
                st->reset_optimizer ? ", AdamW moments reset" : "");
    }
}

/* ---- the loop ----------------------------------------------------------------------------- */

/* Profiling regions of the loop's own work (core/profile.h; `sluice train --profile`). */
#define R_COMMIT      "checkpoint commit (the previous save's background write)"
#define R_BOOKKEEPING "step bookkeeping (batch hash all-reduce, load statistics)"

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
    return sl_trainer_next_batch(t, t->train_reader, tokens, err, errlen) == 1 ? 0 : -1;
}

/* Per-step buffers of the loop's statistics. */
typedef struct {
    int64_t *counts;
    double *load_max, *load_mean, *rank_load;
    sl_eta eta; /* eta.t0: when this process began its schedule, before the first stage's entry
                 * and held-out evaluation: elapsed_s counts from here too */
} loop_stats;

/* Model FLOPs of the steps after global step `done`, over the rest of the schedule. */
static double flops_left(const trainer *t, int done) {
    double left = 0;
    for (int i = t->cur; i < t->n_stages; i++) {
        const int from = done > t->first_step[i] ? done : t->first_step[i];
        if (t->first_step[i + 1] > from)
            left += (t->first_step[i + 1] - from) * sl_trainer_step_flops(t, i);
    }
    return left;
}

/* run_stage_steps' status when a stop signal ended the stage early (after a checkpoint) */
enum { STAGE_STOPPED = 1 };

/* The steps of the current stage from global step `from` to its end: 0 at its end, -1 after an
 * error, STAGE_STOPPED when a stop signal (stop_signal.h) reached a rank: after the step in which
 * the ranks learned of it, a checkpoint of that step is committed and the stage ends. */
static int run_stage_steps(trainer *t, int from, loop_stats *ls) {
    const sl_config *c = t->cfg;
    const sl_stage *st = sl_trainer_stage(t);
    const sl_train_config *tc = &st->train;
    const sl_model_config *mc = &c->model;
    const int nl = mc->num_hidden_layers, ne = mc->num_experts > 0 ? mc->num_experts : 1;
    const int first = t->first_step[t->cur], end = t->first_step[t->cur + 1];
    const int total = t->first_step[t->n_stages];
    const sl_stepper stepper = {.model = t->model,
                                .opt = &t->opt,
                                .world = t->topo.world,
                                .micro_batches = t->micro_batches,
                                .tokens = t->tokens,
                                .wgrad_group =
                                    sl_train_prepare_wgrad(tc, t->be, t->model, t->micro_batches)};
    for (int step = from; step < end; step++) {
        const double ts = sl_trainer_now();
        sl_trainer_profile_begin(t, step + 1);
        maybe_inject_fault(t, step + 1);
        const int done = step + 1, in_stage = done - first;
        const bool do_eval = done == end || (tc->eval_every > 0 && in_stage % tc->eval_every == 0);
        /* Logged steps also compute the metrics-only statistics (gate score, router
         * statistics); other steps read just the loss from the device. */
        const bool logged =
            in_stage % (tc->log_every > 0 ? tc->log_every : 1) == 0 || do_eval || done == end;
        sl_step_result res = {.counts = mc->num_experts > 0 ? ls->counts : NULL, .metrics = logged};
        /* the schedule's step within the stage: each stage has its own warmup and decay */
        if (sl_train_step(&stepper, tc, step - first, train_batch, t, &res, t->err,
                          sizeof t->err) != 0) {
            char key[160], src[SL_PATH_MAX + 16];
            sl_config_stage_data_key(c, t->reader_stage, false, key, sizeof key);
            sl_error("%s: %s: %s", sl_trainer_data_key_source(t, key, src, sizeof src), key,
                     t->err);
            sl_comm_abort(1);
        }
        /* the background write of the previous checkpoint overlapped this step: commit it */
        int committed = 0;
        SL_PROFILE_REGION (t->be, R_COMMIT) committed = sl_trainer_finish_pending(t);
        if (committed != 0) return -1;
        int64_t hash_parts[3];
        SL_PROFILE_REGION (t->be, R_BOOKKEEPING) {
            /* the hash of the step's global batch: the ranks' shares add up (docs/data.md); the
             * same sum tells every rank whether any received a stop signal */
            sl_hash_split(sl_reader_take_hash(t->train_reader), hash_parts);
            hash_parts[2] = sl_stop_signal_received() != 0;
            sl_comm_allreduce_sum_i64(t->topo.world, hash_parts, 3);
            summarize_load(t, ls->load_max, ls->load_mean, ls->counts);
            /* tokens each expert-parallel rank received per step, summed over MoE layers and
             * averaged over the expert-parallel groups */
            const int groups = t->topo.size / t->topo.ep_size, per = ne / t->topo.ep_size;
            for (int p = 0; p < t->topo.ep_size; p++) {
                ls->rank_load[p] = 0;
                for (int l = 0; l < nl; l++)
                    for (int e = p * per; e < (p + 1) * per; e++)
                        ls->rank_load[p] += (double)ls->counts[(int64_t)l * ne + e] / groups;
            }
        }
        sl_trainer_profile_end(t, step + 1);
        /* one reading for both: the step's own time lies within elapsed_s exactly */
        const double now = sl_trainer_now(), elapsed = now - ls->eta.t0, dt = now - ts;
        sl_step_metrics sm = {
            .step = done,
            .max_steps = total,
            .stage = c->stages_given ? st->name : NULL,
            .tokens = sl_trainer_tokens_after(t, done),
            .loss = res.loss,
            .lbl = res.lbl,
            .zloss = res.zloss,
            .lr = res.lr,
            .grad_norm = res.grad_norm,
            .tokens_per_s = (double)tc->global_batch_tokens / dt,
            .model_tflops = sl_trainer_step_flops(t, t->cur) / dt / t->topo.size / 1e12,
            .mfu = t->peak_flops > 0
                       ? sl_trainer_step_flops(t, t->cur) / dt / t->topo.size / t->peak_flops
                       : NAN,
            .elapsed_s = elapsed,
            /* over the whole schedule, by model FLOPs (later stages' longer sequences cost
             * more per token), at the last SL_ETA_WINDOW steps' rate */
            .eta_s =
                sl_eta_step(&ls->eta, now, sl_trainer_step_flops(t, t->cur)) * flops_left(t, done),
            .gate_score = res.gate_score,
            .n_layers = nl,
            .load_max = ls->load_max,
            .load_mean = ls->load_mean,
            .expert_counts = ls->counts,
            .n_experts = mc->num_experts,
            .rank_load = t->topo.ep_size > 1 ? ls->rank_load : NULL,
            .ep_size = t->topo.ep_size,
            .has_batch_hash = true,
            .batch_hash = sl_hash_join(hash_parts),
        };
        sm.lbl_normalized = mc->num_experts_per_tok > 0 ? sm.lbl / mc->num_experts_per_tok : 0;
        long long mem_now, mem_peak;
        sl_backend_tensor_bytes(t->be, &mem_now, &mem_peak);
        sm.mem_gib = (double)mem_now / (1ULL << 30);
        sm.mem_peak_gib = (double)mem_peak / (1ULL << 30);
        /* the loss and the norm are the global batch's, the same on every rank: one message */
        if (!isfinite(res.grad_norm) || !isfinite(sm.loss)) {
            sl_error_once("step %d: the loss or gradient is not finite (loss %g, grad norm %g); "
                          "stopping. Try a lower training.lr.",
                          done, sm.loss, res.grad_norm);
            return -1;
        }
        if (do_eval) {
            sm.eval_loss = sl_trainer_evaluate(t);
            if (sm.eval_loss < 0) return -1;
            sm.has_eval = !isnan(sm.eval_loss);
        }
        if (t->topo.rank == 0) sl_metrics_step(&t->metrics, &sm, logged || sm.has_eval);
        sl_trainer_profile_after(t, done);
        if (tc->sample_every > 0 && done % tc->sample_every == 0 && sl_trainer_sample(t, done) != 0)
            return -1;
        /* the end of a stage is a checkpoint; the run's last step saves synchronously */
        const bool save = done == end || (tc->save_every > 0 && in_stage % tc->save_every == 0);
        /* a stop signal on any rank: this step's checkpoint, committed now (the run's last step
         * just finishes the run) */
        const bool stop = hash_parts[2] > 0 && done < total;
        if ((save || stop) && sl_trainer_save(t, done, done == total || stop) != 0) return -1;
        if (stop) {
            /* the signal to name: what the ranks that received one got (the largest number) */
            double got = sl_stop_signal_received();
            sl_comm_allreduce_max_f64(t->topo.world, &got, 1);
            const char *sig = sl_stop_signal_name((int)got);
            sl_info("stopping after step %d of %d (%s on %lld rank%s): checkpoint %s/checkpoints/"
                    "step-%d committed; continue with --resume auto",
                    done, total, sig, (long long)hash_parts[2], hash_parts[2] == 1 ? "" : "s",
                    c->train.out_dir, done);
            if (t->topo.rank == 0) {
                char fields[96];
                snprintf(fields, sizeof fields, "\"step\": %d, \"signal\": \"%s\"", done, sig);
                sl_metrics_event(&t->metrics, "stop", fields);
            }
            return STAGE_STOPPED;
        }
        if (done == end && sm.has_eval)
            sl_info("held-out loss at %s%s%s: %.4f (perplexity %.2f) after %d step%s, %s",
                    done == total ? "end" : "the end of stage \"", done == total ? "" : st->name,
                    done == total ? "" : "\"", sm.eval_loss, exp(sm.eval_loss), done,
                    done == 1 ? "" : "s", sl_format_duration(elapsed, (char[32]){0}, 32));
    }
    return 0;
}

static int run_schedule(trainer *t) {
    const sl_model_config *mc = &t->cfg->model;
    const int nl = mc->num_hidden_layers, ne = mc->num_experts > 0 ? mc->num_experts : 1;
    loop_stats ls = {.counts = sl_xcalloc((size_t)nl * ne, sizeof(int64_t)),
                     .load_max = sl_xcalloc((size_t)nl, sizeof(double)),
                     .load_mean = sl_xcalloc((size_t)nl, sizeof(double)),
                     .rank_load = sl_xcalloc((size_t)t->topo.ep_size, sizeof(double))};
    sl_eta_start(&ls.eta, sl_trainer_now());
    int rc = 0;
    int step = t->start_step;
    for (int i = sl_trainer_stage_at(t, step); rc == 0 && i < t->n_stages; i++) {
        if (sl_trainer_enter_stage(t, i, step) != 0) {
            rc = -1;
            break;
        }
        const sl_stage *st = &t->stages[i];
        const bool starting = step == t->first_step[i];
        const char *when = st->steps == 0 ? "of the evaluation-only stage"
                           : step == 0    ? "at start"
                           : starting     ? "at the stage's start"
                                          : "on resuming";
        const double ev = sl_trainer_evaluate_event(t, step, when);
        if (ev < 0) {
            rc = -1;
            break;
        }
        if (st->steps == 0) continue;
        rc = run_stage_steps(t, step, &ls);
        step = t->first_step[i + 1];
    }
    /* a save in flight is finished (or fails) cleanly */
    if (sl_trainer_finish_pending(t) != 0) rc = -1;
    if (rc == 0) sl_trainer_profile_finish(t);
    if (rc == 0) rc = sl_trainer_save_final(t);
    if (rc == STAGE_STOPPED) rc = SL_TRAIN_STOPPED; /* no final/: the run is not done */
    free(ls.counts);
    free(ls.load_max);
    free(ls.load_mean);
    free(ls.rank_load);
    return rc;
}

/* A fresh start's "start" event: the metrics file is appended to, so a run started over in an
 * out_dir without a checkpoint (its predecessor died before saving one) follows that run's
 * records; readers (sluice plot) take the records after the last "start" (docs/metrics.md). */
static void record_start(trainer *t) {
    if (t->resumed || t->topo.rank != 0) return;
    cJSON *path = cJSON_CreateString(t->cfg->path);
    char *quoted = path ? cJSON_PrintUnformatted(path) : NULL;
    char when[32] = "", fields[SL_PATH_MAX + 160];
    const time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    snprintf(fields, sizeof fields, "\"step\": %d, \"config\": %s, \"ranks\": %d, \"time\": \"%s\"",
             t->start_step, quoted ? quoted : "null", t->topo.size, when);
    sl_metrics_event(&t->metrics, "start", fields);
    cJSON_free(quoted);
    cJSON_Delete(path);
}

/* A fresh start (no --resume) into an out_dir that holds a committed checkpoint would replace
 * that run's checkpoints one by one (a step-N of the same number is swapped out on save) and
 * its final/ weights: refused, naming the ways on. Rank 0 looks (one warning, if any, about a
 * damaged `latest`); -1 with the error held (sl_comm_agree prints it). */
static int refuse_existing_run(const trainer *t, const sl_train_opts *o) {
    if ((o->resume && *o->resume) || t->topo.rank != 0) return 0;
    const char *out = t->cfg->train.out_dir;
    char dir[SL_PATH_MAX + 64], err[512];
    const int found = sl_ckpt_find_latest(out, dir, sizeof dir, err, sizeof err);
    if (found == 0) return 0;
    if (found < 0) {
        sl_error_hold_shared("training.out_dir = %s: %s", out, err);
        return -1;
    }
    sl_error_hold_shared("training.out_dir = %s already holds a run (its newest checkpoint: %s); "
                         "continue it with --resume auto, or start this one in another out_dir "
                         "(--set training.out_dir=...) or after removing that directory",
                         out, dir);
    return -1;
}

int sl_train(const sl_config *cfg, sl_comm *world, sl_backend *be, const sl_train_opts *o) {
    const sl_train_opts none = {0};
    if (!o) o = &none;
    trainer t;
    memset(&t, 0, sizeof t);
    t.cfg = cfg;
    t.sets = o->sets;
    t.n_sets = o->n_sets;
    t.topo.world = world;
    t.be = be;
    /* Every rank must agree before the first collective of the loop, or the healthy ones
     * would wait forever for the one that failed; an error every rank finds is printed once. */
    t.topo.rank = sl_comm_rank(world);
    int rc = sl_comm_agree(world, refuse_existing_run(&t, o) != 0) ? -1 : 0;
    if (rc == 0) rc = sl_comm_agree(world, check_config(&t, o) != 0) ? -1 : 0;
    if (rc == 0) rc = sl_comm_agree(world, setup(&t) != 0) ? -1 : 0;
    if (rc == 0 && o->resume && *o->resume)
        rc = sl_comm_agree(world, sl_trainer_resume(&t, o->resume) != 0) ? -1 : 0;
    if (rc == 0 && t.resumed) sl_trainer_resumed(&t);
    /* the eval sets against the stages still to run: one that would evaluate nothing is found
     * before the first step, not after the training stages */
    if (rc == 0) rc = sl_comm_agree(world, sl_trainer_check_eval_sets(&t) != 0) ? -1 : 0;
    /* every rank has the same schedule and start: all decide alike, the error printed once */
    if (rc == 0) rc = sl_trainer_profile_set(&t, o->profile_steps, o->profile_from);
    if (rc == 0) {
        resolve_peak(&t);
        print_banner(&t, o->placement);
        record_start(&t);
        sl_stop_signal_install();
        rc = run_schedule(&t);
        sl_stop_signal_restore();
    }
    if (t.train_reader) sl_reader_close(t.train_reader);
    sl_text_codec_free(t.sample_codec);
    if (t.model) sl_optimizer_free(&t.opt);
    sl_model_free(t.model);
    if (t.topo.ep) sl_topology_free(&t.topo);
    sl_metrics_close(&t.metrics);
    free(t.tokens);
    free(t.doc_starts);
    free(t.n_docs);
    free(t.resume_cursor);
    free(t.stages);
    free(t.first_step);
    free(t.first_tokens);
    free(t.keep_steps);
    return rc == 0 || rc == SL_TRAIN_STOPPED ? rc : 1;
}
