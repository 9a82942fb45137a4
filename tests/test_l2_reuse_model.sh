#!/usr/bin/env bash
# bench/l2_reuse_model.py (the dK/dV pass's Q and dO reads under an LRU L2, per step order) at a
# small shape whose counts are known: every order takes the same steps, G x KV x the sum over
# key tiles of the query tiles from the diagonal on (8 x 4 x 272 = 8,704 at S 2048); an L2
# that holds everything misses each distinct tile once (KV x G x S / 64 = 1,024), one that
# holds nothing misses every read; a bad order or size exits 2 naming the flag.
# usage: test_l2_reuse_model.sh SOURCE_DIR WORKDIR
set -uo pipefail
# shellcheck source=tests/cli_lib.sh
. "$(dirname "$0")/cli_lib.sh"
src=$(cd "$1" && pwd)
python_test_start "$2"
model=$src/bench/l2_reuse_model.py
/usr/bin/python3 "$model" --seq 2048 --sms 4 --l2-mb 1000,0.01 --order heads,tiles,tiles_up,heads_down \
    --json >rows.json || fail "l2_reuse_model.py exited $?"
/usr/bin/python3 - rows.json <<'PY' || fail "counts differ"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
bad = []
if sorted({r["order"] for r in rows}) != ["heads", "heads_down", "tiles", "tiles_up"] or len(rows) != 8:
    bad.append("not one row per order and size: %r" % rows)
for r in rows:
    if r["reads"] != 8704 or r["compulsory"] != 1024:
        bad.append("%s: %d reads, %d distinct tiles, want 8704 and 1024" % (r["order"], r["reads"], r["compulsory"]))
    want = 1024 if r["l2_mib"] > 1 else 8704
    if r["misses"] != want:
        bad.append("%s at %g MiB: %d misses, want %d" % (r["order"], r["l2_mib"], r["misses"], want))
print("\n".join("FAIL: " + b for b in bad) if bad else "counts as expected")
sys.exit(1 if bad else 0)
PY
expect_exit 2 "--order: 'diagonal'" /usr/bin/python3 "$model" --order diagonal
expect_exit 2 "--l2-mb" /usr/bin/python3 "$model" --l2-mb 50,x
[ "$failures" = 0 ] && echo "test_l2_reuse_model: all checks passed"
exit $((failures > 0))
