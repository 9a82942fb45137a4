#!/bin/sh
# Keeps nvcc's --resource-usage report (registers, shared memory, spills per kernel) out of
# the build log and in the build directory (CMakeLists.txt, the CUDA section).
#
# usage: nvcc_resource_usage.sh DIR nvcc args...     (CMAKE_CUDA_COMPILER_LAUNCHER)
#          runs nvcc; its "ptxas info" lines go to DIR/<object>.txt, everything else to
#          stderr as usual; the exit status is nvcc's, or 1 when ptxas reports a C75xx
#          advisory (wgmma serialized), which is also repeated on stderr.
#        nvcc_resource_usage.sh --collect DIR OUT    (after the library is built)
#          concatenates DIR/*.txt into OUT, kernel names demangled when c++filt exists.
set -u
if [ "$1" = "--collect" ]; then
    dir=$2 out=$3
    {
        echo "# nvcc --resource-usage per object (registers, shared memory, spills) - generated"
        for f in "$dir"/*.txt; do
            [ -f "$f" ] && cat "$f"
        done
    } >"$out.tmp"
    if command -v c++filt >/dev/null 2>&1; then
        c++filt <"$out.tmp" >"$out" && rm -f "$out.tmp"
    else
        mv "$out.tmp" "$out"
    fi
    exit 0
fi
dir=$1
shift
obj=
prev=
for a in "$@"; do
    [ "$prev" = "-o" ] && obj=$a
    prev=$a
done
log=$(mktemp)
"$@" >"$log" 2>&1
rc=$?
if [ -n "$obj" ]; then
    mkdir -p "$dir"
    name=$(printf '%s' "$obj" | tr '/' '_')
    {
        echo "== $obj"
        grep -E '^ptxas info|^ +[0-9]+ bytes stack frame' "$log"
    } >"$dir/$name.txt"
    grep -v -E '^ptxas info|^ +[0-9]+ bytes stack frame' "$log" >&2
    # ptxas's C75xx advisories ("Potential Performance Loss: wgmma.mma_async instructions are
    # serialized", "warpgroup.wait is injected"): it keeps a Hopper kernel correct by waiting
    # where the source overlapped a wgmma with a use of its registers, so the kernel silently
    # loses the overlap it was written for. Treated as an error, as spills are.
    if grep -E '^ptxas info +: \(C75[0-9][0-9]\)' "$log" >&2; then
        echo "$obj: ptxas serialized wgmma (the C75xx lines above); fix the kernel's register use" >&2
        rm -f "$obj" # else the next make would take it as built
        [ "$rc" = 0 ] && rc=1
    fi
else
    cat "$log" >&2
fi
rm -f "$log"
exit $rc
