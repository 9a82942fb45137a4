/*
 * attention/cudnn_sdpa_impl.h - what the two halves of the cuDNN SDPA path share: the plan cache
 * and the library's state (attention/cudnn_sdpa.c: loading, plans, execution) and the graph a
 * plan is built from (attention/cudnn_graph.c). Internal to attention/.
 */
#ifndef SL_ATTENTION_CUDNN_SDPA_IMPL_H
#define SL_ATTENTION_CUDNN_SDPA_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attention/cudnn_api.h"
#include "attention/cudnn_sdpa.h"
#include "core/log.h"

enum { MAX_PLANS = 8, MAX_DESCS = 192, MAX_OPS = 40, MAX_CONFIGS = 16, WS_ALIGN = 256 };

/* Unique ids of the tensors a call binds (the variant pack); virtual tensors count from
 * VIRTUAL_UID. */
enum {
    UID_Q = 1,
    UID_K, /* K^T: K's memory as [b, kv, d, s] */
    UID_V, /* forward: V [b, kv, s, d]; backward: V^T [b, kv, d, s] */
    UID_O,
    UID_STATS,
    UID_SCALE,   /* by value */
    UID_NEG_INF, /* by value: the masked logit */
    UID_DO,
    UID_DQ,
    UID_DK,
    UID_DV,
    UID_ONE,         /* by value: 1 */
    UID_SOFTMAX_SUM, /* workspace: rowsum(dO * O), fp32 [b, h, s, 1] */
    UID_DQ_ACCUM,    /* workspace: fp32 [b, h, s, d] */
    VIRTUAL_UID = 1000,
};

typedef struct {
    bool used;
    sl_cudnn_dir dir;
    sl_cudnn_shape shape;
    void *plan;
    void *descs[MAX_DESCS]; /* everything the plan was built from, destroyed with it */
    int ndescs;
    size_t cudnn_ws, sum_off, accum_off, total_ws; /* workspace layout */
    unsigned long long last_use;
} plan_entry;

struct sl_cudnn {
    void *lib;
    char path[512];
    sl_cudnn_api api;
    long version;
    void *handle;
    plan_entry plans[MAX_PLANS];
    unsigned long long clock;
};

/* "what: <cuDNN status name> (<code>)[: <cuDNN's last error message>]" into err; returns -1. */
int sl_cudnn_fail(const sl_cudnn_api *api, int status, char *err, size_t errlen, const char *fmt,
                  ...) SL_PRINTF(5, 6);

/* Builds p's operation graph for (dir, s) (cudnn-frontend's SDPA node, operation by operation)
 * and its execution plan, the first one cuDNN's heuristics offer that finalizes; every
 * descriptor made is kept in p for plan_release. 0, or -1 with the reason in err. */
int sl_cudnn_graph_build(sl_cudnn *c, plan_entry *p, sl_cudnn_dir dir, const sl_cudnn_shape *s,
                         char *err, size_t errlen);

#endif
