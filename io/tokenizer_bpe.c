/*
 * io/tokenizer_bpe.c - byte-pair encoding of one pre-tokenized piece.
 *
 * A piece starts as one token per byte; then, as long as some adjacent pair has a merge, the
 * pair with the lowest merge rank is merged, the leftmost one among equal ranks (the order of
 * Hugging Face's BPE: a priority queue on (rank, position)). Two loops give that order:
 *   - short pieces: the ranks of all adjacent pairs in an array, a linear scan for the minimum
 *     per merge (O(n^2), but n is small and the scan is cache-friendly);
 *   - long pieces (tok_bpe_heap_min bytes and more, e.g. a run of CJK text, which the
 *     pre-tokenizer keeps whole): a linked list of symbols and a binary min-heap keyed by
 *     (rank, position) with lazy invalidation, O(n log n).
 */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "io/tokenizer_internal.h"

size_t tok_bpe_heap_min = 96;

typedef struct {
    uint64_t key;         /* rank << 32 | position of the left symbol */
    uint32_t left, right; /* the pair it was made for (stale when the symbols changed) */
} heap_entry;

struct tok_bpe_scratch {
    uint32_t *sym, *rank, *mid;
    int32_t *next, *prev;
    heap_entry *heap;
    size_t cap, hcap, hn;
};

tok_bpe_scratch *tok_bpe_scratch_new(void) {
    return sl_xcalloc(1, sizeof(tok_bpe_scratch));
}

void tok_bpe_scratch_free(tok_bpe_scratch *s) {
    if (!s) return;
    free(s->sym), free(s->rank), free(s->mid), free(s->next), free(s->prev), free(s->heap);
    free(s);
}

static void reserve(tok_bpe_scratch *s, size_t n) {
    if (n <= s->cap) return;
    size_t c = s->cap ? s->cap : 64;
    while (c < n) c *= 2;
    s->sym = sl_xrealloc(s->sym, c * sizeof *s->sym);
    s->rank = sl_xrealloc(s->rank, c * sizeof *s->rank);
    s->mid = sl_xrealloc(s->mid, c * sizeof *s->mid);
    s->next = sl_xrealloc(s->next, c * sizeof *s->next);
    s->prev = sl_xrealloc(s->prev, c * sizeof *s->prev);
    s->cap = c;
}

static void pair(const sl_tokenizer *t, uint32_t a, uint32_t b, uint32_t *rank, uint32_t *id) {
    if (!tok_merge_find(t, a, b, rank, id)) *rank = UINT32_MAX;
}

static void linear(const sl_tokenizer *t, tok_bpe_scratch *s, size_t m, sl_tok_ids *out) {
    uint32_t *sym = s->sym, *rank = s->rank, *mid = s->mid;
    for (size_t i = 0; i + 1 < m; i++) pair(t, sym[i], sym[i + 1], &rank[i], &mid[i]);
    while (m > 1) {
        size_t best = 0;
        uint32_t br = rank[0];
        for (size_t i = 1; i + 1 < m; i++)
            if (rank[i] < br) br = rank[i], best = i;
        if (br == UINT32_MAX) break;
        sym[best] = mid[best];
        /* drop symbol best + 1 and the pair it started */
        memmove(sym + best + 1, sym + best + 2, (m - best - 2) * sizeof *sym);
        memmove(rank + best + 1, rank + best + 2, (m - best - 2) * sizeof *rank);
        memmove(mid + best + 1, mid + best + 2, (m - best - 2) * sizeof *mid);
        m--;
        if (best > 0) pair(t, sym[best - 1], sym[best], &rank[best - 1], &mid[best - 1]);
        if (best + 1 < m) pair(t, sym[best], sym[best + 1], &rank[best], &mid[best]);
    }
    for (size_t i = 0; i < m; i++) sl_tok_ids_push(out, sym[i]);
}

static void heap_push(tok_bpe_scratch *s, uint64_t key, uint32_t left, uint32_t right) {
    if (s->hn == s->hcap) {
        s->hcap = s->hcap ? 2 * s->hcap : 256;
        s->heap = sl_xrealloc(s->heap, s->hcap * sizeof *s->heap);
    }
    heap_entry *h = s->heap;
    size_t i = s->hn++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p].key <= key) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = (heap_entry){key, left, right};
}

static heap_entry heap_pop(tok_bpe_scratch *s) {
    heap_entry *h = s->heap, top = h[0], last = h[--s->hn];
    size_t i = 0, n = s->hn;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && h[c + 1].key < h[c].key) c++;
        if (last.key <= h[c].key) break;
        h[i] = h[c];
        i = c;
    }
    if (n) h[i] = last;
    return top;
}

static void push_pair(const sl_tokenizer *t, tok_bpe_scratch *s, int32_t pos) {
    const int32_t nx = s->next[pos];
    if (nx < 0) return;
    uint32_t r, id;
    if (tok_merge_find(t, s->sym[pos], s->sym[nx], &r, &id))
        heap_push(s, (uint64_t)r << 32 | (uint32_t)pos, s->sym[pos], s->sym[nx]);
}

static void heap_merge(const sl_tokenizer *t, tok_bpe_scratch *s, size_t m, sl_tok_ids *out) {
    uint32_t *sym = s->sym;
    int32_t *next = s->next, *prev = s->prev;
    for (size_t i = 0; i < m; i++) {
        next[i] = i + 1 < m ? (int32_t)(i + 1) : -1;
        prev[i] = (int32_t)i - 1;
    }
    s->hn = 0;
    for (size_t i = 0; i + 1 < m; i++) push_pair(t, s, (int32_t)i);
    while (s->hn) {
        heap_entry e = heap_pop(s);
        const int32_t pos = (int32_t)(uint32_t)e.key, nx = next[pos];
        /* stale: the symbol was merged into its left neighbour, or either side changed */
        if (sym[pos] == UINT32_MAX || nx < 0 || sym[pos] != e.left || sym[nx] != e.right) continue;
        uint32_t r = 0, id = 0;
        SL_CHECK(tok_merge_find(t, e.left, e.right, &r, &id), "a queued pair without a merge");
        sym[pos] = id;
        sym[nx] = UINT32_MAX;
        next[pos] = next[nx];
        if (next[nx] >= 0) prev[next[nx]] = pos;
        if (prev[pos] >= 0) push_pair(t, s, prev[pos]);
        push_pair(t, s, pos);
    }
    for (int32_t i = 0; i >= 0; i = next[i]) sl_tok_ids_push(out, sym[i]);
}

void tok_bpe_word(const sl_tokenizer *t, tok_bpe_scratch *s, const uint8_t *p, size_t n,
                  sl_tok_ids *out) {
    if (n == 0) return;
    if (t->ignore_merges) {
        int64_t id = tok_strmap_get(&t->vocab, p, n);
        if (id >= 0) {
            sl_tok_ids_push(out, (uint32_t)id);
            return;
        }
    }
    if (n == 1) {
        sl_tok_ids_push(out, t->byte_id[p[0]]);
        return;
    }
    SL_CHECK(n < INT32_MAX, "a piece of %zu bytes", n);
    reserve(s, n);
    for (size_t i = 0; i < n; i++) s->sym[i] = t->byte_id[p[i]];
    if (n >= tok_bpe_heap_min)
        heap_merge(t, s, n, out);
    else
        linear(t, s, n, out);
}
