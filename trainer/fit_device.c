/* trainer/fit_device.c - a model cut to fit one device, for measurements (fit_device.h). */
#include "trainer/fit_device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "model/counts.h"

#define GIB ((double)(1ULL << 30))

double sl_fit_state_bytes_per_param(bool bf16) {
    return bf16 ? 18.0 : 16.0;
}

sl_fit_estimate sl_fit_estimate_memory(const sl_model_config *full, int layers, int64_t tokens,
                                       bool bf16, int parked, bool by_tokens) {
    sl_model_config m = *full;
    m.num_hidden_layers = layers;
    int64_t total = 0;
    sl_model_param_count(&m, &total, NULL);
    sl_fit_estimate e = {.state = (double)total * sl_fit_state_bytes_per_param(bf16)};
    /* the model's own count of its activations (model/counts.h): every layer's kept (memory
     * mode none), one device (no expert exchange) */
    sl_activation_bytes a;
    sl_model_activation_bytes(&m, SL_MEMORY_NONE, tokens, bf16 ? 2 : 4, 1, true, &a);
    e.activations = a.layers;
    e.workspace = a.shared + a.workspace; /* x[L] and the buffers the layers share */
    e.deferred = parked * sl_model_deferred_wgrad_bytes(&m, tokens, bf16 ? 2 : 4, by_tokens);
    e.total = e.state + e.activations + e.workspace + e.deferred;
    return e;
}

double sl_fit_usable_bytes(double device_bytes) {
    return 0.92 * device_bytes - 2.0 * GIB;
}

int sl_fit_layers(const sl_model_config *m, int64_t tokens, bool bf16, int parked, bool by_tokens,
                  double budget) {
    int layers = 1;
    for (int n = 1; n <= m->num_hidden_layers; n++)
        if (sl_fit_estimate_memory(m, n, tokens, bf16, parked, by_tokens).total <=
            sl_fit_usable_bytes(budget))
            layers = n;
    return layers;
}

int sl_fit_configure(sl_config *cfg, const sl_fit_settings *s, char *err, size_t errlen) {
    char sets[8][96];
    int n = 0;
    snprintf(sets[n++], sizeof sets[0], "model.num_hidden_layers=%d", s->layers);
    snprintf(sets[n++], sizeof sets[0], "training.seq_len=%d", s->seq);
    snprintf(sets[n++], sizeof sets[0], "training.micro_batch_size=%d", s->batch);
    snprintf(sets[n++], sizeof sets[0], "training.global_batch_tokens=%lld",
             (long long)s->batch * s->seq * s->accum);
    snprintf(sets[n++], sizeof sets[0], "backend.name=cuda");
    /* bf16: fp32 master weights, bf16 compute copies and activations; fp32 (docs/cuda.md,
     * "Precision"); what ran can be read back from the model */
    snprintf(sets[n++], sizeof sets[0], "training.precision=%s", s->precision);
    if (s->nondeterministic) snprintf(sets[n++], sizeof sets[0], "backend.deterministic=false");
    const char *list[8];
    for (int i = 0; i < n; i++) list[i] = sets[i];
    return sl_config_apply_sets(cfg, list, n, err, errlen) != 0 ? -1 : 0;
}

/* Every parameter from one pool of normal values at a random offset (SL_FIT_INIT_FAST). */
static void fill_fast(sl_params *ps, uint64_t seed) {
    enum { POOL = 1 << 22 };
    float *pool = sl_xmalloc(sizeof(float) * POOL);
    sl_rng r;
    sl_rng_init(&r, seed, 0xf17);
    for (int64_t i = 0; i < POOL; i++) pool[i] = (float)sl_rng_normal(&r);
    float *h = NULL;
    size_t cap = 0;
    for (int i = 0; i < ps->count; i++) {
        sl_param *p = ps->items[i];
        sl_xreserve((void **)&h, &cap, sizeof(float) * (size_t)p->numel);
        const int64_t at = (int64_t)sl_rng_below(&r, POOL);
        for (int64_t j = 0; j < p->numel; j++)
            h[j] = p->init == SL_INIT_ONES    ? 1.0f
                   : p->init == SL_INIT_ZEROS ? 0.0f
                                              : p->init_std * pool[(at + j) % POOL];
        sl_tensor_from_host(p->master, h);
    }
    free(h);
    free(pool);
    sl_params_sync_compute(ps);
}

int sl_fit_create(sl_fit_model *fm, const sl_config *cfg, sl_backend *be, sl_comm *world,
                  sl_fit_init init, char *err, size_t errlen) {
    memset(fm, 0, sizeof *fm);
    /* MoE options as `sluice train` sets them for a single rank (trainer/trainer.c) */
    sl_moe_options mo = {
        .capacity_factor = cfg->parallel.capacity_factor,
        .drop_policy =
            strcmp(cfg->parallel.drop_policy, "position") == 0 ? SL_DROP_POSITION : SL_DROP_PROBS,
        .lbl_comm = cfg->train.global_batch_lbl ? world : NULL,
        .selection_bias = cfg->train.router_bias_update_rate > 0,
    };
    fm->model =
        sl_model_create_ex(&cfg->model, be, NULL, cfg->train.micro_batch_size, cfg->train.seq_len,
                           &mo, sl_config_compute_dtype(cfg), err, errlen);
    if (!fm->model) return -1;
    if (init == SL_FIT_INIT_FAST)
        fill_fast(&fm->model->params, cfg->train.seed);
    else
        sl_params_randomize(&fm->model->params, cfg->train.seed);
    sl_optimizer_params op = {.dense = world,
                              .expert = world,
                              .ep = NULL,
                              .zero1 = cfg->parallel.zero1,
                              .bucket_bytes = (int64_t)cfg->parallel.bucket_mb << 20,
                              .layers = cfg->model.num_hidden_layers};
    sl_optimizer_init(&fm->opt, &fm->model->params, &op);
    fm->opt_ready = true;
    return 0;
}

void sl_fit_free(sl_fit_model *fm) {
    if (fm->opt_ready) sl_optimizer_free(&fm->opt);
    sl_model_free(fm->model);
    memset(fm, 0, sizeof *fm);
}

int sl_fit_random_batch(void *user, int micro, int32_t *tokens, char *err, size_t errlen) {
    (void)err, (void)errlen;
    const sl_fit_tokens *s = user;
    sl_rng rng;
    sl_rng_init(&rng, 20240601, (uint64_t)micro + 1);
    const int64_t n = (int64_t)s->batch * (s->seq + 1);
    for (int64_t i = 0; i < n; i++) tokens[i] = (int32_t)sl_rng_below(&rng, (uint64_t)s->vocab);
    return 0;
}
