#!/usr/bin/env bash
# Fails when a tracked C/CUDA source differs from what clang-format (with the checked-in
# .clang-format) makes of it. Skipped (77) where clang-format or git is missing, except under
# CI=true where that is a failure (tests/skip_or_fail.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/skip_or_fail.sh
command -v clang-format >/dev/null || skip_or_fail "clang-format not installed (apt-get install clang-format)"
git rev-parse --git-dir >/dev/null 2>&1 || skip_or_fail "not a git checkout (the files to check come from git ls-files)"
bad=0
while IFS= read -r f; do
    if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then
        echo "not clang-formatted: $f (run: clang-format -i $f)"
        bad=1
    fi
done < <(git ls-files '*.c' '*.h' '*.cu')
exit $bad
