/* trainer/checkpoint.c - the trainer's tensors in a checkpoint (see checkpoint.h). */
#include "trainer/checkpoint.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/ops.h"

/* ---- which global range of which tensor this rank holds ------------------------------------ */

/* A parameter's global shape (an expert stack's first dimension is the global expert count)
 * and the flat global element where this rank's slice of it starts. */
static void global_layout(const sl_param *p, int num_experts, int64_t *shape, int64_t *base) {
    memcpy(shape, p->shape, sizeof(int64_t) * (size_t)p->ndim);
    *base = 0;
    if (p->expert_base >= 0) {
        const int64_t per = p->numel / p->shape[0];
        shape[0] = num_experts;
        *base = (int64_t)p->expert_base * per;
    }
}

/* The part of parameter p inside this rank's ZeRO-1 shard of its group, as [lo, hi) offsets
 * within the parameter; false when empty. Without ZeRO-1 the shard is the whole group. */
static bool shard_part(const sl_optimizer *o, const sl_param *p, int64_t *lo, int64_t *hi) {
    const int g = p->group;
    const int64_t s0 = o->shard_off[g], s1 = s0 + o->shard_len[g];
    const int64_t a = p->offset > s0 ? p->offset : s0;
    const int64_t b = p->offset + p->numel < s1 ? p->offset + p->numel : s1;
    if (b <= a) return false;
    *lo = a - p->offset, *hi = b - p->offset;
    return true;
}

/* ---- saving ------------------------------------------------------------------------------- */

/* A piece's bytes: read from a device (or host) tensor range when the writer asks (a
 * synchronous save), or copied to host memory first (`host`: an asynchronous save, whose
 * write runs while training changes the tensors). */
typedef struct {
    const sl_tensor *t;
    int64_t elem0; /* first element of the piece in t */
    float *host;   /* the snapshot, or NULL */
} source;

static int fetch(void *user, uint64_t byte_offset, void *dst, size_t nbytes) {
    const source *s = user;
    sl_tensor_to_host_range(s->t, s->elem0 + (int64_t)(byte_offset / sizeof(float)),
                            (int64_t)(nbytes / sizeof(float)), dst);
    return 0;
}

/* One piece of elements [begin, end) of `name` from src (filled in by the caller). */
static int piece(sl_ckpt_writer *w, const char *name, int ndim, const int64_t *shape, int64_t begin,
                 int64_t end, source *src, bool snapshot) {
    if (!snapshot)
        return sl_ckpt_save_piece_fn(w, name, "F32", ndim, shape, begin, end, fetch, src);
    src->host = sl_xmalloc(sizeof(float) * (size_t)(end - begin > 0 ? end - begin : 1));
    if (end > begin) sl_tensor_to_host_range(src->t, src->elem0, end - begin, src->host);
    return sl_ckpt_save_piece(w, name, "F32", ndim, shape, begin, end, src->host);
}

/* Declares every piece this rank writes; src has room for 3 per parameter plus one per layer. */
static void declare(const sl_train_ckpt *t, sl_ckpt_writer *w, source *src, bool snapshot) {
    sl_params *ps = &t->model->params;
    const sl_optimizer *opt = t->opt;
    const sl_topology *topo = t->topo;
    const int ne = t->model->cfg.num_experts;
    const bool dense_writer = topo->rank == 0;
    const bool expert_writer = sl_comm_rank(topo->edp) == 0;
    int nsrc = 0;
    char name[160];
    /* a declaration error is sticky in the writer: the write reports it on this rank and the
     * commit fails everywhere */
    for (int i = 0; i < ps->count; i++) {
        const sl_param *p = ps->items[i];
        int64_t shape[SL_MAX_DIMS], base;
        global_layout(p, ne, shape, &base);
        /* the master weight: replicated tensors by rank 0, an expert slice by the first rank of
         * the ranks holding it */
        if (p->expert_base >= 0 ? expert_writer : dense_writer) {
            src[nsrc] = (source){ps->w[p->group], p->offset, NULL};
            piece(w, p->name, p->ndim, shape, base, base + p->numel, &src[nsrc++], snapshot);
        }
        /* the moments: each rank its ZeRO-1 shard; replicated moments by the group's first rank */
        int64_t lo, hi;
        const bool moments = opt->zero1 || sl_comm_rank(opt->group_comm[p->group]) == 0;
        if (moments && shard_part(opt, p, &lo, &hi)) {
            const int64_t at = p->offset + lo - opt->shard_off[p->group];
            snprintf(name, sizeof name, "optim.m.%s", p->name);
            src[nsrc] = (source){opt->m[p->group], at, NULL};
            piece(w, name, p->ndim, shape, base + lo, base + hi, &src[nsrc++], snapshot);
            snprintf(name, sizeof name, "optim.v.%s", p->name);
            src[nsrc] = (source){opt->v[p->group], at, NULL};
            piece(w, name, p->ndim, shape, base + lo, base + hi, &src[nsrc++], snapshot);
        }
    }
    /* the routers' selection biases (host copies, identical on every rank; copied for an
     * asynchronous save, since the next step updates them) */
    const sl_model *m = t->model;
    for (int l = 0; l < m->cfg.num_hidden_layers && dense_writer; l++) {
        if (!m->ffn[l].is_moe || !m->ffn[l].moe.router.bias_host) continue;
        snprintf(name, sizeof name, "router.bias.%d", l);
        const float *bias = m->ffn[l].moe.router.bias_host;
        if (snapshot) {
            src[nsrc].host = sl_xmalloc(sizeof(float) * (size_t)ne);
            memcpy(src[nsrc].host, bias, sizeof(float) * (size_t)ne);
            bias = src[nsrc++].host;
        }
        sl_ckpt_save_piece(w, name, "F32", 1, (int64_t[]){ne}, 0, ne, bias);
    }
}

static sl_ckpt_writer *begin(const sl_train_ckpt *t, const sl_train_ckpt_save_opts *o, char *err,
                             size_t errlen) {
    const sl_ckpt_save_opts so = {.root = o->out_dir,
                                  .step = o->step,
                                  .rank = t->topo->rank,
                                  .world_size = t->topo->size,
                                  .agree = sl_ckpt_agree_comm,
                                  .agree_user = t->topo->world,
                                  .keep_last = o->keep_last,
                                  .keep_every = o->keep_every,
                                  .keep_steps = o->keep_steps,
                                  .n_keep_steps = o->n_keep_steps};
    return sl_ckpt_save_begin(&so, err, errlen);
}

static size_t max_sources(const sl_train_ckpt *t) {
    return (size_t)3 * t->model->params.count + (size_t)t->model->cfg.num_hidden_layers + 1;
}

int sl_train_ckpt_save(const sl_train_ckpt *t, const sl_train_ckpt_save_opts *o, const cJSON *state,
                       char *err, size_t errlen) {
    sl_ckpt_writer *w = begin(t, o, err, errlen);
    if (!w) return -1;
    source *src = sl_xcalloc(max_sources(t), sizeof *src); /* live until the write */
    declare(t, w, src, false);
    const int rc = sl_ckpt_save(w, state, err, errlen);
    free(src);
    return rc;
}

/* ---- asynchronous saving ------------------------------------------------------------------- */

struct sl_train_ckpt_async {
    sl_ckpt_writer *w;
    source *src;
    size_t nsrc;
    cJSON *state;
    pthread_t thread;
    int write_rc;
    char err[1024];
};

static void *write_thread(void *arg) {
    sl_train_ckpt_async *a = arg;
    a->write_rc = sl_ckpt_save_write(a->w, a->err, sizeof a->err);
    return NULL;
}

sl_train_ckpt_async *sl_train_ckpt_save_async(const sl_train_ckpt *t,
                                              const sl_train_ckpt_save_opts *o, cJSON *state,
                                              char *err, size_t errlen) {
    sl_ckpt_writer *w = begin(t, o, err, errlen);
    if (!w) {
        cJSON_Delete(state);
        return NULL;
    }
    sl_train_ckpt_async *a = sl_xcalloc(1, sizeof *a);
    a->w = w;
    a->nsrc = max_sources(t);
    a->src = sl_xcalloc(a->nsrc, sizeof *a->src);
    a->state = state;
    declare(t, w, a->src, true);
    if (pthread_create(&a->thread, NULL, write_thread, a) != 0) {
        /* no thread: write here, so the save still happens */
        write_thread(a);
        a->thread = pthread_self();
    }
    return a;
}

int sl_train_ckpt_save_finish(sl_train_ckpt_async *a, char *err, size_t errlen) {
    if (!pthread_equal(a->thread, pthread_self())) pthread_join(a->thread, NULL);
    /* the commit hears every rank's write status (sl_ckpt_save_commit) */
    char cerr[1024] = "";
    int rc = sl_ckpt_save_commit(a->w, a->state, cerr, sizeof cerr);
    if (a->write_rc != 0) {
        snprintf(err, errlen, "%s", a->err);
        rc = -1;
    } else if (rc != 0) {
        snprintf(err, errlen, "%s", cerr);
    }
    for (size_t i = 0; i < a->nsrc; i++) free(a->src[i].host);
    free(a->src);
    cJSON_Delete(a->state);
    free(a);
    return rc;
}

/* ---- loading ------------------------------------------------------------------------------ */

/* Reads global elements [begin, end) of `name` into elements [at, at + end - begin) of t. */
static int read_into(sl_ckpt *ck, const char *name, int64_t begin, int64_t end, sl_tensor *t,
                     int64_t at, float **buf, size_t *cap, char *err, size_t errlen) {
    const size_t bytes = sizeof(float) * (size_t)(end - begin);
    if (bytes > *cap) {
        *buf = sl_xrealloc(*buf, bytes);
        *cap = bytes;
    }
    if (end > begin && sl_ckpt_read(ck, name, begin, end, *buf, err, errlen) != 0) return -1;
    if (end > begin) sl_tensor_from_host_range(t, at, end - begin, *buf);
    return 0;
}

int sl_train_ckpt_load_weights(sl_model *m, sl_ckpt *ck, char *err, size_t errlen) {
    sl_params *ps = &m->params;
    const int ne = m->cfg.num_experts;
    float *buf = NULL;
    size_t cap = 0;
    int rc = 0;
    for (int i = 0; i < ps->count && rc == 0; i++) {
        const sl_param *p = ps->items[i];
        int64_t shape[SL_MAX_DIMS], base;
        global_layout(p, ne, shape, &base);
        rc = sl_ckpt_expect(ck, p->name, "F32", p->ndim, shape, err, errlen);
        if (rc == 0)
            rc = read_into(ck, p->name, base, base + p->numel, ps->w[p->group], p->offset, &buf,
                           &cap, err, errlen);
    }
    free(buf);
    if (rc == 0) sl_params_sync_compute(ps);
    return rc;
}

int sl_train_ckpt_load(const sl_train_ckpt *t, sl_ckpt *ck, char *err, size_t errlen) {
    sl_params *ps = &t->model->params;
    sl_optimizer *opt = t->opt;
    const int ne = t->model->cfg.num_experts;
    char name[160];
    /* the moments' shapes before anything is read (load_weights checks the weights' own) */
    for (int i = 0; i < ps->count; i++) {
        const sl_param *p = ps->items[i];
        int64_t shape[SL_MAX_DIMS], base;
        global_layout(p, ne, shape, &base);
        snprintf(name, sizeof name, "optim.m.%s", p->name);
        if (sl_ckpt_expect(ck, name, "F32", p->ndim, shape, err, errlen) != 0) return -1;
        snprintf(name, sizeof name, "optim.v.%s", p->name);
        if (sl_ckpt_expect(ck, name, "F32", p->ndim, shape, err, errlen) != 0) return -1;
    }
    if (sl_train_ckpt_load_weights(t->model, ck, err, errlen) != 0) return -1;
    float *buf = NULL;
    size_t cap = 0;
    int rc = 0;
    for (int i = 0; i < ps->count && rc == 0; i++) {
        const sl_param *p = ps->items[i];
        int64_t shape[SL_MAX_DIMS], base, lo, hi;
        global_layout(p, ne, shape, &base);
        if (!shard_part(opt, p, &lo, &hi)) continue;
        const int64_t at = p->offset + lo - opt->shard_off[p->group];
        snprintf(name, sizeof name, "optim.m.%s", p->name);
        rc = read_into(ck, name, base + lo, base + hi, opt->m[p->group], at, &buf, &cap, err,
                       errlen);
        snprintf(name, sizeof name, "optim.v.%s", p->name);
        if (rc == 0)
            rc = read_into(ck, name, base + lo, base + hi, opt->v[p->group], at, &buf, &cap, err,
                           errlen);
    }
    sl_model *m = t->model;
    for (int l = 0; l < m->cfg.num_hidden_layers && rc == 0; l++) {
        sl_router *r = m->ffn[l].is_moe ? &m->ffn[l].moe.router : NULL;
        if (!r || !r->bias_host) continue;
        snprintf(name, sizeof name, "router.bias.%d", l);
        if (sl_ckpt_find(ck, name) < 0) {
            snprintf(err, errlen,
                     "%s: %s is missing (the run uses the aux-loss-free bias; the checkpoint "
                     "was saved without it)",
                     sl_ckpt_dir(ck), name);
            rc = -1;
            break;
        }
        float *bias = sl_xmalloc(sizeof(float) * (size_t)ne);
        rc = sl_ckpt_read(ck, name, 0, ne, bias, err, errlen);
        if (rc == 0) sl_router_set_bias(r, bias);
        free(bias);
    }
    free(buf);
    return rc;
}
