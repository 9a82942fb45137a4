/* core/profile.c - named regions of a training step, timed by marks (see profile.h). */
#include "core/profile.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/backend_impl.h"
#include "core/log.h"

enum { MAX_DEPTH = 32 };

typedef struct {
    double host; /* seconds, the host's monotonic clock */
    int top;     /* the innermost region open after this mark; -1: none */
} mark_t;

struct sl_profile {
    bool in_step;
    double step_start; /* host clock at sl_profile_step_begin */
    int depth;
    int stack[MAX_DEPTH];
    /* the marks of the step in progress; device marks are reused from step to step */
    mark_t *marks;
    void **dev; /* the backend's marks (NULL without device timers) */
    int nmarks, cap, ndev;
    sl_profile_report total;
};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool device_timers(const sl_backend *be) {
    return be->iface.mark_record != NULL;
}

/* A region's row, added the first time its name is seen. Names are usually literals, so the
 * pointer is compared first. */
static int region_id(sl_profile *p, const char *name) {
    sl_profile_report *t = &p->total;
    for (int i = 0; i < t->nrows; i++)
        if (t->rows[i].name == name) return i;
    for (int i = 0; i < t->nrows; i++)
        if (strcmp(t->rows[i].name, name) == 0) return i;
    SL_CHECK(t->nrows < SL_PROFILE_MAX_ROWS, "more than %d profiling regions (\"%s\")",
             SL_PROFILE_MAX_ROWS, name);
    t->rows[t->nrows] = (sl_profile_row){.name = name};
    return t->nrows++;
}

static void mark(sl_backend *be, sl_profile *p) {
    if (p->nmarks == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 1024;
        p->marks = sl_xrealloc(p->marks, (size_t)p->cap * sizeof *p->marks);
        if (device_timers(be)) p->dev = sl_xrealloc(p->dev, (size_t)p->cap * sizeof *p->dev);
    }
    if (device_timers(be)) {
        if (p->nmarks == p->ndev) p->dev[p->ndev++] = be->iface.mark_new(be->ctx);
        be->iface.mark_record(be->ctx, p->dev[p->nmarks]);
    }
    p->marks[p->nmarks++] = (mark_t){now(), p->depth ? p->stack[p->depth - 1] : -1};
}

void sl_profile_begin(sl_backend *be, const char *name) {
    if (be->ranges) be->iface.range_push(be->ctx, name);
    sl_profile *p = be->prof;
    if (!p || !p->in_step) return;
    SL_CHECK(p->depth < MAX_DEPTH, "profiling regions nested deeper than %d (\"%s\")", MAX_DEPTH,
             name);
    const int id = region_id(p, name);
    p->stack[p->depth++] = id;
    p->total.rows[id].calls++;
    mark(be, p);
}

void sl_profile_end(sl_backend *be) {
    if (be->ranges) be->iface.range_pop(be->ctx);
    sl_profile *p = be->prof;
    if (!p || !p->in_step) return;
    SL_CHECK(p->depth > 0, "sl_profile_end without an open region");
    p->depth--;
    mark(be, p);
}

void sl_profile_count_read(sl_backend *be) {
    sl_profile *p = be->prof;
    if (!p || !p->in_step) return;
    if (p->depth)
        p->total.rows[p->stack[p->depth - 1]].host_reads++;
    else
        p->total.idle_host_reads++;
}

void sl_profile_enable(sl_backend *be, bool on) {
    sl_profile *p = be->prof;
    if (on && !p) {
        be->prof = sl_xcalloc(1, sizeof *be->prof);
        be->prof->total.device_timers = device_timers(be);
    } else if (!on && p) {
        for (int i = 0; i < p->ndev; i++) be->iface.mark_free(be->ctx, p->dev[i]);
        free(p->dev);
        free(p->marks);
        free(p);
        be->prof = NULL;
    }
}

void sl_profile_step_begin(sl_backend *be) {
    sl_profile *p = be->prof;
    if (!p) return;
    SL_CHECK(!p->in_step, "sl_profile_step_begin inside a profiled step");
    p->step_start = now();
    p->in_step = true;
    p->depth = 0;
    p->nmarks = 0;
    mark(be, p);
}

void sl_profile_step_end(sl_backend *be) {
    sl_profile *p = be->prof;
    if (!p) return;
    SL_CHECK(p->in_step, "sl_profile_step_end without sl_profile_step_begin");
    SL_CHECK(p->depth == 0, "the profiled step ended with region \"%s\" still open",
             p->total.rows[p->stack[p->depth - 1]].name);
    mark(be, p);
    p->in_step = false;
    /* The profile's own wait (not counted as the step's synchronization). */
    if (be->iface.synchronize) be->iface.synchronize(be->ctx);
    sl_profile_report *t = &p->total;
    t->wall_ms += 1e3 * (now() - p->step_start);
    /* Times from the first mark, so that the intervals add up exactly to the step. */
    double prev = 0.0;
    for (int i = 1; i < p->nmarks; i++) {
        const double host = 1e3 * (p->marks[i].host - p->marks[i - 1].host);
        const double at = device_timers(be) ? be->iface.mark_ms(be->ctx, p->dev[0], p->dev[i])
                                            : 1e3 * (p->marks[i].host - p->marks[0].host);
        const double dev = at - prev;
        prev = at;
        const int top = p->marks[i - 1].top;
        if (top >= 0) {
            t->rows[top].device_ms += dev;
            t->rows[top].host_ms += host;
        } else {
            t->idle_ms += dev;
            t->idle_host_ms += host;
        }
    }
    t->device_ms += prev;
    t->host_ms += 1e3 * (p->marks[p->nmarks - 1].host - p->marks[0].host);
    t->marks += p->nmarks;
    t->steps++;
}

void sl_profile_get(const sl_backend *be, sl_profile_report *out) {
    if (be->prof)
        *out = be->prof->total;
    else
        memset(out, 0, sizeof *out);
}
