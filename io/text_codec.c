/* io/text_codec.c - the byte-level codec and the BPE one over io/tokenizer.h (see
 * text_codec.h). */
#include "io/text_codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "io/safetensors_internal.h" /* sl_st_utf8_invalid_at */
#include "io/tokenizer.h"

struct sl_text_codec {
    char name[4200];
    int vocab;
    int32_t eod;
    uint8_t bytes[256];  /* byte b is token b */
    sl_tokenizer *tok;   /* the BPE codec's tokenizer, NULL: bytes */
    sl_tok_state *state; /* its encoding state (encode is called from one thread) */
};

static sl_text_codec *bytes_open(int vocab_size, char *err, size_t errlen) {
    if (vocab_size != SL_TEXT_EOD_BYTE + 1) {
        sl_fail(err, errlen,
                "the model's vocabulary has %d tokens, not the byte-level 257, and no tokenizer "
                "was given (sluice generate --tokenizer PATH, or a tokenizer.json beside "
                "config.json)",
                vocab_size);
        return NULL;
    }
    sl_text_codec *c = sl_xcalloc(1, sizeof *c);
    snprintf(c->name, sizeof c->name, "bytes");
    c->vocab = vocab_size;
    c->eod = SL_TEXT_EOD_BYTE;
    for (int b = 0; b < 256; b++) c->bytes[b] = (uint8_t)b;
    return c;
}

/* A Hugging Face tokenizer.json: its vocabulary must index the model's embeddings, and
 * generation stops at its end-of-document token (<|endoftext|>, <|end_of_text|> or </s>). */
static sl_text_codec *bpe_open(const char *path, int vocab_size, char *err, size_t errlen) {
    sl_tokenizer *t = sl_tokenizer_load(path, err, errlen);
    if (!t) return NULL;
    if ((int64_t)sl_tokenizer_vocab_size(t) > (int64_t)vocab_size) {
        sl_fail(err, errlen,
                "%s: the tokenizer's vocabulary (%u tokens) does not fit the model's vocab_size "
                "= %d",
                sl_tokenizer_path(t), sl_tokenizer_vocab_size(t), vocab_size);
        sl_tokenizer_free(t);
        return NULL;
    }
    sl_text_codec *c = sl_xcalloc(1, sizeof *c);
    snprintf(c->name, sizeof c->name, "bpe %s", sl_tokenizer_path(t));
    c->vocab = (int)sl_tokenizer_vocab_size(t);
    c->eod = (int32_t)sl_tokenizer_default_eod(t);
    c->tok = t;
    c->state = sl_tok_state_new(t);
    return c;
}

sl_text_codec *sl_text_codec_open(const char *tokenizer, int vocab_size, char *err, size_t errlen) {
    return tokenizer ? bpe_open(tokenizer, vocab_size, err, errlen)
                     : bytes_open(vocab_size, err, errlen);
}

void sl_text_codec_free(sl_text_codec *c) {
    if (!c) return;
    if (c->state) sl_tok_state_free(c->state);
    if (c->tok) sl_tokenizer_free(c->tok);
    free(c);
}

int sl_text_codec_encode(const sl_text_codec *c, const char *text, size_t len, int32_t **ids,
                         int *n, char *err, size_t errlen) {
    if (len > (size_t)(1 << 30) - (size_t)*n)
        return sl_fail(err, errlen, "text of %zu bytes is too long to encode", len);
    if (c->tok) {
        sl_tok_ids out = {0};
        size_t bad = 0;
        if (sl_tokenizer_encode(c->state, text, len, &out, &bad, err, errlen) != 0) {
            free(out.ids);
            return -1;
        }
        *ids = sl_xrealloc(*ids, ((size_t)*n + out.n + 1) * sizeof **ids);
        for (size_t i = 0; i < out.n; i++) (*ids)[(*n)++] = (int32_t)out.ids[i];
        free(out.ids);
        return 0;
    }
    *ids = sl_xrealloc(*ids, ((size_t)*n + len + 1) * sizeof **ids);
    for (size_t i = 0; i < len; i++) (*ids)[(*n)++] = (unsigned char)text[i];
    return 0;
}

const uint8_t *sl_text_codec_token(const sl_text_codec *c, int32_t id, size_t *n) {
    *n = 0;
    if (id < 0 || id >= c->vocab) return NULL;
    if (id == c->eod) return c->bytes; /* no text */
    if (c->tok) return sl_tokenizer_id_bytes(c->tok, (uint32_t)id, n);
    *n = 1;
    return c->bytes + id;
}

int32_t sl_text_codec_eod(const sl_text_codec *c) {
    return c->eod;
}

int sl_text_codec_vocab(const sl_text_codec *c) {
    return c->vocab;
}

const char *sl_text_codec_name(const sl_text_codec *c) {
    return c->name;
}

char *sl_text_codec_printable(const sl_text_codec *c, const int32_t *ids, int n) {
    size_t len = 0, cap = 64;
    unsigned char *raw = sl_xmalloc(cap);
    for (int i = 0; i < n; i++) {
        size_t k;
        const uint8_t *b = sl_text_codec_token(c, ids[i], &k);
        if (!b || !k) continue;
        if (len + k > cap) raw = sl_xrealloc(raw, cap = 2 * (len + k));
        memcpy(raw + len, b, k), len += k;
    }
    /* each invalid byte becomes the 3 bytes of U+FFFD */
    char *out = sl_xmalloc(3 * len + 1), *o = out;
    size_t at = 0;
    while (at < len) {
        const long long bad = sl_st_utf8_invalid_at(raw + at, len - at);
        const size_t good = bad < 0 ? len - at : (size_t)bad;
        memcpy(o, raw + at, good), o += good, at += good;
        if (bad >= 0) memcpy(o, "\xef\xbf\xbd", 3), o += 3, at++;
    }
    *o = '\0';
    free(raw);
    return out;
}
