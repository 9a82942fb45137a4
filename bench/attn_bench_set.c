/*
 * bench/attn_bench_set.c - attn_bench's tensors of one shape: allocation, random inputs, the
 * forward and backward calls, downloads (bench/attn_bench.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/attn_bench.h"
#include "core/log.h"
#include "core/rng.h"

static int64_t gate_cols(sl_gate_mode m, int d) {
    return m == SL_GATE_ELEMENTWISE ? d : m == SL_GATE_HEADWISE ? 1 : 0;
}

double ab_set_bytes(const ab_shape *s, sl_gate_mode gate, sl_dtype dt) {
    const double t = (double)s->batch * s->seq, es = (double)sl_dtype_size(dt);
    const double nq = t * s->heads * s->d, nk = t * s->kv * s->d;
    const double ng = t * s->heads * (double)gate_cols(gate, s->d);
    return es * (5 * nq + 4 * nk + 2 * ng) + 4.0 * (t * s->heads + t + AB_CHUNK);
}

/* seg [B * S] from repeating document lengths, or NULL without them. */
int32_t *ab_build_seg(const ab_options *o, const ab_shape *s) {
    if (!o->ndocs) return NULL;
    int32_t *seg = sl_xmalloc(sizeof(int32_t) * (size_t)s->batch * (size_t)s->seq);
    for (int b = 0; b < s->batch; b++)
        for (int i = 0, start = 0, doc = 0; i < s->seq; i++) {
            if (i - start == o->docs[doc]) start = i, doc = (doc + 1) % o->ndocs;
            seg[(int64_t)b * s->seq + i] = start;
        }
    return seg;
}

/* Standard normal values, stream `stream` of a fixed seed, into t (any float dtype). */
void ab_fill_normal(ab_set *a, sl_tensor *t, uint64_t stream, float *host) {
    sl_rng rng;
    sl_rng_init(&rng, 20250117, stream);
    const int64_t n = sl_tensor_numel(t);
    for (int64_t off = 0; off < n; off += AB_CHUNK) {
        const int64_t m = n - off < AB_CHUNK ? n - off : AB_CHUNK;
        for (int64_t i = 0; i < m; i++) host[i] = (float)sl_rng_normal(&rng);
        if (sl_tensor_dtype(t) == SL_F32) {
            sl_tensor_from_host_range(t, off, m, host);
            continue;
        }
        sl_tensor *src = sl_tensor_view1(a->stage, 0, m), *dst = sl_tensor_view1(t, off, m);
        sl_tensor_from_host(src, host);
        sl_op_convert(dst, src);
        sl_tensor_free(src);
        sl_tensor_free(dst);
    }
}

/* t (any float dtype) as fp32 values into host [numel]. */
void ab_download(ab_set *a, const sl_tensor *t, float *host) {
    if (sl_tensor_dtype(t) == SL_F32) {
        sl_tensor_to_host(t, host);
        return;
    }
    const int64_t n = sl_tensor_numel(t);
    for (int64_t off = 0; off < n; off += AB_CHUNK) {
        const int64_t m = n - off < AB_CHUNK ? n - off : AB_CHUNK;
        sl_tensor *dst = sl_tensor_view1(a->stage, 0, m);
        sl_tensor *src = sl_tensor_view1((sl_tensor *)t, off, m);
        sl_op_convert(dst, src);
        sl_tensor_to_host(dst, host + off);
        sl_tensor_free(src);
        sl_tensor_free(dst);
    }
}

void ab_set_create(ab_set *a, sl_backend *be, sl_dtype dt, const ab_shape *s, sl_gate_mode gate,
                   const int32_t *seg) {
    memset(a, 0, sizeof *a);
    a->s = *s;
    a->t = (int64_t)s->batch * s->seq, a->nq = a->t * s->heads * s->d, a->nk = a->t * s->kv * s->d;
    const int64_t gc = gate_cols(gate, s->d);
    a->ng = a->t * s->heads * gc;
    a->q = sl_tensor_new3(be, dt, a->t, s->heads, s->d);
    a->k = sl_tensor_new3(be, dt, a->t, s->kv, s->d);
    a->v = sl_tensor_new3(be, dt, a->t, s->kv, s->d);
    a->g = gc ? sl_tensor_new3(be, dt, a->t, s->heads, gc) : NULL;
    a->y = sl_tensor_new3(be, dt, a->t, s->heads, s->d);
    a->o = sl_tensor_new3(be, dt, a->t, s->heads, s->d);
    a->lse = sl_tensor_new2(be, SL_F32, a->t, s->heads);
    a->dy = sl_tensor_new3(be, dt, a->t, s->heads, s->d);
    a->dq = sl_tensor_new3(be, dt, a->t, s->heads, s->d);
    a->dk = sl_tensor_new3(be, dt, a->t, s->kv, s->d);
    a->dv = sl_tensor_new3(be, dt, a->t, s->kv, s->d);
    a->dg = gc ? sl_tensor_new3(be, dt, a->t, s->heads, gc) : NULL;
    a->stage = sl_tensor_new1(be, SL_F32, AB_CHUNK);
    if (seg) {
        a->seg = sl_tensor_new1(be, SL_I32, a->t);
        sl_tensor_from_host(a->seg, seg);
    }
}

void ab_set_free(ab_set *a) {
    sl_tensor *all[] = {a->q,   a->k,  a->v,  a->g,  a->seg, a->y,  a->o,
                        a->lse, a->dy, a->dq, a->dk, a->dv,  a->dg, a->stage};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) sl_tensor_free(all[i]);
}

static float scale_of(const ab_shape *s) {
    return (float)(1.0 / sqrt((double)s->d));
}

void ab_forward(ab_set *a) {
    sl_op_gated_attn_fwd(a->y, a->o, a->lse, a->q, a->k, a->v, a->g, a->seg, a->s.batch, a->s.seq,
                         scale_of(&a->s));
}

void ab_backward(ab_set *a) {
    sl_op_gated_attn_bwd(a->dq, a->dk, a->dv, a->dg, a->dy, a->q, a->k, a->v, a->g, a->seg, a->o,
                         a->lse, a->s.batch, a->s.seq, scale_of(&a->s));
}
