/* launch/cmd_data_show.c - `sluice data show`: a shard's documents as token ids or as text
 * (docs/data.md), so a user can see what the model will read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "io/paths.h"
#include "io/shard.h"
#include "io/tokenizer.h"
#include "launch/commands.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: sluice data show [--ids | --text] [--docs N] [--tokenizer PATH] PATH...\n\n"
            "Prints the documents of shards (PATH: a shard, a directory of *.shard.zst or a\n"
            "quoted glob, as 'sluice data verify --help' says; files in order), from their\n"
            "document lists, tokens as stored (end-of-document tokens included).\n\n"
            "  --text            (default) each document as text, after a line\n"
            "                    '--- document K: FILE, token T ---' (T: its first token in the\n"
            "                    file; a newline is added before it when the previous text did\n"
            "                    not end with one). Tokens decode with --tokenizer, which must be "
            "the one\n"
            "                    the shards record; byte-level shards (vocab 257, no tokenizer)\n"
            "                    decode without one. An id without text (the byte-level\n"
            "                    end-of-document 256) prints as <|ID|>\n"
            "  --ids             each document as one line of space-separated token ids\n"
            "  --docs N          at most N documents (default 10; 0: all)\n"
            "  --tokenizer PATH  the tokenizer.json (or its directory) for --text\n"
            "  -h, --help        this help\n\n"
            "Tokens before the first document start of the first file (the end of a document\n"
            "begun in an earlier shard) print as a document of their own.\n");
}

typedef struct {
    bool ids;
    uint64_t limit, shown;
    bool in_doc;
    bool at_line_start;      /* --text: the last byte written was a newline */
    const sl_tokenizer *tok; /* NULL: byte-level */
    FILE *out;
} show;

static void put_token(show *s, uint32_t id, bool first) {
    if (s->ids) {
        fprintf(s->out, first ? "%u" : " %u", id);
        return;
    }
    size_t n;
    const uint8_t *b = NULL;
    uint8_t byte = (uint8_t)id;
    if (s->tok)
        b = sl_tokenizer_id_bytes(s->tok, id, &n);
    else if (id < 256)
        b = &byte, n = 1;
    if (b) {
        fwrite(b, 1, n, s->out);
        if (n) s->at_line_start = b[n - 1] == '\n';
    } else {
        fprintf(s->out, "<|%u|>", id);
        s->at_line_start = false;
    }
}

/* Ends a document's line (--ids), or its text's last line when the text did not. */
static void end_doc(show *s) {
    if (s->in_doc && (s->ids || !s->at_line_start)) fputc('\n', s->out);
    s->in_doc = false;
}

/* Checks that the shard's tokens can be shown as text. 0, or -1 with a message. */
static int text_ok(const show *s, const char *file, const sl_shard_header *h) {
    char hex[33], want[33];
    if (!s->tok) {
        if (sl_shard_has_tokenizer(h) || h->vocab_size != 257 || h->eod_token != 256) {
            if (sl_shard_has_tokenizer(h)) sl_shard_tokenizer_hex(h->tokenizer_hash, hex);
            sl_error("%s: not a byte-level shard (vocab %u%s%s): --text needs --tokenizer "
                     "PATH, or use --ids",
                     file, h->vocab_size, sl_shard_has_tokenizer(h) ? ", tokenizer sha256 " : "",
                     sl_shard_has_tokenizer(h) ? hex : "");
            return -1;
        }
        return 0;
    }
    if (sl_shard_has_tokenizer(h) &&
        memcmp(h->tokenizer_hash, sl_tokenizer_hash(s->tok), SL_SHARD_TOKENIZER_HASH) != 0) {
        sl_shard_tokenizer_hex(h->tokenizer_hash, hex);
        sl_shard_tokenizer_hex(sl_tokenizer_hash(s->tok), want);
        sl_error("%s: built with tokenizer sha256 %s..., but --tokenizer %s is %s...", file, hex,
                 sl_tokenizer_path(s->tok), want);
        return -1;
    }
    return 0;
}

/* Prints the documents of one file; 1 when the limit is reached, 0 at its end, -1 on error. */
static int show_file(show *s, const char *file) {
    char err[1024];
    sl_shard *sh = sl_shard_open(file, err, sizeof err);
    if (!sh) {
        sl_error("%s", err);
        return -1;
    }
    const sl_shard_header *h = sl_shard_hdr(sh);
    if (!s->ids && text_ok(s, file, h) != 0) {
        sl_shard_close(sh);
        return -1;
    }
    sl_frame_buf fb = {0};
    int rc = 0;
    uint64_t tok_index = 0;
    bool first = true;
    for (uint64_t f = 0; f < h->n_frames && rc == 0; f++) {
        if (sl_shard_read_frame(sh, f, &fb, err, sizeof err) != 0) {
            sl_error("%s", err);
            rc = -1;
            break;
        }
        uint32_t d = 0;
        for (uint32_t i = 0; i < fb.n_tokens; i++, tok_index++) {
            const bool starts = d < fb.n_docs && fb.docs[d] == i;
            if (starts) d++;
            if (starts || !s->in_doc) {
                end_doc(s);
                if (s->limit && s->shown == s->limit) {
                    rc = 1;
                    break;
                }
                s->shown++;
                s->in_doc = true;
                first = true;
                if (!s->ids) {
                    fprintf(s->out, "--- document %llu: %s, token %llu ---\n",
                            (unsigned long long)s->shown, file, (unsigned long long)tok_index);
                    s->at_line_start = true;
                }
            }
            const uint32_t id = h->token_bytes == 2 ? ((const uint16_t *)fb.tokens)[i]
                                                    : ((const uint32_t *)fb.tokens)[i];
            put_token(s, id, first);
            first = false;
        }
    }
    sl_frame_buf_free(&fb);
    sl_shard_close(sh);
    return rc;
}

int sl_cmd_data_show(int argc, char **argv) {
    show s = {.limit = 10, .out = stdout};
    const char *tok_path = NULL;
    int n_paths = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (sl_cli_is_help(a)) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--ids") == 0) {
            s.ids = true;
        } else if (strcmp(a, "--text") == 0) {
            s.ids = false;
        } else if (strcmp(a, "--docs") == 0 || strcmp(a, "--tokenizer") == 0) {
            if (i + 1 >= argc) {
                fprintf(sl_cli_error_stream(), "sluice data show: error: %s needs a value\n", a);
                return 2;
            }
            if (a[2] == 't') {
                tok_path = argv[++i];
            } else if (sl_cli_parse_u64(argv[++i], false, &s.limit) != 0) {
                fprintf(sl_cli_error_stream(),
                        "sluice data show: error: --docs: invalid value '%s'\n", argv[i]);
                return 2;
            }
        } else if (a[0] == '-' && a[1]) {
            return sl_cli_usage_error("data show", "unknown option '%s'", a);
        } else {
            argv[n_paths++] = argv[i]; /* the paths, compacted to the front */
        }
    }
    if (n_paths == 0) return sl_cli_usage_error("data show", "PATH is required");
    char err[1024];
    sl_tokenizer *tok = NULL;
    if (tok_path && !s.ids) {
        if (!(tok = sl_tokenizer_load(tok_path, err, sizeof err))) {
            sl_error("%s", err);
            return 1;
        }
        s.tok = tok;
    }
    int rc = 0;
    for (int p = 0; p < n_paths && rc == 0; p++) {
        char **files;
        int nf;
        if (sl_data_cli_files(argv[p], true, &files, &nf, NULL) != 0) {
            rc = -1;
            break;
        }
        for (int j = 0; j < nf && rc == 0; j++) rc = show_file(&s, files[j]);
        sl_data_paths_free(files, nf);
    }
    end_doc(&s);
    sl_tokenizer_free(tok);
    fflush(stdout);
    return rc < 0 ? 1 : 0;
}
