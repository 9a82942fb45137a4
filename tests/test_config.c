/*
 * tests/test_config.c - the configuration module: the shipped configs, a catalog of bad
 * configs (each must fail naming its key path), --set overrides, JSON and Hugging Face
 * round trips, and parameter / FLOP counts checked against hand arithmetic.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "model/counts.h"
#include "tests/test_util.h"
#include "trainer/config.h"

#ifndef SLUICE_SOURCE_DIR
#error "SLUICE_SOURCE_DIR must be defined (tests/config.cmake)"
#endif

static bool load(const char *rel, sl_config *cfg) {
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/%s", SLUICE_SOURCE_DIR, rel);
    int rc = sl_config_load(path, cfg, err, sizeof err);
    CHECK(rc == 0, "loading %s: %s", rel, err);
    return rc == 0;
}

/* Field-by-field equality, naming the first field that differs. */
#define EQ(f)                                                                                      \
    do {                                                                                           \
        if (a->f != b->f) {                                                                        \
            fprintf(stderr, "  field %s differs\n", #f);                                           \
            return false;                                                                          \
        }                                                                                          \
    } while (0)
#define EQS(f)                                                                                     \
    do {                                                                                           \
        if (strcmp(a->f, b->f) != 0) {                                                             \
            fprintf(stderr, "  field %s differs: \"%s\" vs \"%s\"\n", #f, a->f, b->f);             \
            return false;                                                                          \
        }                                                                                          \
    } while (0)

static bool model_eq(const sl_model_config *a, const sl_model_config *b) {
    EQ(vocab_size);
    EQ(hidden_size);
    EQ(num_hidden_layers);
    EQ(num_attention_heads);
    EQ(num_key_value_heads);
    EQ(head_dim);
    EQ(rms_norm_eps);
    EQ(rope_theta);
    EQ(partial_rotary_factor);
    EQ(rope_scaling.type);
    EQ(rope_scaling.factor);
    EQ(rope_scaling.original_max_position_embeddings);
    EQ(rope_scaling.beta_fast);
    EQ(rope_scaling.beta_slow);
    EQ(rope_scaling.attention_factor);
    EQ(max_position_embeddings);
    EQ(num_experts);
    EQ(num_experts_per_tok);
    EQ(moe_intermediate_size);
    EQ(shared_expert_intermediate_size);
    EQ(intermediate_size);
    EQ(norm_topk_prob);
    EQ(router_aux_loss_coef);
    EQ(router_z_loss_coef);
    EQ(tie_word_embeddings);
    EQ(initializer_range);
    EQ(attn_output_gate);
    for (int l = 0; l < SL_MAX_LAYERS; l++) EQ(dense_layer[l]);
    return true;
}

static bool config_eq(const sl_config *a, const sl_config *b) {
    if (!model_eq(&a->model, &b->model)) return false;
    EQ(train.seq_len);
    EQ(train.micro_batch_size);
    EQ(train.global_batch_tokens);
    EQ(train.max_steps);
    EQ(train.lr);
    EQ(train.min_lr);
    EQ(train.warmup_steps);
    EQ(train.schedule);
    EQ(train.decay_fraction);
    EQ(train.beta1);
    EQ(train.beta2);
    EQ(train.eps);
    EQ(train.weight_decay);
    EQ(train.grad_clip);
    EQ(train.seed);
    EQ(train.eval_every);
    EQ(train.eval_tokens);
    EQ(train.log_every);
    EQ(train.save_every);
    EQS(train.out_dir);
    EQS(train.metrics_file);
    EQ(data.n_train);
    for (int i = 0; i < a->data.n_train; i++) {
        EQS(data.train[i].path);
        EQ(data.train[i].weight);
    }
    EQS(data.eval_path);
    EQ(data.seed);
    EQ(data.prefetch);
    EQ(parallel.expert_parallel);
    EQ(parallel.zero1);
    EQ(parallel.capacity_factor);
    EQS(backend.name);
    EQ(backend.threads);
    EQ(backend.deterministic);
    EQS(attention.kernel);
    return true;
}

/* ---- defaults ---------------------------------------------------------------------------- */

static void test_defaults(void) {
    sl_config c;
    sl_config_defaults(&c);
    CHECK(c.train.beta1 == 0.9 && c.train.beta2 == 0.95, "default betas");
    CHECK(c.train.eps == 1e-8 && c.train.weight_decay == 0.1 && c.train.grad_clip == 1.0,
          "default eps / weight decay / clip");
    CHECK(c.train.schedule == SL_LR_COSINE, "default schedule cosine");
    CHECK(strcmp(c.train.out_dir, "runs/default") == 0, "default out_dir");
    CHECK(strcmp(c.train.metrics_file, "runs/default/metrics.jsonl") == 0, "default metrics_file");
    CHECK(c.model.rms_norm_eps == 1e-6 && c.model.rope_theta == 10000, "default eps / theta");
    CHECK(c.model.initializer_range == 0.02, "default init range");
    CHECK(c.model.attn_output_gate == SL_GATE_ELEMENTWISE, "default gate elementwise");
    CHECK(c.model.norm_topk_prob, "default norm_topk_prob");
    CHECK(c.model.rope_scaling.type == SL_ROPE_DEFAULT && c.model.rope_scaling.beta_fast == 32 &&
              c.model.rope_scaling.beta_slow == 1,
          "default rope scaling");
    CHECK(c.model.partial_rotary_factor == 1.0, "default partial_rotary_factor");
    CHECK(strcmp(c.backend.name, "cpu") == 0 && c.parallel.expert_parallel == 1,
          "default backend / EP");
    CHECK(strcmp(c.train.precision, "auto") == 0 && sl_config_compute_dtype(&c) == SL_F32,
          "default precision: auto, fp32 on the CPU");
    snprintf(c.backend.name, sizeof c.backend.name, "cuda");
    CHECK(sl_config_compute_dtype(&c) == SL_BF16, "precision auto is bf16 on CUDA");
    snprintf(c.train.precision, sizeof c.train.precision, "fp32");
    CHECK(sl_config_compute_dtype(&c) == SL_F32, "precision fp32 on CUDA");
    CHECK(c.backend.deterministic, "deterministic kernels by default");
    CHECK(strcmp(c.train.recompute, "none") == 0, "default recompute: none");
    CHECK(strcmp(c.train.defer_expert_wgrad, "auto") == 0, "default defer_expert_wgrad: auto");
    CHECK(strcmp(c.attention.kernel, "auto") == 0, "default attention kernel: auto");
    sl_config_defaults(&c);

    /* A minimal file: only the four required model keys; everything else defaults or derives. */
    char err[512];
    const char *min = "{\"model\": {\"vocab_size\": 100, \"hidden_size\": 64, "
                      "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
                      "\"intermediate_size\": 128}}";
    int rc = sl_config_parse(min, "min.json", &c, err, sizeof err);
    CHECK(rc == 0, "minimal config: %s", err);
    CHECK(c.model.num_key_value_heads == 4, "num_key_value_heads defaults to the head count");
    CHECK(c.model.head_dim == 16, "head_dim defaults to hidden / heads, got %d", c.model.head_dim);
    CHECK(c.model.num_experts == 0, "dense by default");
    CHECK(c.train.global_batch_tokens == (int64_t)c.train.seq_len * c.train.micro_batch_size,
          "global_batch_tokens defaults to one micro-batch");
    CHECK(strcmp(c.path, "min.json") == 0, "path records the name");
}

/* ---- shipped configs --------------------------------------------------------------------- */

static void test_shipped(void) {
    sl_config c;
    if (load("configs/tiny.json", &c)) {
        const sl_model_config *m = &c.model;
        CHECK(m->vocab_size == 257 && m->hidden_size == 128 && m->num_hidden_layers == 4,
              "tiny sizes");
        CHECK(m->num_attention_heads == 4 && m->num_key_value_heads == 2 && m->head_dim == 32,
              "tiny heads");
        CHECK(m->num_experts == 128 && m->num_experts_per_tok == 8 &&
                  m->moe_intermediate_size == 32 && m->shared_expert_intermediate_size == 0,
              "tiny experts");
        CHECK(m->attn_output_gate == SL_GATE_ELEMENTWISE, "tiny gate");
        CHECK(m->router_aux_loss_coef == 1e-2 && m->max_position_embeddings == 4096,
              "tiny aux / max positions");
        for (int l = 0; l < 4; l++) CHECK(sl_layer_is_moe(m, l), "tiny layer %d is MoE", l);
        CHECK(c.train.seq_len == 256 && c.train.micro_batch_size == 8 &&
                  c.train.global_batch_tokens == 4096,
              "tiny batch");
        CHECK(c.train.lr == 3e-3 && c.train.min_lr == 3e-4 && c.train.warmup_steps == 30 &&
                  c.train.schedule == SL_LR_COSINE && c.train.max_steps == 300 &&
                  c.train.eval_every == 50,
              "tiny schedule");
        CHECK(c.data.n_train == 1 && strcmp(c.data.train[0].path, "data/kjv/train") == 0 &&
                  c.data.train[0].weight == 1.0,
              "tiny data.train");
        CHECK(strcmp(c.data.eval_path, "data/kjv/eval") == 0, "tiny data.eval");
        CHECK(strcmp(c.backend.name, "cpu") == 0 && c.backend.threads == 2, "tiny backend");
        CHECK(strcmp(c.train.metrics_file, "runs/tiny/metrics.jsonl") == 0,
              "tiny metrics_file derived from out_dir: %s", c.train.metrics_file);
    }
    if (load("configs/qwen-gated-15a2b.json", &c)) {
        const sl_model_config *m = &c.model;
        CHECK(m->num_hidden_layers == 24 && m->hidden_size == 2048 && m->vocab_size == 151936,
              "15A2B sizes");
        CHECK(m->num_attention_heads == 32 && m->num_key_value_heads == 4 && m->head_dim == 128,
              "15A2B heads");
        CHECK(m->num_experts == 128 && m->num_experts_per_tok == 8 &&
                  m->moe_intermediate_size == 768,
              "15A2B experts");
        CHECK(!m->tie_word_embeddings && m->norm_topk_prob && m->rope_theta == 10000 &&
                  m->attn_output_gate == SL_GATE_ELEMENTWISE &&
                  m->rope_scaling.type == SL_ROPE_DEFAULT,
              "15A2B flags");
        CHECK(c.train.seq_len == 4096 && c.train.global_batch_tokens == 1024LL * 4096,
              "15A2B batch: 1024 sequences of 4096");
        CHECK(c.train.warmup_steps == 1000 && c.train.lr == 2e-3 && c.train.min_lr == 3e-5 &&
                  c.train.schedule == SL_LR_COSINE && c.train.max_steps == 100000,
              "15A2B schedule");
        CHECK(c.train.beta1 == 0.9 && c.train.beta2 == 0.95 && c.train.weight_decay == 0.1 &&
                  c.train.grad_clip == 1.0,
              "15A2B AdamW");
        CHECK(strcmp(c.backend.name, "cuda") == 0 && c.parallel.expert_parallel == 8,
              "15A2B backend / EP");
    }
    if (load("configs/dense-1.7b.json", &c)) {
        const sl_model_config *m = &c.model;
        CHECK(m->num_hidden_layers == 28 && m->hidden_size == 2048 && m->vocab_size == 151936,
              "1.7B sizes");
        CHECK(m->num_attention_heads == 16 && m->num_key_value_heads == 8 && m->head_dim == 128,
              "1.7B heads");
        CHECK(m->num_experts == 0 && m->intermediate_size == 6144 && m->tie_word_embeddings &&
                  m->attn_output_gate == SL_GATE_ELEMENTWISE,
              "1.7B dense, tied, gated");
        for (int l = 0; l < 28; l++) CHECK(!sl_layer_is_moe(m, l), "1.7B layer %d dense", l);
    }
    char err[512];
    CHECK(sl_config_load("/nonexistent/x.json", &c, err, sizeof err) != 0 &&
              strstr(err, "/nonexistent/x.json: cannot open") != NULL,
          "missing file: %s", err);
}

/* ---- bad configs ------------------------------------------------------------------------- */

/* A valid base config; each case patches it (section keys replaced, "<delete>" removes). */
static const char *BASE =
    "{\"model\": {\"vocab_size\": 257, \"hidden_size\": 64, \"num_hidden_layers\": 4,"
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 16,"
    " \"num_experts\": 8, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32,"
    " \"max_position_embeddings\": 1024},"
    " \"training\": {\"seq_len\": 128, \"micro_batch_size\": 2, \"global_batch_tokens\": 1024,"
    " \"max_steps\": 100, \"warmup_steps\": 10, \"lr\": 1e-3, \"min_lr\": 1e-4},"
    " \"data\": {\"train\": \"a.shard\", \"eval\": \"b.shard\"},"
    " \"parallel\": {\"expert_parallel\": 2},"
    " \"backend\": {\"name\": \"cpu\"}}";

static char *patched(const char *patch) {
    cJSON *base = cJSON_Parse(BASE), *p = cJSON_Parse(patch);
    if (!base || !p) {
        CHECK(false, "test bug: patch does not parse: %s", patch);
        cJSON_Delete(base), cJSON_Delete(p);
        return NULL;
    }
    for (cJSON *s = p->child; s; s = s->next) {
        cJSON *bs = cJSON_GetObjectItemCaseSensitive(base, s->string);
        if (!bs || !cJSON_IsObject(s) || !cJSON_IsObject(bs)) {
            if (bs) cJSON_DeleteItemFromObjectCaseSensitive(base, s->string);
            cJSON_AddItemToObject(base, s->string, cJSON_Duplicate(s, 1));
            continue;
        }
        for (cJSON *k = s->child; k; k = k->next) {
            cJSON_DeleteItemFromObjectCaseSensitive(bs, k->string);
            if (!(cJSON_IsString(k) && strcmp(k->valuestring, "<delete>") == 0))
                cJSON_AddItemToObject(bs, k->string, cJSON_Duplicate(k, 1));
        }
    }
    char *out = cJSON_PrintUnformatted(base);
    cJSON_Delete(base), cJSON_Delete(p);
    return out;
}

typedef struct {
    const char *json; /* a patch of BASE, or the whole text when raw */
    bool raw;
    const char *path;   /* the key path the message must name ("" for the file itself) */
    const char *reason; /* a fragment of the reason */
} bad_case;

static void expect_failure(const char *json, const char *path, const char *reason,
                           const char *label) {
    sl_config c;
    sl_config_defaults(&c);
    char err[1024] = "", want[512];
    if (path[0])
        snprintf(want, sizeof want, "bad.json: %s: ", path);
    else
        snprintf(want, sizeof want, "bad.json: ");
    int rc = sl_config_parse(json, "bad.json", &c, err, sizeof err);
    CHECK(rc != 0, "%s: accepted, expected an error at %s", label, path);
    if (rc == 0) return;
    CHECK(strncmp(err, want, strlen(want)) == 0, "%s: message \"%s\" does not start with \"%s\"",
          label, err, want);
    CHECK(strstr(err, reason) != NULL, "%s: message \"%s\" lacks \"%s\"", label, err, reason);
}

static void test_bad_configs(void) {
    static const bad_case cases[] = {
        /* structure, unknown keys and JSON types */
        {"{\"foo\": {}}", 0, "foo", "unknown section"},
        {"{\"model\": {\"hiden_size\": 64}}", 0, "model.hiden_size",
         "unknown key (did you mean \"hidden_size\"?)"},
        {"{\"model\": 3}", 0, "model", "expected an object"},
        {"{\"training\": {\"lr\": \"fast\"}}", 0, "training.lr",
         "expected a number, got the string"},
        {"{\"model\": {\"hidden_size\": 64.5}}", 0, "model.hidden_size",
         "expected an integer, got 64.5"},
        {"{\"model\": {\"num_experts\": true}}", 0, "model.num_experts", "expected an integer"},
        {"{\"model\": {\"tie_word_embeddings\": 1}}", 0, "model.tie_word_embeddings",
         "expected true or false"},
        {"{\"model\": {\"hidden_size\": 1e12}}", 0, "model.hidden_size", "out of range"},
        /* precision: known names only; bf16 needs a backend that computes in it */
        {"{\"training\": {\"recompute\": \"full\"}}", 0, "training.recompute",
         "expected \"none\", \"attention\" or \"layer\", got \"full\""},
        {"{\"training\": {\"defer_expert_wgrad\": \"yes\"}}", 0, "training.defer_expert_wgrad",
         "expected \"auto\", \"on\" or \"off\", got \"yes\""},
        {"{\"training\": {\"defer_expert_wgrad\": \"on\", \"recompute\": \"layer\"}}", 0,
         "training.defer_expert_wgrad", "recompute \"layer\" shares one set between the layers"},
        {"{\"training\": {\"precision\": \"fp16\"}}", 0, "training.precision",
         "unknown precision \"fp16\""},
        {"{\"training\": {\"precision\": \"bf16\"}}", 0, "training.precision",
         "needs backend.name = \"cuda\""},
        {"{\"model\": {\"vocab_size\": \"<delete>\"}}", 0, "model.vocab_size",
         "required key missing"},
        {"{\"model\": {\"vocab_size\": 257, \"vocab_size\": 258}}", 1, "model.vocab_size",
         "duplicate key"},
        {"{\"model\": {\"vocab_size\": 257,}}", 1, "", "invalid JSON at line 1"},
        {"[1, 2]", 1, "", "the top level must be an object"},
        {"{\"training\": {}}", 1, "model", "required section missing"},
        {"{\"parallel\": {\"zero1\": \"yes\"}}", 0, "parallel.zero1", "expected true or false"},
        {"{\"data\": {\"eval\": 5}}", 0, "data.eval", "expected a string"},
        /* model sizes */
        {"{\"model\": {\"hidden_size\": 0}}", 0, "model.hidden_size", "must be positive, got 0"},
        {"{\"model\": {\"vocab_size\": -1}}", 0, "model.vocab_size", "must be positive"},
        {"{\"model\": {\"num_hidden_layers\": 300}}", 0, "model.num_hidden_layers",
         "exceeds the supported maximum 256"},
        {"{\"model\": {\"num_key_value_heads\": 3}}", 0, "model.num_key_value_heads",
         "3 does not divide num_attention_heads = 4"},
        {"{\"model\": {\"head_dim\": 15}}", 0, "model.head_dim", "15 is odd"},
        {"{\"model\": {\"head_dim\": \"<delete>\", \"hidden_size\": 66}}", 0, "model.head_dim",
         "missing, and hidden_size = 66"},
        {"{\"model\": {\"rms_norm_eps\": 0}}", 0, "model.rms_norm_eps", "must be > 0"},
        {"{\"model\": {\"rope_theta\": 1}}", 0, "model.rope_theta", "must be > 1"},
        {"{\"model\": {\"initializer_range\": 0}}", 0, "model.initializer_range", "must be > 0"},
        {"{\"model\": {\"router_aux_loss_coef\": -1}}", 0, "model.router_aux_loss_coef",
         "must be >= 0"},
        {"{\"model\": {\"partial_rotary_factor\": 0}}", 0, "model.partial_rotary_factor",
         "must be in (0, 1]"},
        {"{\"model\": {\"partial_rotary_factor\": 1.5}}", 0, "model.partial_rotary_factor",
         "must be in (0, 1]"},
        {"{\"model\": {\"partial_rotary_factor\": 0.1875}}", 0, "model.partial_rotary_factor",
         "= 3 must be even"},
        {"{\"model\": {\"partial_rotary_factor\": 0.3}}", 0, "model.partial_rotary_factor",
         "is not an integer"},
        {"{\"model\": {\"max_position_embeddings\": 0}}", 0, "model.max_position_embeddings",
         "must be positive"},
        /* experts */
        {"{\"model\": {\"num_experts\": -1}}", 0, "model.num_experts", "must be >= 0"},
        {"{\"model\": {\"num_experts_per_tok\": 9}}", 0, "model.num_experts_per_tok",
         "9 exceeds num_experts = 8"},
        {"{\"model\": {\"num_experts_per_tok\": 0}}", 0, "model.num_experts_per_tok",
         "must be >= 1 when num_experts = 8"},
        {"{\"model\": {\"num_experts_per_tok\": \"<delete>\"}}", 0, "model.num_experts_per_tok",
         "required key missing"},
        {"{\"model\": {\"moe_intermediate_size\": \"<delete>\"}}", 0, "model.moe_intermediate_size",
         "required key missing"},
        {"{\"model\": {\"moe_intermediate_size\": 0}}", 0, "model.moe_intermediate_size",
         "must be positive when num_experts = 8"},
        {"{\"model\": {\"shared_expert_intermediate_size\": -4}}", 0,
         "model.shared_expert_intermediate_size", "must be >= 0"},
        {"{\"model\": {\"decoder_sparse_step\": 0}}", 0, "model.decoder_sparse_step",
         "must be >= 1"},
        /* dense layers */
        {"{\"model\": {\"mlp_only_layers\": [0]}}", 0, "model.intermediate_size",
         "layer 0 is a dense FFN layer"},
        {"{\"model\": {\"mlp_only_layers\": [1], \"intermediate_size\": 0}}", 0,
         "model.intermediate_size", "must be positive: layer 1 is a dense FFN layer"},
        {"{\"model\": {\"num_experts\": 0, \"intermediate_size\": 0}, \"parallel\": "
         "{\"expert_parallel\": 1}}",
         0, "model.intermediate_size", "dense model"},
        {"{\"model\": {\"mlp_only_layers\": [4], \"intermediate_size\": 128}}", 0,
         "model.mlp_only_layers", "layer 4 is out of range [0, num_hidden_layers = 4)"},
        {"{\"model\": {\"mlp_only_layers\": [-1]}}", 0, "model.mlp_only_layers[0]", "out of range"},
        {"{\"model\": {\"mlp_only_layers\": [1, 1], \"intermediate_size\": 128}}", 0,
         "model.mlp_only_layers[1]", "listed twice"},
        {"{\"model\": {\"mlp_only_layers\": \"0\"}}", 0, "model.mlp_only_layers",
         "expected an array of layer indices"},
        /* rope scaling */
        {"{\"model\": {\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 1.0, "
         "\"original_max_position_embeddings\": 256}}}",
         0, "model.rope_scaling.factor", "must be > 1 for yarn"},
        {"{\"model\": {\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4}}}", 0,
         "model.rope_scaling.original_max_position_embeddings", "required key missing"},
        {"{\"model\": {\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2}}}", 0,
         "model.rope_scaling.rope_type", "unsupported rope type"},
        {"{\"model\": {\"rope_scaling\": {\"factor\": 2}}}", 0, "model.rope_scaling.rope_type",
         "required key missing"},
        {"{\"model\": {\"rope_scaling\": {\"rope_type\": \"default\", \"factor\": 2}}}", 0,
         "model.rope_scaling.factor", "only used with rope_type \"yarn\""},
        {"{\"model\": {\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4, "
         "\"original_max_position_embeddings\": 256, \"beta_fast\": 1, \"beta_slow\": 2}}}",
         0, "model.rope_scaling.beta_fast", "must exceed beta_slow = 2"},
        {"{\"model\": {\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4, "
         "\"original_max_position_embeddings\": 256, \"scale\": 2}}}",
         0, "model.rope_scaling.scale", "unknown key"},
        {"{\"model\": {\"rope_scaling\": {\"rope_type\": \"yarn\", \"type\": \"default\", "
         "\"factor\": 4, \"original_max_position_embeddings\": 256}}}",
         0, "model.rope_scaling.type", "disagrees with rope_type"},
        {"{\"model\": {\"rope_scaling\": 4}}", 0, "model.rope_scaling",
         "expected null or an object"},
        /* informational HF keys */
        {"{\"model\": {\"hidden_act\": \"gelu\"}}", 0, "model.hidden_act", "only \"silu\""},
        {"{\"model\": {\"attention_bias\": true}}", 0, "model.attention_bias", "only false"},
        {"{\"model\": {\"attn_output_gate\": \"sometimes\"}}", 0, "model.attn_output_gate",
         "expected \"elementwise\", \"headwise\" or \"none\""},
        {"{\"model\": {\"architectures\": [\"Qwen3MoeForCausalLM\", 3]}}", 0,
         "model.architectures[1]", "expected a string"},
        {"{\"model\": {\"model_type\": 5}}", 0, "model.model_type", "expected a string"},
        /* training */
        {"{\"training\": {\"lr\": -1}}", 0, "training.lr", "must be >= 0"},
        {"{\"training\": {\"min_lr\": 0.1}}", 0, "training.min_lr", "exceeds lr = 0.001"},
        {"{\"training\": {\"warmup_steps\": 101}}", 0, "training.warmup_steps",
         "101 exceeds max_steps = 100"},
        {"{\"training\": {\"max_steps\": 0}}", 0, "training.max_steps", "must be positive"},
        {"{\"training\": {\"beta1\": 1.0}}", 0, "training.beta1", "must be in [0, 1)"},
        {"{\"training\": {\"beta2\": -0.1}}", 0, "training.beta2", "must be in [0, 1)"},
        {"{\"training\": {\"eps\": 0}}", 0, "training.eps", "must be > 0"},
        {"{\"training\": {\"grad_clip\": -1}}", 0, "training.grad_clip", "must be >= 0"},
        {"{\"training\": {\"weight_decay\": -0.1}}", 0, "training.weight_decay", "must be >= 0"},
        {"{\"training\": {\"global_batch_tokens\": 1000}}", 0, "training.global_batch_tokens",
         "1000 is not a multiple of seq_len * micro_batch_size = 128 * 2 = 256"},
        {"{\"training\": {\"micro_batch_size\": 0}}", 0, "training.micro_batch_size",
         "must be positive"},
        {"{\"training\": {\"seq_len\": 2048}}", 0, "training.seq_len",
         "2048 exceeds model.max_position_embeddings = 1024"},
        {"{\"training\": {\"schedule\": \"linear\"}}", 0, "training.schedule",
         "expected \"cosine\", \"wsd\" or \"constant\""},
        {"{\"training\": {\"decay_fraction\": 1.5}}", 0, "training.decay_fraction",
         "must be in [0, 1]"},
        {"{\"training\": {\"schedule\": \"wsd\", \"decay_fraction\": 0.95}}", 0,
         "training.decay_fraction", "exceed max_steps = 100"},
        {"{\"training\": {\"seed\": -1}}", 0, "training.seed", "out of range"},
        {"{\"training\": {\"log_every\": 0}}", 0, "training.log_every", "must be positive"},
        {"{\"training\": {\"eval_every\": -5}}", 0, "training.eval_every", "must be >= 0"},
        {"{\"training\": {\"out_dir\": \"\"}}", 0, "training.out_dir", "must not be empty"},
        /* data */
        {"{\"data\": {\"train\": [{\"path\": \"a\", \"weight\": 0}]}}", 0, "data.train[0].weight",
         "must be > 0"},
        {"{\"data\": {\"train\": [{\"path\": \"a\", \"weight\": 1}, {\"path\": \"b\", "
         "\"weight\": -2}]}}",
         0, "data.train[1].weight", "must be > 0, got -2"},
        {"{\"data\": {\"train\": []}}", 0, "data.train", "empty array"},
        {"{\"data\": {\"train\": \"\"}}", 0, "data.train", "empty path"},
        {"{\"data\": {\"train\": [{\"weight\": 1}]}}", 0, "data.train[0].path",
         "required key missing"},
        {"{\"data\": {\"train\": [{\"path\": \"a\", \"wieght\": 1}]}}", 0, "data.train[0].wieght",
         "unknown key (did you mean \"weight\"?)"},
        {"{\"data\": {\"train\": 5}}", 0, "data.train", "expected a path string or an array"},
        {"{\"data\": {\"prefetch\": -1}}", 0, "data.prefetch", "must be >= 0"},
        /* parallel, backend */
        {"{\"parallel\": {\"expert_parallel\": 0}}", 0, "parallel.expert_parallel",
         "must be positive"},
        {"{\"parallel\": {\"expert_parallel\": 3}}", 0, "parallel.expert_parallel",
         "3 does not divide model.num_experts = 8"},
        {"{\"model\": {\"num_experts\": 0, \"intermediate_size\": 128}}", 0,
         "parallel.expert_parallel", "needs an MoE model"},
        {"{\"parallel\": {\"capacity_factor\": -1}}", 0, "parallel.capacity_factor",
         "must be >= 0"},
        {"{\"backend\": {\"name\": \"tpu\"}}", 0, "backend.name", "unknown backend \"tpu\""},
        {"{\"backend\": {\"threads\": -1}}", 0, "backend.threads", "must be >= 0"},
        {"{\"backend\": {\"name\": \"cuda\", \"device\": 0}}", 0, "backend.device", "unknown key"},
        /* attention: the kernel's name, then what the cudnn kernel needs of the rest */
        {"{\"attention\": 3}", 0, "attention", "expected an object"},
        {"{\"attention\": {\"kernal\": \"auto\"}}", 0, "attention.kernal",
         "unknown key (did you mean \"kernel\"?)"},
        {"{\"attention\": {\"kernel\": \"fast\"}}", 0, "attention.kernel",
         "expected \"auto\", \"sluice\" or \"cudnn\", got \"fast\""},
        {"{\"attention\": {\"kernel\": \"mma\"}}", 0, "attention.kernel",
         "expected \"auto\", \"sluice\" or \"cudnn\""},
        {"{\"attention\": {\"kernel\": \"cudnn\"}}", 0, "attention.kernel",
         "\"cudnn\" needs backend.name = \"cuda\" (the cpu backend has one attention kernel"},
        {"{\"attention\": {\"kernel\": \"cudnn\"}, \"backend\": {\"name\": \"cuda\", "
         "\"deterministic\": false}, \"training\": {\"precision\": \"fp32\"}}",
         0, "attention.kernel", "computes in bf16 only"},
        {"{\"attention\": {\"kernel\": \"cudnn\"}, \"backend\": {\"name\": \"cuda\"}, "
         "\"model\": {\"head_dim\": 64}}",
         0, "attention.kernel", "it needs backend.deterministic = false"},
        {"{\"attention\": {\"kernel\": \"cudnn\"}, \"backend\": {\"name\": \"cuda\", "
         "\"deterministic\": false}}",
         0, "attention.kernel", "takes model.head_dim 64 or 128, not 16"},
        {"{\"attention\": {\"kernel\": \"cudnn\"}, \"backend\": {\"name\": \"cuda\", "
         "\"deterministic\": false}, \"model\": {\"head_dim\": 64}, \"training\": "
         "{\"document_mask\": true}}",
         0, "attention.kernel", "no per-document mask"},
    };
    int n = (int)(sizeof cases / sizeof cases[0]);
    CHECK(n >= 25, "catalog has %d cases", n);

    /* The base itself is valid. */
    sl_config c;
    char err[512];
    CHECK(sl_config_parse(BASE, "base.json", &c, err, sizeof err) == 0, "base config: %s", err);

    for (int i = 0; i < n; i++) {
        char label[32];
        snprintf(label, sizeof label, "bad case %d", i);
        char *json = cases[i].raw ? NULL : patched(cases[i].json);
        expect_failure(cases[i].raw ? cases[i].json : json, cases[i].path, cases[i].reason, label);
        free(json);
    }

    /* Strings too long for their buffers, and too many corpora. */
    char *big = malloc(4200), *patch = malloc(4400);
    memset(big, 'a', 2000), big[2000] = '\0';
    snprintf(patch, 4400, "{\"training\": {\"out_dir\": \"%s\"}}", big);
    char *json = patched(patch);
    expect_failure(json, "training.out_dir", "string too long (2000 bytes, at most 1023)",
                   "long out_dir");
    free(json);
    snprintf(patch, 4400, "{\"backend\": {\"name\": \"%.40s\"}}", big);
    json = patched(patch);
    expect_failure(json, "backend.name", "string too long", "long backend name");
    free(json);
    snprintf(patch, 4400, "{\"attention\": {\"kernel\": \"%.40s\"}}", big);
    json = patched(patch);
    expect_failure(json, "attention.kernel", "string too long", "long attention kernel");
    free(json);
    snprintf(patch, 4400, "{\"data\": {\"train\": [{\"path\": \"%.1030s\"}]}}", big);
    json = patched(patch);
    expect_failure(json, "data.train[0].path", "string too long", "long corpus path");
    free(json);
    strcpy(patch, "{\"data\": {\"train\": [");
    for (int i = 0; i < SL_MAX_CORPORA + 1; i++)
        snprintf(patch + strlen(patch), 4400 - strlen(patch), "%s{\"path\": \"c%d\"}",
                 i ? ", " : "", i);
    strcat(patch, "]}}");
    json = patched(patch);
    expect_failure(json, "data.train", "17 corpora, at most 16", "too many corpora");
    free(json), free(big), free(patch);
}

static void test_data_forms(void) {
    sl_config c;
    char err[512];
    char *json = patched("{\"data\": {\"train\": [{\"path\": \"a.shard\", \"weight\": 3}, "
                         "{\"path\": \"b.shard\"}]}}");
    CHECK(sl_config_parse(json, "mix.json", &c, err, sizeof err) == 0, "weighted mix: %s", err);
    CHECK(c.data.n_train == 2 && strcmp(c.data.train[0].path, "a.shard") == 0 &&
              c.data.train[0].weight == 3 && strcmp(c.data.train[1].path, "b.shard") == 0 &&
              c.data.train[1].weight == 1.0,
          "weighted mix parsed (weight defaults to 1)");
    free(json);
    /* decoder_sparse_step 2: layers 0 and 2 dense, 1 and 3 MoE (HF's (l+1) % step rule). */
    json = patched("{\"model\": {\"decoder_sparse_step\": 2, \"intermediate_size\": 96}}");
    CHECK(sl_config_parse(json, "sparse.json", &c, err, sizeof err) == 0, "sparse step: %s", err);
    CHECK(!sl_layer_is_moe(&c.model, 0) && sl_layer_is_moe(&c.model, 1) &&
              !sl_layer_is_moe(&c.model, 2) && sl_layer_is_moe(&c.model, 3),
          "decoder_sparse_step folded into dense layers");
    free(json);
}

/* ---- --set overrides --------------------------------------------------------------------- */

/* Overrides are validated together: a later one may repair what an earlier one alone would
 * break, in either order, and the result is validated once. */
static void test_set_order(void) {
    sl_config c, before;
    char err[512];
    if (!load("configs/tiny.json", &c)) return;
    before = c;
    const char *fwd[] = {"training.max_steps=10", "training.warmup_steps=2"};
    const char *rev[] = {"training.warmup_steps=2", "training.max_steps=10"};
    CHECK(c.train.warmup_steps > 10, "tiny.json must have warmup_steps > 10 for this test");
    CHECK(sl_config_apply_sets(&c, fwd, 2, err, sizeof err) == 0, "max_steps then warmup: %s", err);
    CHECK(c.train.max_steps == 10 && c.train.warmup_steps == 2, "both overrides applied");
    c = before;
    CHECK(sl_config_apply_sets(&c, rev, 2, err, sizeof err) == 0, "warmup then max_steps: %s", err);
    CHECK(c.train.max_steps == 10 && c.train.warmup_steps == 2, "both overrides applied");
    /* the final state is still validated, naming the key; cfg is left unchanged */
    c = before;
    const char *bad[] = {"training.warmup_steps=2", "training.max_steps=1"};
    CHECK(sl_config_apply_sets(&c, bad, 2, err, sizeof err) != 0 &&
              strstr(err, "training.warmup_steps") && strstr(err, "max_steps = 1"),
          "warmup 2 > max_steps 1 must fail naming the key: %s", err);
    CHECK(memcmp(&c, &before, sizeof c) == 0, "a failed set leaves the config unchanged");
    /* a malformed override is named in the message */
    const char *malformed[] = {"training.lr=1e-3", "training.max_steps"};
    CHECK(sl_config_apply_sets(&c, malformed, 2, err, sizeof err) != 0 &&
              strstr(err, "--set training.max_steps") && strstr(err, "section.key=value"),
          "malformed override: %s", err);
}

static void test_set(void) {
    sl_config c, before;
    char err[512];
    if (!load("configs/tiny.json", &c)) return;

    CHECK(sl_config_set(&c, "training.lr=1e-3", err, sizeof err) == 0, "set lr: %s", err);
    CHECK(c.train.lr == 1e-3, "lr set");
    CHECK(sl_config_set(&c, " training.min_lr = 5e-5 ", err, sizeof err) == 0, "spaces: %s", err);
    CHECK(c.train.min_lr == 5e-5, "min_lr set");
    CHECK(sl_config_set(&c, "data.train=\"x.shard\"", err, sizeof err) == 0, "quoted: %s", err);
    CHECK(c.data.n_train == 1 && strcmp(c.data.train[0].path, "x.shard") == 0, "quoted string");
    CHECK(sl_config_set(&c, "data.train=y.shard", err, sizeof err) == 0, "bare: %s", err);
    CHECK(strcmp(c.data.train[0].path, "y.shard") == 0, "bare string");
    CHECK(sl_config_set(&c, "data.train=[{\"path\": \"p\", \"weight\": 2}, {\"path\": \"q\"}]", err,
                        sizeof err) == 0,
          "array: %s", err);
    CHECK(c.data.n_train == 2 && c.data.train[0].weight == 2, "corpus list set");
    CHECK(sl_config_set(&c, "training.out_dir=2024", err, sizeof err) == 0, "number text: %s", err);
    CHECK(strcmp(c.train.out_dir, "2024") == 0, "a number given for a string key is its text");
    CHECK(strcmp(c.train.metrics_file, "2024/metrics.jsonl") == 0,
          "metrics_file follows out_dir: %s", c.train.metrics_file);
    CHECK(sl_config_set(&c, "training.metrics_file=m.jsonl", err, sizeof err) == 0 &&
              sl_config_set(&c, "training.out_dir=runs/z", err, sizeof err) == 0 &&
              strcmp(c.train.metrics_file, "m.jsonl") == 0,
          "an explicit metrics_file stays");
    CHECK(sl_config_set(&c, "training.seed=42", err, sizeof err) == 0 && c.train.seed == 42,
          "seed: %s", err);
    CHECK(sl_config_set(&c, "backend.name=cuda", err, sizeof err) == 0 &&
              strcmp(c.backend.name, "cuda") == 0,
          "backend: %s", err);
    CHECK(sl_config_set(&c, "training.schedule=wsd", err, sizeof err) == 0 &&
              c.train.schedule == SL_LR_WSD,
          "schedule: %s", err);
    CHECK(sl_config_set(&c,
                        "model.rope_scaling={\"rope_type\": \"yarn\", \"factor\": 4, "
                        "\"original_max_position_embeddings\": 1024}",
                        err, sizeof err) == 0,
          "yarn object: %s", err);
    CHECK(c.model.rope_scaling.type == SL_ROPE_YARN && c.model.rope_scaling.factor == 4 &&
              c.model.rope_scaling.original_max_position_embeddings == 1024 &&
              c.model.rope_scaling.beta_fast == 32,
          "yarn set");
    CHECK(sl_config_set(&c, "model.rope_scaling.factor=8", err, sizeof err) == 0 &&
              c.model.rope_scaling.factor == 8,
          "nested key: %s", err);
    CHECK(sl_config_set(&c, "model.rope_scaling=null", err, sizeof err) == 0 &&
              c.model.rope_scaling.type == SL_ROPE_DEFAULT,
          "rope_scaling null: %s", err);
    CHECK(sl_config_set(&c, "model.intermediate_size=96", err, sizeof err) == 0 &&
              sl_config_set(&c, "model.mlp_only_layers=[0, 3]", err, sizeof err) == 0,
          "mlp_only_layers: %s", err);
    CHECK(!sl_layer_is_moe(&c.model, 0) && sl_layer_is_moe(&c.model, 1) &&
              !sl_layer_is_moe(&c.model, 3),
          "mlp_only_layers set");
    CHECK(strstr(c.path, "configs/tiny.json") != NULL, "path kept: %s", c.path);

    /* Invalid overrides fail with the key path and leave cfg untouched. */
    static const struct {
        const char *set, *msg;
    } bad[] = {
        {"training.lr=abc", "tiny.json (--set): training.lr: expected a number, got the string"},
        {"training.lr=-1", "tiny.json (--set): training.lr: must be >= 0"},
        {"training.lrr=1", "tiny.json (--set): training.lrr: unknown key (did you mean \"lr\"?)"},
        {"training.lr", "is not of the form section.key=value"},
        {"=3", "is not a key path"},
        {"training..lr=3", "is not a key path"},
        {"trainer.lr=1", "tiny.json (--set): trainer: unknown section"},
        {"training.warmup_steps=1000", "training.warmup_steps: 1000 exceeds max_steps = 300"},
        {"model.num_key_value_heads=3", "model.num_key_value_heads: 3 does not divide"},
        {"model.num_hidden_layers=2", "model.mlp_only_layers: layer 3 is out of range"},
        {"model.rope_scaling.factor=2", "model.rope_scaling: is not an object"},
        {"model.hidden_size=12.5", "model.hidden_size: expected an integer, got 12.5"},
        {"backend.name=tpu", "backend.name: unknown backend"},
        {"parallel.expert_parallel=3", "parallel.expert_parallel: 3 does not divide"},
        {"data.train=[]", "data.train: empty array"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memcpy(&before, &c, sizeof c);
        err[0] = '\0';
        int rc = sl_config_set(&c, bad[i].set, err, sizeof err);
        CHECK(rc != 0, "--set %s accepted", bad[i].set);
        CHECK(strstr(err, bad[i].msg) != NULL, "--set %s: message \"%s\" lacks \"%s\"", bad[i].set,
              err, bad[i].msg);
        CHECK(memcmp(&before, &c, sizeof c) == 0, "--set %s modified cfg on failure", bad[i].set);
    }

    /* sl_config_validate on a struct changed in code. */
    c.train.grad_clip = -2;
    CHECK(sl_config_validate(&c, err, sizeof err) != 0 &&
              strstr(err, "tiny.json: training.grad_clip: must be >= 0") != NULL,
          "validate: %s", err);
}

/* attention.kernel: the accepted values, what "cudnn" needs, --set, and the round trip. */
static void test_attention_kernel(void) {
    sl_config c, r;
    char err[1024];
    CHECK(sl_config_parse(BASE, "base.json", &c, err, sizeof err) == 0, "base: %s", err);
    CHECK(strcmp(c.attention.kernel, "auto") == 0, "absent attention section: kernel auto");
    CHECK(sl_config_set(&c, "attention.kernel=sluice", err, sizeof err) == 0 &&
              strcmp(c.attention.kernel, "sluice") == 0,
          "sluice on the cpu backend: %s", err);
    CHECK(sl_config_set(&c, "attention.kernel=cudnn", err, sizeof err) != 0 &&
              strstr(err, "attention.kernel: \"cudnn\" needs backend.name = \"cuda\"") != NULL,
          "--set attention.kernel=cudnn on the cpu backend: %s", err);
    /* everything cudnn needs, given in one --set list in any order */
    const char *sets[] = {"attention.kernel=cudnn", "model.head_dim=128", "backend.name=cuda",
                          "backend.deterministic=false"};
    CHECK(sl_config_apply_sets(&c, sets, 4, err, sizeof err) == 0 &&
              strcmp(c.attention.kernel, "cudnn") == 0,
          "cudnn with cuda, bf16, head dim 128, nondeterministic: %s", err);
    char *json = sl_config_to_json(&c);
    CHECK(json && strstr(json, "\"attention\"") && strstr(json, "\"kernel\":") &&
              strstr(json, "\"cudnn\""),
          "to_json writes the attention section");
    CHECK(sl_config_parse(json, "rt.json", &r, err, sizeof err) == 0 && config_eq(&c, &r),
          "attention section round trip: %s", err);
    free(json);
    CHECK(sl_config_set(&c, "training.document_mask=true", err, sizeof err) != 0 &&
              strstr(err, "attention.kernel: \"cudnn\": cuDNN's fused attention has no "
                          "per-document mask") != NULL,
          "document_mask with cudnn: %s", err);
    CHECK(sl_config_set(&c, "backend.deterministic=true", err, sizeof err) != 0 &&
              strstr(err, "backend.deterministic = false") != NULL,
          "deterministic with cudnn: %s", err);
}

/* ---- JSON and Hugging Face round trips ----------------------------------------------------- */

static void test_json_round_trip(void) {
    const char *files[] = {"configs/tiny.json", "configs/qwen-gated-15a2b.json",
                           "configs/dense-1.7b.json"};
    char err[512];
    for (int i = 0; i < 3; i++) {
        sl_config a, b;
        if (!load(files[i], &a)) continue;
        char *json = sl_config_to_json(&a);
        int rc = sl_config_parse(json, a.path, &b, err, sizeof err);
        CHECK(rc == 0, "%s: re-parse of to_json: %s", files[i], err);
        CHECK(rc == 0 && config_eq(&a, &b), "%s: to_json round trip", files[i]);
        free(json);
    }
}

/* training.stages: the shipped schedules, inheritance from the previous stage, the round trip
 * through to_json and inheritance surviving a --set. */
static bool stage_eq(const sl_stage *a, const sl_stage *b) {
    return strcmp(a->name, b->name) == 0 && a->tokens == b->tokens && a->steps == b->steps &&
           a->reset_optimizer == b->reset_optimizer && a->given == b->given &&
           a->train.seq_len == b->train.seq_len && a->train.lr == b->train.lr &&
           a->train.global_batch_tokens == b->train.global_batch_tokens &&
           a->train.eval_tokens == b->train.eval_tokens && model_eq(&a->model, &b->model) &&
           strcmp(a->data.eval_path, b->data.eval_path) == 0;
}

static void test_stages_config(void) {
    sl_config c, r;
    char err[512];
    if (load("configs/tiny-schedule.json", &c)) {
        CHECK(c.stages_given && c.n_stages == 3 && sl_config_stage_count(&c) == 3, "3 stages");
        const sl_stage *p = &c.stages[0], *l = &c.stages[1], *y = &c.stages[2];
        CHECK(strcmp(p->name, "pretrain") == 0 && p->steps == 300 && p->train.seq_len == 256 &&
                  p->model.rope_theta == 1e4,
              "pretrain stage");
        CHECK(l->steps == 80 && l->train.seq_len == 2048 && l->model.rope_theta == 1e6 &&
                  l->train.eval_tokens == c.train.eval_tokens,
              "long stage (eval_tokens inherited)");
        CHECK(y->steps == 0 && y->train.seq_len == 8192 && y->model.rope_theta == 1e6 &&
                  y->model.rope_scaling.type == SL_ROPE_YARN &&
                  y->model.max_position_embeddings == 8192 && y->train.lr == l->train.lr,
              "yarn stage: base and lr from the previous stage, YaRN context %d",
              y->model.max_position_embeddings);
        CHECK(c.train.max_steps == 380, "max_steps follows the stages: %d", c.train.max_steps);
        char *json = sl_config_to_json(&c);
        int rc = sl_config_parse(json, c.path, &r, err, sizeof err);
        CHECK(rc == 0, "tiny-schedule re-parse: %s", err);
        for (int i = 0; rc == 0 && i < 3; i++)
            CHECK(stage_eq(&c.stages[i], &r.stages[i]), "stage %d round trip", i);
        free(json);
        /* an inherited key follows its section; a stage's own value stays */
        r = c;
        rc = sl_config_set(&r, "training.eval_tokens=1000", err, sizeof err);
        CHECK(rc == 0 && r.stages[0].train.eval_tokens == 1000 &&
                  r.stages[1].train.eval_tokens == 1000 && r.stages[2].train.eval_tokens == 65536,
              "--set training.eval_tokens reaches the stages that inherit it: %s", err);
        rc = sl_config_set(&r, "training.max_steps=7", err, sizeof err);
        CHECK(rc != 0 && strstr(err, "training.max_steps: 7, but the stages") != NULL,
              "max_steps disagreeing with the stages: %s", err);
    }
    if (load("configs/qwen-gated-15a2b-schedule.json", &c)) {
        const sl_stage *y = &c.stages[2];
        CHECK(c.n_stages == 3 && c.stages[0].train.seq_len == 4096 &&
                  c.stages[1].train.seq_len == 32768 && c.stages[1].model.rope_theta == 1e6 &&
                  y->train.seq_len == 131072 && y->model.rope_scaling.factor == 4 &&
                  y->model.rope_scaling.original_max_position_embeddings == 32768 &&
                  y->model.max_position_embeddings == 131072 && y->steps == 0,
              "15A2B schedule: 4k at 1e4, 32k at 1e6, YaRN x4 to 128k");
    }
    /* without stages: one implicit stage made from the sections as they are */
    if (load("configs/tiny.json", &c)) {
        sl_stage s;
        c.train.max_steps = 7;
        sl_config_stage_at(&c, 0, &s);
        CHECK(!c.stages_given && sl_config_stage_count(&c) == 1 && s.steps == 7 &&
                  strcmp(s.name, "main") == 0 && s.tokens == 7 * c.train.global_batch_tokens,
              "implicit stage");
    }
}

static void test_hf(void) {
    sl_config c;
    char err[512];
    if (!load("configs/qwen-gated-15a2b.json", &c)) return;
    char *hf = sl_model_config_to_hf_json(&c.model);
    cJSON *j = cJSON_Parse(hf);
    CHECK(j != NULL, "to_hf_json is JSON");
    if (j) {
        const cJSON *v;
        v = cJSON_GetObjectItemCaseSensitive(j, "model_type");
        CHECK(cJSON_IsString(v) && strcmp(v->valuestring, "qwen3_moe") == 0, "model_type");
        v = cJSON_GetObjectItemCaseSensitive(j, "architectures");
        CHECK(cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 &&
                  strcmp(cJSON_GetArrayItem(v, 0)->valuestring, "Qwen3MoeForCausalLM") == 0,
              "architectures");
        v = cJSON_GetObjectItemCaseSensitive(j, "hidden_act");
        CHECK(cJSON_IsString(v) && strcmp(v->valuestring, "silu") == 0, "hidden_act");
        CHECK(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "attention_bias")),
              "attention_bias");
        v = cJSON_GetObjectItemCaseSensitive(j, "decoder_sparse_step");
        CHECK(cJSON_IsNumber(v) && v->valuedouble == 1, "decoder_sparse_step");
        v = cJSON_GetObjectItemCaseSensitive(j, "mlp_only_layers");
        CHECK(cJSON_IsArray(v) && cJSON_GetArraySize(v) == 0, "mlp_only_layers []");
        CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "rope_scaling")),
              "rope_scaling null");
        v = cJSON_GetObjectItemCaseSensitive(j, "attn_output_gate");
        CHECK(cJSON_IsString(v) && strcmp(v->valuestring, "elementwise") == 0, "gate");
        static const char *const keys[] = {"vocab_size",
                                           "hidden_size",
                                           "num_hidden_layers",
                                           "num_attention_heads",
                                           "num_key_value_heads",
                                           "head_dim",
                                           "rms_norm_eps",
                                           "rope_theta",
                                           "partial_rotary_factor",
                                           "max_position_embeddings",
                                           "num_experts",
                                           "num_experts_per_tok",
                                           "moe_intermediate_size",
                                           "shared_expert_intermediate_size",
                                           "intermediate_size",
                                           "norm_topk_prob",
                                           "router_aux_loss_coef",
                                           "router_z_loss_coef",
                                           "tie_word_embeddings",
                                           "initializer_range"};
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
            CHECK(cJSON_GetObjectItemCaseSensitive(j, keys[i]) != NULL, "HF key %s", keys[i]);
        v = cJSON_GetObjectItemCaseSensitive(j, "num_experts");
        CHECK(v && v->valuedouble == 128, "num_experts value");
        cJSON_Delete(j);
    }
    sl_model_config m;
    memset(&m, 0xff, sizeof m);
    CHECK(sl_model_config_from_hf_json(hf, "config.json", &m, err, sizeof err) == 0,
          "from_hf_json: %s", err);
    CHECK(model_eq(&m, &c.model), "HF round trip of the 15A2B model");
    free(hf);

    /* A variant exercising every model field: yarn, dense layers, headwise, shared expert. */
    sl_model_config v = c.model;
    v.rope_scaling.type = SL_ROPE_YARN;
    v.rope_scaling.factor = 4;
    v.rope_scaling.original_max_position_embeddings = 32768;
    v.rope_scaling.attention_factor = 1.25;
    v.rope_theta = 1e6;
    v.max_position_embeddings = 131072;
    v.partial_rotary_factor = 0.5;
    v.dense_layer[0] = v.dense_layer[23] = true;
    v.intermediate_size = 6144;
    v.shared_expert_intermediate_size = 512;
    v.attn_output_gate = SL_GATE_HEADWISE;
    v.tie_word_embeddings = true;
    v.norm_topk_prob = false;
    v.router_z_loss_coef = 1e-3;
    v.rms_norm_eps = 1e-5;
    hf = sl_model_config_to_hf_json(&v);
    CHECK(sl_model_config_from_hf_json(hf, "config.json", &m, err, sizeof err) == 0,
          "from_hf_json variant: %s", err);
    CHECK(model_eq(&m, &v), "HF round trip of the variant");
    free(hf);
    for (int g = 0; g < 3; g++) {
        v.attn_output_gate = g == 0   ? SL_GATE_NONE
                             : g == 1 ? SL_GATE_HEADWISE
                                      : SL_GATE_ELEMENTWISE;
        hf = sl_model_config_to_hf_json(&v);
        CHECK(sl_model_config_from_hf_json(hf, "config.json", &m, err, sizeof err) == 0 &&
                  m.attn_output_gate == v.attn_output_gate,
              "gate %d round trip: %s", g, err);
        free(hf);
    }

    /* A stock-looking HF Qwen3-MoE config: extra keys ignored, no gate key -> none. */
    const char *stock =
        "{\"architectures\": [\"Qwen3MoeForCausalLM\"], \"attention_bias\": false,"
        " \"attention_dropout\": 0.0, \"bos_token_id\": 151643, \"decoder_sparse_step\": 1,"
        " \"eos_token_id\": 151645, \"head_dim\": 128, \"hidden_act\": \"silu\","
        " \"hidden_size\": 2048, \"initializer_range\": 0.02, \"intermediate_size\": 6144,"
        " \"max_position_embeddings\": 40960, \"max_window_layers\": 48, \"mlp_only_layers\": [],"
        " \"model_type\": \"qwen3_moe\", \"moe_intermediate_size\": 768, \"norm_topk_prob\": true,"
        " \"num_attention_heads\": 32, \"num_experts\": 128, \"num_experts_per_tok\": 8,"
        " \"num_hidden_layers\": 48, \"num_key_value_heads\": 4, \"output_router_logits\": false,"
        " \"rms_norm_eps\": 1e-06, \"rope_scaling\": null, \"rope_theta\": 1000000.0,"
        " \"router_aux_loss_coef\": 0.001, \"sliding_window\": null, \"tie_word_embeddings\":"
        " false, \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.51.0\","
        " \"use_cache\": true, \"use_sliding_window\": false, \"vocab_size\": 151936}";
    CHECK(sl_model_config_from_hf_json(stock, "config.json", &m, err, sizeof err) == 0,
          "stock HF config: %s", err);
    CHECK(m.num_hidden_layers == 48 && m.rope_theta == 1e6 && m.num_experts == 128 &&
              m.attn_output_gate == SL_GATE_NONE && m.intermediate_size == 6144,
          "stock HF config values");

    /* Bad HF configs: the message names the top-level key. */
    static const struct {
        const char *json, *msg;
    } bad[] = {
        {"{\"vocab_size\": 10, \"hidden_size\": 64, \"num_hidden_layers\": 2, "
         "\"num_attention_heads\": 4, \"intermediate_size\": 8, \"hidden_act\": \"gelu\"}",
         "config.json: hidden_act: only \"silu\""},
        {"{\"vocab_size\": 10, \"hidden_size\": 64, \"num_hidden_layers\": 2, "
         "\"num_attention_heads\": 4, \"num_key_value_heads\": 3, \"intermediate_size\": 8}",
         "config.json: num_key_value_heads: 3 does not divide num_attention_heads = 4"},
        {"{\"vocab_size\": 10, \"hidden_size\": 64, \"num_hidden_layers\": 2, "
         "\"num_attention_heads\": 4, \"intermediate_size\": 8, \"use_sliding_window\": true}",
         "config.json: use_sliding_window: sliding-window attention is not supported"},
        {"{\"hidden_size\": 64}", "config.json: vocab_size: required key missing"},
        {"{\"vocab_size\": 10, \"hidden_size\": 64, \"num_hidden_layers\": 2, "
         "\"num_attention_heads\": 4, \"intermediate_size\": 8, \"rope_scaling\": "
         "{\"rope_type\": \"llama3\", \"factor\": 8}}",
         "config.json: rope_scaling.rope_type: unsupported rope type"},
        {"not json", "config.json: invalid JSON at line 1, column 1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        CHECK(sl_model_config_from_hf_json(bad[i].json, "config.json", &m, err, sizeof err) != 0,
              "bad HF %zu accepted", i);
        CHECK(strstr(err, bad[i].msg) != NULL, "bad HF %zu: \"%s\" lacks \"%s\"", i, err,
              bad[i].msg);
    }
}

/* ---- parameter and FLOP counts by hand --------------------------------------------------- */

static void test_counts_15a2b(void) {
    sl_config c;
    if (!load("configs/qwen-gated-15a2b.json", &c)) return;
    /* V = 151936, h = 2048, L = 24, H = 32, KV = 4, D = 128, E = 128, k = 8, Im = 768. */
    const int64_t embed = 151936LL * 2048;
    const int64_t lm_head = 151936LL * 2048; /* untied */
    const int64_t final_norm = 2048;
    const int64_t input_norm = 2048, post_attn_norm = 2048;
    const int64_t q_proj = 2048LL * (32 * 128 * 2); /* elementwise gate: [q_h | g_h] per head */
    const int64_t k_proj = 2048LL * (4 * 128);
    const int64_t v_proj = 2048LL * (4 * 128);
    const int64_t q_norm = 128, k_norm = 128;
    const int64_t o_proj = (32LL * 128) * 2048;
    const int64_t router = 2048LL * 128;
    const int64_t one_expert = 2048LL * 768 + 2048LL * 768 + 768LL * 2048; /* gate, up, down */
    const int64_t experts_all = 128 * one_expert;
    const int64_t experts_active = 8 * one_expert;
    const int64_t layer_common =
        input_norm + post_attn_norm + q_proj + k_proj + v_proj + q_norm + k_norm + o_proj + router;
    const int64_t total = embed + lm_head + final_norm + 24 * (layer_common + experts_all);
    const int64_t active = embed + lm_head + final_norm + 24 * (layer_common + experts_active);
    const int64_t matmul =
        24 * (q_proj + k_proj + v_proj + o_proj + router + experts_active) + lm_head;
    const double flops = 6.0 * (double)matmul + 6.0 * 24 * 32 * 128 * 4096.0;

    int64_t t = 0, a = 0;
    sl_model_param_count(&c.model, &t, &a);
    printf("15A2B: total %lld, active %lld, FLOPs/token at 4096: %.0f\n", (long long)t,
           (long long)a, sl_model_flops_per_token(&c.model, 4096));
    CHECK(t == total, "15A2B total %lld, hand count %lld", (long long)t, (long long)total);
    CHECK(a == active, "15A2B active %lld, hand count %lld", (long long)a, (long long)active);
    CHECK(total == 15778553856LL && active == 2189008896LL, "15A2B hand figures");
    double f = sl_model_flops_per_token(&c.model, 4096);
    CHECK(f == flops, "15A2B FLOPs/token %.0f, hand count %.0f", f, flops);
    CHECK(flops == 13682343936.0, "15A2B FLOPs figure");
}

static void test_counts_dense(void) {
    sl_config c;
    if (!load("configs/dense-1.7b.json", &c)) return;
    /* V = 151936, h = 2048, L = 28, H = 16, KV = 8, D = 128, I = 6144, tied. */
    const int64_t embed = 151936LL * 2048; /* shared with lm_head */
    const int64_t lm_head_matmul = 151936LL * 2048;
    const int64_t final_norm = 2048;
    const int64_t input_norm = 2048, post_attn_norm = 2048;
    const int64_t q_proj = 2048LL * (16 * 128 * 2);
    const int64_t k_proj = 2048LL * (8 * 128);
    const int64_t v_proj = 2048LL * (8 * 128);
    const int64_t q_norm = 128, k_norm = 128;
    const int64_t o_proj = (16LL * 128) * 2048;
    const int64_t mlp = 2048LL * 6144 + 2048LL * 6144 + 6144LL * 2048; /* gate, up, down */
    const int64_t layer =
        input_norm + post_attn_norm + q_proj + k_proj + v_proj + q_norm + k_norm + o_proj + mlp;
    const int64_t total = embed + final_norm + 28 * layer;
    const int64_t matmul = 28 * (q_proj + k_proj + v_proj + o_proj + mlp) + lm_head_matmul;
    const double flops = 6.0 * (double)matmul + 6.0 * 28 * 16 * 128 * 4096.0;

    int64_t t = 0, a = 0;
    sl_model_param_count(&c.model, &t, &a);
    printf("1.7B dense: total %lld, active %lld, FLOPs/token at 4096: %.0f\n", (long long)t,
           (long long)a, sl_model_flops_per_token(&c.model, 4096));
    CHECK(t == total && a == total, "1.7B total %lld active %lld, hand count %lld", (long long)t,
          (long long)a, (long long)total);
    CHECK(total == 1838015488LL, "1.7B hand figure");
    double f = sl_model_flops_per_token(&c.model, 4096);
    CHECK(f == flops, "1.7B FLOPs/token %.0f, hand count %.0f", f, flops);
    CHECK(flops == 12436635648.0, "1.7B FLOPs figure");
}

/* Differences between variants of the tiny model, each derived from the formulas. */
static void test_counts_variants(void) {
    sl_config c;
    if (!load("configs/tiny.json", &c)) return;
    const int64_t h = 128, L = 4, H = 4, D = 32, E = 128, k = 8, Im = 32, V = 257;
    sl_model_config m = c.model;
    int64_t t0, a0, t, a;
    sl_model_param_count(&m, &t0, &a0);
    CHECK(t0 - a0 == L * (E - k) * 3 * h * Im, "tiny: total - active = the unselected experts");
    printf("tiny: total %lld, active %lld, FLOPs/token at 256: %.0f\n", (long long)t0,
           (long long)a0, sl_model_flops_per_token(&m, 256));

    m.attn_output_gate = SL_GATE_HEADWISE;
    sl_model_param_count(&m, &t, &a);
    CHECK(t0 - t == L * h * (H * D - H) && a0 - a == t0 - t, "headwise q_proj is HD + H wide");
    m.attn_output_gate = SL_GATE_NONE;
    sl_model_param_count(&m, &t, &a);
    CHECK(t0 - t == L * h * H * D, "no gate: q_proj is HD wide");
    double f_none = sl_model_flops_per_token(&m, 256);
    m.attn_output_gate = SL_GATE_ELEMENTWISE;
    CHECK(sl_model_flops_per_token(&m, 256) - f_none == 6.0 * L * h * H * D,
          "gate FLOPs = 6 * gate weights");

    m.tie_word_embeddings = true;
    sl_model_param_count(&m, &t, &a);
    CHECK(t0 - t == V * h && a0 - a == V * h, "tying removes one V*h");
    CHECK(sl_model_flops_per_token(&m, 256) == sl_model_flops_per_token(&c.model, 256),
          "tying does not change FLOPs (the lm_head matmul stays)");
    m.tie_word_embeddings = false;

    m.shared_expert_intermediate_size = 64;
    sl_model_param_count(&m, &t, &a);
    CHECK(t - t0 == L * (3 * h * 64 + h) && a - a0 == t - t0,
          "shared expert: 3*h*Is + shared_expert_gate h per layer, always active");
    m.shared_expert_intermediate_size = 0;

    m.intermediate_size = 256;
    m.dense_layer[1] = true;
    sl_model_param_count(&m, &t, &a);
    CHECK(t0 - t == (h * E + E * 3 * h * Im) - 3 * h * 256, "a dense layer replaces the MoE");
    CHECK(a0 - a == (h * E + k * 3 * h * Im) - 3 * h * 256, "active with a dense layer");

    /* Attention FLOPs grow linearly in S: 6 * L * H * D per extra position. */
    double f1 = sl_model_flops_per_token(&c.model, 1000),
           f2 = sl_model_flops_per_token(&c.model, 2000);
    CHECK(f2 - f1 == 6.0 * L * H * D * 1000, "attention FLOPs term");
}

/* The LM head's chunks (model/counts.c): the fewest within the byte bound, of equal rows. */
static void test_logits_chunks(void) {
    const int64_t V = 151936;
    CHECK(sl_logits_chunk_rows(4096, V, 2, true) == 4096, "bf16, 4096 tokens: one chunk");
    CHECK(sl_logits_chunk_rows(32768, V, 2, true) == 6554, "bf16, 32768 tokens: 5 of 6554 rows");
    CHECK(sl_logits_chunk_rows(4096, V, 4, true) == 2048, "fp32, 4096 tokens: 2 of 2048 rows");
    for (int64_t t = 1; t <= 70000; t = t * 3 + 1)
        for (int bytes = 2; bytes <= 4; bytes += 2)
            for (int dev = 0; dev < 2; dev++) {
                const int64_t rows = sl_logits_chunk_rows(t, V, bytes, dev);
                const int64_t bound =
                    (dev ? SL_LOGITS_CHUNK_BYTES_DEVICE : SL_LOGITS_CHUNK_BYTES_HOST) / bytes;
                const int64_t chunks = (t + rows - 1) / rows;
                CHECK(rows * V <= bound && rows * V < INT32_MAX, "chunk within the bound");
                CHECK(chunks == (t + bound / V - 1) / (bound / V), "the fewest chunks");
                CHECK(rows * (chunks - 1) < t, "no empty last chunk");
            }
    CHECK(sl_logits_chunk_rows(100, 1 << 30, 4, true) == 1, "a row over the bound: one row");
}

int main(void) {
    test_defaults();
    test_shipped();
    test_bad_configs();
    test_data_forms();
    test_set();
    test_set_order();
    test_json_round_trip();
    test_attention_kernel();
    test_stages_config();
    test_hf();
    test_counts_15a2b();
    test_counts_dense();
    test_counts_variants();
    test_logits_chunks();
    return sl_test_finish("test_config");
}
