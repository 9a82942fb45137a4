"""The one-call GPU check (issue 21, section 3): everything a lent GPU should run, in one command
that fits in about 7 minutes on an H200, with one folder of results. bench/gpu_check.sh is the
entry point (it sources the bundle's env.sh); this is the driver.

usage: bench/gpu_check.sh OUTDIR [--build DIR --src DIR] [--tiny] [--config PATH] [--layers N]
           [--python PY] [--sanitizer PATH] [--tests REGEX] [--jobs N] [--test-timeout S]
           [--only P,...] [--skip P,...] [--budget PART=S ...] [--deadline S]

Parts, in this order (each with its own time budget; a part that would start past the deadline
is skipped):
  doctor               sluice doctor --json (alone on the GPU: its speed rows stay clean)
  tests                the gpu-, cuda- and emu-labelled tests of the build (the bundle's test
                       programs, tests/manifest.json), --jobs at a time, each capped at
                       --test-timeout; test_doctor_gpu is left out (the doctor part runs it)
  memcheck             compute-sanitizer memcheck on one training step of the 15A2B shape cut to
                       2 layers, seq 1024 (gpu_train_bench: one process, no NCCL); reports of
                       NCCL's own start-up probes (cudaErrorNoKernelImageForDevice from
                       ncclInitKernelsForDevice) would be filtered out
  racecheck_attention  compute-sanitizer racecheck on the attention kernels' tests
                       (test_attention_tc: tensor cores; test_attention_cuda: SIMT; the Hopper
                       kernel through test_attention_tc deterministic sm90, skipped before 9.x)
  racecheck_expert_gemm  racecheck on bench/expert_gemm_bench --check (every strategy, the
                       Hopper kernel included, at small shapes)
  racecheck_step       racecheck on one training step of the 15A2B shape, 2 layers, seq 512
                       (hazards inside cuBLAS's, cuDNN's and NCCL's kernels are counted apart,
                       not failures: bench/sanitizer_log.py)
  profile              gpu_train_bench --profile, the measured shape: 4 micro-batches of 1 x 4096
  profile_nodefer      the measured shape again with --defer-wgrad off: every micro-batch's
                       expert weight gradients in its own backward (profile defers them over
                       pairs of micro-batches where auto does, training.defer_expert_wgrad)
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
  profile_noswiglu     the measured shape again with SLUICE_EXPERT_GEMM_SWIGLU=0: the experts'
                       activation as a kernel of its own after the first projection (profile
                       runs it in the Hopper grouped GEMM's epilogue; unmeasured since)
  attn_bench           attn_bench at the paper's shapes, kernels sm90, mma and cudnn in one process
                       (a kernel that cannot run here is skipped) (and attn_bench_torch.py when PyTorch
                       with CUDA imports)
  attn_bench_fwd192    attn_bench, kernel sm90 at head dim 64 (S 4096 and 32768), the forward's
                       query tiles of 128 rows and of 192 (SLUICE_ATTN_SM90_FWD_BM=192: three
                       consumer warpgroups; opt-in, unmeasured) back to back
  attn_bench_pingpong  attn_bench, kernel sm90 at head dims 128 and 64, S 32768 and 4096, the
                       backward's dK/dV consumers free and in turns (SLUICE_ATTN_SM90_BWD_PINGPONG=0
                       and 1; opt-in, unmeasured) back to back
  expert_gemm          bench/expert_gemm_bench: the expert GEMMs under each strategy at 256 and
                       2,048 rows per expert
  expert_gemm_ablate   expert_gemm_bench --ablate at 256 and 2,048 rows per expert: the Hopper
                       grouped GEMM's GEMMs whole, without their epilogue, without their loads
                       and with neither (where its time goes, without hardware counters)
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

--tiny: shapes for a CPU-emulated build (configs/tiny.json at 2 layers, seq 64): what CI runs
to test this script (tests/test_gpu_check.sh). --build/--src: run from a build tree and its
sources instead of a bundle (the manifest is made on the fly by launch/bundle_tests.py).
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time

from sanitizer_log import sanitizer_report, vendor_note  # bench/sanitizer_log.py

HERE = os.path.dirname(os.path.abspath(__file__))
PARTS = ["doctor", "tests", "memcheck", "racecheck_attention", "racecheck_expert_gemm",
         "racecheck_step", "profile", "profile_nodefer", "profile_ep8", "profile_prefetch",
         "profile_dwreduce", "profile_nosplitk", "profile_noswiglu", "attn_bench",
         "attn_bench_fwd192",
         "attn_bench_pingpong",
         "expert_gemm", "expert_gemm_ablate", "torch_titan", "torch_hf", "attn_long"]
BUDGETS = {"doctor": 120, "tests": 180, "memcheck": 90, "racecheck_attention": 90,
           "racecheck_expert_gemm": 60, "racecheck_step": 150, "profile": 75, "profile_ep8": 75,
           "profile_prefetch": 75, "profile_dwreduce": 75, "profile_nodefer": 75,
           "profile_nosplitk": 75, "profile_noswiglu": 75, "attn_bench": 60, "attn_bench_fwd192": 40, "attn_bench_pingpong": 60, "attn_long": 120,
           "expert_gemm": 30, "expert_gemm_ablate": 40,
           "torch_hf": 100, "torch_titan": 150}
EXCLUDED_TESTS = {"test_doctor_gpu": "the doctor part runs sluice doctor itself"}
T0 = time.time()


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
    ap.add_argument("--tests", default="", help="only the tests whose name matches this regex")
    ap.add_argument("--jobs", type=int, default=3)
    ap.add_argument("--test-timeout", type=float, default=120.0)
    ap.add_argument("--only", default="")
    ap.add_argument("--skip", default="")
    ap.add_argument("--budget", action="append", default=[], metavar="PART=S")
    ap.add_argument("--deadline", type=float, default=420.0, help="seconds for the whole check")
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


ARGS = parse_args()
OUT = os.path.abspath(ARGS.out)
LOGS = os.path.join(OUT, "logs")
RESULTS = {}  # part -> {"status", "seconds", "note", ...}
LOCK = threading.Lock()


def say(msg):
    with LOCK:
        print("[%6.1f s] %s" % (time.time() - T0, msg), flush=True)


def run(argv, budget, log, env=None, cwd=None, stdout_path=None):
    """Runs argv in a session of its own; kills the whole group after `budget` seconds.
    Returns (exit status or None when it timed out, seconds)."""
    t = time.time()
    with open(log, "ab") as lf:
        lf.write(("$ " + " ".join(argv) + "\n").encode())
        lf.flush()
        out = open(stdout_path, "wb") if stdout_path else lf
        try:
            p = subprocess.Popen(argv, stdout=out, stderr=lf, env=env, cwd=cwd, start_new_session=True)
        except OSError as e:
            lf.write(("cannot start: %s\n" % e).encode())
            return 127, time.time() - t
        try:
            rc = p.wait(timeout=max(budget, 1))
        except subprocess.TimeoutExpired:
            for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    p.wait(timeout=grace)
                    break
                except subprocess.TimeoutExpired:
                    continue
            lf.write(("TIMEOUT after %.0f s\n" % budget).encode())
            rc = None
        finally:
            if stdout_path:
                out.close()
    return rc, time.time() - t


def left():
    return ARGS.deadline - (time.time() - T0)


def record(part, status, seconds, note, **extra):
    RESULTS[part] = dict(status=status, seconds=round(seconds, 1), note=note, **extra)
    say("%-20s %-7s %6.1f s  %s" % (part, status, seconds, note))


def wanted(part):
    if ARGS.only and part not in ARGS.only.split(","):
        return False
    return part not in ARGS.skip.split(",")


def part_budget(part):
    """The part's budget, cut to what the deadline leaves; None when too little is left."""
    b = min(BUDGETS[part], left() - 5)
    return b if b >= 10 else None


def last_json(path):
    try:
        lines = [l for l in open(path).read().splitlines() if l.startswith("{")]
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None


# ---- the layout: a bundle, or a build tree and its sources ----------------------------------------


class Layout:
    def __init__(self):
        if ARGS.build:
            self.build, self.src = os.path.abspath(ARGS.build), os.path.abspath(ARGS.src)
            self.sluice = os.path.join(self.build, "launch", "sluice")
            self.gtb = os.path.join(self.build, "bench", "gpu_train_bench")
            self.bench_dir = os.path.join(self.src, "bench")
            self.configs = os.path.join(self.src, "configs")
            self.manifest = os.path.join(OUT, "manifest.json")
            r = subprocess.run([sys.executable, os.path.join(self.src, "launch", "bundle_tests.py"),
                                "--build", self.build, "--src", self.src, "--out", self.manifest],
                               capture_output=True, text=True)
            if r.returncode != 0:
                self.manifest = None
                say("no test manifest: " + (r.stderr or r.stdout).strip())
            self.origin = "build tree %s" % self.build
        else:
            root = os.path.dirname(HERE)  # the bundle: bench/ beside bin/
            self.sluice = os.path.join(root, "bin", "sluice")
            self.gtb = os.path.join(root, "bin", "gpu_train_bench")
            self.bench_dir = HERE
            self.configs = os.path.join(root, "configs")
            self.manifest = os.path.join(root, "tests", "manifest.json")
            payload = os.path.join(root, "tests", "programs.tar.xz")
            self.build = os.path.join(OUT, "payload", "build")
            self.src = os.path.join(OUT, "payload", "src")
            if os.path.exists(payload) and os.path.exists(self.manifest):
                t = time.time()
                with tarfile.open(payload, "r:xz") as tf:
                    try:  # Python 3.12+: the safe filter (our own archive, but no warning)
                        tf.extractall(os.path.join(OUT, "payload"), filter="data")
                    except TypeError:
                        tf.extractall(os.path.join(OUT, "payload"))
                say("unpacked the test programs (%s) in %.1f s" % (payload, time.time() - t))
            else:
                self.manifest = None
                say("this bundle has no test programs (launch/bundle.sh --with-tests makes them)")
            self.origin = "bundle %s" % root
        self.attn_bench = os.path.join(self.build, "bench", "attn_bench")
        self.emulated = False
        try:
            h = subprocess.run([self.sluice, "--help"], capture_output=True, text=True, timeout=60)
            self.emulated = "emulated on the CPU" in (h.stdout + h.stderr)
        except (OSError, subprocess.TimeoutExpired):
            pass

    def resolve(self, s):
        mpiexec = shutil.which("mpiexec") or shutil.which("mpirun") or "mpiexec"
        return s.replace("@BUILD@", self.build).replace("@SRC@", self.src).replace("@MPIEXEC@", mpiexec)


# ---- the shapes -------------------------------------------------------------------------------------


def shapes(L):
    if ARGS.tiny:
        cfg = ARGS.config or os.path.join(L.configs, "tiny.json")
        common = ["--layers", "2", "--seq", "64", "--peak-n", "128", "--peak-reps", "3", "--init", "fast"]
        return dict(config=cfg, measured=common + ["--batch", "2", "--accum", "2"],
                    ep8=common + ["--batch", "4", "--accum", "1"],
                    steps=["--steps", "1", "--warmup", "1", "--profile-steps", "1"],
                    sanitize=["--layers", "2", "--seq", "64", "--batch", "1"],
                    race=["--layers", "2", "--seq", "64", "--batch", "1"],
                    attn=["--seq", "128", "--heads", "2", "--kv-heads", "1", "--head-dim", "64",
                          "--iters", "1", "--warmup", "0"],
                    attn_d64=[["--seq", "128", "--heads", "2", "--kv-heads", "1", "--head-dim", "64",
                               "--iters", "1", "--warmup", "0"]],
                    attn_pp=[["--seq", "128", "--heads", "2", "--kv-heads", "1", "--head-dim", "128",
                              "--iters", "1", "--warmup", "0"]],
                    attn_long=(["--seq", "300", "--heads", "2", "--kv-heads", "1"], ["64"], "8",
                               ["--iters", "1", "--warmup", "0"]),
                    gemm=["--rows", "8", "--experts", "8", "--hidden", "64", "--ffn", "32", "--reps", "2"],
                    gemm_ablate=["--rows", "150", "--experts", "3", "--hidden", "136", "--ffn", "72",
                                 "--reps", "1"])
    cfg = ARGS.config or os.path.join(L.configs, "qwen-gated-15a2b.json")
    common = ["--seq", "4096", "--peak-reps", "11", "--init", "fast"]
    if ARGS.layers:
        common += ["--layers", str(ARGS.layers)]
    return dict(config=cfg, measured=common + ["--batch", "1", "--accum", "4"],
                ep8=common + ["--batch", "8", "--accum", "1"],
                steps=["--steps", "5", "--warmup", "2", "--profile-steps", "3"],
                sanitize=["--layers", "2", "--seq", "1024", "--batch", "1"],
                race=["--layers", "2", "--seq", "512", "--batch", "1"],
                attn=["--kernel", "sm90,mma,cudnn", "--iters", "5", "--warmup", "1"],
                attn_d64=[["--seq", seq, "--head-dim", "64", "--iters", "5", "--warmup", "1"]
                          for seq in ("4096", "32768")],
                attn_pp=[["--seq", seq, "--head-dim", d, "--iters", "5", "--warmup", "1"]
                         for d in ("128", "64") for seq in ("32768", "4096")],
                attn_long=(["--seq", "131072"], ["128", "64"], "32", ["--iters", "3", "--warmup", "1"]),
                gemm=[], gemm_ablate=["--rows", "256,2048", "--reps", "5"])


# ---- the parts ------------------------------------------------------------------------------------


def part_doctor(L, budget):
    log, js = os.path.join(LOGS, "doctor.log"), os.path.join(OUT, "doctor.json")
    rc, sec = run([L.sluice, "doctor", "--json"], budget, log, stdout_path=js)
    if rc is None:
        return record("doctor", "TIMEOUT", sec, "no result within %.0f s" % budget)
    d = last_json(js) or {}
    fails = [c["key"] for c in d.get("checks", []) if c.get("status") == "FAIL"]
    s = d.get("summary", {})
    note = "%s checks: %s OK, %s FAIL, %s SKIP, %s INFO" % (s.get("checks"), s.get("ok"), s.get("fail"),
                                                          s.get("skip"), s.get("info"))
    if rc == 0:
        return record("doctor", "PASS", sec, note)
    why = {1: "failed: " + ", ".join(fails), 3: "no GPU to check"}.get(rc, "exit %s" % rc)
    record("doctor", "FAIL", sec, why + ("; " + note if d else ""))


def part_tests(L, budget):
    if not L.manifest:
        return record("tests", "SKIP", 0, "no test programs (bundle made without --with-tests)")
    m = json.load(open(L.manifest))
    sel = re.compile(ARGS.tests) if ARGS.tests else None
    todo, results = [], []
    for t in m["tests"]:
        if sel and not sel.search(t["name"]):
            continue
        if t["name"] in EXCLUDED_TESTS:
            results.append(dict(name=t["name"], status="SKIP", seconds=0.0, note=EXCLUDED_TESTS[t["name"]]))
            continue
        todo.append(t)
    os.makedirs(os.path.join(LOGS, "tests"), exist_ok=True)
    start = time.time()
    queue = list(todo)

    def worker():
        while True:
            with LOCK:
                if not queue:
                    return
                t = queue.pop(0)
            remaining = budget - (time.time() - start)
            if remaining < 5:
                results.append(dict(name=t["name"], status="SKIP", seconds=0.0, note="no time left"))
                continue
            env = dict(os.environ)
            env.update({k: L.resolve(v) for k, v in t["environment"].items()})
            cwd = L.resolve(t["cwd"])
            os.makedirs(cwd, exist_ok=True)
            cap = min(t["timeout"], ARGS.test_timeout, remaining)
            rc, sec = run([L.resolve(a) for a in t["argv"]], cap, os.path.join(LOGS, "tests", t["name"] + ".log"),
                          env=env, cwd=cwd)
            st = "TIMEOUT" if rc is None else "PASS" if rc == 0 else "SKIP" if rc == t["skip_return_code"] else "FAIL"
            results.append(dict(name=t["name"], status=st, seconds=round(sec, 1),
                                note="" if rc in (0, None) else "exit %d" % rc))
            say("  test %-40s %-7s %6.1f s" % (t["name"], st, sec))

    threads = [threading.Thread(target=worker) for _ in range(max(1, ARGS.jobs))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    results.sort(key=lambda r: r["name"])
    count = {s: sum(r["status"] == s for r in results) for s in ("PASS", "FAIL", "SKIP", "TIMEOUT")}
    with open(os.path.join(OUT, "tests.tsv"), "w") as f:
        f.write("".join("%s\t%s\t%.1f\t%s\n" % (r["name"], r["status"], r["seconds"], r["note"]) for r in results))
    note = "%d passed, %d failed, %d skipped, %d timed out" % (count["PASS"], count["FAIL"], count["SKIP"],
                                                               count["TIMEOUT"])
    bad = [r["name"] for r in results if r["status"] in ("FAIL", "TIMEOUT")]
    if bad:
        note += ": " + ", ".join(bad)
    status = "FAIL" if count["FAIL"] or count["TIMEOUT"] else "PASS" if count["PASS"] else "SKIP"
    record("tests", status, time.time() - start, note, tests=results)


def find_sanitizer(L):
    if ARGS.sanitizer:
        return ARGS.sanitizer, None
    if L.emulated:
        return None, "the emulated build has no GPU to check (--sanitizer runs one anyway)"
    for d in [None, os.path.join(os.environ.get("CUDA_HOME", "/nonexistent"), "bin"), "/usr/local/cuda/bin"]:
        p = shutil.which("compute-sanitizer", path=d) if d else shutil.which("compute-sanitizer")
        if p:
            return p, None
    return None, "compute-sanitizer not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)"


def sanitized(L, part, tool, runs, budget):
    san, why = find_sanitizer(L)
    if not san:
        return record(part, "SKIP", 0, why)
    start, notes, status = time.time(), [], "PASS"
    for label, argv in runs:
        remaining = budget - (time.time() - start)
        if remaining < 5:
            status, notes = "TIMEOUT", notes + ["%s: no time left" % label]
            break
        log = os.path.join(LOGS, "%s_%s.log" % (part, label))
        extra = ["--racecheck-report", "all"] if tool == "racecheck" else []
        rc, _ = run([san, "--tool", tool, "--print-limit", "200"] + extra + argv, remaining, log)
        text = open(log, errors="replace").read()
        errors, probes, warnings, vendor = sanitizer_report(text, tool)
        n = "%s: %d error(s)" % (label, len(errors))
        if probes:
            n += ", %d NCCL start-up probe report(s) filtered" % probes
        if vendor:
            n += ", " + vendor_note(vendor)
        if warnings:
            n += ", %d warning(s)" % warnings
        if rc is None:
            status, n = "TIMEOUT", n + ", timed out"
        elif rc == 77 and not errors:  # a test that cannot run on this GPU (e.g. sm90 before Hopper)
            n += ", skipped (exit 77)"
        elif errors or rc != 0:
            status = "FAIL"
            if rc != 0:
                n += ", exit %d" % rc
            if errors:
                n += " (first: %s)" % errors[0]
        notes.append(n)
        if status == "TIMEOUT":
            break
    record(part, status, time.time() - start, "; ".join(notes))


def part_memcheck(L, budget, S):
    sanitized(L, "memcheck", "memcheck", [("step", [L.gtb, S["config"]] + S["sanitize"] + [
        "--steps", "1", "--warmup", "1", "--peak-n", "0", "--init", "fast"])], budget)


def part_racecheck_attention(L, budget, S):
    if ARGS.tiny:
        runs = [("attn_bench", [L.attn_bench, "--backend", "cuda", "--dtype", "bf16", "--check"] + S["attn"][:8])]
    else:
        tc = os.path.join(L.build, "tests", "test_attention_tc")
        runs = [(n, [os.path.join(L.build, "tests", n)]) for n in ("test_attention_tc", "test_attention_cuda")]
        # the Hopper kernel (TMA, mbarriers, wgmma); test_attention_tc skips it (77) elsewhere
        runs.append(("test_attention_sm90", [tc, "deterministic", "sm90"]))
    sanitized(L, "racecheck_attention", "racecheck", runs, budget)


def part_racecheck_expert_gemm(L, budget, S):
    exe = os.path.join(L.build, "bench", "expert_gemm_bench")
    if not os.path.exists(exe):
        return record("racecheck_expert_gemm", "SKIP", 0, "no expert_gemm_bench (bundle made without --with-tests)")
    sanitized(L, "racecheck_expert_gemm", "racecheck", [("expert_gemm_check", [exe, "--check"])], budget)


def part_racecheck_step(L, budget, S):
    sanitized(L, "racecheck_step", "racecheck", [("step", [L.gtb, S["config"]] + S["race"] + [
        "--steps", "1", "--warmup", "0", "--peak-n", "0", "--init", "fast"])], budget)


def part_profile(L, budget, S, part, shape, what, extra_env=None, extra_args=()):
    log, js = os.path.join(LOGS, part + ".log"), os.path.join(OUT, part + ".out")
    prof = RESULTS.get("profile", {}).get("result")
    if part != "profile" and shape == "measured" and prof and "--layers" not in S[shape]:
        # a variant of the measured shape at the profile's layer count: its own estimate could
        # choose another (--defer-wgrad off counts no parked expert rows)
        extra_args = ["--layers", str(prof["layers"])] + list(extra_args)
    env = dict(os.environ, **extra_env) if extra_env else None
    rc, sec = run([L.gtb, S["config"]] + S[shape] + S["steps"] + ["--profile"] + list(extra_args),
                  budget, log, env=env, stdout_path=js)
    j = last_json(js)
    if rc is None:
        return record(part, "TIMEOUT", sec, what)
    if rc != 0 or not j:
        return record(part, "FAIL", sec, "%s: exit %s (%s)" % (what, rc, log))
    with open(os.path.join(OUT, part + ".json"), "w") as f:
        json.dump(j, f)
    rows = j["batch"] * j["seq"] * j.get("topk", 0) / max(j.get("experts", 1), 1)
    p = j.get("profile") or {}
    share = 100 * p.get("rows_sum_ms", 0) / max(p.get("step_wall_ms", 1e-9), 1e-9)
    note = "%s: %d layers, %d x %d x %d tokens, %.0f rows per expert, attention %s, expert GEMMs %s " \
           "(weight gradient %s%s); %.1f ms/step, %.0f tokens/s, %.1f%% of peak; profile rows %.1f%% of the step" % (
               what, j["layers"], j["accum"], j["batch"], j["seq"], rows, j.get("attention_kernel", "?"),
               j.get("expert_gemm_path", "?"), j.get("expert_gemm_dw_path", "?"),
               ", over pairs of micro-batches" if j.get("defer_expert_wgrad") and j["accum"] > 1 else "",
               j["ms_per_step"], j["tokens_per_s"], 100 * (j.get("peak_fraction") or 0), share)
    record(part, "PASS", sec, note, result=j)


def torch_env():
    env = dict(os.environ)
    if "SLUICE_BUNDLE_OLD_LD_LIBRARY_PATH" in env:  # PyTorch loads its own libraries, not the bundle's
        env["LD_LIBRARY_PATH"] = env["SLUICE_BUNDLE_OLD_LD_LIBRARY_PATH"]
    return env


TORCH = {}


def torch_cuda():
    """None when PyTorch with CUDA imports, else why not (asked once)."""
    if "why" not in TORCH:
        try:
            r = subprocess.run([ARGS.python, "-c", "import torch, sys; sys.exit(0 if torch.cuda.is_available() "
                                "else 3)"], capture_output=True, text=True, timeout=120, env=torch_env())
            TORCH["why"] = None if r.returncode == 0 else (
                "PyTorch has no CUDA device here" if r.returncode == 3 else "PyTorch does not import with %s" % ARGS.python)
        except (OSError, subprocess.TimeoutExpired) as e:
            TORCH["why"] = "%s: %s" % (ARGS.python, e)
    return TORCH["why"]


def part_attn(L, budget, S):
    log, out = os.path.join(LOGS, "attn_bench.log"), os.path.join(OUT, "attn_bench.out")
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
        tout = os.path.join(OUT, "attn_bench_torch.out")
        trc, tsec = run([ARGS.python, os.path.join(L.bench_dir, "attn_bench_torch.py"), "--iters", "5",
                         "--warmup", "1"], budget - sec, log, env=torch_env(), stdout_path=tout)
        sec += tsec
        note += "; PyTorch: %s" % ("done" if trc == 0 else "exit %s" % trc)
    else:
        note += "; PyTorch side skipped: %s" % (why or "no time left")
    record("attn_bench", "PASS", sec, note, result=rows)


def part_attn_variants(L, budget, part, var, values, shapes, out_name, tag):
    """attn_bench, kernel sm90, at each shape under each value of the environment variable `var`,
    one process each, back to back per shape: rows in out_name % (value, N), each row tagged
    with `tag` = the value."""
    log = os.path.join(LOGS, part + ".log")
    if not os.path.exists(L.attn_bench):
        return record(part, "SKIP", 0, "no attn_bench (bundle made without --with-tests)")
    notes, rows, sec = [], [], 0.0
    for shape in shapes:
        for v in values:
            out = os.path.join(OUT, out_name % (v, len(rows)))
            env = dict(os.environ, **{var: v})
            rc, t = run([L.attn_bench, "--backend", "cuda", "--dtype", "bf16", "--kernel", "sm90"] + shape,
                        budget - sec, log, env=env, stdout_path=out)
            sec += t
            if rc is None:
                return record(part, "TIMEOUT", sec, "; ".join(notes))
            if rc == 77:
                return record(part, "SKIP", sec, "the Hopper kernel cannot run here")
            if rc != 0:
                return record(part, "FAIL", sec, "%s=%s: exit %d" % (var, v, rc))
            for r in (json.loads(l) for l in open(out) if l.startswith("{")):
                r[tag] = int(v)
                rows.append(r)
                notes.append("S %d D %s %s=%s: fwd %.0f, bwd %.0f TFLOP/s" % (
                    r["seq"], r.get("head_dim", "?"), tag, v, r.get("fwd_tflops", 0), r.get("bwd_tflops", 0)))
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


def part_attn_long(L, budget, S):
    """The Hopper kernel at the longest sequence sluice trains (131,072 tokens): a sampled check
    (attn_bench --check-rows: the whole check's CPU reference would take hours), then its speed
    beside cuDNN's, per head dim, with the device memory each run took beyond its tensors."""
    part, log = "attn_long", os.path.join(LOGS, "attn_long.log")
    if not os.path.exists(L.attn_bench):
        return record(part, "SKIP", 0, "no attn_bench (bundle made without --with-tests)")
    shape, dims, nrows, timing = S["attn_long"]
    base = [L.attn_bench, "--backend", "cuda", "--dtype", "bf16"] + shape
    notes, rows, sec = [], [], 0.0
    for d in dims:
        out = os.path.join(OUT, "attn_long_check_d%s.out" % d)
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
        out = os.path.join(OUT, "attn_long_d%s.out" % d)
        kernels = "sm90" if ARGS.tiny else "sm90,cudnn"
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
    exe, out = os.path.join(L.build, "bench", "expert_gemm_bench"), os.path.join(OUT, "expert_gemm.out")
    if not os.path.exists(exe):
        return record("expert_gemm", "SKIP", 0, "no expert_gemm_bench (bundle made without --with-tests)")
    rc, sec = run([exe] + S["gemm"], budget, os.path.join(LOGS, "expert_gemm.log"), stdout_path=out)
    if rc is None or rc != 0:
        return record("expert_gemm", "TIMEOUT" if rc is None else "FAIL", sec, "" if rc is None else "exit %d" % rc)
    alls = [l.split() for l in open(out) if l.startswith("all six")]  # all six STRATEGY ms TFLOP/s
    record("expert_gemm", "PASS", sec, "; ".join("%s %s ms" % (a[2], a[3]) for a in alls))


def part_expert_gemm_ablate(L, budget, S):
    part, exe = "expert_gemm_ablate", os.path.join(L.build, "bench", "expert_gemm_bench")
    out = os.path.join(OUT, "expert_gemm_ablate.out")
    if not os.path.exists(exe):
        return record(part, "SKIP", 0, "no expert_gemm_bench (bundle made without --with-tests)")
    rc, sec = run([exe, "--ablate"] + S["gemm_ablate"], budget, os.path.join(LOGS, part + ".log"),
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
                     r"\s+([\d.]+|nan)\s+([\d.]+)\s", line)
        if rows and m:
            rows[-1]["gemms"][m.group(1)] = dict(zip(("whole_ms", "no_epilogue_ms", "no_loads_ms", "neither_ms",
                                                      "epilogue_pct", "feed_pct", "pair_stores_ms", "bn128_ms"),
                                                     (float(m.group(k)) for k in range(2, 10))))
    for r in rows:
        g = r["gemms"]
        notes.append("%d rows: %s" % (r["rows"], ", ".join("%s epi %.0f%% feed %.0f%% 4B stores %+.0f%% BN128 %+.0f%%" % (
            n, v["epilogue_pct"], v["feed_pct"], 100 * (v["pair_stores_ms"] / v["whole_ms"] - 1),
            100 * (v["bn128_ms"] / v["whole_ms"] - 1))
            for n, v in g.items() if n in ("gate_up+SwiGLU", "down fwd"))))
    record(part, "PASS", sec, "; ".join(notes), result=rows)


def part_torch(L, budget, S, part, script, label):
    why = torch_cuda()
    if why:
        return record(part, "SKIP", 0, why)
    prof = RESULTS.get("profile", {}).get("result")
    if not prof:
        return record(part, "SKIP", 0, "needs the profile part's layer count and shape")
    log, out = os.path.join(LOGS, part + ".log"), os.path.join(OUT, part + ".out")
    argv = [ARGS.python, os.path.join(L.bench_dir, script), S["config"], "--layers", str(prof["layers"]),
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
    with open(os.path.join(OUT, part + ".json"), "w") as f:
        json.dump(j, f)
    record(part, "PASS", sec, "%s: %.1f ms/step, %.0f tokens/s; sluice %.2fx" % (
        label, j["ms_per_step"], j["tokens_per_s"], prof["tokens_per_s"] / j["tokens_per_s"]), result=j)


# ---- the summary ------------------------------------------------------------------------------------


def summary(L, info):
    lines = ["sluice one-call GPU check: %s" % info["when"],
             "from %s; device: %s" % (L.origin, info["device"]), ""]
    lines.append("%-20s %-7s %8s  %s" % ("part", "status", "seconds", "result"))
    for p in PARTS:
        r = RESULTS.get(p)
        if r:
            lines.append("%-20s %-7s %8.1f  %s" % (p, r["status"], r["seconds"], r["note"]))
    total = time.time() - T0
    bad = [p for p, r in RESULTS.items() if r["status"] in ("FAIL", "TIMEOUT")]
    lines.append("")
    lines.append("total %.1f s; %s" % (total, "FAILED: " + ", ".join(bad) if bad else "no part failed"))
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
    with open(os.path.join(OUT, "summary.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(OUT, "summary.json"), "w") as f:
        json.dump(dict(info, seconds=round(total, 1), status="fail" if bad else "ok",
                       parts=[dict(part=p, **RESULTS[p]) for p in PARTS if p in RESULTS]), f, indent=1)
    print("\n" + text, end="")
    return 1 if bad else 0


def main():
    os.makedirs(LOGS, exist_ok=True)
    L = Layout()
    S = shapes(L)
    info = {"when": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "host": os.uname().nodename, "tiny": ARGS.tiny,
            "emulated": L.emulated, "device": "?"}
    smi = shutil.which("nvidia-smi")
    if smi:
        r = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                           capture_output=True, text=True)
        info["device"] = r.stdout.strip() or "nvidia-smi: " + r.stderr.strip()
        with open(os.path.join(LOGS, "nvidia-smi.txt"), "w") as f:
            f.write(subprocess.run([smi], capture_output=True, text=True).stdout)
    elif L.emulated:
        info["device"] = "the CPU SIMT emulator"
    say("gpu_check: %s -> %s (deadline %.0f s)" % (L.origin, OUT, ARGS.deadline))

    def do(part, fn, *a):
        if not wanted(part):
            return
        b = part_budget(part)
        if b is None:
            return record(part, "SKIP", 0, "no time left before the %.0f s deadline" % ARGS.deadline)
        say("%s (budget %.0f s)" % (part, b))
        fn(L, b, *a)

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
    do("profile", part_profile, S, "profile", "measured", "measured shape")
    # every micro-batch's expert weight gradients in its own backward: what the deferral over
    # pairs of micro-batches (on in profile where auto turns it on) gives is profile's row
    # against this one's
    do("profile_nodefer", part_profile, S, "profile_nodefer", "measured",
       "measured shape, weight gradients not deferred", None, ["--defer-wgrad", "off"])
    do("profile_ep8", part_profile, S, "profile_ep8", "ep8", "EP-8 expert load")
    # the Hopper grouped GEMM's weight gradient with its L2 prefetch of the old dW (off by
    # default: an H200 measured no gain, 2026-11-26): what it gives is this row against
    # profile's
    do("profile_prefetch", part_profile, S, "profile_prefetch", "measured",
       "measured shape, dW prefetch", {"SLUICE_EXPERT_GEMM_PREFETCH": "1"})
    # the same with the weight gradient's add-reduction epilogue (opt-in, not yet measured)
    do("profile_dwreduce", part_profile, S, "profile_dwreduce", "measured",
       "measured shape, dW add reductions", {"SLUICE_EXPERT_GEMM_DW_REDUCE": "1"})
    # the router's fp32 GEMMs without the K split (the default splits them; not yet measured)
    do("profile_nosplitk", part_profile, S, "profile_nosplitk", "measured",
       "measured shape, no K split", {"SLUICE_GEMM_SPLIT_K": "off"})
    # the experts' activation as its own kernel (the default fuses it into the first
    # projection's epilogue on Hopper; not yet measured)
    do("profile_noswiglu", part_profile, S, "profile_noswiglu", "measured",
       "measured shape, SwiGLU not fused", {"SLUICE_EXPERT_GEMM_SWIGLU": "0"})
    do("attn_bench", part_attn, S)
    # the forward at head dim 64 with three consumer warpgroups (opt-in until measured)
    do("attn_bench_fwd192", part_attn_fwd192, S)
    # the backward's dK/dV consumers in turns (opt-in until measured)
    do("attn_bench_pingpong", part_attn_pingpong, S)
    do("expert_gemm", part_expert_gemm, S)
    do("expert_gemm_ablate", part_expert_gemm_ablate, S)
    # the torchtitan-style baseline first: issue 23's targets are set against it
    do("torch_titan", part_torch, S, "torch_titan", "torchtitan_style_bench.py", "torchtitan style")
    do("torch_hf", part_torch, S, "torch_hf", "gpu_train_bench_torch.py", "Hugging Face Qwen3-MoE")
    # last: the longest sequence (131,072), a sampled check, speed and memory (after the parts
    # the issues' targets are stated in, so that a deadline cuts it first)
    do("attn_long", part_attn_long, S)
    return summary(L, info)


if __name__ == "__main__":
    sys.exit(main())
