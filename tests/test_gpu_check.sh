#!/usr/bin/env bash
# The one-call GPU check (bench/gpu_check.sh, bench/gpu_check.py) on the emulated build (label
# cuda): its plumbing, at tiny shapes, where no part can measure anything.
#   A. launch/bundle.sh --with-tests (only test_profile_cuda, to stay small) from this build, then
#      the bundle's bench/gpu_check.sh --tiny: it unpacks the test programs, runs the manifest's
#      test, the doctor, the three sanitizer parts through a stand-in compute-sanitizer (it prints
#      the 24-odd reports NCCL's start-up probes make, as on the H200, and runs the program), the
#      two profiles and attn_bench; the PyTorch parts skip (no CUDA for PyTorch here). Exit 0, and
#      summary.txt / summary.json list every part with a status and a duration, the NCCL probe
#      reports filtered out.
#   B. From the build tree, parts that must fail: a test killed by its time limit (--test-timeout
#      1) and a memcheck that reports a real error (the stand-in adds an invalid write): both FAIL,
#      exit status 1.
# usage: test_gpu_check.sh SOURCE_DIR BUILD_DIR WORK_DIR [PROGRAM...]
# (the programs after WORK_DIR are only named so that tests/run.sh builds them: sluice,
# gpu_train_bench, attn_bench)
set -euo pipefail
src=$1
build=$2
work=$3
. "$src/tests/skip_or_fail.sh"
py=/usr/bin/python3
[ -x "$py" ] || skip_or_fail "/usr/bin/python3 not installed"
for tool in xz ldd strip ompi_info; do
    command -v "$tool" >/dev/null || skip_or_fail "$tool not installed (launch/bundle.sh needs it)"
done
if ! "$build/launch/sluice" --help 2>&1 | grep -q "emulated on the CPU"; then
    echo "SKIP: not the emulated build"
    exit 77
fi
rm -rf "$work" && mkdir -p "$work"
export SLUICE_PYTHON=$py SLUICE_EMU_RACECHECK=0 OMP_NUM_THREADS=2

# A stand-in for compute-sanitizer: the reports NCCL's probes make (as in gpu-facts.md), one
# real error when FAKE_SANITIZER_ERROR is set, then the program under test.
fake=$work/compute-sanitizer
cat >"$fake" <<'SH'
#!/usr/bin/env bash
tool=
while [ $# -gt 0 ]; do
    case $1 in
    --tool) tool=$2; shift 2 ;;
    --print-limit | --racecheck-report) shift 2 ;;
    *) break ;;
    esac
done
echo "========= COMPUTE-SANITIZER"
if [ "$tool" = memcheck ]; then
    for i in $(seq 24); do
        echo "========= Program hit cudaErrorNoKernelImageForDevice (error 209) due to \"no kernel image is available for execution on the device\" on CUDA API call to cudaFuncGetAttributes."
        echo "=========     Saved host backtrace up to driver entry point at error"
        echo "=========         Host Frame: ncclInitKernelsForDevice(int, unsigned long*) [0x7e5a1] in libnccl.so.2"
        echo "========="
    done
    if [ -n "${FAKE_SANITIZER_ERROR:-}" ]; then
        echo "========= Invalid __global__ write of size 4 bytes"
        echo "=========     at k_fake(float*)+0x70"
        echo "=========     by thread (0,0,0) in block (0,0,0)"
        echo "========="
    fi
fi
"$@"
rc=$?
[ "$tool" = racecheck ] && echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
echo "========= ERROR SUMMARY: 24 errors"
exit $rc
SH
chmod +x "$fake"

echo "== A. the whole check from a bundle of this build"
bash "$src/launch/bundle.sh" --no-build --build "$build" --with-tests --tests '^test_profile_cuda$' \
    --out "$work/bundle" >"$work/bundle.log" 2>&1 || { cat "$work/bundle.log"; echo "FAIL: bundle.sh"; exit 1; }
if [ ! -f "$work/bundle/tests/programs.tar.xz" ] || [ ! -f "$work/bundle/tests/manifest.json" ]; then
    echo "FAIL: the bundle has no test programs"
    exit 1
fi
set +e
"$work/bundle/bench/gpu_check.sh" "$work/a" --tiny --sanitizer "$fake" --python "$py" >"$work/a.log" 2>&1
rc=$?
set -e
cat "$work/a.log"
[ "$rc" = 0 ] || { echo "FAIL: gpu_check exited $rc, expected 0"; exit 1; }
"$py" - "$work/a" <<'PY'
import json, os, sys
out = sys.argv[1]
s = json.load(open(os.path.join(out, "summary.json")))
text = open(os.path.join(out, "summary.txt")).read()
parts = {p["part"]: p for p in s["parts"]}
want = {"doctor": "PASS", "tests": "PASS", "memcheck": "PASS", "racecheck_attention": "PASS",
        "racecheck_step": "PASS", "profile": "PASS", "profile_ep8": "PASS", "attn_bench": "PASS",
        "expert_gemm": "PASS",
        "torch_hf": "SKIP", "torch_titan": "SKIP"}
bad = []
for name, st in want.items():
    p = parts.get(name)
    if not p:
        bad.append(f"part {name} missing from summary.json")
        continue
    if p["status"] != st:
        bad.append(f"part {name}: {p['status']} ({p['note']}), expected {st}")
    if not isinstance(p["seconds"], (int, float)):
        bad.append(f"part {name}: no duration")
    if not any(l.split()[:2] == [name, p["status"]] for l in text.splitlines()):
        bad.append(f"part {name} not listed in summary.txt")
if "24 NCCL start-up probe report(s) filtered" not in parts.get("memcheck", {}).get("note", ""):
    bad.append("memcheck did not filter the 24 NCCL probe reports: " + parts.get("memcheck", {}).get("note", ""))
if [t["name"] for t in parts.get("tests", {}).get("tests", [])] != ["test_profile_cuda"]:
    bad.append("tests: not exactly the bundled test_profile_cuda")
for f in ("doctor.json", "profile.json", "profile_ep8.json", "tests.tsv", "logs/tests/test_profile_cuda.log"):
    if not os.path.exists(os.path.join(out, f)):
        bad.append(f"{f} not written")
ep8 = parts.get("profile_ep8", {}).get("result", {})
if ep8 and ep8["batch"] * ep8["seq"] * ep8["topk"] // ep8["experts"] != 16:
    bad.append("profile_ep8: not 4 x 64 tokens x 8 of 128 experts = 16 rows per expert")
if ep8 and ep8.get("attention_kernel") not in ("sm90", "mma", "simt", "cudnn", "cpu"):
    bad.append(f"profile_ep8: attention kernel {ep8.get('attention_kernel')!r} not named")
if "attention kernel " + str(ep8.get("attention_kernel")) not in text:
    bad.append("summary.txt does not name the profiled step's attention kernel")
if s.get("status") != "ok":
    bad.append(f"summary status {s.get('status')}")
print("\n".join("FAIL: " + b for b in bad) if bad else "A: every part listed, statuses as expected")
sys.exit(1 if bad else 0)
PY

echo "== B. parts that fail"
set +e
FAKE_SANITIZER_ERROR=1 bash "$src/bench/gpu_check.sh" "$work/b" --build "$build" --src "$src" --tiny \
    --only tests,memcheck --tests '^test_profile_cuda$' --test-timeout 1 --sanitizer "$fake" \
    --python "$py" >"$work/b.log" 2>&1
rc=$?
set -e
cat "$work/b.log"
[ "$rc" = 1 ] || { echo "FAIL: gpu_check exited $rc, expected 1"; exit 1; }
"$py" - "$work/b" <<'PY'
import json, os, sys
s = json.load(open(os.path.join(sys.argv[1], "summary.json")))
parts = {p["part"]: p for p in s["parts"]}
bad = []
if sorted(parts) != ["memcheck", "tests"]:
    bad.append(f"parts run: {sorted(parts)}, expected memcheck and tests")
t, m = parts.get("tests", {}), parts.get("memcheck", {})
if t.get("status") != "FAIL" or "1 timed out" not in t.get("note", ""):
    bad.append(f"tests: {t.get('status')} ({t.get('note')}), expected FAIL with 1 timed out")
if m.get("status") != "FAIL" or "step: 1 error(s)" not in m.get("note", ""):
    bad.append(f"memcheck: {m.get('status')} ({m.get('note')}), expected FAIL with 1 error")
if s.get("status") != "fail":
    bad.append(f"summary status {s.get('status')}")
print("\n".join("FAIL: " + b for b in bad) if bad else "B: the failing parts are FAIL, exit 1")
sys.exit(1 if bad else 0)
PY
echo "test_gpu_check: all checks passed"
