"""compute-sanitizer's log, read for bench/gpu_check.py: which reports are real errors and which are
NCCL's own start-up probes.

NCCL's communicator init probes kernels it has no image for on the device: on the H200 of
2026-11-26 memcheck saw 24 reports of cudaErrorNoKernelImageForDevice from
ncclInitKernelsForDevice in libnccl (../shared/reference/gpu-facts.md). They are not sluice's,
so they are counted apart; racecheck's warnings (not hazards) are counted apart too.
"""
import re


def sanitizer_report(text, tool):
    """(real errors, filtered NCCL start-up probes, warnings) in a compute-sanitizer log: a report
    is a top-level '========= <message>' line with its indented lines."""
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
    errors, probes, warnings = [], 0, 0
    for b in blocks:
        text_b = "\n".join(b)
        if "ncclInitKernelsForDevice" in text_b or ("NoKernelImageForDevice" in text_b and "libnccl" in text_b):
            probes += 1
        elif tool == "racecheck" and b[0].lstrip().startswith("Warning"):
            warnings += 1
        else:
            errors.append(b[0].strip()[:200])
    return errors, probes, warnings
