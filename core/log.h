/*
 * core/log.h - logging and fatal errors.
 *
 * sluice separates two kinds of failure:
 *   - bad input (config, data file, checkpoint, CLI flag): reported with sl_error(), which
 *     names the file/key/offset; the caller returns a non-zero status up to main().
 *   - broken invariants inside the library (shape mismatch between ops, out of memory,
 *     a backend failure): sl_fatal() prints the message with its source location and aborts
 *     the whole MPI job, because no rank can continue a collective training step alone.
 */
#ifndef SL_LOG_H
#define SL_LOG_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __GNUC__
#define SL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define SL_NORETURN     __attribute__((noreturn))
#else
#define SL_PRINTF(a, b)
#define SL_NORETURN
#endif

typedef enum { SL_LOG_ERROR = 0, SL_LOG_WARN = 1, SL_LOG_INFO = 2, SL_LOG_DEBUG = 3 } sl_log_level;

/* Sets the rank printed in messages and whether non-zero ranks print info lines. */
void sl_log_set_rank(int rank, int world_size);
void sl_log_set_level(sl_log_level level);

/* Informational output: printed by rank 0 only (every rank for warnings and errors). */
void sl_info(const char *fmt, ...) SL_PRINTF(1, 2);
void sl_warn(const char *fmt, ...) SL_PRINTF(1, 2);
void sl_debug(const char *fmt, ...) SL_PRINTF(1, 2);
/* A user-facing error ("sluice: error: <msg>") on stderr, on every rank. */
void sl_error(const char *fmt, ...) SL_PRINTF(1, 2);
/* An error every rank finds alike (bad config, bad flag): printed by rank 0 only, so a job of
 * N ranks prints it once; every rank still returns its non-zero status. */
void sl_error_once(const char *fmt, ...) SL_PRINTF(1, 2);
/* An error the ranks agree on before it is printed (sl_comm_agree, core/comm.h): held, not
 * printed, so that a failure every rank finds alike (a path, a shape, a checkpoint) is printed
 * once, by the lowest failing rank, and one that only some ranks find still by one of them.
 * A process keeps the first message it holds until the agreement; one never agreed on is
 * printed at exit, so none is lost. */
void sl_error_hold(const char *fmt, ...) SL_PRINTF(1, 2);
/* The same for what one rank checks on behalf of all (the run directory, every stage's data on
 * rank 0): printed without a rank tag, as the job's error, although only that rank failed. */
void sl_error_hold_shared(const char *fmt, ...) SL_PRINTF(1, 2);
/* The agreement's end (sl_comm_agree): prints the held message when `print` (without a rank
 * tag when every rank failed), then forgets it. */
void sl_error_release(int print, int every_rank);

/* Prints "sluice: fatal: file:line: msg" and aborts every rank (MPI_Abort when MPI is up). */
SL_NORETURN void sl_fatal_at(const char *file, int line, const char *fmt, ...) SL_PRINTF(3, 4);
/* A resource the process cannot go on without ran out (host memory): not a bug, so no source
 * location; prints the error (sl_error's form) and ends the job with exit status 1 through
 * the abort hook, as bad input ends it. */
SL_NORETURN void sl_exit_error(const char *fmt, ...) SL_PRINTF(1, 2);
#define sl_fatal(...) sl_fatal_at(__FILE__, __LINE__, __VA_ARGS__)

/* Internal invariant check that stays on in release builds. */
#define SL_CHECK(cond, ...)                                                                        \
    do {                                                                                           \
        if (!(cond)) sl_fatal_at(__FILE__, __LINE__, __VA_ARGS__);                                 \
    } while (0)

/* Formats a message into err (when err is not NULL) and returns -1: the usual way a
 * function that fails on bad input reports why, e.g. `return sl_fail(err, errlen, ...)`. */
#include <stddef.h>
int sl_fail(char *err, size_t errlen, const char *fmt, ...) SL_PRINTF(3, 4);

/* malloc/calloc/realloc that call sl_fatal on failure. */
#include <stddef.h>
void *sl_xmalloc(size_t n);
void *sl_xcalloc(size_t count, size_t size);
void *sl_xrealloc(void *p, size_t n);
char *sl_xstrdup(const char *s);
/* Grows the buffer *p of *cap bytes to hold at least `need` (doubling; contents kept). */
void sl_xreserve(void **p, size_t *cap, size_t need);

/* Hook run by sl_fatal before exiting (the comm layer installs MPI_Abort here). */
typedef void (*sl_abort_hook)(int code);
void sl_set_abort_hook(sl_abort_hook hook);

#ifdef __cplusplus
}
#endif

#endif
