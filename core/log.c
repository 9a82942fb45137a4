/* core/log.c - see log.h. */
#include "core/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_rank = 0;
static int g_world = 1;
static sl_log_level g_level = SL_LOG_INFO;
static sl_abort_hook g_abort_hook = NULL;

void sl_log_set_rank(int rank, int world_size) {
    g_rank = rank;
    g_world = world_size;
}

void sl_log_set_level(sl_log_level level) {
    g_level = level;
}
void sl_set_abort_hook(sl_abort_hook hook) {
    g_abort_hook = hook;
}

static void vlog(FILE *f, const char *tag, const char *fmt, va_list ap) {
    char msg[4096];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (g_world > 1)
        fprintf(f, "sluice[rank %d]: %s%s\n", g_rank, tag, msg);
    else
        fprintf(f, "sluice: %s%s\n", tag, msg);
    fflush(f);
}

void sl_info(const char *fmt, ...) {
    if (g_rank != 0 || g_level < SL_LOG_INFO) return;
    va_list ap;
    va_start(ap, fmt);
    char msg[4096];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    printf("%s\n", msg);
    fflush(stdout);
}

void sl_debug(const char *fmt, ...) {
    if (g_level < SL_LOG_DEBUG) return;
    va_list ap;
    va_start(ap, fmt);
    vlog(stderr, "debug: ", fmt, ap);
    va_end(ap);
}

void sl_warn(const char *fmt, ...) {
    if (g_level < SL_LOG_WARN) return;
    va_list ap;
    va_start(ap, fmt);
    vlog(stderr, "warning: ", fmt, ap);
    va_end(ap);
}

void sl_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlog(stderr, "error: ", fmt, ap);
    va_end(ap);
}

void sl_fatal_at(const char *file, int line, const char *fmt, ...) {
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "sluice[rank %d]: fatal: %s:%d: %s\n", g_rank, file, line, msg);
    fflush(stderr);
    if (g_abort_hook) g_abort_hook(3);
    abort();
}

void sl_exit_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vlog(stderr, "error: ", fmt, ap);
    va_end(ap);
    fflush(stderr);
    /* the other ranks must end too; alone, MPI_Abort would only add Open MPI's banner */
    if (g_abort_hook && g_world > 1) g_abort_hook(1);
    exit(1);
}

int sl_fail(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void *sl_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) sl_fatal("out of memory allocating %zu bytes", n);
    return p;
}

void *sl_xcalloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) sl_fatal("out of memory allocating %zu x %zu bytes", count, size);
    return p;
}

void *sl_xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) sl_fatal("out of memory reallocating to %zu bytes", n);
    return q;
}

void sl_xreserve(void **p, size_t *cap, size_t need) {
    if (*cap >= need) return;
    size_t n = *cap ? *cap : 1024;
    while (n < need) n *= 2;
    *p = sl_xrealloc(*p, n);
    *cap = n;
}

char *sl_xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = sl_xmalloc(n);
    memcpy(d, s, n);
    return d;
}

static char g_held[4096];
static int g_held_at_exit = 0;
static int g_held_shared = 0; /* the held message speaks for every rank (sl_error_hold_shared) */

static void print_unreleased(void) {
    if (g_held[0]) fprintf(stderr, "sluice[rank %d]: error: %s\n", g_rank, g_held);
}

static void vhold(int shared, const char *fmt, va_list ap) {
    if (g_held[0]) return; /* the first cause; what follows from it adds nothing */
    vsnprintf(g_held, sizeof g_held, fmt, ap);
    g_held_shared = shared;
    if (!g_held_at_exit) g_held_at_exit = atexit(print_unreleased) == 0;
}

void sl_error_hold(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vhold(0, fmt, ap);
    va_end(ap);
}

void sl_error_hold_shared(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vhold(1, fmt, ap);
    va_end(ap);
}

void sl_error_release(int print, int every_rank) {
    if (print && g_held[0]) {
        if (every_rank || g_world <= 1 || g_held_shared)
            fprintf(stderr, "sluice: error: %s\n", g_held);
        else
            fprintf(stderr, "sluice[rank %d]: error: %s\n", g_rank, g_held);
        fflush(stderr);
    }
    g_held[0] = 0;
    g_held_shared = 0;
}

void sl_error_once(const char *fmt, ...) {
    if (g_rank != 0) return;
    va_list ap;
    va_start(ap, fmt);
    char msg[4096];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* the same on every rank: printed once, without a rank tag */
    fprintf(stderr, "sluice: error: %s\n", msg);
    fflush(stderr);
}
