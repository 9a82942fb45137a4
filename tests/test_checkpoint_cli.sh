#!/usr/bin/env bash
# tests/test_checkpoint_cli.sh SLUICE TEST_CHECKPOINT WORK_DIR CONFIG
#
# `sluice ckpt info | verify | export` on a checkpoint written by 4 simulated ranks
# (test_checkpoint --example): info shows the step, tokens, layout, tensors and files; verify
# passes on the sound checkpoint and fails with one line naming the file and tensor per problem
# on damaged copies; export writes Hugging Face directories (bf16 in several shards, fp32 in
# one) that /usr/bin/python3 + PyTorch read with a small safetensors parser (Debian ships no
# safetensors package), with values equal to the checkpoint's (bf16: torch's own rounding); a
# failed export (a damaged checkpoint) leaves the output directory as it was, and an export
# over an earlier one keeps the user's files in it.
set -u
. "$(dirname "$0")/skip_or_fail.sh"
SLUICE=$1
TESTCK=$2
WORK=$3
CONFIG=$4
fails=0
fail() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}
expect_rc() { # expect_rc WANT what... (the command's output is in $out, status in $rc)
    local want=$1
    shift
    [ "$rc" -eq "$want" ] || fail "$* exited $rc, expected $want; output: $out"
}
has() { # has TEXT what...
    local text=$1
    shift
    case "$out" in *"$text"*) ;; *) fail "$*: output lacks '$text': $out" ;; esac
}

rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
"$TESTCK" --example "$WORK/ex" 4 "$CONFIG" || {
    echo "FAIL: writing the example checkpoint"
    exit 1
}
RUN=$WORK/ex/run
STEP=$RUN/checkpoints/step-7

# ---- info ----
out=$("$SLUICE" ckpt info "$RUN" 2>&1)
rc=$?
expect_rc 0 info
has "step        7" info
[ "$(grep -c '^step ' <<<"$out")" -eq 1 ] || fail "info prints the step once: $out"
has "tokens      7000" info
has 'layout      {"world":4}' info
has "ranks       4" info
has "stage       pretrain" info
has "tensors     8 (5 model, 3 optimizer state)" info
has "rank-00003.safetensors" info
out=$("$SLUICE" ckpt info --tensors "$STEP" 2>&1)
rc=$?
expect_rc 0 "info --tensors"
has "layers.0.mlp.experts.down_proj F32 [8, 24, 3] 4" "info --tensors"
out=$("$SLUICE" ckpt info "$WORK/nothing" 2>&1)
rc=$?
expect_rc 1 "info of a missing path"
has "nothing" "info of a missing path"
out=$("$SLUICE" ckpt info 2>&1)
rc=$?
expect_rc 2 "info without PATH"
has "sluice ckpt info: error: PATH is required" "info without PATH"
has "(sluice ckpt info --help shows the options)" "info without PATH"
[ "$(wc -l <<<"$out")" -eq 2 ] || fail "info without PATH: two lines, not the whole help: $out"
out=$("$SLUICE" ckpt info "$STEP" "$RUN" 2>&1)
rc=$?
expect_rc 2 "info with two paths"
has "sluice ckpt info: error: unexpected argument '$RUN' (one PATH expected)" "info with two paths"
out=$("$SLUICE" ckpt verify "$STEP" "$RUN" 2>&1)
rc=$?
expect_rc 2 "verify with two paths"
has "sluice ckpt verify: error: unexpected argument '$RUN' (one PATH expected)" "verify with two paths"
out=$("$SLUICE" ckpt frob "$RUN" 2>&1)
rc=$?
expect_rc 2 "unknown subcommand"
has "sluice ckpt: error: unknown subcommand 'frob' (info, verify or export)" "unknown subcommand"
out=$("$SLUICE" ckpt --help 2>&1)
rc=$?
expect_rc 0 "ckpt --help"
has "export" "ckpt --help"

# ---- verify ----
out=$("$SLUICE" ckpt verify "$RUN" 2>&1)
rc=$?
expect_rc 0 verify
has ": OK (step 7, 8 tensors in 20 pieces, 4 files" verify

# a flipped byte in rank 1's data file (its last byte: inside the data of its last piece)
cp -r "$STEP" "$WORK/flip"
off=$(($(stat -c %s "$WORK/flip/rank-00001.safetensors") - 1))
printf '\x55' | dd of="$WORK/flip/rank-00001.safetensors" bs=1 seek="$off" conv=notrunc status=none
out=$("$SLUICE" ckpt verify "$WORK/flip" 2>&1)
rc=$?
expect_rc 1 "verify of a flipped byte"
has "rank-00001.safetensors: tensor '" "verify of a flipped byte"
has "DAMAGED (1 problem)" "verify of a flipped byte"
n=$(printf '%s\n' "$out" | grep -c '^sluice: error:')
[ "$n" -eq 1 ] || fail "one line for one problem, got $n: $out"

# a missing manifest and a missing data file: one line each, and what follows from them
cp -r "$STEP" "$WORK/gone"
rm "$WORK/gone/rank-00002.manifest.json" "$WORK/gone/rank-00003.safetensors"
out=$("$SLUICE" ckpt verify "$WORK/gone" 2>&1)
rc=$?
expect_rc 1 "verify with missing files"
has "rank-00002.manifest.json: cannot open" "verify with missing files"
has "rank-00003.safetensors: missing" "verify with missing files"
has "are missing: no rank saved them" "verify with missing files"
out=$("$SLUICE" ckpt verify "$RUN/checkpoints/step-99" 2>&1)
rc=$?
expect_rc 1 "verify of a missing checkpoint"

# an uncommitted directory is refused
cp -r "$STEP" "$RUN/checkpoints/.tmp-step-8"
rm "$RUN/checkpoints/.tmp-step-8/COMMIT"
out=$("$SLUICE" ckpt verify "$RUN/checkpoints/.tmp-step-8" 2>&1)
rc=$?
expect_rc 1 "verify of an uncommitted directory"
has "not a committed checkpoint" "verify of an uncommitted directory"
rm -rf "$RUN/checkpoints/.tmp-step-8"

# ---- export ----
out=$("$SLUICE" ckpt export "$RUN" -o "$WORK/hf16" --dtype bf16 --shard-size 4K 2>&1)
rc=$?
expect_rc 0 "export bf16"
# Hugging Face names: each expert stack splits into 8 experts' gate/up/down projections
has "exported 27 tensors of step 7" "export bf16"
nshards=$(ls "$WORK/hf16" | grep -c '^model-.*-of-.*\.safetensors$')
[ "$nshards" -ge 2 ] || fail "bf16 export in 4 KiB shards: $nshards files"
out=$("$SLUICE" ckpt export "$RUN" -o "$WORK/hf32" 2>&1)
rc=$?
expect_rc 0 "export fp32"
[ -f "$WORK/hf32/model.safetensors" ] || fail "fp32 export: one model.safetensors"
out=$("$SLUICE" ckpt export "$RUN" -o "$WORK/hfx" --dtype fp16 2>&1)
rc=$?
expect_rc 2 "export --dtype fp16"
out=$("$SLUICE" ckpt export "$RUN" 2>&1)
rc=$?
expect_rc 2 "export without -o"

# A failed export leaves the directory as it was: the export is written beside it and replaces
# it only when complete (it used to remove the earlier export's weights first, so a damaged
# checkpoint left only config.json). Files of the user's in it survive every export.
sums() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum); }
# a flipped byte in a model weight's piece (the flip above is in optimizer state, not exported)
cp -r "$STEP" "$WORK/flipw"
off=$(awk '/"tensor":.*gate_up_proj/ {f = 1} f && /"offset"/ {gsub(/[^0-9]/, ""); print; exit}' \
    "$WORK/flipw/rank-00001.manifest.json")
printf '\x55' | dd of="$WORK/flipw/rank-00001.safetensors" bs=1 seek=$((off + 5)) conv=notrunc status=none
out=$("$SLUICE" ckpt export "$RUN" -o "$WORK/keep" --shard-size 4K 2>&1)
rc=$?
expect_rc 0 "export into keep/"
echo "my notes" >"$WORK/keep/README.md"
mkdir -p "$WORK/keep/sub" && echo "mine" >"$WORK/keep/sub/file"
before=$(sums "$WORK/keep")
out=$("$SLUICE" ckpt export "$WORK/flipw" -o "$WORK/keep" 2>&1)
rc=$?
expect_rc 1 "export of a damaged checkpoint over keep/"
has "rank-00001.safetensors: tensor 'layers.0.mlp.experts.gate_up_proj'" \
    "export of a damaged checkpoint over keep/"
[ "$(sums "$WORK/keep")" = "$before" ] || fail "a failed export changed keep/: $(sums "$WORK/keep")"
[ "$(ls -A "$WORK" | grep -c export-)" -eq 0 ] || fail "a failed export left $(ls -A "$WORK")"
out=$("$SLUICE" ckpt export "$WORK/flipw" -o "$WORK/fresh" 2>&1)
rc=$?
expect_rc 1 "export of a damaged checkpoint into a new directory"
[ ! -e "$WORK/fresh" ] || fail "a failed export created fresh/: $(ls -A "$WORK/fresh")"
# a good export replaces the weights (4 KiB shards by one file) and keeps the user's files;
# through a symlink, the directory it names is replaced and the symlink stays
ln -s keep "$WORK/keep-link"
out=$("$SLUICE" ckpt export "$RUN" -o "$WORK/keep-link" 2>&1)
rc=$?
expect_rc 0 "export over keep/ through a symlink"
[ -L "$WORK/keep-link" ] || fail "the export replaced the symlink keep-link"
[ -f "$WORK/keep/model.safetensors" ] || fail "the new export's model.safetensors is missing"
ls "$WORK/keep" | grep -q '^model-' && fail "the earlier export's shards remain: $(ls "$WORK/keep")"
[ "$(cat "$WORK/keep/README.md" "$WORK/keep/sub/file" 2>&1)" = "my notes
mine" ] || fail "the user's files in keep/ were not kept: $(ls -AR "$WORK/keep")"
[ "$(ls -A "$WORK" | grep -c export-)" -eq 0 ] || fail "an export left $(ls -A "$WORK")"

CHECK_PY='
import json, os, struct, sys
import torch
d, exp, want_dtype = sys.argv[1], sys.argv[2], sys.argv[3]
DT = {"F32": torch.float32, "BF16": torch.bfloat16, "I64": torch.int64}
def load(path):
    """a minimal safetensors reader: u64 header length, JSON header, data section"""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    out = {}
    for name, t in hdr.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        buf = bytearray(raw[8 + n + b:8 + n + e])
        x = torch.frombuffer(buf, dtype=DT[t["dtype"]]) if buf else torch.empty(0, dtype=DT[t["dtype"]])
        out[name] = x.reshape(t["shape"])
    return out
index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
tensors = {}
for f in sorted(set(index["weight_map"].values())):
    for k, v in load(os.path.join(d, f)).items():
        assert index["weight_map"][k] == f, (k, f)
        tensors[k] = v
assert not any(k.startswith("optim.") for k in tensors), "optimizer state exported"
assert len(tensors) == 27, sorted(tensors)
total = sum(t.numel() * t.element_size() for t in tensors.values())
assert index["metadata"]["total_size"] == total, (index["metadata"], total)
import re
def source(k, n):
    """the checkpoint tensor and element offset an exported tensor of n elements was cut from (the Hugging
    Face Qwen3-MoE split, written here independently of model/hf_export.c)"""
    m = re.fullmatch(r"(.*\.mlp\.experts\.)(\d+)\.(gate|up|down)_proj\.weight", k)
    if not m:
        return k, 0
    e, part = int(m.group(2)), m.group(3)
    if part == "down":
        return m.group(1) + "down_proj", e * n
    off = e * 2 * n + (n if part == "up" else 0)
    return m.group(1) + "gate_up_proj", off
for k, t in tensors.items():
    assert t.dtype == DT[want_dtype], (k, t.dtype)
    src, off = source(k, t.numel())
    ref = torch.frombuffer(bytearray(open(os.path.join(exp, src + ".f32"), "rb").read()) or bytearray(4),
                           dtype=torch.float32)[off: off + t.numel()].reshape(t.shape)
    if want_dtype == "BF16":
        ref = ref.to(torch.bfloat16)
    assert torch.equal(t, ref), k
cfg = json.load(open(os.path.join(d, "config.json")))
assert cfg["model_type"] == "qwen3_moe" and cfg["hidden_size"] == 128, cfg
print("python: %d tensors, %d bytes, %s, values identical" % (len(tensors), total, want_dtype))
'
if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    /usr/bin/python3 -c "$CHECK_PY" "$WORK/hf16" "$WORK/ex/expected" BF16 || fail "python check of the bf16 export"
    /usr/bin/python3 -c "$CHECK_PY" "$WORK/hf32" "$WORK/ex/expected" F32 || fail "python check of the fp32 export"
else
    skip_part_or_fail "/usr/bin/python3 with PyTorch (python3-torch) not available for the export check" ||
        fails=$((fails + 1))
fi

if [ "$fails" -ne 0 ]; then
    echo "test_checkpoint_cli: $fails failure(s)"
    exit 1
fi
echo "test_checkpoint_cli: all checks passed"
