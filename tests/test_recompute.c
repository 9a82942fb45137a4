/*
 * tests/test_recompute.c - the activation memory modes change memory, never numbers.
 *
 *   test_recompute [backend]            (default: $SLUICE_TEST_BACKEND, else "cpu"; fp32)
 *   mpirun -np 2 test_recompute cpu     (expert parallelism over all ranks)
 *
 * For the small test model and two every-feature models (shared expert, a dense layer,
 * capacity drops, global-batch LBL, z-loss, aux-loss-free bias; headwise and no gate), a
 * model in memory mode "attention" and one in "layer" train two optimizer steps of two
 * micro-batches beside a model in "none" from the same initialization and data: the losses,
 * gradient norms, router statistics, expert counts, every gradient and every weight must be
 * bitwise equal after every step (the recompute runs the same ops on the same inputs, and the
 * MoE bookkeeping of the first forward is not counted twice). Then: a forward-only model
 * evaluates bitwise the loss of the training model's forward; and a model whose memory mode
 * and shape were changed (with trained router biases) computes bitwise what a fresh model of
 * that shape computes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "tests/test_util.h"
#include "trainer/optimizer.h"
#include "trainer/topology.h"
#include "trainer/train_step.h"

enum { B = 2, S = 16, MICRO = 2, STEPS = 2 };

typedef struct {
    const char *name;
    sl_model_config mc;
    sl_moe_options mo;
    double bias_rate; /* training.router_bias_update_rate */
} variant;

typedef struct {
    sl_backend *be;
    sl_comm *world;
    sl_topology topo;
    int ep; /* expert parallelism: the world size */
} env;

typedef struct {
    int step, rank, vocab, seq, batch;
} feed;

static int make_batch(void *user, int micro, int32_t *tokens, char *err, size_t errlen) {
    (void)err, (void)errlen;
    const feed *f = user;
    sl_rng r;
    sl_rng_init(&r, 900 + (uint64_t)f->step, (uint64_t)(micro * 16 + f->rank));
    for (int i = 0; i < f->batch * (f->seq + 1); i++)
        tokens[i] = (int32_t)sl_rng_below(&r, (uint64_t)f->vocab);
    return 0;
}

static sl_model *make(const env *e, const variant *v, sl_memory_mode mode, int b, int s) {
    char err[512] = "";
    sl_model *m = sl_model_create_mem(&v->mc, e->be, e->ep > 1 ? e->topo.ep : NULL, b, s, &v->mo,
                                      SL_F32, mode, err, sizeof err);
    CHECK(m != NULL, "%s: model: %s", v->name, err);
    if (!m) return NULL;
    sl_params_randomize(&m->params, 11);
    return m;
}

/* Bitwise equality of two tensors of the same shape. */
static bool same_tensor(const sl_tensor *a, const sl_tensor *b) {
    if (!a || !b) return a == b;
    const int64_t n = sl_tensor_numel(a);
    if (n != sl_tensor_numel(b)) return false;
    float *x = sl_test_host_floats(a), *y = sl_test_host_floats(b);
    const bool same = memcmp(x, y, (size_t)n * sizeof(float)) == 0;
    free(x), free(y);
    return same;
}

static bool same_double(double a, double b) {
    return memcmp(&a, &b, sizeof a) == 0;
}

/* Gradients (what) or weights of every parameter group. */
static void check_params(const sl_model *a, const sl_model *b, bool grads, const char *what) {
    for (int g = 0; g < SL_PGROUP_COUNT; g++) {
        if (a->params.size[g] == 0) continue;
        CHECK(same_tensor(grads ? a->params.g[g] : a->params.w[g],
                          grads ? b->params.g[g] : b->params.w[g]),
              "%s: %s of parameter group %d differ", what, grads ? "gradients" : "weights", g);
    }
}

/* Two models train side by side; everything they report must be bitwise equal. */
static void train_compare(const env *e, const variant *v, sl_memory_mode mode) {
    sl_model *ref = make(e, v, SL_MEMORY_NONE, B, S), *m = make(e, v, mode, B, S);
    if (!ref || !m) {
        sl_model_free(ref), sl_model_free(m);
        return;
    }
    char what[160];
    snprintf(what, sizeof what, "%s, recompute %s vs none", v->name, sl_memory_mode_name(mode));
    const int nl = v->mc.num_hidden_layers, ne = v->mc.num_experts;
    sl_train_config tc;
    memset(&tc, 0, sizeof tc);
    tc.seq_len = S;
    tc.micro_batch_size = B;
    tc.global_batch_tokens = (int64_t)MICRO * B * S * sl_comm_size(e->world);
    tc.max_steps = STEPS;
    tc.lr = 3e-3, tc.min_lr = 3e-4, tc.warmup_steps = 1, tc.schedule = SL_LR_COSINE;
    tc.beta1 = 0.9, tc.beta2 = 0.95, tc.eps = 1e-8, tc.weight_decay = 0.1, tc.grad_clip = 1.0;
    tc.router_bias_update_rate = v->bias_rate;
    const sl_optimizer_params op = {.dense = e->world,
                                    .expert = e->topo.edp,
                                    .ep = e->ep > 1 ? e->topo.ep : NULL,
                                    .layers = nl};
    sl_optimizer ropt, mopt;
    sl_optimizer_init(&ropt, &ref->params, &op);
    sl_optimizer_init(&mopt, &m->params, &op);
    int32_t *tokens = malloc(sizeof(int32_t) * B * (S + 1));
    const sl_stepper rs = {
        .model = ref, .opt = &ropt, .world = e->world, .micro_batches = MICRO, .tokens = tokens};
    const sl_stepper ms = {
        .model = m, .opt = &mopt, .world = e->world, .micro_batches = MICRO, .tokens = tokens};
    int64_t *rc = calloc((size_t)nl * ne, sizeof(int64_t)), *mcnt = calloc((size_t)nl * ne, 8);
    char err[512] = "";
    for (int step = 0; step < STEPS; step++) {
        feed f = {.step = step,
                  .rank = sl_comm_rank(e->world),
                  .vocab = v->mc.vocab_size,
                  .seq = S,
                  .batch = B};
        sl_step_result a = {.metrics = true, .counts = rc}, b = {.metrics = true, .counts = mcnt};
        CHECK(sl_train_step(&rs, &tc, step, make_batch, &f, &a, err, sizeof err) == 0, "%s", err);
        CHECK(sl_train_step(&ms, &tc, step, make_batch, &f, &b, err, sizeof err) == 0, "%s", err);
        CHECK(same_double(a.loss, b.loss), "%s: step %d loss %.9g vs %.9g", what, step, b.loss,
              a.loss);
        CHECK(same_double(a.grad_norm, b.grad_norm), "%s: step %d grad norm %.9g vs %.9g", what,
              step, b.grad_norm, a.grad_norm);
        CHECK(same_double(a.lbl, b.lbl) && same_double(a.zloss, b.zloss) &&
                  same_double(a.gate_score, b.gate_score),
              "%s: step %d lbl/zloss/gate %.9g %.9g %.9g vs %.9g %.9g %.9g", what, step, b.lbl,
              b.zloss, b.gate_score, a.lbl, a.zloss, a.gate_score);
        CHECK(memcmp(rc, mcnt, (size_t)nl * ne * sizeof(int64_t)) == 0,
              "%s: step %d expert counts differ", what, step);
        check_params(ref, m, true, what);
        check_params(ref, m, false, what);
        /* the global-batch LBL counts: a recompute must not add its routing again */
        for (int l = 0; l < nl; l++)
            CHECK(!ref->ffn[l].is_moe ||
                      memcmp(ref->ffn[l].moe.lbl_counts, m->ffn[l].moe.lbl_counts,
                             (size_t)ne * sizeof(int64_t)) == 0,
                  "%s: step %d layer %d LBL counts differ", what, step, l);
        if (step == 0 && sl_comm_rank(e->world) == 0)
            printf("%s: step 0 loss %.6f grad norm %.6f lbl %.6f\n", what, b.loss, b.grad_norm,
                   b.lbl);
    }
    free(rc), free(mcnt), free(tokens);
    sl_optimizer_free(&ropt);
    sl_optimizer_free(&mopt);
    sl_model_free(ref);
    sl_model_free(m);
}

static void forward_compare(const sl_model *a, const sl_fwd_stats *x, const sl_fwd_stats *y,
                            const char *what) {
    (void)a;
    CHECK(same_double(x->loss_sum, y->loss_sum) && x->tokens == y->tokens,
          "%s: loss sum %.9g (%lld tokens) vs %.9g (%lld)", what, x->loss_sum, (long long)x->tokens,
          y->loss_sum, (long long)y->tokens);
    CHECK(same_double(x->lbl, y->lbl) && same_double(x->zloss, y->zloss) &&
              same_double(x->gate_score, y->gate_score),
          "%s: lbl/zloss/gate %.9g %.9g %.9g vs %.9g %.9g %.9g", what, x->lbl, x->zloss,
          x->gate_score, y->lbl, y->zloss, y->gate_score);
}

/* Evaluation in FORWARD_ONLY gives the training forward's loss and statistics. */
static void eval_compare(const env *e, const variant *v) {
    sl_model *train = make(e, v, SL_MEMORY_NONE, B, S);
    sl_model *ev = make(e, v, SL_MEMORY_FORWARD_ONLY, B, S);
    if (!train || !ev) {
        sl_model_free(train), sl_model_free(ev);
        return;
    }
    int32_t *tokens = malloc(sizeof(int32_t) * B * (S + 1));
    feed f = {
        .step = 7, .rank = sl_comm_rank(e->world), .vocab = v->mc.vocab_size, .seq = S, .batch = B};
    make_batch(&f, 0, tokens, NULL, 0);
    sl_fwd_stats a, b, c;
    sl_model_forward(ev, tokens, &a);
    sl_model_forward(train, tokens, &b);
    sl_model_begin_step(train, true);
    sl_model_forward_backward(train, tokens, 1.0f, 1.0, &c);
    char what[160];
    snprintf(what, sizeof what, "%s: forward-only evaluation vs training forward", v->name);
    forward_compare(ev, &a, &b, what);
    forward_compare(ev, &a, &c, what);
    for (int l = 0; l < v->mc.num_hidden_layers; l++) {
        const int64_t *x = sl_model_expert_counts(ev, l), *y = sl_model_expert_counts(train, l);
        CHECK((!x && !y) || (x && y && memcmp(x, y, (size_t)v->mc.num_experts * 8) == 0),
              "%s: layer %d expert counts differ", what, l);
    }
    free(tokens);
    sl_model_free(train);
    sl_model_free(ev);
}

/* set_memory and set_shape (with trained router biases, which must survive them) leave a
 * model that computes what a fresh model of the new shape and mode computes. */
static void reshape_compare(const env *e, const variant *v) {
    enum { B2 = 1, S2 = 24 };
    const sl_memory_mode modes[] = {SL_MEMORY_LAYER, SL_MEMORY_ATTENTION, SL_MEMORY_FORWARD_ONLY};
    int64_t *counts = calloc((size_t)v->mc.num_hidden_layers * v->mc.num_experts, 8);
    for (int i = 0; i < v->mc.num_hidden_layers * v->mc.num_experts; i++) counts[i] = i % 5;
    int32_t *tokens = malloc(sizeof(int32_t) * B2 * (S2 + 1));
    feed f = {.step = 3,
              .rank = sl_comm_rank(e->world),
              .vocab = v->mc.vocab_size,
              .seq = S2,
              .batch = B2};
    make_batch(&f, 0, tokens, NULL, 0);
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        char err[512] = "", what[160];
        snprintf(what, sizeof what, "%s: none -> %s, reshaped, vs a fresh model", v->name,
                 sl_memory_mode_name(modes[i]));
        sl_model *m = make(e, v, SL_MEMORY_NONE, B, S);
        sl_model *fresh = make(e, v, modes[i], B2, S2);
        if (!m || !fresh) {
            sl_model_free(m), sl_model_free(fresh);
            continue;
        }
        sl_model_update_router_bias(m, counts, 0.01);
        sl_model_update_router_bias(fresh, counts, 0.01);
        CHECK(sl_model_set_memory(m, modes[i], err, sizeof err) == 0, "%s: %s", what, err);
        CHECK(sl_model_set_shape(m, B2, S2, err, sizeof err) == 0, "%s: %s", what, err);
        sl_fwd_stats a, b;
        if (modes[i] == SL_MEMORY_FORWARD_ONLY) {
            sl_model_forward(m, tokens, &a);
            sl_model_forward(fresh, tokens, &b);
        } else {
            sl_params_zero_grad(&m->params);
            sl_params_zero_grad(&fresh->params);
            sl_model_begin_step(m, true);
            sl_model_begin_step(fresh, true);
            sl_model_forward_backward(m, tokens, 0.01f, 0.5, &a);
            sl_model_forward_backward(fresh, tokens, 0.01f, 0.5, &b);
            check_params(fresh, m, true, what);
        }
        forward_compare(m, &a, &b, what);
        sl_model_free(m);
        sl_model_free(fresh);
    }
    free(tokens);
    free(counts);
}

static variant every_feature(const char *name, sl_gate_mode gate, sl_drop_policy drop,
                             sl_comm *world) {
    variant v = {.name = name, .mc = sl_test_model_config(), .bias_rate = 1e-3};
    v.mc.num_hidden_layers = 3;
    v.mc.dense_layer[1] = true;
    v.mc.shared_expert_intermediate_size = 12;
    v.mc.attn_output_gate = gate;
    v.mc.router_z_loss_coef = 1e-2;
    v.mo = (sl_moe_options){
        .capacity_factor = 0.75, .drop_policy = drop, .lbl_comm = world, .selection_bias = true};
    return v;
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : getenv("SLUICE_TEST_BACKEND");
    if (!name || !*name) name = "cpu";
    sl_comm *world = sl_comm_init_world(&argc, &argv);
    char err[512] = "";
    const sl_backend_params bp = {.threads = 2, .device = -1};
    env e = {.world = world, .ep = sl_comm_size(world)};
    e.be = sl_backend_create(name, &bp, err, sizeof err);
    if (!e.be) {
        printf("SKIP: backend %s: %s\n", name, err);
        sl_comm_finalize(world);
        return 77;
    }
    if (sl_comm_rank(world) == 0)
        printf("backend %s (fp32), expert parallelism %d\n", sl_backend_name(e.be), e.ep);
    const variant base = {.name = "test model", .mc = sl_test_model_config()};
    CHECK(base.mc.num_experts % e.ep == 0, "%d ranks do not divide %d experts", e.ep,
          base.mc.num_experts);
    if (sl_topology_init(&e.topo, world, e.ep, base.mc.num_experts, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        sl_comm_finalize(world);
        return 2;
    }
    const variant vs[] = {
        base,
        every_feature("every feature, headwise gate", SL_GATE_HEADWISE, SL_DROP_PROBS, world),
        every_feature("every feature, no gate", SL_GATE_NONE, SL_DROP_POSITION, world),
    };
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) {
        train_compare(&e, &vs[i], SL_MEMORY_ATTENTION);
        train_compare(&e, &vs[i], SL_MEMORY_LAYER);
        eval_compare(&e, &vs[i]);
        reshape_compare(&e, &vs[i]);
    }
    sl_topology_free(&e.topo);
    sl_backend_free(e.be);
    const int rc = sl_test_finish("test_recompute");
    sl_comm_finalize(world);
    return rc;
}
