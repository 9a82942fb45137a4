/* launch/cmd_ckpt.c - `sluice ckpt info | verify | export` (docs/checkpoint-format.md). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fsutil.h"
#include "core/log.h"
#include "io/checkpoint.h"
#include "io/tokenizer.h"
#include "launch/commands.h"
#include "model/config.h"
#include "model/hf_export.h"

static void usage_main(FILE *f) {
    fprintf(f, "usage: sluice ckpt <info|verify|export> [options] PATH\n\n"
               "  info    step, tokens, world layout, tensors and sizes of a checkpoint\n"
               "  verify  full check: structure, coverage, every checksum (exit 1 on a problem)\n"
               "  export  the model weights as a Hugging Face directory (safetensors shards,\n"
               "          model.safetensors.index.json, config.json)\n\n"
               "PATH is a checkpoint directory (<out_dir>/checkpoints/step-<N>), or a run's\n"
               "output directory or its checkpoints/ directory, meaning the newest committed\n"
               "checkpoint there. Run 'sluice ckpt <subcommand> --help' for its options.\n");
}

static void usage_info(FILE *f) {
    fprintf(f, "usage: sluice ckpt info [--tensors] PATH\n\n"
               "Prints the step, the format and sluice versions, the number of ranks that wrote\n"
               "the checkpoint, the generic fields of the trainer state (tokens, layout and\n"
               "other scalar fields), the tensor count, the total bytes and each data file's\n"
               "size. Reads only the JSON files; `verify` checks the data.\n\n"
               "  --tensors   also list every tensor: name, dtype, shape, pieces\n"
               "  -h, --help  this help\n");
}

static void usage_verify(FILE *f) {
    fprintf(f, "usage: sluice ckpt verify [--quiet] PATH\n\n"
               "Checks the checkpoint completely: the COMMIT index and the checksums of the\n"
               "manifests and train_state.json it records, every manifest, that the pieces of\n"
               "every tensor cover it exactly once with one shape and dtype, every data file's\n"
               "safetensors header against the manifest, and the CRC-32C of every piece.\n"
               "Prints one line per problem. Exit status 0 when sound, 1 when any problem was\n"
               "found, 2 on a usage error.\n\n"
               "  --quiet     print only the problems\n"
               "  -h, --help  this help\n");
}

static void usage_export(FILE *f) {
    fprintf(f,
            "usage: sluice ckpt export PATH -o DIR [options]\n\n"
            "Writes the model tensors of the checkpoint (every tensor whose name does not start\n"
            "with \"optim.\": optimizer state is not exported) to DIR as a Hugging Face weights\n"
            "directory: model.safetensors, or model-0000i-of-0000K.safetensors shards, plus\n"
            "model.safetensors.index.json and config.json. config.json is the trainer state's\n"
            "\"hf_config\" object when present, else made from its \"config\".\"model\" section;\n"
            "without either, no config.json is written (a warning says so). The run's\n"
            "tokenizer (data.tokenizer, recorded in the trainer state with its SHA-256, which\n"
            "must still match) is copied beside them: tokenizer.json and the companion files\n"
            "next to it (tokenizer_config.json, ...).\n\n"
            "The export is written beside DIR and replaces it in one rename once complete: a\n"
            "failed export leaves DIR as it was. An earlier export's weights in DIR are\n"
            "replaced; its other files are kept (docs/checkpoint-format.md, \"Tools\").\n\n"
            "options:\n"
            "  -o, --output DIR     output directory (created if missing)\n"
            "  --format F           qwen3_moe (default: Qwen3-MoE names, what sluice reads\n"
            "                       back) or qwen3_next (Qwen3-Next's layout, which Hugging Face\n"
            "                       transformers' Qwen3NextForCausalLM runs; docs/safetensors.md)\n"
            "  --dtype fp32|bf16    dtype of the floating-point tensors (default fp32;\n"
            "                       bf16 rounds to nearest even)\n"
            "  --shard-size SIZE    most bytes per file, K/M/G/T suffixes (default 2G; a tensor\n"
            "                       larger than that gets a file of its own)\n"
            "  --tokenizer PATH     copy this tokenizer.json (or directory) instead of the run's\n"
            "  --no-tokenizer       copy no tokenizer\n"
            "  -h, --help           this help\n");
}

/* "1.23 GB" style (decimal units, as disk sizes are usually quoted). */
static const char *human(char *buf, size_t n, uint64_t b) {
    const char *u[] = {"B", "kB", "MB", "GB", "TB"};
    double v = (double)b;
    int k = 0;
    while (v >= 1000 && k < 4) v /= 1000, k++;
    if (k == 0)
        snprintf(buf, n, "%" PRIu64 " B", b);
    else
        snprintf(buf, n, "%.2f %s", v, u[k]);
    return buf;
}

static void print_shape(int ndim, const int64_t *shape) {
    printf("[");
    for (int d = 0; d < ndim; d++) printf("%s%" PRId64, d ? ", " : "", shape[d]);
    printf("]");
}

static int cmd_info(int argc, char **argv) {
    bool tensors = false;
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (sl_cli_is_help(argv[i])) {
            usage_info(stdout);
            return 0;
        } else if (strcmp(argv[i], "--tensors") == 0) {
            tensors = true;
        } else if (argv[i][0] == '-') {
            return sl_cli_usage_error("ckpt info", "unknown option '%s'", argv[i]);
        } else if (!path) {
            path = argv[i];
        } else {
            return sl_cli_usage_error("ckpt info", "unexpected argument '%s' (one PATH expected)",
                                      argv[i]);
        }
    }
    if (!path) return sl_cli_usage_error("ckpt info", "PATH is required");
    char err[4096], hb[32];
    sl_ckpt *c = sl_ckpt_open(path, err, sizeof err);
    if (!c) {
        sl_error("%s", err);
        return 1;
    }
    printf("checkpoint  %s\n", sl_ckpt_dir(c));
    printf("step        %" PRId64 "\n", sl_ckpt_step(c));
    printf("format      %d (written by sluice %s)\n", sl_ckpt_format_version(c),
           sl_ckpt_sluice_version(c));
    printf("ranks       %d wrote it\n", sl_ckpt_world_size(c));
    /* the trainer state: its generic fields (scalars), the layout, and the names of the rest */
    const cJSON *ts = sl_ckpt_train_state(c);
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(ts, "tokens");
    if (cJSON_IsNumber(tok)) printf("tokens      %.0f\n", tok->valuedouble);
    const cJSON *lay = cJSON_GetObjectItemCaseSensitive(ts, "layout");
    if (lay) {
        char *s = cJSON_PrintUnformatted(lay);
        printf("layout      %s\n", s ? s : "?");
        cJSON_free(s);
    }
    char others[1024] = "";
    size_t on = 0;
    for (const cJSON *it = ts ? ts->child : NULL; it; it = it->next) {
        if (!it->string || strcmp(it->string, "tokens") == 0 || strcmp(it->string, "layout") == 0)
            continue;
        /* the state's step is the checkpoint's, printed first; only a different one is news */
        if (strcmp(it->string, "step") == 0 && cJSON_IsNumber(it) &&
            it->valuedouble == (double)sl_ckpt_step(c))
            continue;
        if (cJSON_IsNumber(it))
            printf("%-11s %.17g\n", it->string, it->valuedouble);
        else if (cJSON_IsString(it))
            printf("%-11s %s\n", it->string, it->valuestring);
        else if (cJSON_IsBool(it))
            printf("%-11s %s\n", it->string, cJSON_IsTrue(it) ? "true" : "false");
        else if (on + strlen(it->string) + 3 < sizeof others)
            on += (size_t)snprintf(others + on, sizeof others - on, "%s%s", on ? ", " : "",
                                   it->string);
    }
    if (on) printf("state       also holds: %s\n", others);
    int nt = sl_ckpt_tensor_count(c), nopt = 0;
    uint64_t opt_bytes = 0;
    for (int i = 0; i < nt; i++) {
        sl_ckpt_tensor t;
        sl_ckpt_tensor_at(c, i, &t);
        if (strncmp(t.name, "optim.", 6) == 0) nopt++, opt_bytes += (uint64_t)t.numel * t.elem_size;
    }
    printf("tensors     %d (%d model, %d optimizer state)\n", nt, nt - nopt, nopt);
    const uint64_t total = sl_ckpt_data_bytes(c);
    char hm[32], ho[32];
    printf("bytes       %s of tensor data (%s model, %s optimizer state)\n",
           human(hb, sizeof hb, total), human(hm, sizeof hm, total - opt_bytes),
           human(ho, sizeof ho, opt_bytes));
    printf("files       %d\n", sl_ckpt_file_count(c));
    for (int i = 0; i < sl_ckpt_file_count(c); i++) {
        uint64_t b;
        const char *name = sl_ckpt_file_at(c, i, &b);
        printf("  %-28s %12" PRIu64 " bytes (%s)\n", name, b, human(hb, sizeof hb, b));
    }
    if (tensors) {
        printf("tensor list (name, dtype, shape, pieces):\n");
        for (int i = 0; i < nt; i++) {
            sl_ckpt_tensor t;
            sl_ckpt_tensor_at(c, i, &t);
            printf("  %s %s ", t.name, t.dtype);
            print_shape(t.ndim, t.shape);
            printf(" %d\n", t.pieces);
        }
    }
    sl_ckpt_close(c);
    return 0;
}

static void print_problem(void *user, const char *msg) {
    (void)user;
    fprintf(stderr, "sluice: error: %s\n", msg);
}

static int cmd_verify(int argc, char **argv) {
    bool quiet = false;
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (sl_cli_is_help(argv[i])) {
            usage_verify(stdout);
            return 0;
        } else if (strcmp(argv[i], "--quiet") == 0) {
            quiet = true;
        } else if (argv[i][0] == '-') {
            return sl_cli_usage_error("ckpt verify", "unknown option '%s'", argv[i]);
        } else if (!path) {
            path = argv[i];
        } else {
            return sl_cli_usage_error("ckpt verify", "unexpected argument '%s' (one PATH expected)",
                                      argv[i]);
        }
    }
    if (!path) return sl_cli_usage_error("ckpt verify", "PATH is required");
    sl_ckpt_verify_stats st;
    int problems = sl_ckpt_verify(path, print_problem, NULL, &st);
    if (problems) {
        fprintf(stderr, "%s: DAMAGED (%d problem%s)\n", path, problems, problems == 1 ? "" : "s");
        return 1;
    }
    if (!quiet) {
        char hb[32];
        printf("%s: OK (step %" PRId64 ", %d tensor%s in %d piece%s, %d file%s, %s checksummed)\n",
               path, st.step, st.tensors, st.tensors == 1 ? "" : "s", st.pieces,
               st.pieces == 1 ? "" : "s", st.files, st.files == 1 ? "" : "s",
               human(hb, sizeof hb, st.bytes_checked));
    }
    return 0;
}

/* The model of a checkpoint: the trainer state's "hf_config", or its "config"."model" section
 * (through the model's own Hugging Face mapping). -1 with a message when neither is there or it
 * does not parse; *hf_text (malloc'ed, may be NULL) receives "hf_config" as it is stored. */
static int checkpoint_model(const sl_ckpt *c, sl_model_config *m, char **hf_text, char *err,
                            size_t errlen) {
    const cJSON *ts = sl_ckpt_train_state(c);
    const cJSON *hf = cJSON_GetObjectItemCaseSensitive(ts, "hf_config");
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(ts, "config");
    const cJSON *model = cJSON_IsObject(hf) ? hf : cJSON_GetObjectItemCaseSensitive(cfg, "model");
    *hf_text = NULL;
    if (!cJSON_IsObject(model))
        return sl_fail(err, errlen,
                       "the trainer state holds neither \"hf_config\" nor "
                       "\"config\".\"model\"");
    if (cJSON_IsObject(hf)) {
        char *s = cJSON_Print(hf);
        if (s) {
            *hf_text = sl_xmalloc(strlen(s) + 2);
            sprintf(*hf_text, "%s\n", s);
            cJSON_free(s);
        }
    }
    char *text = cJSON_PrintUnformatted(model);
    const int rc = text ? sl_model_config_from_hf_json(text,
                                                       hf ? "train_state.json hf_config"
                                                          : "train_state.json config.model",
                                                       m, err, errlen)
                        : sl_fail(err, errlen, "out of memory");
    cJSON_free(text);
    return rc;
}

/* The Hugging Face tensors of a checkpoint tensor in the export's layout (model/hf_export.h:
 * fused gate/up projections and expert stacks are split; Qwen3-Next's transforms); the routers'
 * selection biases are training state, not weights. */
typedef struct {
    sl_ckpt_export_entry *out;
    int n, max;
} hf_cut;

static void hf_emit(void *user, const sl_ckpt_export_entry *e) {
    hf_cut *h = user;
    if (h->n < h->max) h->out[h->n] = *e;
    h->n++;
}

static int hf_map(void *user, const sl_ckpt_tensor *t, sl_ckpt_export_entry *out, int max,
                  char *err, size_t errlen) {
    sl_hf_layout *layout = user;
    if (strncmp(t->name, "router.bias.", 12) == 0) return 0;
    if (t->ndim > 3) {
        snprintf(err, errlen, "%s: %d dimensions, not a model weight", t->name, t->ndim);
        return -1;
    }
    hf_cut h = {out, 0, max};
    sl_hf_layout_map(layout, t->name, t->ndim, t->shape, 0, hf_emit, &h);
    if (h.n > max) {
        snprintf(err, errlen, "%s: splits into %d tensors, more than %d", t->name, h.n, max);
        return -1;
    }
    return h.n;
}

/* The tokenizer files for the export: --tokenizer PATH, else the trainer state's "tokenizer"
 * (path and SHA-256, which the file must still have). */
typedef struct {
    const sl_ckpt *c;
    const char *override;
    const char *src; /* set when copied */
    int copied;      /* files */
} export_tok;

/* The export's extra_files: the tokenizer's into the directory being written. 0 (also when
 * there is none), or -1 with a message. */
static int export_tokenizer(void *user, const char *stage, char *err, size_t errlen) {
    export_tok *t = user;
    const char *src = t->override;
    uint8_t want[SL_TOKENIZER_HASH_BYTES];
    const uint8_t *expect = NULL;
    if (!src) {
        const cJSON *tk = cJSON_GetObjectItemCaseSensitive(sl_ckpt_train_state(t->c), "tokenizer");
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(tk, "path");
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(tk, "sha256");
        if (!cJSON_IsString(p)) return 0; /* the run had no data.tokenizer */
        src = p->valuestring;
        if (cJSON_IsString(h) && strlen(h->valuestring) == 2 * SL_TOKENIZER_HASH_BYTES) {
            for (int i = 0; i < SL_TOKENIZER_HASH_BYTES; i++)
                want[i] = (uint8_t)strtoul(
                    (char[3]){h->valuestring[2 * i], h->valuestring[2 * i + 1], 0}, NULL, 16);
            expect = want;
        }
    }
    char e[1024];
    const int n = sl_tokenizer_copy_files(src, stage, expect, e, sizeof e);
    if (n < 0)
        return sl_fail(err, errlen,
                       "the tokenizer%s: %s (--tokenizer PATH copies another, --no-tokenizer none)",
                       t->override ? "" : " the run trained with", e);
    t->src = src;
    t->copied = n;
    return 0;
}

static int cmd_export(int argc, char **argv) {
    const char *path = NULL, *out = NULL, *dtype = "F32", *tokenizer = NULL;
    sl_hf_format format = SL_HF_QWEN3_MOE;
    bool no_tokenizer = false;
    uint64_t shard = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (sl_cli_is_help(a)) {
            usage_export(stdout);
            return 0;
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
            if (++i >= argc) {
                fprintf(sl_cli_error_stream(), "sluice ckpt export: error: %s needs a value\n", a);
                return 2;
            }
            out = argv[i];
        } else if (strcmp(a, "--dtype") == 0) {
            if (++i >= argc) {
                fprintf(sl_cli_error_stream(),
                        "sluice ckpt export: error: --dtype needs a value\n");
                return 2;
            }
            const char *v = argv[i];
            if (strcmp(v, "fp32") == 0 || strcmp(v, "f32") == 0 || strcmp(v, "F32") == 0)
                dtype = "F32";
            else if (strcmp(v, "bf16") == 0 || strcmp(v, "BF16") == 0)
                dtype = "BF16";
            else {
                fprintf(sl_cli_error_stream(),
                        "sluice ckpt export: error: --dtype: '%s' (expected fp32 or bf16)\n", v);
                return 2;
            }
        } else if (strcmp(a, "--format") == 0) {
            if (++i >= argc || sl_hf_format_parse(argv[i], &format) != 0) {
                fprintf(sl_cli_error_stream(),
                        "sluice ckpt export: error: --format: '%s' (expected qwen3_moe or "
                        "qwen3_next)\n",
                        i < argc ? argv[i] : "nothing");
                return 2;
            }
        } else if (strcmp(a, "--shard-size") == 0) {
            if (++i >= argc || sl_cli_parse_u64(argv[i], true, &shard) != 0 || shard == 0) {
                fprintf(sl_cli_error_stream(),
                        "sluice ckpt export: error: --shard-size: a size like 2G expected\n");
                return 2;
            }
        } else if (strcmp(a, "--tokenizer") == 0) {
            if (++i >= argc) {
                fprintf(sl_cli_error_stream(),
                        "sluice ckpt export: error: --tokenizer needs a value\n");
                return 2;
            }
            tokenizer = argv[i];
        } else if (strcmp(a, "--no-tokenizer") == 0) {
            no_tokenizer = true;
        } else if (a[0] == '-') {
            return sl_cli_usage_error("ckpt export", "unknown option '%s'", a);
        } else if (!path) {
            path = a;
        } else {
            return sl_cli_usage_error("ckpt export", "unexpected argument '%s' (one PATH expected)",
                                      a);
        }
    }
    if (!path || !out)
        return sl_cli_usage_error("ckpt export", "%s required",
                                  !path && !out ? "PATH and -o DIR are"
                                  : !path       ? "PATH is"
                                                : "-o DIR is");
    char err[4096];
    sl_ckpt *c = sl_ckpt_open(path, err, sizeof err);
    if (!c) {
        sl_error("%s", err);
        return 1;
    }
    export_tok tok = {.c = c, .override = tokenizer};
    sl_model_config mc;
    char *stored = NULL, *config = NULL;
    sl_hf_layout layout;
    const bool have_model = checkpoint_model(c, &mc, &stored, err, sizeof err) == 0;
    if (!have_model && format == SL_HF_QWEN3_NEXT) { /* its cuts need the model's shape */
        sl_error("%s: --format qwen3_next: %s", sl_ckpt_dir(c), err);
        sl_ckpt_close(c);
        return 1;
    }
    if (!have_model) sl_warn("%s: no config.json written: %s", sl_ckpt_dir(c), err);
    sl_hf_layout_init(&layout, format, &mc);
    /* Qwen3-MoE: the stored hf_config as it is; else the layout's (YaRN context stated) */
    if (have_model)
        config = format == SL_HF_QWEN3_MOE && stored ? stored : sl_hf_layout_config_json(&layout);
    sl_ckpt_export_opts o = {.dtype = dtype,
                             .max_shard_bytes = shard,
                             .config_json = config,
                             .skip_prefix = "optim.",
                             .map = hf_map,
                             .map_user = &layout,
                             .extra_files = no_tokenizer ? NULL : export_tokenizer,
                             .extra_user = &tok};
    int n = sl_ckpt_export_hf(c, out, &o, err, sizeof err);
    if (n < 0) {
        sl_error("%s", err);
    } else {
        if (tok.src)
            printf("copied the tokenizer %s to %s (%d file%s)\n", tok.src, out, tok.copied,
                   tok.copied == 1 ? "" : "s");
        printf("exported %d tensor%s of step %" PRId64 " to %s (%s, %s)\n", n, n == 1 ? "" : "s",
               sl_ckpt_step(c), out, sl_hf_format_name(format),
               strcmp(dtype, "BF16") == 0 ? "bf16" : "fp32");
    }
    if (config != stored) free(config);
    free(stored);
    sl_hf_layout_free(&layout);
    sl_ckpt_close(c);
    return n < 0 ? 1 : 0;
}

int sl_cmd_ckpt(int argc, char **argv) {
    if (argc < 2)
        return sl_cli_usage_error("ckpt", "a subcommand is required (info, verify or export)");
    const char *sub = argv[1];
    if (sl_cli_is_help(sub)) {
        usage_main(stdout);
        return 0;
    }
    if (strcmp(sub, "info") == 0) return cmd_info(argc - 1, argv + 1);
    if (strcmp(sub, "verify") == 0) return cmd_verify(argc - 1, argv + 1);
    if (strcmp(sub, "export") == 0) return cmd_export(argc - 1, argv + 1);
    return sl_cli_usage_error("ckpt", "unknown subcommand '%s' (info, verify or export)", sub);
}
