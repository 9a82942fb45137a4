#!/usr/bin/env python3
"""tests/test_doc_links.py SRCDIR: every relative Markdown link of the tracked pages resolves.

For each tracked *.md (bench/results/ left out: raw outputs of past runs, kept as they were), each
link [text](target) whose target is not a URL must name a file or directory of the tree
(relative to the page), and a #anchor must be one that GitHub makes from a heading of the
target page (lower case, punctuation dropped, spaces to hyphens, -1, -2 ... for repeats). A
link left behind by a moved file or a renamed section fails, naming page, line and target.
"""
import os
import re
import subprocess
import sys

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def slugs(path, cache={}):
    if path not in cache:
        out, seen, fenced = set(), {}, False
        for line in open(path, encoding="utf-8"):
            if FENCE.match(line):
                fenced = not fenced
            if fenced or not line.startswith("#"):
                continue
            title = line.lstrip("#").strip()
            s = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else "%s-%d" % (s, n))
        cache[path] = out
    return cache[path]


def main():
    src = os.path.abspath(sys.argv[1])
    # safe.directory: a checkout owned by another user (a CI container as root) is still read
    pages = subprocess.run(["git", "-c", "safe.directory=" + src, "-C", src, "ls-files", "*.md"],
                           capture_output=True, text=True, check=True).stdout.split()
    pages = [p for p in pages if not p.startswith("bench/results/")]
    bad, links = [], 0
    for page in pages:
        full = os.path.join(src, page)
        fenced = False
        for no, line in enumerate(open(full, encoding="utf-8"), 1):
            if FENCE.match(line):
                fenced = not fenced
            if fenced:
                continue
            line = re.sub(r"`[^`]*`", "", line)  # code spans are not links
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
                    continue
                links += 1
                path, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(full), path)) if path else full
                if not os.path.exists(dest):
                    bad.append("%s:%d: %s: no such file" % (page, no, target))
                elif anchor and dest.endswith(".md") and anchor not in slugs(dest):
                    bad.append("%s:%d: %s: %s has no heading with that anchor" %
                               (page, no, target, os.path.relpath(dest, src)))
    for b in bad:
        print("FAIL " + b)
    print("test_doc_links: %d pages, %d relative links, %d broken" % (len(pages), links, len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
