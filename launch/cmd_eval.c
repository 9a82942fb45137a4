/*
 * trainer/cmd_eval.c - `sluice eval --weights DIR --data PATH`: loss and perplexity of saved
 * weights on a token shard (or directory of shards) or on a plain text file (byte-level
 * tokenizer: bytes 0-255, then the end-of-document token 256).
 */
#include <math.h>
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
 * target once). Returns 1, 0 at the end, -1 on error. */
static int next_seq(eval_source *s, int seq, int32_t *out, char *err, size_t errlen) {
    if (s->reader) return sl_reader_next(s->reader, out, NULL, NULL, err, errlen);
    const size_t total = s->len + 1; /* the text, then one end-of-document token */
    if (s->pos + (size_t)seq + 1 > total) return 0;
    for (int i = 0; i <= seq; i++) {
        size_t p = s->pos + (size_t)i;
        out[i] = p < s->len ? s->text[p] : SL_EOD_TOKEN;
    }
    s->pos += (size_t)seq;
    return 1;
}

int sl_cmd_eval(int argc, char **argv) {
    const char *weights = NULL, *data = NULL, *backend = "cpu";
    int seq = 256, batch = 8, threads = 0;
    long long max_tokens = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
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
        else {
            fprintf(stderr, "sluice eval: error: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
        if (end && (*end || seq < 1 || batch < 1 || threads < 0 || max_tokens < 0)) {
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
    sl_comm *world = sl_comm_init_world(&argc, &argv);
    char err[2048], path[4096];
    int rc = 1;
    sl_model *m = NULL;
    sl_backend *be = NULL;
    eval_source src = {0};
    sl_data_config dc;
    memset(&dc, 0, sizeof dc);
    int32_t *tokens = NULL;
    char *json = NULL;
    sl_ckpt *ck = NULL;
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
    double loss = 0.0;
    long long counted = 0;
    for (;;) {
        int got = 1;
        for (int b = 0; b < batch && got == 1; b++)
            got = next_seq(&src, seq, tokens + (size_t)b * (seq + 1), err, sizeof err);
        if (got < 0) {
            sl_error("%s", err);
            goto done;
        }
        if (got == 0) break; /* a partial last batch is not evaluated */
        sl_fwd_stats st;
        sl_model_forward(m, tokens, &st);
        loss += st.loss_sum;
        counted += st.tokens;
        if (max_tokens > 0 && counted >= max_tokens) break;
    }
    if (counted == 0) {
        sl_error("%s: fewer than %d tokens: nothing to evaluate (lower --seq-len/--batch)", data,
                 batch * seq + 1);
        goto done;
    }
    sl_info("tokens %lld | loss %.4f nats/token | perplexity %.3f | %.4f bits/token", counted,
            loss / counted, exp(loss / counted), loss / counted / log(2.0));
    rc = 0;
done:
    free(tokens);
    free(json);
    if (ck) sl_ckpt_close(ck);
    free(src.text);
    if (src.reader) sl_reader_close(src.reader);
    sl_model_free(m);
    if (be) sl_backend_free(be);
    sl_comm_finalize(world);
    return rc;
}
