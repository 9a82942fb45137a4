#!/usr/bin/env bash
# tests/test_nccl_fault.sh - a failing rank under the nccl transport (core/comm_nccl.c) ends the
# whole job within 30 s, never a hang, and the output names the rank.
#
# usage: test_nccl_fault.sh SLUICE WORKDIR [MPIEXEC]
#
# `sluice train` on backend cuda with parallel.transport nccl under mpirun (in CI the emulated
# build: the CUDA test double and the fake NCCL over MPI of emu/). Cases, each on 2 and 4 ranks
# with expert parallelism 2:
#   crash: SLUICE_FAULT=1:2:crash kills rank 1 with SIGKILL at the start of step 2 while the
#          other ranks go on into step 2's expert exchange and wait there for rank 1 (inside
#          the fake NCCL's MPI_Waitall, or MPI for the counts). mpirun notices the death and
#          ends them (the fake cannot report a dead peer as NCCL's asynchronous ncclRemoteError
#          does: emu/README.md, "NCCL").
#   error: SLUICE_FAULT=1:2:error: rank 1 reports an error and calls MPI_Abort.
#   nccl error (emulated build only): the fake NCCL fails one call on rank 1
#          (SLUICE_EMU_NCCL_FAIL); the message must name the operation, the group (ep, world)
#          and the rank.
# Each case checks: the job exits non-zero; from the moment rank 1 announces its fault to the
# end of mpirun at most 30 s pass (the start-up of the emulated backend is not counted); the
# output names rank 1; rank 1 really reported the injected fault; no rank of the job is left.
# Without a CUDA backend (a CPU-only build, or an nvcc build without a GPU) it skips (77).
set -uo pipefail
# shellcheck source=tests/cli_lib.sh
. "$(dirname "$0")/cli_lib.sh"

mpi_script_start test_nccl_fault.sh "$@"

word_corpus 7 400 12 "the quick brown fox jumps over a lazy dog and then sleeps under the old tree" \
    >corpus.txt
line_data "$sluice" data/train 1024 corpus.txt

# 8 experts top-2, 2 layers, 4 steps of 256 tokens; backend cuda, transport nccl.
cat >fault.json <<EOF
{
$(moe_model_json 8)
  "training": {
    "seq_len": 32, "micro_batch_size": 2, "global_batch_tokens": 256, "max_steps": 4,
    "lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 1, "schedule": "cosine", "seed": 1234,
    "eval_every": 0, "log_every": 1, "save_every": 0, "out_dir": "runs/x"
  },
  "data": {"train": "data/train", "seed": 1234, "prefetch": 2},
  "parallel": {"expert_parallel": 2, "zero1": false, "capacity_factor": 0, "transport": "nccl"},
  "backend": {"name": "cuda", "threads": 1}
}
EOF

# Is there a CUDA backend here (emulated, or a GPU)? One rank, one step.
if ! out=$(timeout -k 5 300 "$sluice" train fault.json --set training.max_steps=1 \
    --set parallel.expert_parallel=1 --set training.out_dir=runs/probe 2>&1); then
    if grep -q "no CUDA device\|unknown backend\|needs the cuda backend" <<<"$out"; then
        echo "SKIP: no CUDA backend here: $(tail -1 <<<"$out")"
        exit 77
    fi
    echo "$out"
    echo "FAIL: the one-rank probe run failed"
    exit 1
fi
grep -q 'transport nccl' <<<"$out" || {
    echo "$out"
    echo "FAIL: the banner does not name the nccl transport"
    exit 1
}

# run NAME NP MARKER ENV ARGS...: sluice train under mpirun with the variable assignment ENV (output NAME.out, exit status $rc);
# $fault_ms: milliseconds from the first output line matching the extended regex MARKER (the
# failing rank's announcement) to the end of mpirun, -1 when no line matched. A hang is cut
# at 240 s (the emulated backend starts slowly; the 30 s bound is checked from the fault on);
# $job_ms: the job's wall time (a job the timeout ended ran 240 s or more).
run() {
    local name=$1 np=$2 marker=$3 envset=$4
    shift 4
    local t_fault=-1 pid t_start
    t_start=$(date +%s%N)
    env "$envset" timeout -k 5 240 "$mpiexec" -np "$np" --oversubscribe "$sluice" train "$@" >"$name.out" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        if [ "$t_fault" = -1 ] && grep -qsE "$marker" "$name.out"; then
            t_fault=$(date +%s%N)
        fi
        sleep 0.1
    done
    wait "$pid"
    rc=$?
    local t_end
    t_end=$(date +%s%N)
    # the marker may have been written in the last poll interval
    if [ "$t_fault" = -1 ] && grep -qsE "$marker" "$name.out"; then t_fault=$t_end; fi
    if [ "$t_fault" = -1 ]; then fault_ms=-1; else fault_ms=$(((t_end - t_fault) / 1000000)); fi
    job_ms=$(((t_end - t_start) / 1000000))
    echo "$name: exit $rc, ${fault_ms} ms after the fault" >&2
}

# fault_case NAME NP MARKER FAULT_ENV ARGS...: runs the case and checks it ended cleanly.
fault_case() {
    local name=$1 np=$2 marker=$3 envset=$4
    shift 4
    local f0=$failures
    run "$name" "$np" "$marker" "$envset" fault.json --set "training.out_dir=runs/$name" "$@"
    check "$name: the job must exit non-zero" [ "$rc" -ne 0 ]
    # A hang: timeout's TERM gives 124; a job that ignores it gets KILL 5 s later, exit 137,
    # which mpirun also returns for a rank killed by SIGKILL (the crash case), so that one is
    # told by the wall time. One check each (`check A [ x ] && [ y ]` ran [ y ] uncounted).
    check "$name: the job hung (cut by timeout: exit 124)" [ "$rc" -ne 124 ]
    check "$name: the job hung (ran into the 240 s timeout: ${job_ms} ms, exit $rc)" \
        [ "$job_ms" -lt 240000 ]
    check "$name: the failing rank never announced its fault" [ "$fault_ms" -ge 0 ]
    check "$name: every rank must be gone within 30 s of the fault (took ${fault_ms} ms)" \
        [ "$fault_ms" -le 30000 ]
    # the failed rank is named: by itself before it goes, or by Open MPI
    check "$name: the output must name rank 1" \
        grep -qE 'sluice\[rank 1\]|MPI_ABORT was invoked on rank 1 |process rank 1 with PID' \
        "$name.out"
    check "$name: the run must have started training on the nccl transport" \
        grep -q 'transport nccl' "$name.out"
    sleep 1
    check "$name: ranks left running: $(pgrep -f "out_dir=runs/$name" | tr '\n' ' ')" \
        none_running "out_dir=runs/$name"
    [ "$failures" -eq "$f0" ] || show "$name.out"
}

# A real machine needs a GPU per rank for the nccl transport (it refuses ranks that share one,
# docs/parallelism.md); the emulated build gives each rank its own (tests/parallel_nccl.cmake
# sets SLUICE_EMU_DEVICES). Rank counts beyond the machine's GPUs are skipped.
gpus=
if command -v nvidia-smi >/dev/null 2>&1 && ! "$sluice" --help 2>&1 | grep -q "emulated on the CPU"; then
    gpus=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU" || true)
fi
ran=0
for np in 2 4; do
    if [ -n "$gpus" ] && [ "$gpus" -lt "$np" ]; then
        echo "SKIP: $np ranks: the nccl transport needs a GPU per rank, this machine has $gpus"
        continue
    fi
    ran=$((ran + 1))
    for kind in crash error; do
        fault_case "fault_np${np}_$kind" "$np" 'sluice\[rank 1\]: .*SLUICE_FAULT' \
            "SLUICE_FAULT=1:2:$kind"
        check "fault_np${np}_$kind: rank 1 must report the injected fault at step 2" \
            grep -q 'sluice\[rank 1\]: .*SLUICE_FAULT.* step 2' "fault_np${np}_$kind.out"
    done
done

# An error NCCL reports names the operation, the group and the rank. In the emulated build the
# fake NCCL fails a chosen call on world rank 1 (SLUICE_EMU_NCCL_FAIL, emu/README.md) with the
# ncclRemoteError a lost peer gives: the expert exchange's first ncclSend (group ep, EP 2 on 2
# ranks) and the gradient all-reduce's first ncclAllReduce (group world, EP 4 on 4 ranks: the
# expert-data-parallel groups have one rank and the world reduces first).
if "$sluice" --help 2>&1 | grep -q "emulated on the CPU"; then
    marker='sluice\[rank 1\]: .*NCCL: '
    fault_case nccl_send_np2 2 "$marker" SLUICE_EMU_NCCL_FAIL=ncclSend:1
    check "nccl_send_np2: the error names the exchange, group ep and rank 1 of 2" \
        grep -qE 'NCCL: alltoallv[a-z_]* (\((scatter|gather)\) )?failed on group ep \(rank 1 of 2, world rank 1\): ncclSend.*SLUICE_EMU_NCCL_FAIL' \
        nccl_send_np2.out
    fault_case nccl_allreduce_np4 4 "$marker" SLUICE_EMU_NCCL_FAIL=ncclAllReduce:1 \
        --set parallel.expert_parallel=4
    check "nccl_allreduce_np4: the error names the all-reduce, group world and rank 1 of 4" \
        grep -qE 'NCCL: i?allreduce failed on group world \(rank 1 of 4, world rank 1\): ncclAllReduce.*SLUICE_EMU_NCCL_FAIL' \
        nccl_allreduce_np4.out
else
    echo "not the emulated build: the injected NCCL errors (SLUICE_EMU_NCCL_FAIL) are not run"
fi

echo "test_nccl_fault: $checks checks, $failures failed"
[ "$failures" -eq 0 ] || exit 1
[ "$ran" -gt 0 ] || exit 77
