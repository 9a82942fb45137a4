"""The test programs of a build as a manifest that runs anywhere (launch/bundle.sh --with-tests,
bench/gpu_check.sh).

ctest cannot run on a GPU node from a copy of the build: CTestTestfile.cmake holds the absolute
paths of this machine (the build tree, the source tree, /usr/bin/mpiexec). This reads those
files and writes each selected test as JSON with the paths replaced by placeholders:
@BUILD@ (the build tree), @SRC@ (the source tree) and @MPIEXEC@ (the MPI launcher), so that a
runner substitutes wherever the files are now.

usage: python3 launch/bundle_tests.py --build DIR --src DIR [--labels REGEX] [--names REGEX]
                                      --out MANIFEST [--files LIST]
  --labels REGEX  tests with a label matching REGEX in full (default gpu|cuda|emu: every test
                  that runs the CUDA backend or the GPU)
  --names REGEX   of those, only the tests whose name REGEX matches (re.search)
  --out FILE      the manifest (JSON): {"labels", "tests": [{"name", "labels", "timeout",
                  "skip_return_code", "environment" {K: V}, "cwd", "argv"}]}
  --files FILE    also write the build-tree files the tests name (one path per line, relative
                  to the build tree), for the bundle's archive
"""
import argparse
import json
import os
import re
import sys


def unescape(s):
    """A quoted CMake argument's text: CTestTestfile.cmake writes $, ", \\ and ; behind a backslash
    (a test's `bash -c "$0 ..."` arrives as \\$0), and newlines, tabs, returns as \\n \\t \\r."""
    return re.sub(r'\\(.)', lambda m: {"n": "\n", "t": "\t", "r": "\r"}.get(m.group(1), m.group(1)), s)


def parse_ctest_file(path):
    """{name: {"argv": [...], "props": {KEY: value}}} of one CTestTestfile.cmake."""
    text = open(path).read()
    tests = {}
    for m in re.finditer(r'^add_test\(\[=\[(.+?)\]=\] (.*)\)$', text, re.M):
        argv = re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(2))
        tests[m.group(1)] = {"argv": [unescape(a) for a in argv], "props": {}}
    for m in re.finditer(r'^set_tests_properties\(\[=\[(.+?)\]=\] PROPERTIES (.*)\)$', text, re.M):
        if m.group(1) not in tests:
            continue
        pairs = re.findall(r'(\w+) "((?:[^"\\]|\\.)*)"', m.group(2))
        tests[m.group(1)]["props"].update({k: unescape(v) for k, v in pairs})
    return tests


def main():
    ap = argparse.ArgumentParser(description="the tests of a build as a relocatable manifest")
    ap.add_argument("--build", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--labels", default="gpu|cuda|emu")
    ap.add_argument("--names", default="")
    ap.add_argument("--out", required=True)
    ap.add_argument("--files", default="")
    a = ap.parse_args()
    build, src = os.path.realpath(a.build), os.path.realpath(a.src)
    cache = os.path.join(build, "CMakeCache.txt")
    mpiexec = None
    if os.path.exists(cache):
        for line in open(cache):
            if line.startswith("MPIEXEC_EXECUTABLE:"):
                mpiexec = line.split("=", 1)[1].strip()
    want = re.compile(a.labels)
    name_re = re.compile(a.names) if a.names else None
    tests, files = [], set()

    def rebase(arg):
        if mpiexec and arg == mpiexec:
            return "@MPIEXEC@"
        for root, tag in ((build, "@BUILD@"), (src, "@SRC@")):
            if arg == root or arg.startswith(root + "/"):
                rel = os.path.relpath(arg, root)
                full = os.path.join(root, rel)
                if tag == "@BUILD@" and os.path.isfile(full) and os.access(full, os.X_OK):
                    files.add(rel)
                return tag if rel == "." else tag + "/" + rel
        return arg

    for d, _, names in sorted(os.walk(build)):
        if "CTestTestfile.cmake" not in names:
            continue
        for name, t in sorted(parse_ctest_file(os.path.join(d, "CTestTestfile.cmake")).items()):
            labels = [l for l in t["props"].get("LABELS", "").split(";") if l]
            if not any(want.fullmatch(l) for l in labels) or (name_re and not name_re.search(name)):
                continue
            env = {}
            for kv in t["props"].get("ENVIRONMENT", "").split(";"):
                if "=" in kv:
                    k, v = kv.split("=", 1)
                    env[k] = rebase(v)
            tests.append({
                "name": name, "labels": labels, "timeout": float(t["props"].get("TIMEOUT", 1500)),
                "skip_return_code": int(t["props"].get("SKIP_RETURN_CODE", -1)),
                "environment": env, "cwd": rebase(t["props"].get("WORKING_DIRECTORY", d)),
                "argv": [rebase(x) for x in t["argv"]]})
    if not tests:
        print("bundle_tests: no test of %s has a label matching %s" % (build, a.labels), file=sys.stderr)
        return 1
    with open(a.out, "w") as f:
        json.dump({"labels": a.labels, "tests": tests}, f, indent=1)
    if a.files:
        with open(a.files, "w") as f:
            f.write("".join(p + "\n" for p in sorted(files)))
    print("bundle_tests: %d tests (labels %s), %d programs of the build tree" % (len(tests), a.labels, len(files)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
