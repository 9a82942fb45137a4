/* launch/doctor_report.c - `sluice doctor`'s rows, table and JSON (doctor.h, docs/doctor.md). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "launch/doctor.h"

const char *sl_dr_status_name(sl_dr_status s) {
    return s == SL_DR_OK ? "OK" : s == SL_DR_FAIL ? "FAIL" : s == SL_DR_SKIP ? "SKIP" : "INFO";
}

static void print_row(const sl_dr_row *r) {
    printf("%-11s  %-42s  %-4s  %s\n", r->section, r->label, sl_dr_status_name(r->status),
           r->result);
    fflush(stdout);
}

static sl_dr_row *add_row(sl_doctor *d, const char *section, const char *key, const char *label,
                          sl_dr_status status, double value, const char *unit, const char *fmt,
                          va_list ap) {
    if (d->nrows == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 32;
        d->rows = sl_xrealloc(d->rows, sizeof *d->rows * (size_t)d->cap);
    }
    sl_dr_row *r = &d->rows[d->nrows++];
    memset(r, 0, sizeof *r);
    r->section = section;
    snprintf(r->key, sizeof r->key, "%s", key);
    snprintf(r->label, sizeof r->label, "%s", label);
    r->status = status;
    r->value = value;
    r->threshold = NAN;
    snprintf(r->unit, sizeof r->unit, "%s", unit ? unit : "");
    vsnprintf(r->result, sizeof r->result, fmt, ap);
    return r;
}

sl_dr_row *sl_dr_add(sl_doctor *d, const char *section, const char *key, const char *label,
                     sl_dr_status status, double value, const char *unit, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    sl_dr_row *r = add_row(d, section, key, label, status, value, unit, fmt, ap);
    va_end(ap);
    if (!d->json) print_row(r);
    return r;
}

sl_dr_row *sl_dr_measure(sl_doctor *d, const char *key, const char *label, double value,
                         const char *unit, double min, const char *fmt, ...) {
    const bool judged = isfinite(min) && !d->emulated;
    const sl_dr_status st = !isfinite(value) ? SL_DR_FAIL
                            : !judged        ? SL_DR_INFO
                            : value >= min   ? SL_DR_OK
                                             : SL_DR_FAIL;
    va_list ap;
    va_start(ap, fmt);
    sl_dr_row *r = add_row(d, "speed", key, label, st, value, unit, fmt, ap);
    va_end(ap);
    if (judged) {
        r->threshold = min;
        r->below_fails = true;
        const size_t at = strlen(r->result);
        snprintf(r->result + at, sizeof r->result - at, " (minimum %.4g %s)", min, unit);
    } else if (d->emulated && isfinite(min)) {
        const size_t at = strlen(r->result);
        snprintf(r->result + at, sizeof r->result - at, " (not judged: emulator)");
    }
    if (!d->json) print_row(r);
    return r;
}

void sl_dr_json_append(char **buf, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *add = NULL;
    if (vasprintf(&add, fmt, ap) < 0) sl_fatal("doctor: out of memory");
    va_end(ap);
    const size_t have = *buf ? strlen(*buf) : 0, more = strlen(add);
    *buf = sl_xrealloc(*buf, have + more + 1);
    memcpy(*buf + have, add, more + 1);
    free(add);
}

void sl_dr_json_str(char **buf, const char *s) {
    sl_dr_json_append(buf, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            sl_dr_json_append(buf, "\\%c", *p);
        else if (*p < 0x20)
            sl_dr_json_append(buf, "\\u%04x", *p);
        else
            sl_dr_json_append(buf, "%c", *p);
    }
    sl_dr_json_append(buf, "\"");
}

static void json_num(char **buf, double v) {
    if (isfinite(v))
        sl_dr_json_append(buf, "%.6g", v);
    else
        sl_dr_json_append(buf, "null");
}

void sl_dr_begin(sl_doctor *d) {
    if (d->json) return;
    printf("sluice doctor: host %s%s%s\n", d->host, d->tiny ? " | tiny shapes" : "",
           d->emulated ? " | CUDA emulated on the CPU (speeds mean nothing)" : "");
    printf("%-11s  %-42s  %-4s  %s\n", "section", "check", "", "result");
    fflush(stdout);
}

int sl_dr_finish(sl_doctor *d, int exit_code) {
    int count[4] = {0};
    for (int i = 0; i < d->nrows; i++) count[d->rows[i].status]++;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const double secs = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec - d->started;
    const char *status = exit_code == 0   ? "ok"
                         : exit_code == 1 ? "fail"
                         : exit_code == 3 ? "no_device"
                                          : "error";
    if (!d->json) {
        printf("%d checks: %d OK, %d failed, %d skipped, %d info | %.1f s | exit %d (%s)\n",
               d->nrows, count[SL_DR_OK], count[SL_DR_FAIL], count[SL_DR_SKIP], count[SL_DR_INFO],
               secs, exit_code, status);
        fflush(stdout);
        return exit_code;
    }
    char *j = NULL;
    sl_dr_json_append(&j, "{\"sluice_doctor\": 1, \"status\": \"%s\", \"exit_code\": %d, ", status,
                      exit_code);
    sl_dr_json_append(&j, "\"host\": ");
    sl_dr_json_str(&j, d->host);
    sl_dr_json_append(&j, ", \"tiny\": %s, \"emulated\": %s, \"seconds\": %.3f, ",
                      d->tiny ? "true" : "false", d->emulated ? "true" : "false", secs);
    sl_dr_json_append(&j, "\"environment\": %s, \"devices\": %s, ",
                      d->env_json ? d->env_json : "{}", d->devices_json ? d->devices_json : "[]");
    sl_dr_json_append(&j, "\"checks\": [");
    for (int i = 0; i < d->nrows; i++) {
        const sl_dr_row *r = &d->rows[i];
        sl_dr_json_append(&j, "%s{\"section\": \"%s\", \"key\": ", i ? ", " : "", r->section);
        sl_dr_json_str(&j, r->key);
        sl_dr_json_append(&j, ", \"label\": ");
        sl_dr_json_str(&j, r->label);
        sl_dr_json_append(&j, ", \"status\": \"%s\", \"value\": ", sl_dr_status_name(r->status));
        json_num(&j, r->value);
        sl_dr_json_append(&j, ", \"unit\": ");
        sl_dr_json_str(&j, r->unit);
        sl_dr_json_append(&j, ", \"threshold\": ");
        json_num(&j, r->threshold);
        sl_dr_json_append(&j, ", \"result\": ");
        sl_dr_json_str(&j, r->result);
        sl_dr_json_append(&j, "}");
    }
    sl_dr_json_append(&j,
                      "], \"summary\": {\"checks\": %d, \"ok\": %d, \"fail\": %d, \"skip\": %d, "
                      "\"info\": %d}}\n",
                      d->nrows, count[SL_DR_OK], count[SL_DR_FAIL], count[SL_DR_SKIP],
                      count[SL_DR_INFO]);
    fputs(j, stdout);
    fflush(stdout);
    free(j);
    return exit_code;
}

void sl_dr_free(sl_doctor *d) {
    free(d->rows);
    free(d->env_json);
    free(d->devices_json);
    d->rows = NULL, d->env_json = d->devices_json = NULL;
}
