/*
 * tests/test_plan_measured.c - `sluice plan`'s single-GPU step time against steps measured on
 * a GPU. RESULTS (bench/results/<gpu>-<date>.json, format in docs/plan.md "Measured steps")
 * holds each measured shape: the plan request that reproduces it, the measured ms per step and
 * the gpu_train_bench --profile rows. For each shape the plan (trainer/plan.c with the rates
 * of trainer/plan_rates.c) must land within the file's tolerance (15%) of the measured step.
 * Each component is printed next to the profile rows it stands for and must be within 40% of
 * them where they are at least 2% of the step: a guard against a component dropped or counted
 * twice, looser than the target because single components carry known errors (docs/plan.md,
 * "Accuracy").
 *
 * usage: test_plan_measured SOURCE_DIR RESULTS.json...
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/fsutil.h"
#include "test_util.h"
#include "trainer/plan.h"

#define PART_TOLERANCE 0.40
#define PART_MIN_SHARE 0.02

/* The measured ms of the ';'-separated regions; "every other row": the rows no part names. */
static double measured_ms(const cJSON *rows, const sl_plan *p, const char *regions) {
    double ms = 0;
    const cJSON *row;
    cJSON_ArrayForEach(row, rows) {
        bool claimed = false, mine = false;
        for (int i = 0; i < p->n_parts; i++) {
            const char *list = p->parts[i].regions, *at = strstr(list, row->string);
            const size_t n = strlen(row->string);
            const bool named = at && (at == list || at[-1] == ' ') && (at[n] == ';' || !at[n]);
            claimed |= named;
            mine |= named && p->parts[i].regions == regions;
        }
        if (mine || (!claimed && !strcmp(regions, "every other row"))) ms += row->valuedouble;
    }
    return ms;
}

static void check_shape(const char *src, const char *file, const cJSON *shape, double tol) {
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(shape, "name"));
    const cJSON *req = cJSON_GetObjectItem(shape, "plan");
    const cJSON *rows = cJSON_GetObjectItem(shape, "profile_rows_ms");
    const double ms = cJSON_GetNumberValue(cJSON_GetObjectItem(shape, "ms_per_step"));
    const char *cfg_path = cJSON_GetStringValue(cJSON_GetObjectItem(req, "config"));
    if (!name || !req || !rows || !cfg_path || !(ms > 0)) {
        CHECK(false, "%s: a shape lacks name, plan, config, profile_rows_ms or ms_per_step", file);
        return;
    }
    char path[4096], err[1024];
    snprintf(path, sizeof path, "%s/%s", src, cfg_path);
    sl_config cfg;
    if (sl_config_load(path, &cfg, err, sizeof err)) {
        CHECK(false, "%s: %s", file, err);
        return;
    }
    sl_plan_request r;
    sl_plan_request_defaults(&r);
#define INT(k) (int)cJSON_GetNumberValue(cJSON_GetObjectItem(req, k))
#define STR(k) cJSON_GetStringValue(cJSON_GetObjectItem(req, k))
    r.gpus = INT("gpus");
    r.ep = INT("ep");
    r.layers = INT("layers");
    r.seq_len = INT("seq_len");
    r.micro_batch = INT("micro_batch");
    r.global_batch = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(req, "global_batch"));
    r.gpu = STR("gpu");
    r.recompute = STR("recompute");
    r.expert_gemm = STR("expert_gemm");
    r.defer_wgrad = STR("defer_wgrad"); /* NULL (absent): the config's */
    if (cJSON_GetObjectItem(req, "wgrad_group")) r.wgrad_group = INT("wgrad_group");
    r.park = STR("park"); /* NULL (absent): the config's */
#undef INT
#undef STR
    sl_plan p;
    if (sl_plan_compute(&cfg, &r, &p, err, sizeof err)) {
        CHECK(false, "%s, %s: plan failed: %s", file, name, err);
        return;
    }
    const double est = p.t_step * 1e3;
    printf("%s, %s (%s, %d layers, %d x %d x %d tokens, %.0f rows per expert):\n", file, name,
           p.gpu->label, p.layers, p.accum, p.micro_batch, p.seq_len, p.rows_per_expert);
    printf("  %-58s %9s %9s %7s\n", "component", "plan ms", "measured", "error");
    for (int i = 0; i < p.n_parts; i++) {
        const sl_plan_part *c = &p.parts[i];
        const double m = measured_ms(rows, &p, c->regions), e = c->seconds * 1e3;
        printf("  %-58s %9.2f %9.2f %+6.1f%%\n", c->name, e, m, m > 0 ? 100 * (e - m) / m : 0.0);
        if (m >= PART_MIN_SHARE * ms)
            CHECK(fabs(e - m) <= PART_TOLERANCE * m, "%s, %s: %s %.2f ms, measured %.2f", file,
                  name, c->name, e, m);
    }
    printf("  %-58s %9.2f %9.2f %+6.1f%%  (measured: the unprofiled step)\n", "step", est, ms,
           100 * (est - ms) / ms);
    CHECK(fabs(est - ms) <= tol * ms,
          "%s, %s: plan %.1f ms, measured %.1f ms: off by %.1f%% > %.0f%%", file, name, est, ms,
          100 * (est - ms) / ms, 100 * tol);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_plan_measured SOURCE_DIR RESULTS.json...\n");
        return 2;
    }
    for (int a = 2; a < argc; a++) {
        char err[1024];
        size_t len;
        char *text = sl_read_file(argv[a], &len, err, sizeof err);
        if (!text) {
            CHECK(false, "%s", err);
            continue;
        }
        cJSON *doc = cJSON_ParseWithLength(text, len);
        free(text);
        const cJSON *shapes = cJSON_GetObjectItem(doc, "shapes");
        const double tol = cJSON_GetNumberValue(cJSON_GetObjectItem(doc, "tolerance"));
        CHECK(doc && cJSON_GetArraySize(shapes) > 0 && tol > 0 && tol < 1,
              "%s: not a results file with shapes and a tolerance in (0, 1)", argv[a]);
        const cJSON *shape;
        cJSON_ArrayForEach(shape, shapes) check_shape(argv[1], argv[a], shape, tol);
        cJSON_Delete(doc);
    }
    return sl_test_finish("test_plan_measured");
}
