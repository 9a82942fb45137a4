/*
 * tests/test_memory_counts.c - model/counts.h's activation count against the bytes the model's
 * tensors hold (sl_backend_tensor_bytes).
 *
 *   test_memory_counts            the CPU backend, fp32
 *   test_memory_counts cuda       the CUDA backend in bf16 (the emulated build's: label cuda)
 *
 * The count is what `sluice plan`, the GPU memory check and the host memory checks of `sluice
 * train`, `eval` and `generate` compare with the memory there is; a term it leaves out shows
 * nowhere else. For the small test model and every-feature models (shared expert, a dense
 * layer, each gate mode), in every memory mode (none, attention, layer, forward-only) and at
 * two micro-batch shapes, a model is created and its tensors' bytes less its parameters' are
 * compared with the count:
 *   - per token exactly: the difference between the two shapes is the count's difference (so
 *     each per-token term is right, logits chunk included);
 *   - in all: what the count leaves out is the same at both shapes and small (statistics,
 *     the RoPE table, per-expert counts and biases: no token in them).
 * And the parameters: fp32 weights and gradients (and bf16 copies), a forward-only model's
 * without gradients.
 */
#include <stdio.h>
#include <string.h>

#include "backends/backends.h"
#include "model/counts.h"
#include "model/model.h"
#include "tests/test_util.h"

typedef struct {
    const char *name;
    sl_model_config mc;
} variant;

static variant every_feature(const char *name, sl_gate_mode gate) {
    variant v = {.name = name, .mc = sl_test_model_config()};
    v.mc.num_hidden_layers = 3;
    v.mc.dense_layer[1] = true;
    v.mc.shared_expert_intermediate_size = 12;
    v.mc.attn_output_gate = gate;
    return v;
}

/* The parameters' bytes: fp32 weights and gradients, and compute copies where there are. */
static long long param_bytes(const sl_model *m) {
    long long n = 0;
    for (int g = 0; g < SL_PGROUP_COUNT; g++) {
        const sl_tensor *ts[] = {m->params.w[g], m->params.g[g], m->params.wc[g]};
        for (int i = 0; i < 3; i++)
            if (ts[i])
                n += sl_tensor_numel(ts[i]) * (long long)sl_dtype_size(sl_tensor_dtype(ts[i]));
    }
    return n;
}

/* The model's bytes beyond its parameters less the count, for one shape; -1 on failure. */
static long long uncounted(sl_backend *be, sl_dtype dt, const variant *v, sl_memory_mode mode,
                           int b, int s, double *counted) {
    long long before, after;
    sl_backend_tensor_bytes(be, &before, NULL);
    char err[512] = "";
    sl_model *m = sl_model_create_mem(&v->mc, be, NULL, b, s, NULL, dt, mode, err, sizeof err);
    CHECK(m != NULL, "%s: model: %s", v->name, err);
    if (!m) return -1;
    sl_backend_tensor_bytes(be, &after, NULL);
    /* fp32 weights, compute copies in bf16, and fp32 gradients unless forward-only */
    const long long per = 4 + (dt == SL_F32 ? 0 : 2) + (mode == SL_MEMORY_FORWARD_ONLY ? 0 : 4);
    const long long pb = param_bytes(m), numel = sl_params_numel(&m->params);
    CHECK(pb == per * numel, "%s, %s: the parameters hold %lld bytes, %lld expected (%lld x %lld)",
          v->name, sl_memory_mode_name(mode), pb, per * numel, per, numel);
    const long long acts = after - before - pb;
    sl_activation_bytes ab;
    sl_model_activation_bytes(&v->mc, mode, (int64_t)b * s, (int)sl_dtype_size(dt), 1,
                              !sl_backend_host_memory(be), &ab);
    *counted = ab.total;
    sl_model_free(m);
    long long freed;
    sl_backend_tensor_bytes(be, &freed, NULL);
    CHECK(freed == before, "%s, %s: %lld bytes still held after sl_model_free", v->name,
          sl_memory_mode_name(mode), freed - before);
    return acts - (long long)ab.total;
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : "cpu";
    char err[512] = "";
    const sl_backend_params bp = {.threads = 2, .device = -1};
    sl_backend *be = sl_backend_create(name, &bp, err, sizeof err);
    if (!be) { /* a GPU build on a machine without one, as test_recompute_cuda (77: skipped; the
                * emulated build, which always has its device, fails a skipped cuda test) */
        printf("SKIP: backend %s: %s\n", name, err);
        return 77;
    }
    const sl_dtype dt = sl_backend_host_memory(be) ? SL_F32 : SL_BF16;
    printf("backend %s, activations in %s\n", name, sl_dtype_name(dt));
    const variant vs[] = {
        {"test model", sl_test_model_config()},
        every_feature("every feature, elementwise gate", SL_GATE_ELEMENTWISE),
        every_feature("every feature, headwise gate", SL_GATE_HEADWISE),
        every_feature("every feature, no gate", SL_GATE_NONE),
    };
    const sl_memory_mode modes[] = {SL_MEMORY_NONE, SL_MEMORY_ATTENTION, SL_MEMORY_LAYER,
                                    SL_MEMORY_FORWARD_ONLY};
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) {
        const variant *v = &vs[i];
        /* what may go uncounted, 4-byte values: four per layer and expert + 1 (router
         * statistics, counts, the LBL gradient, the step's counts), the step statistics (two
         * per layer and expert + 2, and one), the RoPE table's frequencies */
        const long long L = v->mc.num_hidden_layers, E = v->mc.num_experts;
        const long long slack = 4 * (4 * L * (E + 1) + 2 * (1 + L * (E + 2)) + v->mc.head_dim);
        for (size_t j = 0; j < sizeof modes / sizeof modes[0]; j++) {
            const char *mode = sl_memory_mode_name(modes[j]);
            double c1, c2;
            const long long u1 = uncounted(be, dt, v, modes[j], 1, 16, &c1);
            const long long u2 = uncounted(be, dt, v, modes[j], 3, 24, &c2);
            printf("%-32s %-12s counted %8.0f and %8.0f bytes; uncounted %lld and %lld\n", v->name,
                   mode, c1, c2, u1, u2);
            CHECK(u1 == u2,
                  "%s, %s: the count is off per token (%lld bytes uncounted at 16 "
                  "tokens, %lld at 72)",
                  v->name, mode, u1, u2);
            CHECK(u1 >= 0 && u1 <= slack,
                  "%s, %s: %lld bytes uncounted (counted more than there is, or more than the "
                  "token-free tensors' %lld)",
                  v->name, mode, u1, slack);
        }
    }
    /* without gradients a forward-only model cannot become a training one */
    sl_model *fo = sl_model_create_mem(&vs[0].mc, be, NULL, 1, 16, NULL, dt, SL_MEMORY_FORWARD_ONLY,
                                       err, sizeof err);
    CHECK(fo && sl_model_set_memory(fo, SL_MEMORY_NONE, err, sizeof err) != 0 &&
              strstr(err, "created forward-only has no gradients"),
          "switching a forward-only model to none: %s", err);
    sl_model_free(fo);
    sl_backend_free(be);
    return sl_test_finish("test_memory_counts");
}
