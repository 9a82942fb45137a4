#!/usr/bin/env bash
# The small reproduction of docs/results.md: configs/tiny-schedule.json on the quickstart corpus
# (data/kjv, made by launch/quickstart.sh), trained with the elementwise output gate and without
# a gate (same seed, same data), then evaluated:
#   - held-out loss after each stage (from each run's metrics.jsonl);
#   - the paper's diagnostics (sluice eval --diagnostics) at the trained length (2,048, RoPE
#     base 1M, no YaRN) and at 8,192 with the YaRN x4 stage's settings and without YaRN;
#   - plots: training curves (sluice plot) and the diagnostics (sluice eval --plot).
# usage: bench/tiny_schedule_results.sh [SLUICE] [OUT_DIR] [SEED]   (defaults:
#        build/launch/sluice, runs/results, the config's training.seed); figures go to
#        OUT_DIR/*.json and OUT_DIR/*.png, the summary tables (markdown) to stdout.
set -euo pipefail
sluice=${1:-build/launch/sluice}
out=${2:-runs/results}
seed=()
[ -n "${3:-}" ] && seed=(--set "training.seed=$3")
data=data/kjv
[ -d "$data/train" ] && [ -d "$data/eval" ] || {
    echo "tiny_schedule_results: $data/train and $data/eval missing: run launch/quickstart.sh first" >&2
    exit 2
}
mkdir -p "$out"
for gate in elementwise none; do
    name=gated
    [ "$gate" = none ] && name=ungated
    if [ ! -f "$out/$name/final/model.safetensors" ]; then
        /usr/bin/time -f "%e s wall, %M KiB peak RSS" -o "$out/$name.time" \
            "$sluice" train configs/tiny-schedule.json --set training.out_dir="$out/$name" \
            --set model.attn_output_gate="$gate" "${seed[@]}" > "$out/$name.log" 2>&1
    fi
    "$sluice" plot "$out/$name" -o "$out/$name-training.png" --title "tiny-schedule, gate $gate"
    w="$out/$name/final"
    common=(--weights "$w" --data "$data/eval" --batch 1 --diagnostics --json)
    # the trained length and settings of the "long" stage: RoPE base 1M, no YaRN
    "$sluice" eval "${common[@]}" --seq-len 2048 --max-tokens 65536 --rope-scaling none \
        --plot "$out/$name-diag-2048.png" > "$out/$name-diag-2048.json"
    # 4x beyond it: with the YaRN stage's settings (saved in config.json) and without YaRN
    "$sluice" eval "${common[@]}" --seq-len 8192 --max-tokens 65536 \
        --plot "$out/$name-diag-8192-yarn.png" > "$out/$name-diag-8192-yarn.json"
    "$sluice" eval "${common[@]}" --seq-len 8192 --max-tokens 65536 --rope-scaling none \
        > "$out/$name-diag-8192-noyarn.json"
done

/usr/bin/python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def metrics(name):
    recs = [json.loads(l) for l in open(f"{out}/{name}/metrics.jsonl")]
    steps = {r["step"]: r for r in recs if "event" not in r}
    evals = {r["stage"]: r["eval_loss"] for r in recs if r.get("event") == "eval"}
    return steps, evals
print("| | gated (elementwise) | ungated |")
print("|---|---|---|")
rows = {}
for name in ("gated", "ungated"):
    steps, evals = metrics(name)
    rows.setdefault("eval loss after pretrain (256, base 10k)", []).append(steps[300]["eval_loss"])
    rows.setdefault("eval loss at the start of long (2048, base 1M)", []).append(evals["long"])
    rows.setdefault("eval loss after long (2048, base 1M)", []).append(steps[380]["eval_loss"])
    rows.setdefault("eval loss of the yarn stage (8192, YaRN x4)", []).append(evals["yarn"])
    for tag in ("2048", "8192-yarn", "8192-noyarn"):
        d = json.load(open(f"{out}/{name}-diag-{tag}.json"))
        rows.setdefault(f"sluice eval loss, {tag}", []).append(d["loss"])
for k, v in rows.items():
    print(f"| {k} | {v[0]:.4f} | {v[1]:.4f} |")
for tag in ("2048", "8192-yarn", "8192-noyarn"):
    print(f"\n### diagnostics, {tag}\n")
    g = json.load(open(f"{out}/gated-diag-{tag}.json"))
    u = json.load(open(f"{out}/ungated-diag-{tag}.json"))
    print("| positions | gated loss | ungated loss |")
    print("|---|---|---|")
    for bg, bu in zip(g["buckets"], u["buckets"]):
        print(f"| [{bg['start']}, {bg['end']}) | {bg['loss']:.4f} | {bu['loss']:.4f} |")
    print("\n| layer | gate score (gated) | first-token share gated | ungated | max activation gated | ungated |")
    print("|---|---|---|---|---|---|")
    for lg, lu in zip(g["layers"], u["layers"]):
        print(f"| {lg['layer']} | {lg['gate_score']:.4f} | {lg['first_token_share']:.4f} | "
              f"{lu['first_token_share']:.4f} | {lg['max_activation']:.3f} | {lu['max_activation']:.3f} |")
PY

# gated vs ungated: loss by position at 8,192 with and without YaRN, and at the trained 2,048
/usr/bin/python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
with open(f"{out}/compare.dat", "w") as f:
    for tag in ("2048", "8192-yarn", "8192-noyarn"):
        f.write(f'"{tag}"\n')
        g = json.load(open(f"{out}/gated-diag-{tag}.json"))["buckets"]
        u = json.load(open(f"{out}/ungated-diag-{tag}.json"))["buckets"]
        for bg, bu in zip(g, u):
            f.write(f"{(bg['start'] + bg['end']) / 2} {bg['loss']} {bu['loss']}\n")
        f.write("\n\n")
PY
gnuplot <<EOF2
set terminal pngcairo size 900,560 font ",10"
set output "$out/compare-positions.png"
set title "held-out loss by query position (tiny-schedule; trained up to 2,048 tokens)"
set xlabel "query position (bucket centre)"
set ylabel "loss (nats/token)"
set logscale x 2
set key top left
set grid
set arrow from 2048, graph 0 to 2048, graph 1 nohead dt 2
plot "$out/compare.dat" index 0 using 1:2 with linespoints lc rgb "#1b9e77" title "gated, 2,048", \
     "" index 0 using 1:3 with linespoints lc rgb "#d95f02" title "ungated, 2,048", \
     "" index 1 using 1:2 with linespoints dt 1 pt 7 lc rgb "#1b9e77" title "gated, 8,192 YaRN x4", \
     "" index 1 using 1:3 with linespoints dt 1 pt 7 lc rgb "#d95f02" title "ungated, 8,192 YaRN x4", \
     "" index 2 using 1:2 with linespoints dt 3 pt 4 lc rgb "#1b9e77" title "gated, 8,192 no YaRN", \
     "" index 2 using 1:3 with linespoints dt 3 pt 4 lc rgb "#d95f02" title "ungated, 8,192 no YaRN"
EOF2
