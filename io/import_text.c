/*
 * io/import_text.c - the text and JSONL input formats of `sluice data build`: documents of a
 * text file (one per file, line or paragraph) and the "text" field of each JSONL line, into the
 * sink byte by byte or, with --tokenizer, through the document encoder (sl_sink_text). The
 * already-tokenized formats: io/import_tokenized.c; detection, defaults and the formats table:
 * io/importers.c.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "core/log.h"
#include "io/importers.h"

/* ---- text ---- */

/* A document of a text file being assembled. Byte-level, its bytes are pushed as they come
 * (nothing is held, however long the document); with a tokenizer they are collected and the
 * whole document goes to sl_sink_text. */
typedef struct {
    sl_sink *k;
    const char *path;
    char *buf;
    size_t len, cap;
    uint64_t start; /* file offset of its first byte */
} text_doc;

static int doc_begin(text_doc *d, uint64_t at, char *err, size_t errlen) {
    if (!d->k->enc) return sl_sink_doc(d->k, err, errlen);
    d->len = 0;
    d->start = at;
    return 0;
}

static inline int doc_byte(text_doc *d, unsigned char c, char *err, size_t errlen) {
    if (!d->k->enc) return sl_sink_push(d->k, c, err, errlen);
    if (d->len == d->cap) sl_xreserve((void **)&d->buf, &d->cap, d->len + 1);
    d->buf[d->len++] = (char)c;
    return 0;
}

static int doc_end(text_doc *d, char *err, size_t errlen) {
    if (!d->k->enc) return sl_sink_push(d->k, TEXT_EOD, err, errlen);
    return sl_sink_text(d->k, d->buf, d->len, (sl_doc_origin){d->path, 0, d->start}, err, errlen);
}

int imp_text(sl_sink *k, const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) return sl_fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    unsigned char *b = sl_xmalloc(CHUNK_BYTES);
    const sl_text_docs mode = k->o->text_docs;
    text_doc d = {.k = k, .path = path};
    bool in_doc = false;
    uint64_t line_len = 0, base = 0;
    bool pending_nl = false;
    int rc = 0;
    size_t got;
    while (rc == 0 && (got = fread(b, 1, CHUNK_BYTES, f)) > 0) {
        for (size_t i = 0; i < got && rc == 0; i++) {
            unsigned char ch = b[i];
            const uint64_t at = base + i;
            if (mode == SL_TEXT_DOC_FILE) {
                if (!in_doc) rc = doc_begin(&d, at, err, errlen), in_doc = true;
                if (rc == 0) rc = doc_byte(&d, ch, err, errlen);
            } else if (mode == SL_TEXT_DOC_LINE) {
                if (ch == '\n') {
                    if (in_doc) rc = doc_end(&d, err, errlen);
                    in_doc = false;
                } else {
                    if (!in_doc) rc = doc_begin(&d, at, err, errlen), in_doc = true;
                    if (rc == 0) rc = doc_byte(&d, ch, err, errlen);
                }
            } else { /* paragraph */
                if (ch == '\n') {
                    if (line_len == 0 && in_doc) {
                        rc = doc_end(&d, err, errlen);
                        in_doc = pending_nl = false;
                    } else if (line_len > 0) {
                        pending_nl = true;
                    }
                    line_len = 0;
                } else {
                    if (!in_doc) {
                        rc = doc_begin(&d, at, err, errlen);
                        in_doc = true;
                        pending_nl = false;
                    } else if (pending_nl) {
                        rc = doc_byte(&d, '\n', err, errlen);
                        pending_nl = false;
                    }
                    if (rc == 0) rc = doc_byte(&d, ch, err, errlen);
                    line_len++;
                }
            }
        }
        base += got;
    }
    if (rc == 0 && ferror(f))
        rc = sl_fail(err, errlen, "%s: read error: %s", path, strerror(errno));
    if (rc == 0 && in_doc) rc = doc_end(&d, err, errlen);
    free(d.buf);
    free(b);
    fclose(f);
    return rc;
}

/* Whether JSON text s (n bytes) escapes a NUL character (\u0000): cJSON ends its strings there,
 * so the rest of the text would be lost without a word. */
static bool escapes_nul(const char *s, size_t n) {
    for (size_t i = 0; i + 1 < n; i++) {
        if (s[i] != '\\') continue;
        if (s[i + 1] == 'u' && i + 5 < n && memcmp(s + i + 2, "0000", 4) == 0) return true;
        i++; /* the escaped character */
    }
    return false;
}

int imp_jsonl(sl_sink *k, const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) return sl_fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    uint64_t lineno = 0;
    int rc = 0;
    while (rc == 0 && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        ssize_t s = 0;
        while (s < len && (line[s] == ' ' || line[s] == '\t' || line[s] == '\r' || line[s] == '\n'))
            s++;
        if (s == len) continue; /* blank line */
        cJSON *o = cJSON_ParseWithLength(line, (size_t)len);
        if (!o) {
            rc = sl_fail(err, errlen, "%s: line %llu: not valid JSON", path,
                         (unsigned long long)lineno);
            break;
        }
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "text");
        if (!cJSON_IsString(t) || !t->valuestring) {
            rc = sl_fail(err, errlen, "%s: line %llu: no string field \"text\"", path,
                         (unsigned long long)lineno);
        } else if (escapes_nul(line, (size_t)len)) {
            rc = sl_fail(err, errlen,
                         "%s: line %llu: the line escapes a NUL character (\\u0000), which the "
                         "JSON parser cannot carry in a string",
                         path, (unsigned long long)lineno);
        } else if (t->valuestring[0]) {
            rc = sl_sink_text(k, t->valuestring, strlen(t->valuestring),
                              (sl_doc_origin){path, lineno, 0}, err, errlen);
        }
        cJSON_Delete(o);
    }
    if (rc == 0 && ferror(f))
        rc = sl_fail(err, errlen, "%s: read error: %s", path, strerror(errno));
    free(line);
    fclose(f);
    return rc;
}

int sl_sink_text(sl_sink *k, const char *text, size_t len, sl_doc_origin origin, char *err,
                 size_t errlen) {
    if (k->enc) return sl_doc_encoder_submit(k->enc, text, len, origin, err, errlen);
    int rc = sl_sink_doc(k, err, errlen);
    for (size_t i = 0; i < len && rc == 0; i++)
        rc = sl_sink_push(k, (unsigned char)text[i], err, errlen);
    return rc ? rc : sl_sink_push(k, TEXT_EOD, err, errlen);
}

int sl_sink_encoded(void *user, const uint32_t *ids, size_t n, char *err, size_t errlen) {
    sl_sink *k = user;
    if (sl_sink_doc(k, err, errlen) != 0) return -1;
    for (size_t i = 0; i < n; i++)
        if (sl_sink_push(k, ids[i], err, errlen) != 0) return -1;
    return k->eod >= 0 ? sl_sink_push(k, (uint32_t)k->eod, err, errlen) : 0;
}
