#!/usr/bin/env python3
"""tests/test_doc_figures.py SRCDIR: a measured figure quoted on several pages says the same.

The tiny staged schedule's wall time is measured in docs/results.md ("took M min S s wall") and
quoted as "about N minutes" wherever a page says how long `configs/tiny-schedule.json` takes
(README.md, docs/stages.md): every quote must be there, say the same N, and N must be the
measurement rounded to whole minutes. One page re-measured and another left behind fails,
naming the pages and what each says.
"""
import re
import sys

QUOTE = re.compile(r"tiny[- ]schedule(?:\.json`)?[^.]*?\bin about (\w+) minutes?\b", re.S)
MEASURED = re.compile(r"schedule \(training plus all evaluations\) took (\d+) min (\d+) s wall", re.S)
WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5}
PAGES = ["README.md", "docs/stages.md"]


def main(src):
    failures = []
    results = open(f"{src}/docs/results.md", encoding="utf-8").read()
    m = MEASURED.search(results)
    if not m:
        print("FAIL: docs/results.md: no 'took M min S s wall' measurement of the tiny schedule")
        return 1
    measured = int(m.group(1)) + int(m.group(2)) / 60
    quotes = {}
    for page in PAGES:
        text = open(f"{src}/{page}", encoding="utf-8").read()
        found = [q.group(1) for q in QUOTE.finditer(text)]
        if not found:
            failures.append(f"{page}: no 'tiny schedule ... in about N minutes'")
        for q in found:
            quotes.setdefault(page, []).append(WORDS.get(q, q))
    values = {str(v) for vs in quotes.values() for v in vs}
    if len(values) > 1:
        failures.append(f"the pages disagree: {quotes}")
    for page, vs in quotes.items():
        for v in vs:
            if str(v) != str(round(measured)):
                failures.append(
                    f"{page}: about {v} minutes, but docs/results.md measured "
                    f"{m.group(1)} min {m.group(2)} s")
    for f in failures:
        print("FAIL:", f)
    print(f"test_doc_figures: tiny schedule {quotes}, measured {measured:.2f} min; "
          f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
