/*
 * trainer/metrics.h - what a training step reports: a progress line on the terminal and
 * one JSON object per step appended to the metrics file (JSON Lines; docs/metrics.md).
 */
#ifndef SL_METRICS_H
#define SL_METRICS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    int step, max_steps;   /* over the whole schedule */
    const char *stage;     /* the stage's name (NULL: not printed) */
    int64_t tokens;        /* training tokens after this step, over the whole schedule */
    double loss;           /* mean token cross-entropy of the step (nats) */
    double lbl;            /* mean over MoE layers of E * sum f_i P_i */
    double lbl_normalized; /* lbl / k (1 under uniform routing) */
    double zloss;
    double lr, grad_norm;
    double tokens_per_s, elapsed_s, eta_s;
    double model_tflops; /* model FLOPs per second and rank (GPU), in TFLOP/s */
    double mfu;          /* model_tflops / the peak per rank; NaN when the peak is unknown */
    double gate_score;   /* mean sigmoid(gate) */
    /* rank 0's tensors now and at their most since the process began, in GiB
     * (sl_backend_tensor_bytes) */
    double mem_gib, mem_peak_gib;
    int n_layers;
    const double *load_max, *load_mean; /* per layer tokens per expert; NaN for dense layers */
    const int64_t *expert_counts;       /* [n_layers * n_experts] tokens routed per expert */
    int n_experts;
    const double *rank_load; /* per EP rank tokens received (NULL when EP = 1) */
    int ep_size;
    bool has_eval;
    double eval_loss;
    bool has_batch_hash;
    uint64_t batch_hash; /* of the global batch's token ids (io/reader.h) */
} sl_step_metrics;

typedef struct {
    FILE *jsonl;
    bool tty;
} sl_metrics;

/* Opens (appends to) the metrics file; path NULL or "" disables the file. */
int sl_metrics_open(sl_metrics *m, const char *path, char *err, size_t errlen);
/* Prints the progress line and appends the JSON line. */
void sl_metrics_step(sl_metrics *m, const sl_step_metrics *s, bool print_line);
/* Appends {"event": name, ...fields} (fields: a JSON object body without braces). */
void sl_metrics_event(sl_metrics *m, const char *name, const char *fields);
void sl_metrics_close(sl_metrics *m);

/* "3m12s" style durations. */
const char *sl_format_duration(double seconds, char *buf, size_t len);

#endif
