/*
 * tests/test_balance_mpi.c - expert balancing across ranks.
 *
 *   mpirun -np N test_balance_mpi
 *
 * 1. Global-batch LBL: with lbl_comm = the world, every rank's MoE layers use the same expert
 *    counts for the load-balancing gradient: the sum over ranks of what each routed, and
 *    over the micro-batches of the step so far; sl_model_begin_step starts over.
 * 2. Aux-loss-free bias: bias += rate * sign(mean - count), and the bias moves top-k
 *    selection toward the starved expert while leaving the routing weights as softmax
 *    probabilities.
 */
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "model/model.h"
#include "tests/test_util.h"

enum { B = 2, S = 8 };

static void tokens_for(int rank, int micro, int vocab, int32_t *t) {
    sl_rng r;
    sl_rng_init(&r, 500 + (uint64_t)micro, (uint64_t)rank);
    for (int i = 0; i < B * (S + 1); i++) t[i] = (int32_t)sl_rng_below(&r, (uint64_t)vocab);
}

static void test_global_lbl(sl_comm *world) {
    const int rank = sl_comm_rank(world);
    sl_model_config mc = sl_test_model_config();
    sl_moe_options mo = {.lbl_comm = world};
    char err[256];
    sl_model *m = sl_model_create(&mc, sl_test_cpu(), NULL, B, S, &mo, err, sizeof err);
    CHECK(m != NULL, "model: %s", err);
    if (!m) return;
    sl_params_randomize(&m->params, 3);
    int32_t tok[B * (S + 1)];
    const int E = mc.num_experts;
    int64_t *expect = calloc((size_t)mc.num_hidden_layers * E, sizeof(int64_t));
    sl_model_begin_step(m, true);
    for (int micro = 0; micro < 2; micro++) {
        tokens_for(rank, micro, mc.vocab_size, tok);
        sl_fwd_stats st;
        sl_model_forward(m, tok, &st);
        for (int l = 0; l < mc.num_hidden_layers; l++) {
            int64_t local[64];
            memcpy(local, sl_model_expert_counts(m, l), (size_t)E * sizeof(int64_t));
            sl_comm_allreduce_sum_i64(world, local, E);
            for (int e = 0; e < E; e++) expect[l * E + e] += local[e];
            const int64_t *used = m->ffn[l].moe.lbl_counts;
            int same = memcmp(used, expect + l * E, (size_t)E * sizeof(int64_t)) == 0;
            CHECK(same, "layer %d micro %d: LBL counts are not the world's running sum", l, micro);
            int64_t total = 0;
            for (int e = 0; e < E; e++) total += used[e];
            CHECK(total ==
                      (int64_t)(micro + 1) * sl_comm_size(world) * B * S * mc.num_experts_per_tok,
                  "layer %d micro %d: %lld slots counted", l, micro, (long long)total);
        }
    }
    sl_model_begin_step(m, true);
    for (int l = 0; l < mc.num_hidden_layers; l++) {
        int64_t sum = 0;
        for (int e = 0; e < E; e++) sum += m->ffn[l].moe.lbl_counts[e];
        CHECK(sum == 0, "begin_step clears the accumulation (layer %d)", l);
    }
    free(expect);
    sl_model_free(m);
}

static void test_bias(void) {
    sl_model_config mc = sl_test_model_config();
    mc.num_hidden_layers = 1;
    sl_moe_options mo = {.selection_bias = true};
    char err[256];
    sl_model *m = sl_model_create(&mc, sl_test_cpu(), NULL, B, S, &mo, err, sizeof err);
    CHECK(m != NULL, "model: %s", err);
    if (!m) return;
    sl_params_randomize(&m->params, 4);
    sl_router *r = &m->ffn[0].moe.router;
    const int E = mc.num_experts;
    int64_t counts[8] = {10, 0, 5, 5, 5, 5, 5, 5}; /* mean 5 */
    sl_model_update_router_bias(m, counts, 0.25);
    float want[8] = {-0.25f, 0.25f, 0, 0, 0, 0, 0, 0};
    CHECK(memcmp(r->bias_host, want, sizeof want) == 0, "bias update: sign(mean - count) * rate");
    /* A large bias on expert 5 puts it in every token's top-k; weights stay probabilities. */
    float big[8] = {0};
    big[5] = 100.0f;
    sl_router_set_bias(r, big);
    int32_t tok[B * (S + 1)];
    tokens_for(0, 0, mc.vocab_size, tok);
    sl_fwd_stats st;
    sl_model_forward(m, tok, &st);
    const int64_t *c = sl_model_expert_counts(m, 0);
    CHECK(c[5] == B * S, "biased expert picked by every token (%lld of %d)", (long long)c[5],
          B * S);
    float *p = sl_test_host_f32(r->probs), *w = sl_test_host_f32(r->topk_w);
    int32_t *idx = malloc(sizeof(int32_t) * B * S * mc.num_experts_per_tok);
    sl_tensor_to_host(r->topk_idx, idx);
    const int k = mc.num_experts_per_tok;
    for (int n = 0; n < B * S; n++) {
        double sum = 0;
        for (int j = 0; j < k; j++) sum += p[n * E + idx[n * k + j]];
        for (int j = 0; j < k; j++)
            CHECK(fabs(w[n * k + j] - p[n * E + idx[n * k + j]] / sum) < 1e-6,
                  "token %d: weight is the renormalized probability, not the biased score", n);
    }
    free(p), free(w), free(idx);
    sl_model_free(m);
}

int main(int argc, char **argv) {
    sl_comm *world = sl_comm_init_world(&argc, &argv);
    test_global_lbl(world);
    if (sl_comm_rank(world) == 0) test_bias();
    double fails = sl_test_failures;
    sl_comm_allreduce_sum_f64(world, &fails, 1);
    int rc = sl_test_finish("test_balance_mpi");
    sl_comm_finalize(world);
    return fails > 0 ? 1 : rc;
}
