#!/usr/bin/env bash
# `sluice doctor` (launch/cmd_doctor.c, docs/doctor.md) end to end.
#   emulated  the emulated build (label cuda): a full run passes (exit 0) with every section and
#             every documented JSON key, tiny shapes chosen by itself, each attention row naming
#             the kernel that ran (mma at D 64/128, simt at D 96 and in fp32); a wrong op result
#             (SLUICE_DOCTOR_INJECT) makes it fail (exit 1) naming the op in both dtypes' rows;
#             no device (SLUICE_EMU_DEVICES=0) is exit 3 with the environment section saying so;
#             bad flags are exit 2.
#   gpu       a build for a real GPU (label gpu): a full run passes, with the same JSON keys
#             (the attention rows at D 64/128 name sm90 on compute capability 9.x, else mma);
#             skipped (77) without a GPU.
#   nodevice  a build for a real GPU, or without CUDA, on a machine without a GPU (label cli):
#             exit 3, the environment section and "no device" (a CUDA build where libcuda.so.1
#             does not load: "no NVIDIA driver on this machine"); skipped (77) where a GPU exists
#             (the gpu mode's machine).
# usage: test_doctor.sh SLUICE_BINARY WORK_DIR emulated|gpu|nodevice
set -uo pipefail
sluice=$1
work=$2
mode=$3
. "$(dirname "$0")/skip_or_fail.sh"
[ -x /usr/bin/python3 ] || skip_or_fail "/usr/bin/python3 not installed"
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
failures=0
fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

# The JSON's keys (docs/doctor.md, "JSON"), checked by python: $1 the file, $2 the expected
# status, $3 "full" when every section must be there.
check_json() {
    /usr/bin/python3 - "$1" "$2" "$3" <<'PY'
import json, sys
path, want, full = sys.argv[1], sys.argv[2], sys.argv[3] == "full"
d = json.load(open(path))
bad = []
def need(obj, keys, where):
    for k in keys:
        if k not in obj:
            bad.append(f"{where}: no key {k}")
need(d, ["sluice_doctor", "status", "exit_code", "host", "tiny", "emulated", "seconds",
         "environment", "devices", "checks", "summary"], "top level")
need(d.get("environment", {}), ["driver", "cuda_driver", "cuda_runtime", "cublas", "nccl", "cudnn",
                                "targets", "device_count"], "environment")
for i, g in enumerate(d.get("devices", [])):
    need(g, ["index", "name", "compute_capability", "sms", "memory_bytes", "free_bytes",
             "clock_khz", "memory_clock_khz", "bus_bits", "pci_bus", "uuid", "kernel_image",
             "attention_tensor_core_head_dims"], f"devices[{i}]")
for c in d.get("checks", []):
    need(c, ["section", "key", "label", "status", "value", "unit", "threshold", "result"],
         f"check {c.get('key')}")
    if c.get("status") not in ("OK", "FAIL", "SKIP", "INFO"):
        bad.append(f"check {c.get('key')}: status {c.get('status')}")
need(d.get("summary", {}), ["checks", "ok", "fail", "skip", "info"], "summary")
if d.get("status") != want:
    bad.append(f"status {d.get('status')}, expected {want}")
keys = {c["key"]: c for c in d.get("checks", [])}
if full:
    for k in ["driver", "cuda_runtime", "cublas", "nccl", "cudnn", "build", "gpu0",
              "gpu0.kernels", "gpu0.ops_f32", "gpu0.ops_bf16", "gpu0.attention_bf16_d64",
              "gpu0.attention_bf16_d128", "gpu0.attention_bf16_d96", "gpu0.attention_f32_d128",
              "gpu0.gemm_bf16", "gpu0.copy", "gpu0.attention_fwd", "gpu0.attention_bwd",
              "gpu0.train_step"]:
        if k not in keys:
            bad.append(f"no check {k}")
    # each attention row names the kernel that ran (sl_backend_attn_kernel_ran): bf16 at D 64
    # and 128 the Hopper kernel on a compute capability 9.x GPU, mma.sync elsewhere and in the
    # emulated build (whose device reports 9.0); D 96 and fp32 the SIMT kernel
    cc = (d.get("devices") or [{}])[0].get("compute_capability", "")
    tc = "sm90" if cc.startswith("9.") and not d.get("emulated") else "mma"
    for k, kern in (("gpu0.attention_bf16_d64", tc), ("gpu0.attention_bf16_d128", tc),
                    ("gpu0.attention_bf16_d96", "simt"), ("gpu0.attention_f32_d128", "simt")):
        if k in keys and not keys[k]["label"].endswith(f"({kern})"):
            bad.append(f"{k}: label {keys[k]['label']!r}, expected the kernel ({kern})")
    if not any(k.startswith("nccl_") for k in keys):
        bad.append("no NCCL check (nccl_bandwidth, or nccl_allreduce and nccl_alltoall)")
    fails = [k for k, c in keys.items() if c["status"] == "FAIL"]
    if fails:
        bad.append(f"failed checks: {fails}")
print("\n".join(bad) if bad else f"JSON: {len(keys)} checks, every key there, status {want}")
sys.exit(1 if bad else 0)
PY
}

case $mode in
emulated)
    if ! "$sluice" --help 2>&1 | grep -q "emulated on the CPU"; then
        echo "SKIP: not the emulated build"
        exit 77
    fi
    # a full run, JSON
    start=$SECONDS
    "$sluice" doctor --json >full.json 2>full.err
    rc=$?
    echo "full run: exit $rc in $((SECONDS - start)) s"
    [ $rc -eq 0 ] || { cat full.json full.err; fail "a full run must exit 0, not $rc"; }
    check_json full.json ok full || fail "the full run's JSON"
    /usr/bin/python3 -c 'import json,sys; d=json.load(open("full.json")); sys.exit(0 if d["tiny"] and d["emulated"] else 1)' ||
        fail "the emulator must choose tiny shapes by itself"
    # a wrong result in one op: the table names it, exit 1
    SLUICE_DOCTOR_INJECT=rmsnorm_fwd "$sluice" doctor --quick >inject.out 2>&1
    rc=$?
    echo "injected fault: exit $rc"
    [ $rc -eq 1 ] || fail "an op with a wrong result must make the doctor exit 1, not $rc"
    for dt in f32 bf16; do
        # one op wrong: N - 1 of N within tolerance (N: the slots of sl_ops_i, not counted here)
        grep "^correctness  GPU 0 ops $dt vs CPU  *FAIL  [0-9]* of [0-9]* operations within tolerance; first failure rmsnorm_fwd" inject.out |
            awk '{ for (i = 1; i < NF; i++) if ($i == "of") ok = $(i + 1) - $(i - 1) == 1 } END { exit !ok }' ||
            { cat inject.out; fail "the $dt ops row must fail naming rmsnorm_fwd"; }
    done
    grep -q "exit 1 (fail)" inject.out || fail "the summary must say exit 1"
    # no device
    SLUICE_EMU_DEVICES=0 "$sluice" doctor >nodev.out 2>&1
    rc=$?
    [ $rc -eq 3 ] && grep -q "^environment  GPUs .*FAIL  no device" nodev.out &&
        grep -q "^environment  CUDA runtime" nodev.out ||
        { cat nodev.out; fail "no device: exit 3 (got $rc) with the environment section"; }
    SLUICE_EMU_DEVICES=0 "$sluice" doctor --json >nodev.json 2>/dev/null
    check_json nodev.json no_device short || fail "no device: JSON"
    ;;
gpu)
    if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then
        echo "SKIP: no NVIDIA GPU on this machine"
        exit 77
    fi
    start=$SECONDS
    "$sluice" doctor | tee table.out
    rc=${PIPESTATUS[0]}
    echo "table: exit $rc in $((SECONDS - start)) s"
    [ $rc -eq 0 ] || fail "the doctor must pass on this GPU node (exit $rc)"
    "$sluice" doctor --json >full.json 2>full.err
    rc=$?
    [ $rc -eq 0 ] || { cat full.err; fail "--json: exit $rc"; }
    check_json full.json ok full || fail "the JSON"
    ;;
nodevice)
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then
        echo "SKIP: this machine has a GPU (test_doctor_gpu checks it)"
        exit 77
    fi
    if "$sluice" --help 2>&1 | grep -q "emulated on the CPU"; then
        echo "SKIP: the emulated build always has its device (test_doctor covers no device)"
        exit 77
    fi
    "$sluice" doctor >nodev.out 2>&1
    rc=$?
    cat nodev.out
    [ $rc -eq 3 ] || fail "without a GPU the doctor must exit 3, not $rc"
    grep -q "^environment  GPUs .*FAIL  no device" nodev.out || fail "the GPUs row must say no device"
    grep -q "exit 3 (no_device)" nodev.out || fail "the summary must say exit 3 (no_device)"
    # a CUDA build on a machine without the NVIDIA driver's library says so, not "driver version
    # is insufficient" (core/cuda_driver.h)
    if grep -q "CUDA runtime  *INFO" nodev.out && [ -x /usr/bin/python3 ] &&
        ! /usr/bin/python3 -c 'import ctypes; ctypes.CDLL("libcuda.so.1")' 2>/dev/null; then
        grep -q "GPUs .*FAIL  no device: no NVIDIA driver on this machine (libcuda.so.1 not found; the CUDA runtime says: " nodev.out ||
            fail "without libcuda.so.1 the GPUs row must say there is no NVIDIA driver"
    fi
    "$sluice" doctor --json >nodev.json 2>/dev/null
    check_json nodev.json no_device short || fail "no device: JSON"
    ;;
*)
    echo "usage: test_doctor.sh SLUICE_BINARY WORK_DIR emulated|gpu|nodevice" >&2
    exit 2
    ;;
esac

# usage errors: exit 2, and --help
"$sluice" doctor --layers 0 >/dev/null 2>&1
[ $? -eq 2 ] || fail "--layers 0 must exit 2"
"$sluice" doctor --bogus >/dev/null 2>&1
[ $? -eq 2 ] || fail "an unknown flag must exit 2"
"$sluice" doctor --help | grep -q "exit status: 0 every check passed" || fail "--help"
echo "test_doctor ($mode): $failures failure(s)"
[ $failures -eq 0 ]
