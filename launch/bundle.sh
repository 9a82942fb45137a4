#!/usr/bin/env bash
# Writes a relocatable folder that runs sluice on a machine that has the CUDA driver (and
# cuBLAS/NCCL somewhere) but none of sluice's other dependencies and no network: typically a
# GPU node. Copy the folder there, `. env.sh`, run `sluice` or `mpirun`.
#
# usage: launch/bundle.sh [--build DIR] [--out DIR] [--no-build] [--with-bench] [--with-tests]
#                         [--tests REGEX] [--max-mb N]
#   --build DIR   the build to take the binaries from (default build/); configured and
#                 built (target sluice) unless --no-build
#   --out DIR     the folder to write (default DIR/sluice-bundle); replaced if it is an
#                 earlier bundle, refused if it is anything else
#   --no-build    use the binaries as they are in the build (fails if sluice is missing)
#   --with-bench  also carry the benchmark programs and their drivers: gpu_train_bench and
#                 reader_bench in a CUDA build, the CPU benchmarks otherwise
#   --with-tests  also carry the build's gpu-, cuda- and emu-labelled test programs (one solid
#                 xz archive, tests/programs.tar.xz, with the test scripts and configs) and
#                 their manifest (tests/manifest.json: each test's command with the build and
#                 source paths as placeholders; launch/bundle_tests.py), the benchmark drivers
#                 and gpu_train_bench: what bench/gpu_check.sh runs on a GPU node
#   --tests REGEX only the tests whose name matches REGEX (with --with-tests)
#   --max-mb N    fail when the folder is larger than N MiB (default 64; 96 with --with-tests)
# Environment: JOBS (build parallelism, default: all cores).
#
# What goes in: bin/ (sluice, Open MPI's mpirun/orted, mpirun.sh), lib/ (every shared library
# those load except glibc, libstdc++/libgcc and the CUDA libraries, which the node provides),
# lib/openmpi (Open MPI's components, less the ones for fabrics and OpenSHMEM), lib/pmix
# (PMIx's), share/ (their help texts), etc/, configs/, env.sh, README, MANIFEST. Copies are
# stripped; with patchelf their RUNPATH points into the bundle's lib/ (without it, the bundle
# works only through env.sh's LD_LIBRARY_PATH).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$root/build
out=
do_build=1
with_bench=0
with_tests=0
tests_regex=
max_mb=
while [ $# -gt 0 ]; do
    case "$1" in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --with-bench) with_bench=1; shift ;;
    --with-tests) with_tests=1; shift ;;
    --tests) tests_regex=$2; shift 2 ;;
    --max-mb) max_mb=$2; shift 2 ;;
    -h | --help) sed -n '2,29p' "$0"; exit 0 ;;
    *) echo "bundle: unknown option $1" >&2; exit 2 ;;
    esac
done
[ -n "$max_mb" ] || { [ "$with_tests" = 1 ] && max_mb=96 || max_mb=64; }
case "$max_mb" in
'' | *[!0-9]*) echo "bundle: --max-mb must be a whole number of MiB" >&2; exit 2 ;;
esac
[ "$do_build" = 0 ] || mkdir -p "$build"
[ -d "$build" ] || { echo "bundle: error: no build folder $build" >&2; exit 1; }
build=$(cd "$build" && pwd)
[ -n "$out" ] || out=$build/sluice-bundle
die() { echo "bundle: error: $*" >&2; exit 1; }

# --with-bench carries the benchmarks a node runs: in a build with the CUDA backend the GPU
# training benchmark and the reader benchmark (each program carries the CUDA kernels, about
# 6 MB, so the CPU benchmarks would push the folder past 64 MiB), otherwise the CPU ones.
if [ -f "$build/bench/Makefile" ] && grep -q "gpu_train_bench" "$build/bench/Makefile"; then
    bench_targets=(gpu_train_bench reader_bench)
else
    bench_targets=(bench_train bench_grouped_gemm bench_dispatch reader_bench)
fi
# --with-tests: what bench/gpu_check.sh needs beside the tests: gpu_train_bench (in a build
# with the CUDA backend) and the benchmark drivers.
tests_bench=()
if [ "$with_tests" = 1 ] && [ "$with_bench" = 0 ] && [ "${bench_targets[0]}" = gpu_train_bench ]; then
    tests_bench=(gpu_train_bench)
fi
if [ "$do_build" = 1 ]; then
    [ -f "$build/CMakeCache.txt" ] ||
        cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
    targets=(sluice)
    [ "$with_bench" = 0 ] || targets+=("${bench_targets[@]}")
    targets+=("${tests_bench[@]}")
    [ "$with_tests" = 0 ] || targets=(all) # the test programs are part of all
    cmake --build "$build" -j "${JOBS:-$(nproc)}" --target "${targets[@]}" >/dev/null
fi
programs=("$build/launch/sluice")
if [ "$with_bench" = 1 ]; then
    for t in "${bench_targets[@]}"; do programs+=("$build/bench/$t"); done
fi
for t in "${tests_bench[@]}"; do programs+=("$build/bench/$t"); done
for p in "${programs[@]}"; do
    [ -x "$p" ] || die "$p not built (run without --no-build, or build it first)"
done
for tool in ldd strip ompi_info; do
    command -v "$tool" >/dev/null || die "$tool not found (Open MPI's ompi_info: apt-get install openmpi-bin)"
done
have_patchelf=0
command -v patchelf >/dev/null && have_patchelf=1

# Open MPI as installed here: the components, the help texts, the launcher binaries.
ompi_path() { ompi_info --parsable --path "$1" | sed -n "s/^path:$1://p"; }
mca_dir=$(ompi_path pkglibdir)
mca_data=$(ompi_path pkgdatadir)
ompi_bindir=$(ompi_path bindir)
[ -d "$mca_dir" ] || die "Open MPI component directory '$mca_dir' not found"
orterun=$(readlink -f "$ompi_bindir/orterun")
orted=$(readlink -f "$ompi_bindir/orted")
if [ ! -x "$orterun" ] || [ ! -x "$orted" ]; then
    die "orterun/orted not found in $ompi_bindir"
fi

# Refuse to delete anything that is not an earlier bundle: --out may be mistyped.
if [ -e "$out" ]; then
    if [ ! -f "$out/env.sh" ] || [ ! -f "$out/MANIFEST" ]; then
        die "$out exists and is not a sluice bundle; remove it or choose another --out"
    fi
    rm -rf "$out"
fi
mkdir -p "$out"/{bin,lib/openmpi,lib/hwloc,share/openmpi,etc,configs}
out=$(cd "$out" && pwd)
manifest=$out/MANIFEST
: >"$manifest"

# Libraries the node provides. glibc and the GCC runtime that every distribution has (a
# bookworm build needs glibc >= 2.36 there), and CUDA: cudart, cuBLAS(Lt), NCCL, cuDNN and the
# driver's libraries are hundreds of MB and must match the node's driver anyway.
node_lib_re='^(linux-vdso|linux-gate|ld-linux[^ ]*|libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libmvec|libnsl|libthread_db|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl|libcudnn[a-z_]*|libnvidia-[a-z-]*|libnvrtc[a-z-]*)\.so'
# Open MPI components left out: network fabrics a GPU node's Open MPI build would bring its
# own support for (ofi, openib/verbs, ucx, psm) and whose libraries are large; their absence
# is silent, while a component whose library is missing warns on every start. Also OpenSHMEM
# (atomic, memheap, scoll, spml, sshmem), which sluice does not use, and the debugger's
# message-queue library.
skip_mca_re='(ofi|openib|verbs|ucx|psm)|^mca_(atomic|memheap|scoll|spml|sshmem)_|^libompi_dbg_msgq'

# RUNPATHs as the loader reads them: $ORIGIN is the folder of the file itself, not a variable.
# shellcheck disable=SC2016
origin='$ORIGIN'

# copy_elf SRC DEST RUNPATH: a stripped copy with its RUNPATH set (when patchelf exists).
copy_elf() {
    cp -L "$1" "$2"
    chmod u+w "$2"
    strip --strip-unneeded "$2"
    if [ "$have_patchelf" = 1 ]; then
        patchelf --set-rpath "$3" "$2"
    fi
    echo "${2#"$out"/} <- $1" >>"$manifest"
}

# Every library an ELF file loads (ldd resolves the whole tree), except the node's, into lib/.
declare -A seen=() # library name -> the path it was copied from
add_deps() {
    local line name path
    while IFS= read -r line; do
        case "$line" in
        *"=> not found"*)
            name=${line%% =>*}; name=${name//[[:space:]]/}
            [[ "$name" =~ $node_lib_re ]] || die "$1 needs $name, which is not installed here"
            continue ;;
        *"=> /"*) ;;
        *) continue ;;
        esac
        name=${line%% =>*}; name=${name//[[:space:]]/}
        path=${line#*=> }; path=${path%% (*}
        [[ "$name" =~ $node_lib_re ]] && continue
        [ -n "${seen[$name]:-}" ] && continue
        seen[$name]=$path
        copy_elf "$path" "$out/lib/$name" "$origin"
    done < <(ldd "$1")
}

for p in "${programs[@]}"; do
    copy_elf "$p" "$out/bin/$(basename "$p")" "$origin/../lib"
    add_deps "$p"
done
copy_elf "$orterun" "$out/bin/orterun" "$origin/../lib"
copy_elf "$orted" "$out/bin/orted" "$origin/../lib"
add_deps "$orterun"
add_deps "$orted"
ln -s orterun "$out/bin/mpirun"
ln -s orterun "$out/bin/mpiexec"
cp "$root/launch/mpirun.sh" "$out/bin/mpirun.sh"

kept=0
for c in "$mca_dir"/*.so; do
    base=$(basename "$c")
    [[ "$base" =~ $skip_mca_re ]] && continue
    copy_elf "$c" "$out/lib/openmpi/$base" "$origin/.."
    add_deps "$c"
    kept=$((kept + 1))
done
cp "$mca_data"/help-*.txt "$out/share/openmpi/"
echo "share/openmpi/help-*.txt <- $mca_data" >>"$manifest"

# Open MPI's pmix component uses the external PMIx library (mpirun's link to its ranks). PMIx
# has components (compression, resource manager) and help texts of its own: without them
# every mpirun prints "couldn't open the help file .../help-pcompress.txt". Found beside the
# library: <libdir>/pmix and <libdir>/../share/pmix (Debian: /usr/lib/<triplet>/pmix2).
pmix_src=
for name in "${!seen[@]}"; do
    case "$name" in libpmix.so.*) pmix_src=$(readlink -f "${seen[$name]}") ;; esac
done
if [ -n "$pmix_src" ]; then
    pmix_libdir=$(dirname "$pmix_src")
    pmix_data=$(cd "$pmix_libdir/../share/pmix" 2>/dev/null && pwd) ||
        die "PMIx help texts not found beside $pmix_src"
    mkdir -p "$out/lib/pmix" "$out/share/pmix"
    for c in "$pmix_libdir"/pmix/*.so; do
        [ -e "$c" ] || continue
        copy_elf "$c" "$out/lib/pmix/$(basename "$c")" "$origin/.."
        add_deps "$c"
    done
    cp "$pmix_data"/help-*.txt "$out/share/pmix/"
    echo "share/pmix/help-*.txt <- $pmix_data" >>"$manifest"
fi
cp "$root"/configs/*.json "$out/configs/"
if [ "$with_bench" = 1 ] || [ "$with_tests" = 1 ]; then # the drivers and the PyTorch twins
    mkdir -p "$out/bench/configs"
    cp "$root"/bench/*.py "$root"/bench/*.sh "$out/bench/"
    cp "$root"/bench/configs/*.json "$out/bench/configs/"
fi

# --with-tests: the test programs (stripped; their libraries join lib/ like the programs') and
# what their commands read from the source tree, in one solid xz archive (the programs share
# most of their bytes: every one carries the same CUDA kernels), and the manifest.
if [ "$with_tests" = 1 ]; then
    command -v python3 >/dev/null || die "--with-tests needs python3 (launch/bundle_tests.py)"
    command -v xz >/dev/null || die "--with-tests needs xz (apt-get install xz-utils)"
    stage=$(mktemp -d "${TMPDIR:-/tmp}/sluice-bundle-tests.XXXXXX")
    trap 'rm -rf "$stage"' EXIT
    mkdir -p "$out/tests" "$stage/payload/build" "$stage/payload/src"/{tests,configs,bench/configs,launch}
    python3 "$root/launch/bundle_tests.py" --build "$build" --src "$root" \
        ${tests_regex:+--names "$tests_regex"} --out "$out/tests/manifest.json" \
        --files "$stage/files.txt" || die "no tests to bundle"
    # gpu_check.sh's attention benchmark and racecheck runs take attn_bench from here too, its
    # expert GEMM parts expert_gemm_bench, its optimizer part adamw_bench
    for b in attn_bench expert_gemm_bench adamw_bench; do
        if [ -x "$build/bench/$b" ] && ! grep -qx "bench/$b" "$stage/files.txt"; then
            echo "bench/$b" >>"$stage/files.txt"
        fi
    done
    ntests=0
    while IFS= read -r rel; do
        mkdir -p "$stage/payload/build/$(dirname "$rel")"
        cp -L "$build/$rel" "$stage/payload/build/$rel"
        chmod u+w "$stage/payload/build/$rel"
        strip --strip-unneeded "$stage/payload/build/$rel" 2>/dev/null || true
        add_deps "$build/$rel"
        ntests=$((ntests + 1))
    done <"$stage/files.txt"
    cp "$root"/tests/*.sh "$root"/tests/*.py "$stage/payload/src/tests/"
    cp "$root"/configs/*.json "$stage/payload/src/configs/"
    cp "$root"/bench/*.py "$root"/bench/*.sh "$stage/payload/src/bench/"
    cp "$root"/bench/configs/*.json "$stage/payload/src/bench/configs/"
    cp "$root"/launch/*.sh "$root"/launch/*.py "$stage/payload/src/launch/"
    tar -C "$stage/payload" -cf - build src | xz -9e -T1 >"$out/tests/programs.tar.xz"
    echo "tests/programs.tar.xz <- $ntests programs of $build and the test scripts of $root (tests/manifest.json lists the tests)" >>"$manifest"
fi

# Open MPI reads <sysconfdir>/openmpi-mca-params.conf; env.sh points sysconfdir here so that
# a node's own /etc/openmpi (another version, other components) is not read.
cat >"$out/etc/openmpi-mca-params.conf" <<'EOF'
# Open MPI settings of the sluice bundle (env.sh sets OPAL_SYSCONFDIR to this folder).
# The fabric components (ofi, openib, ucx, psm) are not in the bundle: no warning about them.
btl_base_warn_component_unused = 0
EOF

cat >"$out/env.sh" <<'EOF'
# shellcheck shell=sh
# Source this file to run sluice from this bundle:   . /path/to/bundle/env.sh
# bash finds the bundle from this file's path; zsh (untested) from $0; any other sh needs
# SLUICE_BUNDLE=/path/to/bundle set first. It is sourced into your shell, so it only sets
# variables (no `set -e`, no exit) and runs no program but python3 (for the search below).
#
# LD_LIBRARY_PATH: the bundle's lib/ first (OpenBLAS, Open MPI, cJSON, zstd, ...), then the
# node's CUDA libraries, which the bundle does not carry: $CUDA_HOME/lib64, /usr/local/cuda/
# lib64 and the nvidia/*/lib folders of a pip installation (PyTorch's cuBLAS/NCCL/cuDNN wheels)
# found by python3 (or $SLUICE_PYTHON), then what LD_LIBRARY_PATH held before.
# Open MPI: OPAL_PREFIX and friends relocate it into the bundle; ess_singleton_isolated lets a
# plain `sluice train` (no mpirun) start MPI without starting an orted.
if [ -n "${BASH_VERSION:-}" ]; then
    # shellcheck disable=SC3028,SC2128 # bash only: the path of the file being sourced
    _sl_src=$BASH_SOURCE
elif [ -n "${ZSH_VERSION:-}" ]; then
    _sl_src=$0
elif [ -n "${SLUICE_BUNDLE:-}" ]; then
    _sl_src=$SLUICE_BUNDLE/env.sh
else
    echo "env.sh: this shell cannot tell where env.sh is; set SLUICE_BUNDLE=/path/to/bundle" >&2
    # shellcheck disable=SC2317 # exit only if this file was run instead of sourced
    return 1 2>/dev/null || exit 1
fi
case $_sl_src in
*/*) _sl_dir=${_sl_src%/*} ;;
*) _sl_dir=. ;;
esac
SLUICE_BUNDLE=$(cd "$_sl_dir" && pwd -P)
export SLUICE_BUNDLE
# Sourcing twice must not stack the additions: keep what the shell had the first time.
if [ -z "${SLUICE_BUNDLE_OLD_PATH+x}" ]; then
    export SLUICE_BUNDLE_OLD_PATH="${PATH:-}"
    export SLUICE_BUNDLE_OLD_LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"
fi
_sl_ld=$SLUICE_BUNDLE/lib
_sl_add() {
    case ":$_sl_ld:" in
    *":$1:"*) ;;
    *) if [ -d "$1" ]; then _sl_ld=$_sl_ld:$1; fi ;;
    esac
}
[ -z "${CUDA_HOME:-}" ] || _sl_add "$CUDA_HOME/lib64"
[ -z "${CUDA_HOME:-}" ] || _sl_add "$CUDA_HOME/lib"
_sl_add /usr/local/cuda/lib64
_sl_py=${SLUICE_PYTHON:-python3}
_sl_nv=
if command -v "$_sl_py" >/dev/null 2>&1; then
    _sl_nv=$("$_sl_py" -c '
import glob, os, site, sys
roots = []
try:
    roots += site.getsitepackages()
except Exception:
    pass
try:
    roots.append(site.getusersitepackages())
except Exception:
    pass
roots += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
found = []
for r in roots:
    for d in sorted(glob.glob(os.path.join(r, "nvidia", "*", "lib"))):
        if d not in found:
            found.append(d)
print(":".join(found))' 2>/dev/null) || _sl_nv=
fi
while [ -n "$_sl_nv" ]; do
    _sl_d=${_sl_nv%%:*}
    case $_sl_nv in
    *:*) _sl_nv=${_sl_nv#*:} ;;
    *) _sl_nv= ;;
    esac
    _sl_add "$_sl_d"
done
[ -z "$SLUICE_BUNDLE_OLD_LD_LIBRARY_PATH" ] || _sl_ld=$_sl_ld:$SLUICE_BUNDLE_OLD_LD_LIBRARY_PATH
export LD_LIBRARY_PATH="$_sl_ld"
export PATH="$SLUICE_BUNDLE/bin${SLUICE_BUNDLE_OLD_PATH:+:$SLUICE_BUNDLE_OLD_PATH}"
export OPAL_PREFIX="$SLUICE_BUNDLE"
export OPAL_SYSCONFDIR="$SLUICE_BUNDLE/etc"
export OPAL_PKGDATADIR="$SLUICE_BUNDLE/share/openmpi"
export OMPI_MCA_mca_base_component_path="$SLUICE_BUNDLE/lib/openmpi"
export OMPI_MCA_ess_singleton_isolated=1
# mpirun's ssh launcher aborts when neither ssh nor rsh is on PATH, even when every rank runs
# on this machine (containers often have no ssh client). false is only run to reach another
# node, which then fails with an error; a value you set yourself is kept.
if [ -z "${OMPI_MCA_plm_rsh_agent+x}" ] && ! command -v ssh >/dev/null 2>&1 &&
    ! command -v rsh >/dev/null 2>&1; then
    for _sl_d in /bin/false /usr/bin/false; do
        if [ -x "$_sl_d" ]; then
            export OMPI_MCA_plm_rsh_agent="$_sl_d"
            break
        fi
    done
fi
# PMIx (mpirun's link to the ranks) has its own components, help texts and settings file.
export PMIX_PREFIX="$SLUICE_BUNDLE"
export PMIX_SYSCONFDIR="$SLUICE_BUNDLE/etc"
export PMIX_PKGDATADIR="$SLUICE_BUNDLE/share/pmix"
export PMIX_MCA_mca_base_component_path="$SLUICE_BUNDLE/lib/pmix"
# hwloc would load the node's own plugins (built against another hwloc); the bundle has none.
export HWLOC_PLUGINS_PATH="$SLUICE_BUNDLE/lib/hwloc"
unset _sl_src _sl_dir _sl_ld _sl_py _sl_nv _sl_d
unset -f _sl_add
EOF

# The README and MANIFEST say where everything came from.
src_rev=$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)
glibc=$(ldd --version | sed -n '1s/.* //p')
ompi_version=$(ompi_info --version | sed -n '1s/^Open MPI v//p')
cuda_libs=$(ldd "$build/launch/sluice" | awk '$1 ~ /^lib(cudart|cublas|nccl|cudnn)/ { printf "%s%s", sep, $1; sep = ", " }')
{
    echo
    # shellcheck source=/dev/null
    echo "# built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-unknown OS}"), sluice $src_rev"
    echo "# glibc $glibc (the node needs this or newer), Open MPI $ompi_version"
    echo "# CUDA libraries sluice needs from the node: ${cuda_libs:-none (built without CUDA)}"
    echo "# patchelf (RUNPATH set): $([ "$have_patchelf" = 1 ] && echo yes || echo no)"
} >>"$manifest"

size=$(du -sb "$out" | cut -f1)
size_mib=$(awk -v b="$size" 'BEGIN { printf "%.1f", b / 1048576 }')
nlibs=$(find "$out/lib" -maxdepth 1 -name '*.so*' | wc -l)
if [ -n "$cuda_libs" ]; then
    cuda_note="This sluice was built with CUDA: it loads $cuda_libs at start, so
it needs them even for the cpu backend, and the NVIDIA driver for the cuda backend. They come
from the node: \$CUDA_HOME/lib64, /usr/local/cuda/lib64 or a PyTorch installation's
nvidia/*/lib folders (env.sh adds those that exist), or from LD_LIBRARY_PATH as it was.
attention.kernel = \"cudnn\" also opens libcudnn.so.9 at run time (found the same way, or
named by SLUICE_CUDNN_LIBRARY); nothing else needs it."
else
    cuda_note="This sluice was built without CUDA: it needs no CUDA library (cpu backend only)."
fi
if [ "$have_patchelf" = 1 ]; then
    runpath_note="Without env.sh: bin/ and lib/ carry RUNPATH \$ORIGIN/../lib (\$ORIGIN for lib/), so
\`sluice --help\` and \`sluice data ...\` load everything from lib/ wherever the folder is."
else
    runpath_note="Without env.sh: nothing works - patchelf was missing when this bundle was made, so
the binaries have no RUNPATH into lib/ (make it again after apt-get install patchelf)."
fi

tests_note=
if [ "$with_tests" = 1 ]; then
    tests_note="
The one-call GPU check (tests/programs.tar.xz holds the test programs; about 7 minutes on an
H200; the PyTorch parts need python3 with torch, e.g. SLUICE_PYTHON=/path/to/python3):
    bench/gpu_check.sh OUTDIR       # sources env.sh itself; OUTDIR/summary.txt, logs/, JSON"
fi
cat >"$out/README" <<EOF
sluice bundle: sluice and the libraries it needs, except glibc, the GCC runtime and CUDA,
made by launch/bundle.sh from sluice $src_rev ($size_mib MiB: $nlibs libraries, $kept Open MPI
components, Open MPI $ompi_version). MANIFEST lists every file and where it came from.

The node needs: Linux x86-64 with glibc $glibc or newer, libstdc++ and libgcc_s.
$cuda_note

Use (bash; zsh should work but is untested; in another sh set SLUICE_BUNDLE=/path/to/bundle first):
    . /path/to/bundle/env.sh        # PATH, LD_LIBRARY_PATH, OPAL_*, OMPI_MCA_*, PMIX_*
    sluice --help
    sluice doctor                   # first on a new node: versions, GPUs, op correctness, speed
    sluice data build -o data/train corpus.txt
    sluice train configs/tiny.json --set data.train=data/train --set data.eval=
    mpirun -np 2 sluice train CONFIG --set parallel.expert_parallel=2
    mpirun.sh 2 sluice train CONFIG   # the same, splitting the cores into OpenMP threads

A plain \`sluice train\` is an MPI singleton (one rank, no mpirun; env.sh sets
OMPI_MCA_ess_singleton_isolated=1 so that it does not start an orted). mpirun refuses to
run as root without --allow-run-as-root (mpirun.sh adds it).

$runpath_note
MPI (train, eval) needs env.sh: Open MPI finds its components, help texts and settings
through OPAL_PREFIX, OMPI_MCA_mca_base_component_path and the PMIX_* variables.

Several nodes (not tested): the bundle at the same path on every node, and
    mpirun --prefix "\$SLUICE_BUNDLE" -x LD_LIBRARY_PATH -x OPAL_PREFIX -x PMIX_PREFIX ...
so that the orted started over ssh finds the bundle.
$tests_note
EOF

echo "bundle: $out ($size_mib MiB, $nlibs libraries, $kept Open MPI components)"
[ "$have_patchelf" = 1 ] ||
    echo "bundle: patchelf not found (apt-get install patchelf): no RUNPATH, env.sh is needed always" >&2
limit=$((max_mb * 1048576))
[ "$size" -le "$limit" ] || die "$out is $size bytes, over the limit of $max_mb MiB"
