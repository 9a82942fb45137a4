/* model/decode.c - decoding with a KV cache and the generation loop (see decode.h). */
#include "model/decode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/ops.h"

/* Row buffers for `rows` selected tokens: their indices, hidden states and logits. */
static void reserve_rows(sl_decoder *d, int64_t rows) {
    if (rows <= d->max_rows) return;
    const sl_model *m = d->m;
    sl_tensor_free(d->sel);
    sl_tensor_free(d->xsel);
    sl_tensor_free(d->rows);
    d->sel = sl_tensor_new1(m->be, SL_I32, rows);
    d->xsel = sl_tensor_new2(m->be, m->params.compute, rows, m->cfg.hidden_size);
    d->rows = sl_tensor_new2(m->be, SL_F32, rows, m->cfg.vocab_size);
    d->max_rows = rows;
}

sl_decoder *sl_decoder_create(sl_model *m, int batch, int max_len, int chunk, char *err,
                              size_t errlen) {
    if (m->memory != SL_MEMORY_FORWARD_ONLY) {
        sl_fail(err, errlen, "decoding needs a forward-only model, not memory mode \"%s\"",
                sl_memory_mode_name(m->memory));
        return NULL;
    }
    if (batch < 1 || max_len < 1 || chunk < 1) {
        sl_fail(err, errlen, "decoder of %d sequences of %d tokens in chunks of %d", batch, max_len,
                chunk);
        return NULL;
    }
    const sl_model_config *c = &m->cfg;
    sl_decoder *d = sl_xcalloc(1, sizeof *d);
    d->m = m, d->batch = batch, d->max_len = max_len, d->chunk = chunk;
    const int nl = c->num_hidden_layers;
    d->kc = sl_xcalloc((size_t)nl, sizeof *d->kc);
    d->vc = sl_xcalloc((size_t)nl, sizeof *d->vc);
    const int64_t shape[4] = {batch, max_len, c->num_key_value_heads, c->head_dim};
    for (int l = 0; l < nl; l++) {
        d->kc[l] = sl_tensor_new(m->be, m->params.compute, 4, shape);
        d->vc[l] = sl_tensor_new(m->be, m->params.compute, 4, shape);
    }
    d->start = sl_tensor_new1(m->be, SL_I32, batch);
    for (int i = 0; i < 3; i++) d->hv[i] = sl_tensor_view_handle();
    d->len = sl_xcalloc((size_t)batch, sizeof *d->len);
    d->host = sl_xmalloc((size_t)batch * (size_t)chunk * sizeof *d->host);
    reserve_rows(d, batch);
    return d;
}

void sl_decoder_reset(sl_decoder *d) {
    memset(d->len, 0, (size_t)d->batch * sizeof *d->len);
}

int sl_decoder_length(const sl_decoder *d, int b) {
    return d->len[b];
}

void sl_decoder_free(sl_decoder *d) {
    if (!d) return;
    for (int i = 0; i < 3; i++) sl_tensor_free(d->hv[i]);
    for (int l = 0; l < d->m->cfg.num_hidden_layers; l++) {
        sl_tensor_free(d->kc[l]);
        sl_tensor_free(d->vc[l]);
    }
    sl_tensor *ts[] = {d->start, d->sel, d->xsel, d->rows};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) sl_tensor_free(ts[i]);
    free(d->kc);
    free(d->vc);
    free(d->len);
    free(d->host);
    free(d);
}

void sl_model_logits(sl_model *m, int64_t first, int64_t n, sl_tensor *logits) {
    const int64_t hid = m->cfg.hidden_size;
    SL_CHECK(first >= 0 && n >= 0 && first + n <= m->tokens,
             "sl_model_logits: rows [%lld, %lld) outside the %lld of the last forward",
             (long long)first, (long long)(first + n), (long long)m->tokens);
    sl_tensor *xf = sl_tensor_view2(m->xf, first * hid, n, hid);
    sl_op_matmul(logits, xf, m->lm_head->w, false, true, 1.0f, 0.0f);
    sl_tensor_free(xf);
}

/* One pass: ids and positions of [batch, n] tokens (padded) through the stack; the final hidden
 * states are left in m->xf. */
static void run_pass(sl_decoder *d, int n) {
    sl_model *m = d->m;
    const sl_model_config *c = &m->cfg;
    sl_attn_inputs in = {.batch = d->batch,
                         .seq = n,
                         .pos = m->pos,
                         .seg = NULL,
                         .inv_freq = m->inv_freq,
                         .mscale = m->mscale};
    sl_op_embedding_fwd(m->x[0], m->ids, m->embed->w);
    for (int l = 0; l < c->num_hidden_layers; l++) {
        sl_attn_block_decode(&m->attn[l], &in, d->kc[l], d->vc[l], d->start, m->x[l], m->h[l]);
        sl_ffn_block_forward(&m->ffn[l], m->h[l], m->x[l + 1]);
    }
    sl_op_rmsnorm_fwd(m->xf, m->xf_rstd, m->x[c->num_hidden_layers], m->final_norm->w,
                      (float)c->rms_norm_eps);
}

/* The logits of `count` rows (indices in d->host) of the pass into host memory out. */
static void take_rows(sl_decoder *d, int64_t count, float *out) {
    if (count == 0) return;
    sl_model *m = d->m;
    reserve_rows(d, count);
    sl_tensor *sel = sl_tensor_view_set1(d->hv[0], d->sel, 0, count);
    sl_tensor *xs = sl_tensor_view_set2(d->hv[1], d->xsel, 0, count, m->cfg.hidden_size);
    sl_tensor *lg = sl_tensor_view_set2(d->hv[2], d->rows, 0, count, m->cfg.vocab_size);
    sl_tensor_from_host(sel, d->host);
    sl_op_gather_rows(xs, m->xf, sel);
    sl_op_matmul(lg, xs, m->lm_head->w, false, true, 1.0f, 0.0f);
    sl_tensor_to_host(lg, out);
}

int sl_decoder_feed(sl_decoder *d, const int32_t *const *tokens, const int *n, float *last,
                    float *all, char *err, size_t errlen) {
    sl_model *m = d->m;
    const int bsz = d->batch, vocab = m->cfg.vocab_size;
    for (int b = 0; b < bsz; b++) {
        if (n[b] < 0 || (int64_t)d->len[b] + n[b] > d->max_len)
            return sl_fail(err, errlen,
                           "sequence %d: %d tokens after %d cached exceed the decoder's %d", b,
                           n[b], (int)d->len[b], d->max_len);
        for (int i = 0; i < n[b]; i++)
            if (tokens[b][i] < 0 || tokens[b][i] >= vocab)
                return sl_fail(err, errlen,
                               "sequence %d: token %d is outside the vocabulary [0, %d)", b,
                               (int)tokens[b][i], vocab);
    }
    int *done = sl_xcalloc((size_t)bsz, sizeof *done);   /* tokens of each sequence fed so far */
    int *which = sl_xcalloc((size_t)bsz, sizeof *which); /* sequences whose last token is taken */
    int64_t *all_at = sl_xcalloc((size_t)bsz, sizeof *all_at); /* each sequence's first row */
    for (int b = 0, acc = 0; b < bsz; b++) all_at[b] = acc, acc += n[b];
    int rc = 0;
    for (;;) {
        int step = 0;
        for (int b = 0; b < bsz; b++) {
            const int left = n[b] - done[b];
            step = left > step ? left : step;
        }
        if (step == 0) break;
        if (step > d->chunk) step = d->chunk;
        if ((rc = sl_model_set_shape(m, bsz, step, err, errlen)) != 0) break;
        /* ids (padding: token 0), positions len + i, starts len */
        for (int b = 0; b < bsz; b++)
            for (int i = 0; i < step; i++) {
                const int k = done[b] + i;
                d->host[(int64_t)b * step + i] = k < n[b] ? tokens[b][k] : 0;
            }
        sl_tensor_from_host(m->ids, d->host);
        for (int b = 0; b < bsz; b++)
            for (int i = 0; i < step; i++) d->host[(int64_t)b * step + i] = d->len[b] + i;
        sl_tensor_from_host(m->pos, d->host);
        sl_tensor_from_host(d->start, d->len);
        run_pass(d, step);
        /* the rows wanted: every real one (all), and each sequence's last new token */
        int64_t count = 0;
        if (all) {
            for (int b = 0; b < bsz; b++)
                for (int i = 0; i < step && done[b] + i < n[b]; i++)
                    d->host[count++] = b * step + i;
            float *buf = sl_xmalloc((size_t)count * (size_t)vocab * sizeof(float));
            take_rows(d, count, buf);
            int64_t r = 0;
            for (int b = 0; b < bsz; b++)
                for (int i = 0; i < step && done[b] + i < n[b]; i++, r++)
                    memcpy(all + (all_at[b] + done[b] + i) * vocab, buf + r * vocab,
                           (size_t)vocab * sizeof(float));
            free(buf);
        }
        count = 0;
        for (int b = 0; b < bsz; b++)
            if (done[b] < n[b] && done[b] + step >= n[b]) { /* its last token is in this pass */
                which[count] = b;
                d->host[count++] = b * step + (n[b] - done[b]) - 1;
            }
        if (last && count > 0) {
            float *buf = sl_xmalloc((size_t)count * (size_t)vocab * sizeof(float));
            take_rows(d, count, buf);
            for (int64_t r = 0; r < count; r++)
                memcpy(last + (int64_t)which[r] * vocab, buf + r * vocab,
                       (size_t)vocab * sizeof(float));
            free(buf);
        }
        for (int b = 0; b < bsz; b++) {
            const int c = n[b] - done[b] < step ? n[b] - done[b] : step;
            d->len[b] += c;
            done[b] += c;
        }
    }
    free(done);
    free(which);
    free(all_at);
    return rc;
}

int sl_generate(sl_decoder *d, sl_sampler *samplers, const int32_t *const *prompts,
                const int *n_prompt, const sl_generate_opts *o, int32_t **out, int *out_n,
                char *err, size_t errlen) {
    const int bsz = d->batch, vocab = d->m->cfg.vocab_size;
    for (int b = 0; b < bsz; b++) {
        out[b] = sl_xmalloc((size_t)(o->max_new > 0 ? o->max_new : 1) * sizeof(int32_t));
        out_n[b] = 0;
        if (n_prompt[b] < 1) return sl_fail(err, errlen, "prompt %d is empty", b);
    }
    sl_decoder_reset(d);
    float *logits = sl_xmalloc((size_t)bsz * (size_t)vocab * sizeof(float));
    int *n = sl_xcalloc((size_t)bsz, sizeof *n);
    int32_t *ids = sl_xcalloc((size_t)bsz, sizeof *ids);
    const int32_t **feed = sl_xcalloc((size_t)bsz, sizeof *feed);
    bool *alive = sl_xcalloc((size_t)bsz, sizeof *alive);
    int rc = sl_decoder_feed(d, prompts, n_prompt, logits, NULL, err, errlen);
    for (int b = 0; b < bsz; b++) alive[b] = o->max_new > 0;
    for (int step = 0; rc == 0 && step < o->max_new; step++) {
        for (int b = 0; b < bsz; b++)
            ids[b] = alive[b] ? sl_sampler_next(&samplers[b], logits + (int64_t)b * vocab) : 0;
        if (o->sync) sl_comm_broadcast_bytes(o->sync, ids, (int64_t)bsz * sizeof *ids, 0);
        int more = 0;
        for (int b = 0; b < bsz; b++) {
            n[b] = 0;
            if (!alive[b]) continue;
            out[b][out_n[b]++] = ids[b];
            if (o->on_token) o->on_token(o->user, b, ids[b]);
            if (ids[b] == o->stop_id || out_n[b] == o->max_new) {
                alive[b] = false;
                continue;
            }
            n[b] = 1, feed[b] = &out[b][out_n[b] - 1], more++;
        }
        if (!more) break;
        rc = sl_decoder_feed(d, feed, n, logits, NULL, err, errlen);
    }
    free(logits);
    free(n);
    free(ids);
    free(feed);
    free(alive);
    return rc;
}
