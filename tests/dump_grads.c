/*
 * tests/dump_grads.c - writes what the PyTorch cross-check compares against:
 *
 *   dump_grads CONFIG_JSON OUT_DIR [--batch B] [--seq S] [--seed N]
 *
 * CONFIG_JSON is a Hugging Face style model config (as sluice writes it). The program builds
 * the model, initializes it from the seed, saves OUT_DIR/model.safetensors + config.json,
 * runs one forward and backward on deterministic tokens, and writes OUT_DIR/grads.safetensors
 * and OUT_DIR/run.json (tokens, the loss terms and the objective).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backends.h"
#include "trainer/config.h"
#include "core/fsutil.h"
#include "core/rng.h"
#include "model/hf_export.h"
#include "model/model.h"

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: dump_grads CONFIG_JSON OUT_DIR [--batch B] [--seq S] [--seed N]\n");
        return 2;
    }
    int batch = 2, seq = 16;
    unsigned long long seed = 7;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--batch") == 0)
            batch = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--seq") == 0)
            seq = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--seed") == 0)
            seed = strtoull(argv[i + 1], NULL, 10);
    }
    char err[2048];
    size_t len = 0;
    char *json = sl_read_file(argv[1], &len, err, sizeof err);
    sl_model_config mc;
    if (!json || sl_model_config_from_hf_json(json, argv[1], &mc, err, sizeof err) != 0) {
        fprintf(stderr, "dump_grads: %s\n", err);
        return 1;
    }
    sl_backend_params bp = {.threads = 2, .device = -1};
    sl_backend *be = sl_backend_create("cpu", &bp, err, sizeof err);
    sl_model *m = sl_model_create(&mc, be, NULL, batch, seq, NULL, err, sizeof err);
    if (!m) {
        fprintf(stderr, "dump_grads: %s\n", err);
        return 1;
    }
    sl_params_randomize(&m->params, seed);
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)batch * (seq + 1));
    sl_rng r;
    sl_rng_init(&r, seed, 99);
    for (int i = 0; i < batch * (seq + 1); i++)
        tokens[i] = (int32_t)sl_rng_below(&r, (uint64_t)mc.vocab_size);
    if (sl_hf_save(m, argv[2], NULL, err, sizeof err) != 0) {
        fprintf(stderr, "dump_grads: %s\n", err);
        return 1;
    }
    sl_params_zero_grad(&m->params);
    sl_fwd_stats st;
    const float ce_scale = 1.0f / (float)(batch * seq);
    sl_model_forward_backward(m, tokens, ce_scale, 1.0, &st);
    char path[4096];
    snprintf(path, sizeof path, "%s/grads.safetensors", argv[2]);
    if (sl_hf_save_grads(m, path, err, sizeof err) != 0) {
        fprintf(stderr, "dump_grads: %s\n", err);
        return 1;
    }
    const double ce = st.loss_sum / (double)st.tokens;
    double objective = ce;
    if (m->n_moe_layers > 0)
        objective += mc.router_aux_loss_coef * st.lbl / mc.num_experts_per_tok +
                     mc.router_z_loss_coef * st.zloss;
    snprintf(path, sizeof path, "%s/run.json", argv[2]);
    FILE *f = fopen(path, "w");
    fprintf(f,
            "{\"batch\": %d, \"seq\": %d, \"ce\": %.9g, \"lbl\": %.9g, \"zloss\": %.9g, "
            "\"objective\": %.9g, \"gate_score\": %.9g, \"tokens\": [",
            batch, seq, ce, st.lbl, st.zloss, objective, st.gate_score);
    for (int i = 0; i < batch * (seq + 1); i++) fprintf(f, "%s%d", i ? ", " : "", tokens[i]);
    fprintf(f, "]}\n");
    fclose(f);
    free(tokens);
    free(json);
    sl_model_free(m);
    sl_backend_free(be);
    return 0;
}
