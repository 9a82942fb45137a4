#!/usr/bin/env bash
# Installs the Debian packages sluice needs (as root), or prints the apt-get line to run.
#
# usage: launch/install-deps.sh [--build] [--tests] [--corpus]
#   --build   compiler-side dependencies (always included)
#   --tests   also what the test suite uses: PyTorch/NumPy for the cross-check, clang's
#             fuzzer runtime, the zstd CLI, gnuplot (sluice eval --plot, sluice plot), Node.js
#             and npm (the tokenizer test's JavaScript reference), bible-kjv (its corpus)
#   --corpus  also the quickstart's corpus (bible-kjv)
# Exit status: 0 when everything is present (after installing it), 1 when packages are
# missing and this is not root.
set -euo pipefail

pkgs=(build-essential cmake pkg-config libopenmpi-dev openmpi-bin libopenblas-dev
      libopenblas-openmp-dev libzstd-dev libcjson-dev zstd libboost-context-dev
      libpcre2-dev libutf8proc-dev nettle-dev)
# Tools wanted as commands, whichever package provides them (a Node.js from another source
# brings its own npm, which Debian's npm package would conflict with): command:package.
tools=()
for arg in "$@"; do
    case "$arg" in
    --build) ;;
    --tests) pkgs+=(python3-torch python3-numpy clang libclang-rt-14-dev patchelf gnuplot-nox
                   bible-kjv)
             tools+=(node:nodejs npm:npm) ;;
    --corpus) pkgs+=(bible-kjv) ;;
    -h | --help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "install-deps: unknown option $arg" >&2; exit 2 ;;
    esac
done

missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
for t in ${tools[@]+"${tools[@]}"}; do
    command -v "${t%%:*}" >/dev/null 2>&1 || missing+=("${t#*:}")
done
[ ${#missing[@]} -eq 0 ] && exit 0

line="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
    echo "sluice needs these Debian packages; run as root:" >&2
    echo "  apt-get update && $line" >&2
    exit 1
fi
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
