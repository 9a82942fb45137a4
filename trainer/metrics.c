/* trainer/metrics.c - progress line and JSON Lines metrics (see metrics.h). */
#include "trainer/metrics.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int sl_metrics_open(sl_metrics *m, const char *path, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    /* Redraw in place only on a real terminal: launchers (mpirun, srun) forward rank output
     * line by line, where carriage returns would garble the log. */
    m->tty = isatty(STDOUT_FILENO) && !getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMI_RANK") &&
             !getenv("SLURM_PROCID");
    if (!path || !*path) return 0;
    m->jsonl = fopen(path, "a");
    if (!m->jsonl) {
        snprintf(err, errlen, "%s: cannot open metrics file: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

const char *sl_format_duration(double s, char *buf, size_t len) {
    if (!(s >= 0) || s > 1e8) {
        snprintf(buf, len, "?");
    } else if (s < 60) {
        snprintf(buf, len, "%.0fs", s);
    } else if (s < 3600) {
        snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)fmod(s, 60));
    } else {
        snprintf(buf, len, "%dh%02dm", (int)(s / 3600), (int)fmod(s / 60, 60));
    }
    return buf;
}

static void json_num(FILE *f, double v) {
    if (isfinite(v))
        fprintf(f, "%.6g", v);
    else
        fputs("null", f);
}

/* "206 TFLOP/s | MFU 25.8%": model FLOPs per second and rank (GFLOP/s below one TFLOP/s, as
 * on a CPU), and MFU when the peak is known. */
static void format_rate(const sl_step_metrics *s, char *buf, size_t n) {
    const int k = s->model_tflops >= 1 ? snprintf(buf, n, "%.1f TFLOP/s", s->model_tflops)
                                       : snprintf(buf, n, "%.1f GFLOP/s", s->model_tflops * 1e3);
    if (!isnan(s->mfu) && k > 0 && (size_t)k < n)
        snprintf(buf + k, n - (size_t)k, " | MFU %.1f%%", 100 * s->mfu);
}

void sl_metrics_step(sl_metrics *m, const sl_step_metrics *s, bool print_line) {
    if (print_line) {
        char eta[32];
        char rate[64];
        format_rate(s, rate, sizeof rate);
        printf("%s%s%sstep %*d/%d | loss %.4f | aux %.3f | lr %.2e | gnorm %.3f | gate %.3f | "
               "%.0f tok/s | %s | ETA %s",
               m->tty ? "\r" : "", s->stage ? s->stage : "", s->stage ? " | " : "",
               (int)(s->max_steps >= 1000 ? 5 : 3), s->step, s->max_steps, s->loss,
               s->lbl_normalized, s->lr, s->grad_norm, s->gate_score, s->tokens_per_s, rate,
               sl_format_duration(s->eta_s, eta, sizeof eta));
        if (s->has_eval) printf(" | eval %.4f", s->eval_loss);
        /* On a terminal the line redraws in place; evaluations and the last step keep theirs. */
        if (!m->tty || s->has_eval || s->step == s->max_steps)
            printf("\n");
        else
            printf("\033[K");
        fflush(stdout);
    }
    if (!m->jsonl) return;
    FILE *f = m->jsonl;
    /* scalar fields in a fixed order; NaN/inf become null */
    const struct {
        const char *key;
        double value;
        bool present;
    } fields[] = {
        {"loss", s->loss, true},
        /* metrics-only values exist on logged steps (docs/metrics.md) */
        {"lbl", s->lbl, !isnan(s->lbl)},
        {"lbl_normalized", s->lbl_normalized, !isnan(s->lbl)},
        {"zloss", s->zloss, !isnan(s->zloss)},
        {"lr", s->lr, true},
        {"grad_norm", s->grad_norm, true},
        {"tokens_per_s", s->tokens_per_s, true},
        {"model_tflops", s->model_tflops, true},
        {"mfu", s->mfu, !isnan(s->mfu)},
        {"elapsed_s", s->elapsed_s, true},
        {"gate_score", s->gate_score, !isnan(s->gate_score)},
        {"mem_gib", s->mem_gib, true},
        {"mem_peak_gib", s->mem_peak_gib, true},
        {"eval_loss", s->eval_loss, s->has_eval},
    };
    fprintf(f, "{\"step\": %d", s->step);
    if (s->stage) fprintf(f, ", \"stage\": \"%s\"", s->stage); /* config-checked characters */
    if (s->tokens > 0) fprintf(f, ", \"tokens\": %lld", (long long)s->tokens);
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (!fields[i].present) continue;
        fprintf(f, ", \"%s\": ", fields[i].key);
        json_num(f, fields[i].value);
    }
    /* a hex string: JSON numbers are doubles */
    if (s->has_batch_hash)
        fprintf(f, ", \"batch_hash\": \"%016llx\"", (unsigned long long)s->batch_hash);
    fputs(", \"expert_load\": [", f);
    int first = 1;
    for (int l = 0; l < s->n_layers; l++) {
        if (isnan(s->load_max[l])) continue;
        fprintf(f, "%s{\"layer\": %d, \"max\": ", first ? "" : ", ", l);
        json_num(f, s->load_max[l]);
        fputs(", \"mean\": ", f);
        json_num(f, s->load_mean[l]);
        if (s->expert_counts) {
            fputs(", \"counts\": [", f);
            for (int e = 0; e < s->n_experts; e++)
                fprintf(f, "%s%lld", e ? ", " : "",
                        (long long)s->expert_counts[(int64_t)l * s->n_experts + e]);
            fputs("]", f);
        }
        fputs("}", f);
        first = 0;
    }
    fputs("]", f);
    if (s->rank_load) {
        fputs(", \"rank_load\": [", f);
        for (int r = 0; r < s->ep_size; r++) {
            if (r) fputs(", ", f);
            json_num(f, s->rank_load[r]);
        }
        fputs("]", f);
    }
    fputs("}\n", f);
    fflush(f);
}

void sl_metrics_event(sl_metrics *m, const char *name, const char *fields) {
    if (!m->jsonl) return;
    fprintf(m->jsonl, "{\"event\": \"%s\"%s%s}\n", name, fields && *fields ? ", " : "",
            fields ? fields : "");
    fflush(m->jsonl);
}

void sl_metrics_close(sl_metrics *m) {
    if (m->jsonl) fclose(m->jsonl);
    m->jsonl = NULL;
}
