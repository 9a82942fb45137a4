#!/usr/bin/env bash
# Fails when a tracked C/CUDA source differs from what clang-format (with the checked-in
# .clang-format) makes of it. Skipped (77) where clang-format or git is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "clang-format not installed: skipping"; exit 77; }
git rev-parse --git-dir >/dev/null 2>&1 || { echo "not a git checkout: skipping"; exit 77; }
bad=0
while IFS= read -r f; do
    if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then
        echo "not clang-formatted: $f (run: clang-format -i $f)"
        bad=1
    fi
done < <(git ls-files '*.c' '*.h' '*.cu')
exit $bad
