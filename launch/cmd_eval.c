/*
 * trainer/cmd_eval.c - `sluice eval --weights DIR --data PATH`: loss and perplexity of saved
 * weights on a token shard (or directory of shards) or on a plain text file (byte-level
 * tokenizer: bytes 0-255, then the end-of-document token 256).
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backends/backends.h"
#include "core/comm.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "io/reader.h"
#include "io/shard.h"
#include "launch/commands.h"
#include "launch/eval_report.h"
#include "model/diagnostics.h"
#include "model/hf_export.h"
#include "model/model.h"
#include "trainer/checkpoint.h"
#include "trainer/config.h"

#define SL_EOD_TOKEN 256

static void usage(FILE *f) {
    fprintf(f, "usage: sluice eval --weights DIR --data PATH [options]\n"
               "\n"
               "Reports the mean cross-entropy (nats per token) and perplexity of the weights in\n"
               "DIR (model.safetensors + config.json, as written by sluice train) on PATH: a\n"
               "token shard, a directory of shards, or a UTF-8 text file (byte tokenizer).\n"
               "\n"
               "options:\n"
               "  --weights DIR     directory holding model.safetensors and config.json, or a\n"
               "                    training checkpoint (checkpoints/step-N, or a run directory:\n"
               "                    its newest checkpoint)\n"
               "  --data PATH       shard, shard directory, or text file\n"
               "  --seq-len N       tokens per sequence (default 256)\n"
               "  --batch N         sequences per forward pass (default 8)\n"
               "  --max-tokens N    stop after N tokens (default: all)\n"
               "  --threads N       CPU threads (default: all cores)\n"
               "  --backend NAME    cpu (default) or cuda\n"
               "\n"
               "RoPE at evaluation (the saved model's values unless given; docs/evaluation.md):\n"
               "  --rope-theta B         RoPE base instead of the saved rope_theta\n"
               "  --rope-scaling MODE    yarn or none (none drops a saved YaRN)\n"
               "  --factor F             YaRN factor s > 1 (required for yarn unless saved)\n"
               "  --original-max N       YaRN original_max_position_embeddings, the trained\n"
               "                         context (default: the saved one, else the saved\n"
               "                         max_position_embeddings, as Hugging Face does)\n"
               "  --beta-fast X          YaRN beta_fast (default 32)\n"
               "  --beta-slow X          YaRN beta_slow (default 1; below beta_fast)\n"
               "  --attention-factor X   YaRN mscale override (default 0.1 ln(F) + 1)\n"
               "\n"
               "output:\n"
               "  --diagnostics     also the loss by position bucket and, per layer, the mean\n"
               "                    gate score, the attention share of the first token and the\n"
               "                    largest |hidden state| (the Gated Attention paper's Table 4)\n"
               "  --bucket N        first position bucket width (buckets [0,N), [N,2N),\n"
               "                    [2N,4N), ...; default seq/8 as a power of two in [16, 1024])\n"
               "  --json            print the report as one JSON document instead of the table\n"
               "  --plot FILE.png   plot the diagnostics with gnuplot (needs --diagnostics)\n"
               "  --document-mask   attend within documents only, positions restarting at each\n"
               "                    document (as training.document_mask; a text file is one\n"
               "                    document)\n"
               "  -h, --help        show this help\n");
}

static bool is_shard_path(const char *path) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return true;
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    unsigned char b[4] = {0};
    size_t n = fread(b, 1, 4, f);
    fclose(f);
    uint32_t magic =
        (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return n == 4 && magic == SL_SHARD_SKIP_MAGIC;
}

/* A training checkpoint (docs/checkpoint-format.md): a step-N directory with its COMMIT, or a
 * run or checkpoints directory whose newest checkpoint is meant. */
static bool is_checkpoint(const char *path) {
    const char *marks[] = {"COMMIT", "latest", "checkpoints"};
    char p[4096];
    struct stat st;
    for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", path, marks[i]);
        if (stat(p, &st) == 0) return true;
    }
    return false;
}

typedef struct {
    /* text source */
    unsigned char *text;
    size_t len, pos;
    /* shard source */
    sl_reader *reader;
} eval_source;

/* One sequence of seq+1 tokens; consecutive sequences share one token (every token is a
 * target once), and where its documents begin (doc_start[*n_docs], as sl_reader_next).
 * Returns 1, 0 at the end, -1 on error. */
static int next_seq(eval_source *s, int seq, int32_t *out, int32_t *doc_start, int *n_docs,
                    char *err, size_t errlen) {
    if (s->reader) return sl_reader_next(s->reader, out, doc_start, n_docs, err, errlen);
    const size_t total = s->len + 1; /* the text, then one end-of-document token */
    if (s->pos + (size_t)seq + 1 > total) return 0;
    *n_docs = s->pos == 0; /* the text is one document */
    doc_start[0] = 0;
    for (int i = 0; i <= seq; i++) {
        size_t p = s->pos + (size_t)i;
        out[i] = p < s->len ? s->text[p] : SL_EOD_TOKEN;
    }
    s->pos += (size_t)seq;
    return 1;
}

/* RoPE settings from the command line; NaN / -1 / NULL: not given. */
typedef struct {
    const char *scaling;
    double theta, factor, beta_fast, beta_slow, attention_factor;
    long long original;
} rope_flags;

/* A finite number, the whole of s. */
static int parse_double(const char *s, double *out) {
    char *end = NULL;
    const double v = strtod(s, &end);
    if (end == s || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

static int flag_err(const char *flag, const char *fmt, double v) {
    fprintf(stderr, "sluice eval: error: %s: ", flag);
    fprintf(stderr, fmt, v);
    fprintf(stderr, "\n");
    return 2;
}

/* Applies the RoPE flags to the saved config c. 0, or 2 with a message naming the flag. */
static int apply_rope_flags(const rope_flags *f, sl_model_config *c) {
    if (!isnan(f->theta)) {
        if (!(f->theta > 1.0)) return flag_err("--rope-theta", "must be > 1, got %g", f->theta);
        c->rope_theta = f->theta;
    }
    sl_rope_scaling *r = &c->rope_scaling;
    const bool saved_yarn = r->type == SL_ROPE_YARN;
    const bool yarn_flags = !isnan(f->factor) || f->original >= 0 || !isnan(f->beta_fast) ||
                            !isnan(f->beta_slow) || !isnan(f->attention_factor);
    if (f->scaling && strcmp(f->scaling, "none") == 0) {
        if (yarn_flags) {
            fprintf(stderr, "sluice eval: error: --rope-scaling none takes no YaRN flags "
                            "(--factor, --original-max, --beta-fast, --beta-slow, "
                            "--attention-factor)\n");
            return 2;
        }
        r->type = SL_ROPE_DEFAULT;
        return 0;
    }
    if (f->scaling && strcmp(f->scaling, "yarn") != 0) {
        fprintf(stderr, "sluice eval: error: --rope-scaling: expected yarn or none, got '%s'\n",
                f->scaling);
        return 2;
    }
    if (!f->scaling && !saved_yarn) {
        if (yarn_flags) {
            fprintf(stderr, "sluice eval: error: --factor, --original-max, --beta-fast, "
                            "--beta-slow and --attention-factor need --rope-scaling yarn (the "
                            "saved model has no YaRN)\n");
            return 2;
        }
        return 0;
    }
    if (!saved_yarn) { /* yarn on a model saved without it: start from HF's defaults */
        if (isnan(f->factor)) {
            fprintf(stderr, "sluice eval: error: --rope-scaling yarn needs --factor (the saved "
                            "model has no YaRN)\n");
            return 2;
        }
        r->type = SL_ROPE_YARN;
        r->original_max_position_embeddings = c->max_position_embeddings;
        r->beta_fast = 32.0, r->beta_slow = 1.0, r->attention_factor = 0.0;
    }
    if (!isnan(f->factor)) {
        if (!(f->factor > 1.0)) return flag_err("--factor", "must be > 1, got %g", f->factor);
        r->factor = f->factor;
    }
    if (f->original >= 0) {
        if (f->original < 1 || f->original > (1 << 24))
            return flag_err("--original-max", "must be in [1, 16777216], got %g",
                            (double)f->original);
        r->original_max_position_embeddings = (int)f->original;
    }
    if (!isnan(f->beta_fast)) r->beta_fast = f->beta_fast;
    if (!isnan(f->beta_slow)) r->beta_slow = f->beta_slow;
    if (!(r->beta_slow > 0.0)) return flag_err("--beta-slow", "must be > 0, got %g", r->beta_slow);
    if (!(r->beta_fast > r->beta_slow))
        return flag_err("--beta-fast", "must exceed beta_slow, got %g", r->beta_fast);
    if (!isnan(f->attention_factor)) {
        if (!(f->attention_factor > 0.0))
            return flag_err("--attention-factor", "must be > 0, got %g", f->attention_factor);
        r->attention_factor = f->attention_factor;
    }
    return 0;
}

int sl_cmd_eval(int argc, char **argv) {
    const char *weights = NULL, *data = NULL, *backend = "cpu", *plot = NULL;
    int seq = 256, batch = 8, threads = 0, bucket = 0;
    long long max_tokens = 0;
    bool diagnostics = false, json_out = false;
    rope_flags rf = {.theta = NAN,
                     .factor = NAN,
                     .beta_fast = NAN,
                     .beta_slow = NAN,
                     .attention_factor = NAN,
                     .original = -1};
    bool doc_mask = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "--diagnostics") == 0 || strcmp(a, "--json") == 0) {
            *(a[2] == 'd' ? &diagnostics : &json_out) = true;
            continue;
        }
        /* numbers of the RoPE flags */
        static const struct {
            const char *flag;
            size_t off;
        } k_dbl[] = {{"--rope-theta", offsetof(rope_flags, theta)},
                     {"--factor", offsetof(rope_flags, factor)},
                     {"--beta-fast", offsetof(rope_flags, beta_fast)},
                     {"--beta-slow", offsetof(rope_flags, beta_slow)},
                     {"--attention-factor", offsetof(rope_flags, attention_factor)}};
        bool done = false;
        for (size_t k = 0; k < sizeof k_dbl / sizeof k_dbl[0] && !done; k++) {
            if (strcmp(a, k_dbl[k].flag) != 0) continue;
            if (!v || parse_double(v, (double *)((char *)&rf + k_dbl[k].off)) != 0) {
                fprintf(stderr, "sluice eval: error: %s: expected a number, got '%s'\n", a,
                        v ? v : "nothing");
                return 2;
            }
            done = true;
        }
        if (done) {
            i++;
            continue;
        }
        if (strcmp(a, "--document-mask") == 0) { /* a flag: no value */
            doc_mask = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "sluice eval: error: %s needs a value\n", a);
            return 2;
        }
        char *end = NULL;
        if (strcmp(a, "--weights") == 0)
            weights = v;
        else if (strcmp(a, "--data") == 0)
            data = v;
        else if (strcmp(a, "--backend") == 0)
            backend = v;
        else if (strcmp(a, "--seq-len") == 0)
            seq = (int)strtol(v, &end, 10);
        else if (strcmp(a, "--batch") == 0)
            batch = (int)strtol(v, &end, 10);
        else if (strcmp(a, "--threads") == 0)
            threads = (int)strtol(v, &end, 10);
        else if (strcmp(a, "--max-tokens") == 0)
            max_tokens = strtoll(v, &end, 10);
        else if (strcmp(a, "--rope-scaling") == 0)
            rf.scaling = v;
        else if (strcmp(a, "--original-max") == 0)
            rf.original = v[0] == '-' ? -2 : strtoll(v, &end, 10);
        else if (strcmp(a, "--bucket") == 0)
            bucket = (int)strtol(v, &end, 10);
        else if (strcmp(a, "--plot") == 0)
            plot = v;
        else {
            fprintf(stderr, "sluice eval: error: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (end && (*end || end == v || seq < 1 || batch < 1 || threads < 0 || max_tokens < 0 ||
                    bucket < 0 || rf.original < -1)) {
            fprintf(stderr, "sluice eval: error: %s: invalid value '%s'\n", a, v);
            return 2;
        }
        i++;
    }
    if (!weights || !data) {
        fprintf(stderr, "sluice eval: error: --weights and --data are required\n");
        usage(stderr);
        return 2;
    }
    if (plot && !diagnostics) {
        fprintf(stderr, "sluice eval: error: --plot needs --diagnostics\n");
        return 2;
    }
    if (rf.original == 0 || rf.original == -2 ||
        (rf.scaling && strcmp(rf.scaling, "yarn") != 0 && strcmp(rf.scaling, "none") != 0)) {
        if (rf.original == 0 || rf.original == -2)
            fprintf(stderr, "sluice eval: error: --original-max: must be a positive integer\n");
        else
            fprintf(stderr,
                    "sluice eval: error: --rope-scaling: expected yarn or none, got "
                    "'%s'\n",
                    rf.scaling);
        return 2;
    }
    sl_comm *world = sl_comm_init_world(&argc, &argv);
    char err[2048], path[4096];
    int rc = 1;
    sl_model *m = NULL;
    sl_backend *be = NULL;
    eval_source src = {0};
    sl_data_config dc;
    memset(&dc, 0, sizeof dc);
    int32_t *tokens = NULL, *starts = NULL;
    int *n_docs = NULL;
    char *json = NULL;
    sl_ckpt *ck = NULL;
    sl_eval_report rep;
    memset(&rep, 0, sizeof rep);
    float *host_losses = NULL, *host_table = NULL;
    /* A training checkpoint (a step-N directory, or a run or checkpoints directory: its newest)
     * holds the model's config.json in its train state; a weights directory next to it. */
    if (is_checkpoint(weights)) {
        ck = sl_ckpt_open(weights, err, sizeof err);
        if (!ck) {
            sl_error("--weights: %s", err);
            goto done;
        }
    }
    if (ck) {
        const cJSON *hf = cJSON_GetObjectItemCaseSensitive(sl_ckpt_train_state(ck), "hf_config");
        json = hf ? cJSON_PrintUnformatted(hf) : NULL;
        snprintf(path, sizeof path, "%s/train_state.json: hf_config", sl_ckpt_dir(ck));
        if (!json) snprintf(err, sizeof err, "%.1024s is missing", path);
    } else {
        snprintf(path, sizeof path, "%s/config.json", weights);
        size_t len = 0;
        json = sl_read_file(path, &len, err, sizeof err);
    }
    sl_model_config mc;
    if (!json || sl_model_config_from_hf_json(json, path, &mc, err, sizeof err) != 0) {
        sl_error("%s", err);
        goto done;
    }
    if ((rc = apply_rope_flags(&rf, &mc)) != 0) goto done;
    rc = 1;
    sl_backend_params bp = {.threads = threads, .device = -1};
    be = sl_backend_create(backend, &bp, err, sizeof err);
    if (!be) {
        sl_error("--backend: %s", err);
        goto done;
    }
    if (is_shard_path(data)) {
        snprintf(dc.eval_path, sizeof dc.eval_path, "%s", data);
        dc.prefetch = 4;
        sl_reader_opts o = {.data = &dc, .dp_rank = 0, .dp_size = 1, .seq_len = seq, .eval = true};
        src.reader = sl_reader_open(&o, err, sizeof err);
        if (!src.reader) {
            sl_error("%s", err);
            goto done;
        }
        if (sl_reader_vocab_size(src.reader) > mc.vocab_size) {
            sl_error("%s: vocabulary size %d does not fit the model's vocab_size = %d (%s): "
                     "every token id must be below it",
                     sl_reader_first_shard(src.reader), sl_reader_vocab_size(src.reader),
                     mc.vocab_size, path);
            goto done;
        }
    } else {
        src.text = (unsigned char *)sl_read_file(data, &src.len, err, sizeof err);
        if (!src.text) {
            sl_error("%s", err);
            goto done;
        }
        if ((size_t)seq + 1 > src.len + 1) batch = 1;
    }
    /* evaluation keeps nothing for a backward (docs/memory.md) */
    m = sl_model_create_mem(&mc, be, NULL, batch, seq, NULL, SL_F32, SL_MEMORY_FORWARD_ONLY, err,
                            sizeof err);
    if (!m || (ck ? sl_train_ckpt_load_weights(m, ck, err, sizeof err)
                  : sl_hf_load(m, weights, err, sizeof err)) != 0) {
        sl_error("%s", err);
        goto done;
    }
    tokens = sl_xmalloc((size_t)batch * (seq + 1) * sizeof(int32_t));
    sl_eval_report_init(&rep, seq, bucket > 0 ? bucket : sl_eval_bucket_width(seq), diagnostics,
                        mc.num_hidden_layers);
    rep.weights = weights, rep.data = data, rep.backend = backend;
    rep.seq = seq, rep.batch = batch, rep.cfg = mc, rep.mscale = m->mscale;
    if (diagnostics) {
        m->diag = sl_model_diagnostics_create(m);
        host_losses = sl_xmalloc((size_t)m->tokens * sizeof(float));
        host_table = sl_xmalloc((size_t)mc.num_hidden_layers * SL_DIAG_COLS * sizeof(float));
    }
    starts = sl_xmalloc((size_t)batch * (seq + 1) * sizeof(int32_t));
    n_docs = sl_xmalloc((size_t)batch * sizeof(int));
    double loss = 0.0;
    long long counted = 0;
    for (;;) {
        int got = 1;
        for (int b = 0; b < batch && got == 1; b++)
            got = next_seq(&src, seq, tokens + (size_t)b * (seq + 1),
                           starts + (size_t)b * (seq + 1), n_docs + b, err, sizeof err);
        if (got < 0) {
            sl_error("%s", err);
            goto done;
        }
        if (got == 0) break; /* a partial last batch is not evaluated */
        sl_fwd_stats st;
        if (doc_mask) sl_model_set_documents(m, starts, n_docs);
        sl_model_forward(m, tokens, &st);
        loss += st.loss_sum;
        counted += st.tokens;
        if (diagnostics) { /* two more host reads per forward: evaluation only */
            sl_tensor_to_host(m->losses, host_losses);
            sl_eval_report_add_losses(&rep, host_losses, m->tokens);
            sl_model_diagnostics_read(m->diag, host_table);
            sl_eval_report_add_layers(&rep, host_table);
        }
        if (max_tokens > 0 && counted >= max_tokens) break;
    }
    if (counted == 0) {
        sl_error("%s: fewer than %d tokens: nothing to evaluate (lower --seq-len/--batch)", data,
                 batch * seq + 1);
        goto done;
    }
    rep.tokens = counted, rep.loss_sum = loss;
    if (sl_comm_rank(world) == 0) {
        if (json_out)
            sl_eval_report_json(&rep, stdout);
        else
            sl_eval_report_table(&rep, stdout);
        fflush(stdout);
        if (plot && sl_eval_report_plot(&rep, plot, err, sizeof err) != 0) {
            sl_error("--plot: %s", err);
            goto done;
        }
    }
    rc = 0;
done:
    if (m && m->diag) sl_model_diagnostics_free(m->diag);
    if (m) m->diag = NULL;
    sl_eval_report_free(&rep);
    free(host_losses);
    free(host_table);
    free(tokens);
    free(starts);
    free(n_docs);
    free(json);
    if (ck) sl_ckpt_close(ck);
    free(src.text);
    if (src.reader) sl_reader_close(src.reader);
    sl_model_free(m);
    if (be) sl_backend_free(be);
    sl_comm_finalize(world);
    return rc;
}
