/*
 * launch/cmd_eval.c - `sluice eval --weights DIR --data PATH`: loss and perplexity of saved
 * weights on a token shard (or directory of shards) or on a plain text file, tokenized with the
 * model's tokenizer (--tokenizer, or the tokenizer.json beside config.json), or for a byte-level
 * model (vocabulary 257) as bytes 0-255 then the end-of-document token 256 (io/text_codec.h).
 */
#include <inttypes.h>
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
#include "io/text_codec.h"
#include "launch/commands.h"
#include "launch/host_check.h"
#include "io/safetensors.h"
#include "launch/eval_report.h"
#include "launch/weights.h"
#include "model/decode.h"
#include "model/diagnostics.h"
#include "model/hf_export.h"
#include "model/model.h"
#include "trainer/checkpoint.h"
#include "trainer/config.h"

static void usage(FILE *f) {
    fprintf(f, "usage: sluice eval --weights DIR --data PATH [options]\n"
               "\n"
               "Reports the mean cross-entropy (nats per token) and perplexity of the weights in\n"
               "DIR (model.safetensors + config.json, as written by sluice train) on PATH: a\n"
               "token shard, a directory of shards, or a UTF-8 text file (one document, tokenized\n"
               "with the model's tokenizer; a byte-level model, vocabulary 257, reads bytes).\n"
               "\n"
               "options:\n"
               "  --weights DIR     directory holding model.safetensors and config.json (or a\n"
               "                    .safetensors file with config.json beside it), or a\n"
               "                    training checkpoint (checkpoints/step-N, or a run directory:\n"
               "                    its newest checkpoint)\n"
               "  --data PATH       shard, shard directory, or text file\n"
               "  --tokenizer PATH  tokenizer.json (or its directory) for a text file (default:\n"
               "                    DIR/tokenizer.json when present, or a checkpoint's run's\n"
               "                    data.tokenizer; a model whose vocabulary is not the\n"
               "                    byte-level 257 needs one)\n"
               "  --seq-len N       tokens per sequence (default 256, at most 2^24)\n"
               "  --batch N         sequences per forward pass (default 8, at most 2^20); the\n"
               "                    data must hold one batch, N x seq-len + 1 tokens\n"
               "  --max-tokens N    evaluate the first N tokens only (default: all): whole\n"
               "                    batches, the last one counted up to N\n"
               "  --threads N       CPU threads (default: all cores)\n"
               "  --backend NAME    cpu (default) or cuda\n"
               "\n"
               "host memory: on the cpu backend the weights, a forward's activations (and the\n"
               "logits of --dump-logits) are checked against the memory the node can still\n"
               "give before the model is created. SLUICE_HOST_MEMORY=off skips the check;\n"
               "SLUICE_HOST_MEMORY=64G (a size) assumes that much (docs/memory.md).\n"
               "\n"
               "RoPE at evaluation (the saved model's values unless given; docs/evaluation.md):\n");
    sl_rope_flags_usage(f);
    fprintf(f,
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
            "  --dump-logits F   also write the logits of every evaluated token to F, a\n"
            "                    safetensors file (\"logits\" [tokens, vocab] F32 and \"tokens\"\n"
            "                    [tokens] I32, the inputs), for comparisons with other\n"
            "                    implementations; tokens x vocab x 4 bytes of memory, so\n"
            "                    bound it with --max-tokens\n"
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

typedef struct {
    /* text source: its tokens, then the end-of-document token (when the tokenizer has one) */
    int32_t *ids;
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
    if (s->pos + (size_t)seq + 1 > s->len) return 0;
    *n_docs = s->pos == 0; /* the text is one document */
    doc_start[0] = 0;
    memcpy(out, s->ids + s->pos, ((size_t)seq + 1) * sizeof *out);
    s->pos += (size_t)seq;
    return 1;
}

/* --dump-logits: every evaluated token's logits and input id, written at the end. */
typedef struct {
    float *logits;
    int32_t *ids;
    int64_t n;
    sl_tensor *rows; /* [tokens of a forward, vocab] */
} logits_dump;

/* Adds the first `keep` rows of the forward's logits (all but the last batch: all of them). */
static void dump_add(logits_dump *d, sl_model *m, const int32_t *tokens, int64_t keep) {
    const int64_t t = m->tokens, v = m->cfg.vocab_size;
    if (!d->rows) d->rows = sl_tensor_new2(m->be, SL_F32, t, v);
    sl_model_logits(m, 0, t, d->rows);
    d->logits = sl_xrealloc(d->logits, (size_t)((d->n + t) * v) * sizeof(float));
    d->ids = sl_xrealloc(d->ids, (size_t)(d->n + t) * sizeof(int32_t));
    sl_tensor_to_host(d->rows, d->logits + d->n * v);
    for (int64_t r = 0; r < keep; r++) /* row b * seq + i is input i of sequence b */
        d->ids[d->n + r] = tokens[r / m->seq * (m->seq + 1) + r % m->seq];
    d->n += keep;
}

static int dump_write(const logits_dump *d, const char *path, char *err, size_t errlen) {
    const int64_t v = sl_tensor_dim(d->rows, 1);
    sl_st_writer *w = sl_st_writer_open(path, err, errlen);
    if (!w) return -1;
    sl_st_writer_set_metadata(w, "producer", "sluice eval --dump-logits");
    sl_st_writer_declare(w, "logits", "F32", 2, (int64_t[]){d->n, v});
    sl_st_writer_declare(w, "tokens", "I32", 1, (int64_t[]){d->n});
    sl_st_writer_write(w, "logits", d->logits, (size_t)(d->n * v) * sizeof(float));
    sl_st_writer_write(w, "tokens", d->ids, (size_t)d->n * sizeof(int32_t));
    return sl_st_writer_close(w, err, errlen);
}

/* The text file at `path` as the model's tokens, then its end-of-document token: with the
 * tokenizer (--tokenizer, or the one beside config.json), else as bytes, which a model whose
 * vocabulary is not the byte-level 257 cannot read. 0, or -1 after the error. */
static int read_text(eval_source *src, const char *path, const sl_weights *w, const char *given,
                     int vocab) {
    char err[2048], buf[4200];
    const char *tok = NULL;
    if (sl_weights_tokenizer(w, given, &tok, buf, sizeof buf, err, sizeof err) != 0) {
        sl_error("--weights %s: %s", w->path, err);
        return -1;
    }
    if (!tok && vocab != SL_TEXT_EOD_BYTE + 1) {
        char none[4200];
        if (w->ck)
            snprintf(none, sizeof none, "%s records none", sl_ckpt_dir(w->ck));
        else
            snprintf(none, sizeof none, "%s/tokenizer.json does not exist", w->dir);
        sl_error("%s: a text file is read with the model's tokenizer, and the model's vocabulary "
                 "(%d tokens) is not the byte-level 257, but no tokenizer was given and %s "
                 "(--tokenizer PATH names it; or evaluate on shards built with `sluice data "
                 "build --tokenizer`)",
                 path, vocab, none);
        return -1;
    }
    sl_text_codec *codec = sl_text_codec_open(tok, vocab, err, sizeof err);
    if (!codec) {
        sl_error("--tokenizer: %s", err);
        return -1;
    }
    size_t len = 0;
    char *text = sl_read_file(path, &len, err, sizeof err);
    int n = 0, rc = -1;
    if (!text)
        sl_error("%s", err);
    else if (sl_text_codec_encode(codec, text, len, &src->ids, &n, err, sizeof err) != 0)
        sl_error("%s: %s", path, err);
    else
        rc = 0;
    if (rc == 0 && sl_text_codec_eod(codec) >= 0) { /* encode leaves room for one more id */
        if (!src->ids) src->ids = sl_xmalloc(sizeof *src->ids);
        src->ids[n++] = sl_text_codec_eod(codec);
    }
    src->len = (size_t)n;
    free(text);
    sl_text_codec_free(codec);
    return rc;
}

/* The largest --seq-len and --batch: the config's bounds on a sequence (model.
 * max_position_embeddings, 2^24) and on a micro-batch (training.micro_batch_size, 2^20). */
#define EVAL_MAX_SEQ   (1 << 24)
#define EVAL_MAX_BATCH (1 << 20)

/* The flags that take a value; any other "-..." is an unknown option (told as such, never as
 * a flag missing its value). */
static bool takes_value(const char *a) {
    static const char *const k_valued[] = {
        "--weights",    "--data",        "--backend", "--seq-len", "--batch",    "--threads",
        "--max-tokens", "--dump-logits", "--bucket",  "--plot",    "--tokenizer"};
    for (size_t k = 0; k < sizeof k_valued / sizeof *k_valued; k++)
        if (strcmp(a, k_valued[k]) == 0) return true;
    return false;
}

/* An int flag's value in [lo, hi] into *out: 0, or 2 after the message naming the flag. */
static int int_flag(const char *flag, const char *v, long long lo, long long hi, int *out) {
    long long n;
    if (sl_cli_int_flag("eval", flag, v, lo, hi, &n) != 0) return 2;
    *out = (int)n;
    return 0;
}

int sl_cmd_eval(int argc, char **argv) {
    const char *weights = NULL, *data = NULL, *backend = "cpu", *plot = NULL, *tokenizer = NULL;
    int seq = 256, batch = 8, threads = 0, bucket = 0;
    long long max_tokens = 0;
    bool diagnostics = false, json_out = false;
    sl_rope_flags rf;
    sl_rope_flags_init(&rf);
    const char *dump = NULL;
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
        const int rope = sl_rope_flags_parse(&rf, "eval", argc, argv, &i);
        if (rope == 2) return 2;
        if (rope == 1) continue;
        if (strcmp(a, "--document-mask") == 0) { /* a flag: no value */
            doc_mask = true;
            continue;
        }
        if (a[0] != '-')
            return sl_cli_usage_error("eval", "unexpected argument '%s' (PATH goes after --data)",
                                      a);
        if (!takes_value(a)) return sl_cli_usage_error("eval", "unknown option '%s'", a);
        if (!v) {
            fprintf(stderr, "sluice eval: error: %s needs a value\n", a);
            return 2;
        }
        i++;
        int bad = 0;
        if (strcmp(a, "--weights") == 0)
            weights = v;
        else if (strcmp(a, "--data") == 0)
            data = v;
        else if (strcmp(a, "--backend") == 0)
            backend = v;
        else if (strcmp(a, "--dump-logits") == 0)
            dump = v;
        else if (strcmp(a, "--plot") == 0)
            plot = v;
        else if (strcmp(a, "--tokenizer") == 0)
            tokenizer = v;
        else if (strcmp(a, "--seq-len") == 0)
            bad = int_flag(a, v, 1, EVAL_MAX_SEQ, &seq);
        else if (strcmp(a, "--batch") == 0)
            bad = int_flag(a, v, 1, EVAL_MAX_BATCH, &batch);
        else if (strcmp(a, "--threads") == 0)
            bad = int_flag(a, v, 0, 4096, &threads); /* backend.threads' bound */
        else if (strcmp(a, "--bucket") == 0)
            bad = int_flag(a, v, 0, EVAL_MAX_SEQ, &bucket);
        else /* --max-tokens: counts up to 2^53 are exact in the JSON report */
            bad = sl_cli_int_flag("eval", a, v, 0, 1ll << 53, &max_tokens);
        if (bad) return bad;
    }
    if (!weights || !data)
        return sl_cli_usage_error("eval", "%s required",
                                  !weights && !data ? "--weights and --data are"
                                  : !weights        ? "--weights is"
                                                    : "--data is");
    if (plot && !diagnostics) {
        fprintf(stderr, "sluice eval: error: --plot needs --diagnostics\n");
        return 2;
    }
    int64_t host_memory;
    if (sl_cli_host_memory_env("eval", &host_memory) != 0) return 2;
    sl_comm *world = sl_comm_init_world(&argc, &argv);
    char err[2048];
    int rc = 1;
    sl_model *m = NULL;
    sl_backend *be = NULL;
    eval_source src = {0};
    sl_data_config dc;
    memset(&dc, 0, sizeof dc);
    int32_t *tokens = NULL, *starts = NULL;
    int *n_docs = NULL;
    sl_weights wts = {0};
    sl_eval_report rep;
    memset(&rep, 0, sizeof rep);
    float *host_losses = NULL, *host_table = NULL;
    logits_dump dl = {0};
    if (sl_comm_size(world) > 1) { /* every rank finds it: printed once, every rank exits 1 */
        sl_error_once("sluice eval runs in one process (%d were started): run it without "
                      "mpirun/srun",
                      sl_comm_size(world));
        goto done;
    }
    if (sl_weights_open(&wts, weights, err, sizeof err) != 0) {
        sl_error("--weights: %s", err);
        goto done;
    }
    sl_model_config mc = wts.cfg;
    if ((rc = sl_rope_flags_apply(&rf, "eval", &mc)) != 0) goto done;
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
            sl_error("%s: vocabulary size %d does not fit the model's vocab_size = %d (--weights "
                     "%s): every token id must be below it",
                     sl_reader_first_shard(src.reader), sl_reader_vocab_size(src.reader),
                     mc.vocab_size, wts.path);
            goto done;
        }
    } else if (read_text(&src, data, &wts, tokenizer, mc.vocab_size) != 0) {
        goto done;
    }
    /* One batch must fit in the data (a partial last batch is not evaluated): checked before
     * the model's activations are allocated for batch x seq tokens, which may not fit. */
    const uint64_t have = src.reader ? sl_reader_tokens(src.reader) : (uint64_t)src.len;
    const uint64_t need = (uint64_t)batch * (uint64_t)seq + 1;
    if (have < need) {
        sl_error("%s: %" PRIu64 " tokens, fewer than the %" PRIu64
                 " of one batch (--batch %d x --seq-len %d + 1): nothing to evaluate (lower "
                 "--seq-len/--batch)",
                 data, have, need, batch, seq);
        goto done;
    }
    /* on the CPU: refused with a message where the kernel would kill the process.
     * --dump-logits keeps the logits of every evaluated token on the host, grown a whole
     * forward at a time (the last one trimmed after), and one forward's on the backend */
    const uint64_t t = (uint64_t)batch * seq;
    const uint64_t evaluated =
        max_tokens > 0 && (uint64_t)max_tokens < have ? (uint64_t)max_tokens : have;
    const double dumped =
        dump ? ((double)((evaluated + t - 1) / t * t) + (double)t) * mc.vocab_size * 4.0 : 0.0;
    const sl_forward_need fn = {
        .cfg = &mc,
        .compute = SL_F32,
        .tokens = (int64_t)t,
        .extra = {dumped, 0.0},
        .extra_what = {"--dump-logits", NULL},
        .extra_advice = {"A smaller --max-tokens lowers the logits dumped", NULL},
        .weights_path = weights,
        .advice = "A smaller --batch or --seq-len lowers the activations"};
    if (sl_cli_check_forward_memory(&fn, be, host_memory) != 0) goto done;
    /* evaluation keeps nothing for a backward (docs/memory.md) */
    m = sl_model_create_mem(&mc, be, NULL, batch, seq, NULL, SL_F32, SL_MEMORY_FORWARD_ONLY, err,
                            sizeof err);
    if (!m || sl_weights_load(&wts, m, err, sizeof err) != 0) {
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
        host_table = sl_xmalloc((size_t)mc.num_hidden_layers * SL_DIAG_COLS * sizeof(float));
    }
    if (diagnostics || max_tokens > 0) /* the per-token losses: buckets, a cut last batch */
        host_losses = sl_xmalloc((size_t)m->tokens * sizeof(float));
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
        /* --max-tokens: the tokens of this batch that are counted (row b * seq + i: sequence
         * b's position i, in evaluation order) */
        int64_t keep = st.tokens;
        if (max_tokens > 0 && counted + keep > max_tokens) keep = max_tokens - counted;
        if (diagnostics || keep < st.tokens) sl_tensor_to_host(m->losses, host_losses);
        if (keep < st.tokens) {
            double part = 0.0;
            for (int64_t r = 0; r < keep; r++) part += host_losses[r];
            loss += part;
        } else {
            loss += st.loss_sum;
        }
        counted += keep;
        if (diagnostics) { /* two more host reads per forward: evaluation only */
            sl_eval_report_add_losses(&rep, host_losses, keep);
            sl_model_diagnostics_read(m->diag, host_table);
            sl_eval_report_add_layers(&rep, host_table);
        }
        if (dump) dump_add(&dl, m, tokens, keep);
        if (max_tokens > 0 && counted >= max_tokens) break;
    }
    if (counted == 0) {
        sl_error("%s: fewer than %lld tokens: nothing to evaluate (lower --seq-len/--batch)", data,
                 (long long)batch * seq + 1);
        goto done;
    }
    if (dump && dump_write(&dl, dump, err, sizeof err) != 0) {
        sl_error("--dump-logits: %s", err);
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
    sl_weights_close(&wts);
    free(dl.logits);
    free(dl.ids);
    sl_tensor_free(dl.rows);
    free(src.ids);
    if (src.reader) sl_reader_close(src.reader);
    sl_model_free(m);
    if (be) sl_backend_free(be);
    sl_comm_finalize(world);
    return rc;
}
