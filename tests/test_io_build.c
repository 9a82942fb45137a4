/* tests/test_io_build.c - `sluice data build` round trips for every input format (text in its
 * three document modes, JSONL, raw uint16/uint32, llm.c versions 1 and 7, Megatron .bin/.idx),
 * shard rotation, importer errors that name the file and offset, `data info`'s numbers (text
 * and JSON, per shard and in total) against the corpus, and `data verify` naming a damaged
 * frame ("FILE: frame N (byte offset B): ..."), with the info/verify exit statuses. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "core/fsutil.h"
#include "core/log.h"
#include "io/build.h"
#include "io/paths.h"
#include "io/shard.h"
#include "launch/commands.h"
#include "tests/test_util.h"

static char g_dir[256];

static void pathf(char *out, size_t n, const char *fmt, ...) SL_PRINTF(3, 4);
static void pathf(char *out, size_t n, const char *fmt, ...) {
    int k = snprintf(out, n, "%s/", g_dir);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out + k, n - (size_t)k, fmt, ap);
    va_end(ap);
}

static void spit(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, n, f);
    fclose(f);
}

/* The concatenated token stream and document starts of every shard under `spec`. */
typedef struct {
    uint32_t *tok;
    size_t n;
    uint64_t *docs;
    size_t nd;
    int shards;
    uint32_t vocab, eod, tb;
} stream;

static void stream_free(stream *s) {
    free(s->tok), free(s->docs), memset(s, 0, sizeof *s);
}

static int load(const char *spec, stream *out) {
    memset(out, 0, sizeof *out);
    char err[1024], **files;
    int nf;
    if (sl_data_resolve(spec, &files, &nf, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    size_t cap = 1024, dcap = 64;
    out->tok = malloc(4 * cap);
    out->docs = malloc(8 * dcap);
    sl_frame_buf b = {0};
    int rc = 0;
    for (int i = 0; i < nf && rc == 0; i++) {
        sl_shard *s = sl_shard_open(files[i], err, sizeof err);
        if (!s) {
            fprintf(stderr, "%s\n", err);
            rc = -1;
            break;
        }
        const sl_shard_header *h = sl_shard_hdr(s);
        out->vocab = h->vocab_size, out->eod = h->eod_token, out->tb = h->token_bytes;
        out->shards++;
        for (uint64_t f = 0; f < h->n_frames && rc == 0; f++) {
            if (sl_shard_read_frame(s, f, &b, err, sizeof err) != 0) {
                fprintf(stderr, "%s\n", err);
                rc = -1;
                break;
            }
            while (out->n + b.n_tokens > cap) cap *= 2, out->tok = realloc(out->tok, 4 * cap);
            while (out->nd + b.n_docs > dcap) dcap *= 2, out->docs = realloc(out->docs, 8 * dcap);
            for (uint32_t d = 0; d < b.n_docs; d++) out->docs[out->nd++] = out->n + b.docs[d];
            for (uint32_t t = 0; t < b.n_tokens; t++)
                out->tok[out->n++] =
                    h->token_bytes == 2 ? ((uint16_t *)b.tokens)[t] : ((uint32_t *)b.tokens)[t];
        }
        sl_shard_close(s);
    }
    sl_frame_buf_free(&b);
    sl_data_paths_free(files, nf);
    return rc;
}

/* Expected stream: documents given as token arrays. */
typedef struct {
    uint32_t tok[4096];
    size_t n;
    uint64_t docs[256];
    size_t nd;
} expect;

static void ex_doc(expect *e, const uint32_t *t, size_t n) {
    e->docs[e->nd++] = e->n;
    memcpy(e->tok + e->n, t, 4 * n);
    e->n += n;
}
static void ex_text(expect *e, const char *s) {
    e->docs[e->nd++] = e->n;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) e->tok[e->n++] = *p;
    e->tok[e->n++] = 256;
}

static bool same(const stream *s, const expect *e, const char *what) {
    bool ok = s->n == e->n && s->nd == e->nd && memcmp(s->tok, e->tok, 4 * e->n) == 0 &&
              memcmp(s->docs, e->docs, 8 * e->nd) == 0;
    if (!ok) {
        fprintf(stderr, "%s: got %zu tokens / %zu docs, want %zu / %zu\n", what, s->n, s->nd, e->n,
                e->nd);
        for (size_t i = 0; i < s->n && i < e->n; i++)
            if (s->tok[i] != e->tok[i]) {
                fprintf(stderr, "  first difference at token %zu: %u vs %u\n", i, s->tok[i],
                        e->tok[i]);
                break;
            }
    }
    return ok;
}

static int run_v(char **argv) {
    int argc = 0;
    while (argv[argc]) argc++;
    return sl_cmd_data(argc, argv);
}
/* RUN("data", "build", ...): sl_cmd_data on these arguments. */
#define RUN(...) run_v((char *[]){__VA_ARGS__, NULL})

/* sl_cmd_data on argv with stdout and stderr into a file; its status, and what it printed in
 * out (NUL-terminated, at most cap - 1 bytes). */
static int run_capture(char *out, size_t cap, char **argv) {
    char path[512];
    pathf(path, sizeof path, "capture.txt");
    fflush(stdout), fflush(stderr);
    const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int o1 = dup(1), o2 = dup(2);
    dup2(fd, 1), dup2(fd, 2), close(fd);
    const int rc = run_v(argv);
    fflush(stdout), fflush(stderr);
    dup2(o1, 1), dup2(o2, 2), close(o1), close(o2);
    FILE *f = fopen(path, "rb");
    const size_t n = f ? fread(out, 1, cap - 1, f) : 0;
    if (f) fclose(f);
    out[n] = 0;
    return rc;
}
/* RUN_OUT(buf, "data", "info", ...): RUN with the output in the char array buf. */
#define RUN_OUT(buf, ...) run_capture(buf, sizeof buf, (char *[]){__VA_ARGS__, NULL})

/* out holds the line `want` (a whole line), else says what it holds */
static bool has_line(const char *out, const char *want, const char *what) {
    const size_t n = strlen(want);
    for (const char *p = out; (p = strstr(p, want)) != NULL; p++)
        if ((p == out || p[-1] == '\n') && (p[n] == '\n' || p[n] == 0)) return true;
    fprintf(stderr, "  %s: no line \"%s\" in:\n%s\n", what, want, out);
    return false;
}

static int build_err(sl_build_opts o, const char *input, char *err, size_t errlen) {
    sl_build_result res;
    char *in[1] = {(char *)input};
    o.quiet = true;
    o.force = true;
    return sl_data_build(&o, in, 1, &res, err, errlen);
}

static void test_text(void) {
    char a[512], b[512], c[512], out[512];
    pathf(a, sizeof a, "a.txt");
    pathf(b, sizeof b, "b.txt");
    pathf(c, sizeof c, "c.txt");
    spit(a, "hello\n\nworld\n", 13);
    spit(b, "", 0);
    spit(c, "p1 l1\np1 l2\n\n\np2\r\n", 18);
    pathf(out, sizeof out, "text_file");
    CHECK(RUN("data", "build", "--quiet", "-o", out, a, b, c) == 0, "build text (file)");
    stream s;
    expect e = {0};
    ex_text(&e, "hello\n\nworld\n");
    ex_text(&e, "p1 l1\np1 l2\n\n\np2\r\n");
    CHECK(load(out, &s) == 0 && same(&s, &e, "text file mode") && s.vocab == 257 && s.eod == 256,
          "text, a document per file");
    stream_free(&s);

    pathf(out, sizeof out, "text_line");
    CHECK(RUN("data", "build", "--quiet", "--text-docs", "line", "-o", out, a, c) == 0,
          "build text (line)");
    memset(&e, 0, sizeof e);
    ex_text(&e, "hello");
    ex_text(&e, "world");
    ex_text(&e, "p1 l1");
    ex_text(&e, "p1 l2");
    ex_text(&e, "p2\r");
    CHECK(load(out, &s) == 0 && same(&s, &e, "text line mode"), "text, a document per line");
    stream_free(&s);

    pathf(out, sizeof out, "text_par");
    CHECK(RUN("data", "build", "--quiet", "--text-docs=paragraph", "-o", out, a, c) == 0,
          "build text (paragraph)");
    memset(&e, 0, sizeof e);
    ex_text(&e, "hello");
    ex_text(&e, "world");
    ex_text(&e, "p1 l1\np1 l2");
    ex_text(&e, "p2\r");
    CHECK(load(out, &s) == 0 && same(&s, &e, "text paragraph mode"),
          "text, a document per paragraph");
    stream_free(&s);

    /* an input with no text at all is an empty corpus; the failed --force build leaves the
     * earlier shards alone */
    char err[1024];
    sl_build_opts o = {
        .out_dir = out, .format = SL_FMT_TEXT, .vocab = -1, .eod = -1, .add_eod = -1};
    CHECK(build_err(o, b, err, sizeof err) != 0 && strstr(err, "empty corpus"),
          "empty text input: %s", err);
    CHECK(load(out, &s) == 0 && same(&s, &e, "after a failed build"),
          "a failed build keeps the old shards");
    stream_free(&s);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "test $(ls -a '%s' | wc -l) -eq 3", out);
    CHECK(system(cmd) == 0, "a failed build leaves no staging files");
    /* a failed build into a directory that did not exist leaves none behind, parents too */
    char fresh[600], parent[560];
    pathf(parent, sizeof parent, "fresh_parent");
    snprintf(fresh, sizeof fresh, "%s/out", parent);
    o.out_dir = fresh;
    CHECK(build_err(o, b, err, sizeof err) != 0 && strstr(err, "empty corpus"),
          "empty text input into a new directory: %s", err);
    struct stat st;
    CHECK(stat(fresh, &st) != 0 && stat(parent, &st) != 0,
          "a failed build into a new directory removes the directories it created");
    o.out_dir = out;
    /* missing input */
    char missing[512];
    pathf(missing, sizeof missing, "nope.txt");
    CHECK(build_err(o, missing, err, sizeof err) != 0 && strstr(err, missing) &&
              strstr(err, "No such file"),
          "missing input: %s", err);
    /* an existing build is not overwritten without --force */
    CHECK(RUN("data", "build", "--quiet", "-o", out, "--format", "text") == 2,
          "no inputs is a usage error");
    CHECK(RUN("data", "build", "--quiet", "-o", out, a) == 1, "refuses to overwrite shards");
    CHECK(RUN("data", "build", "--quiet", "--force", "--shard-size", "1", "--frame-tokens", "4",
              "-o", out, a, c) == 0,
          "--force replaces");
    CHECK(RUN("data", "build", "--quiet", "--force", "-o", out, a) == 0, "--force replaces");
    memset(&e, 0, sizeof e);
    ex_text(&e, "hello\n\nworld\n");
    CHECK(load(out, &s) == 0 && same(&s, &e, "after --force") && s.shards == 1,
          "--force removes the old shards the new build did not write");
    stream_free(&s);
    /* staging directories of killed builds: one over a minute old that nobody locks is removed
     * by the next build; one a running build holds (flock), and one just created, stay */
    char stale[600], held[600], fresh_stage[600], inside[700];
    snprintf(stale, sizeof stale, "%s/.sluice-build-stale1", out);
    snprintf(held, sizeof held, "%s/.sluice-build-held01", out);
    snprintf(fresh_stage, sizeof fresh_stage, "%s/.sluice-build-fresh1", out);
    const struct timeval old[2] = {{time(NULL) - 600, 0}, {time(NULL) - 600, 0}};
    for (int i = 0; i < 3; i++) {
        const char *d = i == 0 ? stale : i == 1 ? held : fresh_stage;
        mkdir(d, 0755);
        snprintf(inside, sizeof inside, "%s/shard-00000.shard.zst.tmp", d);
        spit(inside, "x", 1);
        if (i < 2) utimes(d, old);
    }
    const int lock = open(held, O_RDONLY | O_DIRECTORY);
    CHECK(lock >= 0 && flock(lock, LOCK_EX | LOCK_NB) == 0, "the test locks its staging directory");
    CHECK(RUN("data", "build", "--quiet", "--force", "-o", out, a) == 0, "--force again");
    CHECK(stat(stale, &st) != 0, "a killed build's staging directory is removed by the next build");
    CHECK(stat(held, &st) == 0, "a staging directory a build holds stays");
    CHECK(stat(fresh_stage, &st) == 0, "a staging directory under a minute old stays");
    if (lock >= 0) close(lock);
}

static void test_jsonl(void) {
    char in[512], out[512], err[1024];
    pathf(in, sizeof in, "docs.jsonl");
    const char *j = "{\"text\": \"h\\u00e9llo\\n\", \"id\": 1}\n"
                    "\n"
                    "{\"id\": 2, \"text\": \"x\"}\r\n"
                    "{\"text\": \"\"}\n"
                    "{\"text\": \"last \\\"quoted\\\"\"}";
    spit(in, j, strlen(j));
    pathf(out, sizeof out, "jsonl");
    CHECK(RUN("data", "build", "--quiet", "-o", out, in) == 0, "build jsonl");
    stream s;
    expect e = {0};
    ex_text(&e, "h\xc3\xa9llo\n");
    ex_text(&e, "x");
    ex_text(&e, "last \"quoted\"");
    CHECK(load(out, &s) == 0 && same(&s, &e, "jsonl"), "JSONL text fields, UTF-8 bytes");
    stream_free(&s);
    sl_build_opts o = {.out_dir = out, .vocab = -1, .eod = -1, .add_eod = -1};
    spit(in, "{\"text\": \"a\"}\n{\"txt\": \"b\"}\n", 28);
    CHECK(build_err(o, in, err, sizeof err) != 0 && strstr(err, "line 2") &&
              strstr(err, "\"text\"") && strstr(err, in),
          "missing text field: %s", err);
    spit(in, "{\"text\": \"a\"}\n{\"text\": \"b\"\n", 27);
    CHECK(build_err(o, in, err, sizeof err) != 0 && strstr(err, "line 2") &&
              strstr(err, "not valid JSON"),
          "invalid JSON: %s", err);
}

static void test_raw(void) {
    char in[512], out[512], err[1024];
    pathf(in, sizeof in, "tokens.u16");
    uint16_t t16[12] = {5, 6, 7, 8, 7, 7, 9, 10, 11, 12, 7, 3};
    spit(in, t16, sizeof t16);
    pathf(out, sizeof out, "raw16");
    CHECK(RUN("data", "build", "--quiet", "--format", "raw", "--dtype", "uint16", "--vocab", "13",
              "--eod", "7", "-o", out, in) == 0,
          "build raw uint16");
    stream s;
    expect e = {0};
    ex_doc(&e, (uint32_t[]){5, 6, 7}, 3);
    ex_doc(&e, (uint32_t[]){8, 7}, 2);
    ex_doc(&e, (uint32_t[]){7}, 1);
    ex_doc(&e, (uint32_t[]){9, 10, 11, 12, 7}, 5);
    ex_doc(&e, (uint32_t[]){3}, 1);
    CHECK(load(out, &s) == 0 && same(&s, &e, "raw16") && s.tb == 2 && s.eod == 7,
          "raw uint16 with documents ending at --eod");
    stream_free(&s);

    pathf(in, sizeof in, "tokens.u32");
    uint32_t t32[6] = {0, 70000, 99999, 1, 2, 65536};
    spit(in, t32, sizeof t32);
    pathf(out, sizeof out, "raw32");
    CHECK(RUN("data", "build", "--quiet", "--format", "raw", "--dtype", "uint32", "--vocab",
              "100000", "-o", out, in) == 0,
          "build raw uint32");
    memset(&e, 0, sizeof e);
    ex_doc(&e, t32, 6);
    CHECK(load(out, &s) == 0 && same(&s, &e, "raw32") && s.tb == 4 && s.vocab == 100000 &&
              s.eod == SL_SHARD_NO_EOD,
          "raw uint32, one document, 4-byte tokens");
    stream_free(&s);

    sl_build_opts o = {.out_dir = out,
                       .format = SL_FMT_RAW,
                       .raw_token_bytes = 4,
                       .vocab = 99999,
                       .eod = -1,
                       .add_eod = -1};
    CHECK(build_err(o, in, err, sizeof err) != 0 && strstr(err, in) &&
              strstr(err, "byte offset 8: token id 99999 >= vocab_size 99999"),
          "raw token >= vocab: %s", err);
    spit(in, t32, sizeof t32 - 1);
    o.vocab = 100000;
    CHECK(build_err(o, in, err, sizeof err) != 0 && strstr(err, "not a whole number"),
          "raw truncated token: %s", err);
    o.vocab = -1;
    CHECK(build_err(o, in, err, sizeof err) != 0 && strstr(err, "--vocab"),
          "raw without --vocab: %s", err);
}

static void write_llmc(const char *path, int version, const uint32_t *tok, int n, int declared) {
    int32_t h[256] = {0};
    h[0] = 20240520, h[1] = version, h[2] = declared;
    FILE *f = fopen(path, "wb");
    fwrite(h, 4, 256, f);
    for (int i = 0; i < n; i++) {
        if (version == 1) {
            uint16_t v = (uint16_t)tok[i];
            fwrite(&v, 2, 1, f);
        } else {
            fwrite(&tok[i], 4, 1, f);
        }
    }
    fclose(f);
}

static void test_llmc(void) {
    char in[512], in2[512], out[512], err[1024];
    pathf(in, sizeof in, "train_000.bin");
    pathf(in2, sizeof in2, "train_001.bin");
    uint32_t t1[8] = {50256, 10, 11, 50256, 12, 50256, 13, 14};
    uint32_t t2[3] = {15, 50256, 16};
    write_llmc(in, 1, t1, 8, 8);
    write_llmc(in2, 1, t2, 3, 3);
    pathf(out, sizeof out, "llmc1");
    CHECK(RUN("data", "build", "--quiet", "-o", out, in, in2) == 0, "build llm.c v1");
    stream s;
    expect e = {0};
    ex_doc(&e, (uint32_t[]){50256, 10, 11}, 3);
    ex_doc(&e, (uint32_t[]){50256, 12}, 2);
    ex_doc(&e, (uint32_t[]){50256, 13, 14}, 3);
    ex_doc(&e, (uint32_t[]){15}, 1);
    ex_doc(&e, (uint32_t[]){50256, 16}, 2);
    CHECK(load(out, &s) == 0 && same(&s, &e, "llmc v1") && s.vocab == 50257 && s.tb == 2,
          "llm.c version 1: documents begin at <|endoftext|>, vocab 50257");
    stream_free(&s);

    uint32_t t7[5] = {128000, 100, 128255, 128000, 7};
    write_llmc(in, 7, t7, 5, 5);
    pathf(out, sizeof out, "llmc7");
    CHECK(RUN("data", "build", "--quiet", "-o", out, in) == 0, "build llm.c v7");
    memset(&e, 0, sizeof e);
    ex_doc(&e, t7, 3);
    ex_doc(&e, t7 + 3, 2);
    CHECK(load(out, &s) == 0 && same(&s, &e, "llmc v7") && s.vocab == 128256 && s.tb == 4,
          "llm.c version 7: uint32 tokens, vocab 128256");
    stream_free(&s);

    sl_build_opts o = {
        .out_dir = out, .format = SL_FMT_LLMC, .vocab = -1, .eod = -1, .add_eod = -1};
    write_llmc(in, 1, t1, 8, 9);
    CHECK(build_err(o, in, err, sizeof err) != 0 && strstr(err, in) &&
              strstr(err, "declares 9 tokens"),
          "llm.c truncated: %s", err);
    write_llmc(in, 3, t1, 8, 8);
    CHECK(build_err(o, in, err, sizeof err) != 0 && strstr(err, "version 3"), "llm.c version 3: %s",
          err);
    write_llmc(in, 1, t1, 8, 8);
    FILE *f = fopen(in, "r+b");
    fwrite("XXXX", 1, 4, f);
    fclose(f);
    CHECK(build_err(o, in, err, sizeof err) != 0 && strstr(err, "magic"), "llm.c magic: %s", err);
    write_llmc(in, 1, t1, 8, 8);
    o.vocab = 50000;
    o.eod = -2;
    CHECK(build_err(o, in, err, sizeof err) != 0 && strstr(err, "byte offset 1024") &&
              strstr(err, ">= vocab_size 50000"),
          "llm.c token >= vocab: %s", err);
}

/* Megatron-LM: docs[d] = list of sequences, each a token list. */
static void write_megatron(const char *prefix, int code, int nseq, const int *seq_len,
                           const int64_t *tokens, int ndoc_idx, const int64_t *doc_idx) {
    int w = code == 8 || code == 3 ? 2 : code == 4 ? 4 : code == 5 ? 8 : 1;
    char p[600];
    snprintf(p, sizeof p, "%s.bin", prefix);
    FILE *f = fopen(p, "wb");
    int64_t *ptr = malloc(8 * (size_t)nseq);
    int64_t off = 0, k = 0;
    for (int s = 0; s < nseq; s++) {
        ptr[s] = off;
        for (int i = 0; i < seq_len[s]; i++, k++) {
            int64_t v = tokens[k];
            fwrite(&v, (size_t)w, 1, f); /* little-endian host */
        }
        off += (int64_t)seq_len[s] * w;
    }
    fclose(f);
    snprintf(p, sizeof p, "%s.idx", prefix);
    f = fopen(p, "wb");
    fwrite("MMIDIDX\0\0", 1, 9, f);
    uint64_t ver = 1, ns = (uint64_t)nseq, nd = (uint64_t)ndoc_idx;
    uint8_t c = (uint8_t)code;
    fwrite(&ver, 8, 1, f);
    fwrite(&c, 1, 1, f);
    fwrite(&ns, 8, 1, f);
    fwrite(&nd, 8, 1, f);
    for (int s = 0; s < nseq; s++) fwrite(&seq_len[s], 4, 1, f);
    fwrite(ptr, 8, (size_t)nseq, f);
    fwrite(doc_idx, 8, (size_t)ndoc_idx, f);
    fclose(f);
    free(ptr);
}

static void test_megatron(void) {
    char prefix[512], bin[600], out[512], err[1024];
    pathf(prefix, sizeof prefix, "meg_text_document");
    /* 3 documents; the second has two sequences, one of them empty */
    int lens[5] = {3, 2, 0, 4, 1};
    int64_t toks[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 60000};
    int64_t di[4] = {0, 1, 3, 5};
    write_megatron(prefix, 8, 5, lens, toks, 4, di);
    snprintf(bin, sizeof bin, "%s.bin", prefix);
    pathf(out, sizeof out, "meg");
    CHECK(RUN("data", "build", "--quiet", "--vocab", "60001", "--add-eod", "0", "-o", out, bin) ==
              0,
          "build Megatron uint16");
    stream s;
    expect e = {0};
    ex_doc(&e, (uint32_t[]){1, 2, 3, 0}, 4);
    ex_doc(&e, (uint32_t[]){4, 5, 0}, 3);
    ex_doc(&e, (uint32_t[]){6, 7, 8, 9, 60000, 0}, 6);
    CHECK(load(out, &s) == 0 && same(&s, &e, "megatron u16") && s.eod == 0,
          "Megatron uint16 documents from the index, --add-eod");
    stream_free(&s);

    write_megatron(prefix, 4, 5, lens, toks, 4, di);
    pathf(out, sizeof out, "meg32");
    CHECK(RUN("data", "build", "--quiet", "--format", "megatron", "--vocab", "70000", "-o", out,
              prefix) == 0,
          "build Megatron int32 by prefix");
    memset(&e, 0, sizeof e);
    ex_doc(&e, (uint32_t[]){1, 2, 3}, 3);
    ex_doc(&e, (uint32_t[]){4, 5}, 2);
    ex_doc(&e, (uint32_t[]){6, 7, 8, 9, 60000}, 5);
    CHECK(load(out, &s) == 0 && same(&s, &e, "megatron i32"), "Megatron int32");
    stream_free(&s);

    sl_build_opts o = {
        .out_dir = out, .format = SL_FMT_MEGATRON, .vocab = 60000, .eod = -1, .add_eod = -1};
    CHECK(build_err(o, prefix, err, sizeof err) != 0 && strstr(err, bin) &&
              strstr(err, "byte offset 36: token id 60000"),
          "Megatron token >= vocab: %s", err);
    toks[2] = -5;
    write_megatron(prefix, 4, 5, lens, toks, 4, di);
    o.vocab = 70000;
    CHECK(build_err(o, prefix, err, sizeof err) != 0 && strstr(err, "token id -5"),
          "Megatron negative token: %s", err);
    toks[2] = 3;
    int64_t bad_di[4] = {0, 3, 1, 5};
    write_megatron(prefix, 4, 5, lens, toks, 4, bad_di);
    CHECK(build_err(o, prefix, err, sizeof err) != 0 && strstr(err, "out of order"),
          "Megatron document indices out of order: %s", err);
    write_megatron(prefix, 6, 5, lens, toks, 4, di);
    CHECK(build_err(o, prefix, err, sizeof err) != 0 && strstr(err, "dtype code 6"),
          "Megatron float dtype: %s", err);
    char idx[600];
    snprintf(idx, sizeof idx, "%s.idx", prefix);
    write_megatron(prefix, 4, 5, lens, toks, 4, di);
    CHECK(truncate(idx, 60) == 0, "truncate");
    CHECK(build_err(o, prefix, err, sizeof err) != 0 && strstr(err, "truncated") &&
              strstr(err, idx),
          "Megatron truncated index: %s", err);
    write_megatron(prefix, 4, 5, lens, toks, 4, di);
    CHECK(truncate(bin, 20) == 0, "truncate");
    CHECK(build_err(o, prefix, err, sizeof err) != 0 && strstr(err, "do not fit"),
          "Megatron truncated .bin: %s", err);
    spit(idx, "MMIDIDY\0\0", 9);
    CHECK(build_err(o, prefix, err, sizeof err) != 0 && strstr(err, "truncated"),
          "Megatron short index: %s", err);
}

/* Many shards from one input, each verifying; their concatenation is the input. */
static void test_rotation_and_cli(void) {
    char in[512], out[512];
    pathf(in, sizeof in, "big.jsonl");
    FILE *f = fopen(in, "wb");
    uint64_t x = 1;
    size_t total = 0;
    static expect e;
    memset(&e, 0, sizeof e);
    for (int d = 0; d < 40; d++) {
        char doc[100];
        int len = 10 + d % 50;
        for (int i = 0; i < len; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            doc[i] = (char)('a' + (x >> 59));
        }
        doc[len] = 0;
        fprintf(f, "{\"text\": \"%s\"}\n", doc);
        ex_text(&e, doc);
        total += (size_t)len + 1;
    }
    fclose(f);
    pathf(out, sizeof out, "rot");
    CHECK(RUN("data", "build", "--quiet", "--shard-size", "200", "--frame-tokens", "64",
              "--threads", "1", "--prefix", "part", "-o", out, in) == 0,
          "build with small shards");
    stream s;
    CHECK(load(out, &s) == 0 && same(&s, &e, "rotation") && s.shards > 3,
          "%d shards concatenate to the input", s.shards);
    stream_free(&s);
    char p0[600];
    snprintf(p0, sizeof p0, "%s/part-00000.shard.zst", out);
    struct stat st;
    CHECK(stat(p0, &st) == 0, "shards are named PREFIX-00000.shard.zst, ...");
    /* every shard starts at a document boundary (rotation waits for one) */
    char **files;
    int nf;
    char err[1024];
    sl_data_resolve(out, &files, &nf, err, sizeof err);
    for (int i = 0; i < nf; i++) {
        sl_shard *sh = sl_shard_open(files[i], err, sizeof err);
        sl_frame_buf b = {0};
        CHECK(sh && sl_shard_read_frame(sh, 0, &b, err, sizeof err) == 0 && b.n_docs > 0 &&
                  b.docs[0] == 0,
              "shard %d begins with a document", i);
        sl_frame_buf_free(&b);
        sl_shard_close(sh);
    }
    sl_data_paths_free(files, nf);

    /* info's numbers against the corpus: tokens (bytes + one end-of-document each) and
     * documents from the input, bytes from stat, frames from the shards' indexes */
    static char text[65536];
    char want[1024];
    unsigned long long frames = 0, bytes = 0, frames0 = 0, bytes0 = 0;
    for (int i = 0; i < nf; i++) {
        /* sl_data_resolve's list was freed above: the names again, in order */
        char name[600];
        snprintf(name, sizeof name, "%s/part-%05d.shard.zst", out, i);
        sl_shard *sh = sl_shard_open(name, err, sizeof err);
        CHECK(sh != NULL && stat(name, &st) == 0, "shard %s: %s", name, err);
        if (!sh) continue;
        frames += sl_shard_hdr(sh)->n_frames, bytes += (unsigned long long)st.st_size;
        if (i == 0) frames0 = sl_shard_hdr(sh)->n_frames, bytes0 = (unsigned long long)st.st_size;
        sl_shard_close(sh);
    }
    CHECK(RUN_OUT(text, "data", "info", out) == 0, "info exit 0");
    snprintf(want, sizeof want,
             "total: %d shards, %zu tokens, %zu documents, %llu frames, %llu bytes, compression "
             "ratio %.3f",
             nf, total, (size_t)40, frames, bytes, (double)total * 2 / (double)bytes);
    CHECK(e.n == total && e.nd == 40 && has_line(text, want, "info"), "info's total line");
    stream s0;
    CHECK(load(p0, &s0) == 0, "load %s", p0);
    snprintf(want, sizeof want, "  tokens %zu, documents %zu, frames %llu (up to 64 tokens each)",
             s0.n, s0.nd, frames0);
    CHECK(has_line(text, want, "info"), "info's counts of %s", p0);
    snprintf(want, sizeof want,
             "  file %llu bytes, compression ratio %.3f (token bytes / file bytes)", bytes0,
             (double)s0.n * 2 / (double)bytes0);
    CHECK(has_line(text, want, "info"), "info's size of %s", p0);
    CHECK(RUN_OUT(text, "data", "info", "--json", p0) == 0, "info --json exit 0");
    snprintf(want, sizeof want,
             "{\"total\":true,\"shards\":1,\"tokens\":%zu,\"documents\":%zu,\"frames\":%llu,"
             "\"file_bytes\":%llu,\"compression_ratio\":%.4f}",
             s0.n, s0.nd, frames0, bytes0, (double)s0.n * 2 / (double)bytes0);
    CHECK(has_line(text, want, "info --json"), "info --json's total record of %s", p0);
    snprintf(want, sizeof want,
             "\"tokens\":%zu,\"documents\":%zu,\"frames\":%llu,\"frame_tokens\":64,"
             "\"file_bytes\":%llu,\"compression_ratio\":%.4f}\n",
             s0.n, s0.nd, frames0, bytes0, (double)s0.n * 2 / (double)bytes0);
    CHECK(strstr(text, want) != NULL, "info --json's record of %s: %s", p0, text);
    stream_free(&s0);
    CHECK(RUN("data", "verify", out) == 0, "verify a sound corpus: exit 0");
    char glob[600];
    snprintf(glob, sizeof glob, "%s/part-0000[12].shard.zst", out);
    CHECK(RUN("data", "verify", "--quiet", glob) == 0, "verify a glob");
    /* damage one shard: byte 150 lies in its first frame (the header takes 136 bytes) */
    sl_shard *sh0 = sl_shard_open(p0, err, sizeof err);
    CHECK(sh0 != NULL, "open %s: %s", p0, err);
    long long fno = -1, foff = -1;
    for (uint64_t fi = 0; sh0 && fi < sl_shard_hdr(sh0)->n_frames; fi++) {
        const sl_shard_frame *fr = &sl_shard_frames(sh0)[fi];
        if (fr->offset <= 150 && 150 < fr->offset + sl_shard_frame_span(fr))
            fno = (long long)fi, foff = (long long)fr->offset;
    }
    if (sh0) sl_shard_close(sh0);
    CHECK(fno >= 0, "byte 150 of %s is in no frame", p0);
    f = fopen(p0, "r+b");
    fseek(f, 150, SEEK_SET);
    int ch = fgetc(f);
    fseek(f, 150, SEEK_SET);
    fputc(ch ^ 0x40, f);
    fclose(f);
    CHECK(RUN_OUT(text, "data", "verify", out) == 1, "verify a damaged corpus: exit 1");
    /* "FILE: frame N (byte offset B): ..." naming the damaged frame, and the verdicts */
    snprintf(want, sizeof want, "sluice: error: %s: frame %lld (byte offset %lld): ", p0, fno,
             foff);
    CHECK(strstr(text, want) != NULL && strstr(text, want) == strstr(text, "sluice: error:"),
          "verify names the damaged frame first (\"%s\"): %s", want, text);
    snprintf(want, sizeof want, "%s: DAMAGED (1 problem)", p0);
    CHECK(has_line(text, want, "verify"), "verify's verdict on %s", p0);
    snprintf(want, sizeof want, "verified %d shards: FAILED", nf);
    CHECK(has_line(text, want, "verify"), "verify's summary");
    char missing[512];
    pathf(missing, sizeof missing, "nothing_here");
    CHECK(RUN("data", "verify", missing) == 1, "verify a missing path: exit 1");
    CHECK(RUN("data", "info", missing) == 1, "info a missing path: exit 1");
    CHECK(RUN("data", "verify") == 2, "verify without paths: exit 2");
    CHECK(RUN("data", "build", "--help") == 0, "build --help");
    CHECK(RUN("data", "info", "--help") == 0, "info --help");
    CHECK(RUN("data", "verify", "--help") == 0, "verify --help");
    CHECK(RUN("data", "--help") == 0, "data --help");
    CHECK(RUN("data", "frobnicate") == 2, "unknown subcommand: exit 2");
    CHECK(RUN("data", "build", "--bogus", "-o", out) == 2, "unknown option: exit 2");
    CHECK(RUN("data", "build", "--frame-tokens", "0", "-o", out, in) == 2,
          "--frame-tokens 0 is a usage error");
}

/* count of the occurrences of needle in s */
static int count_of(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)) != NULL; p++) n++;
    return n;
}

/* `data verify | info | show` on a glob over a corpus directory as a user has it: the text the
 * shards were built from, the shard directory, an empty directory. A glob's directories are
 * read as directory arguments, its non-shards skipped with a note and not counted; a file
 * named that is not a shard is one error line, no "DAMAGED" verdict, and fails the command; a
 * glob's *.shard.zst file is never skipped, however damaged. */
static void test_verify_glob(void) {
    char dir[512], txt[512], txt2[512], shards[512], empty[512], glob[600], text[8192], want[2048];
    pathf(dir, sizeof dir, "kjv");
    mkdir(dir, 0755);
    pathf(txt, sizeof txt, "kjv/kjv.txt");
    pathf(txt2, sizeof txt2, "kjv/README");
    pathf(shards, sizeof shards, "kjv/shards");
    pathf(empty, sizeof empty, "kjv/empty");
    mkdir(empty, 0755);
    spit(txt, "In the beginning God created the heaven and the earth.\n", 55);
    spit(txt2, "KJV\n", 4);
    CHECK(RUN_OUT(text, "data", "build", "-o", shards, txt) == 0, "build the kjv shard");
    /* one document, one frame: singular (was "1 documents", "1 frames") */
    snprintf(want, sizeof want, "wrote %s/shard-00000.shard.zst: 56 tokens, 1 document, 1 frame, ",
             shards);
    CHECK(strstr(text, want) != NULL, "build's shard line: %s", text);
    snprintf(want, sizeof want, "built 1 shard in %s: 56 tokens, 1 document, ", shards);
    CHECK(strstr(text, want) != NULL, "build's summary: %s", text);
    snprintf(glob, sizeof glob, "%s/*", dir);

    CHECK(RUN_OUT(text, "data", "verify", glob) == 0, "verify DIR/*: exit 0: %s", text);
    snprintf(want, sizeof want, "sluice: note: %s: not a shard, skipped (a match of %s)", txt,
             glob);
    CHECK(has_line(text, want, "verify DIR/*"), "the text file is skipped with a note");
    snprintf(want, sizeof want,
             "sluice: note: %s: a directory without *.shard.zst shards, skipped (a match of %s)",
             empty, glob);
    CHECK(has_line(text, want, "verify DIR/*"), "the empty directory is skipped with a note");
    snprintf(want, sizeof want, "%s/shard-00000.shard.zst: OK (56 tokens, 1 document, 1 frame)",
             shards);
    CHECK(has_line(text, want, "verify DIR/*"), "the shard directory a glob matched is verified");
    CHECK(has_line(text,
                   "verified 1 shard: all sound (skipped 3 non-shard paths a pattern matched)",
                   "verify DIR/*"),
          "the summary counts shards only");
    CHECK(!strstr(text, "DAMAGED") && !strstr(text, "error"), "no error: %s", text);
    CHECK(RUN_OUT(text, "data", "verify", "--quiet", glob) == 0 && text[0] == 0,
          "verify --quiet DIR/*: nothing printed: %s", text);

    CHECK(RUN_OUT(text, "data", "verify", txt) == 1, "verify of a text file named: exit 1");
    snprintf(want, sizeof want, "sluice: error: %s: byte offset 0: bad magic 0x", txt);
    CHECK(count_of(text, want) == 1 && count_of(text, txt) == 1 &&
              strstr(text, "not a sluice shard\n"),
          "a text file named is one error line naming it once: %s", text);
    CHECK(!strstr(text, "DAMAGED") &&
              has_line(text, "verified 0 shards: FAILED (1 file is not a shard)", "verify FILE"),
          "no verdict, and not counted as a shard");
    snprintf(glob, sizeof glob, "%s/k*", dir);
    CHECK(RUN_OUT(text, "data", "verify", glob) == 1, "a glob of no shard: exit 1");
    snprintf(want, sizeof want,
             "sluice: error: %s: no shards among the 1 path this pattern matches", glob);
    CHECK(has_line(text, want, "verify DIR/k*"), "a glob of no shard is an error");

    /* a shard whose first byte is damaged, named *.shard.zst: a glob does not skip it */
    char copy[512], src[512];
    pathf(src, sizeof src, "kjv/shards/shard-00000.shard.zst");
    pathf(copy, sizeof copy, "kjv/copy.shard.zst");
    size_t n = 0;
    char *img = sl_read_file(src, &n, text, sizeof text);
    CHECK(img != NULL && n > 0, "read %s", src);
    if (img) img[0] ^= 0x01, spit(copy, img, n), free(img);
    snprintf(glob, sizeof glob, "%s/*", dir);
    CHECK(RUN_OUT(text, "data", "verify", glob) == 1,
          "a damaged *.shard.zst a glob matched: exit 1");
    snprintf(want, sizeof want, "sluice: error: %s: byte offset 0: bad magic", copy);
    CHECK(strstr(text, want) != NULL, "a damaged *.shard.zst is not skipped: %s", text);
    remove(copy);

    CHECK(RUN_OUT(text, "data", "info", glob) == 0, "info DIR/*: exit 0: %s", text);
    snprintf(want, sizeof want, "%s/shard-00000.shard.zst", shards);
    CHECK(has_line(text, want, "info DIR/*"), "info reads a glob's directory");
    snprintf(want, sizeof want, "sluice: note: %s: not a shard, skipped (a match of %s)", txt,
             glob);
    CHECK(has_line(text, want, "info DIR/*"), "info skips the text file with a note");
    CHECK(RUN_OUT(text, "data", "show", "--ids", glob) == 0 && strstr(text, "73 110 32"),
          "show DIR/*: the shard's documents: %s", text);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/sluice_test_io_build_%d", (int)getpid());
    mkdir(g_dir, 0755);
    test_text();
    test_jsonl();
    test_raw();
    test_llmc();
    test_megatron();
    test_rotation_and_cli();
    test_verify_glob();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return sl_test_finish("test_io_build");
}
