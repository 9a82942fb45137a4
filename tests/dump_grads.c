/*
 * tests/dump_grads.c - writes what the PyTorch cross-check compares against:
 *
 *   dump_grads RUN_CONFIG_JSON OUT_DIR
 *
 * RUN_CONFIG_JSON is a sluice run configuration (sections model, training, parallel), read
 * with the trainer's loader (sl_config_load). The model section then makes the round trip
 * through the Hugging Face config.json writer and reader (sl_model_config_to_hf_json /
 * sl_model_config_from_hf_json) and the model is built from what comes back, so a key lost
 * by either parser or by the writer changes the model that runs here, while the reference
 * (tests/torch_reference.py) reads the same input file independently.
 *
 * Like one optimizer step of the trainer (trainer/train_step.c) on one rank: the batch is
 * training.micro_batch_size sequences of training.seq_len tokens, and
 * global_batch_tokens / (micro_batch_size * seq_len) micro-batches accumulate gradients with
 * cross-entropy scale 1 / global_batch_tokens and auxiliary scale 1 / micro-batches.
 * parallel.capacity_factor / drop_policy and training.global_batch_lbl configure the MoE
 * layers as in the trainer. With training.router_bias_update_rate > 0 the selection bias is
 * first moved by BIAS_ROUNDS updates from pseudo-random expert counts (as if after that many
 * steps), so that it is non-zero and changes the routing.
 *
 * Writes OUT_DIR/model.safetensors + config.json (initialized from training.seed),
 * OUT_DIR/grads.safetensors and OUT_DIR/run.json: the tokens, per micro-batch the loss terms
 * and the per-layer expert counts (routed, and kept after capacity drops), the bias update
 * counts and the resulting bias, and the objective.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backends.h"
#include "core/comm.h"
#include "core/rng.h"
#include "model/hf_export.h"
#include "model/model.h"
#include "trainer/config.h"

enum { BIAS_ROUNDS = 4 };

static void print_i64_list(FILE *f, const int64_t *v, int n) {
    fprintf(f, "[");
    for (int i = 0; i < n; i++) fprintf(f, "%s%lld", i ? ", " : "", (long long)v[i]);
    fprintf(f, "]");
}

/* Per layer: the list, or null for a dense layer. */
static void print_layers(FILE *f, sl_model *m, const int64_t *(*get)(sl_model *, int)) {
    fprintf(f, "[");
    for (int l = 0; l < m->cfg.num_hidden_layers; l++) {
        fprintf(f, "%s", l ? ", " : "");
        const int64_t *c = get(m, l);
        if (c)
            print_i64_list(f, c, m->cfg.num_experts);
        else
            fprintf(f, "null");
    }
    fprintf(f, "]");
}

static const int64_t *routed(sl_model *m, int l) {
    return sl_model_expert_counts(m, l);
}

/* The slots kept after capacity drops: the dispatcher's, which reads the counts where it drops;
 * a dispatch that read nothing dropped nothing (kept = routed). */
static const int64_t *kept(sl_model *m, int l) {
    if (!m->ffn[l].is_moe) return NULL;
    const sl_token_dispatcher *d = &m->ffn[l].moe.dispatcher;
    return d->counts_read ? d->kept_host : sl_model_expert_counts(m, l);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: dump_grads RUN_CONFIG_JSON OUT_DIR\n");
        return 2;
    }
    char err[2048];
    sl_config *cfg = calloc(1, sizeof *cfg);
    if (sl_config_load(argv[1], cfg, err, sizeof err) != 0) {
        fprintf(stderr, "dump_grads: %s\n", err);
        return 1;
    }
    /* The Hugging Face round trip (see the top of the file). */
    char *hf = sl_model_config_to_hf_json(&cfg->model);
    sl_model_config mc;
    if (sl_model_config_from_hf_json(hf, "config.json (round trip)", &mc, err, sizeof err) != 0) {
        fprintf(stderr, "dump_grads: %s\n", err);
        return 1;
    }
    free(hf);
    const sl_train_config *tc = &cfg->train;
    const int batch = tc->micro_batch_size, seq = tc->seq_len;
    const int64_t per_micro = (int64_t)batch * seq;
    const int micro = (int)(tc->global_batch_tokens / per_micro);
    /* Global-batch LBL reduces expert counts over a communicator: one rank here. */
    sl_comm *world = tc->global_batch_lbl ? sl_comm_init_world(&argc, &argv) : NULL;
    sl_moe_options mo = {
        .capacity_factor = cfg->parallel.capacity_factor,
        .drop_policy =
            strcmp(cfg->parallel.drop_policy, "position") == 0 ? SL_DROP_POSITION : SL_DROP_PROBS,
        .lbl_comm = world,
        .selection_bias = tc->router_bias_update_rate > 0,
    };
    sl_backend_params bp = {.threads = 2, .device = -1};
    sl_backend *be = sl_backend_create("cpu", &bp, err, sizeof err);
    sl_model *m = be ? sl_model_create(&mc, be, NULL, batch, seq, &mo, err, sizeof err) : NULL;
    if (!m) {
        fprintf(stderr, "dump_grads: %s\n", err);
        return 1;
    }
    sl_params_randomize(&m->params, tc->seed);
    const int nl = mc.num_hidden_layers, ne = mc.num_experts;
    sl_rng r;
    sl_rng_init(&r, tc->seed, 99);
    /* Selection bias: BIAS_ROUNDS updates from counts spread over [0, 2 * uniform load]. */
    const int rounds = mo.selection_bias && ne > 0 ? BIAS_ROUNDS : 0;
    int64_t *bias_counts = calloc((size_t)(rounds ? rounds : 1) * nl * (ne ? ne : 1), 8);
    for (int i = 0; i < rounds; i++) {
        int64_t *c = bias_counts + (int64_t)i * nl * ne;
        const uint64_t span = 2 * (uint64_t)(per_micro * micro * mc.num_experts_per_tok / ne) + 1;
        for (int j = 0; j < nl * ne; j++) c[j] = (int64_t)sl_rng_below(&r, span);
        sl_model_update_router_bias(m, c, tc->router_bias_update_rate);
    }
    const int64_t ntok = (int64_t)micro * batch * (seq + 1);
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)ntok);
    for (int64_t i = 0; i < ntok; i++)
        tokens[i] = (int32_t)sl_rng_below(&r, (uint64_t)mc.vocab_size);
    if (sl_hf_save(m, argv[2], NULL, err, sizeof err) != 0) {
        fprintf(stderr, "dump_grads: %s\n", err);
        return 1;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/run.json", argv[2]);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "dump_grads: cannot write %s\n", path);
        return 1;
    }
    fprintf(f, "{\"batch\": %d, \"seq\": %d, \"micro_batches\": %d,\n \"micro\": [", batch, seq,
            micro);
    /* One optimizer step's gradient, as in trainer/train_step.c. */
    const float ce_scale = (float)(1.0 / (double)tc->global_batch_tokens);
    const double aux_scale = 1.0 / micro;
    double objective = 0.0;
    sl_params_zero_grad(&m->params);
    sl_model_begin_step(m, true);
    for (int mb = 0; mb < micro; mb++) {
        sl_fwd_stats st;
        sl_model_forward_backward(m, tokens + (int64_t)mb * batch * (seq + 1), ce_scale, aux_scale,
                                  &st);
        objective += st.loss_sum * ce_scale;
        if (m->n_moe_layers > 0)
            objective += aux_scale * (mc.router_aux_loss_coef * st.lbl / mc.num_experts_per_tok +
                                      mc.router_z_loss_coef * st.zloss);
        fprintf(f,
                "%s\n  {\"ce\": %.9g, \"lbl\": %.9g, \"zloss\": %.9g, \"gate_score\": %.9g,\n"
                "   \"counts\": ",
                mb ? "," : "", st.loss_sum / (double)st.tokens, st.lbl, st.zloss, st.gate_score);
        print_layers(f, m, routed);
        fprintf(f, ",\n   \"kept\": ");
        print_layers(f, m, kept);
        fprintf(f, "}");
    }
    fprintf(f, "],\n \"objective\": %.9g,\n \"bias_rounds\": [", objective);
    for (int i = 0; i < rounds; i++) {
        fprintf(f, "%s", i ? ", " : "");
        print_i64_list(f, bias_counts + (int64_t)i * nl * ne, nl * ne);
    }
    fprintf(f, "],\n \"router_bias\": [");
    for (int l = 0; l < nl; l++) {
        const float *b = m->ffn[l].is_moe ? m->ffn[l].moe.router.bias_host : NULL;
        fprintf(f, "%s", l ? ", " : "");
        if (!b) {
            fprintf(f, "null");
            continue;
        }
        fprintf(f, "[");
        for (int e = 0; e < ne; e++) fprintf(f, "%s%.9g", e ? ", " : "", b[e]);
        fprintf(f, "]");
    }
    fprintf(f, "],\n \"tokens\": [");
    for (int64_t i = 0; i < ntok; i++) fprintf(f, "%s%d", i ? ", " : "", tokens[i]);
    fprintf(f, "]}\n");
    if (fclose(f) != 0) {
        fprintf(stderr, "dump_grads: cannot write %s\n", path);
        return 1;
    }
    snprintf(path, sizeof path, "%s/grads.safetensors", argv[2]);
    if (sl_hf_save_grads(m, path, err, sizeof err) != 0) {
        fprintf(stderr, "dump_grads: %s\n", err);
        return 1;
    }
    free(tokens), free(bias_counts);
    sl_model_free(m);
    sl_backend_free(be);
    free(cfg);
    if (world) sl_comm_finalize(world);
    return 0;
}
