/*
 * tests/test_config_bad.c - part of test_config (tests/test_config.c): a catalog of bad configs,
 * each of which must fail naming its key path and reason, and the data section's forms.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "model/counts.h"
#include "tests/test_config.h"
#include "tests/test_util.h"
#include "trainer/config.h"

/* ---- bad configs ------------------------------------------------------------------------- */

const char *const tc_base =
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
    cJSON *base = cJSON_Parse(tc_base), *p = cJSON_Parse(patch);
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
    const char *json; /* a patch of tc_base, or the whole text when raw */
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

void test_bad_configs(void) {
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
        {"{\"training\": {\"expert_wgrad_group\": 5}}", 0, "training.expert_wgrad_group",
         "expected 0 (auto) or 2 to 4 micro-batches, got 5"},
        {"{\"training\": {\"expert_wgrad_group\": 1}}", 0, "training.expert_wgrad_group",
         "expected 0 (auto) or 2 to 4 micro-batches, got 1"},
        {"{\"training\": {\"park_expert_rows\": \"slots\"}}", 0, "training.park_expert_rows",
         "expected \"auto\", \"rows\" or \"tokens\", got \"slots\""},
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
        {"{\"parallel\": {\"bucket_mb\": 8192}}", 0, "parallel.bucket_mb",
         "8192 exceeds the supported maximum 4096"},
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
    CHECK(sl_config_parse(tc_base, "base.json", &c, err, sizeof err) == 0, "base config: %s", err);

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

void test_data_forms(void) {
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
