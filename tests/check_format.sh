#!/usr/bin/env bash
# Fails when a tracked C/C++/CUDA source (.c .h .cu .cuh .cc) differs from what clang-format
# (with the checked-in .clang-format) makes of it, naming each such file. One clang-format
# process checks them all (one per file took 35-50 s of CI's two cores; one takes about a
# second). Skipped (77) where clang-format or git is missing, except under CI=true where that
# is a failure (tests/skip_or_fail.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/skip_or_fail.sh
command -v clang-format >/dev/null || skip_or_fail "clang-format not installed (apt-get install clang-format)"
# safe.directory: a checkout owned by another user (a CI container running as root on a
# workspace cloned by its runner) is still this test's to read
git() { command git -c safe.directory="$PWD" "$@"; }
git rev-parse --git-dir >/dev/null 2>&1 || skip_or_fail "not a git checkout (the files to check come from git ls-files)"
files=()
while IFS= read -r f; do files+=("$f"); done < <(git ls-files '*.c' '*.h' '*.cu' '*.cuh' '*.cc')
[ ${#files[@]} -gt 0 ] || { echo "no sources found by git ls-files"; exit 1; }
# --dry-run -Werror reports "FILE:LINE:COL: error: code should be clang-formatted" per change;
# a file clang-format cannot read or parse also makes it exit non-zero
out=$(clang-format --dry-run -Werror "${files[@]}" 2>&1) && exit 0
bad=$(sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: .*/\1/p' <<<"$out" | sort -u)
if [ -z "$bad" ]; then
    echo "clang-format failed:"
    echo "$out" | head -20
    exit 1
fi
while IFS= read -r f; do echo "not clang-formatted: $f (run: clang-format -i $f)"; done <<<"$bad"
exit 1
