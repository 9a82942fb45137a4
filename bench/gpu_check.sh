#!/usr/bin/env bash
# bench/gpu_check.sh - the one-call GPU check: on a lent GPU, one command runs the GPU tests,
# sluice doctor, compute-sanitizer memcheck and racecheck and the benchmarks, each with its own
# time budget, in about 7 minutes on an H200, and writes a summary and its logs to OUTDIR.
#
#   . sluice-bundle/env.sh                       # not needed: this script sources it itself
#   sluice-bundle/bench/gpu_check.sh OUTDIR      # a bundle made with launch/bundle.sh --with-tests
#   bench/gpu_check.sh OUTDIR --build build --src .   # from a build tree instead
#
# bench/gpu_check.py has the parts, the options and the files it writes (--help lists the
# options). Exit status 0: no part failed or timed out; 1: one did; 2: bad usage.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# In a bundle (bench/ beside env.sh) its environment comes first: the bundle's libraries, its
# Open MPI, the node's CUDA libraries (env.sh finds PyTorch's nvidia/*/lib folders).
if [ -f "$here/../env.sh" ] && [ -x "$here/../bin/sluice" ]; then
    # shellcheck disable=SC1091 # written by launch/bundle.sh
    . "$here/../env.sh"
fi
py=${SLUICE_PYTHON:-python3}
command -v "$py" >/dev/null 2>&1 || {
    echo "gpu_check: $py not found (set SLUICE_PYTHON to a Python 3 interpreter)" >&2
    exit 2
}
exec "$py" "$here/gpu_check.py" "$@"
