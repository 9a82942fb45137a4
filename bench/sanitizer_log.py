"""compute-sanitizer's log, read for bench/gpu_check.py: which reports are real errors and which are
NCCL's own start-up probes or racecheck hazards inside vendor kernels.

NCCL's communicator init probes kernels it has no image for on the device: on the H200 of
2026-11-26 memcheck saw 24 reports of cudaErrorNoKernelImageForDevice from
ncclInitKernelsForDevice in libnccl (../shared/reference/gpu-facts.md). They are not sluice's,
so they are counted apart; racecheck's warnings (not hazards) are counted apart too.

Vendor kernels: racecheck on one training step on that H200 reported 200 "Potential WAR hazard"
errors, every one inside cuBLAS's own nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT (writes
of the value already there), and ran out of its 60 s instrumenting it. Shared-memory hazards
inside cuBLAS, cuDNN or NCCL kernels are the vendor's synchronization, not sluice's: the
racecheck reports that name only such kernels are counted apart by kernel, named in the note,
not failures. (Leaving them out with --kernel-name-exclude was tried on the same kind of H200
later that day: compute-sanitizer stopped with "Internal Sanitizer Error: The Sanitizer failed
to handle a hardware exception" and the first cuBLAS GEMM failed to launch, so it is not used.)
memcheck keeps checking vendor kernels and counts their reports as errors: an invalid access
there is most likely a bad pointer or size that sluice passed in.
"""
import re

# Substrings of vendor kernels' (mangled) names: cuBLAS/cuBLASLt (nvjet_*, sm80_/sm90_xmma_*,
# cutlass*, gemv*, gemmk1_*, gemmSN_*, splitKreduce_*), cuDNN (cudnn*, xmma, cutlass), NCCL
# (ncclDevKernel_*, ncclKernel_*). No kernel of sluice's has one of them in its name.
VENDOR_KERNEL_RE = "nvjet|cutlass|xmma|cublas|cudnn|nccl|gemv|gemmk1|gemmSN|splitKreduce"
_VENDOR = re.compile(VENDOR_KERNEL_RE, re.IGNORECASE)
# "Read Thread (255,0,0) at nvjet_sm90_...+0x9b0" (racecheck), "at k(float*)+0x70" (memcheck)
_DEVICE_AT = re.compile(r"(?:^|\s)at\s+(?:0x[0-9a-fA-F]+\s+in\s+)?(\S.*?)\+0x[0-9a-fA-F]+")


def report_kernels(block):
    """The device functions a report names (its 'at NAME+0x...' lines; host frames excluded)."""
    names = []
    for line in block:
        if "Host Frame" in line:
            continue
        m = _DEVICE_AT.search(line)
        if m:
            names.append(m.group(1).strip())
    return names


def sanitizer_report(text, tool):
    """(real errors, filtered NCCL start-up probes, warnings, vendor) in a compute-sanitizer log:
    a report is a top-level '========= <message>' line with its indented lines. vendor:
    {kernel name: reports} of racecheck reports whose every device frame is a vendor kernel."""
    blocks, cur = [], None
    for line in text.splitlines():
        if not line.startswith("========= "):
            continue
        body = line[len("========= "):]
        if not body.strip():
            cur = None
            continue
        if body.startswith(" "):
            if cur is not None:
                cur.append(body)
            continue
        if re.match(r"(COMPUTE-SANITIZER|ERROR SUMMARY|LEAK SUMMARY|RACECHECK SUMMARY|Target application)", body):
            cur = None
            continue
        cur = [body]
        blocks.append(cur)
    errors, probes, warnings, vendor = [], 0, 0, {}
    for b in blocks:
        text_b = "\n".join(b)
        kernels = report_kernels(b)
        if "ncclInitKernelsForDevice" in text_b or ("NoKernelImageForDevice" in text_b and "libnccl" in text_b):
            probes += 1
        elif tool == "racecheck" and kernels and all(_VENDOR.search(k) for k in kernels):
            vendor[kernels[0]] = vendor.get(kernels[0], 0) + 1
        elif tool == "racecheck" and b[0].lstrip().startswith("Warning"):
            warnings += 1
        else:
            errors.append(b[0].strip()[:200])
    return errors, probes, warnings, vendor


def vendor_note(vendor):
    """'200 report(s) in vendor kernels, not sluice's (nvjet_...: 200)' or ''."""
    if not vendor:
        return ""
    n = sum(vendor.values())
    names = ", ".join("%s: %d" % (k, c) for k, c in sorted(vendor.items(), key=lambda kv: -kv[1]))
    return "%d report(s) in vendor kernels, not sluice's (%s)" % (n, names)
