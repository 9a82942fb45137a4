#!/usr/bin/env bash
# The test command: installs missing dependencies, builds everything (including the CUDA
# backend where nvcc exists: that build proves the kernels compile for the GPU), and runs the
# whole suite with ctest. Then the emulated CUDA build (-DSLUICE_CUDA=EMULATED: the same .cu
# sources as C++ on the CPU SIMT test double, emu/README.md) builds only what the tests labelled
# emu (the emulator's own) and cuda (those running the cuda backend) need, and runs them: that
# is where CI executes the kernels.
#
# usage: tests/run.sh [ctest options...]     e.g. tests/run.sh -L moe
#   (the options apply to the first ctest run; the emulated run is always -L 'emu|cuda')
# Environment: BUILD_DIR (default build), EMU_BUILD_DIR (default build-emu), JOBS (default:
# all cores), SLUICE_SKIP_EMU=1 to leave out the emulated build.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
launch/install-deps.sh --tests
build=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$jobs"
status=0
(cd "$build" && ctest --output-on-failure -j "$jobs" "$@") || status=$?

[ "${SLUICE_SKIP_EMU:-0}" = 1 ] && exit $status
emu=${EMU_BUILD_DIR:-build-emu}
cmake -S . -B "$emu" -DCMAKE_BUILD_TYPE=Release -DSLUICE_CUDA=EMULATED
# The targets those tests run: every argument of their commands that names a file in the build
# tree (read from the generated CTestTestfile.cmake files: ctest cannot show the commands of
# tests whose executables are not built yet).
wanted=$(python3 - "$(cd "$emu" && pwd)" <<'PY'
import os, re, sys
build = sys.argv[1]
cmds, labels = {}, {}
for d, _, files in os.walk(build):
    if "CTestTestfile.cmake" not in files:
        continue
    text = open(os.path.join(d, "CTestTestfile.cmake")).read()
    for m in re.finditer(r'^add_test\(\[=\[(.+?)\]=\] (.*)\)$', text, re.M):
        cmds[m.group(1)] = re.findall(r'"([^"]*)"', m.group(2))
    for m in re.finditer(r'^set_tests_properties\(\[=\[(.+?)\]=\] PROPERTIES .*?LABELS "([^"]*)"',
                         text, re.M):
        labels[m.group(1)] = m.group(2).split(";")
for name, cmd in cmds.items():
    if {"emu", "cuda"} & set(labels.get(name, [])):
        for a in cmd:
            if a.startswith(build + "/"):
                print(os.path.basename(a))
PY
)
known=$(cmake --build "$emu" --target help | sed -n -e 's/^\.\.\. \([A-Za-z0-9_]*\).*/\1/p' \
    -e 's/^\([A-Za-z0-9_]*\): .*/\1/p')
targets=()
for t in $(sort -u <<<"$wanted"); do
    grep -qx "$t" <<<"$known" && targets+=(--target "$t")
done
cmake --build "$emu" -j "$jobs" "${targets[@]}"
(cd "$emu" && ctest --output-on-failure -j "$jobs" -L 'emu|cuda') || status=$?
exit $status
