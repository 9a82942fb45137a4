#!/usr/bin/env python3
"""tests/update_costs.py BUILD LOG [BUILD LOG ...]: rewrites tests/test_costs.txt's lines for
each BUILD (main, emulated, asan) from a ctest log of that build (ctest's "Test #N: name ...
Passed 12.34 sec" lines): every test that took at least MIN_SECONDS, with its seconds.

ctest -j runs tests in descending COST (tests/CMakeLists.txt sets it from the file) where it
has no measured costs of its own (Testing/Temporary/CTestCostData.txt), as in CI's fresh
clone: the long tests start first instead of last, and the run does not end on one of them
with the other lanes idle (the sanitizer run ended on test_cuda_moe's 103 s, 2026-11-29)."""
import os
import re
import sys

MIN_SECONDS = 5.0
HERE = os.path.dirname(os.path.abspath(__file__))
PATH = os.path.join(HERE, "test_costs.txt")
BUILDS = ("main", "emulated", "asan")
LINE = re.compile(r"Test +#\d+: (\S+) \.*\s*(?:\*+)?(Passed|Failed|Skipped)\s+([0-9.]+) sec")


def measured(log):
    out = {}
    for m in LINE.finditer(open(log).read()):
        if m.group(2) == "Passed" and float(m.group(3)) >= MIN_SECONDS:
            out[m.group(1)] = float(m.group(3))
    return out


def main(argv):
    if len(argv) < 2 or len(argv) % 2 or any(b not in BUILDS for b in argv[0::2]):
        sys.exit("usage: update_costs.py BUILD LOG [BUILD LOG ...]  (BUILD: %s)" % ", ".join(BUILDS))
    rows = {}
    if os.path.exists(PATH):
        for line in open(PATH):
            if line.strip() and not line.startswith("#"):
                build, name, sec = line.split()
                rows[(build, name)] = float(sec)
    for build, log in zip(argv[0::2], argv[1::2]):
        rows = {k: v for k, v in rows.items() if k[0] != build}
        got = measured(log)
        if not got:
            sys.exit("%s: no passed test of %g s or more" % (log, MIN_SECONDS))
        rows.update({(build, n): s for n, s in got.items()})
    with open(PATH, "w") as f:
        f.write("# ctest COST per build: the seconds a test took (tests/update_costs.py; only those\n"
                "# of %g s or more). BUILD NAME SECONDS\n" % MIN_SECONDS)
        for (build, name), sec in sorted(rows.items(), key=lambda kv: (BUILDS.index(kv[0][0]), -kv[1])):
            f.write("%s %s %.1f\n" % (build, name, sec))


if __name__ == "__main__":
    main(sys.argv[1:])
