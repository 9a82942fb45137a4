#!/bin/sh
# tests/fuzz/run_fuzz_config.sh SRC_DIR WORK_DIR [SECONDS]
#
# Builds the config fuzzer (tests/fuzz/fuzz_config.c: the run config's parser and validation,
# --set overrides, a model's Hugging Face config.json) with clang
# -fsanitize=fuzzer,address,undefined, seeds it with the configs of configs/ (as files, printed
# with every key, and with overrides) and a Qwen3-MoE config.json, and runs it for SECONDS
# (default 15, or $SLUICE_FUZZ_SECONDS). The same scheme as run_fuzz.sh: exit 0 no finding, 1 a
# crash/sanitizer report or a build failure of the harness, 77 (skipped) only when clang or its
# libFuzzer runtime is not installed, and under CI=true not even then.
set -u
. "$(dirname "$0")/../skip_or_fail.sh"
. "$(dirname "$0")/fuzz_common.sh"
fuzz_start "$1" "$2" "${3:-}" 15

# The sections' name parsers live in files that are mostly about something else (the HF export,
# the attention operations, the transport choice) and reach into the backends and safetensors.
# They are compiled without instrumentation, one section per function, so that the linker drops
# all but the few small functions the config code calls, and with them those references.
for f in model/hf_export.c core/ops_attn.c core/transport.c; do
    if ! "$CLANG" -std=c11 -D_GNU_SOURCE -O1 -ffunction-sections -fdata-sections \
        -Wall -Wextra -Werror -I"$SRC" -c "$SRC/$f" -o "$(basename "$f" .c).o"; then
        echo "fuzz: $f does not build"
        exit 1
    fi
done
CJSON_FLAGS=$(pkg-config --libs libcjson 2>/dev/null || echo -lcjson)
CONFIG_SRCS="$SRC/trainer/config.c $SRC/trainer/config_sections.c $SRC/trainer/config_stages.c
    $SRC/model/config.c $SRC/model/memory_mode.c $SRC/core/config_keys.c $SRC/core/fsutil.c
    $SRC/core/log.c hf_export.o ops_attn.o transport.o"
fuzz_build fuzz_config "$SRC/tests/fuzz/fuzz_config.c" $CONFIG_SRCS -Wl,--gc-sections \
    $CJSON_FLAGS -lm
# the same file as a program that prints a config with every key (for the seeds)
if ! "$CLANG" -std=c11 -D_GNU_SOURCE -DFUZZ_CONFIG_PRINT -O1 -Wall -Wextra -Werror -I"$SRC" \
    "$SRC/tests/fuzz/fuzz_config.c" $CONFIG_SRCS -Wl,--gc-sections $CJSON_FLAGS -lm \
    -o print_config; then
    echo "fuzz: print_config does not build"
    exit 1
fi

rm -rf seeds corpus && mkdir -p seeds corpus
i=0
for f in "$SRC"/configs/*.json; do
    i=$((i + 1))
    { printf '\000'; cat "$f"; } > "seeds/config-$i"
    # and printed with every key
    { printf '\000'; ./print_config "$f"; } > "seeds/full-$i" || exit 1
done
# overrides after a config: plain keys, nested keys, a new stage list, strings for numbers
{
    printf '\001'
    cat "$SRC/configs/tiny.json"
    printf '\000training.lr=1e-3\000model.rope_scaling={"rope_type":"yarn","factor":4,'
    printf '"original_max_position_embeddings":256}\000model.max_position_embeddings=1024'
    printf '\000parallel.expert_parallel=2\000data.train=[{"path":"a","weight":2},{"path":"b"}]'
} > seeds/sets-1
{
    printf '\001'
    cat "$SRC/configs/tiny-schedule.json"
    printf '\000training.stages=[{"name":"a","tokens":409600},{"name":"b","tokens":0,'
    printf '"data":{"eval":"e"}}]\000training.out_dir=x\000backend.name=cuda'
} > seeds/sets-2
# a Hugging Face config.json (Qwen3-30B-A3B's), and one with YaRN and dense layers
cat > seeds/hf-1 << 'EOF'
{"architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
 "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
 "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
 "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 48,
 "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768,
 "norm_topk_prob": true, "num_attention_heads": 32, "num_experts": 128,
 "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
 "output_router_logits": false, "rms_norm_eps": 1e-06, "rope_scaling": null,
 "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": null,
 "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
 "use_cache": true, "use_sliding_window": false, "vocab_size": 151936}
EOF
cat > seeds/hf-2 << 'EOF'
{"model_type": "qwen3_moe", "vocab_size": 257, "hidden_size": 64, "num_hidden_layers": 4,
 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_experts": 8,
 "num_experts_per_tok": 2, "moe_intermediate_size": 32, "intermediate_size": 128,
 "decoder_sparse_step": 2, "mlp_only_layers": [0], "shared_expert_intermediate_size": 64,
 "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256},
 "max_position_embeddings": 1024, "attn_output_gate": "headwise", "partial_rotary_factor": 0.5}
EOF
for f in seeds/hf-1 seeds/hf-2; do
    { printf '\002'; cat "$f"; } > "$f.m" && mv "$f.m" "$f"
done
# every key the documentation lists and the configs use, and the enumerations' values
{
    grep -oh '^| `[a-z_0-9]*`' "$SRC/docs/config.md" | sed 's/^| `\(.*\)`$/"\1"/'
    grep -oh '"[a-z_0-9]*" *:' "$SRC"/configs/*.json | sed 's/ *:$//'
    for w in model training data parallel backend attention stages name tokens train eval \
        path weight rope_type yarn factor original_max_position_embeddings cosine wsd \
        constant fp32 bf16 auto none layer elementwise headwise cuda cpu nccl mpi probs \
        position qwen3_next reset_optimizer 9007199254740992 2147483648 1e308 -0; do
        echo "\"$w\""
    done
} | sort -u > config.dict

fuzz_run fuzz_config "$SECS" -dict=config.dict
