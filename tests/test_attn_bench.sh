#!/usr/bin/env bash
# bench/attn_bench --check at small shapes (bench/README.md, "Attention benchmark").
#   cpu:  the CPU backend's kernel against the bench's double-precision loops (f32).
#   cuda: the CUDA backend against the CPU backend, bf16 and f32 (the emulated build in CI, or a
#         GPU); skipped (77) when attn_bench has no CUDA backend or no device.
# Cases: seq 80, heads 4, kv 2, head dims 64 and 128, each gate mode, with and without
# --doc-lengths (documents of 7, 1 and 30 tokens: lengths 1, across 64-row tiles), batch 2, and
# seq 1. Then the check must be able to fail: --corrupt on each output must give exit 1 and a
# FAIL line for that output, and a bad flag exit 2 with a message naming it.
# usage: test_attn_bench.sh ATTN_BENCH cpu|cuda
set -uo pipefail
bench=$1
backend=$2
dtypes=f32
[ "$backend" = cuda ] && dtypes="bf16 f32"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
fail=0

# run EXPECTED_RC ARGS...: runs attn_bench, exits 77 if the backend is not there.
run() {
    local want=$1 rc=0
    shift
    "$bench" --backend "$backend" "$@" >"$log" 2>&1 || rc=$?
    if [ "$rc" = 77 ]; then
        cat "$log"
        exit 77
    fi
    if [ "$rc" != "$want" ]; then
        echo "FAIL: attn_bench --backend $backend $* exited $rc, expected $want:"
        cat "$log"
        fail=1
        return 1
    fi
    return 0
}

small=(--check --seq 80 --heads 4 --kv-heads 2 --batch 2)
for dt in $dtypes; do
    for d in 64 128; do
        for gate in elementwise headwise none; do
            for docs in "" 7,1,30; do
                args=("${small[@]}" --dtype "$dt" --head-dim "$d" --gate "$gate")
                [ -n "$docs" ] && args+=(--doc-lengths "$docs")
                run 0 "${args[@]}" && echo "ok   ${args[*]}: $(grep -c PASS "$log") PASS lines"
            done
        done
    done
    run 0 --check --seq 1 --heads 4 --kv-heads 2 --head-dim 128 --dtype "$dt" &&
        echo "ok   seq 1 $dt"
done

# The check can fail: each corrupted output is reported, and only that one.
for out in y o lse dq dk dv dg; do
    if run 1 "${small[@]}" --head-dim 64 --corrupt "$out"; then
        if grep -q "^$out .*FAIL\$" "$log" && [ "$(grep -c ' FAIL$' "$log")" = 1 ]; then
            echo "ok   --corrupt $out fails the check"
        else
            echo "FAIL: --corrupt $out: expected exactly one FAIL line, for $out:"
            cat "$log"
            fail=1
        fi
    fi
done
# Bad options: exit 2, with the flag named.
for bad in "--seq 0" "--gate sideways" "--doc-lengths 3,,4" "--heads 6 --kv-heads 4" "--frob"; do
    # shellcheck disable=SC2086
    if run 2 $bad; then
        grep -q -- "${bad%% *}" "$log" || { echo "FAIL: '$bad': message does not name the flag"; fail=1; }
    fi
done
[ "$fail" = 0 ] && echo "test_attn_bench $backend: all passed"
exit "$fail"
