/*
 * model/decode.h - decoding with a KV cache: prompts in, logits of each next token out, and the
 * generation loop that samples from them (docs/generate.md).
 *
 * A decoder runs a forward-only model over `batch` sequences that grow by a few tokens per call.
 * Each layer's keys and values (after QK-norm and RoPE) stay in caches [batch, max_len, KV, D], so
 * a new token costs one pass over the cache instead of a forward over the whole sequence. The
 * layers are the model's own blocks (attention/attn_block.h sl_attn_block_decode, the FFN and MoE
 * blocks unchanged: with one token per sequence the router, dispatcher and grouped experts run on
 * `batch` rows), so the numbers are the training forward's within rounding (tests/test_generate.c
 * compares every position's logits with a full forward).
 *
 * Sequences of different lengths share a call: a pass takes n tokens per sequence (the most any
 * sequence still has, at most `chunk`) and pads the shorter ones. A padding row writes its key and
 * value at the position the sequence's next real token will overwrite before any query can read
 * it, so padding never changes a result; it only costs its compute.
 */
#ifndef SL_DECODE_H
#define SL_DECODE_H

#include "core/comm.h"
#include "model/model.h"
#include "model/sampler.h"

typedef struct {
    sl_model *m; /* forward-only; the decoder sets its shape (not owned) */
    int batch, max_len, chunk;
    sl_tensor **kc, **vc;         /* [layers] caches [batch, max_len, KV, D] */
    sl_tensor *start;             /* [batch] i32: tokens cached before the current pass */
    sl_tensor *sel, *xsel, *rows; /* row indices, their final hidden states, their logits */
    int64_t max_rows;             /* rows sel/xsel/rows hold */
    sl_tensor *hv[3];             /* view handles of the first rows of sel, xsel, rows */
    int32_t *len;                 /* [batch] tokens cached per sequence */
    int32_t *host;                /* staging for ids, positions, starts, rows */
} sl_decoder;

/* A decoder for `batch` sequences of up to max_len tokens each, feeding at most `chunk` tokens
 * per sequence per pass. m must be forward-only (sl_model_create_mem with SL_MEMORY_FORWARD_ONLY,
 * or sl_model_create_shared) without expert parallelism beyond what every rank runs together.
 * NULL with a message when the caches cannot be made. */
sl_decoder *sl_decoder_create(sl_model *m, int batch, int max_len, int chunk, char *err,
                              size_t errlen);
/* Forgets every sequence (lengths back to 0; the caches' contents are overwritten as needed). */
void sl_decoder_reset(sl_decoder *d);
/* Appends n[b] tokens tokens[b][0 .. n[b]) to sequence b (n[b] may be 0) and runs them. Writes
 * the logits [vocab] of each sequence's last new token to last + b * vocab (rows with n[b] = 0
 * untouched; last may be NULL) and, when `all` is not NULL, the logits of every new token, the
 * sequences one after the other (sum of n rows of vocab floats). 0, or -1 with a message when a
 * sequence would exceed max_len or a token is outside the vocabulary. */
int sl_decoder_feed(sl_decoder *d, const int32_t *const *tokens, const int *n, float *last,
                    float *all, char *err, size_t errlen);
/* Tokens cached for sequence b. */
int sl_decoder_length(const sl_decoder *d, int b);
void sl_decoder_free(sl_decoder *d);

/* Logits [n, vocab] (an fp32 tensor on the model's backend) of the rows first .. first + n - 1
 * of the final hidden states of m's last forward (sl_model_forward: rows are b * seq + i), as
 * the loss saw them. For tools and tests (sluice eval --dump-logits). */
void sl_model_logits(sl_model *m, int64_t first, int64_t n, sl_tensor *logits);

/* ---- the generation loop ---------------------------------------------------------------- */

typedef struct {
    int max_new;     /* tokens generated per sequence at most */
    int32_t stop_id; /* a sequence ends after sampling this token (-1: never) */
    /* NULL, or a group of ranks that run the loop together (training.sample_every with expert
     * parallelism): rank 0's choices are broadcast, so every rank feeds the same tokens. */
    sl_comm *sync;
    /* Called with each sequence's token as soon as it is chosen (NULL: not called). */
    void (*on_token)(void *user, int seq, int32_t id);
    void *user;
} sl_generate_opts;

/* Feeds prompt b (prompts[b], n_prompt[b] >= 1 tokens) to sequence b of a reset decoder, then
 * samples up to o->max_new tokens per sequence with samplers[b], feeding each back. out[b]
 * (malloc'ed; free it) receives sequence b's new tokens, out_n[b] their count (the stop token
 * included when it ended the sequence). 0, or -1 with a message. */
int sl_generate(sl_decoder *d, sl_sampler *samplers, const int32_t *const *prompts,
                const int *n_prompt, const sl_generate_opts *o, int32_t **out, int *out_n,
                char *err, size_t errlen);

#endif
