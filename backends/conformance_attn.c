/*
 * backends/conformance_attn.c - the conformance cases of attention/'s operations (q/gate split
 * and merge, RoPE, gated attention forward and backward, the gate's mean, the first-token
 * share, the KV cache write and decoding attention): shapes, inputs and the double references
 * (backends/conformance_impl.h).
 */
#include "backends/conformance_impl.h"

/* ---- gated attention --------------------------------------------------------------------- */

static const char *mode_tag(sl_gate_mode m) {
    return m == SL_GATE_ELEMENTWISE ? "elem" : m == SL_GATE_HEADWISE ? "head" : "none";
}

static int64_t gate_width(sl_gate_mode m, int64_t d) {
    return m == SL_GATE_ELEMENTWISE ? d : m == SL_GATE_HEADWISE ? 1 : 0;
}

typedef struct {
    int t, h, d;
    sl_gate_mode mode;
} qg_shape;

static const qg_shape k_qgate[] = {
    {1, 1, 1, SL_GATE_ELEMENTWISE}, {5, 3, 4, SL_GATE_ELEMENTWISE}, {5, 3, 4, SL_GATE_HEADWISE},
    {5, 3, 4, SL_GATE_NONE},        {7, 4, 16, SL_GATE_HEADWISE},   {9, 2, 64, SL_GATE_ELEMENTWISE},
};

static const qg_shape *pick_qgate(cx *c) {
    const qg_shape *s = PICK(c, k_qgate);
    desc(c, "T%d/H%d/D%d/%s", s->t, s->h, s->d, mode_tag(s->mode));
    return s;
}

void sl_conf_case_qgate_split(cx *c) {
    const qg_shape *sh = pick_qgate(c);
    const int64_t t = sh->t, h = sh->h, d = sh->d, dg = gate_width(sh->mode, d), w = h * (d + dg);
    const sl_gate_mode mode = sh->mode;
    const float *qall = gen_normal(c, t * w, 1.0);
    if (!c->be) {
        double *q = want(c, "q", t * h * d);
        sl_ref_qgate_split(q, dg ? want(c, "g", t * h * dg) : NULL, qall, t, h, d, mode);
        return;
    }
    sl_tensor *tq = ACT(c, junk(c, t * h * d), t, h, d);
    sl_tensor *tg = dg ? ACT(c, junk(c, t * h * dg), t, h, dg) : NULL;
    sl_op_qgate_split(tq, tg, ACT(c, qall, t, w), mode);
    got(c, "q", tq);
    if (tg) got(c, "g", tg);
}

void sl_conf_case_qgate_merge(cx *c) {
    const qg_shape *sh = pick_qgate(c);
    const int64_t t = sh->t, h = sh->h, d = sh->d, dg = gate_width(sh->mode, d), w = h * (d + dg);
    const sl_gate_mode mode = sh->mode;
    const float *dq = gen_normal(c, t * h * d, 1.0), *g = dg ? gen_normal(c, t * h * dg, 1.0) : 0;
    if (!c->be) {
        sl_ref_qgate_merge(want(c, "dqall", t * w), dq, g, t, h, d, mode);
        return;
    }
    sl_tensor *tall = ACT(c, junk(c, t * w), t, w);
    sl_op_qgate_merge(tall, ACT(c, dq, t, h, d), dg ? ACT(c, g, t, h, dg) : NULL, mode);
    got(c, "dqall", tall);
}

/* The rotation's inputs of the RoPE cases: t positions from 0 to 131071 (the edges of the 4k
 * and YaRN ranges among them) and the base-10000 inverse frequencies of `half` pairs. */
static void rope_table(cx *c, int64_t t, int half, int32_t **pos, float **inv_freq) {
    static const int32_t k_pos[] = {0, 1, 2, 17, 100, 4095, 4096, 40000, 131071};
    *pos = halloc(c, sizeof(int32_t) * (size_t)t);
    *inv_freq = halloc(c, sizeof(float) * (size_t)half);
    for (int64_t i = 0; i < t; i++)
        (*pos)[i] = k_pos[i % NELEM(k_pos)] + (int32_t)(i / NELEM(k_pos));
    for (int i = 0; i < half; i++)
        (*inv_freq)[i] = (float)(1.0 / pow(10000.0, 2.0 * i / (2 * half)));
}

/* RoPE: full, partial and YaRN-scaled rotations; positions up to 131071. */
static const struct {
    int t, nh, d, half;
    float mscale;
} k_rope[] = {{1, 1, 2, 1, 1.0f},
              {9, 3, 16, 8, 1.0f},
              {9, 3, 16, 4, 1.138629f},
              {33, 5, 64, 32, 1.0f},
              {17, 2, 128, 24, 1.138629f}};

static void case_rope(cx *c, int sign) {
    const int64_t t = PICK(c, k_rope)->t, nh = k_rope[c->shape].nh;
    const int d = k_rope[c->shape].d, half = k_rope[c->shape].half;
    const float mscale = k_rope[c->shape].mscale;
    desc(c, "T%lld/NH%lld/D%d/rot%d%s", (long long)t, (long long)nh, d, 2 * half,
         mscale != 1.0f ? "/yarn" : "");
    int32_t *pos;
    float *inv_freq;
    rope_table(c, t, half, &pos, &inv_freq);
    const float *x = gen_normal(c, t * nh * d, 1.0);
    if (!c->be) {
        sl_ref_rope_all(want(c, "x", t * nh * d), x, pos, t, nh, d, half, inv_freq, mscale, sign);
        return;
    }
    sl_tensor *tx = ACT(c, x, t, nh, d), *tp = I32(c, pos, t), *tf = F32(c, inv_freq, half);
    if (sign > 0)
        sl_op_rope_fwd(tx, tp, tf, mscale);
    else
        sl_op_rope_bwd(tx, tp, tf, mscale);
    got(c, "x", tx);
}

void sl_conf_case_rope_fwd(cx *c) {
    case_rope(c, 1);
}
void sl_conf_case_rope_bwd(cx *c) {
    case_rope(c, -1);
}

/* QK-norm and RoPE in one: the three gate layouts, partial rotation with YaRN's mscale, head
 * dims in one warp pass and in several (320: the backward's 4-warp blocks), and T past the
 * backward's 512 blocks (two tokens per block; 4,703: ten, in a chunk of 8 and one of 2, the
 * last block three); the first eight take CUDA's element path, the rest its row path. */
typedef struct {
    int t, h, kv, d, half;
    sl_gate_mode mode;
    float mscale;
} qk_shape;

static const qk_shape k_qk[] = {
    {1, 1, 1, 2, 1, SL_GATE_ELEMENTWISE, 1.0f},
    {5, 3, 1, 16, 8, SL_GATE_ELEMENTWISE, 1.0f},
    {7, 4, 2, 16, 4, SL_GATE_HEADWISE, 1.138629f},
    {9, 2, 2, 64, 32, SL_GATE_NONE, 1.0f},
    {17, 4, 1, 128, 64, SL_GATE_ELEMENTWISE, 1.138629f},
    {3, 2, 1, 320, 96, SL_GATE_HEADWISE, 1.0f},
    {600, 2, 1, 16, 8, SL_GATE_ELEMENTWISE, 1.0f},
    {4703, 1, 1, 8, 2, SL_GATE_HEADWISE, 1.0f},
    /* the CUDA row path (head dims 64, 128, 256: 2, 4, 8 columns per lane): rows in batches of
     * 4 per warp past a chunk's end (5 and 9 rows per token), partial rotation, the headwise
     * gate with 16-byte rows of qall (8 heads of 65), and 1,100 tokens (3 per block) */
    {13, 4, 1, 128, 64, SL_GATE_ELEMENTWISE, 1.0f},
    {33, 8, 1, 64, 16, SL_GATE_HEADWISE, 1.138629f},
    {6, 2, 1, 256, 128, SL_GATE_ELEMENTWISE, 1.0f},
    {1100, 2, 2, 64, 32, SL_GATE_ELEMENTWISE, 1.0f},
    {4, 3, 3, 128, 32, SL_GATE_NONE, 1.138629f},
};

typedef struct {
    const qk_shape *s;
    int64_t w, ng; /* qall's row width, gate elements */
    const float *qall, *k, *qw, *kw, *inv_freq;
    const int32_t *pos;
} qk_in;

static qk_in qk_inputs(cx *c) {
    qk_in in;
    in.s = PICK(c, k_qk);
    const qk_shape *s = in.s;
    desc(c, "T%d/H%d/KV%d/D%d/rot%d/%s%s", s->t, s->h, s->kv, s->d, 2 * s->half, mode_tag(s->mode),
         s->mscale != 1.0f ? "/yarn" : "");
    in.w = sl_qgate_width(s->mode, s->h, s->d);
    in.ng = (int64_t)s->t * s->h * gate_width(s->mode, s->d);
    in.qall = gen_normal(c, s->t * in.w, 1.0);
    in.k = gen_normal(c, (int64_t)s->t * s->kv * s->d, 1.0);
    in.qw = gen_uniform(c, s->d, 0.5, 1.5);
    in.kw = gen_uniform(c, s->d, 0.5, 1.5);
    int32_t *pos;
    float *inv_freq;
    rope_table(c, s->t, s->half, &pos, &inv_freq);
    in.pos = pos, in.inv_freq = inv_freq;
    return in;
}

static sl_qk_norm_rope qk_args(cx *c, const qk_in *in) {
    const qk_shape *s = in->s;
    return (sl_qk_norm_rope){.qw = ACT(c, in->qw, s->d),
                             .kw = ACT(c, in->kw, s->d),
                             .eps = 1e-6f,
                             .mode = s->mode,
                             .pos = I32(c, in->pos, s->t),
                             .inv_freq = F32(c, in->inv_freq, s->half),
                             .mscale = s->mscale};
}

void sl_conf_case_qk_norm_rope_fwd(cx *c) {
    const qk_in in = qk_inputs(c);
    const qk_shape *s = in.s;
    const int64_t t = s->t, h = s->h, kv = s->kv, d = s->d;
    if (!c->be) {
        double *qn = want(c, "qn", t * h * d), *kn = want(c, "kn", t * kv * d);
        double *g = in.ng ? want(c, "g", in.ng) : NULL;
        double *qr = want(c, "q_rstd", t * h), *kr = want(c, "k_rstd", t * kv);
        sl_ref_qk_norm_rope_fwd(qn, kn, g, qr, kr, in.qall, in.k, in.qw, in.kw, t, h, kv, s->d,
                                1e-6, s->mode, in.pos, s->half, in.inv_freq, s->mscale);
        return;
    }
    const sl_qk_norm_rope p = qk_args(c, &in);
    sl_tensor *tqn = ACT(c, junk(c, t * h * d), t, h, d),
              *tkn = ACT(c, junk(c, t * kv * d), t, kv, d);
    sl_tensor *tg = in.ng ? ACT(c, junk(c, in.ng), t, h, in.ng / (t * h)) : NULL;
    sl_tensor *tqr = F32(c, junk(c, t * h), t * h), *tkr = F32(c, junk(c, t * kv), t * kv);
    sl_op_qk_norm_rope_fwd(tqn, tkn, tg, tqr, tkr, ACT(c, in.qall, t, in.w), ACT(c, in.k, t, kv, d),
                           &p);
    got(c, "qn", tqn);
    got(c, "kn", tkn);
    if (tg) got(c, "g", tg);
    got(c, "q_rstd", tqr);
    got(c, "k_rstd", tkr);
}

/* The bound of a norm weight's gradient dw0 + sum over rows of g xh (sum_bound), with |g| at most
 * mscale (|gy_e| + |gy_partner|) for the rotated columns. */
static void qk_dw_bound(cx *c, const float *dw0, const float *gy, const float *x,
                        const int64_t *xoff, const float *rstd, int64_t rows, const qk_shape *s) {
    double *mag, *terms;
    sum_bound(c, U_F32, &mag, &terms);
    for (int e = 0; e < s->d; e++) mag[e] = fabs(dw0[e]), terms[e] = (double)rows + 3;
    for (int64_t r = 0; r < rows; r++)
        for (int e = 0; e < s->d; e++) {
            const float *gr = gy + r * s->d;
            const int partner = e < s->half ? e + s->half : e < 2 * s->half ? e - s->half : -1;
            const double g = fabs(gr[e]) + (partner >= 0 ? fabs(gr[partner]) : 0.0);
            mag[e] += s->mscale * g * fabs((double)x[xoff[r] + e] * rstd[r]);
        }
}

void sl_conf_case_qk_norm_rope_bwd(cx *c) {
    const qk_in in = qk_inputs(c);
    const qk_shape *s = in.s;
    const int64_t t = s->t, h = s->h, kv = s->kv, d = s->d;
    /* the forward's saved rstd */
    double *rq = halloc(c, sizeof(double) * (size_t)(t * (h * d + kv * d + h + kv) + in.ng + 1));
    double *rk = rq + t * h * d, *rqr = rk + t * kv * d, *rkr = rqr + t * h, *rg = rkr + t * kv;
    sl_ref_qk_norm_rope_fwd(rq, rk, in.ng ? rg : NULL, rqr, rkr, in.qall, in.k, in.qw, in.kw, t, h,
                            kv, s->d, 1e-6, s->mode, in.pos, s->half, in.inv_freq, s->mscale);
    const float *q_rstd = derived(c, rqr, t * h, false), *k_rstd = derived(c, rkr, t * kv, false);
    const float *dq = gen_normal(c, t * h * d, 1.0), *dk = gen_normal(c, t * kv * d, 1.0);
    const float *dg = in.ng ? gen_normal(c, in.ng, 1.0) : NULL;
    const float *dqw0 = gen_normal(c, d, 1.0), *dkw0 = gen_normal(c, d, 1.0);
    /* where each row's pre-norm values start: q in qall, k in k */
    int64_t *qoff = halloc(c, sizeof(int64_t) * (size_t)(t * h));
    int64_t *koff = halloc(c, sizeof(int64_t) * (size_t)(t * kv));
    for (int64_t r = 0; r < t; r++) {
        for (int64_t hh = 0; hh < h; hh++)
            qoff[r * h + hh] = r * in.w + (s->mode == SL_GATE_ELEMENTWISE ? hh * 2 * d : hh * d);
        for (int64_t hh = 0; hh < kv; hh++) koff[r * kv + hh] = (r * kv + hh) * d;
    }
    if (!c->be) {
        double *dqall = want(c, "dqall", t * in.w), *dkp = want(c, "dk_pre", t * kv * d);
        double *dqw = halloc(c, sizeof(double) * (size_t)d),
               *dkw = halloc(c, sizeof(double) * (size_t)d);
        for (int64_t e = 0; e < d; e++) dqw[e] = dqw0[e], dkw[e] = dkw0[e];
        sl_ref_qk_norm_rope_bwd(dqall, dkp, dqw, dkw, dq, dk, dg, in.qall, in.k, in.qw, in.kw,
                                q_rstd, k_rstd, t, h, kv, s->d, s->mode, in.pos, s->half,
                                in.inv_freq, s->mscale);
        memcpy(want(c, "dqw", d), dqw, sizeof(double) * (size_t)d);
        qk_dw_bound(c, dqw0, dq, in.qall, qoff, q_rstd, t * h, s);
        memcpy(want(c, "dkw", d), dkw, sizeof(double) * (size_t)d);
        qk_dw_bound(c, dkw0, dk, in.k, koff, k_rstd, t * kv, s);
        return;
    }
    const sl_qk_norm_rope p = qk_args(c, &in);
    sl_tensor *tdqall = ACT(c, junk(c, t * in.w), t, in.w);
    sl_tensor *tdkp = ACT(c, junk(c, t * kv * d), t, kv, d);
    sl_tensor *tdqw = GRAD(c, dqw0, d), *tdkw = GRAD(c, dkw0, d);
    sl_op_qk_norm_rope_bwd(tdqall, tdkp, tdqw, tdkw, ACT(c, dq, t, h, d), ACT(c, dk, t, kv, d),
                           dg ? ACT(c, dg, t, h, in.ng / (t * h)) : NULL, ACT(c, in.qall, t, in.w),
                           ACT(c, in.k, t, kv, d), F32(c, q_rstd, t * h), F32(c, k_rstd, t * kv),
                           &p);
    got(c, "dqall", tdqall);
    got(c, "dk_pre", tdkp);
    got(c, "dqw", tdqw);
    qk_dw_bound(c, dqw0, dq, in.qall, qoff, q_rstd, t * h, s);
    got(c, "dkw", tdkw);
    qk_dw_bound(c, dkw0, dk, in.k, koff, k_rstd, t * kv, s);
}

/* Batches, sequence lengths across the CPU's 64-row tiles and the CUDA's 16/32-row ones, GQA
 * ratios, the three gates, head dims in one chunk and in two (160), and document masks: doc 0
 * is plain causal (seg NULL); doc -1 one document per sequence (seg all zero); doc N > 0 packed
 * documents starting at each position with probability 1/N (N = 1: every token its own
 * document), plus forced length-1 documents (attn_docs). */
static const struct {
    int b, s, h, kv, d;
    sl_gate_mode mode;
    int doc;
} k_attn[] = {
    {1, 1, 1, 1, 1, SL_GATE_ELEMENTWISE, 0},     {2, 7, 4, 2, 16, SL_GATE_ELEMENTWISE, 0},
    {1, 70, 4, 1, 32, SL_GATE_HEADWISE, 0},      {2, 65, 2, 2, 8, SL_GATE_NONE, 0},
    {1, 130, 3, 3, 8, SL_GATE_HEADWISE, 0},      {1, 33, 2, 1, 128, SL_GATE_ELEMENTWISE, 0},
    {2, 70, 4, 2, 16, SL_GATE_ELEMENTWISE, 5},   {1, 130, 3, 1, 8, SL_GATE_HEADWISE, 40},
    {2, 65, 2, 2, 8, SL_GATE_NONE, 1},           {1, 33, 2, 1, 128, SL_GATE_ELEMENTWISE, -1},
    {1, 97, 2, 1, 128, SL_GATE_ELEMENTWISE, 20}, {1, 50, 2, 2, 160, SL_GATE_NONE, 9},
    {3, 1, 2, 1, 8, SL_GATE_HEADWISE, 1},
};

typedef struct {
    int b, s, h, kv, d, doc;
    int64_t t, nq, nk, ng;
    sl_gate_mode mode;
    double scale;
    const float *q, *k, *v, *g;
    const int32_t *seg; /* NULL: plain causal */
} attn_in;

/* Document starts for doc > 0 (k_attn): position i of a sequence begins a document with
 * probability 1 / doc, and positions 1 and s - 1 always do (documents of length 1 at both ends
 * when s > 2). seg[i] = start of i's document. */
static int32_t *attn_docs(cx *c, int b, int s, int doc) {
    int32_t *seg = halloc(c, sizeof(int32_t) * (size_t)b * (size_t)s);
    for (int r = 0; r < b; r++)
        for (int i = 0, start = 0; i < s; i++) {
            if (doc > 0 && i > 0 &&
                (i == 1 || i == s - 1 || rand_u64(&c->rng) % (uint64_t)doc == 0))
                start = i;
            seg[(int64_t)r * s + i] = start;
        }
    return seg;
}

static attn_in attn_inputs(cx *c) {
    attn_in a = {.b = PICK(c, k_attn)->b};
    a.s = k_attn[c->shape].s, a.h = k_attn[c->shape].h, a.kv = k_attn[c->shape].kv;
    a.d = k_attn[c->shape].d, a.mode = k_attn[c->shape].mode, a.doc = k_attn[c->shape].doc;
    a.t = (int64_t)a.b * a.s, a.nq = a.t * a.h * a.d, a.nk = a.t * a.kv * a.d;
    a.ng = a.t * a.h * gate_width(a.mode, a.d), a.scale = 1.0 / sqrt((double)a.d);
    desc(c, "B%d/S%d/H%d/KV%d/D%d/%s", a.b, a.s, a.h, a.kv, a.d, mode_tag(a.mode));
    if (a.doc)
        snprintf(c->desc + strlen(c->desc), sizeof c->desc - strlen(c->desc), "/doc%d", a.doc);
    a.q = gen_normal(c, a.nq, 1.5), a.k = gen_normal(c, a.nk, 1.5), a.v = gen_normal(c, a.nk, 1.0);
    a.g = a.ng ? gen_normal(c, a.ng, 1.5) : NULL;
    a.seg = a.doc ? attn_docs(c, a.b, a.s, a.doc) : NULL;
    return a;
}

/* seg as a tensor on the case's backend, or NULL. */
static sl_tensor *attn_seg(cx *c, const attn_in *a) {
    return a->seg ? I32(c, a->seg, a->t) : NULL;
}

/* q, k, v, g as tensors: q [T, H, D], k/v [T, KV, D], g [T, H, D or 1] or NULL. */
static void attn_tensors(cx *c, const attn_in *a, sl_tensor **t) {
    t[0] = ACT(c, a->q, a->t, a->h, a->d);
    t[1] = ACT(c, a->k, a->t, a->kv, a->d);
    t[2] = ACT(c, a->v, a->t, a->kv, a->d);
    t[3] = a->ng ? ACT(c, a->g, a->t, a->h, a->ng / (a->t * a->h)) : NULL;
}

void sl_conf_case_gated_attn_fwd(cx *c) {
    const attn_in a = attn_inputs(c);
    if (!c->be) {
        double *y = want(c, "y", a.nq), *o = want(c, "o", a.nq), *lse = want(c, "lse", a.t * a.h);
        sl_ref_attn_fwd(y, o, lse, a.q, a.k, a.v, a.g, a.seg, a.mode, a.b, a.s, a.h, a.kv, a.d,
                        a.scale);
        return;
    }
    sl_tensor *in[4], *y = ACT(c, junk(c, a.nq), a.t, a.h, a.d);
    sl_tensor *o = ACT(c, junk(c, a.nq), a.t, a.h, a.d),
              *lse = F32(c, junk(c, a.t * a.h), a.t, a.h);
    attn_tensors(c, &a, in);
    sl_op_gated_attn_fwd(y, o, lse, in[0], in[1], in[2], in[3], attn_seg(c, &a), a.b, a.s,
                         (float)a.scale);
    got(c, "y", y);
    got(c, "o", o);
    got(c, "lse", lse);
}

void sl_conf_case_gated_attn_bwd(cx *c) {
    const attn_in a = attn_inputs(c);
    const float *dy = gen_normal(c, a.nq, 1.0);
    /* The saved forward values the kernel receives, from the double forward. */
    double *ry = halloc(c, sizeof(double) * (size_t)a.nq), *ro = halloc(c, sizeof(double) * a.nq);
    double *rl = halloc(c, sizeof(double) * (size_t)(a.t * a.h));
    sl_ref_attn_fwd(ry, ro, rl, a.q, a.k, a.v, a.g, a.seg, a.mode, a.b, a.s, a.h, a.kv, a.d,
                    a.scale);
    const float *o = derived(c, ro, a.nq, true), *lse = derived(c, rl, a.t * a.h, false);
    if (!c->be) {
        double *dq = want(c, "dq", a.nq), *dk = want(c, "dk", a.nk), *dv = want(c, "dv", a.nk);
        sl_ref_attn_bwd(dq, dk, dv, a.ng ? want(c, "dg", a.ng) : NULL, dy, a.q, a.k, a.v, a.g,
                        a.seg, a.mode, a.b, a.s, a.h, a.kv, a.d, a.scale);
        return;
    }
    sl_tensor *in[4];
    attn_tensors(c, &a, in);
    sl_tensor *dq = ACT(c, junk(c, a.nq), a.t, a.h, a.d);
    sl_tensor *dk = ACT(c, junk(c, a.nk), a.t, a.kv, a.d),
              *dv = ACT(c, junk(c, a.nk), a.t, a.kv, a.d);
    sl_tensor *dg = a.ng ? ACT(c, junk(c, a.ng), a.t, a.h, a.ng / (a.t * a.h)) : NULL;
    sl_op_gated_attn_bwd(dq, dk, dv, dg, ACT(c, dy, a.t, a.h, a.d), in[0], in[1], in[2], in[3],
                         attn_seg(c, &a), ACT(c, o, a.t, a.h, a.d), F32(c, lse, a.t, a.h), a.b, a.s,
                         (float)a.scale);
    got(c, "dq", dq);
    got(c, "dk", dk);
    got(c, "dv", dv);
    if (dg) got(c, "dg", dg);
}

void sl_conf_case_sigmoid_mean(cx *c) {
    static const int k_n[] = {1, 7, 10007};
    const int64_t n = *PICK(c, k_n);
    desc(c, "[%lld]", (long long)n);
    const float *g = gen_normal(c, n, 3.0);
    if (!c->be) {
        double *m = want(c, "mean", 1);
        for (int64_t i = 0; i < n; i++) *m += sl_ref_sigmoid(g[i]) / (double)n;
        return;
    }
    sl_tensor *out = F32(c, junk(c, 1), 1);
    sl_op_sigmoid_mean(out, ACT(c, g, n));
    got(c, "mean", out);
}

/* The attention shapes with the saved lse of the double forward, as the kernel receives it
 * (plain causal: the share is defined without document masks). */
void sl_conf_case_attn_sink_share(cx *c) {
    const attn_in a = attn_inputs(c);
    double *ry = halloc(c, sizeof(double) * (size_t)a.nq), *ro = halloc(c, sizeof(double) * a.nq);
    double *rl = halloc(c, sizeof(double) * (size_t)(a.t * a.h));
    sl_ref_attn_fwd(ry, ro, rl, a.q, a.k, a.v, a.g, NULL, a.mode, a.b, a.s, a.h, a.kv, a.d,
                    a.scale);
    const float *lse = derived(c, rl, a.t * a.h, false);
    if (!c->be) {
        *want(c, "share", 1) =
            sl_ref_attn_sink_share(a.q, a.k, lse, a.b, a.s, a.h, a.kv, a.d, a.scale);
        return;
    }
    sl_tensor *in[4], *out = F32(c, junk(c, 1), 1);
    attn_tensors(c, &a, in);
    sl_op_attn_sink_share(out, in[0], in[1], F32(c, lse, a.t, a.h), a.b, a.s, (float)a.scale);
    got(c, "share", out);
}

/* ---- decoding with a KV cache ---------------------------------------------------------- */

/* Decoding with a KV cache: B sequences of a cache of L positions, n new tokens each, at
 * starts drawn in [0, L - n] (so every new row lands in the cache), or with over > 0 in
 * [L - n + 1, L - n + over] (rows past the cache: skipped by the write, clamped by the
 * attention). Head dims in one CUDA column group and in several (160), caches of several CPU
 * (64) and CUDA (128) key chunks, n > 1 (a chunked prefill) and n = 1 (decoding). */
static const struct {
    int b, n, len, h, kv, d;
    sl_gate_mode mode;
    int over;
} k_dec[] = {
    {1, 1, 1, 1, 1, 1, SL_GATE_ELEMENTWISE, 0},     {2, 1, 9, 4, 2, 16, SL_GATE_ELEMENTWISE, 0},
    {3, 1, 130, 4, 1, 32, SL_GATE_HEADWISE, 0},     {2, 5, 70, 2, 2, 8, SL_GATE_NONE, 0},
    {1, 3, 300, 3, 3, 128, SL_GATE_ELEMENTWISE, 0}, {2, 2, 33, 2, 1, 160, SL_GATE_HEADWISE, 0},
    {3, 4, 20, 2, 1, 8, SL_GATE_ELEMENTWISE, 3},
};

typedef struct {
    int b, n, len, h, kv, d;
    sl_gate_mode mode;
    int64_t nq, nc, ng;
    const int32_t *start;
} dec_in;

static dec_in dec_inputs(cx *c) {
    dec_in a = {.b = PICK(c, k_dec)->b};
    a.n = k_dec[c->shape].n, a.len = k_dec[c->shape].len, a.h = k_dec[c->shape].h;
    a.kv = k_dec[c->shape].kv, a.d = k_dec[c->shape].d, a.mode = k_dec[c->shape].mode;
    const int over = k_dec[c->shape].over;
    a.nq = (int64_t)a.b * a.n * a.h * a.d, a.nc = (int64_t)a.b * a.len * a.kv * a.d;
    a.ng = (int64_t)a.b * a.n * a.h * gate_width(a.mode, a.d);
    desc(c, "B%d/n%d/L%d/H%d/KV%d/D%d/%s%s", a.b, a.n, a.len, a.h, a.kv, a.d, mode_tag(a.mode),
         over ? "/over" : "");
    const int lo = over ? a.len - a.n + 1 : 0, hi = over ? a.len - a.n + over : a.len - a.n;
    a.start = gen_ints(c, a.b, lo, hi + 1);
    return a;
}

void sl_conf_case_kv_cache_write(cx *c) {
    const dec_in a = dec_inputs(c);
    const int64_t row = (int64_t)a.kv * a.d, nx = (int64_t)a.b * a.n * row;
    const float *x = gen_normal(c, nx, 1.0), *cache0 = junk(c, a.nc);
    if (!c->be) {
        double *o = want(c, "cache", a.nc);
        for (int64_t i = 0; i < a.nc; i++) o[i] = cache0[i];
        for (int b = 0; b < a.b; b++)
            for (int i = 0; i < a.n && a.start[b] + i < a.len; i++)
                for (int64_t e = 0; e < row; e++)
                    o[((int64_t)b * a.len + a.start[b] + i) * row + e] =
                        x[((int64_t)b * a.n + i) * row + e];
        return;
    }
    sl_tensor *cache = ACT(c, cache0, a.b, a.len, a.kv, a.d);
    sl_op_kv_cache_write(cache, ACT(c, x, (int64_t)a.b * a.n, a.kv, a.d), I32(c, a.start, a.b), a.b,
                         a.n);
    got(c, "cache", cache);
}

void sl_conf_case_gated_attn_decode(cx *c) {
    const dec_in a = dec_inputs(c);
    const float *q = gen_normal(c, a.nq, 1.5), *kc = gen_normal(c, a.nc, 1.5);
    const float *vc = gen_normal(c, a.nc, 1.0), *g = a.ng ? gen_normal(c, a.ng, 1.5) : NULL;
    const double scale = 1.0 / sqrt((double)a.d);
    const int64_t t = (int64_t)a.b * a.n;
    if (!c->be) {
        sl_ref_attn_decode(want(c, "y", a.nq), q, kc, vc, g, a.start, a.mode, a.b, a.n, a.len, a.h,
                           a.kv, a.d, scale);
        return;
    }
    sl_tensor *y = ACT(c, junk(c, a.nq), t, a.h, a.d);
    sl_op_gated_attn_decode(y, ACT(c, q, t, a.h, a.d), ACT(c, kc, a.b, a.len, a.kv, a.d),
                            ACT(c, vc, a.b, a.len, a.kv, a.d),
                            g ? ACT(c, g, t, a.h, a.ng / (t * a.h)) : NULL, I32(c, a.start, a.b),
                            a.b, a.n, (float)scale);
    got(c, "y", y);
}
