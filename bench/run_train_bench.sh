#!/usr/bin/env bash
# bench/run_train_bench.sh - training tokens/s of sluice's CPU backend vs the same model in
# PyTorch (float32, same threads, batch, sequence, steps), on configs/tiny.json and
# bench/configs/moe-mid.json, against two PyTorch variants (bench/torch_train_bench.py):
# "hf" (Hugging Face style, per-expert modules and a Python loop) and "stacked" (stacked
# expert weights, grouped GEMMs, cache-blocked AdamW). Each config runs --reps rounds of
# sluice, hf, stacked (interleaved, so that a slow phase of a shared machine hits all three);
# the table at the end gives medians over the rounds and both ratios (bench/README.md).
#
#   bench/run_train_bench.sh [--threads N] [--build DIR] [--reps N] [--quick]
#
# --build DIR: the sluice build to measure (default build-bench/, configured if needed), so
# that two builds can be compared. Environment: PYTHON (default /usr/bin/python3),
# TORCH_BLAS = pthread | openmp (default openmp: torch's BLAS calls go to the OpenMP build of
# OpenBLAS, the library sluice links; see README for why), STEPS_TINY / WARMUP_TINY /
# STEPS_MID / WARMUP_MID. OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are left as they are, for all
# sides alike.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
threads=2
build="$root/build-bench"
quick=0
reps=3
while [ $# -gt 0 ]; do
    case "$1" in
    --threads) threads=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "run_train_bench.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
case "$reps" in
'' | *[!0-9]* | 0) echo "run_train_bench.sh: --reps must be a positive integer" >&2; exit 2 ;;
esac
PYTHON=${PYTHON:-/usr/bin/python3}
TORCH_BLAS=${TORCH_BLAS:-openmp}
if [ "$quick" = 1 ]; then
    STEPS_TINY=${STEPS_TINY:-3} WARMUP_TINY=${WARMUP_TINY:-1}
    STEPS_MID=${STEPS_MID:-2} WARMUP_MID=${WARMUP_MID:-1}
fi
STEPS_TINY=${STEPS_TINY:-20} WARMUP_TINY=${WARMUP_TINY:-3}
STEPS_MID=${STEPS_MID:-8} WARMUP_MID=${WARMUP_MID:-2}

case "$TORCH_BLAS" in
openmp) torch_env=(env "LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}") ;;
pthread) torch_env=(env) ;;
*) echo "run_train_bench.sh: TORCH_BLAS must be openmp or pthread" >&2; exit 2 ;;
esac

if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S "$root" -B "$build" -DSLUICE_CUDA=OFF >/dev/null
fi
cmake --build "$build" -j"$threads" --target bench_train >/dev/null
bin="$build/bench/bench_train"

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "# $(date -u '+%Y-%m-%d %H:%M UTC') | $(uname -n) | $threads threads | torch BLAS: $TORCH_BLAS | $reps rounds"
echo "# sluice build: $build ($(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?') in $root)"
echo "# OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-unset}"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"

names=(tiny moe-mid)
configs=("$root/configs/tiny.json" "$here/configs/moe-mid.json")
steps=("$STEPS_TINY" "$STEPS_MID")
warm=("$WARMUP_TINY" "$WARMUP_MID")
impls=(sluice hf stacked)
for i in "${!names[@]}"; do
    n=${names[$i]}
    for r in $(seq 1 "$reps"); do
        for impl in "${impls[@]}"; do
            echo "== $n round $r/$reps: $impl (load $(cut -d' ' -f1-3 /proc/loadavg))"
            if [ "$impl" = sluice ]; then
                "$bin" "${configs[$i]}" --threads "$threads" --steps "${steps[$i]}" \
                    --warmup "${warm[$i]}" | tee "$out/$n.$impl.$r"
            else
                "${torch_env[@]}" "$PYTHON" "$here/torch_train_bench.py" "${configs[$i]}" \
                    --variant "$impl" --threads "$threads" --steps "${steps[$i]}" \
                    --warmup "${warm[$i]}" | tee "$out/$n.$impl.$r"
            fi
        done
    done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"

echo
"$PYTHON" - "$out" "$reps" "${names[@]}" <<'EOF'
import json, statistics, sys
out, reps, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
impls = ("sluice", "hf", "stacked")
def last_json(path):
    return json.loads(open(path).read().strip().splitlines()[-1])
med = statistics.median
print(f"Medians over {reps} interleaved rounds (sluice, hf, stacked, sluice, ...). tok/s = tokens per")
print("second over a run's timed steps (mean step time); 'sluice/hf', 'sluice/stacked' = sluice's")
print("median tok/s / that PyTorch variant's median tok/s; 'rounds' = the range of the per-round")
print("ratios (each round's sluice run / the same round's torch run); 'best' = the ratio of the")
print("fastest steps over all rounds (robust to interference); 'of peak' = sluice's model FLOP/s")
print("(model/counts.h) / OpenBLAS sgemm 2048^3 peak measured in the same run.")
print("hf = PyTorch, Hugging Face style (per-expert nn.Linear, Python loop over experts);")
print("stacked = PyTorch, stacked expert weights + grouped GEMMs + AdamW over 256K-element blocks.")
cols = [("config", 8), ("sluice tok/s", 12), ("hf tok/s", 9), ("stacked tok/s", 13),
        ("sluice/hf", 9), ("rounds", 11), ("best", 6), ("sluice/stacked", 14), ("rounds", 11),
        ("best", 6), ("sluice GFLOP/s", 14), ("of peak", 7)]
print(" ".join(f"{h:<{w}}" if i == 0 else f"{h:>{w}}" for i, (h, w) in enumerate(cols)))
for n in names:
    runs = {i: [last_json(f"{out}/{n}.{i}.{r}") for r in range(1, reps + 1)] for i in impls}
    tok = {i: [j["tokens_per_s"] for j in runs[i]] for i in impls}
    fastest = {i: min(j["ms_per_step_min"] for j in runs[i]) for i in impls}
    s = runs["sluice"]
    vals = [n, f"{med(tok['sluice']):.1f}", f"{med(tok['hf']):.1f}", f"{med(tok['stacked']):.1f}"]
    for t in ("hf", "stacked"):
        per = [a / b for a, b in zip(tok["sluice"], tok[t])]
        vals += [f"{med(tok['sluice']) / med(tok[t]):.2f}x", f"{min(per):.2f}-{max(per):.2f}x",
                 f"{fastest[t] / fastest['sluice']:.2f}x"]
    vals += [f"{med(j['model_flops_per_s'] for j in s) * 1e-9:.2f}",
             f"{100 * med(j['peak_fraction'] for j in s):.1f}%"]
    print(" ".join(f"{v:<{w}}" if i == 0 else f"{v:>{w}}" for i, (v, (_, w)) in enumerate(zip(vals, cols))))
print()
print("per round, tok/s (sluice / hf / stacked):")
for n in names:
    for r in range(1, reps + 1):
        v = [last_json(f"{out}/{n}.{i}.{r}")["tokens_per_s"] for i in impls]
        print(f"  {n:<8} round {r}: {v[0]:.1f} / {v[1]:.1f} / {v[2]:.1f}")
EOF
