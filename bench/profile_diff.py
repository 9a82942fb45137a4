"""Two step profiles side by side: what changed between two runs, row by row.

usage: bench/profile_diff.py BEFORE AFTER [--top N]

BEFORE and AFTER are each one of
  - the JSON that gpu_train_bench --profile and bench_train --profile print as their last line
    (a file holding it, or the benchmark's whole output: the last line that parses is taken),
  - a training run's metrics file (sluice train --profile N): its last "profile" event.
Prints the unprofiled step (when the benchmark measured it), model TFLOP/s and the share of the
measured bf16 peak (gpu_train_bench's JSON), host reads per step, then every region's device ms
per step before and after and the difference, largest change first (a region only one run has
shows "-" on the other side: renamed, merged or new regions). docs/performance.md records each
change's predicted and measured rows; this gives the measured side in one command.
Exit status 0, or 2 with a message naming the file when one holds no profile.
"""
import argparse
import json
import sys


def load(path):
    """(the run's JSON object or None, its profile object) from a file, or exits 2."""
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as e:
        sys.exit("profile_diff: %s: %s" % (path, e.strerror))
    last_event = None
    for line in reversed(lines):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if obj.get("event") == "profile" and isinstance(obj.get("profile"), dict):
            last_event = last_event or obj
            continue
        if isinstance(obj.get("profile"), dict) and last_event is None:
            return obj, obj["profile"]
    if last_event is not None:
        return None, last_event["profile"]
    print("profile_diff: %s: no profile (expected gpu_train_bench/bench_train --profile JSON or a "
          "metrics file with a \"profile\" event)" % path, file=sys.stderr)
    sys.exit(2)


def fmt(v, spec="%.3f"):
    return "-" if v is None else spec % v


def headline(name, run, prof):
    parts = []
    if run:
        if run.get("ms_per_step") is not None:
            parts.append("step %.3f ms" % run["ms_per_step"])
        if run.get("model_tflops") is not None:
            parts.append("%.1f model TFLOP/s" % run["model_tflops"])
        if run.get("peak_fraction") is not None:
            parts.append("%.1f%% of its measured peak" % (100 * run["peak_fraction"]))
        if run.get("host_reads_per_step") is not None:
            parts.append("%s host reads per step" % run["host_reads_per_step"])
    parts.append("profiled step %.3f ms (%d steps, rows add up: %s)" %
                 (prof.get("step_wall_ms", 0.0), prof.get("steps", 0), prof.get("rows_add_up")))
    return "%-6s %s" % (name, "; ".join(parts))


def main():
    ap = argparse.ArgumentParser(prog="profile_diff.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--top", type=int, default=0, help="only the N largest changes")
    a = ap.parse_args()
    run_b, prof_b = load(a.before)
    run_a, prof_a = load(a.after)
    print(headline("before", run_b, prof_b))
    print(headline("after", run_a, prof_a))
    rows_b = {r["region"]: r["ms"] for r in prof_b.get("rows", [])}
    rows_a = {r["region"]: r["ms"] for r in prof_a.get("rows", [])}
    names = list(rows_b) + [n for n in rows_a if n not in rows_b]
    table = []
    for n in names:
        b, af = rows_b.get(n), rows_a.get(n)
        table.append((n, b, af, (af or 0.0) - (b or 0.0)))
    table.sort(key=lambda t: -abs(t[3]))
    if a.top > 0:
        table = table[:a.top]
    print("\n%-62s %10s %10s %10s" % ("region (device ms per step)", "before", "after", "change"))
    for n, b, af, d in table:
        print("%-62.62s %10s %10s %+10.3f" % (n, fmt(b), fmt(af), d))
    sb, sa = prof_b.get("rows_sum_ms", 0.0), prof_a.get("rows_sum_ms", 0.0)
    print("%-62s %10.3f %10.3f %+10.3f" % ("sum of the rows", sb, sa, sa - sb))
    return 0


if __name__ == "__main__":
    sys.exit(main())
