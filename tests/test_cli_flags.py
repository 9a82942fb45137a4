#!/usr/bin/env python3
"""tests/test_cli_flags.py SLUICE SRCDIR: every flag a command parses is in its --help.

A command's flags are the "--name" string literals of its source files (launch/cmd_NAME*.c,
comments left out); its help is `sluice NAME --help` plus each subcommand's `--help` (those the
command's own help lists, e.g. `sluice data build --help`). A flag parsed but not listed in any
of them fails, naming the command, the flag and the file. Also: `sluice --help` lists every
command that has a source file, and an unknown flag (last on the line) is refused with exit 2
and one line naming it as unknown, by every command and subcommand. A usage error prints two
lines, the error and a pointer to --help, not the whole help that would scroll the error away:
after an unknown flag, and when the command is given no argument where it needs one (every
command and subcommand but doctor, which runs without any); --help prints the help on stdout,
nothing on stderr.
"""
import glob
import os
import re
import subprocess
import sys


def strip_comments(src):
    """C source without /* */ and // comments (string literals kept; sluice's sources have no
    comment markers inside strings that matter here)."""
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    return re.sub(r"//[^\n]*", " ", src)


def run(sluice, args):
    r = subprocess.run([sluice] + args, capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout + r.stderr


def run_split(sluice, args):
    r = subprocess.run([sluice] + args, capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


def usage_error(sluice, args, failures, why):
    """`sluice ARGS` is a usage error: exit 2, nothing on stdout, and on stderr exactly
    "sluice CMD: error: ..." and "(sluice CMD --help shows the options)", CMD the command and
    subcommand; returns the error line."""
    cmd = " ".join(a for a in args[:2] if not a.startswith("-"))
    rc, out, err = run_split(sluice, args)
    lines = err.splitlines()
    want = ["sluice %s: error: " % cmd, "(sluice %s --help shows the options)" % cmd]
    if (rc != 2 or out or len(lines) != 2 or not lines[0].startswith(want[0])
            or lines[1] != want[1]):
        failures.append("sluice %s (%s): exit %d, stdout %d bytes, stderr (want '%s...' and "
                        "'%s'):\n%s" % (" ".join(args), why, rc, len(out), want[0], want[1],
                                         err[:400]))
    return lines[0] if lines else ""


def main():
    sluice, src = sys.argv[1], sys.argv[2]
    failures, checked = [], 0
    rc, top = run(sluice, ["--help"])
    commands = {}
    for path in sorted(glob.glob(os.path.join(src, "launch", "cmd_*.c"))):
        name = os.path.basename(path)[len("cmd_"):-2].split("_")[0]
        commands.setdefault(name, []).append(path)
    for name, paths in sorted(commands.items()):
        if not re.search(r"^\s+%s\s" % re.escape(name), top, re.M):
            failures.append("sluice --help does not list the command %s" % name)
        rc, text = run(sluice, [name, "--help"])
        if rc != 0:
            failures.append("sluice %s --help exits %d" % (name, rc))
        # subcommands: "usage: sluice NAME <a|b|c> ..."
        m = re.search(r"usage: sluice %s <([a-z|]+)>" % re.escape(name), text)
        for sub in (m.group(1).split("|") if m else []):
            rc, t = run(sluice, [name, sub, "--help"])
            if rc != 0:
                failures.append("sluice %s %s --help exits %d" % (name, sub, rc))
            text += t
        for path in paths:
            code = strip_comments(open(path).read())
            for flag in sorted(set(re.findall(r'"(--[a-z][a-z0-9-]*)[="]', code))):
                checked += 1
                if not re.search(re.escape(flag) + r"(?![a-z0-9-])", text):
                    failures.append("sluice %s: %s is parsed in %s but not in its --help"
                                    % (name, flag, os.path.relpath(path, src)))
        # an unknown flag, last (where it once read as a flag missing its value): refused as a
        # usage error (2), once, naming it as unknown
        for args in [[name]] + [[name, sub] for sub in (m.group(1).split("|") if m else [])]:
            rc, text = run(sluice, args + ["--no-such-flag"])
            lines = [l for l in text.splitlines() if "--no-such-flag" in l]
            if rc != 2 or len(lines) != 1 or "unknown" not in lines[0]:
                failures.append("sluice %s --no-such-flag: exit %d, %d line(s) naming it "
                                "(want exit 2 and one 'unknown ...' line):\n%s"
                                % (" ".join(args), rc, len(lines), text[:400]))
            # ... in two lines, the error and the pointer to --help (once: the whole help)
            usage_error(sluice, args + ["--no-such-flag"], failures, "an unknown flag")
            # no argument at all: what is missing, and the pointer (once: the help alone)
            if name != "doctor":
                line = usage_error(sluice, args, failures, "no arguments")
                if "required" not in line:
                    failures.append("sluice %s without arguments should say what is required: "
                                    "'%s'" % (" ".join(args), line))
            rc, out, err = run_split(sluice, args + ["--help"])
            if rc != 0 or "usage: sluice " + " ".join(args) not in out or err:
                failures.append("sluice %s --help: exit %d, the help on stdout: %s, stderr: %s"
                                % (" ".join(args), rc, "usage: sluice" in out, err[:200]))
    for f in failures:
        print("FAIL " + f)
    print("test_cli_flags: %d commands, %d flags checked, %d failed"
          % (len(commands), checked, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
