"""bench/gpu_check.py's benchmark parts: the attention kernels (attn_bench, its variants, the
longest sequence), the expert GEMMs (expert_gemm_bench, its ablation) and the PyTorch
baselines; each records its result (gpu_check_core.record)."""
import json
import os
import re
import time

import gpu_check_core as C
from gpu_check_core import RESULTS, last_json, record, run, torch_cuda, torch_env
from ncu_log import UNIT_MS, kernel_times, launch_metrics, metric

def part_attn(L, budget, S):
    log, out = os.path.join(C.LOGS, "attn_bench.log"), os.path.join(C.OUT, "attn_bench.out")
    if not os.path.exists(L.attn_bench):
        return record("attn_bench", "SKIP", 0, "no attn_bench (bundle made without --with-tests)")
    rc, sec = run([L.attn_bench, "--backend", "cuda", "--dtype", "bf16"] + S["attn"], budget, log, stdout_path=out)
    if rc is None:
        return record("attn_bench", "TIMEOUT", sec, "")
    if rc != 0:
        return record("attn_bench", "FAIL", sec, "exit %d" % rc)
    rows = [json.loads(l) for l in open(out) if l.startswith("{")]
    note = "; ".join("%s S %d D %d: fwd %.0f, bwd %.0f TFLOP/s" % (r.get("kernel", "?"), r["seq"], r["head_dim"],
                                                                r.get("fwd_tflops", 0), r.get("bwd_tflops", 0))
                     for r in rows)
    why = torch_cuda()
    if why is None and budget - sec > 15:
        tout = os.path.join(C.OUT, "attn_bench_torch.out")
        trc, tsec = run([C.ARGS.python, os.path.join(L.bench_dir, "attn_bench_torch.py"), "--iters", "5",
                         "--warmup", "1"], budget - sec, log, env=torch_env(), stdout_path=tout)
        sec += tsec
        note += "; PyTorch: %s" % ("done" if trc == 0 else "exit %s" % trc)
    else:
        note += "; PyTorch side skipped: %s" % (why or "no time left")
    record("attn_bench", "PASS", sec, note, result=rows)


def attn_process(part, args, budget, log, out, sec, notes, what, env=None):
    """One attn_bench process of a part that has taken `sec` of its budget so far, its output in
    `out`: (its JSON rows, the part's seconds), or (None, seconds) once the part's TIMEOUT, SKIP
    (no Hopper kernel here) or FAIL (`what` names the run) is recorded."""
    rc, t = run(args, budget - sec, log, env=env, stdout_path=out)
    sec += t
    if rc is None:
        record(part, "TIMEOUT", sec, "; ".join(notes))
    elif rc == 77:
        record(part, "SKIP", sec, "the Hopper kernel cannot run here")
    elif rc != 0:
        record(part, "FAIL", sec, "%s: exit %d" % (what, rc))
    else:
        return [json.loads(l) for l in open(out) if l.startswith("{")], sec
    return None, sec


def part_attn_variants(L, budget, part, var, values, shapes, out_name, tag, check=None, fixed=None):
    """attn_bench, kernel sm90, at each shape under each value of the environment variable `var`,
    one process each, back to back per shape: rows in out_name % (value, N), each row tagged
    with `tag` = the value (a number where it is one). check = (value, N): first, at each shape, attn_bench --check-rows N
    under that value (the variant's results against double-precision sums, at a cost linear in
    S: on a GPU the test shapes are too small to exercise what the variant changes). fixed: more
    variables set for every process of the part (the check's included), recorded in each row."""
    base = dict(os.environ, **(fixed or {}))
    log = os.path.join(C.LOGS, part + ".log")
    if not os.path.exists(L.attn_bench):
        return record(part, "SKIP", 0, "no attn_bench (bundle made without --with-tests)")
    notes, rows, sec = [], [], 0.0
    for shape in shapes:
        if check:
            rc, t = run([L.attn_bench, "--backend", "cuda", "--dtype", "bf16", "--kernel", "sm90",
                         "--check-rows", str(check[1])] + shape, budget - sec, log,
                        env=dict(base, **{var: check[0]}))
            sec += t
            what = "S %s D %s %s=%s check (%d sampled rows)" % (
                shape[shape.index("--seq") + 1] if "--seq" in shape else "?",
                shape[shape.index("--head-dim") + 1] if "--head-dim" in shape else "?", tag, check[0], check[1])
            if rc is None:
                return record(part, "TIMEOUT", sec, "; ".join(notes + [what]))
            if rc == 77:
                return record(part, "SKIP", sec, "the Hopper kernel cannot run here")
            if rc != 0:
                return record(part, "FAIL", sec, "; ".join(notes + [what + ": exit %d" % rc]))
            notes.append(what + ": PASS")
        for v in values:
            out = os.path.join(C.OUT, out_name % (v, len(rows)))
            got, sec = attn_process(part, [L.attn_bench, "--backend", "cuda", "--dtype", "bf16", "--kernel", "sm90"]
                                    + shape, budget, log, out, sec, notes, "%s=%s" % (var, v),
                                    env=dict(base, **{var: v}))
            if got is None:
                return
            for r in got:
                r[tag] = int(v) if v.isdigit() else v
                r.update({"env_" + k: val for k, val in (fixed or {}).items()})
                rows.append(r)
                notes.append("S %d D %s %s=%s: fwd %.0f, bwd %.0f TFLOP/s" % (
                    r["seq"], r.get("head_dim", "?"), tag, v, r.get("fwd_tflops", 0), r.get("bwd_tflops", 0)))
    record(part, "PASS", sec, "; ".join(notes), result=rows)


def part_attn_separate(L, budget, S):
    """attn_bench --kernel sm90,cudnn at each shape, timed twice in one process each, back to
    back: each forward followed by its backward (attn_bench's default, as the ratios to cuDNN were
    measured so far), then --separate (the forwards back to back, then the backwards, as
    FlashAttention's benchmarks time them). A GPU's clocks under sustained load depend on what
    it runs: the forward's rate measured 603-668 TFLOP/s over processes at S 32768, D 128
    (2026-11-26) and its kernel alone 693 under Nsight Compute (2026-11-27)."""
    part, log = "attn_bench_separate", os.path.join(C.LOGS, "attn_bench_separate.log")
    if not os.path.exists(L.attn_bench):
        return record(part, "SKIP", 0, "no attn_bench (bundle made without --with-tests)")
    notes, rows, sec = [], [], 0.0
    for shape in S["attn_separate"]:
        for timing in ("interleaved", "separate"):
            out = os.path.join(C.OUT, "attn_bench_%s_%d.out" % (timing, len(rows)))
            args = [L.attn_bench, "--backend", "cuda", "--dtype", "bf16", "--kernel", "sm90,cudnn"] + shape
            t0 = time.time()
            got, sec = attn_process(part, args + (["--separate"] if timing == "separate" else []), budget, log,
                                    out, sec, notes, timing)
            if got is None:
                return
            for r in got:
                r["process_span"] = [round(t0, 3), round(time.time(), 3)]  # clocks.csv's time_s
                rows.append(r)
                clocks = (" (SM %s / %s MHz after them; %s)" % (r["fwd_sm_mhz"], r["bwd_sm_mhz"], r.get("clock_reasons"))
                          if r.get("fwd_sm_mhz") else "")
                notes.append("%s S %d D %d %s: fwd %.0f, bwd %.0f TFLOP/s%s" % (
                    r.get("kernel", "?"), r["seq"], r["head_dim"], r.get("timing", "?"),
                    r.get("fwd_tflops", 0), r.get("bwd_tflops", 0), clocks))
    record(part, "PASS", sec, "; ".join(notes), result=rows)


def part_attn_fwd192(L, budget, S):
    """The Hopper forward at head dim 64 with query tiles of 128 rows and of 192 (three consumer
    warpgroups, SLUICE_ATTN_SM90_FWD_BM=192), one process each, back to back per shape."""
    return part_attn_variants(L, budget, "attn_bench_fwd192", "SLUICE_ATTN_SM90_FWD_BM", ("128", "192"),
                              S["attn_d64"], "attn_bench_fwd%s_%d.out", "fwd_bm")


def part_attn_pingpong(L, budget, S):
    """The Hopper backward's dK/dV consumers free and in turns (SLUICE_ATTN_SM90_BWD_PINGPONG=0
    and 1), one process each, back to back per shape."""
    return part_attn_variants(L, budget, "attn_bench_pingpong", "SLUICE_ATTN_SM90_BWD_PINGPONG",
                              ("0", "1"), S["attn_pp"], "attn_bench_pingpong%s_%d.out", "bwd_pingpong")


def part_attn_persistent(L, budget, S):
    """The Hopper forward and dQ pass as a block per query tile and as persistent blocks taking
    tiles from a counter (SLUICE_ATTN_SM90_PERSISTENT=0 and 1: the forward's change shows in
    fwd, the dQ pass's in bwd), one process each, back to back per shape, after a sampled check
    of the persistent form at the shape (the tests' shapes give each block one tile on a GPU)."""
    return part_attn_variants(L, budget, "attn_bench_persistent", "SLUICE_ATTN_SM90_PERSISTENT",
                              ("0", "1"), S["attn_pp"], "attn_bench_persistent%s_%d.out", "persistent",
                              check=("1", 16))


def part_attn_dq_overlap(L, budget, S):
    """The Hopper dQ pass waiting for each dQ GEMM and with the next step's S and dP issued
    behind it (SLUICE_ATTN_SM90_DQ_OVERLAP=0 and 1: the change shows in bwd), one process each,
    back to back per shape."""
    return part_attn_variants(L, budget, "attn_bench_dq_overlap", "SLUICE_ATTN_SM90_DQ_OVERLAP",
                              ("0", "1"), S["attn_pp"], "attn_bench_dq_overlap%s_%d.out", "dq_overlap")


def part_attn_bwd_stages(L, budget, S):
    """The Hopper backward's dK/dV pass with 2, 3 and 4 stages of Q, dO and statistics
    (SLUICE_ATTN_SM90_BWD_STAGES; the change shows in bwd), one process each, back to back per
    shape, S 32768 first: where its loads have the least time to land relative to what they feed
    is unknown, the longest sequence is where issue 22's target is missed."""
    return part_attn_variants(L, budget, "attn_bench_bwd_stages", "SLUICE_ATTN_SM90_BWD_STAGES",
                              ("2", "3", "4"), S["attn_pp"], "attn_bench_bwd_stages%s_%d.out", "bwd_stages")


def part_attn_bwd_order(L, budget, S):
    """The Hopper backward's dK/dV pass with each block's steps head by head from the diagonal up
    and by query tile from the sequence's end down (SLUICE_ATTN_SM90_BWD_ORDER=heads and tiles:
    the blocks running at once then read the same rows of Q and dO together; the change shows in
    bwd), one process each, back to back per shape, after a sampled check of the tile order at
    the shape (the tests' shapes have a few tiles per block)."""
    return part_attn_variants(L, budget, "attn_bench_bwd_order", "SLUICE_ATTN_SM90_BWD_ORDER",
                              ("heads", "tiles"), S["attn_pp"], "attn_bench_bwd_order_%s_%d.out", "bwd_order",
                              check=("tiles", 16))


def part_attn_bwd_early_dv(L, budget, S):
    """The Hopper backward's dK/dV pass issuing dV and dK together once dS is ready and dV as
    soon as P is ready, dS computed while it runs (SLUICE_ATTN_SM90_BWD_EARLY_DV=0 and 1; the
    change shows in bwd), one process each, back to back per shape, after a sampled check of the
    early dV at the shape (the same bits as the default by construction; the check guards the
    GPU's own wgmma ordering, which the emulator cannot show)."""
    return part_attn_variants(L, budget, "attn_bench_bwd_early_dv", "SLUICE_ATTN_SM90_BWD_EARLY_DV",
                              ("0", "1"), S["attn_pp"], "attn_bench_bwd_early_dv%s_%d.out", "bwd_early_dv",
                              check=("1", 16))


def part_attn_bwd_early_dv_stages(L, budget, S):
    """attn_bench_bwd_early_dv with the dK/dV pass's deeper rings: dV issued early
    (SLUICE_ATTN_SM90_BWD_EARLY_DV=1) with 3 and 4 stages (SLUICE_ATTN_SM90_BWD_STAGES; its 2
    stages are attn_bench_bwd_early_dv's "1"), one process each, back to back per shape, after a
    sampled check with 3 stages. With attn_bench_bwd_stages (the default order at 2, 3, 4) and
    attn_bench_bwd_early_dv it says whether the two changes add up: the early dV fills the
    tensor cores' queue within a step, the stages give its loads longer to land."""
    return part_attn_variants(L, budget, "attn_bench_bwd_early_dv_stages", "SLUICE_ATTN_SM90_BWD_STAGES",
                              ("3", "4"), S["attn_pp"], "attn_bench_bwd_early_dv_stages%s_%d.out",
                              "bwd_stages", check=("3", 16), fixed={"SLUICE_ATTN_SM90_BWD_EARLY_DV": "1"})


def ncu_on_attn_bench(L, part):
    """(Nsight Compute, the part's log) for a part that profiles attn_bench; (None, None) once
    the part's SKIP is recorded (a bundle without attn_bench, no ncu here)."""
    if not os.path.exists(L.attn_bench):
        record(part, "SKIP", 0, "no attn_bench (bundle made without --with-tests)")
        return None, None
    ncu, why = C.find_cuda_tool("ncu", C.ARGS.ncu, L.emulated, "profile")
    if not ncu:
        record(part, "SKIP", 0, why)
        return None, None
    return ncu, os.path.join(C.LOGS, part + ".log")


def part_attn_kernels(L, budget, S):
    """Each Hopper attention kernel's own time under Nsight Compute (gpu__time_duration, clocks
    not locked), one forward and backward per shape: the forward, the backward's prep, dK/dV,
    dQ and reduce passes apart, which attn_bench's two totals do not show. Raw reports in
    attn_kernels_S_D.csv (bench/ncu_log.py reads them)."""
    part = "attn_kernels"
    ncu, log = ncu_on_attn_bench(L, part)
    if not ncu:
        return
    notes, rows, sec = [], [], 0.0
    for shape in S["attn_kernels"]:
        seq, d = shape[shape.index("--seq") + 1], shape[shape.index("--head-dim") + 1]
        out = os.path.join(C.OUT, "attn_kernels_%s_%s.csv" % (seq, d))
        rc, t = run([ncu, "--clock-control", "none", "--metrics", "gpu__time_duration.sum", "--csv",
                     L.attn_bench, "--backend", "cuda", "--dtype", "bf16", "--kernel", "sm90"] + shape,
                    budget - sec, log, stdout_path=out)
        sec += t
        if rc is None:
            return record(part, "TIMEOUT", sec, "; ".join(notes))
        text = open(out, errors="replace").read()
        if rc == 77 or (rc != 0 and "cannot run this problem" in text):
            return record(part, "SKIP", sec, "the Hopper kernel cannot run here")
        if rc != 0:
            return record(part, "FAIL", sec, "S %s D %s: exit %d" % (seq, d, rc))
        try:
            kernels = [k for k in kernel_times(text) if "attn" in k["name"] or "sm90" in k["name"]
                       or "prep" in k["name"] or "dkdv" in k["name"]]
        except ValueError as e:
            return record(part, "FAIL", sec, "S %s D %s: %s" % (seq, d, e))
        rows.append(dict(seq=int(seq), head_dim=int(d), kernels=kernels))
        notes.append("S %s D %s: %s" % (seq, d, ", ".join("%s %.3f ms" % (k["name"].split("<")[0], k["ms"])
                                                        for k in kernels)))
    record(part, "PASS", sec, "; ".join(notes), result=rows)


# What Nsight Compute collects on each kernel of part attn_anatomy: sections (stable names on
# every ncu since 2021; the memory tables have shared memory's wavefronts and bank conflicts) and
# metrics of their own: the tensor pipe's wgmma cycles, DRAM bytes, and the shared-memory banks'
# reads and writes against their peak, which count wgmma's operand reads too (docs/attention.md,
# "Shared-memory traffic per tile product": the dK/dV pass's count is 88% of the banks' peak)
ANATOMY_SECTIONS = ["SpeedOfLight", "MemoryWorkloadAnalysis", "MemoryWorkloadAnalysis_Tables",
                    "ComputeWorkloadAnalysis", "WarpStateStats", "SchedulerStats"]
ANATOMY_METRICS = ("sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,"
                   "dram__bytes_read.sum,dram__bytes_write.sum,"
                   "l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed,"
                   "l1tex__data_bank_writes.avg.pct_of_peak_sustained_elapsed")
# the summary's figures per kernel: (metric as the report names it, label, format); "%s" in a
# format takes the metric's unit
ANATOMY_SHOWN = [("Duration", "", "%.3g %s"), ("SM Frequency", "SM", "%.3g %s"),
                 ("sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active", "wgmma", "%.0f%%"),
                 ("Compute (SM) Throughput", "SM", "%.0f%%"), ("L1/TEX Cache Throughput", "L1", "%.0f%%"),
                 ("l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed", "smem reads", "%.0f%%"),
                 ("l1tex__data_bank_writes.avg.pct_of_peak_sustained_elapsed", "smem writes", "%.0f%%"),
                 ("L2 Hit Rate", "L2 hit", "%.0f%%"), ("DRAM Throughput", "DRAM", "%.0f%%"),
                 ("dram__bytes_read.sum", "read", "%.3g %s"), ("dram__bytes_write.sum", "written", "%.3g %s"),
                 ("Warp Cycles Per Issued Instruction", "cycles/issue", "%.3g")]


def anatomy_line(launch):
    """One kernel launch of a details report as "name: 26.2 ms, SM 1.98 GHz, wgmma 70%, ...":
    the figures of ANATOMY_SHOWN it has."""
    parts = []
    for name, label, fmt in ANATOMY_SHOWN:
        m = metric(launch, name)
        if m is None or not isinstance(m[0], float):
            continue
        text = fmt % ((m[0], m[1]) if "%s" in fmt else m[0])
        parts.append((label + " " + text).strip())
    return "%s: %s" % (launch["name"].split("<")[0], ", ".join(parts))


def part_attn_anatomy(L, budget, S):
    """Nsight Compute's sections (ANATOMY_SECTIONS, clocks not locked) on one forward and backward
    at S 32768, D 128, where the forward + backward is short of issue 22's 0.9x cuDNN: sluice's
    kernels with the deterministic dQ pass, with the unordered fused dQ (--nondeterministic),
    and cuDNN's. Per kernel of 0.1 ms or more: time, SM clock, the tensor pipe's wgmma cycles,
    SM, L1 and DRAM throughput, L2 hit rate, DRAM bytes, cycles per issued instruction: whether
    the dK/dV pass is bound by the tensor pipe, shared memory or stalls, whether the fused dQ's
    reductions go to DRAM, and how cuDNN's backward compares. The reports
    (attn_anatomy_RUN.ncu-rep) and their details and raw pages (attn_anatomy_RUN_details.csv,
    _raw.csv: the stall reasons) come back whole."""
    part = "attn_anatomy"
    ncu, log = ncu_on_attn_bench(L, part)
    if not ncu:
        return
    runs = [("sm90_pass", ["--kernel", "sm90"]), ("sm90_fused", ["--kernel", "sm90", "--nondeterministic"]),
            ("cudnn", ["--kernel", "cudnn"])]
    sections = [a for s in ANATOMY_SECTIONS for a in ("--section", s)]
    notes, rows, sec = [], [], 0.0
    for tag, args in runs:
        rep = os.path.join(C.OUT, "attn_anatomy_" + tag)
        bench = [L.attn_bench, "--backend", "cuda", "--dtype", "bf16"] + args + S["attn_anatomy"]
        rc, t = run([ncu, "--clock-control", "none", "-f", "--export", rep] + sections +
                    ["--metrics", ANATOMY_METRICS] + bench, budget - sec, log)
        sec += t
        if rc not in (0, 77, None):  # an ncu that does not know a metric refuses the whole run
            notes.append("%s: exit %d with the metrics, sections only" % (tag, rc))
            rc, t = run([ncu, "--clock-control", "none", "-f", "--export", rep] + sections + bench,
                        budget - sec, log)
            sec += t
        if rc is None:
            return record(part, "TIMEOUT", sec, "; ".join(notes))
        if rc == 77:  # cuDNN not on this node, or no Hopper kernel here
            notes.append("%s: skipped (exit 77, %s)" % (tag, log))
            continue
        if rc != 0:
            return record(part, "FAIL", sec, "; ".join(notes + ["%s: exit %d (%s)" % (tag, rc, log)]))
        for page in ("details", "raw"):
            rc, t = run([ncu, "--import", rep + ".ncu-rep", "--csv", "--page", page], budget - sec, log,
                        stdout_path="%s_%s.csv" % (rep, page))
            sec += t
            if rc != 0:
                return record(part, "FAIL", sec, "; ".join(notes + ["%s: ncu --import --page %s: exit %s"
                                                                    % (tag, page, rc)]))
        try:
            launches = launch_metrics(open(rep + "_details.csv", errors="replace").read())
        except ValueError as e:
            return record(part, "FAIL", sec, "; ".join(notes + ["%s: %s" % (tag, e)]))
        big = [k for k in launches if to_ms(*(metric(k, "Duration") or (0.0, ""))) >= 0.1]
        if not big:
            return record(part, "FAIL", sec, "; ".join(notes + ["%s: no kernel of 0.1 ms or more in the report"
                                                                % tag]))
        rows.append(dict(run=tag, kernels=[dict(name=k["name"], metrics=k["metrics"]) for k in big]))
        notes.append("%s: %s" % (tag, "; ".join(anatomy_line(k) for k in big)))
    record(part, "PASS", sec, " | ".join(notes), result=rows)


def to_ms(value, unit):
    """A duration in Nsight Compute's unit as milliseconds (0 where the unit is not a time)."""
    return value * UNIT_MS.get(unit, 0.0) if isinstance(value, float) else 0.0


# The step's kernels whose rows missed their predictions on 2026-11-27 (the fused QK-norm and
# RoPE, the router), whose rate is not the bench's (AdamW), that take about twice their
# bytes' time (the RMSNorms: 4.3 ms per step over 152 calls, 28 us each where a row's bytes
# take 10-14), or that changed on 2026-11-28 on a count alone (the QK-norm/RoPE row path, the
# cross-entropy's row cache, the router's grid, the routing sort's tiles, AdamW's runs; then the
# RMSNorm row path, the attention backward's prep, the combine and the gather-add):
# Nsight Compute on them alone.
STEP_KERNELS = "k_qk_|router_|adamw|k_rmsnorm_|k_xent|sort_|bwd_prep|combine_kernel|gather_add"


def part_step_kernels(L, budget, S):
    """Nsight Compute (clocks not locked) on one training step of gpu_train_bench at the
    measured shape cut to 2 layers, profiling only the kernels STEP_KERNELS names: each one's
    own time and launches, which the profile's rows add together (the QK-norm/RoPE row holds
    three kernels, the router's two, the optimizer's one per run of parameters, the RMSNorms'
    three, the LM head's cross-entropy one, the routing sort three). Raw report in
    step_kernels.csv (bench/ncu_log.py reads it)."""
    part, log = "step_kernels", os.path.join(C.LOGS, "step_kernels.log")
    ncu, why = C.find_cuda_tool("ncu", C.ARGS.ncu, L.emulated, "profile")
    if not ncu:
        return record(part, "SKIP", 0, why)
    out = os.path.join(C.OUT, "step_kernels.csv")
    args = S["measured"] + ["--layers", "2", "--steps", "1", "--warmup", "0", "--peak-reps", "1"]
    rc, sec = run([ncu, "--clock-control", "none", "--kernel-name", "regex:" + STEP_KERNELS, "--metrics",
                   "gpu__time_duration.sum", "--csv", L.gtb, S["config"]] + args, budget, log,
                  stdout_path=out)
    if rc is None:
        return record(part, "TIMEOUT", sec, "")
    if rc != 0:
        return record(part, "FAIL", sec, "exit %d (%s)" % (rc, log))
    try:
        kernels = [k for k in kernel_times(open(out, errors="replace").read())
                   if re.search(STEP_KERNELS, k["name"])]
    except ValueError as e:
        return record(part, "FAIL", sec, str(e))
    if not kernels:
        return record(part, "FAIL", sec, "no kernel matched %s" % STEP_KERNELS)
    note = "2 layers, one step: " + ", ".join(
        "%s %.3f ms / %d = %.1f us" % (k["name"].split("<")[0], k["ms"], k["launches"],
                                       1e3 * k["ms"] / k["launches"]) for k in kernels)
    record(part, "PASS", sec, note, result=kernels)


def part_attn_long(L, budget, S):
    """The Hopper kernel at the longest sequence sluice trains (131,072 tokens): a sampled check
    (attn_bench --check-rows: the whole check's CPU reference would take hours), then its speed
    beside cuDNN's, per head dim, with the device memory each run took beyond its tensors."""
    part, log = "attn_long", os.path.join(C.LOGS, "attn_long.log")
    if not os.path.exists(L.attn_bench):
        return record(part, "SKIP", 0, "no attn_bench (bundle made without --with-tests)")
    shape, dims, nrows, timing = S["attn_long"]
    base = [L.attn_bench, "--backend", "cuda", "--dtype", "bf16"] + shape
    notes, rows, sec = [], [], 0.0
    for d in dims:
        out = os.path.join(C.OUT, "attn_long_check_d%s.out" % d)
        rc, t = run(base + ["--head-dim", d, "--kernel", "sm90", "--check-rows", nrows], budget - sec,
                    log, stdout_path=out)
        sec += t
        if rc is None:
            return record(part, "TIMEOUT", sec, "; ".join(notes))
        text = open(out).read()
        if rc == 77 or (rc != 0 and "cannot run this problem" in text):
            return record(part, "SKIP", sec, "the Hopper kernel cannot run here")
        mem = re.search(r"^memory: (.*)$", text, re.M)
        notes.append("D %s check %s (%s sampled rows)%s" % (d, "PASS" if rc == 0 else "FAIL exit %d" % rc, nrows,
                                                           "; " + mem.group(1) if mem else ""))
        if rc != 0:
            return record(part, "FAIL", sec, "; ".join(notes))
        out = os.path.join(C.OUT, "attn_long_d%s.out" % d)
        kernels = "sm90" if C.ARGS.tiny else "sm90,cudnn"
        rc, t = run(base + ["--head-dim", d, "--kernel", kernels] + timing, budget - sec, log, stdout_path=out)
        sec += t
        if rc is None:
            return record(part, "TIMEOUT", sec, "; ".join(notes))
        if rc != 0:
            return record(part, "FAIL", sec, "; ".join(notes + ["D %s timing: exit %d" % (d, rc)]))
        for r in (json.loads(l) for l in open(out) if l.startswith("{")):
            rows.append(r)
            notes.append("%s S %d D %d: fwd %.0f, bwd %.0f TFLOP/s, %.2f GiB beyond %.2f GiB of tensors" % (
                r.get("kernel", "?"), r["seq"], r["head_dim"], r.get("fwd_tflops", 0), r.get("bwd_tflops", 0),
                r.get("extra_gib", -1), r.get("tensor_gib", 0)))
    record(part, "PASS", sec, "; ".join(notes), result=rows)


def part_expert_gemm(L, budget, S):
    exe, out = os.path.join(L.build, "bench", "expert_gemm_bench"), os.path.join(C.OUT, "expert_gemm.out")
    if not os.path.exists(exe):
        return record("expert_gemm", "SKIP", 0, "no expert_gemm_bench (bundle made without --with-tests)")
    rc, sec = run([exe] + S["gemm"], budget, os.path.join(C.LOGS, "expert_gemm.log"), stdout_path=out)
    if rc is None or rc != 0:
        return record("expert_gemm", "TIMEOUT" if rc is None else "FAIL", sec, "" if rc is None else "exit %d" % rc)
    alls = [l.split() for l in open(out) if l.startswith("all six")]  # all six STRATEGY ms TFLOP/s
    record("expert_gemm", "PASS", sec, "; ".join("%s %s ms" % (a[2], a[3]) for a in alls))


def run_adamw_bench(L, part, args, budget, what):
    """adamw_bench with args, its rows (JSON lines of <part>.out) recorded as the part's result,
    each named in the note by what(row)."""
    exe = os.path.join(L.build, "bench", "adamw_bench")
    out = os.path.join(C.OUT, part + ".out")
    if not os.path.exists(exe):
        return record(part, "SKIP", 0, "no adamw_bench (bundle made without --with-tests)")
    rc, sec = run([exe] + args, budget, os.path.join(C.LOGS, part + ".log"), stdout_path=out)
    if rc == 77:
        return record(part, "SKIP", sec, "no CUDA device")
    if rc is None or rc != 0:
        return record(part, "TIMEOUT" if rc is None else "FAIL", sec, "" if rc is None else "exit %d" % rc)
    rows = [json.loads(l) for l in open(out) if l.startswith("{")]
    record(part, "PASS", sec, ", ".join(what(r) for r in rows), result=rows)


def part_adamw(L, budget, S):
    """bench/adamw_bench: AdamW's forms, its loads and stores without the arithmetic ("streams")
    and a device copy, in TB/s: whether the optimizer row is at the memory's rate for its
    streams (docs/performance.md, "AdamW against its streams")."""
    run_adamw_bench(L, "adamw", S["adamw"], budget, lambda r: "%s %.2f TB/s" % (r["row"], r["tbps"]))


# The measured shape's parameters (15A2B cut to 9 layers) where no profile.json says otherwise.
STEP_PARAMS = 6305915136


def part_adamw_full(L, budget, S):
    """adamw_bench at the measured step's parameter count (profile.json's total_params where the
    profile part ran, else STEP_PARAMS), capped to 85% of the device's memory at 18 bytes a
    parameter, operands filled on the device, AdamW and its streams: the rate at that size, which
    the step's optimizer row should match now that AdamW writes the compute copy under ZeRO-1
    too (30 bytes a parameter; the row of 2026-11-27 moved 34: docs/performance.md, "AdamW's
    compute copy under ZeRO-1")."""
    args = list(S["adamw_full"])
    if "--params" not in args:
        prof = os.path.join(C.OUT, "profile.json")
        params, mem = STEP_PARAMS, None
        if os.path.exists(prof):
            pj = json.load(open(prof))
            params, mem = pj.get("total_params", params), pj.get("device_mem_gib")
        if mem:
            params = min(params, int(0.85 * mem * 2**30 / 18))
        args = ["--params", str(params)] + args
    run_adamw_bench(L, "adamw_full", args, budget,
                    lambda r: "%s %.2f TB/s at %d parameters" % (r["row"], r["tbps"], r["params"]))


def part_expert_gemm_ablate(L, budget, S):
    part, exe = "expert_gemm_ablate", os.path.join(L.build, "bench", "expert_gemm_bench")
    out = os.path.join(C.OUT, "expert_gemm_ablate.out")
    if not os.path.exists(exe):
        return record(part, "SKIP", 0, "no expert_gemm_bench (bundle made without --with-tests)")
    rc, sec = run([exe, "--ablate"] + S["gemm_ablate"], budget, os.path.join(C.LOGS, part + ".log"),
                  stdout_path=out)
    if rc == 77:
        return record(part, "SKIP", sec, "the Hopper grouped GEMM does not run on this device")
    if rc is None or rc != 0:
        return record(part, "TIMEOUT" if rc is None else "FAIL", sec, "" if rc is None else "exit %d" % rc)
    # GEMM  whole  no-epi  no-loads  neither  epi%  feed%  TFLOP/s ...: the first rows per expert
    rows, notes = [], []
    for line in open(out):
        if line.startswith("ablation, rows per expert"):
            rows.append(dict(rows=int(line.split()[4]), gemms={}))
            continue
        m = re.match(r"(\S+(?: \S+)*?)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(-?[\d.]+)%\s+(-?[\d.]+)%"
                     r"\s+([\d.]+|nan)\s+([\d.]+)\s+([\d.]+|nan)\s", line)
        if rows and m:
            rows[-1]["gemms"][m.group(1)] = dict(zip(("whole_ms", "no_epilogue_ms", "no_loads_ms", "neither_ms",
                                                      "epilogue_pct", "feed_pct", "pair_stores_ms", "bn128_ms",
                                                      "b_in_l2_ms"),
                                                     (float(m.group(k)) for k in range(2, 11))))
    for r in rows:
        g = r["gemms"]
        notes.append("%d rows: %s" % (r["rows"], ", ".join(
            "%s epi %.0f%% feed %.0f%% 4B stores %+.0f%% BN128 %+.0f%% B in L2 %+.0f%%" % (
                n, v["epilogue_pct"], v["feed_pct"], 100 * (v["pair_stores_ms"] / v["whole_ms"] - 1),
                100 * (v["bn128_ms"] / v["whole_ms"] - 1), 100 * (v["b_in_l2_ms"] / v["whole_ms"] - 1))
            for n, v in g.items() if n in ("gate_up+SwiGLU", "down fwd"))))
    record(part, "PASS", sec, "; ".join(notes), result=rows)


def part_torch(L, budget, S, part, script, label):
    why = torch_cuda()
    if why:
        return record(part, "SKIP", 0, why)
    prof = RESULTS.get("profile", {}).get("result")
    if not prof:
        return record(part, "SKIP", 0, "needs the profile part's layer count and shape")
    log, out = os.path.join(C.LOGS, part + ".log"), os.path.join(C.OUT, part + ".out")
    argv = [C.ARGS.python, os.path.join(L.bench_dir, script), S["config"], "--layers", str(prof["layers"]),
            "--seq", str(prof["seq"]), "--batch", str(prof["batch"]), "--accum", str(prof["accum"]),
            "--steps", "3", "--warmup", "2"]
    rc, sec = run(argv, budget, log, env=torch_env(), stdout_path=out)
    j = last_json(out)
    if rc is None:
        return record(part, "TIMEOUT", sec, label)
    if rc == 3:
        return record(part, "FAIL", sec, "%s: out of memory at %d layers (--layers %d compares all sides "
                      "at fewer)" % (label, prof["layers"], prof["layers"] - 1))
    if rc != 0 or not j or "error" in j:
        return record(part, "FAIL", sec, "%s: exit %s%s" % (label, rc, " (%s)" % j["error"] if j and "error" in j else ""))
    with open(os.path.join(C.OUT, part + ".json"), "w") as f:
        json.dump(j, f)
    record(part, "PASS", sec, "%s: %.1f ms/step, %.0f tokens/s; sluice %.2fx" % (
        label, j["ms_per_step"], j["tokens_per_s"], prof["tokens_per_s"] / j["tokens_per_s"]), result=j)
