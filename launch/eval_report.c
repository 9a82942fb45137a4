/* launch/eval_report.c - the report of `sluice eval` (see eval_report.h). */
#include "launch/eval_report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/log.h"
#include "launch/gnuplot.h"
#include "model/diagnostics.h"

int sl_eval_bucket_width(int seq) {
    int b = 16;
    while (b < 1024 && 2 * b <= seq / 8) b *= 2;
    return b;
}

void sl_eval_report_init(sl_eval_report *r, int seq, int width, bool diagnostics, int layers) {
    memset(r, 0, sizeof *r);
    r->seq = seq;
    r->diagnostics = diagnostics;
    if (!diagnostics) return;
    int start = 0, end = width < seq ? width : seq;
    while (start < seq && r->nbuckets < SL_EVAL_MAX_BUCKETS) {
        /* the last bucket takes what is left, so every position is counted once */
        if (r->nbuckets == SL_EVAL_MAX_BUCKETS - 1) end = seq;
        r->bucket[r->nbuckets++] = (sl_eval_bucket){.start = start, .end = end};
        start = end;
        end = 2 * end < seq ? 2 * end : seq;
    }
    r->layers = layers;
    r->gate = sl_xcalloc((size_t)layers, sizeof(double));
    r->first = sl_xcalloc((size_t)layers, sizeof(double));
    r->maxact = sl_xcalloc((size_t)layers, sizeof(double));
}

void sl_eval_report_free(sl_eval_report *r) {
    free(r->gate);
    free(r->first);
    free(r->maxact);
    r->gate = r->first = r->maxact = NULL;
}

void sl_eval_report_add_losses(sl_eval_report *r, const float *losses, int64_t n) {
    for (int64_t t = 0; t < n; t++) {
        const int pos = (int)(t % r->seq);
        int k = 0;
        while (k + 1 < r->nbuckets && pos >= r->bucket[k].end) k++;
        r->bucket[k].tokens++;
        r->bucket[k].loss_sum += losses[t];
    }
}

void sl_eval_report_add_layers(sl_eval_report *r, const float *table) {
    for (int l = 0; l < r->layers; l++) {
        const float *row = table + (int64_t)l * SL_DIAG_COLS;
        r->gate[l] += row[SL_DIAG_GATE];
        r->first[l] += row[SL_DIAG_FIRST_TOKEN];
        /* NaN wins: a diverged layer must show */
        const double a = row[SL_DIAG_MAX_ACT];
        if (r->batches == 0 || isnan(a) || a > r->maxact[l]) r->maxact[l] = a;
    }
    r->batches++;
}

static double mean_loss(const sl_eval_report *r) {
    return r->tokens ? r->loss_sum / (double)r->tokens : NAN;
}

static double bucket_loss(const sl_eval_bucket *b) {
    return b->tokens ? b->loss_sum / (double)b->tokens : NAN;
}

static double layer_mean(const sl_eval_report *r, const double *sum, int l) {
    return r->batches ? sum[l] / (double)r->batches : NAN;
}

static bool yarn(const sl_eval_report *r) {
    return r->cfg.rope_scaling.type == SL_ROPE_YARN;
}

void sl_eval_report_table(const sl_eval_report *r, FILE *f) {
    const double loss = mean_loss(r);
    fprintf(f, "tokens %lld | loss %.4f nats/token | perplexity %.3f | %.4f bits/token\n",
            (long long)r->tokens, loss, exp(loss), loss / log(2.0));
    const sl_rope_scaling *rs = &r->cfg.rope_scaling;
    fprintf(f, "rope: theta %g", r->cfg.rope_theta);
    if (yarn(r))
        fprintf(f,
                " | yarn factor %g, original_max_position_embeddings %d, beta_fast %g, "
                "beta_slow %g, mscale %.6f",
                rs->factor, rs->original_max_position_embeddings, rs->beta_fast, rs->beta_slow,
                r->mscale);
    fprintf(f, "\n");
    if (!r->diagnostics) return;
    fprintf(f, "\nloss by position (query position i predicts token i + 1)\n");
    fprintf(f, "  %-18s %12s %10s %12s\n", "positions", "tokens", "loss", "perplexity");
    for (int k = 0; k < r->nbuckets; k++) {
        const sl_eval_bucket *b = &r->bucket[k];
        char span[40];
        snprintf(span, sizeof span, "[%d, %d)", b->start, b->end);
        fprintf(f, "  %-18s %12lld %10.4f %12.3f\n", span, (long long)b->tokens, bucket_loss(b),
                exp(bucket_loss(b)));
    }
    fprintf(f, "\nper layer (means over %lld forward passes; max activation: the largest)\n",
            (long long)r->batches);
    fprintf(f, "  %5s %12s %18s %16s\n", "layer", "gate_score", "first_token_share",
            "max_activation");
    for (int l = 0; l < r->layers; l++) {
        char first[24] = "-"; /* not defined with document masks */
        if (!isnan(layer_mean(r, r->first, l)))
            snprintf(first, sizeof first, "%.4f", layer_mean(r, r->first, l));
        fprintf(f, "  %5d %12.4f %18s %16.4g\n", l, layer_mean(r, r->gate, l), first, r->maxact[l]);
    }
}

void sl_eval_report_json(const sl_eval_report *r, FILE *f) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "weights", r->weights ? r->weights : "");
    cJSON_AddStringToObject(o, "data", r->data ? r->data : "");
    cJSON_AddStringToObject(o, "backend", r->backend ? r->backend : "");
    cJSON_AddNumberToObject(o, "seq_len", r->seq);
    cJSON_AddNumberToObject(o, "batch", r->batch);
    cJSON_AddNumberToObject(o, "tokens", (double)r->tokens);
    const double loss = mean_loss(r);
    cJSON_AddNumberToObject(o, "loss", loss);
    cJSON_AddNumberToObject(o, "perplexity", exp(loss));
    cJSON_AddNumberToObject(o, "bits_per_token", loss / log(2.0));
    cJSON *rope = cJSON_AddObjectToObject(o, "rope");
    cJSON_AddNumberToObject(rope, "theta", r->cfg.rope_theta);
    cJSON_AddStringToObject(rope, "scaling", yarn(r) ? "yarn" : "none");
    cJSON_AddNumberToObject(rope, "mscale", r->mscale);
    if (yarn(r)) {
        const sl_rope_scaling *rs = &r->cfg.rope_scaling;
        cJSON_AddNumberToObject(rope, "factor", rs->factor);
        cJSON_AddNumberToObject(rope, "original_max_position_embeddings",
                                rs->original_max_position_embeddings);
        cJSON_AddNumberToObject(rope, "beta_fast", rs->beta_fast);
        cJSON_AddNumberToObject(rope, "beta_slow", rs->beta_slow);
        if (rs->attention_factor > 0)
            cJSON_AddNumberToObject(rope, "attention_factor", rs->attention_factor);
    }
    if (r->diagnostics) {
        cJSON *bs = cJSON_AddArrayToObject(o, "buckets");
        for (int k = 0; k < r->nbuckets; k++) {
            cJSON *b = cJSON_CreateObject();
            cJSON_AddNumberToObject(b, "start", r->bucket[k].start);
            cJSON_AddNumberToObject(b, "end", r->bucket[k].end);
            cJSON_AddNumberToObject(b, "tokens", (double)r->bucket[k].tokens);
            cJSON_AddNumberToObject(b, "loss", bucket_loss(&r->bucket[k]));
            cJSON_AddItemToArray(bs, b);
        }
        cJSON *ls = cJSON_AddArrayToObject(o, "layers");
        for (int l = 0; l < r->layers; l++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "layer", l);
            cJSON_AddNumberToObject(e, "gate_score", layer_mean(r, r->gate, l));
            cJSON_AddNumberToObject(e, "first_token_share", layer_mean(r, r->first, l));
            cJSON_AddNumberToObject(e, "max_activation", r->maxact[l]);
            cJSON_AddItemToArray(ls, e);
        }
    }
    char *s = cJSON_Print(o);
    fprintf(f, "%s\n", s);
    free(s);
    cJSON_Delete(o);
}

int sl_eval_report_plot(const sl_eval_report *r, const char *png, char *err, size_t errlen) {
    if (!r->diagnostics) return sl_fail(err, errlen, "--plot needs --diagnostics");
    char *script = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&script, &len);
    sl_gnuplot_png(f, png, 1200, 900);
    fprintf(f, "$buckets << EOD\n");
    for (int k = 0; k < r->nbuckets; k++)
        fprintf(f, "%d %.9g \"[%d,%d)\"\n", k, bucket_loss(&r->bucket[k]), r->bucket[k].start,
                r->bucket[k].end);
    fprintf(f, "EOD\n$layers << EOD\n");
    for (int l = 0; l < r->layers; l++)
        fprintf(f, "%d %.9g %.9g %.9g\n", l, layer_mean(r, r->gate, l), layer_mean(r, r->first, l),
                r->maxact[l]);
    fprintf(f, "EOD\n");
    fprintf(f, "set multiplot layout 2,2 title ");
    char title[512];
    snprintf(title, sizeof title, "%s on %s: %lld tokens, loss %.4f", r->weights, r->data,
             (long long)r->tokens, mean_loss(r));
    sl_gnuplot_quote(f, title);
    fprintf(f, "\nset grid\nset key off\nset offsets 0.3, 0.3, 0, 0\n"
               "set title 'loss by query position'\nset xlabel 'positions'\n"
               "set ylabel 'loss (nats/token)'\nset xtics rotate by -30\n"
               "plot $buckets using 1:2:xtic(3) with linespoints pt 7\n"
               "set xtics norotate autofreq\nset xlabel 'layer'\nset xtics 1\n"
               "set title 'mean gate score'\nset ylabel 'mean sigmoid(gate)'\n"
               "plot $layers using 1:2 with linespoints pt 7\n"
               "set title 'attention on the first token'\nset ylabel 'share'\n"
               "plot $layers using 1:3 with linespoints pt 7\n"
               "set title 'largest |hidden state|'\nset ylabel 'max activation'\n"
               "plot $layers using 1:4 with linespoints pt 7\n"
               "unset multiplot\n");
    fclose(f);
    const int rc = sl_gnuplot_run(script, png, err, errlen);
    free(script);
    return rc;
}
