#!/bin/sh
# bench/reader_bench.sh [BUILD_DIR] [-- reader_bench options]
# Builds reader_bench in BUILD_DIR (default: build) and runs it: sl_reader tokens/s against
# `zstd -d` on the same shard, and the reader's peak RSS on a small and a 2^30-token shard.
# The shards are generated under /tmp/sluice_reader_bench (override with --dir) and reused.
set -e
BUILD=${1:-build}
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
cmake --build "$BUILD" --target reader_bench
exec "$BUILD/bench/reader_bench" "$@"
