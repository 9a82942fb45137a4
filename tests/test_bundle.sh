#!/usr/bin/env bash
# tests/test_bundle.sh - launch/bundle.sh makes a folder that runs sluice where none of its
# Debian dependencies are installed.
#
# usage: test_bundle.sh SOURCE_DIR BUILD_DIR WORK_DIR
#
# Builds the bundle from the already-built tree (--no-build), then, in a private mount
# namespace (unshare --mount; nothing leaks out of it), hides this machine's copies of what
# the bundle carries: empty tmpfs over the Open MPI, OpenBLAS, PMIx and hwloc-plugin folders,
# /usr/share/openmpi and /etc/openmpi; a stub (a short script, not ELF) bind-mounted over
# every system file with the name of a library in the bundle (libopenblas, libcjson, libzstd,
# libmpi, libgomp, ...) and over orterun/orted/ompi_info. A program the loader sends there
# stops ("file too short") instead of passing quietly. Then:
#   a. no system copy of a bundled library reads as ELF, and the build tree's own sluice no
#      longer starts (the hiding works);
#   b. without env.sh: ldd resolves bin/sluice into the bundle through its RUNPATH, and
#      sluice --help and sluice data build run (needs the bundle made with patchelf; without
#      it this part is skipped, or fails under CI=true);
#   c. with env.sh: ldd resolves sluice and orterun into the bundle (glibc, libgcc and CUDA
#      aside); sluice --help and data build; then, with env.sh sourced afresh under a PATH
#      that holds no folder of this machine (so no ssh either), sluice train of a tiny CPU
#      MoE for 2 steps as a singleton (no mpirun; it must start no orted) and under the
#      bundle's mpirun -np 2 with expert parallelism 2. Every object those processes load
#      (LD_DEBUG=libs, "calling init") is the bundle's or glibc/libgcc/CUDA, Open MPI's
#      components come from the bundle, and no Open MPI or PMIx warning is printed.
# Skipped (77) where mount namespaces cannot be made (not root, or a container without
# CAP_SYS_ADMIN); under CI=true as root that is a failure, since it works as root on the
# development machine (Debian bookworm) that CI matches. A missing tool (unshare, ldd, strip,
# ompi_info) skips outside CI and fails under it (tests/skip_or_fail.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/skip_or_fail.sh
. "$here/skip_or_fail.sh"

if [ "${1:-}" = --inside ]; then
    inside=1
    shift
else
    inside=0
fi
src=${1:?usage: test_bundle.sh SOURCE_DIR BUILD_DIR WORK_DIR}
build=${2:?usage: test_bundle.sh SOURCE_DIR BUILD_DIR WORK_DIR}
work=${3:?usage: test_bundle.sh SOURCE_DIR BUILD_DIR WORK_DIR}
bundle=$work/bundle

# The node's libraries, as launch/bundle.sh leaves them out: glibc, libgcc/libstdc++, CUDA.
node_re='^/(lib64|lib|usr/lib)(/x86_64-linux-gnu)?/(ld-linux[^/]*|libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libmvec|libnsl|libthread_db|libstdc\+\+|libgcc_s)\.so|/(libcuda|libcudart|libcublas|libcublasLt|libnccl|libcudnn[a-z_]*|libnvidia-[a-z-]*|libnvrtc[a-z-]*)\.so'

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# ---- outside: preconditions, the bundle, the data; then the rest in a mount namespace ----
if [ "$inside" = 0 ]; then
    for tool in unshare mount ldd strip ompi_info awk; do
        command -v "$tool" >/dev/null || skip_or_fail "$tool not installed"
    done
    if ! unshare --mount "$BASH" -c : 2>/dev/null; then
        why="mount namespaces unavailable here (unshare --mount failed; needs root/CAP_SYS_ADMIN)"
        if sl_under_ci && [ "$(id -u)" -eq 0 ]; then
            fail "$why - CI runs as root where this works"
        fi
        echo "SKIP: $why"
        exit 77
    fi
    [ -x "$build/launch/sluice" ] || fail "$build/launch/sluice not built"
    rm -rf "$work"
    mkdir -p "$work"
    "$src/launch/bundle.sh" --no-build --build "$build" --out "$bundle" | tee "$work/bundle.log"
    grep -q "^bundle: $bundle (" "$work/bundle.log" || fail "bundle.sh did not report the bundle"
    echo "bundle size: $(du -sb "$bundle" | cut -f1) bytes (du -sb)"
    for f in README env.sh MANIFEST bin/sluice bin/orterun bin/orted bin/mpirun; do
        [ -e "$bundle/$f" ] || fail "bundle incomplete: no $f"
    done
    # The components that warn or pull in fabric libraries are left out.
    # (file names only: the bundle's own path may contain these letters, e.g. wt-pr"ofi"le)
    if find "$bundle/lib/openmpi" -name '*.so' -printf '%f\n' | grep -E 'ofi|openib|ucx|psm'; then
        fail "fabric components in the bundle"
    fi

    # data: a generated text (awk, so that nothing outside the bundle is needed to make it)
    awk 'BEGIN {
        srand(11);
        n = split("the king went up to the city and the people followed him to the gate of the temple", w, " ");
        for (l = 0; l < 1500; l++) {
            s = "";
            for (i = 0; i < 10; i++) s = s (i ? " " : "") w[1 + int(rand() * n)];
            print s ".";
        }
    }' >"$work/corpus.txt"
    head -n 1200 "$work/corpus.txt" >"$work/train.txt"
    tail -n 300 "$work/corpus.txt" >"$work/eval.txt"
    cat >"$work/tiny.json" <<'JSON'
{
  "model": {"vocab_size": 257, "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
            "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
            "attn_output_gate": "elementwise"},
  "training": {"seq_len": 32, "micro_batch_size": 2, "global_batch_tokens": 128,
               "max_steps": 2, "warmup_steps": 1, "eval_every": 0, "eval_tokens": 512,
               "log_every": 1, "out_dir": "run"},
  "data": {"train": "train", "eval": "eval"},
  "backend": {"name": "cpu", "threads": 1}
}
JSON
    echo "== entering a private mount namespace"
    exec unshare --mount bash "$0" --inside "$src" "$build" "$work"
fi

# ---- inside the namespace ----
cd "$work"
hide=$work/hide
mkdir -p "$hide"
mount -t tmpfs -o size=1m,mode=755 sluice-test-hide "$hide"
# shellcheck disable=SC2016 # $0 is the stub's own, at run time
printf '#!/bin/sh\necho "hidden by test_bundle: $0" >&2\nexit 97\n' >"$hide/stub"
chmod 755 "$hide/stub"

hidden_dirs=0
for d in /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/openblas-openmp \
    /usr/lib/x86_64-linux-gnu/openblas-pthread /usr/lib/x86_64-linux-gnu/pmix2 \
    /usr/lib/x86_64-linux-gnu/hwloc /usr/share/openmpi /etc/openmpi; do
    [ -d "$d" ] || continue
    mount -t tmpfs -o size=64k,mode=755 sluice-test-hide "$d"
    hidden_dirs=$((hidden_dirs + 1))
done
declare -A done_files=()
hide_file() { # bind the stub over the file a path resolves to
    local real
    real=$(readlink -f "$1")
    [ -f "$real" ] && [ -z "${done_files[$real]:-}" ] || return 0
    mount --bind "$hide/stub" "$real"
    done_files[$real]=1
}
for lib in "$bundle"/lib/*.so*; do
    name=$(basename "$lib")
    for d in /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/lib /usr/local/lib; do
        [ -e "$d/$name" ] && hide_file "$d/$name"
    done
done
for b in orterun orted mpirun mpiexec ompi_info; do
    p=$(command -v "$b" 2>/dev/null) || continue
    case "$p" in "$bundle"/*) continue ;; esac
    hide_file "$p"
done
echo "hidden: $hidden_dirs folders, ${#done_files[@]} files (${!done_files[*]})"
[ -z "$(ls -A /usr/lib/x86_64-linux-gnu/openmpi 2>/dev/null)" ] || fail "openmpi folder still visible"
# No system copy of a bundled library can be read as ELF any more.
for lib in "$bundle"/lib/*.so*; do
    name=$(basename "$lib")
    for d in /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/lib /usr/local/lib; do
        if [ -e "$d/$name" ] && [ "$(head -c 4 "$d/$name" | tr -d '\177')" = ELF ]; then
            fail "$d/$name still readable"
        fi
    done
done

# a. the build tree's binary must not start any more: proof that the system copies are gone
if "$build/launch/sluice" --help >a.log 2>&1; then
    cat a.log
    fail "the build tree's sluice still runs: system libraries not hidden"
fi
echo "a. build-tree sluice fails as expected: $(head -n 1 a.log)"

# every library ldd resolves for $1 is in the bundle or is the node's
check_ldd() {
    local bad
    ldd "$1" >ldd.out 2>&1 || { cat ldd.out; fail "ldd $1 failed"; }
    bad=$(awk '/=>/ { print $1, $3 }' ldd.out | while read -r name path; do
        case "$path" in "$bundle"/*) continue ;; esac
        [[ "$path" =~ $node_re ]] && continue
        echo "$name => $path"
    done)
    [ -z "$bad" ] || { cat ldd.out; fail "$2: not from the bundle: $bad"; }
}
# every object a run loaded (LD_DEBUG=libs output files $1.*) is the bundle's or the node's
check_loaded() {
    local bad n_bundle n_mca
    cat "$1".* | sed -n 's/.*calling init: //p' | sed 's/ \[[0-9]*\]$//' | sort -u >"$1-loaded"
    bad=$(while read -r path; do
        path=$(readlink -f "$path")
        case "$path" in "$bundle"/*) continue ;; esac
        [[ "$path" =~ $node_re ]] && continue
        echo "$path"
    done <"$1-loaded")
    [ -z "$bad" ] || fail "$2 loaded objects from outside the bundle: $bad"
    n_bundle=$(grep -c "^$bundle/" "$1-loaded" || true)
    n_mca=$(grep -c "^$bundle/lib/openmpi/mca_" "$1-loaded" || true)
    [ "$n_mca" -gt 0 ] || fail "$2 loaded no Open MPI component from the bundle"
    echo "   $2: $(wc -l <"$1-loaded") objects loaded ($n_bundle from the bundle, $n_mca of them Open MPI components from $bundle/lib/openmpi); the rest: $(grep -v "^$bundle/" "$1-loaded" | tr '\n' ' ')"
}
no_mpi_warnings() {
    if grep -n -i -E 'warning|not found|unable to (open|find)|mca_base_component|sorry|open the help file|no such file' "$1"; then
        fail "$2 printed Open MPI warnings (above)"
    fi
}

# b. without env.sh: RUNPATH
unset LD_LIBRARY_PATH OPAL_PREFIX OMPI_MCA_mca_base_component_path
if grep -q '^# patchelf (RUNPATH set): yes' "$bundle/MANIFEST"; then
    check_ldd "$bundle/bin/sluice" "ldd without env.sh"
    "$bundle/bin/sluice" --help >b.log 2>&1 || { cat b.log; fail "bin/sluice --help without env.sh"; }
    "$bundle/bin/sluice" data build --quiet --frame-tokens 1024 -o eval eval.txt >b.log 2>&1 ||
        { cat b.log; fail "bin/sluice data build without env.sh"; }
    echo "b. without env.sh: ldd resolves to the bundle; sluice --help and data build run"
else
    skip_part_or_fail "patchelf not installed when the bundle was made: no RUNPATH to test (apt-get install patchelf)"
fi

# c. with env.sh
# shellcheck disable=SC1091 # written by bundle.sh
. "$bundle/env.sh"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ "$(command -v sluice)" = "$bundle/bin/sluice" ] || fail "sluice on PATH is $(command -v sluice)"
[ "$(command -v mpirun)" = "$bundle/bin/mpirun" ] || fail "mpirun on PATH is $(command -v mpirun)"
check_ldd "$bundle/bin/sluice" "ldd sluice with env.sh"
check_ldd "$bundle/bin/orterun" "ldd orterun with env.sh"
sluice --help >c0.log 2>&1 || { cat c0.log; fail "sluice --help"; }
grep -q 'train' c0.log || fail "sluice --help printed no command list"
sluice data build --quiet --frame-tokens 2048 -o train train.txt
[ -d eval ] || sluice data build --quiet --frame-tokens 1024 -o eval eval.txt
echo "c. with env.sh: ldd resolves to the bundle; --help and data build run"

check_run() { # dir shards label: 2 metric records and the weights
    local n
    n=$(grep -c '^{"step' "$1/metrics.jsonl" || true)
    [ "$n" = 2 ] || fail "$3: $n metric records, want 2"
    for f in $2; do [ -s "$1/final/$f" ] || fail "$3: $1/final/$f missing"; done
}

# The runs see nothing of this machine's PATH: env.sh sourced afresh with PATH holding an
# empty folder (so no ssh either: env.sh then gives mpirun /bin/false as its ssh) and no
# LD_LIBRARY_PATH; prefixed LD_DEBUG* assignments reach the program.
mkdir -p "$work/nothing"
bare() {
    (
        unset SLUICE_BUNDLE_OLD_PATH SLUICE_BUNDLE_OLD_LD_LIBRARY_PATH LD_LIBRARY_PATH \
            OMPI_MCA_plm_rsh_agent
        # shellcheck disable=SC2123 # on purpose: no program from this machine's PATH
        PATH=$work/nothing
        # shellcheck disable=SC1091 # written by bundle.sh
        . "$bundle/env.sh"
        if [ "$PATH" != "$bundle/bin:$work/nothing" ] || [ -z "${OMPI_MCA_plm_rsh_agent:-}" ]; then
            echo "FAIL: env.sh set PATH=$PATH, plm_rsh_agent=${OMPI_MCA_plm_rsh_agent:-}" >&2
            exit 1
        fi
        exec "$@"
    )
}

LD_DEBUG=libs LD_DEBUG_OUTPUT=$work/ld.single bare sluice train tiny.json --set training.out_dir=run1 \
    >single.log 2>&1 || { cat single.log; fail "singleton sluice train"; }
sed 's/^/   | /' single.log
check_run run1 "model.safetensors config.json" "singleton train"
no_mpi_warnings single.log "singleton train"
check_loaded "$work/ld.single" "singleton train"
# With ess_singleton_isolated the singleton starts no orted: one process wrote LD_DEBUG output.
n_procs=$(find "$work" -maxdepth 1 -name 'ld.single.*' | wc -l)
[ "$n_procs" = 1 ] || fail "singleton train ran $n_procs processes (an orted was started?)"
echo "c. singleton sluice train: 2 steps, weights saved"

LD_DEBUG=libs LD_DEBUG_OUTPUT=$work/ld.mpi bare mpirun -np 2 --oversubscribe --bind-to none \
    sluice train tiny.json --set training.out_dir=run2 --set parallel.expert_parallel=2 \
    >mpi.log 2>&1 || { cat mpi.log; fail "mpirun -np 2 sluice train"; }
sed 's/^/   | /' mpi.log
check_run run2 "model-00001-of-00002.safetensors model-00002-of-00002.safetensors" "mpirun -np 2"
no_mpi_warnings mpi.log "mpirun -np 2"
n_procs=$(find "$work" -maxdepth 1 -name 'ld.mpi.*' | wc -l)
[ "$n_procs" -ge 3 ] || fail "LD_DEBUG output from $n_procs processes, want mpirun + 2 ranks"
check_loaded "$work/ld.mpi" "mpirun -np 2 ($n_procs processes)"
echo "c. mpirun -np 2 sluice train (EP 2): 2 steps, 2 weight shards"
echo "test_bundle: all checks passed (bundle $(du -sb "$bundle" | cut -f1) bytes)"
