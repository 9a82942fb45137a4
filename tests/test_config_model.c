/*
 * tests/test_config_model.c - part of test_config (tests/test_config.c): the model section's
 * Hugging Face config.json round trips, and parameter / FLOP counts and the LM head's chunks
 * checked against hand arithmetic.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "model/counts.h"
#include "tests/test_config.h"
#include "tests/test_util.h"
#include "trainer/config.h"

void test_hf(void) {
    sl_config c;
    char err[512];
    if (!tc_load("configs/qwen-gated-15a2b.json", &c)) return;
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
    CHECK(tc_model_eq(&m, &c.model), "HF round trip of the 15A2B model");
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
    CHECK(tc_model_eq(&m, &v), "HF round trip of the variant");
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

void test_counts_15a2b(void) {
    sl_config c;
    if (!tc_load("configs/qwen-gated-15a2b.json", &c)) return;
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

void test_counts_dense(void) {
    sl_config c;
    if (!tc_load("configs/dense-1.7b.json", &c)) return;
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
void test_counts_variants(void) {
    sl_config c;
    if (!tc_load("configs/tiny.json", &c)) return;
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
void test_logits_chunks(void) {
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

    /* the activation count's chunk is the backend's: a device's 2 GiB bound or the CPU's 64
     * MiB (sluice train's host memory check counts the latter) */
    sl_config c;
    if (!tc_load("configs/qwen-gated-15a2b.json", &c)) return;
    sl_activation_bytes dev, host;
    sl_model_activation_bytes(&c.model, SL_MEMORY_NONE, 4096, 4, 1, true, &dev);
    sl_model_activation_bytes(&c.model, SL_MEMORY_NONE, 4096, 4, 1, false, &host);
    const double chunk_diff =
        (double)(sl_logits_chunk_rows(4096, V, 4, true) - sl_logits_chunk_rows(4096, V, 4, false)) *
        V * 4;
    CHECK(chunk_diff > 1e9, "the bounds differ at this shape (%g bytes)", chunk_diff);
    CHECK(dev.workspace - host.workspace == chunk_diff && dev.layers == host.layers,
          "device minus host: the chunks' difference alone (%g, expected %g)",
          dev.workspace - host.workspace, chunk_diff);
}
