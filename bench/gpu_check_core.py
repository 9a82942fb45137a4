"""bench/gpu_check.py's shared pieces: the parts' names and budgets, the run's state (its
arguments, the output folder, the results so far), running a program under a budget, recording a
part's result, the layout of a bundle or build tree, and the shapes each part runs. The parts
(bench/gpu_check_checks.py, bench/gpu_check_bench.py) and the driver use the state through this
module (C.ARGS, C.OUT, C.LOGS), which init() sets once the driver has parsed its arguments."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PARTS = ["doctor", "tests", "memcheck", "racecheck_attention", "racecheck_expert_gemm",
         "racecheck_step", "profile", "profile_nodefer", "profile_group4", "profile_pairs", "profile_ep8",
         "profile_prefetch",
         "profile_dwreduce", "profile_nosplitk", "profile_swiglu", "attn_bench",
         "attn_bench_fwd192", "attn_bench_separate",
         "attn_bench_pingpong", "attn_bench_persistent", "attn_bench_dq_overlap", "attn_bench_bwd_stages", "attn_bench_bwd_order",
         "attn_bench_bwd_early_dv", "attn_bench_bwd_early_dv_stages",
         "attn_kernels", "attn_anatomy",
         "step_kernels",
         "expert_gemm", "expert_gemm_ablate", "adamw", "adamw_full", "torch_titan", "torch_hf", "attn_long"]
BUDGETS = {"doctor": 120, "tests": 200, "memcheck": 150, "racecheck_attention": 120,
           "racecheck_expert_gemm": 60, "racecheck_step": 150, "profile": 75, "profile_ep8": 75,
           "profile_prefetch": 75, "profile_dwreduce": 75, "profile_nodefer": 75, "profile_group4": 75,
           "profile_pairs": 75,
           "profile_nosplitk": 75, "profile_swiglu": 75, "attn_bench": 60, "attn_bench_fwd192": 40, "attn_bench_separate": 60, "attn_bench_pingpong": 60,
           "attn_bench_persistent": 60, "attn_bench_dq_overlap": 60, "attn_bench_bwd_stages": 90, "attn_bench_bwd_order": 75,
           "attn_bench_bwd_early_dv": 75, "attn_bench_bwd_early_dv_stages": 80, "attn_kernels": 60, "attn_anatomy": 120,
           "step_kernels": 60, "attn_long": 280,
           "expert_gemm": 30, "expert_gemm_ablate": 60, "adamw": 30, "adamw_full": 60,
           "torch_hf": 100, "torch_titan": 150}
EXCLUDED_TESTS = {"test_doctor_gpu": "the doctor part runs sluice doctor itself"}
# The tests lane's longest tests on an H200 (seconds, bench/results/h200-2026-11-28/call1/tests.tsv;
# test_gpu_smoke from call2, where it passed in 158.6 s beside racecheck: two runs of a 2-layer
# 15A2B with start-up and a 1.9B-parameter checkpoint each): started first, longest first, so
# that the lane ends with short tests instead of waiting on a long one started last. Others keep
# the manifest's order.
TEST_SECONDS = {"test_gpu_smoke": 158.6, "test_cuda_train": 26.3, "test_attn_bench_cuda": 25.7,
                "test_attention_cudnn_train": 19.2, "test_attention_sm90_train": 10.1,
                "test_gpu_smoke_tiny": 9.0, "test_ptx_sm90": 8.4, "test_cuda_moe": 8.3,
                "test_document_mask_cuda": 6.0, "test_profile_cuda": 4.5}
T0 = time.time()

ARGS = None  # the driver's parsed arguments (init)
OUT = None  # the output folder, absolute
LOGS = None  # OUT/logs
RESULTS = {}  # part -> {"status", "seconds", "note", ...}
LOCK = threading.Lock()


def init(args):
    global ARGS, OUT, LOGS
    ARGS = args
    OUT = os.path.abspath(args.out)
    LOGS = os.path.join(OUT, "logs")


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


def find_cuda_tool(name, given, emulated, what):
    """A CUDA toolkit program: `given` (its command-line option) if set, else `name` on PATH, in
    $CUDA_HOME/bin or /usr/local/cuda/bin; None with the reason where there is none, or on the
    emulated build (no GPU for it; the option runs one anyway)."""
    if given:
        return given, None
    if emulated:
        return None, "the emulated build has no GPU to %s (the option runs one anyway)" % what
    for d in [None, os.path.join(os.environ.get("CUDA_HOME", "/nonexistent"), "bin"), "/usr/local/cuda/bin"]:
        p = shutil.which(name, path=d) if d else shutil.which(name)
        if p:
            return p, None
    return None, "%s not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)" % name


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
                    attn_kernels=[["--seq", "128", "--heads", "2", "--kv-heads", "1", "--head-dim", "128",
                                   "--iters", "1", "--warmup", "0"]],
                    attn_anatomy=["--seq", "128", "--heads", "2", "--kv-heads", "1", "--head-dim", "128",
                                  "--iters", "1", "--warmup", "0"],
                    attn_long=(["--seq", "300", "--heads", "2", "--kv-heads", "1"], ["64"], "8",
                               ["--iters", "1", "--warmup", "0"]),
                    gemm=["--rows", "8", "--experts", "8", "--hidden", "64", "--ffn", "32", "--reps", "2"],
                    gemm_ablate=["--rows", "150", "--experts", "3", "--hidden", "136", "--ffn", "72",
                                 "--reps", "1"],
                    adamw=["--params", "4099", "--reps", "1"],
                    adamw_full=["--params", "4099", "--reps", "1", "--rows", "coalesced,streams",
                                "--device-fill"],
                    race_optins=["--seq", "300", "--heads", "2", "--kv-heads", "1", "--head-dim", "64",
                                 "--iters", "1", "--warmup", "0"],
                    attn_separate=[["--seq", "128", "--heads", "2", "--kv-heads", "1", "--head-dim", "128",
                                    "--iters", "2", "--warmup", "0"]])
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
                attn_kernels=[["--seq", seq, "--head-dim", d, "--iters", "1", "--warmup", "0"]
                              for d in ("128", "64") for seq in ("4096", "32768")],
                attn_anatomy=["--seq", "32768", "--head-dim", "128", "--iters", "1", "--warmup", "0"],
                attn_long=(["--seq", "131072"], ["128", "64"], "32", ["--iters", "3", "--warmup", "1"]),
                gemm=[], gemm_ablate=["--rows", "256,2048", "--reps", "5"], adamw=[],
                adamw_full=["--reps", "3", "--rows", "coalesced,streams", "--device-fill"],
                race_optins=["--seq", "2048", "--head-dim", "128", "--iters", "1", "--warmup", "0"],
                attn_separate=[["--seq", seq, "--head-dim", "128", "--iters", "5", "--warmup", "1"]
                               for seq in ("32768", "4096")])


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
