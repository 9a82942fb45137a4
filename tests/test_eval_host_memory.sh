#!/usr/bin/env bash
# tests/test_eval_host_memory.sh - on the CPU backend `sluice eval` and `sluice generate` check,
# before the model is created, that its weights, a forward's activations and (generate) the KV
# cache fit the memory the node can still give (launch/host_check.c, docs/memory.md "Host
# memory"); too large is one line, exit status 1, where the kernel would kill the process:
#   - SLUICE_HOST_MEMORY=1K: both refuse, naming the weights, the host and the variable;
#   - room for the weights and not the activations: the flags that lower them are named;
#   - a model of 0.4 G parameters (trained weights whose config.json was made larger: the check
#     reads the config, before any tensor): the weights figure is `sluice plan`'s parameters x
#     4 bytes (no gradients: half what a training model holds), and generate's KV cache figure
#     is 2 x layers x prompts x positions x KV heads x head_dim x 4 bytes;
#   - 384 TiB of weights with the node's real figures: refused, naming where the figure came
#     from; with the check off, the allocator's failure is one clean line, exit status 1;
#   - SLUICE_HOST_MEMORY=off and a size large enough: both run; a bad value: exit 2, one line.
# usage: test_eval_host_memory.sh SLUICE WORKDIR
set -uo pipefail
# shellcheck source=tests/cli_lib.sh
. "$(dirname "$0")/cli_lib.sh"

mpi_script_start test_eval_host_memory.sh "$@"

word_corpus 5 200 12 "the quick brown fox jumps over a lazy dog" >corpus.txt
line_data "$sluice" train 1024 corpus.txt
cat >cfg.json <<EOF
{
$(moe_model_json 8)
  "training": {"seq_len": 32, "micro_batch_size": 2, "global_batch_tokens": 128,
               "max_steps": 1, "warmup_steps": 1, "out_dir": "run"},
  "data": {"train": "train"},
  "backend": {"name": "cpu", "threads": 1}
}
EOF
OMP_NUM_THREADS=1 SLUICE_HOST_MEMORY=off "$sluice" train cfg.json >train.out 2>&1 ||
    { cat train.out; echo "training the weights failed"; exit 1; }
w=run/final
# big/: the same weights under a config of 64 experts of 3 x 1024 x 1024 (0.4 G parameters)
# (the exported config.json has tabs after the colons)
mkdir big && cp "$w"/* big/
sed -i -e 's/"hidden_size":[[:space:]]*32,/"hidden_size": 1024,/' \
    -e 's/"moe_intermediate_size":[[:space:]]*16,/"moe_intermediate_size": 1024,/' \
    -e 's/"num_experts":[[:space:]]*8,/"num_experts": 64,/' big/config.json
sed -e 's/"hidden_size": 32/"hidden_size": 1024/' -e 's/"moe_intermediate_size": 16/"moe_intermediate_size": 1024/' \
    -e 's/"num_experts": 8/"num_experts": 64/' cfg.json >big.json
check "big/config.json is larger" grep -q '"hidden_size": 1024' big/config.json
host=$(hostname)

# ev NAME ARGS... / gen NAME ARGS...: sluice eval / generate, output in $out, status in $rc
ev() {
    local name=$1
    shift
    timeout -k 5 60 "$sluice" eval --threads 1 --data train --seq-len 32 --batch 2 --max-tokens 128 "$@" \
        >"$name.out" 2>&1
    rc=$?
    out=$(cat "$name.out")
}
gen() {
    local name=$1
    shift
    timeout -k 5 60 "$sluice" generate --threads 1 --prompt "the quick" --max-new 4 "$@" >"$name.out" 2>&1
    rc=$?
    out=$(cat "$name.out")
}

for cmd in ev gen; do
    SLUICE_HOST_MEMORY=1K $cmd "$cmd-1k" --weights "$w"
    check "$cmd, 1K: exit status 1 (got $rc)" [ "$rc" -eq 1 ]
    check "$cmd, 1K: one line (got: $out)" [ "$(wc -l <<<"$out")" -eq 1 ]
    check "$cmd, 1K: names the weights, the host and the variable (got: $out)" \
        grep -q "^sluice: error: $w: the model needs about .* GiB of host memory on $host (weights .*$host can give 0.00 GiB (SLUICE_HOST_MEMORY).*SLUICE_HOST_MEMORY=off skips" <<<"$out"
done
check "gen, 1K: the KV cache and the sampling rows are named" \
    grep -q ", KV cache [0-9.]*, sampling [0-9.]*)" <<<"$out"

# the weights figure: sluice plan's parameters x 4 bytes, to the message's 2 decimals
params=$("$sluice" plan big.json --gpus 1 --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["params_total"])')
want=$(awk -v p="$params" 'BEGIN { printf "%.2f", p * 4 / 2^30 }')
SLUICE_HOST_MEMORY=1M ev ev-big --weights big
check "ev, 0.4 G parameters: exit status 1 (got $rc)" [ "$rc" -eq 1 ]
check "ev, 0.4 G parameters: weights $want GiB (got: $out)" grep -qF "(weights $want, activations of 64 tokens" <<<"$out"
check "ev, 0.4 G parameters: the weights alone do not fit, and it says so (got: $out)" \
    grep -qE "The weights alone need more: a node with more memory(, or a GPU \(--backend cuda\))?;" <<<"$out"
# room for the small model's weights (its parameters x 4 bytes) and one byte more: the
# activations are what does not fit, and the flags that lower them are named
small=$("$sluice" plan cfg.json --gpus 1 --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["params_total"])')
SLUICE_HOST_MEMORY=$((small * 4 + 1)) ev ev-acts --weights "$w"
check "ev, room for the weights alone: exit status 1 (got $rc)" [ "$rc" -eq 1 ]
check "ev, room for the weights alone: the activations' flags named (got: $out)" \
    grep -qF "A smaller --batch or --seq-len lowers the activations;" <<<"$out"
# --dump-logits keeps every evaluated token's logits (and a batch's on the backend)
SLUICE_HOST_MEMORY=1T ev ev-dump --weights "$w" --dump-logits dump.safetensors
check "ev, --dump-logits with room: evaluates (exit $rc)" [ "$rc" -eq 0 ]
check "ev, --dump-logits with room: writes the file" [ -s dump.safetensors ]
# (2,000 tokens' logits: more than a forward's activations, so the advice is --max-tokens')
SLUICE_HOST_MEMORY=$((small * 4 + 1)) ev ev-dump2 --weights "$w" --dump-logits dump2.safetensors \
    --max-tokens 2000
check "ev, --dump-logits: its logits counted and --max-tokens named (got: $out)" \
    grep -qE ", --dump-logits [0-9.]+\).* A smaller --max-tokens lowers the logits dumped;" <<<"$out"
SLUICE_HOST_MEMORY=$((small * 4 + 1)) gen gen-acts --weights "$w"
check "gen, room for the weights alone: the activations' flags named (got: $out)" \
    grep -qF "Fewer prompts or a smaller --chunk lower the activations;" <<<"$out"
# a long run: the KV cache is the largest part, and what lowers it is named
SLUICE_HOST_MEMORY=$((small * 4 + 1)) gen gen-kv --weights "$w" --max-new 100000
check "gen, the KV cache the largest part: its flags named (got: $out)" \
    grep -qF "Shorter or fewer prompts, or a smaller --max-new, lower the KV cache;" <<<"$out"
# generate: one prompt; its first pass runs its L tokens (the figure the message gives), and
# the cache holds max_len = L + 1000000 positions: 2 x 2 layers x max_len x 2 x 8 x 4 bytes
SLUICE_HOST_MEMORY=1M gen gen-big --weights big --max-new 1000000
check "gen, 0.4 G parameters: exit status 1 (got $rc)" [ "$rc" -eq 1 ]
check "gen, 0.4 G parameters: weights $want GiB (got: $out)" grep -qF "(weights $want, activations of " <<<"$out"
kv=$(sed -n 's/.*, KV cache \([0-9.]*\), sampling.*/\1/p' <<<"$out")
tokens=$(sed -n 's/.*activations of \([0-9]*\) tokens.*/\1/p' <<<"$out")
kv_want=$(awk -v t="$tokens" 'BEGIN { printf "%.2f", 2 * 2 * (t + 1000000) * 2 * 8 * 4 / 2^30 }')
check "gen: the KV cache figure ($kv GiB) is 2 x layers x positions x KV x D x 4 ($kv_want)" \
    [ "$kv" = "$kv_want" ]
check "gen: a KV cache figure at all" [ -n "$kv" ]

# 384 TiB of weights, the node's real figures
sed -i -e 's/"hidden_size": 1024/"hidden_size": 65536/' -e 's/"moe_intermediate_size": 1024/"moe_intermediate_size": 1048576/' \
    -e 's/"num_experts": 64/"num_experts": 128/' -e 's/"num_hidden_layers":[[:space:]]*2,/"num_hidden_layers": 4,/' big/config.json
check "big/config.json is huge" grep -q '"num_hidden_layers": 4' big/config.json
ev ev-huge --weights big
check "ev, 384 TiB: exit status 1 (got $rc)" [ "$rc" -eq 1 ]
check "ev, 384 TiB: refused by the estimate, naming the node's figure's source (got: $out)" \
    grep -qE "^sluice: error: big: the model needs about .*GiB \((MemAvailable \+ SwapFree of /proc/meminfo|the memory cgroup /.*)\)" <<<"$out"
# the check skipped: the allocator fails (no address space holds 384 TiB), a clean error
SLUICE_HOST_MEMORY=off ev ev-huge-off --weights big
check "ev, 384 TiB unchecked: exit status 1 (got $rc)" [ "$rc" -eq 1 ]
check "ev, 384 TiB unchecked: one line, the allocation named (got: $out)" \
    [ "$(grep -c '^sluice: error: out of host memory allocating a tensor of [0-9]* bytes' <<<"$out")" -eq 1 ]
check "ev, 384 TiB unchecked: only that line (got: $out)" [ "$(wc -l <<<"$out")" -eq 1 ]

for v in off 1T; do
    SLUICE_HOST_MEMORY=$v ev "ev-$v" --weights "$w"
    check "ev, $v: evaluates (exit $rc: $out)" [ "$rc" -eq 0 ]
    SLUICE_HOST_MEMORY=$v gen "gen-$v" --weights "$w"
    check "gen, $v: generates (exit $rc: $out)" [ "$rc" -eq 0 ]
done
ev ev-default --weights "$w"
check "ev, the node's figures: a small model evaluates (exit $rc: $out)" [ "$rc" -eq 0 ]

for cmd in "eval --data train" "generate --prompt x"; do
    # shellcheck disable=SC2086 # the command and its flag
    SLUICE_HOST_MEMORY=lots "$sluice" $cmd --weights "$w" >bad.out 2>&1
    rc=$?
    cmd=${cmd%% *}
    check "$cmd, a bad value: exit status 2 (got $rc)" [ "$rc" -eq 2 ]
    check "$cmd, a bad value: one line naming the variable ($(cat bad.out))" \
        [ "$(grep -c "^sluice $cmd: error: SLUICE_HOST_MEMORY=lots: expected off or a size" bad.out)" -eq 1 ]
done

echo "test_eval_host_memory: $checks checks, $failures failed"
[ "$failures" -eq 0 ]
