/*
 * tests/test_config.c - the configuration module: defaults, the shipped configs, --set
 * overrides, JSON round trips and stages; with tests/test_config_bad.c (a catalog of bad
 * configs, each must fail naming its key path) and tests/test_config_model.c (Hugging Face
 * round trips, parameter / FLOP counts checked against hand arithmetic) and
 * tests/test_config_docs.c (docs/config.md against the keys), one test program.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "model/counts.h"
#include "tests/test_util.h"
#include "tests/test_config.h"
#include "trainer/config.h"

bool tc_load(const char *rel, sl_config *cfg) {
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

bool tc_model_eq(const sl_model_config *a, const sl_model_config *b) {
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

bool tc_config_eq(const sl_config *a, const sl_config *b) {
    if (!tc_model_eq(&a->model, &b->model)) return false;
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
    CHECK(c.train.expert_wgrad_group == 0, "default expert_wgrad_group: 0 (auto)");
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
    if (tc_load("configs/tiny.json", &c)) {
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
    if (tc_load("configs/qwen-gated-15a2b.json", &c)) {
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
    if (tc_load("configs/dense-1.7b.json", &c)) {
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

/* ---- --set overrides --------------------------------------------------------------------- */

/* Overrides are validated together: a later one may repair what an earlier one alone would
 * break, in either order, and the result is validated once. */
static void test_set_order(void) {
    sl_config c, before;
    char err[512];
    if (!tc_load("configs/tiny.json", &c)) return;
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
    if (!tc_load("configs/tiny.json", &c)) return;

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
        {"training.lr", "not of the form section.key=value"},
        {"=3", "is not a path like section.key"},
        {"training..lr=3", "is not a path like section.key"},
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

    /* A malformed override: one message, in the words of the command line, without the
     * config's name (was: "--set training.lr: configs/tiny.json (--set): \"training.lr\" is
     * not of the form section.key=value"); the same from sl_config_set_check, what sluice train
     * checks before it starts (a usage error, exit 2). */
    static const struct {
        const char *set, *msg;
    } malformed[] = {
        {"training.lr", "--set training.lr: not of the form section.key=value (no '=')"},
        {"=3", "--set =3: the key \"\" is not a path like section.key"},
        {" training..lr = 3", "--set  training..lr = 3: the key \"training..lr\" is not a path "
                              "like section.key"},
        {".lr=3", "--set .lr=3: the key \".lr\" is not a path like section.key"},
    };
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
        CHECK(sl_config_set(&c, malformed[i].set, err, sizeof err) != 0 &&
                  strcmp(err, malformed[i].msg) == 0,
              "--set %s: \"%s\", want \"%s\"", malformed[i].set, err, malformed[i].msg);
        CHECK(sl_config_set_check(malformed[i].set, err, sizeof err) != 0 &&
                  strcmp(err, malformed[i].msg) == 0,
              "check %s: \"%s\"", malformed[i].set, err);
    }
    CHECK(sl_config_set_check(" training.lr = abc ", err, sizeof err) == 0 &&
              sl_config_set_check("training.lr=", err, sizeof err) == 0,
          "a well-formed override with any value passes the check");
    /* a well-formed override the config refuses names the file once, tagged (--set) */
    CHECK(sl_config_set(&c, "model.rope_scaling.factor=2", err, sizeof err) != 0 &&
              strstr(err, "tiny.json (--set): model.rope_scaling: is not an object") &&
              strncmp(err, "--set", 5) != 0 && !strstr(strstr(err, "(--set)") + 1, "(--set)"),
          "an override under a non-object: %s", err);
    /* which keys the overrides gave (the trainer's "(--set)" tag on a data path) */
    const char *given[] = {"data.train=x", " training.stages = []", "model=3"};
    CHECK(sl_config_set_covers(given, 3, "data.train") &&
              sl_config_set_covers(given, 3, "training.stages") &&
              sl_config_set_covers(given, 3, "model.hidden_size") &&
              !sl_config_set_covers(given, 3, "data.eval") &&
              !sl_config_set_covers(given, 3, "data") &&
              !sl_config_set_covers(given, 3, "training") &&
              !sl_config_set_covers(given, 3, "data.train_x") &&
              !sl_config_set_covers(given, 3, "modelx"),
          "sl_config_set_covers");

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
    CHECK(sl_config_parse(tc_base, "base.json", &c, err, sizeof err) == 0, "base: %s", err);
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
    CHECK(sl_config_parse(json, "rt.json", &r, err, sizeof err) == 0 && tc_config_eq(&c, &r),
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
        if (!tc_load(files[i], &a)) continue;
        char *json = sl_config_to_json(&a);
        int rc = sl_config_parse(json, a.path, &b, err, sizeof err);
        CHECK(rc == 0, "%s: re-parse of to_json: %s", files[i], err);
        CHECK(rc == 0 && tc_config_eq(&a, &b), "%s: to_json round trip", files[i]);
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
           a->train.eval_tokens == b->train.eval_tokens && tc_model_eq(&a->model, &b->model) &&
           strcmp(a->data.eval_path, b->data.eval_path) == 0;
}

static void test_stages_config(void) {
    sl_config c, r;
    char err[512];
    if (tc_load("configs/tiny-schedule.json", &c)) {
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
    if (tc_load("configs/qwen-gated-15a2b-schedule.json", &c)) {
        const sl_stage *y = &c.stages[2];
        CHECK(c.n_stages == 3 && c.stages[0].train.seq_len == 4096 &&
                  c.stages[1].train.seq_len == 32768 && c.stages[1].model.rope_theta == 1e6 &&
                  y->train.seq_len == 131072 && y->model.rope_scaling.factor == 4 &&
                  y->model.rope_scaling.original_max_position_embeddings == 32768 &&
                  y->model.max_position_embeddings == 131072 && y->steps == 0,
              "15A2B schedule: 4k at 1e4, 32k at 1e6, YaRN x4 to 128k");
    }
    /* without stages: one implicit stage made from the sections as they are */
    if (tc_load("configs/tiny.json", &c)) {
        sl_stage s;
        c.train.max_steps = 7;
        sl_config_stage_at(&c, 0, &s);
        CHECK(!c.stages_given && sl_config_stage_count(&c) == 1 && s.steps == 7 &&
                  strcmp(s.name, "main") == 0 && s.tokens == 7 * c.train.global_batch_tokens,
              "implicit stage");
    }
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
    test_keys_documented();
    return sl_test_finish("test_config");
}
