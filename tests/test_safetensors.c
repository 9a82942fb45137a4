/*
 * tests/test_safetensors.c - the safetensors reader and writer: round trips (several dtypes,
 * a scalar, an empty tensor, chunked writes, metadata), interop with files written and read by
 * Python/numpy in the exact byte layout, a catalog of corrupt files each rejected with a message
 * naming the file and the problem (tests/test_safetensors_corrupt.c, part of the same program),
 * and the writer's atomicity (abort or failure leaves the
 * destination untouched and no temp file behind).
 */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "tests/test_safetensors.h"
#include "tests/test_util.h"

char tst_dir[256];

const char *tst_path(const char *name) {
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/%s", tst_dir, name);
    return p;
}

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

void tst_write_bytes(const char *path, const void *data, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(data, 1, n, fp) != n || fclose(fp) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

static size_t read_bytes(const char *path, void *dst, size_t cap) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return 0;
    size_t n = fread(dst, 1, cap, fp);
    fclose(fp);
    return n;
}

/* Number of entries in tst_dir whose name starts with prefix. */
static int count_files(const char *prefix) {
    DIR *d = opendir(tst_dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
    if (d) closedir(d);
    return n;
}

/* Runs /usr/bin/python3 -c script arg; returns its exit status, or 77 when /usr/bin/python3
 * is missing (a missing numpy makes the script fail). */
static int run_python(const char *script, const char *arg) {
    if (access("/usr/bin/python3", X_OK) != 0) return 77;
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/usr/bin/python3", "python3", "-c", script, arg, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

static uint16_t bf16_of(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16); /* the test values are exact in bf16 */
}

/* ---- round trip ---- */

static const char *k_odd_name = "na\xc3\xafve \"q\" \\ \xe2\x9c\x93\n"; /* UTF-8, quote, escape */

static void test_round_trip(void) {
    const char *path = tst_path("rt.safetensors");
    char err[512];
    float a[6] = {0, 1.5f, -2, 3.25f, 1e-3f, -7};
    uint16_t bf[5];
    const float bfv[5] = {1, -2.5f, 3.140625f, 0, 65536};
    for (int i = 0; i < 5; i++) bf[i] = bf16_of(bfv[i]);
    int32_t i32[8] = {-1, 2, -3, 4, 2147483647, -2147483647 - 1, 0, 9};
    int64_t i64[3] = {INT64_C(-5000000000), 0, INT64_C(123456789012345)};
    uint8_t u8[7] = {1, 2, 3, 4, 5, 6, 255};
    float scalar = 42.5f;
    double f64[5] = {0.1, -0.2, 1e300, 0, 3};
    enum { BIG = 100003 };
    float *big = malloc(sizeof(float) * BIG);
    for (int i = 0; i < BIG; i++) big[i] = (float)i * 0.25f;

    sl_st_writer *w = sl_st_writer_open(path, err, sizeof err);
    CHECK(w != NULL, "writer_open: %s", err);
    if (!w) return;
    CHECK(sl_st_writer_set_metadata(w, "format", "pt") == 0, "metadata");
    CHECK(sl_st_writer_set_metadata(w, "note", "line1\nline2 \"quoted\" \xc3\xa9") == 0, "meta");
    CHECK(sl_st_writer_set_metadata(w, "format", "sluice") == 0, "metadata replace");
    CHECK(sl_st_writer_declare(w, "a", "F32", 2, (int64_t[]){2, 3}) == 0, "declare a");
    CHECK(sl_st_writer_declare(w, "bf", "BF16", 1, (int64_t[]){5}) == 1, "declare bf");
    CHECK(sl_st_writer_declare(w, "i32", "I32", 3, (int64_t[]){2, 2, 2}) == 2, "declare i32");
    CHECK(sl_st_writer_declare(w, "u8", "U8", 1, (int64_t[]){7}) == 3, "declare u8");
    CHECK(sl_st_writer_declare(w, "i64", "I64", 1, (int64_t[]){3}) == 4, "declare i64");
    CHECK(sl_st_writer_declare(w, "scalar", "F32", 0, NULL) == 5, "declare scalar");
    CHECK(sl_st_writer_declare(w, "empty", "F32", 2, (int64_t[]){0, 4}) == 6, "declare empty");
    CHECK(sl_st_writer_declare(w, "f64", "F64", 5, (int64_t[]){5, 1, 1, 1, 1}) == 7, "f64");
    CHECK(sl_st_writer_declare(w, k_odd_name, "F32", 1, (int64_t[]){BIG}) == 8, "odd name");
    CHECK(sl_st_writer_begin_data(w) == 0, "begin_data: %s", sl_st_writer_error(w));
    CHECK(sl_st_writer_write(w, "a", a, sizeof a) == 0, "write a");
    CHECK(sl_st_writer_write(w, "bf", bf, sizeof bf) == 0, "write bf");
    /* i32 in two chunks, u8 and i64 whole */
    CHECK(sl_st_writer_write_chunk(w, i32, 12) == 0, "chunk 1");
    CHECK(sl_st_writer_write_chunk(w, (char *)i32 + 12, 20) == 0, "chunk 2");
    CHECK(sl_st_writer_write(w, "u8", u8, sizeof u8) == 0, "write u8");
    CHECK(sl_st_writer_write(w, "i64", i64, sizeof i64) == 0, "write i64");
    CHECK(sl_st_writer_write(w, "scalar", &scalar, 4) == 0, "write scalar");
    /* "empty" needs no write: skip straight to f64 */
    CHECK(sl_st_writer_write(w, "f64", f64, sizeof f64) == 0, "write f64: %s",
          sl_st_writer_error(w));
    for (size_t off = 0; off < sizeof(float) * BIG;) { /* uneven chunks */
        size_t n = sizeof(float) * BIG - off < 65537 ? sizeof(float) * BIG - off : 65537;
        CHECK(sl_st_writer_write_chunk(w, (char *)big + off, n) == 0, "big chunk at %zu", off);
        off += n;
    }
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    CHECK(exists(tmp) && !exists(path), "data goes to the temp file %s until close", tmp);
    CHECK(sl_st_writer_close(w, err, sizeof err) == 0, "close: %s", err);
    CHECK(!exists(tmp) && exists(path), "close renames the temp file");

    /* the header length is a multiple of 8 and the header starts with '{' */
    unsigned char head[9];
    CHECK(read_bytes(path, head, 9) == 9, "read head");
    uint64_t hl = 0;
    for (int k = 7; k >= 0; k--) hl = (hl << 8) | head[k];
    CHECK(hl % 8 == 0 && head[8] == '{', "header length %llu aligned, starts with '{'",
          (unsigned long long)hl);

    sl_st_file *f = sl_st_open(path, err, sizeof err);
    CHECK(f != NULL, "open: %s", err);
    if (!f) return;
    CHECK(sl_st_count(f) == 9, "count %d", sl_st_count(f));
    const char *names[9] = {"a", "bf", "i32", "u8", "i64", "scalar", "empty", "f64", k_odd_name};
    for (int i = 0; i < 9 && i < sl_st_count(f); i++) {
        CHECK(strcmp(sl_st_name_at(f, i), names[i]) == 0, "name %d", i);
        CHECK(sl_st_find(f, names[i]) == i, "find %s", names[i]);
    }
    CHECK(sl_st_find(f, "nope") == -1 && sl_st_find(f, "") == -1, "find missing");
    int ia = sl_st_find(f, "a");
    CHECK(strcmp(sl_st_dtype(f, ia), "F32") == 0 && sl_st_ndim(f, ia) == 2 &&
              sl_st_shape(f, ia)[0] == 2 && sl_st_shape(f, ia)[1] == 3 && sl_st_numel(f, ia) == 6 &&
              sl_st_nbytes(f, ia) == 24,
          "a's dtype and shape");
    float ra[6];
    CHECK(sl_st_read(f, ia, ra, sizeof ra, err, sizeof err) == 0 && !memcmp(ra, a, sizeof a),
          "a data");
    uint16_t rbf[5];
    int ib = sl_st_find(f, "bf");
    CHECK(strcmp(sl_st_dtype(f, ib), "BF16") == 0, "bf dtype");
    CHECK(sl_st_read(f, ib, rbf, sizeof rbf, err, sizeof err) == 0 && !memcmp(rbf, bf, sizeof bf),
          "bf data");
    int32_t r32[8];
    int ii = sl_st_find(f, "i32");
    CHECK(sl_st_ndim(f, ii) == 3 && strcmp(sl_st_dtype(f, ii), "I32") == 0, "i32 meta");
    CHECK(sl_st_read(f, ii, r32, sizeof r32, err, sizeof err) == 0 && !memcmp(r32, i32, sizeof i32),
          "i32 data");
    uint8_t r8[7];
    CHECK(sl_st_read(f, sl_st_find(f, "u8"), r8, 7, err, sizeof err) == 0 && !memcmp(r8, u8, 7),
          "u8 data");
    int64_t r64[3];
    CHECK(sl_st_read(f, sl_st_find(f, "i64"), r64, sizeof r64, err, sizeof err) == 0 &&
              !memcmp(r64, i64, sizeof i64),
          "i64 data (after an odd-sized tensor: unaligned in the file)");
    int is = sl_st_find(f, "scalar");
    float rs = 0;
    CHECK(sl_st_ndim(f, is) == 0 && sl_st_numel(f, is) == 1 && sl_st_nbytes(f, is) == 4,
          "scalar meta");
    CHECK(sl_st_read(f, is, &rs, 4, err, sizeof err) == 0 && rs == 42.5f, "scalar data");
    int ie = sl_st_find(f, "empty");
    CHECK(sl_st_ndim(f, ie) == 2 && sl_st_shape(f, ie)[0] == 0 && sl_st_shape(f, ie)[1] == 4 &&
              sl_st_nbytes(f, ie) == 0 && sl_st_numel(f, ie) == 0,
          "empty meta");
    CHECK(sl_st_read(f, ie, NULL, 0, err, sizeof err) == 0, "empty read: %s", err);
    double rf64[5];
    int i6 = sl_st_find(f, "f64");
    CHECK(sl_st_ndim(f, i6) == 5 && sl_st_shape(f, i6)[0] == 5, "f64 meta");
    CHECK(sl_st_read(f, i6, rf64, sizeof rf64, err, sizeof err) == 0 &&
              !memcmp(rf64, f64, sizeof f64),
          "f64 data");
    float *rbig = malloc(sizeof(float) * BIG);
    int io = sl_st_find(f, k_odd_name);
    CHECK(io == 8 && sl_st_read(f, io, rbig, sizeof(float) * BIG, err, sizeof err) == 0 &&
              !memcmp(rbig, big, sizeof(float) * BIG),
          "big data under an escaped name");
    float part[3];
    CHECK(sl_st_read_part(f, io, 4 * 1000, part, sizeof part, err, sizeof err) == 0 &&
              part[0] == 250.0f && part[2] == 250.5f,
          "read_part");
    CHECK(sl_st_read_part(f, io, 4 * (BIG - 1), part, 8, err, sizeof err) != 0 &&
              strstr(err, "outside"),
          "read_part past the tensor: %s", err);
    CHECK(sl_st_read(f, ia, ra, 20, err, sizeof err) != 0 && strstr(err, path) &&
              strstr(err, "tensor 'a': read of 20 bytes, but shape [2, 3] of F32 is 24 bytes"),
          "read size mismatch: %s", err);
    CHECK(sl_st_read(f, 99, ra, 24, err, sizeof err) != 0 && strstr(err, "out of range"),
          "read index out of range: %s", err);
    CHECK(sl_st_metadata_count(f) == 2, "metadata count");
    CHECK(sl_st_metadata(f, "format") && strcmp(sl_st_metadata(f, "format"), "sluice") == 0,
          "metadata format (replaced)");
    CHECK(sl_st_metadata(f, "note") &&
              strcmp(sl_st_metadata(f, "note"), "line1\nline2 \"quoted\" \xc3\xa9") == 0,
          "metadata with escapes");
    CHECK(sl_st_metadata(f, "missing") == NULL, "metadata missing");
    sl_st_close(f);
    free(big), free(rbig);

    /* Python reads the file with json/struct/numpy */
    static const char *py_check =
        "import sys, json, struct, numpy as np\n"
        "b = open(sys.argv[1], 'rb').read()\n"
        "(n,) = struct.unpack('<Q', b[:8])\n"
        "assert n % 8 == 0, n\n"
        "h = json.loads(b[8:8 + n].decode('utf-8'))\n"
        "d = b[8 + n:]\n"
        "def get(name, dt):\n"
        "    e = h[name]; s, t = e['data_offsets']\n"
        "    return np.frombuffer(d[s:t], dtype=dt).reshape(e['shape'])\n"
        "assert h['__metadata__'] == {'format': 'sluice', 'note': 'line1\\nline2 \"quoted\" "
        "\\u00e9'}, h['__metadata__']\n"
        "assert (get('a', '<f4') == np.array([[0, 1.5, -2], [3.25, 1e-3, -7]], "
        "dtype=np.float32)).all()\n"
        "bf = (get('bf', '<u2').astype(np.uint32) << 16).view(np.float32)\n"
        "assert (bf == [1, -2.5, 3.140625, 0, 65536]).all(), bf\n"
        "assert get('i64', '<i8').tolist() == [-5000000000, 0, 123456789012345]\n"
        "assert get('scalar', '<f4').shape == () and get('scalar', '<f4') == 42.5\n"
        "assert get('empty', '<f4').shape == (0, 4)\n"
        "big = get('na\\u00efve \"q\" \\\\ \\u2713\\n', '<f4')\n"
        "assert big.shape == (100003,) and (big == np.arange(100003) * 0.25).all()\n"
        "assert max(e['data_offsets'][1] for k, e in h.items() if k != '__metadata__') == "
        "len(d)\n";
    int rc = run_python(py_check, path);
    if (rc == 77)
        sl_test_skip("/usr/bin/python3 not available for the interop check");
    else
        CHECK(rc == 0, "python/numpy reading the sluice-written file (exit %d)", rc);
}

/* ---- a file written by Python/numpy ---- */

static void test_python_written(void) {
    static const char *py_write =
        "import sys, json, struct, numpy as np\n"
        "t = {\n"
        " 'model.embed_tokens.weight': ('F32', ((np.arange(12) - 5.5) / 4).astype(np.float32)"
        ".reshape(3, 4)),\n"
        " 'ids': ('I32', np.array([[-7, 0, 2147483647]], dtype=np.int32)),\n"
        " 'step': ('I64', np.array(123456789012, dtype=np.int64)),\n"
        " 'half': ('BF16', (np.array([1.0, -2.5, 3.140625, 0.0], dtype=np.float32)"
        ".view(np.uint32) >> 16).astype(np.uint16)),\n"
        " 'f64': ('F64', np.linspace(0, 1, 5)),\n"
        " 'mask': ('BOOL', np.array([True, False, True])),\n"
        " 'empty': ('F32', np.zeros((0, 3), dtype=np.float32)),\n"
        "}\n"
        "hdr = {'__metadata__': {'format': 'pt', 'source': 'numpy'}}\n"
        "blobs, off = [], 0\n"
        "# like the reference writer: larger elements first, then by name\n"
        "for name in sorted(t, key=lambda k: (-t[k][1].dtype.itemsize, k)):\n"
        "    dt, a = t[name]\n"
        "    b = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder('<')).tobytes()\n"
        "    hdr[name] = {'dtype': dt, 'shape': list(a.shape), 'data_offsets': [off, off + "
        "len(b)]}\n"
        "    blobs.append(b); off += len(b)\n"
        "h = json.dumps(hdr).encode('utf-8')\n"
        "h += b' ' * (-len(h) % 8)\n"
        "with open(sys.argv[1], 'wb') as f:\n"
        "    f.write(struct.pack('<Q', len(h))); f.write(h); f.write(b''.join(blobs))\n";
    const char *path = tst_path("py.safetensors");
    int rc = run_python(py_write, path);
    if (rc == 77) {
        sl_test_skip("/usr/bin/python3 not available for the numpy-written file");
        return;
    }
    CHECK(rc == 0, "python writer exit %d", rc);
    if (rc != 0) return;
    char err[512];
    sl_st_file *f = sl_st_open(path, err, sizeof err);
    CHECK(f != NULL, "open python file: %s", err);
    if (!f) return;
    CHECK(sl_st_count(f) == 7, "python count %d", sl_st_count(f));
    CHECK(sl_st_metadata(f, "format") && !strcmp(sl_st_metadata(f, "format"), "pt") &&
              sl_st_metadata(f, "source") && !strcmp(sl_st_metadata(f, "source"), "numpy"),
          "python metadata");

    int i = sl_st_find(f, "model.embed_tokens.weight");
    float e[12];
    CHECK(i >= 0 && sl_st_ndim(f, i) == 2 && sl_st_shape(f, i)[0] == 3 &&
              sl_st_shape(f, i)[1] == 4 && !strcmp(sl_st_dtype(f, i), "F32"),
          "embed meta");
    CHECK(i >= 0 && sl_st_read(f, i, e, sizeof e, err, sizeof err) == 0, "embed read: %s", err);
    bool ok = true;
    for (int k = 0; k < 12; k++) ok &= e[k] == ((float)k - 5.5f) / 4;
    CHECK(ok, "embed values");

    int32_t ids[3];
    i = sl_st_find(f, "ids");
    CHECK(i >= 0 && sl_st_shape(f, i)[0] == 1 && sl_st_shape(f, i)[1] == 3 &&
              sl_st_read(f, i, ids, sizeof ids, err, sizeof err) == 0 && ids[0] == -7 &&
              ids[1] == 0 && ids[2] == 2147483647,
          "ids");
    int64_t step = 0;
    i = sl_st_find(f, "step");
    CHECK(i >= 0 && sl_st_ndim(f, i) == 0 && !strcmp(sl_st_dtype(f, i), "I64") &&
              sl_st_read(f, i, &step, 8, err, sizeof err) == 0 && step == INT64_C(123456789012),
          "0-dim step");
    uint16_t half[4];
    i = sl_st_find(f, "half");
    CHECK(i >= 0 && !strcmp(sl_st_dtype(f, i), "BF16") &&
              sl_st_read(f, i, half, sizeof half, err, sizeof err) == 0 && half[0] == bf16_of(1) &&
              half[1] == bf16_of(-2.5f) && half[2] == bf16_of(3.140625f) && half[3] == 0,
          "bf16");
    double d[5];
    i = sl_st_find(f, "f64");
    CHECK(i >= 0 && sl_st_read(f, i, d, sizeof d, err, sizeof err) == 0 && d[0] == 0 &&
              d[1] == 0.25 && d[2] == 0.5 && d[3] == 0.75 && d[4] == 1,
          "f64");
    uint8_t m[3];
    i = sl_st_find(f, "mask");
    CHECK(i >= 0 && !strcmp(sl_st_dtype(f, i), "BOOL") &&
              sl_st_read(f, i, m, 3, err, sizeof err) == 0 && m[0] == 1 && m[1] == 0 && m[2] == 1,
          "bool");
    i = sl_st_find(f, "empty");
    CHECK(i >= 0 && sl_st_nbytes(f, i) == 0 && sl_st_shape(f, i)[0] == 0, "empty");
    sl_st_close(f);
}

/* ---- writer failures and atomicity ---- */

static void test_writer_atomic(void) {
    const char *dst = tst_path("dst.safetensors");
    char err[512], buf[64];
    tst_write_bytes(dst, "old contents", 12);
    float x[4] = {1, 2, 3, 4};

    /* abort mid-way: destination untouched, no temp file left */
    sl_st_writer *w = sl_st_writer_open(dst, err, sizeof err);
    CHECK(w != NULL, "open: %s", err);
    sl_st_writer_declare(w, "x", "F32", 1, (int64_t[]){4});
    sl_st_writer_declare(w, "y", "F32", 1, (int64_t[]){4});
    CHECK(sl_st_writer_write(w, "x", x, sizeof x) == 0, "write x");
    CHECK(count_files("dst.safetensors.tmp.") == 1, "temp file exists while writing");
    sl_st_writer_abort(w);
    CHECK(read_bytes(dst, buf, sizeof buf) == 12 && !memcmp(buf, "old contents", 12),
          "abort leaves the existing file untouched");
    CHECK(count_files("dst.safetensors.tmp.") == 0, "abort removes the temp file");

    /* close with a tensor not fully written */
    w = sl_st_writer_open(dst, err, sizeof err);
    sl_st_writer_declare(w, "x", "F32", 1, (int64_t[]){4});
    sl_st_writer_declare(w, "y", "F32", 1, (int64_t[]){4});
    sl_st_writer_write(w, "x", x, sizeof x);
    sl_st_writer_write_chunk(w, x, 8);
    CHECK(sl_st_writer_close(w, err, sizeof err) != 0 && strstr(err, dst) &&
              strstr(err, "tensor 'y': only 8 of its 16 bytes were written"),
          "incomplete close: %s", err);
    CHECK(read_bytes(dst, buf, sizeof buf) == 12 && !memcmp(buf, "old contents", 12) &&
              count_files("dst.safetensors.tmp.") == 0,
          "failed close leaves the destination untouched and no temp file");

    /* a tensor never written */
    w = sl_st_writer_open(dst, err, sizeof err);
    sl_st_writer_declare(w, "x", "F32", 1, (int64_t[]){4});
    CHECK(sl_st_writer_close(w, err, sizeof err) != 0 && strstr(err, "tensor 'x' (#0 of 1)"),
          "unwritten tensor: %s", err);

    /* the first error is sticky and reported at close */
    w = sl_st_writer_open(dst, err, sizeof err);
    sl_st_writer_declare(w, "x", "F32", 1, (int64_t[]){4});
    sl_st_writer_declare(w, "y", "F32", 1, (int64_t[]){4});
    CHECK(sl_st_writer_write(w, "y", x, sizeof x) != 0 &&
              strstr(sl_st_writer_error(w), "written out of order (the next declared tensor is "
                                            "'x')"),
          "out of order: %s", sl_st_writer_error(w));
    CHECK(sl_st_writer_write(w, "x", x, sizeof x) != 0, "sticky error");
    CHECK(sl_st_writer_close(w, err, sizeof err) != 0 && strstr(err, "out of order"),
          "close reports the first error: %s", err);

    struct {
        const char *what, *needle;
        int kind;
    } cases[] = {
        {"size mismatch", "tensor 'x': write of 12 bytes, but shape [4] of F32 is 16 bytes", 0},
        {"unknown dtype", "tensor 'q': unknown dtype 'F12'", 1},
        {"duplicate name", "tensor 'x': declared twice", 2},
        {"metadata late", "metadata 'k': set after the data phase began", 3},
        {"chunk too big", "tensor 'x': chunk of 20 bytes exceeds the 16 bytes remaining", 4},
        {"reserved name", "the name is reserved", 5},
        {"negative dim", "tensor 'n': shape[1] = -1 is invalid", 6},
        {"declare late", "tensor 'z': declared after the data phase began", 7},
        {"bad UTF-8 name", "name is not valid UTF-8", 8},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        w = sl_st_writer_open(dst, err, sizeof err);
        sl_st_writer_declare(w, "x", "F32", 1, (int64_t[]){4});
        switch (cases[c].kind) {
        case 0:
            sl_st_writer_write(w, "x", x, 12);
            break;
        case 1:
            sl_st_writer_declare(w, "q", "F12", 1, (int64_t[]){4});
            break;
        case 2:
            sl_st_writer_declare(w, "x", "F32", 1, (int64_t[]){4});
            sl_st_writer_begin_data(w);
            break;
        case 3:
            sl_st_writer_begin_data(w);
            sl_st_writer_set_metadata(w, "k", "v");
            break;
        case 4:
            sl_st_writer_write_chunk(w, buf, 20);
            break;
        case 5:
            sl_st_writer_declare(w, "__metadata__", "F32", 1, (int64_t[]){4});
            break;
        case 6:
            sl_st_writer_declare(w, "n", "F32", 2, (int64_t[]){4, -1});
            break;
        case 7:
            sl_st_writer_write(w, "x", x, sizeof x);
            sl_st_writer_declare(w, "z", "F32", 1, (int64_t[]){4});
            break;
        case 8:
            sl_st_writer_declare(w, "bad\xc0\x80", "F32", 1, (int64_t[]){4});
            break;
        }
        CHECK(sl_st_writer_close(w, err, sizeof err) != 0 && strstr(err, dst) &&
                  strstr(err, cases[c].needle),
              "%s: expected '%s' in: %s", cases[c].what, cases[c].needle, err);
        CHECK(read_bytes(dst, buf, sizeof buf) == 12 && !memcmp(buf, "old contents", 12),
              "%s: destination untouched", cases[c].what);
    }
    CHECK(count_files("dst.safetensors.tmp.") == 0, "no temp files left by failed writers");

    /* abort of a fresh destination leaves nothing; a successful close replaces the old file */
    const char *fresh = tst_path("fresh.safetensors");
    w = sl_st_writer_open(fresh, err, sizeof err);
    sl_st_writer_declare(w, "x", "F32", 1, (int64_t[]){4});
    sl_st_writer_write_chunk(w, x, 4);
    sl_st_writer_abort(w);
    CHECK(!exists(fresh) && count_files("fresh.safetensors") == 0, "aborted fresh write: no file");
    sl_st_writer_abort(NULL);

    w = sl_st_writer_open(dst, err, sizeof err);
    sl_st_writer_declare(w, "x", "F32", 1, (int64_t[]){4});
    sl_st_writer_write(w, "x", x, sizeof x);
    CHECK(sl_st_writer_close(w, err, sizeof err) == 0, "replace: %s", err);
    sl_st_file *f = sl_st_open(dst, err, sizeof err);
    float r[4] = {0};
    CHECK(f && sl_st_read(f, 0, r, sizeof r, err, sizeof err) == 0 && r[3] == 4,
          "replaced file readable: %s", err);
    sl_st_close(f);

    /* a file with no tensors at all */
    w = sl_st_writer_open(fresh, err, sizeof err);
    CHECK(sl_st_writer_close(w, err, sizeof err) == 0, "empty file: %s", err);
    f = sl_st_open(fresh, err, sizeof err);
    CHECK(f && sl_st_count(f) == 0, "empty file readable: %s", err);
    sl_st_close(f);

    /* a destination in a missing directory fails at open */
    w = sl_st_writer_open(tst_path("no/such/dir/x.safetensors"), err, sizeof err);
    CHECK(w == NULL && strstr(err, "cannot create temporary file"), "missing dir: %s", err);
}

static void cleanup(void) {
    DIR *d = opendir(tst_dir);
    struct dirent *e;
    char p[600];
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", tst_dir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(tst_dir);
}

int main(void) {
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tst_dir, sizeof tst_dir, "%s/sl_st_XXXXXX", base);
    if (!mkdtemp(tst_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip();
    test_python_written();
    test_corrupt();
    test_writer_atomic();
    cleanup();
    return sl_test_finish("test_safetensors");
}
