/*
 * io/tokenizer_map.c - the tokenizer's small data structures: the byte-string -> id hash map,
 * the ByteLevel byte <-> character map, and growable id arrays.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/log.h"
#include "io/tokenizer_internal.h"

/* ---- ByteLevel: GPT-2's bytes_to_unicode ---- */

/* The printable bytes stand for themselves ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF); the
 * other 68 bytes, in increasing order, stand for U+0100, U+0101, ... */
static uint32_t g_byte_char[256];
static int16_t g_char_byte[512];
static pthread_once_t g_map_once = PTHREAD_ONCE_INIT;

static bool printable(int b) {
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
}

static void build_map(void) {
    for (int c = 0; c < 512; c++) g_char_byte[c] = -1;
    uint32_t extra = 256;
    for (int b = 0; b < 256; b++) {
        g_byte_char[b] = printable(b) ? (uint32_t)b : extra++;
        g_char_byte[g_byte_char[b]] = (int16_t)b;
    }
}

uint32_t tok_byte_char(uint8_t b) {
    pthread_once(&g_map_once, build_map);
    return g_byte_char[b];
}

int tok_char_byte(uint32_t c) {
    pthread_once(&g_map_once, build_map);
    return c < 512 ? g_char_byte[c] : -1;
}

long tok_unmap_string(const char *s, size_t n, uint8_t *out) {
    pthread_once(&g_map_once, build_map);
    size_t i = 0, k = 0;
    while (i < n) {
        utf8proc_int32_t c;
        utf8proc_ssize_t used =
            utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &c);
        if (used <= 0) return -1;
        int b = c >= 0 && c < 512 ? g_char_byte[c] : -1;
        if (b < 0) return -1;
        out[k++] = (uint8_t)b;
        i += (size_t)used;
    }
    return (long)k;
}

/* ---- ids ---- */

void sl_tok_ids_push(sl_tok_ids *v, uint32_t id) {
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 256;
        v->ids = sl_xrealloc(v->ids, v->cap * sizeof *v->ids);
    }
    v->ids[v->n++] = id;
}

/* ---- byte string -> id ---- */

/* FNV-1a, 64-bit, then MurmurHash3's finalizer: FNV's low bits (the slot index) depend only
 * on the low bits of the bytes, and the finalizer mixes the high bits back in. Keys are short
 * token strings. */
uint64_t tok_hash_bytes(const void *p, size_t n) {
    const uint8_t *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    return h ^ (h >> 33);
}

void tok_strmap_init(tok_strmap *m) {
    memset(m, 0, sizeof *m);
    m->cap = 1024;
    m->slot = sl_xcalloc(m->cap, sizeof *m->slot);
}

void tok_strmap_free(tok_strmap *m) {
    free(m->slot), free(m->off), free(m->len), free(m->val), free(m->bytes);
    memset(m, 0, sizeof *m);
}

static size_t find_slot(const tok_strmap *m, const void *key, size_t n, bool *found) {
    size_t mask = m->cap - 1, i = (size_t)tok_hash_bytes(key, n) & mask;
    for (;;) {
        uint32_t e = m->slot[i];
        if (e == 0) {
            *found = false;
            return i;
        }
        e--;
        if (m->len[e] == n && memcmp(m->bytes + m->off[e], key, n) == 0) {
            *found = true;
            return i;
        }
        i = (i + 1) & mask;
    }
}

static void grow(tok_strmap *m) {
    size_t cap = m->cap * 2;
    uint32_t *slot = sl_xcalloc(cap, sizeof *slot);
    for (size_t e = 0; e < m->n; e++) {
        size_t i = (size_t)tok_hash_bytes(m->bytes + m->off[e], m->len[e]) & (cap - 1);
        while (slot[i]) i = (i + 1) & (cap - 1);
        slot[i] = (uint32_t)e + 1;
    }
    free(m->slot);
    m->slot = slot;
    m->cap = cap;
}

void tok_strmap_put(tok_strmap *m, const void *key, size_t n, uint32_t val) {
    bool found;
    size_t i = find_slot(m, key, n, &found);
    if (found) {
        m->val[m->slot[i] - 1] = val;
        return;
    }
    if (m->n == m->ncap) {
        m->ncap = m->ncap ? 2 * m->ncap : 1024;
        m->off = sl_xrealloc(m->off, m->ncap * sizeof *m->off);
        m->len = sl_xrealloc(m->len, m->ncap * sizeof *m->len);
        m->val = sl_xrealloc(m->val, m->ncap * sizeof *m->val);
    }
    SL_CHECK(m->used + n < UINT32_MAX, "token strings exceed 4 GiB");
    sl_xreserve((void **)&m->bytes, &m->bcap, m->used + n + 1);
    memcpy(m->bytes + m->used, key, n);
    m->off[m->n] = (uint32_t)m->used;
    m->len[m->n] = (uint32_t)n;
    m->val[m->n] = val;
    m->used += n;
    m->slot[i] = (uint32_t)++m->n;
    if (2 * m->n > m->cap) grow(m);
}

int64_t tok_strmap_get(const tok_strmap *m, const void *key, size_t n) {
    if (!m->slot) return -1;
    bool found;
    size_t i = find_slot(m, key, n, &found);
    return found ? (int64_t)m->val[m->slot[i] - 1] : -1;
}
