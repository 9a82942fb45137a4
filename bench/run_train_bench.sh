#!/usr/bin/env bash
# bench/run_train_bench.sh - training tokens/s of sluice's CPU backend vs the same model in
# PyTorch (float32, same threads, batch, sequence, steps), on configs/tiny.json and
# bench/configs/moe-mid.json. Prints one table at the end (bench/README.md explains it).
#
#   bench/run_train_bench.sh [--threads N] [--build DIR] [--quick]
#
# Environment: PYTHON (default /usr/bin/python3), TORCH_BLAS = pthread | openmp (default
# openmp: torch's BLAS calls go to the OpenMP build of OpenBLAS, the library sluice links;
# see README for why), STEPS_TINY / WARMUP_TINY / STEPS_MID / WARMUP_MID.
# OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are left as they are, for both sides alike.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
threads=2
build="$root/build-bench"
quick=0
while [ $# -gt 0 ]; do
    case "$1" in
    --threads) threads=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    -h | --help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "run_train_bench.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
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
echo "# $(date -u '+%Y-%m-%d %H:%M UTC') | $(uname -n) | $threads threads | torch BLAS: $TORCH_BLAS"
echo "# OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-unset}"
echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"

names=(tiny moe-mid)
configs=("$root/configs/tiny.json" "$here/configs/moe-mid.json")
steps=("$STEPS_TINY" "$STEPS_MID")
warm=("$WARMUP_TINY" "$WARMUP_MID")
for i in "${!names[@]}"; do
    n=${names[$i]}
    echo "== $n: sluice (load $(cut -d' ' -f1-3 /proc/loadavg))"
    "$bin" "${configs[$i]}" --threads "$threads" --steps "${steps[$i]}" --warmup "${warm[$i]}" \
        | tee "$out/$n.sluice"
    echo "== $n: torch (load $(cut -d' ' -f1-3 /proc/loadavg))"
    "${torch_env[@]}" "$PYTHON" "$here/torch_train_bench.py" "${configs[$i]}" --threads "$threads" \
        --steps "${steps[$i]}" --warmup "${warm[$i]}" | tee "$out/$n.torch"
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"

echo
"$PYTHON" - "$out" "${names[@]}" <<'EOF'
import json, sys
out, names = sys.argv[1], sys.argv[2:]
def last_json(path):
    return json.loads(open(path).read().strip().splitlines()[-1])
print("tok/s = tokens per second over all timed steps (mean); 'best' = the ratio of the fastest")
print("steps of each side (robust to interference from other processes); 'of peak' = sluice's")
print("model FLOP/s (core/model_stats.h) / OpenBLAS sgemm 2048^3 peak measured in the same run.")
print(f"{'config':<8} {'sluice tok/s':>12} {'torch tok/s':>11} {'ratio':>6} {'best':>6} "
      f"{'sluice ms/step':>14} {'torch ms/step':>13} {'sluice GFLOP/s':>14} {'sgemm GFLOP/s':>13} "
      f"{'of peak':>7}")
for n in names:
    s, t = last_json(f"{out}/{n}.sluice"), last_json(f"{out}/{n}.torch")
    print(f"{n:<8} {s['tokens_per_s']:>12.1f} {t['tokens_per_s']:>11.1f} "
          f"{s['tokens_per_s'] / t['tokens_per_s']:>5.2f}x "
          f"{t['ms_per_step_min'] / s['ms_per_step_min']:>5.2f}x {s['ms_per_step']:>14.1f} "
          f"{t['ms_per_step']:>13.1f} {s['model_flops_per_s'] * 1e-9:>14.2f} "
          f"{s['sgemm_peak_flops_per_s'] * 1e-9:>13.2f} {100 * s['peak_fraction']:>6.1f}%")
EOF
