# shellcheck shell=bash
# tests/cli_lib.sh - what the command-line test scripts share (sourced; bash): the check
# counters, a fresh work directory, Open MPI's environment for mpirun in a container, a
# generated text corpus and the small MoE model of their configs.

sl_tests_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/skip_or_fail.sh
. "$sl_tests_dir/skip_or_fail.sh"

# Failed and run checks; fail DESCRIPTION counts a failure, check DESCRIPTION COMMAND... runs
# COMMAND and counts a failure when it fails.
failures=0
checks=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}
check() { # check DESCRIPTION COMMAND...
    local what=$1
    shift
    checks=$((checks + 1))
    "$@" || fail "$what"
}
# expect_exit STATUS PATTERN COMMAND...: runs COMMAND and counts a failure unless it exits with
# STATUS (2 a usage error, 1 bad input) and its output (stdout and stderr) holds PATTERN.
expect_exit() {
    local want=$1 pat=$2 out st=0
    shift 2
    checks=$((checks + 1))
    out=$("$@" 2>&1) || st=$?
    if [ "$st" -ne "$want" ] || ! grep -q -- "$pat" <<<"$out"; then
        fail "$* exited $st (want $want) without '$pat': $(head -c 600 <<<"$out")"
    fi
}
# show FILE: a run's output for the log, without its step lines
show() { sed 's/^/    | /' "$1" | grep -v '| step ' >&2; }
# none_running PATTERN: no process's command line matches PATTERN
none_running() { ! pgrep -f "$1" >/dev/null; }

# fresh_workdir DIR: DIR emptied, created and made the current directory (exit 1 if it cannot).
fresh_workdir() {
    rm -rf "$1"
    mkdir -p "$1"
    cd "$1" || exit 1
}

# python_test_start WORKDIR: the start of a script that needs /usr/bin/python3 (corpus, JSON
# checks): skipped (77) without it, a failure under CI=true (skip_or_fail.sh); then
# fresh_workdir WORKDIR.
python_test_start() {
    [ -x /usr/bin/python3 ] || skip_or_fail "/usr/bin/python3 not installed (apt-get install python3)"
    fresh_workdir "$1"
}

# grammar_data SLUICE SEED TRAIN_LINES EVAL_LINES: tests/grammar_corpus.py's learnable corpus
# (train.txt, eval.txt) built into the shards train (16,384-token frames) and eval (4,096).
grammar_data() {
    /usr/bin/python3 "$sl_tests_dir/grammar_corpus.py" "$2" "$3" "$4"
    "$1" data build --quiet --frame-tokens 16384 -o train train.txt
    "$1" data build --quiet --frame-tokens 4096 -o eval eval.txt
}

# mpi_env: mpirun allowed as root and oversubscribed, one OpenMP thread a rank, and no
# SLUICE_FAULT left over from the caller's environment.
mpi_env() {
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
    export OMPI_MCA_rmaps_base_oversubscribe=1
    unset SLUICE_FAULT
}

# mpi_script_start SCRIPT SLUICE WORKDIR [MPIEXEC]: the start of a script that runs sluice
# under mpirun: sets sluice, work and mpiexec (default mpirun) from its arguments (a usage
# error naming SCRIPT ends the script when one is missing), then mpi_env and fresh_workdir.
# shellcheck disable=SC2034 # sluice and mpiexec are for the sourcing script
mpi_script_start() {
    local usage="usage: $1 SLUICE WORKDIR [MPIEXEC]"
    sluice=${2:?$usage}
    work=${3:?$usage}
    mpiexec=${4:-mpirun}
    mpi_env
    fresh_workdir "$work"
}

# word_corpus SEED LINES WORDS_PER_LINE WORDS...: LINES lines of WORDS_PER_LINE words drawn
# from WORDS with awk's rand() seeded by SEED, on stdout.
word_corpus() {
    local seed=$1 lines=$2 per_line=$3
    shift 3
    awk -v seed="$seed" -v lines="$lines" -v per_line="$per_line" -v words="$*" 'BEGIN {
    srand(seed);
    n = split(words, w, " ");
    for (l = 0; l < lines; l++) {
        s = "";
        for (i = 0; i < per_line; i++) s = s (i ? " " : "") w[1 + int(rand() * n)];
        print s;
    }
}'
}

# line_data SLUICE OUT FRAME_TOKENS TEXT: `sluice data build` of TEXT, a document a line, into
# OUT with frames of FRAME_TOKENS tokens; the test ends (exit 1) when it fails.
line_data() {
    "$1" data build -o "$2" --frame-tokens "$3" --text-docs line --quiet "$4" ||
        { echo "sluice data build failed" >&2; exit 1; }
}

# train_run NAME NP|- ARGS...: `$sluice train ARGS` (under `$mpiexec -np NP --oversubscribe`
# unless NP is -), its output in NAME.out and $out, its exit status in $rc; a hang is cut at
# 60 s. For the scripts started by mpi_script_start (sluice, mpiexec).
# shellcheck disable=SC2034 # rc and out are for the sourcing script
train_run() {
    local name=$1 np=$2
    shift 2
    if [ "$np" = - ]; then
        timeout -k 5 60 "$sluice" train "$@" >"$name.out" 2>&1
    else
        timeout -k 5 60 "$mpiexec" -np "$np" --oversubscribe "$sluice" train "$@" >"$name.out" 2>&1
    fi
    rc=$?
    out=$(cat "$name.out")
}

# moe_model_json EXPERTS: the "model" entry of a config (with its trailing comma): a small
# qwen3_moe, EXPERTS experts top-2, 2 layers, hidden 32.
moe_model_json() {
    cat <<EOF
  "model": {
    "model_type": "qwen3_moe", "vocab_size": 257, "hidden_size": 32, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "rms_norm_eps": 1e-6,
    "rope_theta": 10000, "partial_rotary_factor": 1.0, "max_position_embeddings": 64,
    "num_experts": $1, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
    "shared_expert_intermediate_size": 0, "intermediate_size": 0, "norm_topk_prob": true,
    "router_aux_loss_coef": 1e-2, "router_z_loss_coef": 0, "mlp_only_layers": [],
    "tie_word_embeddings": false, "initializer_range": 0.02, "attn_output_gate": "elementwise"
  },
EOF
}
