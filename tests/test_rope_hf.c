/*
 * tests/test_rope_hf.c - sluice's YaRN (inverse frequencies, mscale) against Hugging Face
 * transformers' formula applied to the config.json sluice exports (tests/hf_yarn_reference.py,
 * NumPy float32 as transformers computes it in torch float32; run with /usr/bin/python3).
 *
 * For each case a small model is created with YaRN, saved with sl_hf_save, and the reference reads
 * that config.json under both factor rules transformers has used (max_position_embeddings /
 * original_max_position_embeddings in 4.45-4.5x, rope_scaling.factor later): both must give
 * sluice's m->inv_freq and m->mscale, and the config must carry rope_scaling with
 * original_max_position_embeddings. Skips (77) without /usr/bin/python3 and NumPy (fails under
 * CI, sl_test_skip).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/fsutil.h"
#include "model/hf_export.h"
#include "model/model.h"
#include "tests/test_util.h"

typedef struct {
    const char *name;
    double base, factor, beta_fast, beta_slow, attention_factor, partial;
    int original;
    int want_low, want_high; /* -1: not checked */
    double want_mscale;      /* 0: not checked */
} yarn_case;

/* Case 1 is the reference card's worked check (rot 128, base 1e6, L 32768, s 4: low 23, high 40,
 * mscale 1.138629); case 2 gives every optional field. */
static const yarn_case k_cases[] = {
    {"card", 1e6, 4.0, 32.0, 1.0, 0.0, 1.0, 32768, 23, 40, 1.138629},
    {"all-fields", 10000.0, 2.5, 16.0, 2.0, 1.25, 0.5, 4096, -1, -1, 1.25},
};

static bool python_numpy(void) {
    return access("/usr/bin/python3", X_OK) == 0 &&
           system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
}

/* Reads "RULE mscale M low L high H" and "RULE inv_freq ..." for `rule` from the reference. */
static int reference(const char *config, const char *rule, double *mscale, int *low, int *high,
                     double *inv, int half) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/hf_yarn_reference.py %s",
             SLUICE_SOURCE_DIR, config);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    static char line[1 << 16];
    int got = 0;
    while (fgets(line, sizeof line, p)) {
        char r[16], what[16];
        int off = 0;
        if (sscanf(line, "%15s %15s %n", r, what, &off) < 2 || strcmp(r, rule) != 0) continue;
        if (strcmp(what, "mscale") == 0) {
            got += sscanf(line + off, "%lf low %d high %d", mscale, low, high) == 3;
        } else if (strcmp(what, "inv_freq") == 0) {
            const char *s = line + off;
            int n = 0;
            for (char *end; n < half + 1; s = end, n++) {
                const double v = strtod(s, &end);
                if (end == s) break;
                if (n < half) inv[n] = v;
            }
            got += n == half;
        }
    }
    return pclose(p) == 0 && got == 2 ? 0 : -1;
}

static void run_case(const yarn_case *yc, const char *dir) {
    sl_model_config c = sl_test_model_config();
    c.head_dim = 128;
    c.rope_theta = yc->base;
    c.partial_rotary_factor = yc->partial;
    c.rope_scaling.type = SL_ROPE_YARN;
    c.rope_scaling.factor = yc->factor;
    c.rope_scaling.original_max_position_embeddings = yc->original;
    c.rope_scaling.beta_fast = yc->beta_fast;
    c.rope_scaling.beta_slow = yc->beta_slow;
    c.rope_scaling.attention_factor = yc->attention_factor;
    char err[512];
    sl_model *m = sl_model_create(&c, sl_test_cpu(), NULL, 1, 4, NULL, err, sizeof err);
    CHECK(m != NULL, "%s: create: %s", yc->name, err);
    if (!m) return;
    CHECK(sl_hf_save(m, dir, NULL, err, sizeof err) == 0, "%s: save: %s", yc->name, err);
    const int half = (int)sl_tensor_numel(m->inv_freq);
    float *got = sl_test_host_f32(m->inv_freq);
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);

    /* config.json: rope_scaling with original_max_position_embeddings, and the post-YaRN context */
    size_t len = 0;
    char *text = sl_read_file(path, &len, err, sizeof err);
    cJSON *js = text ? cJSON_Parse(text) : NULL;
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(js, "rope_scaling");
    const cJSON *orig = cJSON_GetObjectItemCaseSensitive(rs, "original_max_position_embeddings");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
    const cJSON *maxpos = cJSON_GetObjectItemCaseSensitive(js, "max_position_embeddings");
    CHECK(cJSON_IsString(type) && strcmp(type->valuestring, "yarn") == 0,
          "%s: config.json rope_scaling.rope_type is not \"yarn\"", yc->name);
    CHECK(cJSON_IsNumber(orig) && orig->valuedouble == yc->original,
          "%s: config.json rope_scaling.original_max_position_embeddings missing or wrong",
          yc->name);
    CHECK(cJSON_IsNumber(maxpos) && maxpos->valuedouble == yc->factor * yc->original,
          "%s: config.json max_position_embeddings %g, expected factor x original = %g", yc->name,
          cJSON_IsNumber(maxpos) ? maxpos->valuedouble : -1.0, yc->factor * yc->original);
    cJSON_Delete(js);
    free(text);

    static const char *const rules[] = {"implicit", "explicit"};
    for (int r = 0; r < 2; r++) {
        double ms = 0, inv[64];
        int lo = -2, hi = -2;
        if (reference(path, rules[r], &ms, &lo, &hi, inv, half) != 0) {
            CHECK(false, "%s: the reference script failed or printed no %s block", yc->name,
                  rules[r]);
            continue;
        }
        CHECK(fabs(m->mscale - ms) <= 1e-6 * ms, "%s/%s: mscale %.9g, transformers %.9g", yc->name,
              rules[r], m->mscale, ms);
        if (yc->want_low >= 0)
            CHECK(lo == yc->want_low && hi == yc->want_high, "%s: low/high %d/%d, card says %d/%d",
                  yc->name, lo, hi, yc->want_low, yc->want_high);
        if (yc->want_mscale > 0)
            CHECK(fabs(ms - yc->want_mscale) <= 1e-6, "%s: mscale %.9g, card says %.9g", yc->name,
                  ms, yc->want_mscale);
        int bad = 0;
        for (int i = 0; i < half; i++)
            if (!(fabs(got[i] - inv[i]) <= 2e-6 * inv[i])) {
                if (bad++ < 3)
                    fprintf(stderr, "  %s/%s inv_freq[%d]: sluice %.9g, transformers %.9g\n",
                            yc->name, rules[r], i, got[i], inv[i]);
            }
        CHECK(bad == 0, "%s/%s: %d of %d inv_freq differ from transformers' by > 2e-6 relative",
              yc->name, rules[r], bad, half);
    }
    free(got);
    sl_model_free(m);
}

int main(void) {
    if (!python_numpy())
        return sl_test_skip(
            "/usr/bin/python3 with NumPy is needed (apt-get install python3-numpy)");
    char dir[] = "/tmp/sluice_rope_hf_XXXXXX";
    if (!mkdtemp(dir)) {
        fprintf(stderr, "mkdtemp failed\n");
        return 1;
    }
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        char sub[256];
        snprintf(sub, sizeof sub, "%s/%s", dir, k_cases[i].name);
        run_case(&k_cases[i], sub);
    }
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return sl_test_finish("test_rope_hf");
}
