/*
 * launch/cmd_generate.c - `sluice generate --weights DIR|CHECKPOINT --prompt TEXT`: text from
 * saved weights, decoded with a KV cache (model/decode.h) and sampled (model/sampler.h), streamed
 * to stdout as it comes (docs/generate.md).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backends.h"
#include "core/comm.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "io/text_codec.h"
#include "launch/commands.h"
#include "launch/host_check.h"
#include "launch/weights.h"
#include "model/decode.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: sluice generate --weights DIR|CHECKPOINT --prompt TEXT [options]\n"
            "\n"
            "Continues each prompt with text sampled from the model in DIR (config.json and\n"
            "safetensors, as sluice train writes to <out_dir>/final; or a .safetensors file with\n"
            "config.json beside it) or a training checkpoint\n"
            "(checkpoints/step-N, or a run directory: its newest), decoding with a KV cache. One\n"
            "prompt streams its continuation to stdout as the tokens come; several print one\n"
            "block each when all are done. docs/generate.md says more.\n"
            "\n"
            "prompts:\n"
            "  --prompt TEXT       a prompt (repeatable: the prompts decode as one batch)\n"
            "  --prompts FILE      one prompt per line of FILE, blank lines skipped (may be\n"
            "                      combined with --prompt)\n"
            "  --tokenizer PATH    tokenizer.json (or its directory) for a model that is not\n"
            "                      byte-level (default: DIR/tokenizer.json when present, or a\n"
            "                      checkpoint's run's data.tokenizer; a model with vocabulary\n"
            "                      257 reads bytes: 0-255, 256 ends a document)\n"
            "  --no-eod-prefix     do not start each prompt with the end-of-document token (the\n"
            "                      default starts it, as a document starts in the training data)\n"
            "\n"
            "sampling:\n"
            "  --max-new N         tokens to generate per prompt at most (default 128)\n"
            "  --temperature T     softmax temperature; 0 is greedy (default 1.0)\n"
            "  --top-k K           sample among the K most probable tokens (default 0: all)\n"
            "  --top-p P           then among the most probable holding P of the probability\n"
            "                      (nucleus sampling; default 1: all)\n"
            "  --seed S            random seed (default 1234; prompt i draws from stream i)\n"
            "  --ignore-eod        keep going past the end-of-document token (default: stop)\n"
            "\n"
            "running:\n"
            "  --backend NAME      cpu (default) or cuda\n"
            "  --precision P       fp32 (default) or bf16 (cuda only: bf16 weights' copies,\n"
            "                      activations and KV cache, fp32 arithmetic)\n"
            "  --threads N         CPU threads (default: all cores)\n"
            "  --chunk N           prompt tokens per forward pass (default 256)\n"
            "\n"
            "host memory: on the cpu backend the weights, the first pass's activations, the\n"
            "KV cache and the sampling rows are checked against the memory the node can still\n"
            "give before the model is created. SLUICE_HOST_MEMORY=off skips the check;\n"
            "SLUICE_HOST_MEMORY=64G (a size) assumes that much (docs/memory.md).\n"
            "\n"
            "RoPE (the saved model's values unless given; as sluice eval, docs/evaluation.md):\n");
    sl_rope_flags_usage(f);
    fprintf(f, "\n  -h, --help          show this help\n");
}

static int parse_num(const char *s, double *out) {
    char *end = NULL;
    const double v = s ? strtod(s, &end) : 0.0;
    if (!s || end == s || *end || !isfinite(v)) return 0;
    *out = v;
    return 1;
}

typedef struct {
    char **text;
    size_t *len;
    int n, cap;
} prompt_list;

static void add_prompt(prompt_list *p, const char *text, size_t len) {
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 8;
        p->text = sl_xrealloc(p->text, (size_t)p->cap * sizeof *p->text);
        p->len = sl_xrealloc(p->len, (size_t)p->cap * sizeof *p->len);
    }
    p->text[p->n] = sl_xmalloc(len + 1);
    memcpy(p->text[p->n], text, len);
    p->text[p->n][len] = '\0';
    p->len[p->n++] = len;
}

/* One prompt per line ("\n" or "\r\n"; no line after a final newline); blank lines (empty, or
 * only spaces and tabs) are skipped: an empty prompt is --prompt "". */
static int read_prompts(prompt_list *p, const char *path, char *err, size_t errlen) {
    size_t len = 0;
    char *text = sl_read_file(path, &len, err, errlen);
    if (!text) return -1;
    const int before = p->n;
    size_t i = 0;
    while (i < len) {
        size_t j = i;
        while (j < len && text[j] != '\n') j++;
        const size_t end = j > i && text[j - 1] == '\r' ? j - 1 : j;
        size_t k = i;
        while (k < end && (text[k] == ' ' || text[k] == '\t')) k++;
        if (k < end) add_prompt(p, text + i, end - i);
        i = j + 1;
    }
    free(text);
    if (p->n == before)
        return sl_fail(err, errlen, "%s: no prompt (the file is empty or all its lines are blank)",
                       path);
    return 0;
}

typedef struct {
    const sl_text_codec *codec;
    bool stream; /* one prompt: its tokens go to stdout as they come */
} printer;

static void on_token(void *user, int seq, int32_t id) {
    const printer *p = user;
    if (!p->stream || seq != 0) return;
    size_t n;
    const uint8_t *b = sl_text_codec_token(p->codec, id, &n);
    if (b && n) fwrite(b, 1, n, stdout);
    fflush(stdout);
}

static void print_tokens(const sl_text_codec *c, const int32_t *ids, int n) {
    for (int i = 0; i < n; i++) {
        size_t k;
        const uint8_t *b = sl_text_codec_token(c, ids[i], &k);
        if (b && k) fwrite(b, 1, k, stdout);
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int usage_error(const char *flag, const char *v) {
    fprintf(stderr, "sluice generate: error: %s: invalid value '%s'\n", flag, v ? v : "nothing");
    return 2;
}

/* The flags that take a value; any other "--..." is an unknown option (told as such, never as
 * a flag missing its value). */
static bool takes_value(const char *a) {
    static const char *const k_valued[] = {"--weights", "--prompt",    "--prompts", "--tokenizer",
                                           "--backend", "--precision", "--max-new", "--top-k",
                                           "--seed",    "--threads",   "--chunk",   "--temperature",
                                           "--top-p"};
    for (size_t k = 0; k < sizeof k_valued / sizeof *k_valued; k++)
        if (strcmp(a, k_valued[k]) == 0) return true;
    return false;
}

int sl_cmd_generate(int argc, char **argv) {
    const char *weights = NULL, *backend = "cpu", *tokenizer = NULL, *precision = "fp32";
    const char *prompts_file = NULL;
    long long max_new = 128, top_k = 0, seed = 1234, threads = 0, chunk = 256;
    double temperature = 1.0, top_p = 1.0;
    bool eod_prefix = true, stop_at_eod = true;
    prompt_list pl = {0};
    sl_rope_flags rf;
    sl_rope_flags_init(&rf);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (sl_cli_is_help(a)) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "--no-eod-prefix") == 0 || strcmp(a, "--ignore-eod") == 0) {
            *(a[2] == 'n' ? &eod_prefix : &stop_at_eod) = false;
            continue;
        }
        const int rope = sl_rope_flags_parse(&rf, "generate", argc, argv, &i);
        if (rope == 2) return 2;
        if (rope == 1) continue;
        if (a[0] != '-' || a[1] != '-')
            return sl_cli_usage_error("generate", "unexpected argument '%s'", a);
        if (!takes_value(a)) return sl_cli_usage_error("generate", "unknown option '%s'", a);
        if (!v) {
            fprintf(stderr, "sluice generate: error: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (strcmp(a, "--weights") == 0)
            weights = v;
        else if (strcmp(a, "--prompt") == 0)
            add_prompt(&pl, v, strlen(v));
        else if (strcmp(a, "--prompts") == 0)
            prompts_file = v;
        else if (strcmp(a, "--tokenizer") == 0)
            tokenizer = v;
        else if (strcmp(a, "--backend") == 0)
            backend = v;
        else if (strcmp(a, "--precision") == 0) {
            if (strcmp(v, "fp32") != 0 && strcmp(v, "bf16") != 0) {
                fprintf(stderr,
                        "sluice generate: error: --precision: expected fp32 or bf16, got "
                        "'%s'\n",
                        v);
                return 2;
            }
            precision = v;
        } else if (strcmp(a, "--max-new") == 0) { /* integers: the error names the range */
            if (sl_cli_int_flag("generate", a, v, 0, 1 << 24, &max_new)) return 2;
        } else if (strcmp(a, "--top-k") == 0) {
            if (sl_cli_int_flag("generate", a, v, 0, 1 << 30, &top_k)) return 2;
        } else if (strcmp(a, "--seed") == 0) {
            if (sl_cli_int_flag("generate", a, v, 0, 1ll << 53, &seed)) return 2;
        } else if (strcmp(a, "--threads") == 0) {
            if (sl_cli_int_flag("generate", a, v, 0, 4096, &threads)) return 2;
        } else if (strcmp(a, "--chunk") == 0) {
            if (sl_cli_int_flag("generate", a, v, 1, 1 << 20, &chunk)) return 2;
        } else { /* --temperature or --top-p */
            if (!parse_num(v, a[2] == 't' && a[3] == 'e' ? &temperature : &top_p))
                return usage_error(a, v);
        }
    }
    const sl_sampler_params sp = {
        .temperature = temperature, .top_k = (int)top_k, .top_p = top_p, .seed = (uint64_t)seed};
    char err[2048];
    if (sl_sampler_check(&sp, err, sizeof err) != 0) {
        fprintf(stderr, "sluice generate: error: --%s\n", err);
        return 2;
    }
    if (!weights) return sl_cli_usage_error("generate", "--weights is required");
    if (strcmp(precision, "bf16") == 0 && strcmp(backend, "cuda") != 0) {
        fprintf(stderr, "sluice generate: error: --precision bf16 needs --backend cuda (the cpu "
                        "backend computes in fp32)\n");
        return 2;
    }
    if (prompts_file && read_prompts(&pl, prompts_file, err, sizeof err) != 0) {
        fprintf(stderr, "sluice generate: error: --prompts: %s\n", err);
        return 1; /* a bad input file, as --weights */
    }
    if (pl.n == 0) {
        fprintf(stderr, "sluice generate: error: give a prompt: --prompt TEXT or --prompts FILE\n");
        return 2;
    }
    int64_t host_memory;
    if (sl_cli_host_memory_env("generate", &host_memory) != 0) return 2;

    sl_comm *world = sl_comm_init_world(&argc, &argv);
    int rc = 1;
    sl_weights wts = {0};
    sl_backend *be = NULL;
    sl_text_codec *codec = NULL;
    sl_model *m = NULL;
    sl_decoder *dec = NULL;
    sl_sampler *samplers = NULL;
    int32_t **ids = sl_xcalloc((size_t)pl.n, sizeof *ids), **out = NULL;
    int *n_ids = sl_xcalloc((size_t)pl.n, sizeof *n_ids), *out_n = NULL;
    char tok_path[4200];
    if (sl_comm_size(world) > 1) { /* every rank finds it: printed once, every rank exits 1 */
        sl_error_once("sluice generate runs in one process (%d were started): run it without "
                      "mpirun/srun",
                      sl_comm_size(world));
        goto done;
    }
    if (sl_weights_open(&wts, weights, err, sizeof err) != 0) {
        sl_error("--weights: %s", err);
        goto done;
    }
    sl_model_config mc = wts.cfg;
    if ((rc = sl_rope_flags_apply(&rf, "generate", &mc)) != 0) goto done;
    rc = 1;
    /* the tokenizer: --tokenizer, else one exported beside config.json or a checkpoint's run's,
     * else bytes */
    if (sl_weights_tokenizer(&wts, tokenizer, &tokenizer, tok_path, sizeof tok_path, err,
                             sizeof err) != 0) {
        sl_error("--weights %s: %s", weights, err);
        goto done;
    }
    codec = sl_text_codec_open(tokenizer, mc.vocab_size, err, sizeof err);
    if (!codec) {
        sl_error("%s", err);
        goto done;
    }
    const int32_t eod = sl_text_codec_eod(codec);
    int longest = 0;
    for (int p = 0; p < pl.n; p++) {
        if (eod_prefix && eod >= 0) ids[p] = sl_xmalloc(sizeof(int32_t)), ids[p][n_ids[p]++] = eod;
        if (sl_text_codec_encode(codec, pl.text[p], pl.len[p], &ids[p], &n_ids[p], err,
                                 sizeof err) != 0) {
            sl_error("prompt %d: %s", p + 1, err);
            goto done;
        }
        if (n_ids[p] == 0) {
            sl_error("prompt %d is empty (and --no-eod-prefix leaves no token to start from)",
                     p + 1);
            goto done;
        }
        longest = n_ids[p] > longest ? n_ids[p] : longest;
    }
    const int max_len = longest + (int)(max_new > 0 ? max_new : 1);
    if (max_len > mc.max_position_embeddings)
        sl_warn("prompt and new tokens reach position %d, beyond the model's "
                "max_position_embeddings %d",
                max_len, mc.max_position_embeddings);
    sl_backend_params bp = {.threads = (int)threads, .device = -1};
    be = sl_backend_create(backend, &bp, err, sizeof err);
    if (!be) {
        sl_error("--backend: %s", err);
        goto done;
    }
    const sl_dtype dt = strcmp(precision, "bf16") == 0 ? SL_BF16 : SL_F32;
    /* on the CPU: refused with a message where the kernel would kill the process. The first
     * pass runs every prompt padded to the longest (at most --chunk tokens each); the caches
     * hold keys and values of every layer at every position; per prompt the decoder, the
     * sampler and the loop keep a few vocabulary-sized rows (the logits of its last token in
     * the decoder's rows, its feed and the loop's copy, 4 bytes each; the sampler's
     * probabilities and indices, 12) and the new tokens */
    const int first = longest < chunk ? longest : (int)chunk;
    const double sampling =
        (double)pl.n * (24.0 * mc.vocab_size + 4.0 * mc.hidden_size + 4.0 * (double)max_new);
    const sl_forward_need fn = {
        .cfg = &mc,
        .compute = dt,
        .tokens = (int64_t)pl.n * first,
        .extra = {2.0 * mc.num_hidden_layers * pl.n * (double)max_len * mc.num_key_value_heads *
                      mc.head_dim * (double)sl_dtype_size(dt),
                  sampling},
        .extra_what = {"KV cache", "sampling"},
        .extra_advice = {"Shorter or fewer prompts, or a smaller --max-new, lower the KV cache",
                         "Fewer prompts or a smaller --max-new lower the sampling rows"},
        .weights_path = weights,
        .advice = "Fewer prompts or a smaller --chunk lower the activations"};
    if (sl_cli_check_forward_memory(&fn, be, host_memory) != 0) goto done;
    m = sl_model_create_mem(&mc, be, NULL, pl.n, 1, NULL, dt, SL_MEMORY_FORWARD_ONLY, err,
                            sizeof err);
    if (!m || sl_weights_load(&wts, m, err, sizeof err) != 0) {
        sl_error("%s", err);
        goto done;
    }
    dec = sl_decoder_create(m, pl.n, max_len, (int)chunk, err, sizeof err);
    if (!dec) {
        sl_error("%s", err);
        goto done;
    }
    samplers = sl_xcalloc((size_t)pl.n, sizeof *samplers);
    for (int p = 0; p < pl.n; p++) sl_sampler_init(&samplers[p], &sp, mc.vocab_size, (uint64_t)p);
    out = sl_xcalloc((size_t)pl.n, sizeof *out);
    out_n = sl_xcalloc((size_t)pl.n, sizeof *out_n);
    printer pr = {.codec = codec, .stream = pl.n == 1};
    const sl_generate_opts go = {.max_new = (int)max_new,
                                 .stop_id = stop_at_eod ? eod : -1,
                                 .on_token = on_token,
                                 .user = &pr};
    if (pr.stream) {
        fwrite(pl.text[0], 1, pl.len[0], stdout);
        fflush(stdout);
    }
    const double t0 = now_s();
    if (sl_generate(dec, samplers, (const int32_t *const *)ids, n_ids, &go, out, out_n, err,
                    sizeof err) != 0) {
        sl_error("%s", err);
        goto done;
    }
    const double dt_s = now_s() - t0;
    long long total = 0;
    for (int p = 0; p < pl.n; p++) {
        total += out_n[p];
        if (pr.stream) continue;
        printf("--- %d ---\n", p + 1);
        fwrite(pl.text[p], 1, pl.len[p], stdout);
        print_tokens(codec, out[p], out_n[p]);
        printf("\n");
    }
    if (pr.stream) printf("\n");
    fflush(stdout);
    fprintf(stderr,
            "sluice generate: %lld token%s in %.2f s (%.1f tokens/s, prompts and KV cache "
            "included), %s, %s backend, %s\n",
            total, total == 1 ? "" : "s", dt_s, dt_s > 0 ? (double)total / dt_s : 0.0,
            sl_text_codec_name(codec), sl_backend_name(be), precision);
    rc = 0;
done:
    for (int p = 0; p < pl.n; p++) {
        free(pl.text[p]);
        free(ids[p]);
        if (out) free(out[p]);
        if (samplers) sl_sampler_free(&samplers[p]);
    }
    free(pl.text);
    free(pl.len);
    free(ids);
    free(n_ids);
    free(out);
    free(out_n);
    free(samplers);
    sl_decoder_free(dec);
    sl_model_free(m);
    sl_text_codec_free(codec);
    sl_weights_close(&wts);
    if (be) sl_backend_free(be);
    sl_comm_finalize(world);
    return rc;
}
