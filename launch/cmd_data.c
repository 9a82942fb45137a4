/* launch/cmd_data.c - `sluice data build | info | verify` (docs/data.md); `show` is
 * launch/cmd_data_show.c. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "io/build.h"
#include "io/paths.h"
#include "io/shard.h"
#include "launch/commands.h"

#define DATA_SUBS "build, info, show or verify"

static void usage_main(FILE *f) {
    fprintf(f, "usage: sluice data <build|info|show|verify> [options]\n\n"
               "  build   tokenize or import a corpus into zstd token shards\n"
               "  info    tokens, documents, frames and compression ratio of shards\n"
               "  show    print a shard's documents as token ids or as text\n"
               "  verify  full integrity check of shards (exit status 0 = sound, 1 = damaged)\n\n"
               "Run 'sluice data <subcommand> --help' for its options.\n");
}

static void usage_build(FILE *f) {
    fprintf(
        f,
        "usage: sluice data build -o DIR [options] INPUT...\n\n"
        "Writes DIR/PREFIX-00000.shard.zst, ... (docs/shard-format.md).\n\n"
        "input formats (--format, default: from the file name or contents):\n"
        "  text      plain text, byte-level tokenizer (ids 0-255, end-of-document 256, vocab 257)\n"
        "  jsonl     one JSON object per line; its \"text\" field is a document (byte tokenizer)\n"
        "            (text and jsonl with --tokenizer: encoded by a Hugging Face tokenizer.json)\n"
        "  raw       headerless little-endian token ids (--dtype uint16|uint32, --vocab N)\n"
        "  llmc      llm.c .bin shards (magic 20240520; version 1 = uint16, 7 = uint32)\n"
        "  megatron  Megatron-LM indexed dataset: PREFIX, PREFIX.bin or PREFIX.idx (--vocab N)\n\n"
        "options:\n"
        "  -o, --output DIR      output directory (created if missing)\n"
        "  --prefix NAME         shard file name prefix (default: shard)\n"
        "  --format FORMAT       auto|text|jsonl|raw|llmc|megatron (default: auto)\n"
        "  --text-docs MODE      text: a document is a 'file' (default), a 'line', or a\n"
        "                        'paragraph' (lines up to an empty line)\n"
        "  --tokenizer PATH      text/jsonl: encode with this tokenizer.json (or the directory\n"
        "                        holding one): byte-level BPE of the GPT-2 / Llama-3 / Qwen\n"
        "                        family, ids equal to Hugging Face's; documents are encoded on\n"
        "                        --threads threads, in order; the text must be UTF-8\n"
        "  --dtype TYPE          raw: uint16 or uint32\n"
        "  --vocab N             vocabulary size; every token id must be < N (default: text 257,\n"
        "                        llmc 50257 for version 1 and 128256 for version 7)\n"
        "  --eod ID|none         raw: a document ends after each ID; llmc: a document begins at\n"
        "                        each ID (default 50256 for version 1, 128000 for version 7)\n"
        "  --eod TOKEN|ID|none   --tokenizer: appended to every document (default: the first of\n"
        "                        <|endoftext|>, <|end_of_text|>, </s> the tokenizer has)\n"
        "  --add-eod ID          megatron: append ID to every document\n"
        "  --shard-size SIZE     target compressed bytes per shard, K/M/G/T suffixes\n"
        "                        (default 1G)\n"
        "  --frame-tokens N      tokens per zstd frame (default 262144, at most 16777216)\n"
        "  --token-bytes 2|4     stored token width (default: 2 when vocab <= 65536)\n"
        "  --level N             zstd compression level (default 3)\n"
        "  --threads N           compression (and --tokenizer encoding) threads (default: all\n"
        "                        cores)\n"
        "  --force               replace existing PREFIX-*.shard.zst files in DIR\n"
        "  --quiet               print nothing but errors\n"
        "  -h, --help            this help\n");
}

static void usage_info(FILE *f) {
    fprintf(f, "usage: sluice data info [--json] PATH...\n\n"
               "Prints tokens, documents, frames and the compression ratio (stored token bytes /\n"
               "file bytes) of each shard and the total, its vocabulary, end-of-document token\n"
               "and tokenizer (the first 32 hex digits of the tokenizer.json's SHA-256, or none).\n"
               "PATH is a shard, a directory of *.shard.zst shards or a glob (quoted; see\n"
               "'sluice data verify --help' for what it matches). Only headers and indexes are\n"
               "read.\n\n"
               "  --json      one JSON object per shard, then a total object\n"
               "  -h, --help  this help\n");
}

static void usage_verify(FILE *f) {
    fprintf(f, "usage: sluice data verify [--quiet] PATH...\n\n"
               "Checks every shard completely: header and index checksums, every frame's\n"
               "CRC-32C and zstd content checksum, token counts, document offsets, and that\n"
               "every token id is below the vocabulary size. PATH is a shard, a directory (its\n"
               "*.shard.zst files) or a quoted glob, whose directories count as directory\n"
               "arguments; what a glob matches that is not a shard (a file that does not begin\n"
               "as one and is not named *.shard.zst, a directory without shards) is skipped\n"
               "with a note, while a file named that is not a shard is an error. Exit status 0\n"
               "when every shard is sound, 1 when any problem was found (each is printed) or a\n"
               "PATH names no shard, 2 on a usage error.\n\n"
               "  --quiet     print only the problems\n"
               "  -h, --help  this help\n");
}

/* Matches "--name value" or "--name=value"; advances *i. */
static const char *opt_value(int argc, char **argv, int *i, const char *name) {
    size_t n = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, n) != 0) return NULL;
    if (a[n] == '=') return a + n + 1;
    if (a[n] != 0) return NULL;
    if (*i + 1 >= argc) {
        fprintf(sl_cli_error_stream(), "sluice data build: error: %s needs a value\n", name);
        return "";
    }
    return argv[++*i];
}

static int bad_value(const char *opt, const char *v) {
    fprintf(sl_cli_error_stream(), "sluice data build: error: %s: invalid value '%s'\n", opt, v);
    return 2;
}

static int cmd_build(int argc, char **argv) {
    sl_build_opts o = {.vocab = -1, .eod = -1, .add_eod = -1, .prefix = "shard"};
    char **inputs = sl_xcalloc((size_t)argc, sizeof(char *));
    int n_in = 0, rc = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        uint64_t u;
        if (sl_cli_is_help(a)) {
            usage_build(stdout);
            rc = 0;
            goto out;
        } else if ((v = opt_value(argc, argv, &i, "--output")) ||
                   (v = opt_value(argc, argv, &i, "-o"))) {
            if (!*v) goto out;
            o.out_dir = v;
        } else if ((v = opt_value(argc, argv, &i, "--prefix"))) {
            if (!*v) goto out;
            o.prefix = v;
        } else if ((v = opt_value(argc, argv, &i, "--format"))) {
            if (strcmp(v, "auto") == 0)
                o.format = SL_FMT_AUTO;
            else if (strcmp(v, "text") == 0)
                o.format = SL_FMT_TEXT;
            else if (strcmp(v, "jsonl") == 0)
                o.format = SL_FMT_JSONL;
            else if (strcmp(v, "raw") == 0)
                o.format = SL_FMT_RAW;
            else if (strcmp(v, "llmc") == 0)
                o.format = SL_FMT_LLMC;
            else if (strcmp(v, "megatron") == 0)
                o.format = SL_FMT_MEGATRON;
            else {
                rc = bad_value("--format", v);
                goto out;
            }
        } else if ((v = opt_value(argc, argv, &i, "--text-docs"))) {
            if (strcmp(v, "file") == 0)
                o.text_docs = SL_TEXT_DOC_FILE;
            else if (strcmp(v, "line") == 0)
                o.text_docs = SL_TEXT_DOC_LINE;
            else if (strcmp(v, "paragraph") == 0)
                o.text_docs = SL_TEXT_DOC_PARAGRAPH;
            else {
                rc = bad_value("--text-docs", v);
                goto out;
            }
        } else if ((v = opt_value(argc, argv, &i, "--dtype"))) {
            if (strcmp(v, "uint16") == 0 || strcmp(v, "u16") == 0)
                o.raw_token_bytes = 2;
            else if (strcmp(v, "uint32") == 0 || strcmp(v, "u32") == 0)
                o.raw_token_bytes = 4;
            else {
                rc = bad_value("--dtype", v);
                goto out;
            }
        } else if ((v = opt_value(argc, argv, &i, "--vocab"))) {
            if (sl_cli_parse_u64(v, false, &u) || u < 1 || u > INT32_MAX) {
                rc = bad_value("--vocab", v);
                goto out;
            }
            o.vocab = (int64_t)u;
        } else if ((v = opt_value(argc, argv, &i, "--eod"))) {
            if (!*v) goto out;
            if (strcmp(v, "none") == 0)
                o.eod = -2;
            else if (sl_cli_parse_u64(v, false, &u) == 0 && u <= INT32_MAX)
                o.eod = (int64_t)u;
            else
                o.eod_token = v; /* a token's name: needs --tokenizer (checked by the build) */
        } else if ((v = opt_value(argc, argv, &i, "--tokenizer"))) {
            if (!*v) goto out;
            o.tokenizer = v;
        } else if ((v = opt_value(argc, argv, &i, "--add-eod"))) {
            if (sl_cli_parse_u64(v, false, &u) || u > INT32_MAX) {
                rc = bad_value("--add-eod", v);
                goto out;
            }
            o.add_eod = (int64_t)u;
        } else if ((v = opt_value(argc, argv, &i, "--shard-size"))) {
            if (sl_cli_parse_u64(v, true, &u) || u == 0) {
                rc = bad_value("--shard-size", v);
                goto out;
            }
            o.shard_bytes = u;
        } else if ((v = opt_value(argc, argv, &i, "--frame-tokens"))) {
            if (sl_cli_parse_u64(v, true, &u) || u == 0 || u > SL_SHARD_MAX_FRAME_TOKENS) {
                rc = bad_value("--frame-tokens", v);
                goto out;
            }
            o.frame_tokens = (uint32_t)u;
        } else if ((v = opt_value(argc, argv, &i, "--token-bytes"))) {
            if (strcmp(v, "2") != 0 && strcmp(v, "4") != 0) {
                rc = bad_value("--token-bytes", v);
                goto out;
            }
            o.token_bytes = atoi(v);
        } else if ((v = opt_value(argc, argv, &i, "--level"))) {
            char *end;
            long l = strtol(v, &end, 10);
            if (!*v || *end || l < -100 || l > 22) {
                rc = bad_value("--level", v);
                goto out;
            }
            o.level = (int)l;
        } else if ((v = opt_value(argc, argv, &i, "--threads"))) {
            if (sl_cli_parse_u64(v, false, &u) || u < 1 || u > 1024) {
                rc = bad_value("--threads", v);
                goto out;
            }
            o.threads = (int)u;
        } else if (strcmp(a, "--force") == 0) {
            o.force = true;
        } else if (strcmp(a, "--quiet") == 0) {
            o.quiet = true;
        } else if (a[0] == '-' && a[1]) {
            rc = sl_cli_usage_error("data build", "unknown option '%s'", a);
            goto out;
        } else {
            inputs[n_in++] = argv[i];
        }
    }
    if (!o.out_dir || n_in == 0) {
        rc = sl_cli_usage_error("data build", "%s",
                                !o.out_dir ? "-o DIR is required" : "INPUT is required");
        goto out;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    sl_build_result res;
    char err[1024];
    if (sl_data_build(&o, inputs, n_in, &res, err, sizeof err) != 0) {
        sl_error("%s", err);
        rc = 1;
        goto out;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double sec = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (!o.quiet) {
        printf("built %d shard%s in %s: %llu token%s, %llu document%s, %llu bytes (%.2fx of "
               "%d-byte tokens), vocab %u, %.1f s\n",
               res.n_shards, res.n_shards == 1 ? "" : "s", o.out_dir,
               (unsigned long long)res.tokens, res.tokens == 1 ? "" : "s",
               (unsigned long long)res.docs, res.docs == 1 ? "" : "s",
               (unsigned long long)res.bytes,
               res.bytes ? (double)res.tokens * res.token_bytes / (double)res.bytes : 0.0,
               res.token_bytes, res.vocab, sec);
        if (res.tokenizer[0])
            printf("tokenizer %s (sha256 %s...), end-of-document %s%lld\n", o.tokenizer,
                   res.tokenizer, res.eod >= 0 ? "" : "none",
                   res.eod >= 0 ? (long long)res.eod : 0);
    }
    rc = 0;
out:
    free(inputs);
    return rc;
}

static bool is_shard_name(const char *path) {
    const size_t n = strlen(path), m = strlen(SL_SHARD_SUFFIX);
    return n > m && strcmp(path + n - m, SL_SHARD_SUFFIX) == 0;
}

int sl_data_cli_files(const char *arg, bool notes, char ***files, int *n, int *skipped) {
    char err[1024];
    sl_data_origin *origin;
    int nf;
    if (sl_data_resolve_arg(arg, files, &origin, &nf, err, sizeof err) != 0) {
        sl_error("%s", err);
        return -1;
    }
    int kept = 0;
    for (int j = 0; j < nf; j++) {
        char *f = (*files)[j];
        const char *why = NULL;
        if (origin[j] == SL_DATA_EMPTY_DIR)
            why = "a directory without *" SL_SHARD_SUFFIX " shards";
        else if (origin[j] == SL_DATA_GLOB_MATCH && !is_shard_name(f) && sl_shard_not_a_shard(f))
            why = "not a shard";
        if (!why) {
            (*files)[kept++] = f;
            continue;
        }
        if (notes) fprintf(stderr, "sluice: note: %s: %s, skipped (a match of %s)\n", f, why, arg);
        free(f);
        if (skipped) ++*skipped;
    }
    free(origin);
    *n = kept;
    if (kept == 0) {
        sl_error("%s: no shards among the %d path%s this pattern matches", arg, nf,
                 nf == 1 ? "" : "s");
        sl_data_paths_free(*files, 0);
        *files = NULL;
        return -1;
    }
    return 0;
}

typedef struct {
    uint64_t files, tokens, docs, frames, file_bytes, token_bytes;
} totals;

/* Prints {"path":<path as a JSON string> (escaped by cJSON). */
static void print_json_path(const char *path) {
    cJSON *s = cJSON_CreateString(path);
    char *p = s ? cJSON_PrintUnformatted(s) : NULL;
    printf("{\"path\":%s", p ? p : "null");
    if (p) cJSON_free(p);
    cJSON_Delete(s);
}

static int cmd_info(int argc, char **argv) {
    bool json = false;
    int n_paths = 0;
    for (int i = 1; i < argc; i++) {
        if (sl_cli_is_help(argv[i])) {
            usage_info(stdout);
            return 0;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return sl_cli_usage_error("data info", "unknown option '%s'", argv[i]);
        } else {
            n_paths++;
        }
    }
    if (n_paths == 0) return sl_cli_usage_error("data info", "PATH is required");
    totals t = {0};
    int rc = 0;
    char err[1024];
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-' && argv[i][1]) continue;
        char **files;
        int nf;
        if (sl_data_cli_files(argv[i], true, &files, &nf, NULL) != 0) {
            rc = 1;
            continue;
        }
        for (int j = 0; j < nf; j++) {
            sl_shard *s = sl_shard_open(files[j], err, sizeof err);
            if (!s) {
                sl_error("%s", err);
                rc = 1;
                continue;
            }
            const sl_shard_header *h = sl_shard_hdr(s);
            double ratio = (double)h->n_tokens * h->token_bytes / (double)h->file_size;
            char eod[16], tok[40] = "none", tokq[40] = "null";
            if (h->eod_token == SL_SHARD_NO_EOD)
                snprintf(eod, sizeof eod, "none");
            else
                snprintf(eod, sizeof eod, "%u", h->eod_token);
            if (sl_shard_has_tokenizer(h)) {
                sl_shard_tokenizer_hex(h->tokenizer_hash, tok);
                snprintf(tokq, sizeof tokq, "\"%s\"", tok);
            }
            if (json) {
                print_json_path(files[j]);
                printf(",\"version\":%u,\"token_bytes\":%u,\"vocab_size\":%u,"
                       "\"eod_token\":%s,\"tokenizer_sha256\":%s,\"tokens\":%llu,"
                       "\"documents\":%llu,\"frames\":%llu,\"frame_tokens\":%u,"
                       "\"file_bytes\":%llu,\"compression_ratio\":%.4f}\n",
                       h->version, h->token_bytes, h->vocab_size,
                       h->eod_token == SL_SHARD_NO_EOD ? "null" : eod, tokq,
                       (unsigned long long)h->n_tokens, (unsigned long long)h->n_docs,
                       (unsigned long long)h->n_frames, h->frame_tokens,
                       (unsigned long long)h->file_size, ratio);
            } else {
                printf("%s\n  format version %u, %u-byte tokens, vocab %u, end-of-document %s\n"
                       "  tokenizer %s%s\n"
                       "  tokens %llu, documents %llu, frames %llu (up to %u tokens each)\n"
                       "  file %llu bytes, compression ratio %.3f (token bytes / file bytes)\n",
                       files[j], h->version, h->token_bytes, h->vocab_size, eod,
                       sl_shard_has_tokenizer(h) ? "sha256 " : "", tok,
                       (unsigned long long)h->n_tokens, (unsigned long long)h->n_docs,
                       (unsigned long long)h->n_frames, h->frame_tokens,
                       (unsigned long long)h->file_size, ratio);
            }
            t.files++;
            t.tokens += h->n_tokens;
            t.docs += h->n_docs;
            t.frames += h->n_frames;
            t.file_bytes += h->file_size;
            t.token_bytes += h->n_tokens * h->token_bytes;
            sl_shard_close(s);
        }
        sl_data_paths_free(files, nf);
    }
    double ratio = t.file_bytes ? (double)t.token_bytes / (double)t.file_bytes : 0;
    if (json)
        printf("{\"total\":true,\"shards\":%llu,\"tokens\":%llu,\"documents\":%llu,\"frames\":%llu,"
               "\"file_bytes\":%llu,\"compression_ratio\":%.4f}\n",
               (unsigned long long)t.files, (unsigned long long)t.tokens,
               (unsigned long long)t.docs, (unsigned long long)t.frames,
               (unsigned long long)t.file_bytes, ratio);
    else if (t.files > 1)
        printf("total: %llu shards, %llu tokens, %llu document%s, %llu frames, %llu bytes, "
               "compression ratio %.3f\n",
               (unsigned long long)t.files, (unsigned long long)t.tokens,
               (unsigned long long)t.docs, t.docs == 1 ? "" : "s", (unsigned long long)t.frames,
               (unsigned long long)t.file_bytes, ratio);
    return rc;
}

static void print_problem(void *user, const char *msg) {
    (*(int *)user)++;
    fprintf(stderr, "sluice: error: %s\n", msg);
}

static int cmd_verify(int argc, char **argv) {
    bool quiet = false;
    int n_paths = 0;
    for (int i = 1; i < argc; i++) {
        if (sl_cli_is_help(argv[i])) {
            usage_verify(stdout);
            return 0;
        } else if (strcmp(argv[i], "--quiet") == 0) {
            quiet = true;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return sl_cli_usage_error("data verify", "unknown option '%s'", argv[i]);
        } else {
            n_paths++;
        }
    }
    if (n_paths == 0) return sl_cli_usage_error("data verify", "PATH is required");
    /* shards verified, of them damaged; files named as shards that are none (each an error);
     * paths a glob matched that are no shards (each a note) */
    int shards = 0, damaged = 0, not_shards = 0, skipped = 0, bad_args = 0;
    char err[1024];
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-' && argv[i][1]) continue;
        char **list;
        int nf;
        if (sl_data_cli_files(argv[i], !quiet, &list, &nf, &skipped) != 0) {
            bad_args++;
            continue;
        }
        for (int j = 0; j < nf; j++) {
            sl_shard_header h;
            /* a file of another kind: one line saying so ("...: not a sluice shard"), no
             * verdict, and not counted as a shard */
            if (sl_shard_not_a_shard(list[j]) &&
                sl_shard_read_header(list[j], &h, err, sizeof err) != 0) {
                sl_error("%s", err);
                not_shards++;
                continue;
            }
            int problems = 0;
            sl_shard_verify_info info;
            sl_shard_verify(list[j], &info, print_problem, &problems);
            shards++;
            if (problems) {
                damaged++;
                fprintf(stderr, "%s: DAMAGED (%d problem%s)\n", list[j], problems,
                        problems == 1 ? "" : "s");
            } else if (!quiet) {
                const sl_shard_header *ih = &info.h;
                printf("%s: OK (%llu token%s, %llu document%s, %llu frame%s)\n", list[j],
                       (unsigned long long)ih->n_tokens, ih->n_tokens == 1 ? "" : "s",
                       (unsigned long long)ih->n_docs, ih->n_docs == 1 ? "" : "s",
                       (unsigned long long)ih->n_frames, ih->n_frames == 1 ? "" : "s");
            }
        }
        sl_data_paths_free(list, nf);
    }
    const bool failed = damaged || not_shards || bad_args;
    if (!quiet || failed) {
        printf("verified %d shard%s: %s", shards, shards == 1 ? "" : "s",
               failed ? "FAILED" : "all sound");
        if (not_shards)
            printf("%s%d file%s not a shard", " (", not_shards, not_shards == 1 ? " is" : "s are");
        if (skipped)
            printf("%sskipped %d non-shard path%s a pattern matched", not_shards ? "; " : " (",
                   skipped, skipped == 1 ? "" : "s");
        printf("%s\n", not_shards || skipped ? ")" : "");
    }
    return failed ? 1 : 0;
}

int sl_cmd_data(int argc, char **argv) {
    if (argc < 2) return sl_cli_usage_error("data", "a subcommand is required (" DATA_SUBS ")");
    const char *sub = argv[1];
    if (sl_cli_is_help(sub) || strcmp(sub, "help") == 0) {
        usage_main(stdout);
        return 0;
    }
    if (strcmp(sub, "build") == 0) return cmd_build(argc - 1, argv + 1);
    if (strcmp(sub, "info") == 0) return cmd_info(argc - 1, argv + 1);
    if (strcmp(sub, "verify") == 0) return cmd_verify(argc - 1, argv + 1);
    if (strcmp(sub, "show") == 0) return sl_cmd_data_show(argc - 1, argv + 1);
    return sl_cli_usage_error("data", "unknown subcommand '%s' (" DATA_SUBS ")", sub);
}
