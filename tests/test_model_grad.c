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
 *
 * Every sampled coordinate must agree (atol 1e-3, rtol 3e-2). The objective is only piecewise
 * smooth: where a step of +-h moves a token's top-k expert set, the difference straddles a
 * kink and says nothing about the gradient. Such coordinates are detected (the routing of
 * both evaluations is compared with the unperturbed one) and left out, and reported; they
 * must stay a small minority, or the variant would test little.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/params.h"
#include "model/counts.h"
#include "model/model.h"
#include "tests/test_util.h"

typedef struct {
    sl_model *m;
    float *host[SL_PGROUP_COUNT];
    const int32_t *tokens;
    float ce_scale;
    uint64_t routing; /* routing_signature() of the last evaluation */
} fd_ctx;

/* A hash of every MoE layer's top-k expert sets (order inside a token ignored) of the last
 * forward: equal before and after a step of +-h means no routing decision moved. */
static uint64_t routing_signature(const sl_model *m) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (int l = 0; l < m->cfg.num_hidden_layers; l++) {
        if (!m->ffn[l].is_moe) continue;
        const sl_router *r = &m->ffn[l].moe.router;
        const int64_t k = r->topk, n = r->tokens * k;
        int32_t *idx = malloc((size_t)(n ? n : 1) * sizeof(int32_t));
        sl_tensor_to_host(r->topk_idx, idx);
        for (int64_t t = 0; t < r->tokens; t++) {
            uint64_t set = 0; /* experts < 64 in these variants: a bit set per token */
            for (int64_t j = 0; j < k; j++) set |= 1ULL << idx[t * k + j];
            h = (h ^ set) * 1099511628211ULL;
        }
        free(idx);
    }
    return h;
}

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
    sl_params_sync_compute(&c->m->params);
    sl_fwd_stats st;
    sl_model_forward(c->m, c->tokens, &st);
    c->routing = routing_signature(c->m);
    return objective(c->m, &st, c->ce_scale);
}

/* Worst agreement of a variant: the largest err / (atol + rtol * |numeric|) and its place. */
typedef struct {
    double ratio, err, numeric;
    const char *param;
} fd_worst;

/*
 * Central differences on up to `samples` coordinates spread over the parameter, with one
 * Richardson step: (4 D(h/2) - D(h)) / 3 cancels the h^2 term of the central difference D(h).
 * Plain D(1e-2) is not accurate enough for a zero-disagreement rule: measured over every
 * coordinate of the five variants, the headwise variant's embedding has third derivatives
 * large enough that D(1e-2) is off by 0.0246 at a gradient of 0.154 (5 x the tolerance;
 * D(h) converges to the analytic value as h^2 down to h = 5e-4), and D(5e-3) still by
 * 1.16 x; with the Richardson step the worst coordinate of all five variants is at 0.087 x
 * the tolerance. Smaller h alone trades this for fp32 noise in the loss.
 * Returns the coordinates outside atol + rtol * |numeric|; *kinked counts those left out
 * because a step moved a routing decision, *checked those compared.
 */
static int fd_param(fd_ctx *c, const char *name, float *x, const float *grad, int64_t n,
                    uint64_t base_routing, int samples, int *checked, int *kinked,
                    fd_worst *worst) {
    const double h = 1e-2, atol = 1e-3, rtol = 3e-2;
    int bad = 0;
    const int64_t stride = n > samples ? n / samples : 1;
    for (int64_t i = 0, s = 0; i < n && s < samples; i += stride, s++) {
        const float saved = x[i];
        double d[2];
        bool moved = false;
        for (int q = 0; q < 2; q++) {
            const double hq = q ? h / 2 : h;
            x[i] = (float)(saved + hq);
            const double fp = loss_fn(c);
            moved |= c->routing != base_routing;
            x[i] = (float)(saved - hq);
            const double fm = loss_fn(c);
            moved |= c->routing != base_routing;
            d[q] = (fp - fm) / (2.0 * hq);
        }
        x[i] = saved;
        if (moved) {
            (*kinked)++;
            continue;
        }
        (*checked)++;
        const double num = (4.0 * d[1] - d[0]) / 3.0, err = fabs(num - grad[i]);
        const double ratio = err / (atol + rtol * fabs(num));
        if (!(ratio <= worst->ratio)) *worst = (fd_worst){ratio, err, num, name};
        if (!(ratio <= 1.0)) {
            if (bad < 5)
                fprintf(stderr, "  %s[%lld]: analytic %.7g numeric %.7g\n", name, (long long)i,
                        grad[i], num);
            bad++;
        }
    }
    return bad;
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

/* Coordinates sampled per parameter tensor (all of them when it has fewer). */
enum { SAMPLES = 32 };

static void check_variant(const char *label, const sl_model_config *cfg) {
    char err[256];
    const int batch = 2, seq = 5;
    CHECK(cfg->num_experts <= 64, "%s: routing_signature holds up to 64 experts", label);
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
    const uint64_t base_routing = c.routing; /* from loss_fn's unperturbed forward above */
    int bad = 0, checked = 0, kinked = 0;
    fd_worst worst = {0.0, 0.0, 0.0, "-"};
    for (int i = 0; i < m->params.count; i++) {
        sl_param *p = m->params.items[i];
        if (p == m->lm_head && cfg->tie_word_embeddings) continue;
        bad += fd_param(&c, p->name, c.host[p->group] + p->offset, grad[p->group] + p->offset,
                        p->numel, base_routing, SAMPLES, &checked, &kinked, &worst);
    }
    CHECK(bad == 0, "%s: %d of %d sampled coordinates disagree", label, bad, checked);
    /* Left-out coordinates must stay rare, or the check loses its power. */
    CHECK(kinked * 20 <= checked + kinked, "%s: %d of %d coordinates moved a routing decision",
          label, kinked, checked + kinked);
    printf("  %s: %d coordinates checked, %d outside tolerance, %d left out (routing moved), "
           "loss %.5f\n    worst: %s, |analytic - numeric| %.3g at numeric %.4g (%.3g of the "
           "tolerance)\n",
           label, checked, bad, kinked, l0, worst.param, worst.err, worst.numeric, worst.ratio);
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
