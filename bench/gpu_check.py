"""The one-call GPU check (issue 21, section 3): everything a lent GPU should run, in one command
that fits in about 7 minutes on an H200, with one folder of results. bench/gpu_check.sh is the
entry point (it sources the bundle's env.sh); this is the driver (the arguments, the order of
the parts, the summary); the parts are in gpu_check_checks.py (doctor, tests, sanitizers,
profiles) and gpu_check_bench.py (the benchmarks), what they share in gpu_check_core.py.

usage: bench/gpu_check.sh OUTDIR [--build DIR --src DIR] [--tiny] [--config PATH] [--layers N]
           [--python PY] [--sanitizer PATH] [--ncu PATH] [--tests REGEX] [--jobs N] [--test-timeout S]
           [--only P,...] [--skip P,...] [--budget PART=S ...] [--deadline S] [--archive FILE]

Parts, in this order (each with its own time budget; a part that would start past the deadline
is skipped). --only also orders them: after doctor and the tests and sanitizer lanes, the parts
it names run in its order, so that a call's command can put first what the deadline must not
cut:
  doctor               sluice doctor --json (alone on the GPU: its speed rows stay clean)
  tests                the gpu-, cuda- and emu-labelled tests of the build (the bundle's test
                       programs, tests/manifest.json), --jobs at a time, each capped at
                       --test-timeout; test_doctor_gpu is left out (the doctor part runs it)
  memcheck             compute-sanitizer memcheck on the Hopper attention kernel
                       (test_attention_tc deterministic sm90, then atomic sm90: the tests'
                       shapes, both dQ modes; skipped before 9.x), then one training step of
                       the 15A2B shape cut to 2 layers, seq 1024 (gpu_train_bench: one
                       process, no NCCL); reports of
                       NCCL's own start-up probes (cudaErrorNoKernelImageForDevice from
                       ncclInitKernelsForDevice) would be filtered out
  racecheck_attention  compute-sanitizer racecheck on the attention kernels: the Hopper kernel
                       through test_attention_tc deterministic sm90 (skipped before 9.x), then
                       attn_bench --kernel sm90 at S 2048 with SLUICE_ATTN_SM90_PERSISTENT=1 and
                       SLUICE_ATTN_SM90_DQ_OVERLAP=1 (several query tiles per block), then
                       test_attention_tc (tensor cores) and test_attention_cuda (SIMT)
  racecheck_expert_gemm  racecheck on bench/expert_gemm_bench --check (every strategy, the
                       Hopper kernel included, at small shapes)
  racecheck_step       racecheck on one training step of the 15A2B shape, 2 layers, seq 512
                       (hazards inside cuBLAS's, cuDNN's and NCCL's kernels are counted apart,
                       not failures: bench/sanitizer_log.py)
  profile              gpu_train_bench --profile, the measured shape: 4 micro-batches of 1 x 4096
  profile_nodefer      the measured shape again with --defer-wgrad off: every micro-batch's
                       expert weight gradients in its own backward (profile defers them over
                       the automatic group, 4 at that shape, where auto does,
                       training.defer_expert_wgrad)
  profile_group4       the measured shape again with --wgrad-group 4: the expert weight
                       gradients of all four micro-batches in one pass, the three parked ones
                       kept as tokens (training.park_expert_rows auto), so that the same layers
                       fit; their copies and regathers are a row of their own (since 2026-11-28
                       the automatic group, so profile's too where nothing overrides it)
  profile_pairs        the measured shape again with --wgrad-group 2: the weight gradients over
                       pairs, the parked micro-batch kept as rows (the default until
                       2026-11-28): this row against profile's is what the groups of 4 give
  profile_ep8          the same at the per-GPU expert load of an EP-8 deployment: one micro-batch
                       of 8 x 4096 = 32,768 tokens, 8 of 128 experts each: 2,048 rows per expert
  profile_prefetch     the measured shape again with SLUICE_EXPERT_GEMM_PREFETCH=1: the Hopper
                       grouped GEMM's weight gradient with its L2 prefetch of the old dW (off
                       by default since an H200 measured no gain; auto runs that kernel on
                       compute capability 9.x; the note names the expert GEMM path of every part)
  profile_dwreduce     the measured shape again with SLUICE_EXPERT_GEMM_DW_REDUCE=1: the weight
                       gradient adds its tiles to dW by TMA add reductions (opt-in, unmeasured)
  profile_nosplitk     the measured shape again with SLUICE_GEMM_SPLIT_K=off: the router's fp32
                       GEMMs as one cublasGemmEx each (profile splits their K where the output
                       has too few tiles for the SMs, core/gemm_split.h; unmeasured since)
  profile_swiglu       the measured shape again with SLUICE_EXPERT_GEMM_SWIGLU=1: the experts'
                       activation in the Hopper grouped GEMM's epilogue (profile runs it as a
                       kernel of its own, measured faster on an H200 on 2026-11-27)
  attn_bench           attn_bench at the paper's shapes, kernels sm90, mma and cudnn in one process
                       (a kernel that cannot run here is skipped) (and attn_bench_torch.py when PyTorch
                       with CUDA imports)
  attn_kernels         Nsight Compute (ncu --clock-control none, gpu__time_duration) on attn_bench
                       --kernel sm90 at head dims 128 and 64, S 4096 and 32768, one pass each:
                       every kernel's own time (the forward; the backward's prep, dK/dV, dQ and
                       reduce apart); SKIP without ncu
  attn_anatomy         Nsight Compute's sections (speed of light, memory, compute, warp states,
                       schedulers; clocks not locked) on attn_bench at S 32768, D 128: sm90 with
                       the dQ pass, sm90 with the fused dQ (--nondeterministic), cudnn: per
                       kernel its time, SM clock, wgmma cycles, throughputs, L2 hit rate, DRAM
                       bytes; the reports and their details and raw pages; SKIP without ncu
  step_kernels         Nsight Compute on one step of gpu_train_bench (the measured shape at 2
                       layers), only the kernels of the QK-norm/RoPE, the router and AdamW: each
                       one's time and launches (the profile's rows add them up); SKIP without ncu
  attn_bench_separate  attn_bench --kernel sm90,cudnn at head dim 128 (S 32768 and 4096), timed
                       interleaved (each forward then its backward) and --separate (the
                       forwards back to back, then the backwards)
  attn_bench_fwd192    attn_bench, kernel sm90 at head dim 64 (S 4096 and 32768), the forward's
                       query tiles of 128 rows and of 192 (SLUICE_ATTN_SM90_FWD_BM=192: three
                       consumer warpgroups; opt-in, unmeasured) back to back
  attn_bench_pingpong  attn_bench, kernel sm90 at head dims 128 and 64, S 32768 and 4096, the
                       backward's dK/dV consumers free and in turns (SLUICE_ATTN_SM90_BWD_PINGPONG=0
                       and 1; opt-in, unmeasured) back to back
  attn_bench_persistent
                       attn_bench_pingpong's shapes, the forward and the dQ pass as a block per
                       query tile and as persistent blocks taking tiles from a counter
                       (SLUICE_ATTN_SM90_PERSISTENT=0 and 1; opt-in, unmeasured) back to back
  attn_bench_bwd_stages
                       the same shapes, the backward's dK/dV pass with 2, 3 and 4 stages of Q, dO
                       and statistics (SLUICE_ATTN_SM90_BWD_STAGES; opt-in, unmeasured), one
                       process each, back to back
  attn_bench_bwd_order
                       the same shapes, the dK/dV pass's steps head by head from the diagonal up
                       and by query tile from the sequence's end down
                       (SLUICE_ATTN_SM90_BWD_ORDER=heads and tiles; opt-in, unmeasured), after a
                       sampled check of the tile order, one process each, back to back
  attn_bench_bwd_early_dv
                       the same shapes, the dK/dV pass issuing dV with dK once dS is ready and
                       as soon as P is ready, dS computed while it runs
                       (SLUICE_ATTN_SM90_BWD_EARLY_DV=0 and 1; opt-in, unmeasured), after a
                       sampled check of the early dV, one process each, back to back
  attn_bench_bwd_early_dv_stages
                       the same shapes, the early dV (SLUICE_ATTN_SM90_BWD_EARLY_DV=1) with 3
                       and 4 stages (SLUICE_ATTN_SM90_BWD_STAGES), after a sampled check with 3;
                       with attn_bench_bwd_stages: whether the two changes add up
  attn_bench_dq_overlap
                       the same shapes, the dQ pass waiting for each dQ GEMM and with the next
                       step's S and dP issued behind it (SLUICE_ATTN_SM90_DQ_OVERLAP=0 and 1;
                       opt-in, unmeasured) back to back
  expert_gemm          bench/expert_gemm_bench: the expert GEMMs under each strategy at 256 and
                       2,048 rows per expert
  expert_gemm_ablate   expert_gemm_bench --ablate at 256 and 2,048 rows per expert: the Hopper
                       grouped GEMM's GEMMs whole, without their epilogue, without their loads
                       and with neither (where its time goes, without hardware counters)
  adamw                bench/adamw_bench: AdamW's forms, its loads and stores without the
                       arithmetic ("streams") and a device copy, in TB/s, 268M parameters
  adamw_full           adamw_bench's AdamW and streams at the measured step's parameter count
                       (profile.json's, within 85% of the device memory), operands filled on
                       the device: AdamW's rate at the step's size, outside the step
  torch_titan          bench/torchtitan_style_bench.py at the profile's layer count and shape
                       (its warm-up steps include torch.compile)
  torch_hf             bench/gpu_train_bench_torch.py (Hugging Face Qwen3-MoE + gate) the same
  attn_long            the Hopper kernel at S 131,072 (the staged schedule's last stage), head dims
                       128 and 64: attn_bench --check-rows 32 (sampled query and key rows against
                       double-precision sums), then its speed beside cuDNN's and the device memory
                       each run took beyond its tensors (linear in S: docs/attention.md)
The tests run beside the four sanitizer parts (two lanes); everything else has the GPU alone.
Each part ends PASS, FAIL, SKIP (cannot run here: the reason is given) or TIMEOUT. OUTDIR gets
summary.txt and summary.json (every part with its status and duration, the tests' results, the
profile, the ratios to PyTorch), logs/ (one log per part and per test) and each benchmark's
JSON. Exit status 0 when no part failed or timed out, 1 otherwise, 2 bad usage.

--archive FILE: at the end, OUTDIR as one xz tar (FILE, folder name OUTDIR's last component),
without payload/ (the bundle's test programs unpacked there, hundreds of MB): what a device call
brings back, where what returns is a few files of a few MB (the first call of 2026-11-27 lost
its archive to the payload's size).

--tiny: shapes for a CPU-emulated build (configs/tiny.json at 2 layers, seq 64): what CI runs
to test this script (tests/test_gpu_check.sh). --build/--src: run from a build tree and its
sources instead of a bundle (the manifest is made on the fly by launch/bundle_tests.py).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time

import gpu_check_core as C
from gpu_check_bench import (part_adamw, part_adamw_full, part_attn, part_attn_dq_overlap,
                             part_attn_fwd192, part_attn_separate,
                             part_attn_anatomy, part_attn_bwd_early_dv, part_attn_bwd_early_dv_stages, part_attn_bwd_order, part_attn_bwd_stages, part_attn_kernels, part_attn_long, part_attn_persistent,
                             part_attn_pingpong, part_expert_gemm, part_expert_gemm_ablate,
                             part_step_kernels, part_torch)
from gpu_check_checks import (part_doctor, part_memcheck, part_profile, part_racecheck_attention,
                              part_racecheck_expert_gemm, part_racecheck_step, part_tests)
from gpu_check_clocks import line as clock_line, start_if as start_clocks
from gpu_check_core import (BUDGETS, PARTS, RESULTS, Layout, part_budget, record, say, shapes,
                            wanted)


def parse_args():
    ap = argparse.ArgumentParser(prog="gpu_check.sh", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--build", default="")
    ap.add_argument("--src", default="")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--config", default="", help="the model for the steps (default: 15A2B; tiny)")
    ap.add_argument("--layers", type=int, default=0,
                    help="decoder layers of the profile and PyTorch parts (default: what fits)")
    ap.add_argument("--python", default=os.environ.get("SLUICE_PYTHON", "python3"))
    ap.add_argument("--sanitizer", default="")
    ap.add_argument("--ncu", default="", help="Nsight Compute's ncu (default: PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")
    ap.add_argument("--smi", default="", help="nvidia-smi for the clocks sampled during the parts (default: PATH; "
                    "the emulated build samples only with this option)")
    ap.add_argument("--tests", default="", help="only the tests whose name matches this regex")
    ap.add_argument("--jobs", type=int, default=3)
    ap.add_argument("--test-timeout", type=float, default=180.0)
    ap.add_argument("--only", default="", help="these parts only, in this order (after doctor and the lanes)")
    ap.add_argument("--skip", default="")
    ap.add_argument("--budget", action="append", default=[], metavar="PART=S")
    ap.add_argument("--deadline", type=float, default=420.0, help="seconds for the whole check")
    ap.add_argument("--archive", default="", metavar="FILE",
                    help="OUTDIR without its unpacked test programs, as one .tar.xz, at the end")
    a = ap.parse_args()
    for lst in (a.only, a.skip):
        for p in filter(None, lst.split(",")):
            if p not in PARTS:
                ap.error("unknown part '%s' (parts: %s)" % (p, ", ".join(PARTS)))
    for b in a.budget:
        name, _, sec = b.partition("=")
        if name not in PARTS:
            ap.error("--budget: unknown part '%s'" % name)
        try:
            BUDGETS[name] = float(sec)
        except ValueError:
            ap.error("--budget %s: not a number of seconds" % b)
    if bool(a.build) != bool(a.src):
        ap.error("--build and --src go together")
    return a


C.init(parse_args())


# ---- the summary ------------------------------------------------------------------------------------


def summary(L, info):
    lines = ["sluice one-call GPU check: %s" % info["when"],
             "from %s; device: %s" % (L.origin, info["device"]), ""]
    lines.append("%-20s %-7s %8s  %s" % ("part", "status", "seconds", "result"))
    for p in PARTS:
        r = RESULTS.get(p)
        if r:
            lines.append("%-20s %-7s %8.1f  %s" % (p, r["status"], r["seconds"], r["note"]))
    total = time.time() - C.T0
    bad = [p for p, r in RESULTS.items() if r["status"] in ("FAIL", "TIMEOUT")]
    lines.append("")
    lines.append("total %.1f s; %s" % (total, "FAILED: " + ", ".join(bad) if bad else "no part failed"))
    clocked = [p for p in PARTS if RESULTS.get(p, {}).get("clocks")]
    if clocked:
        lines.append("")
        lines.append("clocks during each part (nvidia-smi every 250 ms, clocks.csv; the lanes' parts overlap):")
        lines += [clock_line(p, RESULTS[p]["clocks"]) for p in clocked]
    for part in ("profile", "profile_ep8"):
        j = RESULTS.get(part, {}).get("result")
        if not j or not j.get("profile"):
            continue
        p = j["profile"]
        lines.append("")
        lines.append("%s: %d layers, %d micro-batch(es) of %d x %d, attention kernel %s; %.2f ms/step unprofiled, "
                     "%.2f profiled; rows sum %.2f ms" % (part, j["layers"], j["accum"], j["batch"], j["seq"],
                                                          j.get("attention_kernel", "?"), j["ms_per_step"],
                                                          p["step_wall_ms"], p["rows_sum_ms"]))
        for r in p["rows"]:
            lines.append("  %-62.62s %10.3f ms %5.1f%%  host %9.3f ms  %7.1f calls" % (
                r["region"], r["ms"], 100 * r["ms"] / max(p["rows_sum_ms"], 1e-9), r["host_ms"], r["calls"]))
    prof = RESULTS.get("profile", {}).get("result")
    for part in ("torch_hf", "torch_titan"):
        t = RESULTS.get(part, {}).get("result")
        if prof and t:
            lines.append("sluice vs %s: %.1f vs %.1f tokens/s = %.2fx (same %d layers, %d x %d x %d tokens)" % (
                t["impl"], prof["tokens_per_s"], t["tokens_per_s"], prof["tokens_per_s"] / t["tokens_per_s"],
                prof["layers"], prof["accum"], prof["batch"], prof["seq"]))
    text = "\n".join(lines) + "\n"
    with open(os.path.join(C.OUT, "summary.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(C.OUT, "summary.json"), "w") as f:
        json.dump(dict(info, seconds=round(total, 1), status="fail" if bad else "ok",
                       parts=[dict(part=p, **RESULTS[p]) for p in PARTS if p in RESULTS]), f, indent=1)
    print("\n" + text, end="")
    return 1 if bad else 0


def main():
    os.makedirs(C.LOGS, exist_ok=True)
    L = Layout()
    S = shapes(L)
    info = {"when": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "host": os.uname().nodename, "tiny": C.ARGS.tiny,
            "emulated": L.emulated, "device": "?"}
    smi = shutil.which("nvidia-smi")
    if smi:
        r = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                           capture_output=True, text=True)
        info["device"] = r.stdout.strip() or "nvidia-smi: " + r.stderr.strip()
        with open(os.path.join(C.LOGS, "nvidia-smi.txt"), "w") as f:
            f.write(subprocess.run([smi], capture_output=True, text=True).stdout)
    elif L.emulated:
        info["device"] = "the CPU SIMT emulator"
    say("gpu_check: %s -> %s (deadline %.0f s)" % (L.origin, C.OUT, C.ARGS.deadline))
    clocks, why = start_clocks(C.ARGS.smi or (None if L.emulated else smi), C.OUT)
    info["clocks"] = "sampled (clocks.csv)" if clocks else "not sampled: " + why
    spans = {}  # part -> (start, end), time.time()

    def do(part, fn, *a):
        if not wanted(part):
            return
        b = part_budget(part)
        if b is None:
            return record(part, "SKIP", 0, "no time left before the %.0f s deadline" % C.ARGS.deadline)
        say("%s (budget %.0f s)" % (part, b))
        t0 = time.time()
        fn(L, b, *a)
        spans[part] = (t0, time.time())

    do("doctor", part_doctor)
    lanes = [threading.Thread(target=do, args=("tests", part_tests)),
             threading.Thread(target=lambda: [do("memcheck", part_memcheck, S),
                                              do("racecheck_attention", part_racecheck_attention, S),
                                              do("racecheck_expert_gemm", part_racecheck_expert_gemm, S),
                                              do("racecheck_step", part_racecheck_step, S)])]
    for t in lanes:
        t.start()
    for t in lanes:
        t.join()
    # the parts that have the GPU alone, in this order, or in --only's order where it names them
    # (so that a call's command puts first what its deadline must not cut)
    steps = [
        ("profile", part_profile, S, "profile", "measured", "measured shape"),
        # every micro-batch's expert weight gradients in its own backward: what the deferral over
        # groups of micro-batches (on in profile where auto turns it on) gives is profile's row
        # against this one's
        ("profile_nodefer", part_profile, S, "profile_nodefer", "measured",
         "measured shape, weight gradients not deferred", None, ["--defer-wgrad", "off"]),
        ("profile_ep8", part_profile, S, "profile_ep8", "ep8", "EP-8 expert load"),
        # the weight gradients over groups of 4 micro-batches (training.expert_wgrad_group 4, the
        # automatic group since 2026-11-28, so profile's too where nothing overrides it), the
        # parked micro-batches kept as tokens (park_expert_rows auto; docs/performance.md,
        # "Groups of 4 measured, and the default")
        ("profile_group4", part_profile, S, "profile_group4", "measured",
         "measured shape, weight gradients over groups of 4", None, ["--wgrad-group", "4"]),
        # pairs (the default until 2026-11-28, groups of 4 since where they park tokens): what
        # the groups give is profile's row against this one's
        ("profile_pairs", part_profile, S, "profile_pairs", "measured",
         "measured shape, weight gradients over pairs", None, ["--wgrad-group", "2"]),
        # the Hopper grouped GEMM's weight gradient with its L2 prefetch of the old dW (off by
        # default: an H200 measured no gain, 2026-11-26): what it gives is this row against
        # profile's
        ("profile_prefetch", part_profile, S, "profile_prefetch", "measured",
         "measured shape, dW prefetch", {"SLUICE_EXPERT_GEMM_PREFETCH": "1"}),
        # the same with the weight gradient's add-reduction epilogue (opt-in, not yet measured)
        ("profile_dwreduce", part_profile, S, "profile_dwreduce", "measured",
         "measured shape, dW add reductions", {"SLUICE_EXPERT_GEMM_DW_REDUCE": "1"}),
        # the router's fp32 GEMMs without the K split (the default splits them; not yet measured)
        ("profile_nosplitk", part_profile, S, "profile_nosplitk", "measured",
         "measured shape, no K split", {"SLUICE_GEMM_SPLIT_K": "off"}),
        # the experts' activation in the first projection's epilogue (opt-in: the default's
        # separate kernel measured faster, 2026-11-27)
        ("profile_swiglu", part_profile, S, "profile_swiglu", "measured",
         "measured shape, SwiGLU fused", {"SLUICE_EXPERT_GEMM_SWIGLU": "1"}),
        ("attn_bench", part_attn, S),
        # each attention kernel's own time (Nsight Compute): the backward's passes apart
        ("attn_kernels", part_attn_kernels, S),
        # what bounds each backward kernel at S 32768, D 128 (issue 22's missed target), against
        # cuDNN's (Nsight Compute's sections)
        ("attn_anatomy", part_attn_anatomy, S),
        # the step's kernels whose rows missed their predictions (QK-norm/RoPE, router) or rates
        # (AdamW), each apart
        ("step_kernels", part_step_kernels, S),
        # the forward at head dim 64 with three consumer warpgroups (opt-in until measured)
        ("attn_bench_fwd192", part_attn_fwd192, S),
        # the ratios to cuDNN with the passes interleaved (as measured so far) and --separate
        ("attn_bench_separate", part_attn_separate, S),
        # the backward's dK/dV consumers in turns (opt-in until measured)
        ("attn_bench_pingpong", part_attn_pingpong, S),
        # the forward and the dQ pass as persistent blocks (opt-in until measured)
        ("attn_bench_persistent", part_attn_persistent, S),
        # the dQ pass's GEMMs back to back (opt-in until measured)
        ("attn_bench_dq_overlap", part_attn_dq_overlap, S),
        # the dK/dV pass's deeper rings of Q, dO and statistics (opt-in until measured)
        ("attn_bench_bwd_stages", part_attn_bwd_stages, S),
        # the dK/dV pass's steps by query tile from the end down (opt-in until measured)
        ("attn_bench_bwd_order", part_attn_bwd_order, S),
        # the dK/dV pass's dV issued before dS is computed (opt-in until measured)
        ("attn_bench_bwd_early_dv", part_attn_bwd_early_dv, S),
        # both at once: the early dV with 2, 3 and 4 stages (opt-in until measured)
        ("attn_bench_bwd_early_dv_stages", part_attn_bwd_early_dv_stages, S),
        ("expert_gemm", part_expert_gemm, S),
        ("expert_gemm_ablate", part_expert_gemm_ablate, S),
        # AdamW's rate against its streams' and a device copy's
        ("adamw", part_adamw, S),
        # the same at the measured step's parameter count (after profile, whose JSON gives it)
        ("adamw_full", part_adamw_full, S),
        # the torchtitan-style baseline first: issue 23's targets are set against it
        ("torch_titan", part_torch, S, "torch_titan", "torchtitan_style_bench.py", "torchtitan style"),
        ("torch_hf", part_torch, S, "torch_hf", "gpu_train_bench_torch.py", "Hugging Face Qwen3-MoE"),
        # last: the longest sequence (131,072), a sampled check, speed and memory (after the parts
        # the issues' targets are stated in, so that a deadline cuts it first)
        ("attn_long", part_attn_long, S),
    ]
    order = C.ARGS.only.split(",") if C.ARGS.only else []
    steps.sort(key=lambda st: order.index(st[0]) if st[0] in order else len(order))
    for st in steps:
        do(*st)
    if clocks:
        clocks.stop()
        for part, (t0, t1) in spans.items():
            c = clocks.span(t0, t1)
            if c and part in RESULTS:
                RESULTS[part]["clocks"] = c
    return summary(L, info)


def archive(path):
    """OUTDIR as an xz tar at path, without payload/ (the unpacked test programs)."""
    top = os.path.basename(os.path.normpath(C.OUT))
    skip = [os.path.join(top, "payload")]
    inside = os.path.relpath(os.path.abspath(path), os.path.abspath(C.OUT))
    if not inside.startswith(".."):  # the archive itself, when it is written into OUTDIR
        skip.append(os.path.join(top, inside))

    def keep(ti):
        return None if any(ti.name == k or ti.name.startswith(k + "/") for k in skip) else ti

    with tarfile.open(path, "w:xz") as tf:
        tf.add(C.OUT, arcname=top, filter=keep)
    say("archive: %s (%.1f MB)" % (path, os.path.getsize(path) / 1e6))


if __name__ == "__main__":
    rc = main()
    if C.ARGS.archive:
        archive(C.ARGS.archive)
    sys.exit(rc)
