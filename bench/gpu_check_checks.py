"""bench/gpu_check.py's parts that check (sluice doctor, the tests, compute-sanitizer's
memcheck and racecheck) and the profiled training steps; each records its result
(gpu_check_core.record)."""
import json
import os
import re
import threading
import time

import gpu_check_core as C
from gpu_check_core import EXCLUDED_TESTS, LOCK, RESULTS, TEST_SECONDS, last_json, record, run, say
from sanitizer_log import sanitizer_report, vendor_note  # bench/sanitizer_log.py

def part_doctor(L, budget):
    log, js = os.path.join(C.LOGS, "doctor.log"), os.path.join(C.OUT, "doctor.json")
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
    sel = re.compile(C.ARGS.tests) if C.ARGS.tests else None
    todo, results = [], []
    for t in m["tests"]:
        if sel and not sel.search(t["name"]):
            continue
        if t["name"] in EXCLUDED_TESTS:
            results.append(dict(name=t["name"], status="SKIP", seconds=0.0, note=EXCLUDED_TESTS[t["name"]]))
            continue
        todo.append(t)
    os.makedirs(os.path.join(C.LOGS, "tests"), exist_ok=True)
    start = time.time()
    queue = sorted(todo, key=lambda t: -TEST_SECONDS.get(t["name"], 0.0))  # stable: longest first

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
            cap = min(t["timeout"], C.ARGS.test_timeout, remaining)
            rc, sec = run([L.resolve(a) for a in t["argv"]], cap, os.path.join(C.LOGS, "tests", t["name"] + ".log"),
                          env=env, cwd=cwd)
            st = "TIMEOUT" if rc is None else "PASS" if rc == 0 else "SKIP" if rc == t["skip_return_code"] else "FAIL"
            results.append(dict(name=t["name"], status=st, seconds=round(sec, 1),
                                note="" if rc in (0, None) else "exit %d" % rc))
            say("  test %-40s %-7s %6.1f s" % (t["name"], st, sec))

    threads = [threading.Thread(target=worker) for _ in range(max(1, C.ARGS.jobs))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    results.sort(key=lambda r: r["name"])
    count = {s: sum(r["status"] == s for r in results) for s in ("PASS", "FAIL", "SKIP", "TIMEOUT")}
    with open(os.path.join(C.OUT, "tests.tsv"), "w") as f:
        f.write("".join("%s\t%s\t%.1f\t%s\n" % (r["name"], r["status"], r["seconds"], r["note"]) for r in results))
    note = "%d passed, %d failed, %d skipped, %d timed out" % (count["PASS"], count["FAIL"], count["SKIP"],
                                                               count["TIMEOUT"])
    bad = [r["name"] for r in results if r["status"] in ("FAIL", "TIMEOUT")]
    if bad:
        note += ": " + ", ".join(bad)
    status = "FAIL" if count["FAIL"] or count["TIMEOUT"] else "PASS" if count["PASS"] else "SKIP"
    record("tests", status, time.time() - start, note, tests=results)


def find_sanitizer(L):
    return C.find_cuda_tool("compute-sanitizer", C.ARGS.sanitizer, L.emulated, "check")


def sanitized(L, part, tool, runs, budget):
    """Runs each (label, argv) or (label, argv, extra environment) of `runs` under the
    sanitizer's `tool`, one log each, and records the part."""
    san, why = find_sanitizer(L)
    if not san:
        return record(part, "SKIP", 0, why)
    start, notes, status = time.time(), [], "PASS"
    for label, argv, *env in runs:
        remaining = budget - (time.time() - start)
        if remaining < 5:
            status, notes = "TIMEOUT", notes + ["%s: no time left" % label]
            break
        log = os.path.join(C.LOGS, "%s_%s.log" % (part, label))
        extra = ["--racecheck-report", "all"] if tool == "racecheck" else []
        rc, _ = run([san, "--tool", tool, "--print-limit", "200"] + extra + argv, remaining, log,
                    env=dict(os.environ, **env[0]) if env else None)
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
    # the Hopper attention kernel at the tests' awkward shapes first (issue 22 asks for it clean
    # under memcheck: lengths off the tile, one token, GQA 1/2/8, every gate, documents; both dQ
    # modes), then one training step, which runs every other kernel of the step once
    if C.ARGS.tiny:
        runs = [("attention", [L.attn_bench, "--backend", "cuda", "--dtype", "bf16", "--check"] + S["attn"][:8])]
    else:
        tc = os.path.join(L.build, "tests", "test_attention_tc")
        runs = [("test_attention_sm90", [tc, "deterministic", "sm90"]),
                ("test_attention_sm90_atomic", [tc, "atomic", "sm90"])] if os.path.exists(tc) else []
    runs.append(("step", [L.gtb, S["config"]] + S["sanitize"] + [
        "--steps", "1", "--warmup", "1", "--peak-n", "0", "--init", "fast"]))
    sanitized(L, "memcheck", "memcheck", runs, budget)


def part_racecheck_attention(L, budget, S):
    # the Hopper kernel's opt-in forms (persistent blocks, the dQ pass's GEMMs back to back) at a
    # shape with several query tiles per block (the tests' shapes give each block one on a GPU)
    optins = ("sm90_optins", [L.attn_bench, "--backend", "cuda", "--dtype", "bf16", "--kernel", "sm90"]
              + S["race_optins"], {"SLUICE_ATTN_SM90_PERSISTENT": "1", "SLUICE_ATTN_SM90_DQ_OVERLAP": "1"})
    if C.ARGS.tiny:
        runs = [("attn_bench", [L.attn_bench, "--backend", "cuda", "--dtype", "bf16", "--check"] + S["attn"][:8]),
                optins]
    else:
        # the Hopper kernel first (TMA, mbarriers, wgmma; test_attention_tc skips it, 77, before
        # 9.x), its opt-ins, then the kernels this budget checked before (unchanged since)
        tc = os.path.join(L.build, "tests", "test_attention_tc")
        runs = [("test_attention_sm90", [tc, "deterministic", "sm90"]), optins]
        runs += [(n, [os.path.join(L.build, "tests", n)]) for n in ("test_attention_tc", "test_attention_cuda")]
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
    log, js = os.path.join(C.LOGS, part + ".log"), os.path.join(C.OUT, part + ".out")
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
    with open(os.path.join(C.OUT, part + ".json"), "w") as f:
        json.dump(j, f)
    rows = j["batch"] * j["seq"] * j.get("topk", 0) / max(j.get("experts", 1), 1)
    p = j.get("profile") or {}
    share = 100 * p.get("rows_sum_ms", 0) / max(p.get("step_wall_ms", 1e-9), 1e-9)
    note = "%s: %d layers, %d x %d x %d tokens, %.0f rows per expert, attention %s, expert GEMMs %s " \
           "(weight gradient %s%s); %.1f ms/step, %.0f tokens/s, %.1f%% of peak; profile rows %.1f%% of the step" % (
               what, j["layers"], j["accum"], j["batch"], j["seq"], rows, j.get("attention_kernel", "?"),
               j.get("expert_gemm_path", "?"), j.get("expert_gemm_dw_path", "?"),
               (", over groups of %d micro-batches, parked as %s" % (
                   j.get("expert_wgrad_group", 2), j.get("park_expert_rows", "rows")))
               if j.get("defer_expert_wgrad") and j["accum"] > 1 else "",
               j["ms_per_step"], j["tokens_per_s"], 100 * (j.get("peak_fraction") or 0), share)
    record(part, "PASS", sec, note, result=j)
