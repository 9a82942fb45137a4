#!/usr/bin/env bash
# bench/run_gpu_bench.sh - issue 9's GPU benchmark: sluice's CUDA backend (gpu_train_bench)
# against PyTorch (gpu_train_bench_torch.py) on the same model, and the two targets:
#   sluice's model FLOP/s >= 35% of the bf16 GEMM peak measured in the same run;
#   sluice's tokens/s >= 3x PyTorch's.
#
#   bench/run_gpu_bench.sh [--build DIR] [--bin PATH] [--python PY] [--config PATH]
#                          [--layers N] [--seq S] [--batch B] [--accum N] [--steps N]
#                          [--warmup N] [--quick] [--no-torch]
#
# --build DIR  the CMake build to use (default build-gpu; configured with -DSLUICE_CUDA=ON when
#              it has no cache yet) and build gpu_train_bench in it
# --bin PATH   a gpu_train_bench that is already built (for example from the relocatable
#              bundle of launch/bundle.sh: source its env.sh first); nothing is built
# --python PY  the interpreter with PyTorch (and transformers) on the GPU node (default python3)
# --layers N   decoder layers for both (default: the most that fit, chosen by gpu_train_bench;
#              when PyTorch runs out of memory with that many, both run again with one fewer,
#              at most twice, so that the ratio compares the same model)
# --quick      3 timed steps after 1 warm-up and a 4096^3 peak (checks the script)
# --no-torch   sluice only (the fraction-of-peak target)
# --no-attn    leave out the attention benchmark below; --attn-only: only it
# --nondeterministic  passed to attn_bench (the backend's atomic variants, e.g. dQ)
# --config, --seq, --batch, --accum, --steps and --warmup go to both sides. Each side prints
# its own details and a JSON line; the last line here is one JSON object with both results
# and the targets.
# Then the attention benchmark (issue "Fused gated flash attention on tensor cores"): attn_bench
# (next to gpu_train_bench) and attn_bench_torch.py at the paper's shapes (H 32, KV 4, D 128 and
# 64, seq 4096 and 32768), with the targets sluice >= 0.8x PyTorch's fastest SDPA backend + gate
# on forward + backward and >= 1.0x on the forward; its last line is JSON too. Where libcudnn 9
# loads, attn_bench also times cuDNN's SDPA + sluice's gate (its "cudnn" kernel) in the same
# process, and the table of sluice against it comes with issue 22's targets (forward >= 1.0x,
# forward + backward >= 0.9x).
set -euo pipefail
cd "$(dirname "$0")/.."

build=build-gpu bin="" py=python3 config=configs/qwen-gated-15a2b.json
layers="" seq="" batch="" accum=1 steps=10 warmup=2 peak_n=8192 torch=1 attn=1 train=1 nondet=()
quick=0
while [ $# -gt 0 ]; do
    case "$1" in
    --build) build=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --python) py=$2; shift 2 ;;
    --config) config=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --seq) seq=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --accum) accum=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --quick) steps=3 warmup=1 peak_n=4096 quick=1; shift ;;
    --no-torch) torch=0; shift ;;
    --no-attn) attn=0; shift ;;
    --attn-only) train=0; shift ;;
    --nondeterministic) nondet=(--nondeterministic); shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "run_gpu_bench.sh: unknown option '$1' (--help)" >&2; exit 2 ;;
    esac
done

if [ -z "$bin" ]; then
    if [ ! -f "$build/CMakeCache.txt" ]; then
        cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DSLUICE_CUDA=ON -DSLUICE_TESTS=OFF
    fi
    cmake --build "$build" -j"$(nproc)" --target gpu_train_bench attn_bench
    bin=$build/bench/gpu_train_bench
fi
[ -x "$bin" ] || { echo "run_gpu_bench.sh: $bin is not executable" >&2; exit 1; }
attn_bin=$(dirname "$bin")/attn_bench

common=(--accum "$accum" --steps "$steps" --warmup "$warmup")
[ -n "$seq" ] && common+=(--seq "$seq")
[ -n "$batch" ] && common+=(--batch "$batch")
log=$(mktemp -d "${TMPDIR:-/tmp}/run_gpu_bench.XXXXXX")
trap 'rm -rf "$log"' EXIT

# The last line of a side's output is its JSON object.
run_sluice() { # LAYERS (empty: the bench chooses)
    local extra=()
    [ -n "$1" ] && extra=(--layers "$1")
    echo "== sluice: $bin $config ${common[*]} ${extra[*]} --peak-n $peak_n"
    "$bin" "$config" "${common[@]}" "${extra[@]}" --peak-n "$peak_n" | tee "$log/sluice.txt"
    tail -n 1 "$log/sluice.txt" > "$log/sluice.json"
}
run_torch() { # LAYERS; returns the script's exit status (3: out of memory)
    echo "== torch: $py bench/gpu_train_bench_torch.py $config ${common[*]} --layers $1"
    set +e
    "$py" bench/gpu_train_bench_torch.py "$config" "${common[@]}" --layers "$1" --peak-n "$peak_n" \
        | tee "$log/torch.txt"
    local rc=${PIPESTATUS[0]}
    set -e
    tail -n 1 "$log/torch.txt" > "$log/torch.json"
    return "$rc"
}
field() { # FILE KEY
    "$py" -c 'import json,sys; v=json.load(open(sys.argv[1])).get(sys.argv[2]); print("" if v is None else v)' "$1" "$2"
}

# The attention benchmark: both sides at the same shapes, then the ratios and targets.
run_attn() {
    [ -x "$attn_bin" ] || { echo "run_gpu_bench.sh: $attn_bin is not executable" >&2; exit 1; }
    local short=()
    [ "$quick" = 1 ] && short=(--iters 3 --warmup 1)
    echo "== attention, sluice: $attn_bin --backend cuda --dtype bf16 ${short[*]} ${nondet[*]}"
    "$attn_bin" --backend cuda --dtype bf16 "${short[@]}" "${nondet[@]}" | tee "$log/attn.txt"
    local tjson=""
    if [ "$torch" = 1 ]; then
        echo "== attention, torch: $py bench/attn_bench_torch.py ${short[*]}"
        set +e
        "$py" bench/attn_bench_torch.py "${short[@]}" | tee "$log/attn_torch.txt"
        local rc=${PIPESTATUS[0]}
        set -e
        tjson=$log/attn_torch.txt
        [ "$rc" = 77 ] && tjson="" # skipped (no PyTorch 2.x or no CUDA): said why above
        [ "$rc" = 0 ] || [ "$rc" = 77 ] || { echo "run_gpu_bench.sh: attn_bench_torch.py failed" >&2; exit 1; }
    fi
    "$py" - "$log/attn.txt" "$tjson" <<'EOF'
import json, sys
def rows(path, impl=None):
    out = {}
    for line in open(path) if path else []:
        if line.startswith("{"):
            r = json.loads(line)
            if impl and r.get("impl", "sluice") != impl:
                continue
            out[(r["batch"], r["seq"], r["heads"], r["kv_heads"], r["head_dim"])] = r
    return out
# attn_bench prints sluice's rows and, where libcudnn 9 loads, the cudnn kernel's (cuDNN's SDPA
# plus sluice's gate, timed in the same process)
s, c, t = rows(sys.argv[1], "sluice"), rows(sys.argv[1], "cudnn"), rows(sys.argv[2])
print()
print("== attention (bf16, causal, elementwise gate): ms (FLOPs: fwd 4BHDS^2/2, bwd 2.5x fwd)")
print("%-22s %9s %9s %9s %9s %14s %7s %7s" % ("B/S/H/KV/D", "sluice f", "sluice b", "torch f",
      "torch b", "torch backend", "fwd x", "f+b x"))
res = []
for key, r in s.items():
    o = t.get(key)
    line = "%-22s %9.3f %9.3f" % ("/".join(map(str, key)), r["fwd_ms"], r["bwd_ms"])
    if o and o.get("sdpa_backend"):
        fx = o["best_fwd_ms"] / r["fwd_ms"]
        fbx = o["fwd_bwd_ms"] / (r["fwd_ms"] + r["bwd_ms"])
        line += " %9.3f %9.3f %14s %7.2f %7.2f" % (o["fwd_ms"], o["bwd_ms"], o["sdpa_backend"], fx, fbx)
        res.append({"shape": key, "fwd_speedup": fx, "fwd_bwd_speedup": fbx,
                    "fwd_target_met": fx >= 1.0, "fwd_bwd_target_met": fbx >= 0.8})
    print(line)
if res:
    print("targets: forward >= 1.0x torch's fastest forward: %s; forward + backward >= 0.8x: %s" % (
        "MET" if all(r["fwd_target_met"] for r in res) else "NOT MET",
        "MET" if all(r["fwd_bwd_target_met"] for r in res) else "NOT MET"))
cres = []
if c:
    print("== against cuDNN's SDPA + sluice's gate (attn_bench --kernel cudnn, same process)")
    print("%-22s %9s %9s %9s %9s %7s %7s" % ("B/S/H/KV/D", "sluice f", "sluice b", "cudnn f",
          "cudnn b", "fwd x", "f+b x"))
    for key, r in s.items():
        o = c.get(key)
        if not o:
            continue
        fx = o["fwd_ms"] / r["fwd_ms"]
        fbx = (o["fwd_ms"] + o["bwd_ms"]) / (r["fwd_ms"] + r["bwd_ms"])
        print("%-22s %9.3f %9.3f %9.3f %9.3f %7.2f %7.2f" % ("/".join(map(str, key)), r["fwd_ms"],
              r["bwd_ms"], o["fwd_ms"], o["bwd_ms"], fx, fbx))
        cres.append({"shape": key, "fwd_speedup": fx, "fwd_bwd_speedup": fbx,
                     "fwd_target_met": fx >= 1.0, "fwd_bwd_target_met": fbx >= 0.9})
    if cres:
        print("targets (issue 22): forward >= 1.0x cuDNN: %s; forward + backward >= 0.9x: %s" % (
            "MET" if all(r["fwd_target_met"] for r in cres) else "NOT MET",
            "MET" if all(r["fwd_bwd_target_met"] for r in cres) else "NOT MET"))
print(json.dumps({"attention": {"sluice": list(s.values()), "cudnn": list(c.values()),
                                "torch": list(t.values()), "ratios": res, "cudnn_ratios": cres}}))
EOF
}
if [ "$train" = 0 ]; then
    run_attn
    exit 0
fi

run_sluice "$layers"
n=$(field "$log/sluice.json" layers)
if [ "$torch" = 1 ]; then
    tries=0
    while :; do
        rc=0
        run_torch "$n" || rc=$?
        [ "$rc" = 0 ] && break
        if [ "$rc" != 3 ] || [ "$tries" -ge 2 ] || [ "$n" -le 1 ]; then
            echo "run_gpu_bench.sh: the PyTorch side failed (exit $rc)" >&2
            exit 1
        fi
        tries=$((tries + 1)) n=$((n - 1))
        echo "== PyTorch ran out of memory: both sides again with $n layers"
        run_sluice "$n"
    done
fi

"$py" - "$log/sluice.json" "$log/torch.json" "$torch" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
t = json.load(open(sys.argv[2])) if sys.argv[3] == "1" else None
print()
print("== %s on %s: %d layers, %d x %d tokens x %d micro-batch(es), precision %s (activations %s)" % (
    s["config"], s["device"], s["layers"], s["batch"], s["seq"], s["accum"], s["precision"],
    s["activation_dtype"]))
print("%-28s %14s %12s %14s" % ("", "tokens/s", "ms/step", "model TFLOP/s"))
print("%-28s %14.1f %12.2f %14.2f" % ("sluice", s["tokens_per_s"], s["ms_per_step"], s["model_tflops"]))
if t:
    print("%-28s %14.1f %12.2f %14.2f" % (t["impl"], t["tokens_per_s"], t["ms_per_step"],
                                        t["model_tflops"]))
if t and (t["layers"] != s["layers"] or t["seq"] != s["seq"] or t["batch"] != s["batch"]):
    print("WARNING: the two sides ran different shapes (layers %d/%d, seq %d/%d, batch %d/%d): the "
          "ratio compares different models" % (s["layers"], t["layers"], s["seq"], t["seq"], s["batch"], t["batch"]))
elif t and abs(t["flops_per_token"] - s["flops_per_token"]) > 1e-9 * s["flops_per_token"]:
    print("WARNING: FLOPs/token differ (sluice %.6g, torch %.6g): model/counts.c and "
          "bench/perf_model.py disagree" % (s["flops_per_token"], t["flops_per_token"]))
frac = s.get("peak_fraction")
ratio = s["tokens_per_s"] / t["tokens_per_s"] if t else None
out = {"sluice": s, "torch": t, "peak_fraction": frac, "speedup_vs_torch": ratio}
if frac is not None:
    print("bf16 GEMM peak (cuBLAS %d^3, measured): %.1f TFLOP/s; sluice at %.1f%% of it: target >= 35%%: %s" % (
        s["gemm_peak_n"], s["gemm_peak_tflops"], 100 * frac, "MET" if frac >= 0.35 else "NOT MET"))
    out["peak_target_met"] = frac >= 0.35
else:
    print("bf16 GEMM peak: not measured")
if ratio is not None:
    print("sluice / torch tokens/s: %.2fx: target >= 3x: %s" % (ratio, "MET" if ratio >= 3 else "NOT MET"))
    out["speedup_target_met"] = ratio >= 3
print(json.dumps(out))
EOF
[ "$attn" = 1 ] && run_attn
exit 0
