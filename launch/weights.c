/* launch/weights.c - --weights and the RoPE flags of eval and generate (see weights.h). */
#include "launch/weights.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "core/fsutil.h"
#include "core/log.h"
#include "io/safetensors.h"
#include "io/tokenizer.h"
#include "model/hf_export.h"
#include "trainer/checkpoint.h"

bool sl_weights_is_checkpoint(const char *path) {
    /* train_state.json without COMMIT: an uncommitted checkpoint, which sl_ckpt_open refuses
     * saying so (not a weights directory missing its config.json) */
    const char *marks[] = {"COMMIT", "latest", "checkpoints", "train_state.json"};
    char p[4096];
    struct stat st;
    for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", path, marks[i]);
        if (stat(p, &st) == 0) return true;
    }
    return false;
}

static bool ends_with(const char *s, const char *tail) {
    const size_t n = strlen(s), k = strlen(tail);
    return n >= k && strcmp(s + n - k, tail) == 0;
}

/* w->dir for weights at path: a directory itself; a .safetensors file (w->path stays the file,
 * which sl_hf_load reads alone) or an index its directory. 0, or -1 with a message. */
static int weights_dir(sl_weights *w, const char *path, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) != 0 || S_ISDIR(st.st_mode)) { /* a missing one: config.json says so */
        snprintf(w->dir, sizeof w->dir, "%s", path);
        return 0;
    }
    const bool index = ends_with(path, "/" SL_ST_HF_INDEX) || strcmp(path, SL_ST_HF_INDEX) == 0;
    if (!index && !ends_with(path, ".safetensors"))
        return sl_fail(err, errlen,
                       "%s: not a directory or a .safetensors file: --weights needs a directory "
                       "holding config.json and the weights, one .safetensors file with "
                       "config.json beside it, or a training checkpoint",
                       path);
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(w->dir, sizeof w->dir, ".");
    else if (slash == path)
        snprintf(w->dir, sizeof w->dir, "/");
    else
        snprintf(w->dir, sizeof w->dir, "%.*s", (int)(slash - path), path);
    if (index) w->path = w->dir; /* the loader reads the index of a directory */
    return 0;
}

int sl_weights_open(sl_weights *w, const char *path, char *err, size_t errlen) {
    memset(w, 0, sizeof *w);
    w->path = path;
    char name[4200];
    char *json = NULL;
    /* A training checkpoint holds the model's config.json in its train state; a weights
     * directory next to the weights. */
    if (sl_weights_is_checkpoint(path)) {
        w->ck = sl_ckpt_open(path, err, errlen);
        if (!w->ck) return -1;
        const cJSON *hf = cJSON_GetObjectItemCaseSensitive(sl_ckpt_train_state(w->ck), "hf_config");
        json = hf ? cJSON_PrintUnformatted(hf) : NULL;
        snprintf(name, sizeof name, "%s/train_state.json: hf_config", sl_ckpt_dir(w->ck));
        if (!json) sl_fail(err, errlen, "%.1024s is missing", name);
    } else if (weights_dir(w, path, err, errlen) == 0) {
        snprintf(name, sizeof name, "%s/config.json", w->dir);
        size_t len = 0;
        json = sl_read_file(name, &len, err, errlen);
    }
    const int rc = json ? sl_model_config_from_hf_json(json, name, &w->cfg, err, errlen) : -1;
    free(json);
    if (rc != 0) sl_weights_close(w);
    return rc;
}

int sl_weights_load(const sl_weights *w, sl_model *m, char *err, size_t errlen) {
    return w->ck ? sl_train_ckpt_load_weights(m, w->ck, err, errlen)
                 : sl_hf_load(m, w->path, err, errlen);
}

void sl_weights_close(sl_weights *w) {
    if (w->ck) sl_ckpt_close(w->ck);
    w->ck = NULL;
}

int sl_weights_tokenizer(const sl_weights *w, const char *given, const char **out, char *buf,
                         size_t n, char *err, size_t errlen) {
    *out = given;
    if (given) return 0;
    struct stat st;
    if (!w->ck) {
        snprintf(buf, n, "%s/tokenizer.json", w->dir);
        if (stat(buf, &st) == 0) *out = buf;
        return 0;
    }
    /* a checkpoint: the run's data.tokenizer, as `sluice ckpt export` copies it */
    const cJSON *tk = cJSON_GetObjectItemCaseSensitive(sl_ckpt_train_state(w->ck), "tokenizer");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(tk, "path");
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(tk, "sha256");
    if (!cJSON_IsString(p)) return 0; /* the run had none */
    char e[1024];
    sl_tokenizer *t = sl_tokenizer_load(p->valuestring, e, sizeof e);
    int rc = 0;
    if (!t) {
        rc = sl_fail(err, errlen,
                     "the tokenizer the run trained with (data.tokenizer = \"%s\", recorded in "
                     "%s/train_state.json) cannot be read: %s; give it with --tokenizer PATH",
                     p->valuestring, sl_ckpt_dir(w->ck), e);
    } else if (cJSON_IsString(h)) {
        char hex[2 * SL_TOKENIZER_HASH_BYTES + 1];
        for (int i = 0; i < SL_TOKENIZER_HASH_BYTES; i++)
            snprintf(hex + 2 * i, 3, "%02x", sl_tokenizer_hash(t)[i]);
        if (strcmp(hex, h->valuestring) != 0)
            rc = sl_fail(err, errlen,
                         "%s: the tokenizer the run trained with (data.tokenizer, recorded in "
                         "%s/train_state.json) has changed since (its SHA-256 differs from the "
                         "recorded one); give the run's tokenizer with --tokenizer PATH",
                         sl_tokenizer_path(t), sl_ckpt_dir(w->ck));
    }
    if (rc == 0) {
        snprintf(buf, n, "%s", sl_tokenizer_path(t));
        *out = buf;
    }
    sl_tokenizer_free(t);
    return rc;
}

/* ---- the RoPE flags ---- */

void sl_rope_flags_init(sl_rope_flags *f) {
    *f = (sl_rope_flags){.theta = NAN,
                         .factor = NAN,
                         .beta_fast = NAN,
                         .beta_slow = NAN,
                         .attention_factor = NAN,
                         .original = -1};
}

void sl_rope_flags_usage(FILE *f) {
    fprintf(f, "  --rope-theta B         RoPE base instead of the saved rope_theta\n"
               "  --rope-scaling MODE    yarn or none (none drops a saved YaRN)\n"
               "  --factor F             YaRN factor s > 1 (required for yarn unless saved)\n"
               "  --original-max N       YaRN original_max_position_embeddings, the trained\n"
               "                         context (default: the saved one, else the saved\n"
               "                         max_position_embeddings, as Hugging Face does)\n"
               "  --beta-fast X          YaRN beta_fast (default 32)\n"
               "  --beta-slow X          YaRN beta_slow (default 1; below beta_fast)\n"
               "  --attention-factor X   YaRN mscale override (default 0.1 ln(F) + 1)\n");
}

/* A finite number, the whole of s. */
static int parse_double(const char *s, double *out) {
    char *end = NULL;
    const double v = strtod(s, &end);
    if (end == s || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

int sl_rope_flags_parse(sl_rope_flags *f, const char *cmd, int argc, char **argv, int *i) {
    static const struct {
        const char *flag;
        size_t off;
    } k_dbl[] = {{"--rope-theta", offsetof(sl_rope_flags, theta)},
                 {"--factor", offsetof(sl_rope_flags, factor)},
                 {"--beta-fast", offsetof(sl_rope_flags, beta_fast)},
                 {"--beta-slow", offsetof(sl_rope_flags, beta_slow)},
                 {"--attention-factor", offsetof(sl_rope_flags, attention_factor)}};
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    for (size_t k = 0; k < sizeof k_dbl / sizeof k_dbl[0]; k++) {
        if (strcmp(a, k_dbl[k].flag) != 0) continue;
        if (!v || parse_double(v, (double *)((char *)f + k_dbl[k].off)) != 0) {
            fprintf(stderr, "sluice %s: error: %s: expected a number, got '%s'\n", cmd, a,
                    v ? v : "nothing");
            return 2;
        }
        ++*i;
        return 1;
    }
    if (strcmp(a, "--rope-scaling") == 0) {
        if (!v || (strcmp(v, "yarn") != 0 && strcmp(v, "none") != 0)) {
            fprintf(stderr, "sluice %s: error: --rope-scaling: expected yarn or none, got '%s'\n",
                    cmd, v ? v : "nothing");
            return 2;
        }
        f->scaling = v;
        ++*i;
        return 1;
    }
    if (strcmp(a, "--original-max") == 0) {
        char *end = NULL;
        const long long n = v && v[0] != '-' ? strtoll(v, &end, 10) : 0;
        if (!v || !end || *end || end == v || n < 1) {
            fprintf(stderr, "sluice %s: error: --original-max: must be a positive integer\n", cmd);
            return 2;
        }
        f->original = n;
        ++*i;
        return 1;
    }
    return 0;
}

static int flag_err(const char *cmd, const char *flag, const char *fmt, double v) {
    fprintf(stderr, "sluice %s: error: %s: ", cmd, flag);
    fprintf(stderr, fmt, v);
    fprintf(stderr, "\n");
    return 2;
}

int sl_rope_flags_apply(const sl_rope_flags *f, const char *cmd, sl_model_config *c) {
    if (!isnan(f->theta)) {
        if (!(f->theta > 1.0))
            return flag_err(cmd, "--rope-theta", "must be > 1, got %g", f->theta);
        c->rope_theta = f->theta;
    }
    sl_rope_scaling *r = &c->rope_scaling;
    const bool saved_yarn = r->type == SL_ROPE_YARN;
    const bool yarn_flags = !isnan(f->factor) || f->original >= 0 || !isnan(f->beta_fast) ||
                            !isnan(f->beta_slow) || !isnan(f->attention_factor);
    if (f->scaling && strcmp(f->scaling, "none") == 0) {
        if (yarn_flags) {
            fprintf(stderr,
                    "sluice %s: error: --rope-scaling none takes no YaRN flags "
                    "(--factor, --original-max, --beta-fast, --beta-slow, "
                    "--attention-factor)\n",
                    cmd);
            return 2;
        }
        r->type = SL_ROPE_DEFAULT;
        return 0;
    }
    if (!f->scaling && !saved_yarn) {
        if (yarn_flags) {
            fprintf(stderr,
                    "sluice %s: error: --factor, --original-max, --beta-fast, "
                    "--beta-slow and --attention-factor need --rope-scaling yarn (the "
                    "saved model has no YaRN)\n",
                    cmd);
            return 2;
        }
        return 0;
    }
    if (!saved_yarn) { /* yarn on a model saved without it: start from HF's defaults */
        if (isnan(f->factor)) {
            fprintf(stderr,
                    "sluice %s: error: --rope-scaling yarn needs --factor (the saved "
                    "model has no YaRN)\n",
                    cmd);
            return 2;
        }
        r->type = SL_ROPE_YARN;
        r->original_max_position_embeddings = c->max_position_embeddings;
        r->beta_fast = 32.0, r->beta_slow = 1.0, r->attention_factor = 0.0;
    }
    if (!isnan(f->factor)) {
        if (!(f->factor > 1.0)) return flag_err(cmd, "--factor", "must be > 1, got %g", f->factor);
        r->factor = f->factor;
    }
    if (f->original >= 0) {
        if (f->original < 1 || f->original > (1 << 24))
            return flag_err(cmd, "--original-max", "must be in [1, 16777216], got %g",
                            (double)f->original);
        r->original_max_position_embeddings = (int)f->original;
    }
    if (!isnan(f->beta_fast)) r->beta_fast = f->beta_fast;
    if (!isnan(f->beta_slow)) r->beta_slow = f->beta_slow;
    if (!(r->beta_slow > 0.0))
        return flag_err(cmd, "--beta-slow", "must be > 0, got %g", r->beta_slow);
    if (!(r->beta_fast > r->beta_slow))
        return flag_err(cmd, "--beta-fast", "must exceed beta_slow, got %g", r->beta_fast);
    if (!isnan(f->attention_factor)) {
        if (!(f->attention_factor > 0.0))
            return flag_err(cmd, "--attention-factor", "must be > 0, got %g", f->attention_factor);
        r->attention_factor = f->attention_factor;
    }
    return 0;
}
