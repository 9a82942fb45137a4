#!/usr/bin/python3
"""The rates of `sluice plan` (trainer/plan_rates.c) from one bench/gpu_check.sh run.

usage: bench/plan_rates.py derive DIR [--config CONFIG]
       bench/plan_rates.py check DIR RATES_C [--gpu NAME] [--config CONFIG]
       bench/plan_rates.py results DIR --gpu NAME --date DATE --commit C --expert-gemm S
                                   [--source TEXT]

DIR holds gpu_check's speed outputs: profile.json and profile_ep8.json (gpu_train_bench
--profile --json lines), expert_gemm.out (expert_gemm_bench) and attn_bench.out (attn_bench,
with its JSON lines). bench/results/h200-2026-11-26c/ holds the H200 runs the table is read
from (2026-11-26, the expert GEMMs' `auto` = wgmma); bench/results/h200-2026-11-26/ and
h200-2026-11-26b/ the day's earlier runs, kept as history.

derive  prints each rate as trainer/plan_rates.c spells it, with the bench line it came from:
        paste the numbers into the GPU's entry there (docs/plan.md, "Rates").
check   derives the rates and compares them with the GPU's entry of RATES_C (default h200);
        exits 1 naming each rate that differs by more than 0.2% (the table rounds to 4
        digits). tests/plan.cmake runs it, so the table cannot drift from its stored source.
results prints the measured-steps file (bench/results/<gpu>-<date>.json, docs/plan.md
        "Measured steps") of the two profiles, with the plan requests that reproduce them;
        --expert-gemm names the strategy the runs used (auto, grouped, per-expert, lanes or
        wgmma); --source replaces the default provenance line (which runs, which bundle).
        A shape's "expert_gemm_paths" comes from the profile's expert_gemm_path and
        expert_gemm_dw_path where gpu_train_bench wrote them.

CONFIG (default configs/qwen-gated-15a2b.json next to this script's parent) gives the heads and
head dim for the attention FLOPs of the profile's B > 1 entry.
"""
import json
import os
import re
import sys

# The gpu_train_bench --profile regions that trainer/plan_time.c models on their own; every
# other region is "other" (its per-token-and-layer time).
MODELLED = [
    "expert GEMMs fwd", "expert GEMMs data grad", "expert GEMMs weight grad",
    "attention kernel fwd", "attention kernel bwd",
    "qkv+gate projections fwd", "output projection fwd",
    "qkv+gate projections bwd", "output projection bwd",
    "LM head + cross-entropy", "optimizer: AdamW (+ router bias)", "gradient reduction + norm",
]
GEMMS = {"gate_up": "GU", "down": "DN"}
PASSES = {"fwd": "SL_PASS_FWD", "dgrad": "SL_PASS_DGRAD", "dW": "SL_PASS_WGRAD"}
# The strategies the plan times (expert_gemm_bench's strategy column; its `auto` rows are
# another strategy's calls, and `padded` and `grouped-tf32` are not planned).
STRATEGIES = {"grouped": "GR", "per-expert": "PE", "lanes": "LN", "wgmma": "WG"}


def fail(msg):
    sys.stderr.write("plan_rates.py: error: %s\n" % msg)
    sys.exit(2)


def load_json_line(path):
    """The first line of PATH that is a JSON object (gpu_train_bench prints one)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("{"):
                    return json.loads(line)
    except OSError as e:
        fail("%s: %s" % (path, e))
    fail("%s: no JSON line" % path)


def rows_of(profile, path):
    try:
        return {r["region"]: r["ms"] for r in profile["profile"]["rows"]}
    except (KeyError, TypeError):
        fail("%s: no profile rows (run gpu_train_bench with --profile)" % path)


def expert_rates(path):
    """[(strategy, gemm, pass, rows per expert, TFLOP/s)] of expert_gemm_bench's output."""
    out, rows = [], None
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        fail("%s: %s" % (path, e))
    for n, line in enumerate(lines, 1):
        m = re.match(r"rows per expert (\d+)", line)
        if m:
            rows = int(m.group(1))
            continue
        f = line.split()
        if len(f) >= 5 and f[0] in GEMMS and f[1] in PASSES and f[2] in STRATEGIES:
            if rows is None:
                fail("%s:%d: a GEMM row before any 'rows per expert' line" % (path, n))
            # The path column, where there is one, names the calls that ran: a row whose
            # calls were another strategy's (grouped dW runs per expert: cuBLAS refuses the
            # grouped bf16-into-fp32 call) is that strategy's, not a rate of its own.
            if len(f) >= 6 and f[5] != f[2]:
                continue
            out.append((f[2], f[0], f[1], rows, float(f[4])))
    if not out:
        fail("%s: no expert GEMM rows" % path)
    return out


def attention_rates(path):
    """{(B, S, D): (fwd, bwd)} of attn_bench's sm90 deterministic JSON lines."""
    out = {}
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        fail("%s: %s" % (path, e))
    for line in lines:
        if not line.startswith("{"):
            continue
        j = json.loads(line)
        if j.get("impl") == "sluice" and j.get("kernel") == "sm90" and not j.get("nondeterministic"):
            out[(j["batch"], j["seq"], j["head_dim"])] = (j["fwd_tflops"], j["bwd_tflops"])
    if not out:
        fail("%s: no sm90 deterministic rows" % path)
    return out


def derive(d, config):
    p1 = load_json_line(os.path.join(d, "profile.json"))
    p8 = load_json_line(os.path.join(d, "profile_ep8.json"))
    r1, r8 = rows_of(p1, "profile.json"), rows_of(p8, "profile_ep8.json")
    params = p1["total_params"]
    # The norm pass reads every fp32 gradient, but the routed experts' where the Hopper weight
    # gradient's epilogue sums their squares (since 2026-11-27; trainer/plan_time.c counts the
    # same): then only the dense parameters' bytes stream. The runs do not say which they did;
    # a row faster than 10 TB/s over every parameter (no GPU's memory streams that; 2026-11-28:
    # 29 TB/s, 2026-11-26: 4.2) is read as the fused form.
    normed, what = params, "parameters"
    if (p1.get("expert_gemm_dw_path") == "wgmma"
            and params * 4 / r1["gradient reduction + norm"] / 1e6 > 10000):
        m = json.load(open(config))["model"]
        moe_layers = p1["layers"] - sum(1 for i in m.get("mlp_only_layers", []) if i < p1["layers"])
        normed -= moe_layers * m["num_experts"] * 3 * m["hidden_size"] * m["moe_intermediate_size"]
        what = "dense parameters (the experts' squares come from the wgmma dW epilogue)"
    rates = {
        "dense_tflops": (p1["gemm_peak_tflops"], "profile.json gemm_peak_tflops (cublasGemmEx 8192^3)"),
        "stream_gbs": (normed * 4 / r1["gradient reduction + norm"] / 1e6,
                       "%s x 4 B / 'gradient reduction + norm' ms" % what),
        # the bytes the run's optimizer moved per parameter: 30 in bf16 (fp32 master, m, v read
        # and written, fp32 gradient read, bf16 copy written); runs before 2026-11-28 (no key)
        # wrote the copy in a conversion pass of its own under ZeRO-1, one GPU included: 34
        "adamw_gbs": (params * p1.get("optimizer_bytes_per_param", 34)
                      / r1["optimizer: AdamW (+ router bias)"] / 1e6,
                      "parameters x the bytes moved per parameter / 'optimizer: AdamW (+ router bias)' ms"),
    }
    other = sum(ms for region, ms in r1.items() if region not in MODELLED)
    tl = p1["layers"] * p1["batch"] * p1["seq"] * p1["accum"]
    rates["other_ns_token_layer"] = (other / tl * 1e6, "sum of the unmodelled rows / (layers x tokens)")
    expert = expert_rates(os.path.join(d, "expert_gemm.out"))
    attn = attention_rates(os.path.join(d, "attn_bench.out"))
    # The profile's micro-batch as an attention entry when attn_bench has none for it.
    cfg = json.load(open(config))["model"]
    b, s = p8["batch"], p8["seq"]
    calls = p8["layers"] * p8["accum"]
    fwd = 4.0 * b * cfg["num_attention_heads"] * cfg["head_dim"] * s * s / 2
    if (b, s, cfg["head_dim"]) not in attn:
        attn[(b, s, cfg["head_dim"])] = (fwd * calls / r8["attention kernel fwd"] / 1e9,
                                         2.5 * fwd * calls / r8["attention kernel bwd"] / 1e9)
    return rates, expert, attn


def print_rates(rates, expert, attn):
    for k, (v, src) in rates.items():
        print(".%s = %.1f,  /* %s */" % (k, v, src))
    print("/* expert GEMMs: {strategy, gemm, pass, rows per expert, TFLOP/s} */")
    for st, g, ps, rows, tf in expert:
        print("{%s, %s, %s, %d, %.1f}," % (STRATEGIES[st], GEMMS[g], PASSES[ps], rows, tf))
    print("/* attention (sm90, deterministic): {B, S, D, fwd, bwd} */")
    for (b, s, dd), (f, bw) in sorted(attn.items()):
        print("{%d, %d, %d, %.2f, %.2f}," % (b, s, dd, f, bw))


def entry_of(text, gpu):
    """The scalar fields and tables of `static const sl_plan_gpu GPU = {...};` in plan_rates.c."""
    m = re.search(r"static const sl_plan_gpu %s = \{(.*?)\n\};" % re.escape(gpu), text, re.S)
    if not m:
        fail("no 'static const sl_plan_gpu %s' in the rates file" % gpu)
    body = re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S)
    fields = {k: float(v) for k, v in re.findall(r"\.(\w+)\s*=\s*([0-9.]+)", body)}

    def table(name):
        t = re.search(r"static const sl_rate_\w+ %s\[\] = \{(.*?)\n\};" % re.escape(name), text, re.S)
        if not t:
            fail("no table %s in the rates file" % name)
        return re.findall(r"\{([^{}]*)\}", re.sub(r"/\*.*?\*/", "", t.group(1), flags=re.S))

    return fields, table("%s_expert" % gpu), table("%s_attention" % gpu)


def close(a, b):
    return abs(a - b) <= 2e-3 * abs(b)


def check(d, rates_c, gpu, config):
    rates, expert, attn = derive(d, config)
    fields, etab, atab = entry_of(open(rates_c).read(), gpu)
    bad = []
    for k, (v, src) in rates.items():
        if k not in fields or not close(fields[k], v):
            bad.append("%s: table %s, derived %.2f (%s)" % (k, fields.get(k), v, src))
    table = {}
    for row in etab:
        f = [x.strip() for x in row.split(",")]
        table[(f[0], f[1], f[2], int(float(f[3])))] = float(f[4])
    for st, g, ps, rows, tf in expert:
        key = (STRATEGIES[st], GEMMS[g], PASSES[ps], rows)
        if key not in table or not close(table[key], tf):
            bad.append("expert %s: table %s, derived %.1f" % (key, table.get(key), tf))
    have = {}
    for row in atab:
        f = [float(x) for x in row.split(",")]
        have[(int(f[0]), int(f[1]), int(f[2]))] = (f[3], f[4])
    for key, (fw, bw) in attn.items():
        t = have.get(key)
        if not t or not close(t[0], fw) or not close(t[1], bw):
            bad.append("attention %s: table %s, derived (%.2f, %.2f)" % (key, t, fw, bw))
    for line in bad:
        print("differs: %s" % line)
    n = len(rates) + len(expert) + len(attn)
    print("plan_rates.py check: %d rates of %s compared with %s: %d differ" % (n, gpu, d, len(bad)))
    return 1 if bad else 0


def results(d, gpu, date, commit, strategy, config, source=None):
    shapes = []
    for name, what in (("profile", "the measured shape"),
                       ("profile_ep8", "the per-GPU expert load of an EP-8 deployment"),
                       ("profile_group4", "the measured shape, expert weight gradients over groups of 4")):
        if name == "profile_group4" and not os.path.exists(os.path.join(d, name + ".json")):
            continue  # an optional part (calls before 2026-11-28 did not run it)
        p = load_json_line(os.path.join(d, name + ".json"))
        rows_of(p, name + ".json")
        shapes.append({
            "name": name,
            "what": "%s: %d micro-batch(es) of %d x %d tokens" % (what, p["accum"], p["batch"], p["seq"]),
            "command": "gpu_train_bench CONFIG --profile --layers %d --batch %d --seq %d --accum %d "
                       "(bench/gpu_check.sh part '%s')" % (p["layers"], p["batch"], p["seq"], p["accum"], name),
            "plan": {"config": os.path.relpath(config, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")),
                     "gpu": gpu, "gpus": 1, "ep": 1, "layers": p["layers"], "seq_len": p["seq"],
                     "micro_batch": p["batch"], "global_batch": p["seq"] * p["batch"] * p["accum"],
                     "recompute": "none", "expert_gemm": strategy,
                     # the run's pairs as it ran them (runs before the key: off)
                     "defer_wgrad": "on" if p.get("defer_expert_wgrad") else "off"},
            "attention_kernel": p.get("attention_kernel"),
        })
        # a run that deferred: its group, always named (runs before the key: pairs; the config's
        # default is automatic since 2026-11-28), and what its parked micro-batches kept (runs
        # before the key: rows); a run that defers nothing (one micro-batch, or deferral off)
        # reports a group of 1, which plan has no flag for
        if p.get("defer_expert_wgrad"):
            group, park = p.get("expert_wgrad_group", 2), p.get("park_expert_rows", "rows")
            shapes[-1]["plan"].update({"wgrad_group": group, "park": park})
            shapes[-1]["command"] = shapes[-1]["command"].replace(
                " (bench", " --wgrad-group %d --park %s (bench" % (group, park))
        if p.get("expert_gemm_path"):
            shapes[-1]["expert_gemm_paths"] = "forward and data gradient %s; weight gradient %s" % (
                p["expert_gemm_path"], p.get("expert_gemm_dw_path", "?"))
        shapes[-1].update({
            "ms_per_step": p["ms_per_step"],
            "ms_per_step_median": p.get("ms_per_step_median"),
            "gemm_peak_tflops": p.get("gemm_peak_tflops"),
            "peak_fraction": p.get("peak_fraction"),
            "total_params": p["total_params"],
            "profile_ms_per_step": p["profile"]["step_wall_ms"],
            "profile_rows_ms": {r["region"]: round(r["ms"], 4) for r in p["profile"]["rows"]},
        })
    doc = {"what": "Measured single-GPU training steps of sluice that `sluice plan --gpu %s` is "
                   "checked against (tests/test_plan_measured.c). Rows: gpu_train_bench --profile "
                   "regions, device ms per step (exclusive)." % gpu,
           "device": shapes and load_json_line(os.path.join(d, "profile.json")).get("device"),
           "date": date, "sluice_commit": commit,
           "source": source or "bench/gpu_check.sh parts profile and profile_ep8; raw outputs in %s" % d,
           "tolerance": 0.15, "shapes": shapes}
    print(json.dumps(doc, indent=1))
    return 0


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help") or argv[1] not in ("derive", "check", "results"):
        sys.stdout.write(__doc__)
        return 0 if len(argv) > 1 and argv[1] in ("-h", "--help") else 2
    args, opts = [], {"--gpu": "h200", "--date": None, "--commit": None, "--expert-gemm": "auto",
                      "--source": None,
                      "--config": os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                               "configs", "qwen-gated-15a2b.json")}
    i = 2
    while i < len(argv):
        if argv[i] in opts:
            if i + 1 >= len(argv):
                fail("%s needs a value" % argv[i])
            opts[argv[i]] = argv[i + 1]
            i += 2
        else:
            args.append(argv[i])
            i += 1
    if argv[1] == "derive":
        if len(args) != 1:
            fail("derive needs DIR")
        print_rates(*derive(args[0], opts["--config"]))
        return 0
    if argv[1] == "results":
        if len(args) != 1 or not opts["--date"] or not opts["--commit"]:
            fail("results needs DIR, --date and --commit")
        return results(args[0], opts["--gpu"], opts["--date"], opts["--commit"],
                       opts["--expert-gemm"], opts["--config"], opts["--source"])
    if len(args) != 2:
        fail("check needs DIR and RATES_C")
    return check(args[0], args[1], opts["--gpu"], opts["--config"])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
