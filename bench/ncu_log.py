"""Each kernel's own GPU time from Nsight Compute's CSV report: what
`ncu --clock-control none --metrics gpu__time_duration.sum --csv PROGRAM ...` prints (the
program's own output first, then a header line starting "ID", then one row per kernel launch
and metric). gpu_check's part attn_kernels reads it this way; by hand:

    /usr/bin/python3 bench/ncu_log.py FILE [--match TEXT]

prints one line per kernel (summed over its launches, largest first): milliseconds, launches
and the kernel's name without its parameter list. --match keeps the kernels whose name holds
TEXT. The values carry thousands separators ("8,160") and a unit (ns, us, ms, s, or the long
forms nsecond, usecond, msecond, second), both handled.
"""
import csv
import sys

UNIT_MS = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0,
           "s": 1e3, "second": 1e3}


def short_name(name):
    """`void <unnamed>::sm90_fwd_kernel<128, 2, false>(CUtensorMap_st, ...)` ->
    `sm90_fwd_kernel<128, 2, false>`: no return type, anonymous namespace or parameters."""
    if name.startswith("void "):
        name = name[5:]
    for prefix in ("<unnamed>::", "(anonymous namespace)::"):
        name = name.replace(prefix, "")
    depth = 0
    for i, ch in enumerate(name):  # the parameter list: the first '(' outside template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            name = name[:i]
            break
    return name.strip()


def kernel_times(text, metric="gpu__time_duration.sum"):
    """[{"name", "ms", "launches"}] summed per kernel from the report in `text`, largest first.
    Raises ValueError when the text holds no report or a row cannot be read."""
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID",')), None)
    if start is None:
        raise ValueError("no Nsight Compute CSV report (no header line starting \"ID\")")
    rows = csv.DictReader(lines[start:])
    total, launches = {}, {}
    for r in rows:
        if not r.get("ID", "").isdigit():
            continue  # a line ncu or the program printed after the report
        if r.get("Metric Name") != metric:
            continue
        unit = r.get("Metric Unit", "")
        if unit not in UNIT_MS:
            raise ValueError("row %s: unknown unit %r" % (r["ID"], unit))
        ms = float(r["Metric Value"].replace(",", "")) * UNIT_MS[unit]
        name = short_name(r["Kernel Name"])
        total[name] = total.get(name, 0.0) + ms
        launches[name] = launches.get(name, 0) + 1
    return sorted(({"name": n, "ms": total[n], "launches": launches[n]} for n in total),
                  key=lambda k: -k["ms"])


def launch_metrics(text):
    """[{"id", "name", "metrics": {"Section/Metric": (value, unit)}}] per kernel launch, in launch
    order, from a `--page details --csv` report (sections and `--metrics`; the command-line
    metrics' section is "Command line profiler metrics"). A value is a float where it reads as
    one (thousands separators dropped), else its text. Raises ValueError where the text holds no
    report."""
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID",')), None)
    if start is None:
        raise ValueError("no Nsight Compute CSV report (no header line starting \"ID\")")
    launches = {}
    for r in csv.DictReader(lines[start:]):
        if not r.get("ID", "").isdigit() or not r.get("Metric Name"):
            continue
        k = launches.setdefault(int(r["ID"]), {"id": int(r["ID"]), "name": short_name(r["Kernel Name"]),
                                               "metrics": {}})
        v = r.get("Metric Value", "")
        try:
            v = float(v.replace(",", ""))
        except ValueError:
            pass
        k["metrics"]["%s/%s" % (r.get("Section Name", ""), r["Metric Name"])] = (v, r.get("Metric Unit", ""))
    return [launches[i] for i in sorted(launches)]


def metric(launch, name):
    """(value, unit) of the launch's metric whose "Section/Metric" key ends with "/name" (the
    first in the report's order), or None."""
    return next((v for k, v in launch["metrics"].items() if k.endswith("/" + name)), None)


def main(argv):
    if len(argv) not in (2, 4) or (len(argv) == 4 and argv[2] != "--match"):
        sys.stderr.write("usage: ncu_log.py FILE [--match TEXT]\n")
        return 2
    try:
        with open(argv[1]) as f:
            kernels = kernel_times(f.read())
    except (OSError, ValueError) as e:
        sys.stderr.write("ncu_log.py: %s: %s\n" % (argv[1], e))
        return 1
    for k in kernels:
        if len(argv) == 2 or argv[3] in k["name"]:
            print("%10.3f ms %6d  %s" % (k["ms"], k["launches"], k["name"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
