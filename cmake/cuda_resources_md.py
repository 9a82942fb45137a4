#!/usr/bin/env python3
"""Turns the build's nvcc --resource-usage report (build/cuda_resource_usage.txt) into the
Markdown table of docs/cuda-resources.md: one row per kernel instance, registers and shared
memory on sm_80 and sm_90a, and spills (which the build already refuses).

usage: cuda_resources_md.py build/cuda_resource_usage.txt > docs/cuda-resources.md
"""
import re
import sys


def short(name):
    """'void (anonymous namespace)::k<float, 128>(args...)' -> 'k<float, 128>'."""
    name = re.sub(r"^void ", "", name)
    name = name.replace("(anonymous namespace)::", "")
    depth, out = 0, ""
    for ch in name:  # drop the parameter list (the first '(' at template depth 0)
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            break
        out += ch
    return out.replace("__nv_bfloat16", "bf16").replace("sl_bf16", "bf16")


def main(path):
    obj, kern, arch = None, None, None
    rows = {}  # (object, kernel) -> {arch: (regs, smem, spill)}
    for line in open(path):
        m = re.match(r"== CMakeFiles/sluice_lib.dir/(\S+)\.o", line)
        if m:
            obj = m.group(1)
            continue
        m = re.search(r"Compiling entry function '(.*)' for '(sm_\w+)'", line)
        if m:
            kern, arch = short(m.group(1)), m.group(2)
            continue
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and kern:
            spill = int(m.group(1)) + int(m.group(2))
            rows.setdefault((obj, kern), {})[arch] = [None, None, spill]
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and kern and (obj, kern) in rows and arch in rows[(obj, kern)]:
            smem = re.search(r"(\d+) bytes smem", line)  # absent: no shared memory
            rows[(obj, kern)][arch][0] = int(m.group(1))
            rows[(obj, kern)][arch][1] = int(smem.group(1)) if smem else 0
    print("# CUDA kernels: registers, shared memory, spills\n")
    print("Generated from the nvcc build's `build/cuda_resource_usage.txt` (`--resource-usage`,")
    print("nvcc 13.0, `-gencode` sm_80 and sm_90a) by `cmake/cuda_resources_md.py`; regenerate")
    print("after changing a kernel. A kernel that spills or uses local memory does not build")
    print("(`-Xptxas -warn-spills,-warn-lmem-usage` with `-Werror all-warnings`), so the spill")
    print("column is 0 by construction. Shared memory is static shared memory per block;")
    print("dynamic shared memory (the tensor-core attention's tiles) is sized at launch and")
    print("listed where the kernel is documented (docs/attention.md, \"Resources\").\n")
    print(f"{len(rows)} kernel instances.\n")
    print("| file | kernel | regs sm_80 | regs sm_90a | smem bytes | spill bytes |")
    print("|---|---|---|---|---|---|")
    for (o, k), a in sorted(rows.items()):
        r80 = a.get("sm_80", [None, None, 0])
        r90 = a.get("sm_90a", [None, None, 0])
        smem = r90[1] if r90[1] is not None else r80[1]
        spill = (r80[2] or 0) + (r90[2] or 0)
        k = k.replace("|", "\\|")
        print(f"| `{o}` | `{k}` | {r80[0]} | {r90[0]} | {smem} | {spill} |")


if __name__ == "__main__":
    main(sys.argv[1])
