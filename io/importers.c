/*
 * io/importers.c - the input formats of `sluice data build` (see importers.h and build.h):
 * format detection, the formats table and each format's defaults. The importers themselves:
 * io/import_text.c (the byte-level tokenizer for text and JSONL, or --tokenizer) and
 * io/import_tokenized.c (already-tokenized raw, llm.c and Megatron files).
 */
#include "io/importers.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "io/shard.h"

/* ---- format detection and defaults ---- */

static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

static sl_input_format detect_format(const char *path) {
    if (ends_with(path, ".jsonl") || ends_with(path, ".json")) return SL_FMT_JSONL;
    if (ends_with(path, ".txt") || ends_with(path, ".md") || ends_with(path, ".text"))
        return SL_FMT_TEXT;
    if (ends_with(path, ".idx")) return SL_FMT_MEGATRON;
    if (ends_with(path, ".bin")) {
        char *ip, *bp;
        imp_megatron_paths(path, &ip, &bp);
        struct stat st;
        bool meg = stat(ip, &st) == 0;
        free(ip), free(bp);
        if (meg) return SL_FMT_MEGATRON;
        FILE *f = fopen(path, "rb");
        unsigned char m[4];
        bool llmc = f && fread(m, 1, 4, f) == 4 && (int32_t)sl_le32(m) == LLMC_MAGIC;
        if (f) fclose(f);
        if (llmc) return SL_FMT_LLMC;
    }
    return SL_FMT_AUTO;
}

/* ---- the formats ---- */

/* One row per format: its name and its importer, so that a new format is one row here (plus
 * detection and defaults above and below) rather than a case in every switch. */
static const struct {
    sl_input_format fmt;
    const char *name; /* the --format value */
    int (*import)(sl_sink *k, const char *path, char *err, size_t errlen);
} formats[] = {
    {SL_FMT_TEXT, "text", imp_text},
    {SL_FMT_JSONL, "jsonl", imp_jsonl},
    {SL_FMT_RAW, "raw", imp_raw},
    {SL_FMT_LLMC, "llmc", imp_llmc},
    {SL_FMT_MEGATRON, "megatron", imp_megatron},
};
#define N_FORMATS ((int)(sizeof formats / sizeof formats[0]))

const char *sl_input_format_name(sl_input_format f) {
    for (int i = 0; i < N_FORMATS; i++)
        if (formats[i].fmt == f) return formats[i].name;
    return "auto";
}

int sl_import_format(sl_input_format format, char *const *inputs, int n_inputs,
                     sl_input_format *out, char *err, size_t errlen) {
    sl_input_format fmt = format;
    for (int i = 0; i < n_inputs; i++) {
        struct stat st;
        if (stat(inputs[i], &st) != 0) {
            bool meg_prefix = false;
            if (fmt == SL_FMT_MEGATRON || fmt == SL_FMT_AUTO) {
                char *ip, *bp;
                imp_megatron_paths(inputs[i], &ip, &bp);
                meg_prefix = stat(ip, &st) == 0;
                free(ip), free(bp);
                if (meg_prefix && fmt == SL_FMT_AUTO) fmt = SL_FMT_MEGATRON;
            }
            if (!meg_prefix)
                return sl_fail(err, errlen, "%s: cannot open: %s", inputs[i], strerror(ENOENT));
            continue;
        }
        if (format != SL_FMT_AUTO) continue;
        sl_input_format f = detect_format(inputs[i]);
        if (f == SL_FMT_AUTO)
            return sl_fail(err, errlen,
                           "%s: cannot tell the input format from the name or contents (use "
                           "--format text|jsonl|raw|llmc|megatron)",
                           inputs[i]);
        if (fmt != SL_FMT_AUTO && f != fmt)
            return sl_fail(err, errlen,
                           "%s: looks like %s input but an earlier input is %s; build "
                           "one format at a time",
                           inputs[i], sl_input_format_name(f), sl_input_format_name(fmt));
        fmt = f;
    }
    if (fmt == SL_FMT_AUTO) return sl_fail(err, errlen, "cannot tell the input format (--format)");
    *out = fmt;
    return 0;
}

int sl_import_defaults(sl_input_format fmt, sl_build_opts *o, const char *first_input,
                       int64_t *vocab_out, int64_t *eod_hdr_out, char *err, size_t errlen) {
    int64_t vocab = o->vocab, eod_hdr = -1;
    switch (fmt) {
    case SL_FMT_TEXT:
    case SL_FMT_JSONL:
        if (vocab < 0) vocab = TEXT_VOCAB;
        if (vocab < TEXT_VOCAB)
            return sl_fail(err, errlen, "--vocab %lld is smaller than the byte tokenizer's 257",
                           (long long)vocab);
        eod_hdr = TEXT_EOD;
        break;
    case SL_FMT_RAW:
        if (o->raw_token_bytes != 2 && o->raw_token_bytes != 4)
            return sl_fail(err, errlen, "raw input needs --dtype uint16 or uint32");
        if (vocab < 0) return sl_fail(err, errlen, "raw input needs --vocab N");
        if (o->eod == -1) o->eod = -2;
        eod_hdr = o->eod >= 0 ? o->eod : -1;
        break;
    case SL_FMT_LLMC: {
        uint64_t size, ntok;
        int fd = imp_open_sized(first_input, &size, err, errlen);
        if (fd < 0) return -1;
        int tb = imp_llmc_header(fd, first_input, size, &ntok, err, errlen);
        close(fd);
        if (tb < 0) return -1;
        if (vocab < 0) vocab = tb == 2 ? 50257 : 128256;
        if (o->eod == -1) o->eod = tb == 2 ? 50256 : 128000;
        eod_hdr = o->eod >= 0 ? o->eod : -1;
        break;
    }
    case SL_FMT_MEGATRON:
        if (vocab < 0) return sl_fail(err, errlen, "Megatron input needs --vocab N");
        eod_hdr = o->add_eod >= 0 ? o->add_eod : (o->eod >= 0 ? o->eod : -1);
        break;
    default:
        break;
    }
    *vocab_out = vocab;
    *eod_hdr_out = eod_hdr;
    return 0;
}

int sl_import(sl_sink *k, sl_input_format fmt, const char *path, char *err, size_t errlen) {
    for (int i = 0; i < N_FORMATS; i++)
        if (formats[i].fmt == fmt) return formats[i].import(k, path, err, errlen);
    sl_fatal("%s: input format %d has no row in importers.c's formats table", path, (int)fmt);
}
