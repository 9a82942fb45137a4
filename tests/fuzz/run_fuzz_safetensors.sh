#!/bin/sh
# tests/fuzz/run_fuzz_safetensors.sh SRC_DIR WORK_DIR [SECONDS]
#
# Builds the safetensors fuzzer (tests/fuzz/fuzz_safetensors.c: the reader, and the writer on
# what the reader accepts) with clang -fsanitize=fuzzer,address,undefined, seeds it with small
# files of every dtype, shape kind and metadata (written here by python3), and runs it for
# SECONDS (default 15, or $SLUICE_FUZZ_SECONDS). The same scheme as run_fuzz.sh: exit 0 no
# finding, 1 a crash/sanitizer report or a build failure of the harness, 77 (skipped) only when
# clang, its libFuzzer runtime or python3 (for the seeds) is not installed, and under CI=true
# not even then.
set -u
. "$(dirname "$0")/../skip_or_fail.sh"
. "$(dirname "$0")/fuzz_common.sh"
fuzz_start "$1" "$2" "${3:-}" 15
command -v python3 > /dev/null 2>&1 || skip_or_fail "fuzz: python3 not found (it writes the seeds)"

CJSON_FLAGS=$(pkg-config --libs libcjson 2>/dev/null || echo -lcjson)
fuzz_build fuzz_safetensors "$SRC/tests/fuzz/fuzz_safetensors.c" "$SRC/io/safetensors_reader.c" \
    "$SRC/io/safetensors_writer.c" "$SRC/io/safetensors_common.c" "$SRC/core/fsutil.c" \
    "$SRC/core/log.c" $CJSON_FLAGS -lm

rm -rf seeds corpus tmp && mkdir -p seeds corpus tmp
python3 - seeds << 'EOF' || exit 1
import json, os, struct, sys

SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I16": 2,
         "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}


def write(name, tensors, metadata=None, pad=0):
    """tensors: [(name, dtype, shape)], laid out in order, data bytes counting up."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for t, dtype, shape in tensors:
        n = SIZES[dtype]
        for d in shape:
            n *= d
        header[t] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + n]}
        data += bytes((len(data) + k) % 251 for k in range(n))
    h = json.dumps(header, ensure_ascii=False).encode()
    h += b" " * ((8 - len(h) % 8) % 8 + pad)
    with open(os.path.join(sys.argv[1], name), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


write("mixed", [("a", "F32", [2, 3]), ("b", "BF16", [4]), ("c", "I64", []), ("d", "U8", [0]),
                ("e", "BOOL", [3])], {"format": "pt"})
write("hf", [("model.embed_tokens.weight", "BF16", [4, 2]),
             ("model.layers.0.mlp.experts.3.down_proj.weight", "F16", [2, 2]),
             ("lm_head.weight", "BF16", [4, 2])], {"format": "pt", "sluice_step": "7"}, pad=16)
write("dtypes", [(d.lower(), d, [2]) for d in SIZES])
write("empty", [])
write("names", [("\u00e9\u540d\u524d \"q\"\\", "U16", [1, 1, 1, 1, 1, 1, 1, 1]),
                ("\t\n", "I8", [2, 0, 3])], {"k\u00e9y": "v\na\"l\\", "": ""})
EOF

# where the harness writes the files it rewrites
TMPDIR=$PWD/tmp
export TMPDIR
fuzz_run fuzz_safetensors "$SECS"
