/* io/reader_prefetch.c - the background thread that assembles this rank's next sequences, in
 * the order next() returns them, into a bounded queue (docs/data.md, "Prefetch").
 *
 * The thread walks its own copy of the plan (reader_order.c), so next() only copies a finished
 * sequence out. An error or the end of an eval slice is queued in the sequence's place; the
 * thread then idles until it is stopped. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "io/reader_internal.h"

/* Sequence buffers of all slots together stay under this, whatever data.prefetch says, unless
 * that leaves fewer than two slots. */
#define QUEUE_BYTES_CAP (256ull << 20)

int sl_rd_queue_depth(const sl_reader *r, int prefetch) {
    const uint64_t per = 4ull * ((uint64_t)r->seq_len + 1);
    uint64_t want = prefetch > 0 ? (uint64_t)prefetch : 0;
    if (want == 0) { /* automatic: the rank's share of a global batch, at least 4 */
        want = r->eval ? 4 : (r->hi - r->lo);
        if (want < 4) want = 4;
        if (want > 64) want = 64;
    }
    const uint64_t cap = QUEUE_BYTES_CAP / per;
    if (want > cap) want = cap;
    return want < 2 ? 2 : (int)want;
}

void sl_rd_slot_free(sl_rd_slot *s) {
    free(s->tokens);
    free(s->docs);
    s->tokens = NULL;
    s->docs = NULL;
    s->tokens_cap = s->docs_cap = 0;
}

/* The next free slot at the tail of the queue, or NULL when asked to stop. */
static sl_rd_slot *free_slot(sl_reader *r) {
    pthread_mutex_lock(&r->mu);
    while (r->q_count == r->n_ring && !r->stop) pthread_cond_wait(&r->cv_prod, &r->mu);
    sl_rd_slot *s = r->stop ? NULL : &r->ring[(r->q_head + r->q_count) % r->n_ring];
    pthread_mutex_unlock(&r->mu);
    return s;
}

static void publish(sl_reader *r, uint64_t frames, uint64_t decoded) {
    pthread_mutex_lock(&r->mu);
    r->q_count++;
    r->frames += frames;
    r->tokens_decoded += decoded;
    pthread_cond_broadcast(&r->cv_cons);
    pthread_mutex_unlock(&r->mu);
}

/* Idles until stopped (after the end or an error was queued). */
static void *idle(sl_reader *r) {
    pthread_mutex_lock(&r->mu);
    while (!r->stop) pthread_cond_wait(&r->cv_prod, &r->mu);
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

static void *producer_main(void *arg) {
    sl_reader *r = arg;
    const uint32_t n = (uint32_t)r->seq_len + 1;
    for (;;) {
        sl_rd_slot *s = free_slot(r);
        if (!s) return NULL;
        int ci;
        uint64_t p;
        s->g = sl_rd_plan_next_mine(r, &r->pplan, &ci, &p);
        s->corpus = ci;
        sl_rd_corpus *c = &r->c[ci];
        const uint64_t src = sl_rd_source(r, ci, r->pplan.anchor[ci], p);
        sl_xreserve((void **)&s->tokens, &s->tokens_cap, sizeof(int32_t) * n);
        uint64_t frames = 0, decoded = 0;
        const int rc = sl_rd_assemble(r, c, src, n, s->tokens, &s->docs, &s->docs_cap, &s->n_docs,
                                      &s->epoch, &frames, &decoded, s->msg, sizeof s->msg);
        s->kind = rc == 0 ? SL_RD_SEQ : rc > 0 ? SL_RD_END : SL_RD_ERROR;
        publish(r, frames, decoded);
        if (rc != 0) return idle(r);
    }
}

void sl_rd_stop(sl_reader *r) {
    if (!r->running) return;
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_broadcast(&r->cv_prod);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->th, NULL);
    r->running = false;
    r->stop = false;
}

int sl_rd_start(sl_reader *r, char *err, size_t errlen) {
    r->q_head = r->q_count = 0;
    r->pplan = r->cplan;
    for (int i = 0; i < r->n; i++) sl_rd_corpus_reset(&r->c[i]);
    r->stop = false;
    if (pthread_create(&r->th, NULL, producer_main, r) != 0)
        return sl_fail(err, errlen, "cannot start the data reader thread");
    r->running = true;
    return 0;
}

sl_rd_slot *sl_rd_queue_head(sl_reader *r) {
    pthread_mutex_lock(&r->mu);
    if (r->q_count == 0) r->waits++;
    while (r->q_count == 0) pthread_cond_wait(&r->cv_cons, &r->mu);
    sl_rd_slot *s = &r->ring[r->q_head];
    pthread_mutex_unlock(&r->mu);
    return s;
}

void sl_rd_queue_pop(sl_reader *r) {
    pthread_mutex_lock(&r->mu);
    r->q_head = (r->q_head + 1) % r->n_ring;
    r->q_count--;
    pthread_cond_signal(&r->cv_prod);
    pthread_mutex_unlock(&r->mu);
}
