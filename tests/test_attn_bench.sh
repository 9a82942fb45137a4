#!/usr/bin/env bash
# bench/attn_bench --check at small shapes (bench/README.md, "Attention benchmark").
#   cpu:  the CPU backend's kernel against the bench's double-precision loops (f32).
#   cuda: the CUDA backend against the CPU backend, bf16 and f32 (the emulated build in CI, or a
#         GPU); skipped (77) when attn_bench has no CUDA backend or no device.
# Cases: seq 80, heads 4, kv 2, head dims 64 and 128, each gate mode, with and without
# --doc-lengths (documents of 7, 1 and 30 tokens: lengths 1, across 64-row tiles), batch 2, and
# seq 1. --check-rows (sampled query and key rows against double-precision sums) at seq 300 with
# documents, batch 2, both gates with a weight, and on cuda through the Hopper kernel at GQA 8 and
# seq 700 (key rows whose queries run past several of its tiles). On cuda, every kernel by name (simt, mma and sm90 in bf16, the list mma,simt; sm90 where
# the device is not compute capability 9.x, and mma in f32, must stop with the reason; cudnn
# passes or is skipped saying why). Then the check must be able to
# fail: --corrupt on each output must give exit 1 and a FAIL line for that output, and a bad flag
# exit 2 with a message naming it. Both timings (interleaved, --separate) run once.
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

# The sampled check: query and key rows against double-precision sums, cost linear in S.
rows=(--check-rows 12 --seq 300 --heads 4 --kv-heads 2 --batch 2 --head-dim 64
    --doc-lengths 70,1,130)
for gate in elementwise headwise; do
    if run 0 "${rows[@]}" --gate "$gate"; then
        if [ "$(grep -c ' PASS$' "$log")" = 7 ] && grep -q '^sampled: 12 query rows' "$log"; then
            echo "ok   ${rows[*]} --gate $gate: 7 PASS lines"
        else
            echo "FAIL: ${rows[*]} --gate $gate: expected 7 PASS lines and the sample line:"
            cat "$log"
            fail=1
        fi
    fi
done

# Every attention kernel of the cuda backend by name (attention/attn_kernels.h): under emulation
# this is how CI checks simt at the head dims auto gives to mma; each run must say which kernel
# ran. cudnn passes where cuDNN loads (a GPU node with libcudnn 9) and is skipped (77), saying
# why, elsewhere.
if [ "$backend" = cuda ]; then
    for d in 64 128; do
        for k in simt mma; do
            args=("${small[@]}" --dtype bf16 --head-dim "$d" --kernel "$k")
            [ $k = simt ] && args+=(--gate elementwise --doc-lengths 7,1,30) || args+=(--gate headwise)
            if run 0 "${args[@]}"; then
                if grep -q "^kernel: $k\$" "$log"; then
                    echo "ok   ${args[*]}: $(grep -c PASS "$log") PASS lines"
                else
                    echo "FAIL: ${args[*]}: the kernel that ran is not $k:"
                    cat "$log"
                    fail=1
                fi
            fi
        done
    done
    if run 0 "${small[@]}" --dtype bf16 --head-dim 64 --kernel mma,simt; then
        if [ "$(grep -c '^kernel: ' "$log")" = 2 ] && grep -q '^kernel: mma$' "$log" &&
            grep -q '^kernel: simt$' "$log"; then
            echo "ok   --kernel mma,simt: both ran"
        else
            echo "FAIL: --kernel mma,simt: expected a check by each kernel:"
            cat "$log"
            fail=1
        fi
    fi
    # the Hopper kernel by name: it runs in the emulated build (its device reports 9.0) and on a
    # Hopper GPU; elsewhere it must stop naming what it needs
    emulated=0
    "$bench" --help 2>&1 | grep -q "^(emulated build" && emulated=1
    # (the third case: the sampled check through it, GQA 8, key rows whose queries run past
    # several of its tiles; every cuda run prints the memory its passes took)
    for case in 64 128 rows; do
        args=("${small[@]}" --dtype bf16 --head-dim "$case" --kernel sm90)
        [ $case = 64 ] && args+=(--gate elementwise --doc-lengths 7,1,30)
        [ $case = 128 ] && args+=(--gate headwise)
        [ $case = rows ] && args=(--check-rows 16 --seq 700 --heads 8 --kv-heads 1 --head-dim 64
            --dtype bf16 --doc-lengths 300,1,250 --kernel sm90)
        rc=0
        "$bench" --backend cuda "${args[@]}" >"$log" 2>&1 || rc=$?
        if [ "$rc" = 0 ] && grep -q '^kernel: sm90$' "$log" && ! grep -q ' FAIL$' "$log" &&
            grep -q '^memory: tensors ' "$log"; then
            echo "ok   ${args[*]}: $(grep -c PASS "$log") PASS lines, $(grep '^memory:' "$log")"
        elif [ "$rc" != 0 ] && [ $emulated = 0 ] &&
            grep -q 'attention kernel "sm90" cannot run this problem.*compute capability 9.x' "$log"; then
            echo "ok   --kernel sm90: not on this GPU: $(grep -m1 'cannot run' "$log")"
        else
            echo "FAIL: ${args[*]} exited $rc (must pass where the device reports 9.x):"
            cat "$log"
            fail=1
        fi
    done
    # a kernel chosen by name that cannot take the problem stops, saying why
    rc=0
    "$bench" --backend cuda "${small[@]}" --dtype f32 --head-dim 64 --kernel mma >"$log" 2>&1 || rc=$?
    if [ "$rc" != 0 ] && grep -q 'attention kernel "mma" cannot run this problem.*it takes bf16' "$log"; then
        echo "ok   --kernel mma --dtype f32 stops (exit $rc): the kernel takes bf16 only"
    else
        echo "FAIL: --kernel mma --dtype f32 exited $rc without naming the reason:"
        cat "$log"
        fail=1
    fi
    rc=0
    "$bench" --backend cuda "${small[@]}" --dtype bf16 --head-dim 64 --kernel cudnn >"$log" 2>&1 || rc=$?
    if [ "$rc" = 77 ] && grep -q "skipped: kernel cudnn: .*cuDNN" "$log"; then
        echo "ok   --kernel cudnn: not here: $(grep -m1 skipped "$log")"
    elif [ "$rc" = 0 ] && grep -q '^kernel: cudnn$' "$log" && grep -q "check: PASS" "$log"; then
        echo "ok   --kernel cudnn: $(grep -c PASS "$log") PASS lines"
    else
        echo "FAIL: --kernel cudnn exited $rc:"
        cat "$log"
        fail=1
    fi
fi

# The check can fail: each corrupted output is reported, and only that one, by the whole check
# and by the sampled one.
for check in whole sampled; do
    args=("${small[@]}" --head-dim 64)
    [ $check = sampled ] && args=("${rows[@]}")
    for out in y o lse dq dk dv dg; do
        if run 1 "${args[@]}" --corrupt "$out"; then
            if grep -q "^$out .*FAIL\$" "$log" && [ "$(grep -c ' FAIL$' "$log")" = 1 ]; then
                echo "ok   --corrupt $out fails the $check check"
            else
                echo "FAIL: --corrupt $out ($check): expected exactly one FAIL line, for $out:"
                cat "$log"
                fail=1
            fi
        fi
    done
done
# Timing: interleaved by default, --separate times the forwards and then the backwards (the JSON
# says which; each pass's median is a positive time either way).
for timing in interleaved separate; do
    args=(--seq 64 --heads 2 --kv-heads 1 --head-dim 64 --iters 2 --warmup 0)
    [ $timing = separate ] && args+=(--separate)
    if run 0 "${args[@]}"; then
        # the SM clock after each pass (NVML): numbers and the reasons on a GPU, which the
        # "clocks: SM" line then gives too; null where it cannot be read (cpu, the emulator)
        if ! grep -Eq '"fwd_sm_mhz": (null|[1-9][0-9]*), "bwd_sm_mhz": (null|[1-9][0-9]*), "clock_reasons": (null|"[^"]+")\}' "$log" ||
            { grep -q '^clocks: SM' "$log" && grep -q '"fwd_sm_mhz": null' "$log"; }; then
            echo "FAIL: ${args[*]}: no SM clocks in the JSON, or the JSON and the clocks line disagree:"
            cat "$log"
            fail=1
        elif grep -q "\"timing\": \"$timing\"" "$log" && ! grep -q '"fwd_ms": 0,\|"bwd_ms": 0,' "$log"; then
            echo "ok   timing $timing"
        else
            echo "FAIL: ${args[*]}: the JSON does not say timing $timing with both passes timed:"
            cat "$log"
            fail=1
        fi
    fi
done
# --nondeterministic is a flag without a value, wherever it stands (it once took the next
# argument as its value: "needs a value" at the end, the next flag swallowed before another).
for place in first last; do
    args=(--seq 64 --heads 2 --kv-heads 1 --head-dim 64 --iters 1 --warmup 0)
    [ $place = first ] && args=(--nondeterministic "${args[@]}") || args+=(--nondeterministic)
    if run 0 "${args[@]}"; then
        if grep -q '"nondeterministic": true' "$log" && grep -q '"seq": 64,' "$log"; then
            echo "ok   --nondeterministic ($place)"
        else
            echo "FAIL: ${args[*]}: the JSON does not say nondeterministic at seq 64:"
            cat "$log"
            fail=1
        fi
    fi
done
# Bad options: exit 2, with the flag named.
for bad in "--seq 0" "--check-rows 0" "--gate sideways" "--doc-lengths 3,,4" "--heads 6 --kv-heads 4" "--frob" \
    "--kernel frob" "--kernel mma,,simt"; do
    # shellcheck disable=SC2086
    if run 2 $bad; then
        grep -q -- "${bad%% *}" "$log" || { echo "FAIL: '$bad': message does not name the flag"; fail=1; }
    fi
done
[ "$fail" = 0 ] && echo "test_attn_bench $backend: all passed"
exit "$fail"
