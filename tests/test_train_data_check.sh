#!/usr/bin/env bash
# tests/test_train_data_check.sh - `sluice train` checks every data path its schedule reads at
# start-up (README, "Start-up checks"): a missing or unreadable data.train or data.eval, of the
# run or of any stage, fails before the banner, the model's allocation and a checkpoint's load,
# with one line naming the config file and the key, exit status 1; under mpirun -np 2 that line
# is printed once.
#   - one process: the whole output is the error line; no out_dir is created;
#   - 2 ranks: the error is the first line of the job's output and appears once; no banner;
#   - a model too large for any address space (384 TiB of weights) still gets the data error,
#     not the allocator's: the check comes before the model is allocated;
#   - --resume of a checkpoint that is not there gets the data error, not the resume's: the
#     check comes before a checkpoint is read;
#   - a later stage's eval set, the training data after an evaluation-only first stage and a
#     file that is not a shard: named by the key.
# usage: test_train_data_check.sh SLUICE WORKDIR [MPIEXEC]
set -uo pipefail
# shellcheck source=tests/cli_lib.sh
. "$(dirname "$0")/cli_lib.sh"

mpi_script_start test_train_data_check.sh "$@"

word_corpus 3 200 12 "the quick brown fox jumps over a lazy dog" >corpus.txt
line_data "$sluice" train 1024 corpus.txt
cat >cfg.json <<EOF
{
$(moe_model_json 8)
  "training": {"seq_len": 32, "micro_batch_size": 2, "global_batch_tokens": 128,
               "max_steps": 2, "warmup_steps": 1, "out_dir": "run"},
  "data": {"train": "nowhere"},
  "backend": {"name": "cpu", "threads": 1}
}
EOF
missing="sluice: error: cfg.json: data.train: nowhere: cannot open: No such file or directory"

# run NAME NP|- ARGS...: sluice train cfg.json ARGS (train_run, tests/cli_lib.sh)
run() {
    local name=$1 np=$2
    shift 2
    train_run "$name" "$np" cfg.json "$@"
}
# only NAME MESSAGE: the run exited 1 and printed MESSAGE and nothing else
only() {
    check "$1: exit status 1 (got $rc)" [ "$rc" -eq 1 ]
    check "$1: the output is exactly '$2' (got: $out)" [ "$out" = "$2" ]
}

run plain -
only "a missing data.train" "$missing"
check "a missing data.train: no out_dir created" [ ! -e run ]

run np2 2
check "2 ranks: the job exits 1 (got $rc)" [ "$rc" -eq 1 ]
check "2 ranks: the error is the first line (got: $out)" [ "$(head -n 1 <<<"$out")" = "$missing" ]
check "2 ranks: the error is printed once (got: $out)" [ "$(grep -cF -- "$missing" <<<"$out")" -eq 1 ]
check "2 ranks: no banner" [ "$(grep -c 'backend cpu' <<<"$out")" -eq 0 ]
check "2 ranks: no out_dir created" [ ! -e run ]

# 4 layers of 128 experts of 3 x 65536 x 1048576 weights: past any allocator's reach
run huge - --set model.hidden_size=65536 --set model.moe_intermediate_size=1048576 \
    --set model.num_experts=128 --set model.num_hidden_layers=4
only "a missing data.train, a model that cannot be allocated" "$missing"

run resume - --resume nowhere_ckpt
only "a missing data.train, --resume of a missing checkpoint" "$missing"

# a path a --set gave: the config named as "cfg.json (--set)", as its other overrides' errors
run eval - --set data.train=train --set data.eval=nowhere_eval
only "a missing data.eval" \
    "sluice: error: cfg.json (--set): data.eval: nowhere_eval: cannot open: No such file or directory"

run stage - --set data.train=train --set 'training.stages=[{"name":"a","tokens":128},
    {"name":"b","tokens":128,"data":{"eval":"nowhere_eval"}}]'
only "a later stage's missing data.eval" "sluice: error: cfg.json (--set): training.stages[1] (\"b\"): data.eval: nowhere_eval: cannot open: No such file or directory"

# an evaluation-only first stage reads no training data; the training stage after it does
run evalfirst - --set data.eval=train --set 'training.stages=[{"name":"a","tokens":0},
    {"name":"b","tokens":256}]'
only "a missing data.train after an evaluation-only stage" "$missing"

run notshard - --set data.train=corpus.txt
check "a data.train that is not a shard: exit status 1 (got $rc)" [ "$rc" -eq 1 ]
check "a data.train that is not a shard: named by the key, alone (got: $out)" \
    grep -qx 'sluice: error: cfg.json (--set): data.train: corpus.txt: byte offset 0: bad magic 0x[0-9a-f]*: not a sluice shard' <<<"$out"

# a data path from --set is tagged "(--set)" in the reader's errors too (here the shard's
# vocabulary, found when the reader opens it)
run vocab - --set data.train=train --set model.vocab_size=100 --set training.out_dir=run_vocab
check "a --set data path's reader error: exit status 1 (got $rc)" [ "$rc" -eq 1 ]
check "a --set data path's reader error: tagged (--set), once (got: $out)" \
    [ "$(grep -c '^sluice: error: cfg.json (--set): data.train: train/shard-00000.shard.zst: vocabulary size 257 does not fit model.vocab_size = 100' <<<"$out")" -eq 1 ]

echo "test_train_data_check: $checks checks, $failures failed"
[ "$failures" -eq 0 ]
