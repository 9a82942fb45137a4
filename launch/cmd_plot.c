/*
 * launch/cmd_plot.c - `sluice plot RUN_DIR -o FILE.png`: training and evaluation loss against
 * training tokens from RUN_DIR/metrics.jsonl (docs/metrics.md), stage boundaries as dashed
 * vertical lines, the learning rate on the second y axis; drawn by gnuplot (launch/gnuplot.h).
 *
 * x axis: a step record's "tokens" (cumulative training tokens after the step). Records of runs
 * from before stages lack it: then step x training.global_batch_tokens from the run's newest
 * checkpoint (its train_state.json config), else the step number, and the axis label says which.
 *
 * Runs: the records after the file's last "start" event (a fresh run; the file is appended to),
 * and after a "resume" event at step N the records of steps after N written before it are
 * dropped (the resumed run writes them again).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/fsutil.h"
#include "core/log.h"
#include "io/checkpoint.h"
#include "launch/commands.h"
#include "launch/gnuplot.h"

static void usage(FILE *f) {
    fprintf(f, "usage: sluice plot RUN_DIR -o FILE.png [--title TEXT]\n"
               "\n"
               "Plots RUN_DIR/metrics.jsonl (written by sluice train): the training loss and the\n"
               "held-out loss (eval_loss) against training tokens, the learning rate on the\n"
               "right axis, and a dashed line where each training stage starts. Needs gnuplot\n"
               "(Debian: gnuplot-nox). Without per-step \"tokens\" in the metrics (older runs),\n"
               "x is step x training.global_batch_tokens from the run's newest checkpoint, or\n"
               "the step number.\n"
               "\n"
               "A metrics file may hold several runs (a run started over in its out_dir appends\n"
               "after a {\"event\": \"start\"} line): the newest is drawn, and steps a resume ran\n"
               "again are drawn once, from the resumed run. A line on stdout says what was drawn.\n"
               "\n"
               "options:\n"
               "  -o, --output FILE  the PNG to write (required)\n"
               "  --title TEXT       plot title (default: RUN_DIR)\n"
               "  -h, --help         show this help\n");
}

typedef struct {
    double step, x, loss, lr, eval;
    bool has_loss, has_lr, has_eval;
    bool event; /* a held-out loss of an "eval" event (a stage's start, an evaluation-only
                   stage, the run's step 0), not a step record */
} point;

typedef struct {
    double step, x;
    char name[64];
} boundary;

static double num(const cJSON *o, const char *key, bool *has) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    *has = cJSON_IsNumber(v);
    return *has ? v->valuedouble : NAN;
}

/* training.global_batch_tokens from the newest checkpoint of run_dir, or 0. */
static double batch_tokens(const char *run_dir) {
    char err[512];
    sl_ckpt *ck = sl_ckpt_open(run_dir, err, sizeof err);
    if (!ck) return 0.0;
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(sl_ckpt_train_state(ck), "config");
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(cfg, "training");
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(tr, "global_batch_tokens");
    const double v = cJSON_IsNumber(g) ? g->valuedouble : 0.0;
    sl_ckpt_close(ck);
    return v;
}

int sl_cmd_plot(int argc, char **argv) {
    const char *run = NULL, *out = NULL, *title = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (sl_cli_is_help(a)) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0 || strcmp(a, "--title") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "sluice plot: error: %s needs a value\n", a);
                return 2;
            }
            *(strcmp(a, "--title") == 0 ? &title : &out) = argv[++i];
        } else if (a[0] == '-') {
            return sl_cli_usage_error("plot", "unknown option '%s'", a);
        } else if (!run) {
            run = a;
        } else {
            fprintf(stderr, "sluice plot: error: one RUN_DIR expected, got '%s' too\n", a);
            return 2;
        }
    }
    if (!run || !out)
        return sl_cli_usage_error("plot", "%s required",
                                  !run && !out ? "RUN_DIR and -o FILE.png are"
                                  : !run       ? "RUN_DIR is"
                                               : "-o FILE.png is");
    char path[4096], err[1024];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run);
    size_t len = 0;
    char *text = sl_read_file(path, &len, err, sizeof err);
    if (!text) {
        sl_error("%s", err);
        return 1;
    }
    point *pts = NULL;
    boundary *bounds = NULL;
    int npts = 0, nb = 0, cap = 0, bcap = 0, lineno = 0, rc = 1;
    /* records left out: of runs before the last "start", and those a resume superseded */
    int start_line = 0, earlier = 0, superseded = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        if (!*line) continue;
        cJSON *o = cJSON_Parse(line);
        if (!cJSON_IsObject(o)) {
            sl_error("%s:%d: not a JSON object", path, lineno);
            cJSON_Delete(o);
            goto done;
        }
        bool has, has_step;
        const cJSON *ev = cJSON_GetObjectItemCaseSensitive(o, "event");
        if (cJSON_IsString(ev)) {
            const double tok = num(o, "tokens", &has), step = num(o, "step", &has_step);
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "stage");
            if (strcmp(ev->valuestring, "start") == 0) {
                /* a fresh run: what came before belongs to earlier runs */
                earlier += superseded;
                for (int i = 0; i < npts; i++) earlier += !pts[i].event;
                npts = nb = superseded = 0;
                start_line = lineno;
            } else if (strcmp(ev->valuestring, "resume") == 0 && has_step) {
                /* the steps after the checkpoint run again (and the stage that starts at it
                 * is announced again): the records written after it are superseded */
                int k = 0;
                for (int i = 0; i < npts; i++)
                    if (pts[i].step <= step)
                        pts[k++] = pts[i];
                    else if (!pts[i].event)
                        superseded++; /* counted as step records */
                npts = k;
                k = 0;
                for (int i = 0; i < nb; i++)
                    if (bounds[i].step < step) bounds[k++] = bounds[i];
                nb = k;
            } else if (strcmp(ev->valuestring, "eval") == 0 && (has || has_step)) {
                /* the held-out loss before a stage's first step: drawn with the others */
                bool has_loss = false;
                const double loss = num(o, "eval_loss", &has_loss);
                if (has_loss) {
                    if (npts == cap) pts = realloc(pts, sizeof *pts * (cap = 2 * cap + 64));
                    point *p = &pts[npts++];
                    memset(p, 0, sizeof *p);
                    p->step = has_step ? step : 0;
                    p->x = has ? tok : -1.0 - p->step;
                    p->eval = loss;
                    p->has_eval = p->event = true;
                }
            } else if (strcmp(ev->valuestring, "stage") == 0 && (has || has_step)) {
                /* x is decided below, once it is known whether every record has tokens */
                const double x = has ? tok : -1.0 - step;
                const char *nm = cJSON_IsString(name) ? name->valuestring : "";
                bool seen = false; /* a run resumed mid-stage announces its stage again */
                for (int i = 0; i < nb && !seen; i++)
                    seen = bounds[i].x == x && strncmp(bounds[i].name, nm, 63) == 0;
                if (!seen) {
                    if (nb == bcap)
                        bounds = realloc(bounds, sizeof *bounds * (bcap = 2 * bcap + 8));
                    bounds[nb].x = x;
                    bounds[nb].step = has_step ? step : 0;
                    snprintf(bounds[nb].name, sizeof bounds[nb].name, "%s", nm);
                    nb++;
                }
            }
            cJSON_Delete(o);
            continue;
        }
        const double step = num(o, "step", &has_step);
        if (!has_step) { /* another kind of line: not ours to judge */
            cJSON_Delete(o);
            continue;
        }
        if (npts == cap) pts = realloc(pts, sizeof *pts * (cap = 2 * cap + 64));
        point *p = &pts[npts++];
        memset(p, 0, sizeof *p);
        p->step = step;
        p->x = num(o, "tokens", &has);
        if (!has) p->x = -1.0 - step; /* resolved below */
        p->loss = num(o, "loss", &p->has_loss);
        p->lr = num(o, "lr", &p->has_lr);
        p->eval = num(o, "eval_loss", &p->has_eval);
        cJSON_Delete(o);
    }
    /* the step records among the points, the first and the last */
    int records = 0, first = -1, last = -1, evals = 0, first_eval = -1, last_eval = -1;
    for (int i = 0; i < npts; i++) {
        if (!pts[i].event) {
            records++;
            last = i;
            if (first < 0) first = i;
        }
        if (pts[i].has_eval) {
            evals++;
            last_eval = i;
            if (first_eval < 0) first_eval = i;
        }
    }
    if (records == 0) {
        sl_error("%s: no step records to plot%s", path,
                 start_line ? " after its last \"start\" line (the newest run's)" : "");
        goto done;
    }
    bool all_tokens = true, any_eval = evals > 0, any_lr = false;
    for (int i = 0; i < npts; i++) {
        all_tokens &= pts[i].x >= 0;
        any_lr |= pts[i].has_lr;
    }
    /* what is drawn, so that a file holding several runs does not mislead */
    printf("%s: %d step record%s drawn (steps %.0f to %.0f)", path, records,
           records == 1 ? "" : "s", pts[first].step, pts[last].step);
    if (start_line)
        printf(", the newest run's (from its \"start\" at line %d; %d step record%s of earlier "
               "runs left out)",
               start_line, earlier, earlier == 1 ? "" : "s");
    if (superseded)
        printf(", %d step record%s a resume superseded left out", superseded,
               superseded == 1 ? "" : "s");
    printf("\n");
    if (evals)
        printf("%s: %d held-out loss%s drawn (steps %.0f to %.0f)\n", path, evals,
               evals == 1 ? "" : "es", pts[first_eval].step, pts[last_eval].step);
    /* x of records without tokens: step x global batch tokens, else the step */
    const double gbt = all_tokens ? 0.0 : batch_tokens(run);
    const char *xlabel = all_tokens ? "training tokens"
                         : gbt > 0  ? "training tokens (step x training.global_batch_tokens)"
                                    : "step";
    for (int i = 0; i < npts; i++)
        if (pts[i].x < 0) pts[i].x = gbt > 0 ? (-1.0 - pts[i].x) * gbt : -1.0 - pts[i].x;
    for (int i = 0; i < nb; i++)
        if (bounds[i].x < 0)
            bounds[i].x = gbt > 0 ? (-1.0 - bounds[i].x) * gbt : -1.0 - bounds[i].x;

    char *script = NULL;
    size_t slen = 0;
    FILE *f = open_memstream(&script, &slen);
    sl_gnuplot_png(f, out, 1200, 700);
    fprintf(f, "$train << EOD\n");
    for (int i = 0; i < npts; i++)
        if (pts[i].has_loss)
            fprintf(f, "%.17g %.9g %.9g\n", pts[i].x, pts[i].loss, pts[i].has_lr ? pts[i].lr : NAN);
    fprintf(f, "EOD\n$eval << EOD\n");
    for (int i = 0; i < npts; i++)
        if (pts[i].has_eval) fprintf(f, "%.17g %.9g\n", pts[i].x, pts[i].eval);
    fprintf(f, "EOD\nset title ");
    sl_gnuplot_quote(f, title ? title : run);
    fprintf(f, "\nset xlabel ");
    sl_gnuplot_quote(f, xlabel);
    fprintf(f, "\nset ylabel 'loss (nats/token)'\nset grid\nset key top right\nset xrange [0:*]\n");
    for (int i = 0; i < nb; i++) {
        fprintf(f, "set arrow from %.17g, graph 0 to %.17g, graph 1 nohead dt 2 lc rgb 'gray40'\n",
                bounds[i].x, bounds[i].x);
        fprintf(f, "set label ");
        sl_gnuplot_quote(f, bounds[i].name);
        fprintf(f, " at %.17g, graph 0.97 left offset 0.5,0 textcolor rgb 'gray30'\n", bounds[i].x);
    }
    if (any_lr)
        fprintf(f, "set y2label 'learning rate'\nset y2tics\nset ytics nomirror\n"
                   "set format y2 '%%.1e'\n");
    fprintf(f, "plot $train using 1:2 with lines lw 1.5 title 'train loss'");
    if (any_eval) fprintf(f, ", $eval using 1:2 with linespoints pt 7 lw 1.5 title 'eval loss'");
    if (any_lr) fprintf(f, ", $train using 1:3 axes x1y2 with lines dt 3 title 'learning rate'");
    fprintf(f, "\n");
    fclose(f);
    rc = sl_gnuplot_run(script, out, err, sizeof err) == 0 ? 0 : 1;
    if (rc) sl_error("%s", err);
    free(script);
done:
    free(pts);
    free(bounds);
    free(text);
    return rc;
}
