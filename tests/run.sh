#!/usr/bin/env bash
# The test command: installs missing dependencies, builds everything (including the CUDA
# backend where nvcc exists), and runs the whole suite with ctest.
#
# usage: tests/run.sh [ctest options...]     e.g. tests/run.sh -L moe
# Environment: BUILD_DIR (default build), JOBS (default: all cores).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
launch/install-deps.sh --tests
build=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$jobs"
cd "$build"
ctest --output-on-failure -j "$jobs" "$@"
