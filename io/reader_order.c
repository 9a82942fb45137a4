/* io/reader_order.c - the global sequence order (docs/data.md, "One global order" and "Sequence
 * shuffle"): which corpus each global sequence comes from, which sequences are this rank's,
 * and where in its corpus's stream each sequence's tokens lie.
 *
 * Everything here is arithmetic on token positions; no data is read. The producer thread and
 * next() each run a copy of the plan, so the functions take the plan as an argument. */
#include <math.h>

#include "core/rng.h"
#include "io/reader_internal.h"

void sl_rd_shuffle(uint32_t *a, uint64_t n, uint64_t seed, uint64_t corpus, uint64_t epoch,
                   uint64_t what) {
    uint64_t s = sl_mix64(sl_mix64(sl_mix64(sl_mix64(seed) ^ corpus) ^ epoch) ^ what);
    for (uint64_t i = n; i > 1; i--) {
        s += 0x9E3779B97F4A7C15ull;
        uint64_t j = sl_mix64(s) % i;
        uint32_t t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

/* ---- the mixture and the rank's share ---- */

/* The corpus whose share of the tokens so far lags its weight the most (ties: the first). */
static int plan_choose(const sl_reader *r, const sl_rd_plan *pl) {
    if (r->n == 1) return 0;
    double total = 0;
    for (int i = 0; i < r->n; i++) total += (double)pl->pos[i];
    int best = 0;
    double bv = -INFINITY;
    for (int i = 0; i < r->n; i++) {
        double v = r->c[i].weight * (total + r->seq_len) - (double)pl->pos[i];
        if (v > bv) bv = v, best = i;
    }
    return best;
}

void sl_rd_plan_take(const sl_reader *r, sl_rd_plan *pl, int *c, uint64_t *p) {
    *c = plan_choose(r, pl);
    *p = pl->pos[*c];
    pl->pos[*c] += (uint64_t)r->seq_len;
    pl->g++;
}

static void plan_skip(const sl_reader *r, sl_rd_plan *pl, uint64_t k) {
    if (r->n == 1) {
        pl->pos[0] += k * (uint64_t)r->seq_len;
        pl->g += k;
        return;
    }
    int c;
    uint64_t p;
    while (k--) sl_rd_plan_take(r, pl, &c, &p);
}

uint64_t sl_rd_plan_offset(const sl_reader *r, const sl_rd_plan *pl) {
    return (pl->g - pl->origin) % r->S;
}

uint64_t sl_rd_plan_next_mine(const sl_reader *r, sl_rd_plan *pl, int *c, uint64_t *p) {
    uint64_t off = sl_rd_plan_offset(r, pl);
    if (off >= r->hi)
        plan_skip(r, pl, r->S - off + r->lo);
    else if (off < r->lo)
        plan_skip(r, pl, r->lo - off);
    uint64_t g = pl->g;
    sl_rd_plan_take(r, pl, c, p);
    return g;
}

void sl_rd_plan_finish_share(const sl_reader *r, sl_rd_plan *pl) {
    if (r->hi < r->S && sl_rd_plan_offset(r, pl) == r->hi) plan_skip(r, pl, r->S - r->hi);
}

/* ---- the sequence shuffle ----
 *
 * A corpus's sequences lie on a grid: the k-th sequence since the anchor a starts at stream
 * position a + k L (L = seq_len). Each epoch's grid points (those whose start lies in
 * [e N, (e + 1) N) for a corpus of N tokens) are cut, from the epoch's first one, into windows of
 * K = max(1, floor(W / L)) consecutive sequences (the last window of an epoch may be shorter).
 * The sequence delivered at slot j of a window is the window's sequence perm(j), perm keyed by
 * (data.seed, corpus, epoch, window). Windows permute whole sequences among themselves, so every
 * token of the stream is still a target exactly once. */

typedef struct {
    uint64_t start, len; /* the window's first grid index and its sequences */
    uint64_t epoch, k;   /* the epoch and the window's ordinal in it */
} window_t;

static uint64_t ceil_div(uint64_t a, uint64_t b) {
    return a / b + (a % b != 0);
}

/* First grid index at or after stream position x. */
static uint64_t grid_index_at(uint64_t anchor, uint64_t L, uint64_t x) {
    return x <= anchor ? 0 : ceil_div(x - anchor, L);
}

static window_t window_of(uint64_t N, uint64_t W, uint64_t L, uint64_t anchor, uint64_t n) {
    window_t w;
    const uint64_t g = anchor + n * L;
    w.epoch = g / N;
    const uint64_t first = grid_index_at(anchor, L, w.epoch * N);
    const uint64_t end = grid_index_at(anchor, L, (w.epoch + 1) * N);
    const uint64_t K = W / L > 0 ? W / L : 1;
    w.k = (n - first) / K;
    w.start = first + w.k * K;
    w.len = end - w.start < K ? end - w.start : K;
    return w;
}

uint64_t sl_rd_source(const sl_reader *r, int ci, uint64_t anchor, uint64_t p) {
    if (r->eval || r->window == 0) return p;
    const uint64_t L = (uint64_t)r->seq_len;
    const uint64_t n = (p - anchor) / L;
    const window_t w = window_of(r->c[ci].n_tokens, r->window, L, anchor, n);
    const uint64_t key = sl_mix64(sl_mix64(sl_mix64(sl_mix64(r->seed) ^ (uint64_t)ci) ^ w.epoch) ^
                                  sl_mix64(w.k ^ 0x5EC5EC5EC5EC5EC5ull));
    return anchor + (w.start + sl_rd_permute(n - w.start, w.len, key)) * L;
}

uint64_t sl_rd_reanchor(uint64_t n_tokens, uint64_t window, int seq_len, uint64_t anchor,
                        uint64_t p) {
    if (window == 0) return p;
    const uint64_t L = (uint64_t)seq_len;
    const uint64_t n = (p - anchor) / L;
    const window_t w = window_of(n_tokens, window, L, anchor, n);
    return n == w.start ? p : anchor + (w.start + w.len) * L;
}

void sl_rd_plan_change_grid(const sl_reader *r, sl_rd_plan *pl, int old_seq_len,
                            uint64_t old_window) {
    for (int i = 0; i < r->n; i++) {
        const uint64_t a =
            sl_rd_reanchor(r->c[i].n_tokens, old_window, old_seq_len, pl->anchor[i], pl->pos[i]);
        pl->pos[i] = pl->anchor[i] = a;
    }
}

/* A balanced Feistel network on the smallest even number of bits 2h with 2^(2h) >= n: six
 * rounds, each R' = L ^ F(R), F a splitmix64 of R and the round's key; images outside [0, n)
 * are mapped again until they fall inside (cycle walking keeps it a bijection of [0, n); fewer
 * than 4 rounds of walking are needed on average since 2^(2h) < 4 n). Needs no memory, so a
 * window of any size costs nothing to hold, and any slot's image is computed directly. */
uint64_t sl_rd_permute(uint64_t j, uint64_t n, uint64_t key) {
    if (n <= 1) return 0;
    int bits = 64 - __builtin_clzll(n - 1);
    bits += bits & 1;
    const int h = bits / 2;
    const uint64_t mask = h == 32 ? 0xFFFFFFFFull : ((1ull << h) - 1);
    uint64_t x = j;
    do {
        uint64_t left = (x >> h) & mask, right = x & mask;
        for (uint64_t round = 0; round < 6; round++) {
            const uint64_t f = sl_mix64(right ^ sl_mix64(key + round)) & mask;
            const uint64_t t = right;
            right = left ^ f;
            left = t;
        }
        x = (left << h) | right;
    } while (x >= n);
    return x;
}
