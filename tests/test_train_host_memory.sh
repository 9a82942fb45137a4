#!/usr/bin/env bash
# tests/test_train_host_memory.sh - on the CPU backend `sluice train` checks, before any rank
# allocates, that a node's ranks fit the memory it can still give (trainer/fit_host.c,
# docs/memory.md "Host memory"); a run too large is refused with one line, exit status 1,
# instead of a rank being killed by the kernel without a message.
#   - SLUICE_HOST_MEMORY=1M under mpirun -np 2: refused; the line is printed once, first, and
#     names the config, both ranks and the variable; no banner and no out_dir;
#   - its figure per rank is `sluice plan --gpus 2`'s total for the same run in fp32, although
#     the run's precision is "auto" (fp32 on the CPU; bf16 in a GPU plan), and the node's
#     figure is twice it;
#   - one process names one rank;
#   - a model of 384 TiB of weights, with the node's real figures: refused before the
#     allocator is reached, naming where the figure came from;
#   - SLUICE_HOST_MEMORY=off and a size large enough: the run trains; a bad value: exit 2,
#     one line naming the variable.
# usage: test_train_host_memory.sh SLUICE WORKDIR [MPIEXEC]
set -uo pipefail
# shellcheck source=tests/cli_lib.sh
. "$(dirname "$0")/cli_lib.sh"

mpi_script_start test_train_host_memory.sh "$@"

word_corpus 5 200 12 "the quick brown fox jumps over a lazy dog" >corpus.txt
line_data "$sluice" train 1024 corpus.txt
# cfg.json trains in a second; big.json (64 experts of 3 x 1024 x 1024: 0.4 G parameters, about
# 6 GiB in fp32 with gradients and AdamW) is refused before it allocates; precision "auto" is
# fp32 on the CPU, so its figure must be the plan's for the fp32 twin big32.json
cat >cfg.json <<EOF
{
$(moe_model_json 8)
  "training": {"seq_len": 32, "micro_batch_size": 2, "global_batch_tokens": 128,
               "max_steps": 2, "warmup_steps": 1, "out_dir": "run", "precision": "auto"},
  "data": {"train": "train"},
  "backend": {"name": "cpu", "threads": 1}
}
EOF
sed -e 's/"hidden_size": 32/"hidden_size": 1024/' -e 's/"moe_intermediate_size": 16/"moe_intermediate_size": 1024/' \
    -e 's/"num_experts": 8/"num_experts": 64/' cfg.json >big.json
sed 's/"precision": "auto"/"precision": "fp32"/' big.json >big32.json
check "big.json differs from cfg.json in its shapes" [ "$(grep -c '"hidden_size": 1024' big.json)" = 1 ]

# run NAME CONFIG NP|- ARGS...: sluice train CONFIG ARGS (train_run, tests/cli_lib.sh) with no
# run left from the one before
run() {
    local name=$1 cfg=$2 np=$3
    shift 3
    rm -rf run
    train_run "$name" "$np" "$cfg" "$@"
}
head="sluice: error: big.json: the run needs about"
host=$(hostname)

SLUICE_HOST_MEMORY=1M run np2 big.json 2
line=$(head -n 1 <<<"$out")
check "1M, 2 ranks: the job exits 1 (got $rc)" [ "$rc" -eq 1 ]
check "1M, 2 ranks: the error is the first line (got: $out)" [ "${line#"$head"}" != "$line" ]
check "1M, 2 ranks: printed once (got: $out)" [ "$(grep -cF -- "$head" <<<"$out")" -eq 1 ]
check "1M, 2 ranks: it names the host, counts both ranks and names the variable (got: $line)" \
    grep -qF "GiB of host memory on $host (2 ranks x " <<<"$line"
check "1M, 2 ranks: the figure it was given, and the way out (got: $line)" \
    grep -q "$host can give 0.00 GiB (SLUICE_HOST_MEMORY).*SLUICE_HOST_MEMORY=off skips" <<<"$line"
check "1M, 2 ranks: no banner" [ "$(grep -c 'backend cpu' <<<"$out")" -eq 0 ]
check "1M, 2 ranks: no out_dir created" [ ! -e run ]

# the figure per rank is sluice plan's for the run in fp32, to the message's 2 decimals, and
# twice it is the node's
per_rank=$(sed -n 's/.*(2 ranks x \([0-9.]*\) GiB.*/\1/p' <<<"$line")
node=$(sed -n 's/.*the run needs about \([0-9.]*\) GiB.*/\1/p' <<<"$line")
plan=$("$sluice" plan big32.json --gpus 2 --json |
    python3 -c 'import json, sys; print("%.2f" % (json.load(sys.stdin)["total_bytes"] / 2**30))')
check "the figure per rank is a number of GiB above 1 (got '$per_rank')" \
    awk -v x="$per_rank" 'BEGIN { exit !(x + 0 > 1) }'
check "the figure per rank ($per_rank GiB) is sluice plan's in fp32 ($plan GiB)" [ "$per_rank" = "$plan" ]
check "the node's figure ($node GiB) is twice the rank's ($per_rank)" \
    awk -v a="$node" -v b="$per_rank" 'BEGIN { d = a - 2 * b; exit !(d < 0.015 && d > -0.015) }'

check "1M, 2 ranks: the state alone does not fit, fewer ranks named (got: $line)" \
    grep -qF "AdamW moments alone need more: fewer ranks per node, parallel.zero1" <<<"$line"

SLUICE_HOST_MEMORY=1K run one big.json -
check "1K, one process: exit status 1 (got $rc)" [ "$rc" -eq 1 ]
check "1K, one process: one line (got: $out)" [ "$(wc -l <<<"$out")" -eq 1 ]
check "1K, one process: one rank (got: $out)" grep -q "(1 rank x " <<<"$out"
check "1K, one process: the state alone does not fit, no fewer ranks (got: $out)" \
    grep -qF "AdamW moments alone need more: parallel.zero1 and parallel.expert_parallel over ranks on more nodes" <<<"$out"
# room for the state (sluice plan's for one fp32 rank) and a byte more: the activations are
# what does not fit, and what lowers them is named
state=$("$sluice" plan big32.json --gpus 1 --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["state_bytes"])')
SLUICE_HOST_MEMORY=$((state + 1)) run acts big.json -
check "room for the state: exit status 1 (got $rc)" [ "$rc" -eq 1 ]
check "room for the state: the micro-batch and recompute named (got: $out)" \
    grep -qF "A smaller micro-batch, training.recompute, or parallel.expert_parallel" <<<"$out"

# 4 layers of 128 experts of 3 x 65536 x 1048576 weights, the node's real figures: refused by
# the estimate, before the allocator could be (its message is another)
run huge cfg.json - --set model.hidden_size=65536 --set model.moe_intermediate_size=1048576 \
    --set model.num_experts=128 --set model.num_hidden_layers=4
check "384 TiB: exit status 1 (got $rc)" [ "$rc" -eq 1 ]
check "384 TiB: refused by the estimate, naming where the node's figure comes from (got: $out)" \
    grep -qE "^sluice: error: cfg.json: the run needs about .*GiB \((MemAvailable \+ SwapFree of /proc/meminfo|the memory cgroup /.*)\)" <<<"$out"
check "384 TiB: one line (got: $out)" [ "$(wc -l <<<"$out")" -eq 1 ]

SLUICE_HOST_MEMORY=off run off cfg.json 2
check "off: the run trains (exit $rc)" [ "$rc" -eq 0 ]
check "off: its final weights are saved" [ -d run/final ]
SLUICE_HOST_MEMORY=1T run roomy cfg.json 2
check "1T: the run trains (exit $rc)" [ "$rc" -eq 0 ]
check "1T: its final weights are saved" [ -d run/final ]

SLUICE_HOST_MEMORY=lots run bad cfg.json 2
check "a bad value: exit status 2 (got $rc)" [ "$rc" -eq 2 ]
check "a bad value: one line naming the variable (got: $out)" \
    [ "$(grep -c 'SLUICE_HOST_MEMORY=lots: expected off or a size' <<<"$out")" -eq 1 ]

echo "test_train_host_memory: $checks checks, $failures failed"
[ "$failures" -eq 0 ]
