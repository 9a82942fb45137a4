/*
 * tests/test_model_grad.c - finite-difference check of the whole model's backward.
 *
 * For each variant (gate elementwise / headwise / none; with and without a shared expert;
 * a dense layer mixed in; tied and untied embeddings) the analytic gradient of the training
 * objective
 *     L = ce_scale * sum(token CE) + aux_coef * mean_layers(LBL) / k + z_coef * mean_layers(z)
 * is compared with central differences on a sample of coordinates of EVERY parameter.
 * The model runs in fp32, so the loss is evaluated in double from fp32 activations; the
 * parameters are initialized with std 0.3 (not 0.02) so that gradients stand well above the
 * fp32 rounding noise of the differences.
 */
#include <stdlib.h>
#include <string.h>

#include "model/counts.h"
#include "core/params.h"
#include "tests/test_util.h"
#include "model/model.h"

typedef struct {
    sl_model *m;
    float *host[SL_PGROUP_COUNT];
    const int32_t *tokens;
    float ce_scale;
} fd_ctx;

static double objective(const sl_model *m, const sl_fwd_stats *st, float ce_scale) {
    const sl_model_config *c = &m->cfg;
    double l = st->loss_sum * ce_scale;
    if (m->n_moe_layers > 0)
        l += c->router_aux_loss_coef * st->lbl / c->num_experts_per_tok +
             c->router_z_loss_coef * st->zloss;
    return l;
}

static double loss_fn(void *u) {
    fd_ctx *c = u;
    for (int g = 0; g < SL_PGROUP_COUNT; g++)
        if (c->m->params.size[g]) sl_tensor_from_host(c->m->params.w[g], c->host[g]);
    sl_fwd_stats st;
    sl_model_forward(c->m, c->tokens, &st);
    return objective(c->m, &st, c->ce_scale);
}

/* Smaller than the shared test model, with a larger init and aux coefficients, so that
 * every term stands well above the fp32 noise of the differences. */
static sl_model_config base_config(void) {
    sl_model_config c = sl_test_model_config();
    c.vocab_size = 13;
    c.hidden_size = 16;
    c.num_experts = 6;
    c.moe_intermediate_size = 8;
    c.intermediate_size = 12;
    c.router_aux_loss_coef = 0.05;
    c.router_z_loss_coef = 0.01;
    c.initializer_range = 0.3;
    return c;
}

static void check_variant(const char *label, const sl_model_config *cfg) {
    char err[256];
    const int batch = 2, seq = 5;
    sl_model *m = sl_model_create(cfg, sl_test_cpu(), NULL, batch, seq, NULL, err, sizeof err);
    CHECK(m != NULL, "%s: model create: %s", label, err);
    if (!m) return;
    sl_params_randomize(&m->params, 1234);
    /* The banner's parameter count (model/counts.c, counted from the config) is the
     * number of parameters the model actually allocates. */
    int64_t total = 0, active = 0;
    sl_model_param_count(cfg, &total, &active);
    CHECK(total == sl_params_numel(&m->params),
          "%s: model/counts.c counts %lld parameters, the "
          "model holds %lld",
          label, (long long)total, (long long)sl_params_numel(&m->params));
    int32_t tokens[2 * 6];
    for (int i = 0; i < 12; i++) tokens[i] = (i * 7 + 3) % cfg->vocab_size;
    fd_ctx c = {.m = m, .tokens = tokens, .ce_scale = 1.0f / (batch * seq)};
    for (int g = 0; g < SL_PGROUP_COUNT; g++) {
        c.host[g] = malloc((size_t)(m->params.size[g] + 1) * sizeof(float));
        if (m->params.size[g]) sl_tensor_to_host(m->params.w[g], c.host[g]);
    }
    sl_params_zero_grad(&m->params);
    sl_fwd_stats st;
    sl_model_forward_backward(m, tokens, c.ce_scale, 1.0, &st);
    float *grad[SL_PGROUP_COUNT];
    for (int g = 0; g < SL_PGROUP_COUNT; g++) {
        grad[g] = malloc((size_t)(m->params.size[g] + 1) * sizeof(float));
        if (m->params.size[g]) sl_tensor_to_host(m->params.g[g], grad[g]);
    }
    /* The forward inside forward_backward and a plain forward agree exactly. */
    const double l0 = objective(m, &st, c.ce_scale), l1 = loss_fn(&c);
    CHECK(fabs(l0 - l1) < 1e-6, "%s: forward_backward loss %.9g vs forward %.9g", label, l0, l1);
    int bad = 0, checked = 0;
    for (int i = 0; i < m->params.count; i++) {
        sl_param *p = m->params.items[i];
        if (p == m->lm_head && cfg->tie_word_embeddings) continue;
        int nb = sl_test_fd_check(p->name, c.host[p->group] + p->offset, grad[p->group] + p->offset,
                                  p->numel, loss_fn, &c, 1e-2, 1e-3, 3e-2, 5);
        bad += nb;
        checked += p->numel < 5 ? (int)p->numel : 5;
    }
    /* A routing decision can flip inside +-h and make one difference meaningless; allow at
     * most 1% of the sampled coordinates to disagree, none in the attention path. */
    CHECK(bad <= checked / 100, "%s: %d of %d sampled coordinates disagree", label, bad, checked);
    printf("  %s: %d coordinates checked, %d outside tolerance, loss %.5f\n", label, checked, bad,
           l0);
    for (int g = 0; g < SL_PGROUP_COUNT; g++) free(c.host[g]), free(grad[g]);
    sl_model_free(m);
}

int main(void) {
    sl_model_config c = base_config();
    check_variant("elementwise gate, MoE", &c);
    c.attn_output_gate = SL_GATE_HEADWISE;
    check_variant("headwise gate, MoE", &c);
    c.attn_output_gate = SL_GATE_NONE;
    check_variant("no gate, MoE", &c);
    c = base_config();
    c.shared_expert_intermediate_size = 10;
    c.num_hidden_layers = 3;
    c.dense_layer[1] = true;
    check_variant("elementwise gate, shared expert, dense layer 1", &c);
    c = base_config();
    c.num_experts = 0;
    c.tie_word_embeddings = true;
    c.partial_rotary_factor = 0.5;
    check_variant("dense model, tied embeddings, partial RoPE", &c);
    return sl_test_finish("test_model_grad");
}
