#!/bin/sh
# tests/test_nvcc_wrapper.sh SRC_DIR WORK_DIR - cmake/nvcc_resource_usage.sh, the CUDA compiler
# launcher, with a stand-in for nvcc (so it runs on any machine): ptxas's resource lines go to
# DIR/<object>.txt and the rest to stderr; a C75xx advisory (wgmma serialized) fails the compile
# and removes the object, as spills do (docs/cuda.md, "Resources").
set -u
SRC=$1
WORK=$2
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
fail=0
# fake_nvcc LINE... -o OBJ: prints the lines on stderr, writes OBJ, exits 0
cat >fake_nvcc <<'SH'
#!/bin/sh
obj=
prev=
for a in "$@"; do
    [ "$prev" = "-o" ] && obj=$a
    prev=$a
done
for a in "$@"; do
    [ "$a" = "-o" ] && break
    printf '%s\n' "$a" >&2
done
echo built >"$obj"
SH
chmod +x fake_nvcc
wrap() { sh "$SRC/cmake/nvcc_resource_usage.sh" "$WORK/d" ./fake_nvcc "$@"; }

# a clean compile: rc 0, the object kept, the info lines in the report only
wrap "ptxas info    : Used 168 registers, used 16 barriers" "a remark" -o ok.o 2>err1
rc=$?
if [ $rc != 0 ] || [ ! -f ok.o ] || grep -q "Used 168" err1 || ! grep -q "a remark" err1 ||
    ! grep -q "Used 168" d/ok.o.txt; then
    echo "FAIL: clean compile: rc $rc, object $(ls ok.o 2>/dev/null), stderr: $(cat err1)"
    fail=1
fi
# a serialized wgmma: rc 1, no object, the advisory and the reason on stderr
wrap "ptxas info    : (C7517) warpgroup.wait is injected in around line 81 by compiler" \
    -o bad.o 2>err2
rc=$?
if [ $rc != 1 ] || [ -f bad.o ] || ! grep -q "(C7517)" err2 ||
    ! grep -q "bad.o: ptxas serialized wgmma" err2; then
    echo "FAIL: C75xx advisory: rc $rc, object $(ls bad.o 2>/dev/null), stderr: $(cat err2)"
    fail=1
fi
[ $fail = 0 ] && echo "test_nvcc_wrapper: OK"
exit $fail
