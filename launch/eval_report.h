/*
 * launch/eval_report.h - what `sluice eval` reports (docs/evaluation.md): loss and perplexity, and
 * with --diagnostics the loss by position bucket and the per-layer diagnostics of
 * model/diagnostics.h; printed as a table, as JSON, or plotted through gnuplot.
 */
#ifndef SL_EVAL_REPORT_H
#define SL_EVAL_REPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "model/config.h"

enum { SL_EVAL_MAX_BUCKETS = 40 };

/* Query positions [start, end) of each sequence: the loss of predicting token i + 1 from tokens
 * 0 .. i is counted at position i. */
typedef struct {
    int start, end;
    int64_t tokens;
    double loss_sum;
} sl_eval_bucket;

typedef struct {
    /* what was evaluated */
    const char *weights, *data, *backend;
    int seq, batch;
    sl_model_config cfg; /* as evaluated: the saved config with the RoPE flags applied */
    double mscale;       /* the cos/sin scale the RoPE table used */
    /* loss over every evaluated token */
    int64_t tokens;
    double loss_sum;
    /* --diagnostics */
    bool diagnostics;
    int nbuckets, layers;
    sl_eval_bucket bucket[SL_EVAL_MAX_BUCKETS];
    int64_t batches;               /* forward passes whose layer table was added */
    double *gate, *first, *maxact; /* [layers]: sums over batches (max for maxact) */
} sl_eval_report;

/* The default first bucket width for sequences of `seq` tokens: seq / 8 rounded down to a power
 * of two, at least 16 and at most 1024 (so 1024 from 8192 tokens on, and 3 to 7 doubling buckets
 * for shorter sequences). */
int sl_eval_bucket_width(int seq);

/* Sets up the report (zeroes, and with diagnostics the buckets [0, b), [b, 2b), [2b, 4b), ...
 * up to seq, the last one cut at seq, and the per-layer sums of `layers` layers). */
void sl_eval_report_init(sl_eval_report *r, int seq, int bucket_width, bool diagnostics,
                         int layers);
void sl_eval_report_free(sl_eval_report *r);

/* One forward pass: its per-token losses [batch * seq] (host; token t at position t % seq) and
 * its layer table [layers * SL_DIAG_COLS] (model/diagnostics.h). */
void sl_eval_report_add_losses(sl_eval_report *r, const float *losses, int64_t n);
void sl_eval_report_add_layers(sl_eval_report *r, const float *table);

/* The human-readable report (the summary line, RoPE, then with diagnostics the tables). */
void sl_eval_report_table(const sl_eval_report *r, FILE *f);
/* The JSON document (schema in docs/evaluation.md), one object followed by a newline. */
void sl_eval_report_json(const sl_eval_report *r, FILE *f);
/* A PNG with four panels (loss by position bucket; per layer: gate score, first-token share, max
 * activation) through gnuplot. 0, or -1 with err. */
int sl_eval_report_plot(const sl_eval_report *r, const char *png, char *err, size_t errlen);

#endif
