/*
 * tests/test_generate.c - decoding with a KV cache gives the full forward's logits, and the
 * generation loop is reproducible.
 *
 *   test_generate [backend]   (default: $SLUICE_TEST_BACKEND, else "cpu"; fp32, and on a device
 *                              backend also bf16)
 *
 * For the small test model and three variants (a shared expert and a dense layer with the
 * headwise gate and partial rotary; no gate with YaRN; a selection bias), two sequences of
 * different lengths go through a decoder in uneven pieces: a chunked prefill (several passes of
 * at most 3 tokens, the shorter sequence padded), then one token at a time, then two pieces that
 * leave one sequence idle. Every new token's logits must equal, within rounding, the logits of a
 * plain forward over the whole sequences (the training kernels, model.c) at that position:
 * max |decode - forward| <= 2e-5 * max |forward| + 1e-6 in fp32 (5e-3 relative to the largest
 * logit in bf16, where the two paths round their activations at different points; measured 8e-4
 * under the emulator). The decoding model shares the forward model's weights
 * (sl_model_create_shared), so this also checks that sharing binds every parameter where the
 * source has it.
 *
 * Then greedy generation from a prompt must pick, at every step, the argmax of the full forward
 * over the prompt and what it generated so far; sampled generation with a seed must give the
 * same tokens twice, and other tokens with another seed; a stop token ends a sequence; the
 * decoder refuses a sequence past its length and a token outside the vocabulary.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "model/decode.h"
#include "tests/test_util.h"

enum { B = 2, LEN = 13 };

typedef struct {
    const char *name;
    sl_model_config mc;
    sl_moe_options mo;
} variant;

static variant every_feature(void) {
    variant v = {.name = "shared expert, dense layer, headwise gate, partial rotary",
                 .mc = sl_test_model_config()};
    v.mc.num_hidden_layers = 3;
    v.mc.shared_expert_intermediate_size = 12;
    v.mc.dense_layer[1] = true;
    v.mc.attn_output_gate = SL_GATE_HEADWISE;
    v.mc.partial_rotary_factor = 0.5;
    return v;
}

static variant yarn_ungated(void) {
    variant v = {.name = "no gate, YaRN", .mc = sl_test_model_config()};
    v.mc.attn_output_gate = SL_GATE_NONE;
    v.mc.rope_scaling = (sl_rope_scaling){.type = SL_ROPE_YARN,
                                          .factor = 4.0,
                                          .original_max_position_embeddings = 8,
                                          .beta_fast = 32.0,
                                          .beta_slow = 1.0};
    return v;
}

static variant selection_bias(void) {
    variant v = {.name = "selection bias", .mc = sl_test_model_config()};
    v.mo.selection_bias = true;
    return v;
}

/* Random tokens [B, LEN + 1] (the forward's inputs are the first LEN of each row). */
static int32_t *random_tokens(int vocab, uint64_t seed) {
    int32_t *t = sl_xmalloc(sizeof(int32_t) * B * (LEN + 1));
    sl_rng r;
    sl_rng_init(&r, seed, 1);
    for (int i = 0; i < B * (LEN + 1); i++) t[i] = (int32_t)sl_rng_below(&r, (uint64_t)vocab);
    return t;
}

/* The forward's logits of every position, [B * LEN, V] on the host. */
static float *forward_logits(sl_model *m, const int32_t *tokens) {
    sl_fwd_stats st;
    sl_model_forward(m, tokens, &st);
    sl_tensor *lg = sl_tensor_new2(m->be, SL_F32, m->tokens, m->cfg.vocab_size);
    sl_model_logits(m, 0, m->tokens, lg);
    float *h = sl_test_host_floats(lg);
    sl_tensor_free(lg);
    return h;
}

/* max |x|: infinite when an element is not finite (fmax would drop a NaN) */
static double max_abs(const float *x, int64_t n) {
    double m = 0.0;
    for (int64_t i = 0; i < n; i++)
        if (!(fabs((double)x[i]) <= m)) m = isfinite(x[i]) ? fabs((double)x[i]) : INFINITY;
    return m;
}

/* worst after one more pair: a NaN is an infinite difference (fmax would drop it) */
static double worse(double worst, float got, float want) {
    const double d = fabs((double)got - want);
    return d <= worst ? worst : isnan(d) ? INFINITY : d;
}

/* Feeds the sequences in the pieces below and compares each piece's logits with the forward. */
static void compare_decode(sl_backend *be, const variant *v, sl_dtype dt) {
    char err[512] = "";
    sl_model *full = sl_model_create_mem(&v->mc, be, NULL, B, LEN, &v->mo, dt,
                                         SL_MEMORY_FORWARD_ONLY, err, sizeof err);
    CHECK(full != NULL, "%s: model: %s", v->name, err);
    if (!full) return;
    sl_params_randomize(&full->params, 5);
    if (v->mo.selection_bias) { /* a bias that moves some selections */
        float bias[8] = {0.3f, -0.2f, 0.1f, 0.0f, -0.4f, 0.25f, -0.1f, 0.05f};
        for (int l = 0; l < v->mc.num_hidden_layers; l++)
            if (full->ffn[l].is_moe) sl_router_set_bias(&full->ffn[l].moe.router, bias);
    }
    const int vocab = v->mc.vocab_size;
    int32_t *tokens = random_tokens(vocab, 7);
    float *want = forward_logits(full, tokens);
    sl_model *dm = sl_model_create_shared(full, B, 1, err, sizeof err);
    CHECK(dm != NULL, "%s: shared model: %s", v->name, err);
    sl_decoder *d = dm ? sl_decoder_create(dm, B, LEN, 3, err, sizeof err) : NULL;
    CHECK(d != NULL, "%s: decoder: %s", v->name, err);
    /* pieces per sequence: sequence 1 is 2 tokens shorter (its last two are never fed) */
    static const int pieces[][B] = {{7, 4}, {1, 1}, {1, 1}, {2, 0}, {0, 3}, {2, 2}};
    float *got = sl_xmalloc(sizeof(float) * B * LEN * (size_t)vocab);
    float *last = sl_xmalloc(sizeof(float) * B * (size_t)vocab);
    int fed[B] = {0};
    double worst = 0.0, worst_last = 0.0;
    const double scale = max_abs(want, (int64_t)B * LEN * vocab);
    CHECK(isfinite(scale), "%s: the forward's logits are not finite", v->name);
    const double tol = dt == SL_F32 ? 2e-5 * scale + 1e-6 : 5e-3 * scale;
    for (size_t p = 0; d && p < sizeof pieces / sizeof pieces[0]; p++) {
        const int32_t *src[B];
        int n[B], rows = 0;
        for (int b = 0; b < B; b++)
            src[b] = tokens + b * (LEN + 1) + fed[b], n[b] = pieces[p][b], rows += n[b];
        const int rc = sl_decoder_feed(d, src, n, last, got, err, sizeof err);
        CHECK(rc == 0, "%s: feed %zu: %s", v->name, p, err);
        int64_t r = 0;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < n[b]; i++, r++) {
                const float *w = want + ((int64_t)b * LEN + fed[b] + i) * vocab;
                const float *g = got + r * vocab;
                for (int k = 0; k < vocab; k++) worst = worse(worst, g[k], w[k]);
                if (i == n[b] - 1) /* `last` got the same row, from a GEMM of other rows */
                    for (int k = 0; k < vocab; k++)
                        worst_last = worse(worst_last, g[k], last[b * vocab + k]);
            }
        for (int b = 0; b < B; b++) {
            fed[b] += n[b];
            CHECK(sl_decoder_length(d, b) == fed[b], "%s: length %d, want %d", v->name,
                  sl_decoder_length(d, b), fed[b]);
        }
        (void)rows;
    }
    printf("  %-58s %s: max |decode - forward| %.3g (largest logit %.3g, tolerance %.3g)\n",
           v->name, sl_dtype_name(dt), worst, scale, tol);
    CHECK(worst <= tol, "%s (%s): decoding moved the logits by %.3g > %.3g", v->name,
          sl_dtype_name(dt), worst, tol);
    CHECK(worst_last <= tol, "%s (%s): the last rows' logits differ from all's by %.3g", v->name,
          sl_dtype_name(dt), worst_last);
    CHECK(fed[0] == LEN && fed[1] == LEN - 2, "the pieces fed %d and %d tokens", fed[0], fed[1]);
    /* past the cache, and outside the vocabulary */
    if (d) {
        const int32_t bad[2] = {vocab, 0}, *src[B] = {bad, bad};
        int n[B] = {0, 1};
        CHECK(sl_decoder_feed(d, src, n, NULL, NULL, err, sizeof err) != 0 &&
                  strstr(err, "outside the vocabulary"),
              "a token id of %d was accepted (%s)", vocab, err);
        n[1] = 3;
        src[1] = tokens;
        CHECK(sl_decoder_feed(d, src, n, NULL, NULL, err, sizeof err) != 0 && strstr(err, "exceed"),
              "a sequence past the decoder's length was accepted (%s)", err);
    }
    free(got);
    free(last);
    free(want);
    free(tokens);
    sl_decoder_free(d);
    sl_model_free(dm);
    sl_model_free(full);
}

/* Greedy generation picks the forward's argmax at every step; seeded sampling repeats. */
static void generation(sl_backend *be) {
    char err[512] = "";
    const sl_model_config mc = sl_test_model_config();
    const int vocab = mc.vocab_size, plen = 4, gen = 6;
    sl_model *m = sl_model_create_mem(&mc, be, NULL, 1, 1, NULL, SL_F32, SL_MEMORY_FORWARD_ONLY,
                                      err, sizeof err);
    CHECK(m != NULL, "model: %s", err);
    if (!m) return;
    sl_params_randomize(&m->params, 9);
    sl_decoder *d = sl_decoder_create(m, 1, plen + gen, 4, err, sizeof err);
    const int32_t prompt[4] = {3, 17, 5, 30}, *prompts[1] = {prompt};
    const int n_prompt[1] = {plen};
    int32_t *out[1] = {NULL}, seqs[3][8];
    int out_n[1] = {0};
    sl_sampler s;
    const sl_sampler_params greedy = {.temperature = 0.0, .top_p = 1.0};
    sl_sampler_init(&s, &greedy, vocab, 0);
    sl_generate_opts o = {.max_new = gen, .stop_id = -1};
    CHECK(sl_generate(d, &s, prompts, n_prompt, &o, out, out_n, err, sizeof err) == 0,
          "greedy generation: %s", err);
    sl_sampler_free(&s);
    CHECK(out_n[0] == gen, "greedy generated %d tokens, want %d", out_n[0], gen);
    /* each generated token is the argmax of a full forward over everything before it */
    int32_t seq[16];
    memcpy(seq, prompt, sizeof prompt);
    for (int i = 0; i < out_n[0]; i++) seq[plen + i] = out[0][i];
    for (int i = 0; i < out_n[0]; i++) {
        const int len = plen + i;
        sl_model *f = sl_model_create_shared(m, 1, len, err, sizeof err);
        int32_t toks[17];
        memcpy(toks, seq, sizeof(int32_t) * (size_t)len);
        toks[len] = 0;
        float *lg = forward_logits(f, toks);
        const float *row = lg + (int64_t)(len - 1) * vocab;
        int best = 0;
        for (int k = 1; k < vocab; k++) best = row[k] > row[best] ? k : best;
        CHECK(best == out[0][i], "greedy token %d is %d, the forward's argmax %d", i, out[0][i],
              best);
        free(lg);
        sl_model_free(f);
    }
    free(out[0]);
    /* sampling: seed 1 twice, then seed 2 */
    const uint64_t seeds[3] = {1, 1, 2};
    for (int r = 0; r < 3; r++) {
        const sl_sampler_params sp = {.temperature = 1.5, .top_p = 1.0, .seed = seeds[r]};
        sl_sampler_init(&s, &sp, vocab, 0);
        o.max_new = 8;
        CHECK(sl_generate(d, &s, prompts, n_prompt, &o, out, out_n, err, sizeof err) != 0 &&
                  strstr(err, "exceed"),
              "generating past the decoder's length was accepted");
        free(out[0]);
        sl_decoder_free(d);
        d = sl_decoder_create(m, 1, plen + 8, 4, err, sizeof err);
        sl_sampler_free(&s);
        sl_sampler_init(&s, &sp, vocab, 0);
        CHECK(sl_generate(d, &s, prompts, n_prompt, &o, out, out_n, err, sizeof err) == 0,
              "sampling: %s", err);
        CHECK(out_n[0] == 8, "sampling generated %d tokens", out_n[0]);
        memcpy(seqs[r], out[0], sizeof seqs[r]);
        free(out[0]);
        sl_sampler_free(&s);
        sl_decoder_free(d);
        d = sl_decoder_create(m, 1, plen + gen, 4, err, sizeof err);
    }
    CHECK(memcmp(seqs[0], seqs[1], sizeof seqs[0]) == 0, "the same seed sampled other tokens");
    CHECK(memcmp(seqs[0], seqs[2], sizeof seqs[0]) != 0, "seeds 1 and 2 sampled the same tokens");
    /* a stop token: the third token of seed 1's run ends the sequence there */
    const sl_sampler_params sp = {.temperature = 1.5, .top_p = 1.0, .seed = 1};
    sl_sampler_init(&s, &sp, vocab, 0);
    o.max_new = gen;
    o.stop_id = seqs[0][2];
    int first = 0;
    while (seqs[0][first] != o.stop_id) first++;
    CHECK(sl_generate(d, &s, prompts, n_prompt, &o, out, out_n, err, sizeof err) == 0, "stop: %s",
          err);
    CHECK(out_n[0] == first + 1 && out[0][first] == o.stop_id,
          "with stop token %d the run generated %d tokens, want %d", o.stop_id, out_n[0],
          first + 1);
    free(out[0]);
    sl_sampler_free(&s);
    sl_decoder_free(d);
    sl_model_free(m);
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : getenv("SLUICE_TEST_BACKEND");
    if (!name || !*name) name = "cpu";
    char err[512] = "";
    const sl_backend_params bp = {.threads = 2, .device = -1};
    sl_backend *be = sl_backend_create(name, &bp, err, sizeof err);
    if (!be) {
        printf("SKIP: backend %s: %s\n", name, err);
        return 77;
    }
    printf("backend %s\n", sl_backend_name(be));
    const variant vs[] = {{.name = "test model", .mc = sl_test_model_config()},
                          every_feature(),
                          yarn_ungated(),
                          selection_bias()};
    const bool device = strcmp(sl_backend_name(be), "cpu") != 0;
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) {
        compare_decode(be, &vs[i], SL_F32);
        if (device) compare_decode(be, &vs[i], SL_BF16);
    }
    generation(be);
    sl_backend_free(be);
    return sl_test_finish("test_generate");
}
