/*
 * bench/tokenizer_bench.c - encoding throughput of io/tokenizer.h (bench/README.md,
 * "Tokenizer benchmark"; bench/tokenizer_bench.sh runs it against the JavaScript reference).
 *
 *   tokenizer_bench --tokenizer PATH [--docs line|file] [--threads N] [--repeat R]
 *                   [--ids-out FILE] TEXT
 *
 * The documents of TEXT (each non-empty line, or the whole file) are encoded on one thread,
 * then on N threads (default: all cores; documents dealt round-robin, each thread with its own
 * sl_tok_state), each R times (default 3). A pass with a fresh state is "cold" (empty word
 * cache); the next passes on the same states are "warm", the steady state of a long build.
 * Prints MB/s of text (best of R): per wall-clock second, and per CPU second of the encoding
 * threads (CLOCK_THREAD_CPUTIME_ID: what a thread achieves while it runs, the figure that a
 * machine shared with other jobs does not lower), and checks that every run gives the same
 * ids. --ids-out
 * writes each document's ids as a line (for comparing with the reference).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/fsutil.h"
#include "core/log.h"
#include "io/tokenizer.h"

typedef struct {
    const char *p;
    size_t n;
} doc;

typedef struct {
    const sl_tokenizer *tok;
    sl_tok_state *st;
    const doc *docs;
    size_t n_docs, first, stride;
    uint64_t hash, tokens;
    double cpu; /* seconds of CPU time the thread used */
} job;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Encodes the job's documents; hash: the sum over documents of a hash of (index, ids), so
 * that any split of the documents over threads gives the same total. */
static double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *run(void *p) {
    job *j = p;
    const double c0 = thread_cpu();
    sl_tok_ids ids = {0};
    char err[512];
    size_t bad;
    j->hash = j->tokens = 0;
    for (size_t d = j->first; d < j->n_docs; d += j->stride) {
        ids.n = 0;
        if (sl_tokenizer_encode(j->st, j->docs[d].p, j->docs[d].n, &ids, &bad, err, sizeof err)) {
            fprintf(stderr, "tokenizer_bench: document %zu: %s\n", d, err);
            exit(1);
        }
        uint64_t h = 0x9E3779B97F4A7C15ull * (d + 1);
        for (size_t i = 0; i < ids.n; i++) h = (h ^ ids.ids[i]) * 0x100000001b3ull;
        j->hash += h;
        j->tokens += ids.n;
    }
    free(ids.ids);
    j->cpu = thread_cpu() - c0;
    return NULL;
}

/* One pass over all documents on `threads` threads with the given states; wall seconds, and
 * the threads' CPU seconds in *cpu. */
static double pass(job *jobs, int threads, uint64_t *hash, uint64_t *tokens, double *cpu) {
    pthread_t th[256];
    double t0 = now();
    for (int k = 0; k < threads; k++) pthread_create(&th[k], NULL, run, &jobs[k]);
    *hash = *tokens = 0;
    *cpu = 0;
    for (int k = 0; k < threads; k++) {
        pthread_join(th[k], NULL);
        *hash += jobs[k].hash;
        *tokens += jobs[k].tokens;
        *cpu += jobs[k].cpu;
    }
    return now() - t0;
}

int main(int argc, char **argv) {
    const char *tok_path = NULL, *text_path = NULL, *mode = "line", *ids_out = NULL;
    long threads = sysconf(_SC_NPROCESSORS_ONLN);
    int repeat = 3;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tokenizer") == 0 && i + 1 < argc)
            tok_path = argv[++i];
        else if (strcmp(argv[i], "--docs") == 0 && i + 1 < argc)
            mode = argv[++i];
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            threads = atol(argv[++i]);
        else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc)
            repeat = atoi(argv[++i]);
        else if (strcmp(argv[i], "--ids-out") == 0 && i + 1 < argc)
            ids_out = argv[++i];
        else if (argv[i][0] != '-')
            text_path = argv[i];
        else {
            fprintf(stderr, "tokenizer_bench: unknown option %s (see the file's comment)\n",
                    argv[i]);
            return 2;
        }
    }
    if (!tok_path || !text_path || threads < 1 || threads > 256 || repeat < 1 ||
        (strcmp(mode, "line") != 0 && strcmp(mode, "file") != 0)) {
        fprintf(stderr, "usage: tokenizer_bench --tokenizer PATH [--docs line|file] "
                        "[--threads N] [--repeat R] [--ids-out FILE] TEXT\n");
        return 2;
    }
    char err[1024];
    double t0 = now();
    sl_tokenizer *tok = sl_tokenizer_load(tok_path, err, sizeof err);
    if (!tok) {
        fprintf(stderr, "tokenizer_bench: %s\n", err);
        return 1;
    }
    const double load_s = now() - t0;
    size_t len;
    char *text = sl_read_file(text_path, &len, err, sizeof err);
    if (!text) {
        fprintf(stderr, "tokenizer_bench: %s\n", err);
        return 1;
    }
    doc *docs = sl_xmalloc((len + 1) * sizeof *docs);
    size_t n_docs = 0, bytes = 0;
    if (strcmp(mode, "file") == 0) {
        if (len) docs[n_docs++] = (doc){text, len};
    } else {
        for (size_t s = 0; s < len;) {
            size_t e = s;
            while (e < len && text[e] != '\n') e++;
            if (e > s) docs[n_docs++] = (doc){text + s, e - s};
            s = e + 1;
        }
    }
    for (size_t d = 0; d < n_docs; d++) bytes += docs[d].n;
    printf("tokenizer %s: vocabulary %u, loaded in %.2f s\n", sl_tokenizer_path(tok),
           sl_tokenizer_vocab_size(tok), load_s);
    printf("text %s: %zu documents (%s), %.2f MB\n", text_path, n_docs, mode, (double)bytes / 1e6);

    job jobs[256];
    uint64_t ref_hash = 0, tokens = 0;
    const int counts[2] = {1, (int)threads};
    for (int c = 0; c < (threads > 1 ? 2 : 1); c++) {
        const int nt = counts[c];
        double cold = 1e30, warm = 1e30, cpu_warm = 1e30, cpu;
        for (int r = 0; r < repeat; r++) {
            for (int k = 0; k < nt; k++)
                jobs[k] = (job){.tok = tok,
                                .st = sl_tok_state_new(tok),
                                .docs = docs,
                                .n_docs = n_docs,
                                .first = (size_t)k,
                                .stride = (size_t)nt};
            uint64_t h, n;
            double s = pass(jobs, nt, &h, &n, &cpu);
            if (s < cold) cold = s;
            if (c == 0 && r == 0) ref_hash = h, tokens = n;
            if (h != ref_hash || n != tokens) {
                fprintf(stderr, "tokenizer_bench: %d threads gave other ids than 1 thread\n", nt);
                return 1;
            }
            s = pass(jobs, nt, &h, &n, &cpu);
            if (s < warm) warm = s;
            if (cpu < cpu_warm) cpu_warm = cpu;
            if (h != ref_hash) {
                fprintf(stderr, "tokenizer_bench: a warm pass gave other ids\n");
                return 1;
            }
            for (int k = 0; k < nt; k++) sl_tok_state_free(jobs[k].st);
        }
        printf("sluice %2d thread%s: cold %7.2f MB/s, warm %7.2f MB/s (%.2f MB/s per thread), "
               "warm %7.2f MB per CPU-s, %llu tokens (%.2f bytes/token)\n",
               nt, nt == 1 ? " " : "s", (double)bytes / cold / 1e6, (double)bytes / warm / 1e6,
               (double)bytes / warm / 1e6 / nt, (double)bytes / cpu_warm / 1e6,
               (unsigned long long)tokens, (double)bytes / (double)tokens);
    }
    if (ids_out) {
        FILE *f = fopen(ids_out, "w");
        sl_tok_state *st = sl_tok_state_new(tok);
        sl_tok_ids ids = {0};
        size_t bad;
        for (size_t d = 0; f && d < n_docs; d++) {
            ids.n = 0;
            sl_tokenizer_encode(st, docs[d].p, docs[d].n, &ids, &bad, err, sizeof err);
            for (size_t i = 0; i < ids.n; i++) fprintf(f, i ? " %u" : "%u", ids.ids[i]);
            fputc('\n', f);
        }
        if (f) fclose(f);
        free(ids.ids);
        sl_tok_state_free(st);
    }
    free(docs);
    free(text);
    sl_tokenizer_free(tok);
    return 0;
}
