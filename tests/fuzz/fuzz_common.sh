# tests/fuzz/fuzz_common.sh - what the libFuzzer drivers share (sourced by run_fuzz*.sh after
# tests/skip_or_fail.sh, then fuzz_start).

# fuzz_start SRC WORK SECONDS DEFAULT: sets SRC and WORK, SECS ($SLUICE_FUZZ_SECONDS, else
# SECONDS when not empty, else DEFAULT) and CLANG ($CLANG, else clang); makes WORK the current
# directory and checks clang (fuzz_require_clang, below).
fuzz_start() {
    SRC=$1
    WORK=$2
    SECS=${SLUICE_FUZZ_SECONDS:-${3:-$4}}
    CLANG=${CLANG:-clang}
    mkdir -p "$WORK" || exit 1
    cd "$WORK" || exit 1
    fuzz_require_clang
}

# Skips (77), or fails under CI=true, when clang or its libFuzzer runtime is missing; exits 1
# when clang cannot link a fuzzer for another reason.
fuzz_require_clang() {
    if ! command -v "$CLANG" > /dev/null 2>&1; then
        skip_or_fail "fuzz: $CLANG not found (apt-get install clang)"
    fi
    # Is the libFuzzer runtime there? (Debian: libclang-rt-NN-dev / libclang-common-NN-dev)
    printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' > probe.c
    if ! "$CLANG" -fsanitize=fuzzer,address,undefined probe.c -o probe > probe.log 2>&1; then
        if grep -qi "fuzzer" probe.log && grep -qiE "no such file|cannot find|not found" probe.log; then
            cat probe.log
            skip_or_fail "fuzz: clang's libFuzzer runtime is not installed (Debian: libclang-rt-NN-dev)"
        fi
        echo "fuzz: clang cannot link a fuzzer:"
        cat probe.log
        exit 1
    fi
}

# fuzz_build BINARY CLANG_ARGS...: compiles and links a harness with the sanitizers and the
# fuzzer (sources, objects and libraries in CLANG_ARGS); exits 1 when it does not build.
fuzz_build() {
    out=$1
    shift
    if ! "$CLANG" -std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer \
        -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
        -Wall -Wextra -Werror -I"$SRC" "$@" -o "$out"; then
        echo "fuzz: the harness does not build"
        exit 1
    fi
}

# fuzz_run BINARY SECONDS [libFuzzer options...]: runs ./BINARY on corpus/ and seeds/ and exits
# 0 without findings, 1 with one (its reproducer is named).
fuzz_run() {
    bin=$1
    secs=$2
    shift 2
    echo "fuzz: running for $secs s"
    rm -f crash-* # an earlier run's, so that the reproducer named below is this run's
    "./$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$PWD/crash-" "$@" corpus seeds
    rc=$?
    if [ $rc -ne 0 ]; then
        echo "fuzz: FAILED (exit $rc); reproduce with: $PWD/$bin $PWD/crash-*"
        exit 1
    fi
    echo "fuzz: no findings"
    exit 0
}
