/*
 * bench/reader_bench.c - sl_reader throughput against `zstd -d` on the same shard, and the
 * reader's peak RSS on a small and a large shard.
 *
 *   reader_bench [--dir DIR] [--tokens N] [--small-tokens N] [--seq-len L] [--reps R]
 *                [--dp N] [--batch-tokens N] [--window W] [--shuffle-tokens N]
 *
 * Generates (once; reused while the token count matches) DIR/big and DIR/small, single shards of
 * N (default 2^30) and --small-tokens (default 2^26) synthetic uint16 tokens: Zipf-distributed ids
 * over a 50257-token vocabulary with repeated spans, and documents of about 1500 tokens. Then,
 * with the file in the page cache, each repetition times
 *   - `zstd -d -c FILE > /dev/null` (the zstd CLI; decompression is single-threaded) with its
 *     default settings and with --no-asyncio,
 *   - the reader in eval mode (in file order) and in training mode (shuffled frames) streaming
 *     every token as packed sequences of seq_len + 1 int32 tokens with document starts,
 * each reader run in a fresh process (this binary with --stream) that reports its own VmHWM
 * (peak resident set). Throughput is tokens per second of wall time; the best repetition counts.
 * Then rank 0 of --dp (default 8) ranks in training order with a global batch of
 * --batch-tokens (default 2^20) tokens streams its share of 1/dp of the shard: the tokens/s it
 * delivers and the frames it decodes (each rank decodes the frames its share touches). Last, the
 * sequence shuffle (--window W tokens, default 2^30) over the first --shuffle-tokens (default
 * 2^26) tokens at dp = 1 and as rank 0 of dp: tokens/s delivered and tokens decoded per token
 * delivered (each sequence lies elsewhere in its window, so it needs its own frames decoded).
 * The first runs are in stream order (data.shuffle_window = 0).
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io/reader.h"
#include "io/shard.h"

#define VOCAB 50257

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static long vm_hwm_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) kb = atol(line + 6);
    if (f) fclose(f);
    return kb;
}

/* ---- --stream: one reader pass in a clean process ---- */

static int stream_mode(const char *dir, int seq_len, bool train, uint64_t limit, int dp, int rank,
                       int64_t batch, uint64_t window) {
    long hwm0 = vm_hwm_kb();
    sl_data_config d;
    memset(&d, 0, sizeof d);
    d.seed = 1234;
    d.shuffle_window = window;
    if (train) {
        snprintf(d.train[0].path, SL_PATH_MAX, "%s", dir);
        d.train[0].weight = 1;
        d.n_train = 1;
    } else {
        snprintf(d.eval_path, SL_PATH_MAX, "%s", dir);
    }
    char err[1024];
    sl_reader_opts o = {.data = &d,
                        .dp_rank = rank,
                        .dp_size = dp,
                        .seq_len = seq_len,
                        .global_batch_sequences = batch,
                        .eval = !train};
    int32_t *tok = malloc(sizeof(int32_t) * ((size_t)seq_len + 1));
    int32_t *ds = malloc(sizeof(int32_t) * ((size_t)seq_len + 1));
    double t0 = now();
    sl_reader *r = sl_reader_open(&o, err, sizeof err);
    if (!r) {
        fprintf(stderr, "reader_bench: %s\n", err);
        return 1;
    }
    uint64_t tokens = 0, docs = 0, checksum = 0;
    int nd, rc;
    while ((rc = sl_reader_next(r, tok, ds, &nd, err, sizeof err)) == 1) {
        tokens += (uint64_t)seq_len;
        docs += (uint64_t)nd;
        checksum += (uint64_t)tok[seq_len / 2];
        if (train && tokens >= limit) break;
    }
    double t1 = now();
    if (rc < 0) {
        fprintf(stderr, "reader_bench: %s\n", err);
        return 1;
    }
    sl_reader_stats st;
    sl_reader_get_stats(r, &st);
    sl_reader_close(r);
    printf("tokens %llu seconds %.4f hwm_kb %ld hwm0_kb %ld waits %llu docs %llu sum %llu "
           "frames %llu decoded %llu\n",
           (unsigned long long)tokens, t1 - t0, vm_hwm_kb(), hwm0, (unsigned long long)st.waits,
           (unsigned long long)docs, (unsigned long long)checksum, (unsigned long long)st.frames,
           (unsigned long long)st.tokens_decoded);
    free(tok), free(ds);
    return 0;
}

typedef struct {
    uint64_t tokens;
    double seconds;
    long hwm_kb, hwm0_kb;
    unsigned long long waits, frames, decoded;
} stream_result;

static int run_stream(const char *self, const char *dir, int seq_len, bool train, uint64_t limit,
                      int dp, int64_t batch, uint64_t window, stream_result *res) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' --stream '%s' %d %s %llu %d 0 %lld %llu", self, dir, seq_len,
             train ? "train" : "eval", (unsigned long long)limit, dp, (long long)batch,
             (unsigned long long)window);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char line[512] = {0};
    char *got = fgets(line, sizeof line, p);
    int st = pclose(p);
    unsigned long long tk, dc, sm;
    if (!got || st != 0 ||
        sscanf(line,
               "tokens %llu seconds %lf hwm_kb %ld hwm0_kb %ld waits %llu docs %llu sum %llu "
               "frames %llu decoded %llu",
               &tk, &res->seconds, &res->hwm_kb, &res->hwm0_kb, &res->waits, &dc, &sm, &res->frames,
               &res->decoded) != 9)
        return -1;
    res->tokens = tk;
    return 0;
}

/* ---- data generation ---- */

static uint64_t g_s = 0x853c49e6748fea9bull;
static inline uint64_t rng(void) {
    g_s += 0x9E3779B97F4A7C15ull;
    uint64_t z = g_s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int generate(const char *dir, uint64_t n) {
    char path[1024], err[1024];
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/bench-00000.shard.zst", dir);
    sl_shard_header h;
    if (sl_shard_read_header(path, &h, err, sizeof err) == 0 && h.n_tokens == n) {
        printf("reusing %s (%llu tokens)\n", path, (unsigned long long)n);
        return 0;
    }
    printf("generating %s: %llu tokens ...\n", path, (unsigned long long)n);
    fflush(stdout);
    /* Zipf(1.1) inverse-CDF table over 2^20 buckets */
    enum { TB = 1 << 20 };
    uint16_t *table = malloc(sizeof(uint16_t) * TB);
    double norm = 0;
    for (int k = 1; k <= VOCAB; k++) norm += pow(k, -1.1);
    double acc = 0;
    int tok = 0;
    for (int i = 0; i < TB; i++) {
        double u = (i + 0.5) / TB;
        while (tok < VOCAB - 1 && acc + pow(tok + 1, -1.1) / norm < u)
            acc += pow(++tok, -1.1) / norm;
        table[i] = (uint16_t)tok;
    }
    sl_shard_writer_opts o = {
        .token_bytes = 2, .vocab_size = VOCAB, .eod_token = 50256, .threads = 0, .level = 3};
    sl_shard_writer *w = sl_shard_writer_open(path, &o, err, sizeof err);
    if (!w) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    enum { CH = 1 << 20 };
    uint32_t *buf = malloc(sizeof(uint32_t) * CH);
    uint64_t done = 0, next_doc = 0;
    double t0 = now();
    while (done < n) {
        size_t m = n - done < CH ? (size_t)(n - done) : CH;
        for (size_t i = 0; i < m;) {
            uint64_t x = rng();
            if ((x & 31) == 0 && i > 4096) { /* repeat an earlier span */
                size_t len = 8 + (x >> 8) % 24, from = i - 64 - (x >> 16) % 4000;
                for (size_t k = 0; k < len && i < m; k++) buf[i++] = buf[from + k];
            } else {
                buf[i++] = table[x >> 44];
            }
        }
        size_t i = 0;
        while (i < m) {
            if (done + i == next_doc) {
                sl_shard_writer_doc(w);
                next_doc += 1 + rng() % 3000;
            }
            size_t k = next_doc - (done + i) < m - i ? (size_t)(next_doc - (done + i)) : m - i;
            if (sl_shard_writer_add(w, buf + i, k, err, sizeof err) != 0) {
                fprintf(stderr, "%s\n", err);
                return -1;
            }
            i += k;
        }
        done += m;
    }
    if (sl_shard_writer_close(w, &h, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    printf("  %llu bytes, %llu frames, %llu documents, %.1f s\n", (unsigned long long)h.file_size,
           (unsigned long long)h.n_frames, (unsigned long long)h.n_docs, now() - t0);
    free(buf), free(table);
    return 0;
}

static void warm(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    static char b[1 << 20];
    while (read(fd, b, sizeof b) > 0) {
    }
    close(fd);
}

static double time_cmd(const char *cmd) {
    double t0 = now();
    int rc = system(cmd);
    double t = now() - t0;
    return rc == 0 ? t : -1;
}

int main(int argc, char **argv) {
    if (argc >= 10 && strcmp(argv[1], "--stream") == 0)
        return stream_mode(argv[2], atoi(argv[3]), strcmp(argv[4], "train") == 0,
                           strtoull(argv[5], NULL, 10), atoi(argv[6]), atoi(argv[7]),
                           strtoll(argv[8], NULL, 10), strtoull(argv[9], NULL, 10));
    const char *dir = "/tmp/sluice_reader_bench";
    uint64_t n = 1ull << 30, n_small = 1ull << 26;
    int seq_len = 4096, reps = 3, dp = 8;
    int64_t batch_tokens = 1 << 20;
    uint64_t window = SL_SHUFFLE_DEFAULT, shuffle_tokens = 1ull << 26;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            dir = argv[++i];
        else if (strcmp(argv[i], "--tokens") == 0 && i + 1 < argc)
            n = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--small-tokens") == 0 && i + 1 < argc)
            n_small = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--seq-len") == 0 && i + 1 < argc)
            seq_len = atoi(argv[++i]);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--dp") == 0 && i + 1 < argc)
            dp = atoi(argv[++i]);
        else if (strcmp(argv[i], "--batch-tokens") == 0 && i + 1 < argc)
            batch_tokens = strtoll(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--window") == 0 && i + 1 < argc)
            window = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--shuffle-tokens") == 0 && i + 1 < argc)
            shuffle_tokens = strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: reader_bench [--dir DIR] [--tokens N] [--small-tokens N] "
                            "[--seq-len L] [--reps R] [--dp N] [--batch-tokens N] [--window W] "
                            "[--shuffle-tokens N]\n");
            return 2;
        }
    }
    char self[1024];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    if (sl <= 0) return 1;
    self[sl] = 0;
    if (system("zstd --version > /dev/null 2>&1") != 0) {
        fprintf(stderr, "reader_bench: the zstd CLI is needed\n");
        return 1;
    }
    char big[1024], small[1024], bigf[1100], smallf[1100];
    mkdir(dir, 0755);
    snprintf(big, sizeof big, "%s/big", dir);
    snprintf(small, sizeof small, "%s/small", dir);
    snprintf(bigf, sizeof bigf, "%s/bench-00000.shard.zst", big);
    snprintf(smallf, sizeof smallf, "%s/bench-00000.shard.zst", small);
    if (generate(big, n) != 0 || generate(small, n_small) != 0) return 1;
    sl_shard_header hb, hs;
    char err[1024];
    sl_shard_read_header(bigf, &hb, err, sizeof err);
    sl_shard_read_header(smallf, &hs, err, sizeof err);
    printf("shard: %llu tokens (%.2f GiB as uint16), %llu bytes on disk (ratio %.3f), %llu "
           "frames of up to %u tokens, %llu documents; seq_len %d\n",
           (unsigned long long)hb.n_tokens, (double)hb.n_tokens * 2 / (1 << 30),
           (unsigned long long)hb.file_size, (double)hb.n_tokens * 2 / (double)hb.file_size,
           (unsigned long long)hb.n_frames, hb.frame_tokens, (unsigned long long)hb.n_docs,
           seq_len);
    warm(bigf);
    warm(bigf);
    char c1[2300], c2[2300];
    snprintf(c1, sizeof c1, "zstd -q -d -c '%s' > /dev/null", bigf);
    snprintf(c2, sizeof c2, "zstd -q -d --no-asyncio -c '%s' > /dev/null", bigf);
    double best_z = 1e30, best_zn = 1e30, best_e = 1e30, best_t = 1e30;
    stream_result e = {0}, t = {0};
    for (int r = 0; r < reps; r++) {
        double z = time_cmd(c1), zn = time_cmd(c2);
        stream_result er, tr;
        if (z < 0 || zn < 0 || run_stream(self, big, seq_len, false, 0, 1, 0, 0, &er) != 0 ||
            run_stream(self, big, seq_len, true, hb.n_tokens, 1, 0, 0, &tr) != 0) {
            fprintf(stderr, "reader_bench: a run failed\n");
            return 1;
        }
        printf("rep %d: zstd -d %.3f s, zstd -d --no-asyncio %.3f s, reader eval %.3f s, reader "
               "train %.3f s\n",
               r + 1, z, zn, er.seconds, tr.seconds);
        fflush(stdout);
        if (z < best_z) best_z = z;
        if (zn < best_zn) best_zn = zn;
        if (er.seconds < best_e) best_e = er.seconds, e = er;
        if (tr.seconds < best_t) best_t = tr.seconds, t = tr;
    }
    stream_result s, k = {0}, sh = {0}, ks = {0};
    if (run_stream(self, small, seq_len, false, 0, 1, 0, 0, &s) != 0) return 1;
    /* rank 0 of dp: its share of every global batch, the frames it decodes for it */
    const int64_t batch = batch_tokens / seq_len;
    for (int r = 0; dp > 1 && r < reps; r++) {
        stream_result kr;
        if (run_stream(self, big, seq_len, true, hb.n_tokens / (uint64_t)dp, dp, batch, 0, &kr) !=
            0)
            return 1;
        if (r == 0 || kr.seconds < k.seconds) k = kr;
    }
    /* the sequence shuffle: every sequence lies somewhere else in its window, so each needs its
     * own frame(s) decoded; a token budget keeps the run short */
    for (int r = 0; r < reps; r++) {
        stream_result a, b;
        if (run_stream(self, big, seq_len, true, shuffle_tokens, 1, 0, window, &a) != 0) return 1;
        if (r == 0 || a.seconds < sh.seconds) sh = a;
        if (dp > 1) {
            if (run_stream(self, big, seq_len, true, shuffle_tokens / (uint64_t)dp, dp, batch,
                           window, &b) != 0)
                return 1;
            if (r == 0 || b.seconds < ks.seconds) ks = b;
        }
    }
    double nt = (double)hb.n_tokens;
    double zbest = best_z < best_zn ? best_z : best_zn;
    printf("\nthroughput, best of %d (tokens/s):\n", reps);
    printf("  zstd -d                 %.4g  (%.0f MB/s of output)\n", nt / best_z,
           nt * 2 / best_z / 1e6);
    printf("  zstd -d --no-asyncio    %.4g\n", nt / best_zn);
    printf("  reader, eval order      %.4g  = %.1f%% of the faster zstd -d  (waits %llu)\n",
           (double)e.tokens / e.seconds, 100.0 * ((double)e.tokens / e.seconds) / (nt / zbest),
           e.waits);
    printf("  reader, training order  %.4g  = %.1f%% of the faster zstd -d  (waits %llu)\n",
           (double)t.tokens / t.seconds, 100.0 * ((double)t.tokens / t.seconds) / (nt / zbest),
           t.waits);
    if (dp > 1)
        printf("  reader, training order, rank 0 of %d (global batch %lld x %d tokens): %.4g "
               "tokens/s delivered; %llu frames decoded for %llu tokens (%.2f frames' worth)\n",
               dp, (long long)batch, seq_len, (double)k.tokens / k.seconds, k.frames,
               (unsigned long long)k.tokens, (double)k.tokens / hb.frame_tokens);
    printf("sequence shuffle (window %llu tokens), first %llu tokens:\n",
           (unsigned long long)window, (unsigned long long)shuffle_tokens);
    printf("  rank 0 of 1: %.4g tokens/s delivered; %llu frames decoded, %.1f tokens decoded per "
           "token delivered (waits %llu)\n",
           (double)sh.tokens / sh.seconds, sh.frames, (double)sh.decoded / (double)sh.tokens,
           sh.waits);
    if (dp > 1)
        printf("  rank 0 of %d (global batch %lld x %d tokens): %.4g tokens/s delivered; %llu "
               "frames decoded, %.1f tokens decoded per token delivered\n",
               dp, (long long)batch, seq_len, (double)ks.tokens / ks.seconds, ks.frames,
               (double)ks.decoded / (double)ks.tokens);
    printf("peak RSS of the streaming process (VmHWM):\n");
    printf("  %llu-token shard: %ld KiB (%ld KiB before opening the reader)\n",
           (unsigned long long)hs.n_tokens, s.hwm_kb, s.hwm0_kb);
    printf("  %llu-token shard: %ld KiB eval, %ld KiB training (%ld KiB before opening)\n",
           (unsigned long long)hb.n_tokens, e.hwm_kb, t.hwm_kb, e.hwm0_kb);
    return 0;
}
