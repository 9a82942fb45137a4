/* tests/test_io_format.c - the shard format: CRC-32C, writer/reader round trips, `zstd -d`
 * interoperability, atomic writes, and the bad-input catalog (truncation, every single-bit flip,
 * wrong magic/version, token ids >= vocab, missing files, empty corpora). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/crc32c.h"
#include "io/paths.h"
#include "io/reader.h"
#include "io/shard.h"
#include "tests/test_util.h"

static char g_dir[256];

static void path_in(char *out, size_t n, const char *name) {
    snprintf(out, n, "%s/%s", g_dir, name);
}

static int rm_rf(const char *p) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", p);
    return system(cmd);
}

static uint64_t rng_state = 88172645463325252ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

/* Writes tokens[0..n) with documents starting at docs[0..nd) (sorted). */
static int write_shard(const char *path, const uint32_t *tok, size_t n, const uint64_t *docs,
                       size_t nd, uint32_t tb, uint32_t vocab, uint32_t frame_tokens, int threads) {
    char err[1024];
    sl_shard_writer_opts o = {.token_bytes = tb,
                              .vocab_size = vocab,
                              .eod_token = SL_SHARD_NO_EOD,
                              .frame_tokens = frame_tokens,
                              .threads = threads};
    sl_shard_writer *w = sl_shard_writer_open(path, &o, err, sizeof err);
    if (!w) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    size_t di = 0, i = 0;
    while (i < n) {
        if (di < nd && docs[di] == i) sl_shard_writer_doc(w), di++;
        size_t next = di < nd ? (size_t)docs[di] : n;
        size_t k = next - i;
        /* feed in uneven pieces */
        size_t piece = 1 + rnd() % 5000;
        if (k > piece) k = piece;
        if (sl_shard_writer_add(w, tok + i, k, err, sizeof err) != 0) {
            fprintf(stderr, "%s\n", err);
            sl_shard_writer_abort(w);
            return -1;
        }
        i += k;
    }
    if (sl_shard_writer_close(w, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    return 0;
}

/* Reads every frame back; returns tokens and global document starts (malloc'ed). */
static int read_shard(const char *path, uint32_t **tok, size_t *n, uint64_t **docs, size_t *nd,
                      char *err, size_t errlen) {
    *tok = NULL, *docs = NULL, *n = *nd = 0;
    sl_shard *s = sl_shard_open(path, err, errlen);
    if (!s) return -1;
    const sl_shard_header *h = sl_shard_hdr(s);
    *tok = malloc(sizeof(uint32_t) * (h->n_tokens + 1));
    *docs = malloc(sizeof(uint64_t) * (h->n_docs + 1));
    *n = *nd = 0;
    sl_frame_buf b = {0};
    int rc = 0;
    for (uint64_t f = 0; f < h->n_frames; f++) {
        if (sl_shard_read_frame(s, f, &b, err, errlen) != 0) {
            rc = -1;
            break;
        }
        for (uint32_t i = 0; i < b.n_docs; i++) (*docs)[(*nd)++] = *n + b.docs[i];
        for (uint32_t i = 0; i < b.n_tokens; i++)
            (*tok)[(*n)++] =
                h->token_bytes == 2 ? ((uint16_t *)b.tokens)[i] : ((uint32_t *)b.tokens)[i];
    }
    sl_frame_buf_free(&b);
    sl_shard_close(s);
    return rc;
}

static unsigned char *slurp(const char *path, size_t *n) {
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)sz + 1);
    *n = fread(b, 1, (size_t)sz, f);
    fclose(f);
    return b;
}

static void spit(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, n, f);
    fclose(f);
}

static void test_crc32c(void) {
    CHECK(sl_crc32c(0, "123456789", 9) == 0xE3069283u, "CRC-32C check value %08x",
          sl_crc32c(0, "123456789", 9));
    CHECK(sl_crc32c_sw(0, "123456789", 9) == 0xE3069283u, "software CRC-32C check value");
    unsigned char z[32] = {0};
    CHECK(sl_crc32c(0, z, 32) == 0x8A9136AAu, "CRC-32C of 32 zero bytes %08x", sl_crc32c(0, z, 32));
    unsigned char buf[4099];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)rnd();
    for (size_t off = 0; off < 9; off++) {
        uint32_t a = sl_crc32c(0, buf + off, sizeof buf - off);
        uint32_t b = sl_crc32c_sw(0, buf + off, sizeof buf - off);
        uint32_t c =
            sl_crc32c(sl_crc32c(0, buf + off, 1000), buf + off + 1000, sizeof buf - off - 1000);
        CHECK(a == b && a == c, "CRC-32C hardware/software/chained agree at offset %zu", off);
    }
}

static void test_round_trip(void) {
    const uint32_t tbs[2] = {2, 4};
    const uint32_t frame_sizes[3] = {1, 777, 100000};
    for (int t = 0; t < 2; t++)
        for (int fs = 0; fs < 3; fs++) {
            size_t n = fs == 0 ? 3000 : 250000;
            uint32_t vocab = tbs[t] == 2 ? 65536 : 3000000;
            uint32_t *tok = malloc(sizeof(uint32_t) * n);
            for (size_t i = 0; i < n; i++) tok[i] = rnd() % (i % 3 ? 64 : vocab);
            uint64_t docs[64];
            size_t nd = 0;
            docs[nd++] = 0;
            for (uint64_t d = 1 + rnd() % 50; d < n && nd < 64; d += 1 + rnd() % (n / 20))
                docs[nd++] = d;
            /* a document starting exactly on a frame boundary */
            if (frame_sizes[fs] * 3ull < n && nd < 64 && docs[nd - 1] < frame_sizes[fs] * 3ull)
                docs[nd++] = frame_sizes[fs] * 3ull;
            char path[512];
            path_in(path, sizeof path, "rt.shard.zst");
            CHECK(write_shard(path, tok, n, docs, nd, tbs[t], vocab, frame_sizes[fs], 2) == 0,
                  "write tb=%u frame=%u", tbs[t], frame_sizes[fs]);
            uint32_t *got = NULL;
            uint64_t *gdocs = NULL;
            size_t gn = 0, gnd = 0;
            char err[1024];
            int rc = read_shard(path, &got, &gn, &gdocs, &gnd, err, sizeof err);
            CHECK(rc == 0, "read back: %s", rc ? err : "");
            CHECK(gn == n && memcmp(got, tok, n * 4) == 0, "tokens round trip tb=%u frame=%u",
                  tbs[t], frame_sizes[fs]);
            CHECK(gnd == nd && memcmp(gdocs, docs, nd * 8) == 0,
                  "document starts round trip tb=%u frame=%u (%zu vs %zu)", tbs[t], frame_sizes[fs],
                  gnd, nd);
            sl_shard_header h;
            CHECK(sl_shard_read_header(path, &h, err, sizeof err) == 0, "header: %s", err);
            CHECK(h.n_tokens == n && h.n_docs == nd && h.token_bytes == tbs[t] &&
                      h.vocab_size == vocab &&
                      h.n_frames == (n + frame_sizes[fs] - 1) / frame_sizes[fs],
                  "header totals");
            /* the same file from a memory image */
            size_t sz;
            unsigned char *img = slurp(path, &sz);
            sl_shard *m = sl_shard_open_mem(img, sz, "mem", err, sizeof err);
            CHECK(m && sl_shard_hdr(m)->n_tokens == n, "open from memory");
            sl_shard_close(m);
            free(img);
            /* single-threaded compression writes the identical file */
            if (fs == 2) {
                char p1[512];
                path_in(p1, sizeof p1, "rt1.shard.zst");
                rng_state = 7;
                write_shard(p1, tok, n, docs, nd, tbs[t], vocab, frame_sizes[fs], 1);
                size_t s1, s2;
                unsigned char *b1 = slurp(p1, &s1), *b2 = slurp(path, &s2);
                CHECK(s1 == s2 && memcmp(b1, b2, s1) == 0,
                      "1 and 2 compression threads write identical bytes");
                free(b1), free(b2);
            }
            free(tok), free(got), free(gdocs);
        }
}

/* `zstd -d` decodes the whole shard and a single frame cut out of it. */
static void test_zstd_cli(void) {
    if (system("zstd --version > /dev/null 2>&1") != 0) {
        sl_test_skip("zstd CLI not installed: the interoperability check (apt-get install zstd)");
        return;
    }
    size_t n = 70000;
    uint32_t *tok = malloc(4 * n);
    for (size_t i = 0; i < n; i++) tok[i] = (uint32_t)(i * 7 % 1000);
    uint64_t docs[3] = {0, 12345, 40000};
    char path[512], out[512], one[512], cmd[2048];
    path_in(path, sizeof path, "cli.shard.zst");
    path_in(out, sizeof out, "cli.raw");
    path_in(one, sizeof one, "frame1.zst");
    CHECK(write_shard(path, tok, n, docs, 3, 2, 1000, 30000, 2) == 0, "write for zstd -d");
    snprintf(cmd, sizeof cmd, "zstd -q -d -f -c '%s' > '%s'", path, out);
    CHECK(system(cmd) == 0, "zstd -d on the whole shard");
    size_t sz;
    unsigned char *raw = slurp(out, &sz);
    uint16_t *t16 = (uint16_t *)raw;
    bool same = raw && sz == 2 * n;
    for (size_t i = 0; same && i < n; i++) same = t16[i] == tok[i];
    CHECK(same, "zstd -d output is the little-endian token stream (%zu bytes)", sz);
    free(raw);
    /* frame 1 alone */
    char err[1024];
    sl_shard *s = sl_shard_open(path, err, sizeof err);
    CHECK(s != NULL, "open: %s", err);
    if (s) {
        const sl_shard_frame *f = &sl_shard_frames(s)[1];
        size_t fsz;
        unsigned char *img = slurp(path, &fsz);
        spit(one, img + f->offset, f->csize);
        free(img);
        snprintf(cmd, sizeof cmd, "zstd -q -d -f -c '%s' > '%s'", one, out);
        CHECK(system(cmd) == 0, "zstd -d on frame 1 cut out of the shard");
        raw = slurp(out, &sz);
        t16 = (uint16_t *)raw;
        same = raw && sz == 2 * (size_t)f->n_tokens;
        for (size_t i = 0; same && i < f->n_tokens; i++) same = t16[i] == tok[f->first_token + i];
        CHECK(same, "frame 1 decodes to tokens [%llu, %llu)", (unsigned long long)f->first_token,
              (unsigned long long)(f->first_token + f->n_tokens));
        free(raw);
        /* zstd -t checks every frame's content checksum */
        snprintf(cmd, sizeof cmd, "zstd -q -t '%s'", path);
        CHECK(system(cmd) == 0, "zstd -t accepts the shard");
        sl_shard_close(s);
    }
    free(tok);
}

typedef struct {
    int n;
    char first[1024];
} problems;
static void on_problem(void *u, const char *m) {
    problems *p = u;
    if (p->n++ == 0) snprintf(p->first, sizeof p->first, "%s", m);
}

static problems verify(const char *path) {
    problems p = {0};
    sl_shard_verify(path, NULL, on_problem, &p);
    return p;
}

static bool contains(const char *s, const char *needle) {
    return strstr(s, needle) != NULL;
}

static void test_bad_input(void) {
    char path[512], bad[512], err[1024];
    path_in(path, sizeof path, "good.shard.zst");
    path_in(bad, sizeof bad, "bad.shard.zst");
    size_t n = 3000;
    uint32_t *tok = malloc(4 * n);
    for (size_t i = 0; i < n; i++) tok[i] = rnd() % 300;
    uint64_t docs[4] = {0, 100, 1000, 2999};
    CHECK(write_shard(path, tok, n, docs, 4, 2, 300, 1000, 1) == 0, "write");
    size_t sz;
    unsigned char *img = slurp(path, &sz);
    CHECK(verify(path).n == 0, "the good shard verifies");

    /* every single-bit flip anywhere in the file is detected */
    unsigned char *b = malloc(sz);
    int undetected = 0, flips = 0;
    for (size_t i = 0; i < sz; i++)
        for (int bit = 0; bit < 8; bit++) {
            memcpy(b, img, sz);
            b[i] ^= (unsigned char)(1u << bit);
            flips++;
            sl_shard *s = sl_shard_open_mem(b, sz, "flip", err, sizeof err);
            int bad_frames = 0;
            if (s) {
                sl_frame_buf fb = {0};
                for (uint64_t f = 0; f < sl_shard_hdr(s)->n_frames; f++)
                    if (sl_shard_read_frame(s, f, &fb, err, sizeof err) != 0) bad_frames++;
                sl_frame_buf_free(&fb);
                sl_shard_close(s);
            }
            if (s && bad_frames == 0) {
                if (undetected++ < 5) fprintf(stderr, "undetected flip: byte %zu bit %d\n", i, bit);
            }
        }
    CHECK(undetected == 0, "%d of %d single-bit flips went undetected", undetected, flips);

    /* a flipped bit in a frame names the frame and its byte offset */
    sl_shard *s = sl_shard_open(path, err, sizeof err);
    const sl_shard_frame f1 = sl_shard_frames(s)[1];
    sl_shard_close(s);
    memcpy(b, img, sz);
    b[f1.offset + 20] ^= 0x10;
    spit(bad, b, sz);
    problems p = verify(bad);
    char want[128];
    snprintf(want, sizeof want, "frame 1 (byte offset %llu)", (unsigned long long)f1.offset);
    CHECK(p.n == 1 && contains(p.first, want) && contains(p.first, bad),
          "frame corruption names file, frame and offset: %s", p.first);

    /* truncation at many lengths: always an error naming the file, never a crash */
    for (size_t cut = 0; cut < sz; cut += (cut < 200 ? 1 : 97)) {
        spit(bad, img, cut);
        p = verify(bad);
        CHECK(p.n > 0 && contains(p.first, bad), "truncated to %zu bytes: %s", cut, p.first);
        if (cut > 200 && cut < sz)
            CHECK(contains(p.first, "truncated"), "says truncated at %zu: %s", cut, p.first);
    }
    /* trailing garbage */
    memcpy(b, img, sz);
    FILE *fp = fopen(bad, "wb");
    fwrite(img, 1, sz, fp);
    fwrite("xx", 1, 2, fp);
    fclose(fp);
    CHECK(verify(bad).n > 0, "trailing bytes are rejected");

    /* wrong magic */
    memcpy(b, img, sz);
    b[8] = 'X';
    spit(bad, b, sz);
    p = verify(bad);
    CHECK(p.n && contains(p.first, "magic") && contains(p.first, bad), "wrong magic: %s", p.first);
    /* not a shard at all: a plain zstd file, and text */
    spit(bad, img + f1.offset, f1.csize);
    p = verify(bad);
    CHECK(p.n && contains(p.first, "plain zstd"), "plain zstd file: %s", p.first);
    spit(bad,
         "hello world, this is not a shard at all, but it is long enough to have a header "
         "of 136 bytes... hello world, this is not a shard at all, but it is long",
         150);
    p = verify(bad);
    CHECK(p.n && contains(p.first, "not a sluice shard"), "text file: %s", p.first);
    CHECK(sl_shard_not_a_shard(bad), "a text file is not a shard");
    /* a text file shorter than the header is not a shard either, not a truncated one (was:
     * "truncated: 14 bytes, shorter than the 136-byte shard header") */
    spit(bad, "Genesis 1:1 In", 14);
    p = verify(bad);
    CHECK(p.n == 1 && contains(p.first, "byte offset 0: bad magic") &&
              contains(p.first, "not a sluice shard"),
          "short text file: %s", p.first);
    sl_shard_header sh;
    CHECK(sl_shard_read_header(bad, &sh, err, sizeof err) != 0 &&
              contains(err, "not a sluice shard"),
          "short text file's header: %s", err);
    CHECK(sl_shard_not_a_shard(bad), "a short text file is not a shard");
    spit(bad, "Gn", 2);
    CHECK(contains(verify(bad).first, "not a sluice shard") && sl_shard_not_a_shard(bad),
          "a 2-byte text file is not a shard: %s", verify(bad).first);
    /* a shard cut short keeps its magic: damaged (truncated), not another kind of file */
    spit(bad, img, 100);
    CHECK(!sl_shard_not_a_shard(bad) && contains(verify(bad).first, "truncated"),
          "a shard cut to 100 bytes is a truncated shard");
    spit(bad, img, 2);
    CHECK(!sl_shard_not_a_shard(bad), "a shard cut to 2 bytes is a truncated shard");
    spit(bad, "", 0);
    CHECK(!sl_shard_not_a_shard(bad), "an empty file is told as truncated, not as another kind");
    CHECK(!sl_shard_not_a_shard(path), "a sound shard is a shard");

    /* a future version (header CRC recomputed, so only the version is wrong) */
    sl_shard_header h;
    sl_shard_read_header(path, &h, err, sizeof err);
    memcpy(b, img, sz);
    h.version = 2;
    unsigned char hb[SL_SHARD_HEADER_BYTES];
    sl_shard_header_encode(&h, hb);
    memcpy(b, hb, sizeof hb);
    spit(bad, b, sz);
    p = verify(bad);
    CHECK(p.n && contains(p.first, "version 2"), "wrong version: %s", p.first);

    /* token ids at or above the vocabulary: shrink the declared vocabulary */
    sl_shard_read_header(path, &h, err, sizeof err);
    h.vocab_size = 200;
    sl_shard_header_encode(&h, hb);
    memcpy(b, img, sz);
    memcpy(b, hb, sizeof hb);
    spit(bad, b, sz);
    p = verify(bad);
    size_t first_big = 0;
    while (tok[first_big] < 200) first_big++;
    snprintf(want, sizeof want, "token %zu of the shard) has id %u >= vocab_size 200", first_big,
             tok[first_big]);
    CHECK(p.n >= 1 && contains(p.first, want) && contains(p.first, "frame 0"),
          "token >= vocab: %s (want '%s')", p.first, want);

    /* missing file */
    char missing[512];
    path_in(missing, sizeof missing, "missing.shard.zst");
    p = verify(missing);
    CHECK(p.n == 1 && contains(p.first, missing) && contains(p.first, "No such file"),
          "missing file: %s", p.first);
    char **files;
    int nf;
    CHECK(sl_data_resolve(missing, &files, &nf, err, sizeof err) != 0 &&
              contains(err, "No such file"),
          "resolve missing: %s", err);

    /* empty corpus: an empty directory, a glob matching nothing, a shard without tokens */
    char dir[512];
    path_in(dir, sizeof dir, "emptydir");
    mkdir(dir, 0755);
    CHECK(sl_data_resolve(dir, &files, &nf, err, sizeof err) != 0 && contains(err, "empty corpus"),
          "empty directory: %s", err);
    char glob[600];
    snprintf(glob, sizeof glob, "%s/*.shard.zst", dir);
    CHECK(sl_data_resolve(glob, &files, &nf, err, sizeof err) != 0 && contains(err, "no files"),
          "empty glob: %s", err);
    char zero[512];
    path_in(zero, sizeof zero, "emptydir/zero.shard.zst");
    CHECK(write_shard(zero, tok, 0, NULL, 0, 2, 300, 1000, 1) == 0, "write an empty shard");
    CHECK(verify(zero).n == 0, "an empty shard is well-formed");
    sl_data_config dc;
    memset(&dc, 0, sizeof dc);
    snprintf(dc.train[0].path, sizeof dc.train[0].path, "%s", dir);
    dc.train[0].weight = 1;
    dc.n_train = 1;
    sl_reader_opts ro = {.data = &dc, .dp_rank = 0, .dp_size = 1, .seq_len = 16};
    sl_reader *r = sl_reader_open(&ro, err, sizeof err);
    CHECK(!r && contains(err, "empty corpus") && contains(err, dir), "empty corpus: %s", err);
    sl_reader_close(r);
    free(tok), free(img), free(b);
}

/* A build that dies leaves no file under the final name, and its temporary file is rejected. */
static void test_atomic(void) {
    char path[512], err[1024];
    path_in(path, sizeof path, "atomic/a.shard.zst");
    char dir[512];
    path_in(dir, sizeof dir, "atomic");
    mkdir(dir, 0755);
    pid_t pid = fork();
    if (pid == 0) {
        sl_shard_writer_opts o = {.token_bytes = 2,
                                  .vocab_size = 1000,
                                  .frame_tokens = 1000,
                                  .threads = 1,
                                  .eod_token = SL_SHARD_NO_EOD};
        sl_shard_writer *w = sl_shard_writer_open(path, &o, err, sizeof err);
        uint32_t t[5000];
        for (int i = 0; i < 5000; i++) t[i] = (uint32_t)i % 1000;
        for (int k = 0; k < 10; k++) sl_shard_writer_add(w, t, 5000, err, sizeof err);
        raise(SIGKILL); /* dies mid-build */
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    CHECK(WIFSIGNALED(st), "the writer child was killed");
    struct stat sb;
    CHECK(stat(path, &sb) != 0 && errno == ENOENT, "no file under the final name");
    char **files;
    int nf;
    CHECK(sl_data_resolve(dir, &files, &nf, err, sizeof err) != 0,
          "the directory holds no shard after the crash");
    char cmd[700], tmp[600] = {0};
    snprintf(cmd, sizeof cmd, "ls -a '%s' | grep '^\\.a\\.shard\\.zst\\.tmp\\.'", dir);
    FILE *ls = popen(cmd, "r");
    char name[256] = {0};
    if (ls && fgets(name, sizeof name, ls)) name[strcspn(name, "\n")] = 0;
    if (ls) pclose(ls);
    CHECK(name[0], "the temporary file is left behind");
    snprintf(tmp, sizeof tmp, "%s/%s", dir, name);
    problems p = verify(tmp);
    CHECK(p.n && contains(p.first, "never finished"), "the temporary file is rejected: %s",
          p.first);
    /* abort removes the temporary file */
    sl_shard_writer_opts o = {.token_bytes = 2, .vocab_size = 1000, .eod_token = SL_SHARD_NO_EOD};
    sl_shard_writer *w = sl_shard_writer_open(path, &o, err, sizeof err);
    sl_shard_writer_abort(w);
    snprintf(cmd, sizeof cmd, "test $(ls -a '%s' | wc -l) -eq 3", dir);
    CHECK(system(cmd) == 0, "abort removes its temporary file");
    /* a token >= vocab is refused by the writer */
    w = sl_shard_writer_open(path, &o, err, sizeof err);
    uint32_t t = 1000;
    CHECK(sl_shard_writer_add(w, &t, 1, err, sizeof err) != 0 && contains(err, ">= vocab_size"),
          "writer refuses token >= vocab: %s", err);
    sl_shard_writer_abort(w);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/sluice_test_io_format_%d", (int)getpid());
    mkdir(g_dir, 0755);
    test_crc32c();
    test_round_trip();
    test_zstd_cli();
    test_bad_input();
    test_atomic();
    rm_rf(g_dir);
    return sl_test_finish("test_io_format");
}
