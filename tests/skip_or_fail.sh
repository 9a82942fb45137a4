# shellcheck shell=sh
# tests/skip_or_fail.sh - the one rule for a test whose software dependency is missing
# (sourced by the test scripts; POSIX sh). The C tests follow the same rule through
# sl_test_skip() in tests/test_util.c.
#
# Outside CI a missing tool or package (PyTorch, clang's fuzzer runtime, clang-format, ...)
# makes the test report itself skipped: exit 77, which ctest shows as "Skipped", with the
# reason printed. Under CI (environment CI=true or CI=1) the dependency step installed
# everything, so a missing dependency is a broken environment and the test FAILS: a green CI
# run then means every test really ran. Missing hardware (a GPU) is not a dependency: those
# tests skip everywhere, CI included (CI has no GPU).

# True (0) when running under CI.
sl_under_ci() {
    case "${CI:-}" in
    true | TRUE | True | 1) return 0 ;;
    *) return 1 ;;
    esac
}

# skip_or_fail REASON...: ends the test: exit 77 (skipped), or exit 1 under CI.
skip_or_fail() {
    if sl_under_ci; then
        echo "FAIL: $* (a missing dependency is a failure under CI=$CI)"
        exit 1
    fi
    echo "SKIP: $*"
    exit 77
}

# skip_part_or_fail REASON...: for one optional part of a test. Outside CI prints the reason
# and returns 0 (the caller skips that part); under CI prints a failure and returns 1 (the
# caller counts a failure, or set -e ends the test).
skip_part_or_fail() {
    if sl_under_ci; then
        echo "FAIL: $* (a missing dependency is a failure under CI=$CI)"
        return 1
    fi
    echo "SKIP (part): $*"
    return 0
}
