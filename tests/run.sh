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
# Then the emulated build again under ASan + UBSan runs the tests labelled emu.
# Environment: BUILD_DIR (default build), EMU_BUILD_DIR (default build-emu),
# EMU_ASAN_BUILD_DIR (default build-emu-asan), JOBS (default: all cores), SLUICE_SKIP_EMU=1
# to leave out both emulated builds, SLUICE_SKIP_ASAN=1 the sanitizer one.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# shellcheck source=tests/skip_or_fail.sh
. tests/skip_or_fail.sh
launch/install-deps.sh --tests
build=${BUILD_DIR:-build}
# ctest's colours (CLICOLOR_FORCE) would hide the "(Skipped)" lines no_unexpected_skips reads
unset CLICOLOR_FORCE
# sluice's run-time variables (a kernel choice, SLUICE_HOST_MEMORY, a fault to inject) reach
# every test: kept, as a run of the suite with a variant may be the point, but named, so that
# one left set in a shell does not go unseen
while IFS= read -r v; do
    case "$v" in
    SLUICE_SKIP_EMU | SLUICE_SKIP_ASAN | SLUICE_TEST_* | SLUICE_FUZZ_SECONDS | SLUICE_HF_PYTHON | \
        SLUICE_NPM_CACHE | SLUICE_PYTHON) ;;
    *) echo "tests/run.sh: note: $v=${!v} is set and applies to every test" ;;
    esac
done < <(compgen -e | grep '^SLUICE_' || true)
jobs=${JOBS:-$(nproc)}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$jobs"
status=0
# (its output kept in ctest-run.log, as the emulated runs' are: tests/update_costs.py reads them)
(cd "$build" && ctest --output-on-failure -j "$jobs" "$@" 2>&1 | tee ctest-run.log) || status=$?

[ "${SLUICE_SKIP_EMU:-0}" = 1 ] && exit $status

# no_unexpected_skips LOG ALLOWED_REGEX: under CI, a failure (status 1, each test named) when
# the ctest output in LOG lists a skipped test whose name ALLOWED_REGEX does not match. In an
# emulated build the CUDA device is the emulator, which always exists: a test there that skips
# (a backend that cannot be created, a probe that finds no device) ran no kernel, and a green
# CI run must mean that every kernel test ran. Outside CI, a missing tool may still skip a test.
no_unexpected_skips() {
    local log=$1 allowed=$2 name bad=0
    sl_under_ci || return 0
    while read -r name; do
        if [ -z "$allowed" ] || ! grep -Eqx "$allowed" <<<"$name"; then
            echo "FAIL: $name was skipped in the emulated build (it must run there under CI)"
            bad=1
        fi
    done < <(sed -n 's/^[[:space:]]*[0-9]* - \([^ ]*\) (Skipped)$/\1/p' "$log")
    [ "$bad" = 0 ] || status=1
}

# emulated_run DIR LABEL_REGEX ALLOWED_SKIPS [cmake args...]: configures DIR as an emulated
# build, builds the targets of the tests whose labels match, runs them; a skipped test whose name
# the regex ALLOWED_SKIPS does not match fails the run under CI (no_unexpected_skips).
emulated_run() {
    local emu=$1 labels=$2 allowed=$3
    shift 3
    cmake -S . -B "$emu" -DCMAKE_BUILD_TYPE=Release -DSLUICE_CUDA=EMULATED "$@"
    # The targets those tests run: every argument of their commands that names a file in the
    # build tree (read from the generated CTestTestfile.cmake files: ctest cannot show the
    # commands of tests whose executables are not built yet).
    local wanted known t
    wanted=$(python3 - "$(cd "$emu" && pwd)" "$labels" <<'PY'
import os, re, sys
build, want = sys.argv[1], re.compile(sys.argv[2])
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
    if any(want.fullmatch(l) for l in labels.get(name, [])):
        for a in cmd:
            if a.startswith(build + "/"):
                print(os.path.basename(a))
PY
)
    known=$(cmake --build "$emu" --target help | sed -n -e 's/^\.\.\. \([A-Za-z0-9_]*\).*/\1/p' \
        -e 's/^\([A-Za-z0-9_]*\): .*/\1/p')
    local targets=()
    while read -r t; do
        if [ -n "$t" ] && grep -qx "$t" <<<"$known"; then targets+=(--target "$t"); fi
    done < <(sort -u <<<"$wanted")
    cmake --build "$emu" -j "$jobs" "${targets[@]}"
    if ! (cd "$emu" && ctest --output-on-failure -j "$jobs" -L "$labels") 2>&1 | tee "$emu/ctest-run.log"; then
        status=1
    fi
    no_unexpected_skips "$emu/ctest-run.log" "$allowed"
}

# The kernels, executed: every test of the emulator and of the cuda backend.
# test_emu_asan runs in the sanitizer build only (it skips elsewhere).
emulated_run "${EMU_BUILD_DIR:-build-emu}" 'emu|cuda' 'test_emu_asan'
# The same sources under AddressSanitizer and UBSan: the emulator's own tests (an out-of-bounds
# write to shared or device memory must be reported) and the conformance test of every kernel
# (label asan; none may report).
# Leak checking is off: Open MPI's initialization leaks by design.
if [ "${SLUICE_SKIP_ASAN:-0}" != 1 ]; then
    ASAN_OPTIONS=detect_leaks=0 emulated_run "${EMU_ASAN_BUILD_DIR:-build-emu-asan}" 'emu|asan' '' \
        -DSLUICE_SANITIZE=ON
fi
exit $status
