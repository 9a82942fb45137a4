/*
 * io/doc_encoder.c - parallel, order-keeping document encoding (see doc_encoder.h): a ring of
 * batches; the caller fills one, workers take queued batches in ring order, and the caller
 * emits finished batches from the oldest on.
 */
#include "io/doc_encoder.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"

#define BATCH_BYTES ((size_t)1 << 20)
#define BATCH_DOCS  8192

typedef enum { B_FREE, B_QUEUED, B_BUSY, B_DONE } bstate;

typedef struct {
    bstate state;
    char *text;
    size_t len, cap;
    size_t *off, *ntok;
    sl_doc_origin *origin;
    int n_docs, docs_cap;
    sl_tok_ids ids;
    int failed;       /* the first document that failed to encode, or -1 */
    size_t failed_at; /* its bad byte (SIZE_MAX: not a UTF-8 error) */
    char msg[512];
} batch;

struct sl_doc_encoder {
    const sl_tokenizer *t;
    sl_doc_emit_fn emit;
    void *user;
    int n_threads;
    pthread_t *th;
    sl_tok_state **st;
    batch *ring;
    int n_ring;
    int fill, head, pending, next_work; /* see the file comment */
    bool stop, failed;
    char fail_msg[1024];
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
};

static void encode_batch(batch *b, sl_tok_state *st) {
    b->ids.n = 0;
    b->failed = -1;
    for (int i = 0; i < b->n_docs; i++) {
        const size_t start = b->ids.n;
        const size_t len = (i + 1 < b->n_docs ? b->off[i + 1] : b->len) - b->off[i];
        if (sl_tokenizer_encode(st, b->text + b->off[i], len, &b->ids, &b->failed_at, b->msg,
                                sizeof b->msg) != 0) {
            b->failed = i;
            return;
        }
        b->ntok[i] = b->ids.n - start;
    }
}

typedef struct {
    sl_doc_encoder *e;
    int k;
} worker_arg;

static void *worker(void *p) {
    worker_arg *a = p;
    sl_doc_encoder *e = a->e;
    sl_tok_state *st = e->st[a->k];
    free(a);
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->stop && e->ring[e->next_work].state != B_QUEUED)
            pthread_cond_wait(&e->cv_work, &e->mu);
        if (e->stop) break; /* finished, or abandoned after an error */
        batch *b = &e->ring[e->next_work];
        b->state = B_BUSY;
        e->next_work = (e->next_work + 1) % e->n_ring;
        pthread_mutex_unlock(&e->mu);
        encode_batch(b, st);
        pthread_mutex_lock(&e->mu);
        b->state = B_DONE;
        pthread_cond_broadcast(&e->cv_done);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

sl_doc_encoder *sl_doc_encoder_new(const sl_tokenizer *t, int threads, sl_doc_emit_fn emit,
                                   void *user) {
    if (threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)n : 1;
    }
    sl_doc_encoder *e = sl_xcalloc(1, sizeof *e);
    e->t = t;
    e->emit = emit;
    e->user = user;
    e->n_threads = threads;
    e->n_ring = 2 * threads;
    e->ring = sl_xcalloc((size_t)e->n_ring, sizeof *e->ring);
    e->th = sl_xcalloc((size_t)threads, sizeof *e->th);
    e->st = sl_xcalloc((size_t)threads, sizeof *e->st);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv_work, NULL);
    pthread_cond_init(&e->cv_done, NULL);
    for (int k = 0; k < threads; k++) {
        e->st[k] = sl_tok_state_new(t);
        worker_arg *a = sl_xmalloc(sizeof *a);
        *a = (worker_arg){e, k};
        SL_CHECK(pthread_create(&e->th[k], NULL, worker, a) == 0, "cannot start a thread");
    }
    return e;
}

/* The message for document i of b, which failed. */
static void describe_failure(sl_doc_encoder *e, const batch *b) {
    const sl_doc_origin *o = &b->origin[b->failed];
    if (b->failed_at == SIZE_MAX) {
        if (o->line)
            snprintf(e->fail_msg, sizeof e->fail_msg, "%s: line %llu: %s", o->path,
                     (unsigned long long)o->line, b->msg);
        else
            snprintf(e->fail_msg, sizeof e->fail_msg, "%s: the document at byte offset %llu: %s",
                     o->path, (unsigned long long)o->offset, b->msg);
    } else if (o->line) {
        snprintf(e->fail_msg, sizeof e->fail_msg,
                 "%s: line %llu: the \"text\" string is not valid UTF-8 at its byte %zu (byte "
                 "0x%02X): a tokenizer reads Unicode text",
                 o->path, (unsigned long long)o->line, b->failed_at,
                 (unsigned char)b->text[b->off[b->failed] + b->failed_at]);
    } else {
        snprintf(e->fail_msg, sizeof e->fail_msg,
                 "%s: byte offset %llu: invalid UTF-8 (byte 0x%02X): a tokenizer reads Unicode "
                 "text",
                 o->path, (unsigned long long)(o->offset + b->failed_at),
                 (unsigned char)b->text[b->off[b->failed] + b->failed_at]);
    }
}

/* Waits for the oldest batch, passes its documents to emit, frees its slot. */
static int emit_head(sl_doc_encoder *e, char *err, size_t errlen) {
    batch *b = &e->ring[e->head];
    pthread_mutex_lock(&e->mu);
    while (b->state != B_DONE) pthread_cond_wait(&e->cv_done, &e->mu);
    pthread_mutex_unlock(&e->mu);
    int rc = 0;
    if (b->failed >= 0) {
        describe_failure(e, b);
        e->failed = true;
        rc = -1;
    }
    size_t at = 0;
    for (int i = 0; i < b->n_docs && rc == 0; i++) {
        rc = e->emit(e->user, b->ids.ids + at, b->ntok[i], e->fail_msg, sizeof e->fail_msg);
        at += b->ntok[i];
        if (rc != 0) e->failed = true;
    }
    b->len = 0;
    b->n_docs = 0;
    b->state = B_FREE;
    e->head = (e->head + 1) % e->n_ring;
    e->pending--;
    return rc ? sl_fail(err, errlen, "%s", e->fail_msg) : 0;
}

/* Queues the batch being filled; emits finished batches; makes the next slot free. */
static int queue_fill(sl_doc_encoder *e, char *err, size_t errlen) {
    pthread_mutex_lock(&e->mu);
    e->ring[e->fill].state = B_QUEUED;
    pthread_cond_signal(&e->cv_work);
    pthread_mutex_unlock(&e->mu);
    e->pending++;
    e->fill = (e->fill + 1) % e->n_ring;
    for (;;) {
        if (e->pending == 0) return 0;
        pthread_mutex_lock(&e->mu);
        const bool done = e->ring[e->head].state == B_DONE;
        pthread_mutex_unlock(&e->mu);
        if (!done && e->pending < e->n_ring) return 0;
        if (emit_head(e, err, errlen) != 0) return -1;
    }
}

int sl_doc_encoder_submit(sl_doc_encoder *e, const char *text, size_t len, sl_doc_origin origin,
                          char *err, size_t errlen) {
    if (e->failed) return sl_fail(err, errlen, "%s", e->fail_msg);
    batch *b = &e->ring[e->fill];
    if (b->n_docs > 0 && (b->len + len > BATCH_BYTES || b->n_docs == BATCH_DOCS)) {
        if (queue_fill(e, err, errlen) != 0) return -1;
        b = &e->ring[e->fill];
    }
    if (b->n_docs == b->docs_cap) {
        b->docs_cap = b->docs_cap ? 2 * b->docs_cap : 256;
        b->off = sl_xrealloc(b->off, (size_t)b->docs_cap * sizeof *b->off);
        b->ntok = sl_xrealloc(b->ntok, (size_t)b->docs_cap * sizeof *b->ntok);
        b->origin = sl_xrealloc(b->origin, (size_t)b->docs_cap * sizeof *b->origin);
    }
    sl_xreserve((void **)&b->text, &b->cap, b->len + len + 1);
    memcpy(b->text + b->len, text, len);
    b->off[b->n_docs] = b->len;
    b->origin[b->n_docs] = origin;
    b->n_docs++;
    b->len += len;
    return 0;
}

int sl_doc_encoder_finish(sl_doc_encoder *e, char *err, size_t errlen) {
    if (e->failed) return sl_fail(err, errlen, "%s", e->fail_msg);
    if (e->ring[e->fill].n_docs > 0 && queue_fill(e, err, errlen) != 0) return -1;
    while (e->pending > 0)
        if (emit_head(e, err, errlen) != 0) return -1;
    return 0;
}

void sl_doc_encoder_free(sl_doc_encoder *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->stop = true;
    pthread_cond_broadcast(&e->cv_work);
    pthread_mutex_unlock(&e->mu);
    for (int k = 0; k < e->n_threads; k++) {
        pthread_join(e->th[k], NULL);
        sl_tok_state_free(e->st[k]);
    }
    for (int i = 0; i < e->n_ring; i++) {
        batch *b = &e->ring[i];
        free(b->text), free(b->off), free(b->ntok), free(b->origin), free(b->ids.ids);
    }
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv_work);
    pthread_cond_destroy(&e->cv_done);
    free(e->ring), free(e->th), free(e->st);
    free(e);
}
