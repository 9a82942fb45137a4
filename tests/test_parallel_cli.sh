#!/usr/bin/env bash
# tests/test_parallel_cli.sh - `sluice train` under mpirun: a bad expert_parallel value, a
# failing or crashing rank, and a short successful expert-parallel run.
#
# usage: test_parallel_cli.sh SLUICE WORKDIR [MPIEXEC]
#
#   a. bad EP: EP 4 on 2 ranks exits non-zero naming parallel.expert_parallel and the number
#      of ranks; EP 3 with 128 experts fails at config load naming the key (plain process and
#      3 ranks); EP 0 is rejected.
#   b. failure: SLUICE_FAULT=1:2:error and 1:2:crash on 2 ranks (EP 2) and 4 ranks (EP 2):
#      the job exits non-zero within 30 s (wall time measured around mpirun), the output
#      names rank 1, and no rank of the job is left running.
#   c. success: 2 ranks, EP 2: exit 0 and the metrics file holds one record per step with
#      per-expert counts for every MoE layer and a rank_load entry per EP rank (with python3:
#      counts sum to tokens x top-k per layer; rank_load[p] sums the counts of p's experts;
#      without python3 that part is skipped, or fails under CI=true: tests/skip_or_fail.sh);
#      the weights are saved as one shard per EP rank plus an index, and `sluice eval` loads
#      them in one process.
#   e. an eval set too short for one batch on any rank: an evaluation-only stage fails before
#      the first step, naming the key, the tokens and the tokens needed (once); on one rank, or
#      with a share of exactly micro_batch_size x seq_len + 1 tokens, it evaluates; a training
#      run warns once and trains.
set -uo pipefail
# shellcheck source=tests/cli_lib.sh
. "$(dirname "$0")/cli_lib.sh"

mpi_script_start test_parallel_cli.sh "$@"

failed_cleanly() { [ "$1" -ne 0 ] && [ "$1" -ne 124 ] && [ "$1" -ne 137 ]; } # not a timeout
not_started() { ! grep -q 'backend cpu' "$1" && [ ! -e "$2" ]; }             # no banner, no run dir

# ---- data: a generated text, small frames so that every rank gets some ----
word_corpus 7 800 12 "the quick brown fox jumps over a lazy dog and then sleeps under the old tree \
    while birds sing" >corpus.txt
head -c 8000 corpus.txt >heldout.txt
line_data "$sluice" data/train 1024 corpus.txt
line_data "$sluice" data/eval 1024 heldout.txt

# A small MoE model: 8 experts top-2, 2 layers; 6 steps of 256 tokens take about a second.
write_config() { # write_config FILE EXPERTS EP
    cat >"$1" <<EOF
{
$(moe_model_json "$2")
  "training": {
    "seq_len": 32, "micro_batch_size": 2, "global_batch_tokens": 256, "max_steps": 6,
    "lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 1, "schedule": "cosine", "seed": 1234,
    "eval_every": 0, "eval_tokens": 256, "log_every": 1, "save_every": 0, "out_dir": "runs/x"
  },
  "data": {"train": "data/train", "eval": "data/eval", "seed": 1234, "prefetch": 2},
  "parallel": {"expert_parallel": $3, "zero1": false, "capacity_factor": 0},
  "backend": {"name": "cpu", "threads": 1}
}
EOF
}
write_config ep2.json 8 2
write_config ep3.json 128 3

# run NAME NP|- ARGS... : runs sluice train (under mpirun unless NP is -), output in NAME.out,
# exit status in $rc, wall time in $ms (milliseconds). A hang is cut at 60 s.
run() {
    local name=$1 np=$2
    shift 2
    local t0
    t0=$(date +%s%N)
    if [ "$np" = - ]; then
        timeout -k 5 60 "$sluice" train "$@" >"$name.out" 2>&1
    else
        timeout -k 5 60 "$mpiexec" -np "$np" --oversubscribe "$sluice" train "$@" >"$name.out" 2>&1
    fi
    rc=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
    echo "$name: exit $rc after ${ms} ms" >&2
}

# ---- a. bad expert_parallel values ----
f0=$failures
run bad_ep4_np2 2 ep2.json --set parallel.expert_parallel=4 --set training.out_dir=runs/bad4
check "EP 4 on 2 ranks must fail (exit $rc)" failed_cleanly "$rc"
check "EP 4 on 2 ranks: the error names parallel.expert_parallel and the 2 ranks" \
    grep -qE 'parallel\.expert_parallel.*(ranks|world).*\b2\b' bad_ep4_np2.out
# every rank finds it alike: printed once (sl_comm_agree), without a rank tag
check "EP 4 on 2 ranks: the error is printed exactly once" \
    [ "$(grep -c 'parallel\.expert_parallel' bad_ep4_np2.out)" -eq 1 ]
check "EP 4 on 2 ranks: the error has no rank tag (every rank failed)" \
    grep -q '^sluice: error: .*parallel\.expert_parallel' bad_ep4_np2.out
[ "$failures" -eq "$f0" ] || show bad_ep4_np2.out
# a bad flag (found before MPI starts) and a checkpoint that is not there: once each
f0=$failures
run bad_flag_np2 2 ep2.json --bogus
check "an unknown flag under 2 ranks must fail (exit $rc)" failed_cleanly "$rc"
check "an unknown flag under 2 ranks is reported exactly once" \
    [ "$(grep -c "unknown option '--bogus'" bad_flag_np2.out)" -eq 1 ]
run bad_resume_np2 2 ep2.json --resume /nonexistent/ckpt --set training.out_dir=runs/badresume
check "--resume of a missing checkpoint under 2 ranks must fail (exit $rc)" failed_cleanly "$rc"
check "--resume of a missing checkpoint under 2 ranks is reported exactly once" \
    [ "$(grep -c -- '--resume: .*/nonexistent/ckpt' bad_resume_np2.out)" -eq 1 ]
[ "$failures" -eq "$f0" ] || { show bad_flag_np2.out; show bad_resume_np2.out; }

for np in - 3; do
    f0=$failures
    run "bad_ep3_np$np" "$np" ep3.json --set training.out_dir=runs/bad3
    check "EP 3 with 128 experts ($np ranks) must fail (exit $rc)" failed_cleanly "$rc"
    check "EP 3 with 128 experts ($np ranks): the config error names the key and 128" \
        grep -qE 'ep3\.json: parallel\.expert_parallel: .*3.*128' "bad_ep3_np$np.out"
    # failing at config load: nothing was set up (no banner, no run directory)
    check "EP 3 with 128 experts ($np ranks) must fail before training starts" \
        not_started "bad_ep3_np$np.out" runs/bad3
    [ "$failures" -eq "$f0" ] || show "bad_ep3_np$np.out"
done
# a config error is the same on every rank: printed once, every rank exits non-zero
run bad_lr_np3 3 ep2.json --set training.lr=-1 --set training.out_dir=runs/badlr
check "a bad config under 3 ranks must fail (exit $rc)" failed_cleanly "$rc"
check "a bad config under 3 ranks is reported exactly once" \
    [ "$(grep -c 'training\.lr: must be >= 0' bad_lr_np3.out)" -eq 1 ]
# --set overrides are validated together, in any order
run set_order - ep2.json --set training.warmup_steps=8 --set training.max_steps=10 \
    --set parallel.expert_parallel=1 --set training.out_dir=runs/setorder
check "--set warmup_steps=8 before max_steps=10 (file: 6) must succeed (exit $rc)" [ "$rc" -eq 0 ]
[ "$rc" -eq 0 ] || show set_order.out
run bad_ep0 - ep2.json --set parallel.expert_parallel=0
check "EP 0 must be rejected (exit $rc)" failed_cleanly "$rc"
check "EP 0: the error names the key" grep -q 'parallel\.expert_parallel' bad_ep0.out

# ---- b. a rank that errors or dies: the job ends within 30 s, naming rank 1 ----
for np in 2 4; do
    for kind in error crash; do
        name="fault_np${np}_$kind"
        f0=$failures
        SLUICE_FAULT=1:2:$kind run "$name" "$np" ep2.json --set "training.out_dir=runs/$name"
        check "$name: the job must exit non-zero" [ "$rc" -ne 0 ]
        check "$name: the job hung (cut by timeout after ${ms} ms)" [ "$rc" -ne 124 ]
        check "$name: every rank must be gone within 30 s (took ${ms} ms)" [ "$ms" -le 30000 ]
        # the failed rank is named: by itself before it goes, or by Open MPI
        check "$name: the output must name rank 1" \
            grep -qE 'sluice\[rank 1\]|MPI_ABORT was invoked on rank 1 |process rank 1 with PID' \
            "$name.out"
        # and the injected fault really happened at step 2 (not some other failure)
        check "$name: rank 1 must report the injected fault" \
            grep -q 'sluice\[rank 1\]: .*SLUICE_FAULT' "$name.out"
        # no rank of this job survives mpirun (their command lines name this run's out_dir)
        sleep 1
        check "$name: ranks left running: $(pgrep -f "out_dir=runs/$name" | tr '\n' ' ')" \
            none_running "out_dir=runs/$name"
        [ "$failures" -eq "$f0" ] || show "$name.out"
    done
done

# ---- c. a short successful run with EP 2 ----
f0=$failures
run ok_np2_ep2 2 ep2.json --set training.out_dir=runs/ok
check "2 ranks, EP 2 must succeed" [ "$rc" -eq 0 ]
metrics=runs/ok/metrics.jsonl
check "the metrics file $metrics must exist" [ -s "$metrics" ]
check "metrics: one record per step with rank_load" \
    [ "$(grep -c '"rank_load": \[' "$metrics" 2>/dev/null)" -eq 6 ]
check "metrics: per-expert counts for both layers" \
    [ "$(grep -o '"counts": \[[0-9, ]*\]' "$metrics" 2>/dev/null | wc -l)" -eq 12 ]
if command -v python3 >/dev/null 2>&1; then
    checks=$((checks + 1))
    python3 - "$metrics" <<'EOF' || fail "metrics: counts / rank_load inconsistent"
import json, sys
tokens, topk, experts, ep = 256, 2, 8, 2
steps = [r for r in map(json.loads, open(sys.argv[1])) if "event" not in r]
assert [s["step"] for s in steps] == list(range(1, 7)), [s["step"] for s in steps]
for s in steps:
    layers = s["expert_load"]
    assert len(layers) == 2, layers
    for l in layers:
        assert len(l["counts"]) == experts, l
        assert sum(l["counts"]) == tokens * topk, (s["step"], l)
        assert max(l["counts"]) == l["max"], l
    assert len(s["rank_load"]) == ep, s["rank_load"]
    per = experts // ep
    for p in range(ep):
        want = sum(sum(l["counts"][p * per:(p + 1) * per]) for l in layers)
        assert abs(s["rank_load"][p] - want) < 1e-9, (s["step"], p, s["rank_load"], want)
print("metrics: %d steps consistent" % len(steps), file=sys.stderr)
EOF
else
    skip_part_or_fail "python3 not installed: the metrics consistency check" || fail "python3 missing"
fi
[ "$failures" -eq "$f0" ] || show ok_np2_ep2.out

# The saved weights are sharded by EP rank (Hugging Face index layout) and load as a whole:
# a single-process eval reads every expert from both shards.
final=runs/ok/final
# one check per file: `check A [ x ] && [ y ]` would run [ y ] outside check, uncounted
check "weights: the first of two shards" [ -s "$final/model-00001-of-00002.safetensors" ]
check "weights: the second of two shards" [ -s "$final/model-00002-of-00002.safetensors" ]
check "weights: the index" [ -s "$final/model.safetensors.index.json" ]
check "index: expert 7 of layer 0 in the second shard" \
    grep -q '"model.layers.0.mlp.experts.7.down_proj.weight":[[:space:]]*"model-00002-of-00002.safetensors"' \
    "$final/model.safetensors.index.json"
check "sluice eval loads the sharded weights" \
    timeout 60 "$sluice" eval --weights "$final" --data data/eval --seq-len 32 --batch 2

# ---- d. a fresh start into the finished run's out_dir: refused, the run left as it was ----
f0=$failures
before=$(cd runs/ok && find checkpoints final -type f -exec md5sum {} + | sort)
run again_np2 2 ep2.json --set training.out_dir=runs/ok --set training.seed=7
check "a fresh start into a run's out_dir must fail (exit $rc)" failed_cleanly "$rc"
check "the refusal names the out_dir and --resume auto, once, as the job's error (no rank tag)" \
    [ "$(grep -c '^sluice: error: training\.out_dir = runs/ok already holds a run.*--resume auto' again_np2.out)" -eq 1 ]
check "the refused start must leave the run's checkpoints and weights as they were" \
    [ "$before" = "$(cd runs/ok && find checkpoints final -type f -exec md5sum {} + | sort)" ]
check "the refused start must not append to the run's metrics" \
    [ "$(grep -c '"rank_load": \[' "$metrics")" -eq 6 ]
[ "$failures" -eq "$f0" ] || show again_np2.out
# ... a copy whose second EP rank's shard is damaged: only rank 1 reads it, and the job says
# so without rank 0's "resumed from" before it (said only once every rank has loaded its part)
f0=$failures
rm -rf runs/damaged && cp -r runs/ok runs/damaged
printf 'XXXX' | dd of=runs/damaged/checkpoints/step-6/rank-00001.safetensors bs=1 seek=4000 \
    conv=notrunc status=none
run damaged_np2 2 ep2.json --set training.out_dir=runs/damaged --resume auto --set training.max_steps=8
check "resuming a checkpoint with a damaged shard must fail (exit $rc)" failed_cleanly "$rc"
check "the failure names the damaged shard" grep -q 'rank-00001.safetensors' damaged_np2.out
check "no 'resumed from' before the failure" [ "$(grep -c 'resumed from' damaged_np2.out)" -eq 0 ]
[ "$failures" -eq "$f0" ] || show damaged_np2.out
rm -rf runs/damaged
# ... and resumed in one process (no expert parallelism) for two more steps: final/ gets one
# file, and the EP run's shards and index are gone (a loader would find them before it)
f0=$failures
run resume_np1 - ep2.json --set training.out_dir=runs/ok --resume auto \
    --set parallel.expert_parallel=1 --set training.max_steps=8
check "resuming the EP-2 run in one process must succeed (exit $rc)" [ "$rc" -eq 0 ]
check "final/ after the one-process resume: model.safetensors" [ -s "$final/model.safetensors" ]
check "final/ after the one-process resume: no EP shards or index left" \
    [ -z "$(cd "$final" && ls model-0000*-of-*.safetensors model.safetensors.index.json 2>/dev/null)" ]
check "sluice eval loads the one-file weights" \
    timeout 60 "$sluice" eval --weights "$final" --data data/eval --seq-len 32 --batch 2
[ "$failures" -eq "$f0" ] || show resume_np1.out

# ---- e. an eval set too short for one batch on any rank (each rank reads every dp-th frame
# and evaluates whole micro-batches of micro_batch_size x seq_len + 1 tokens) ----
# 199 bytes: 200 tokens with the end-of-document token; in frames of 128 the two ranks' shares
# are 128 and 72 tokens, in frames of 129 they are 129 and 71
head -c 199 corpus.txt >ev.txt
for f in 128 129; do
    "$sluice" data build --quiet --frame-tokens "$f" -o "data/ev$f" ev.txt
done
head -c 10 corpus.txt >ev11.txt
"$sluice" data build --quiet -o data/ev11 ev11.txt
yarn_stages() { # the eval set of the evaluation-only stage at 128 tokens per sequence
    echo "[{\"name\":\"a\",\"tokens\":512,\"seq_len\":32},{\"name\":\"yarn\",\"tokens\":0,\"seq_len\":128,\"micro_batch_size\":1,\"data\":{\"eval\":\"$1\"},\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4,\"original_max_position_embeddings\":32}}]"
}
f0=$failures
run evalshort_np2 2 ep2.json --set training.max_steps=2 --set training.out_dir=runs/evalshort \
    --set "training.stages=$(yarn_stages data/ev128)"
check "an evaluation-only stage whose eval set fills no batch on 2 ranks must fail (exit $rc)" \
    failed_cleanly "$rc"
check "... naming the config, the key, the tokens and the tokens needed, once, as the job's error" \
    [ "$(grep -c '^sluice: error: ep2\.json (--set): training\.stages\[1\] ("yarn"): data\.eval: data/ev128 holds 200 tokens; split by frame over 2 ranks (frames of up to 128 tokens), the largest rank.s share is 128 tokens, but one evaluation batch of stage "yarn" (micro_batch_size 1 x seq_len 128) needs 129 tokens' evalshort_np2.out)" -eq 1 ]
check "... before the first step (no checkpoint)" [ ! -e runs/evalshort/checkpoints ]
[ "$failures" -eq "$f0" ] || show evalshort_np2.out
# the same set on one rank (200 tokens: one sequence of 129), and 2 ranks with a share of
# exactly 129 tokens: the stage evaluates
f0=$failures
run evalshort_np1 - ep2.json --set training.max_steps=2 --set training.out_dir=runs/evalshort1 \
    --set parallel.expert_parallel=1 --set "training.stages=$(yarn_stages data/ev128)"
check "... on one rank it evaluates (exit $rc)" \
    grep -q 'held-out loss of the evaluation-only stage: ' evalshort_np1.out
run evalfits_np2 2 ep2.json --set training.max_steps=2 --set training.out_dir=runs/evalfits \
    --set "training.stages=$(yarn_stages data/ev129)"
check "... on 2 ranks with a 129-token share it evaluates (exit $rc)" \
    grep -q 'held-out loss of the evaluation-only stage: ' evalfits_np2.out
[ "$failures" -eq "$f0" ] || { show evalshort_np1.out; show evalfits_np2.out; }
# a training run's evaluations that would find no batch: one warning at the start, the run goes on
f0=$failures
run evaltiny_np2 2 ep2.json --set training.max_steps=2 --set training.out_dir=runs/evaltiny \
    --set data.eval=data/ev11
check "a run whose eval set fills no batch must still train (exit $rc)" [ "$rc" -eq 0 ]
check "... warning once, naming the key, the tokens and the tokens needed" \
    [ "$(grep -c 'warning: ep2\.json (--set): data\.eval: data/ev11 holds 11 tokens.* needs 65 tokens in one rank.s share: its held-out evaluations .* will be skipped' evaltiny_np2.out)" -eq 1 ]
[ "$failures" -eq "$f0" ] || show evaltiny_np2.out

echo "test_parallel_cli: $checks checks, $failures failed"
[ "$failures" -eq 0 ]
