/*
 * io/build.c - `sluice data build` (see build.h): checks the options, writes the imported tokens
 * into shards of the target size in a staging directory, and publishes them into the output
 * directory only when every input was imported; a failed build leaves the output as it was. The
 * input formats are the importers' (io/importers.h).
 */
#include "io/build.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/fsutil.h"
#include "core/log.h"
#include "io/importers.h"
#include "io/shard.h"
#include "io/tokenizer.h"

/* ---- the sink: rotation over shards ---- */

typedef struct {
    sl_sink in; /* first member: the sl_sink * an importer holds points at the whole sink */
    sl_shard_writer_opts wo;
    sl_shard_writer *w;
    uint64_t target;
    sl_build_result *res;
    char stage[4096]; /* shards are written here, then moved into out_dir when all succeeded */
    int stage_lock;   /* the staging directory, flock-ed while the build runs (remove_stale) */
    char path[8192];
} sink;

static int sink_close_shard(sink *k, char *err, size_t errlen) {
    if (!k->w) return 0;
    sl_shard_header h;
    sl_shard_writer *w = k->w;
    k->w = NULL;
    if (sl_shard_writer_close(w, &h, err, errlen) != 0) return -1;
    k->res->n_shards++;
    k->res->tokens += h.n_tokens;
    k->res->docs += h.n_docs;
    k->res->bytes += h.file_size;
    if (!k->in.o->quiet)
        printf("wrote %s/%s: %llu token%s, %llu document%s, %llu frame%s, %llu bytes\n",
               k->in.o->out_dir, strrchr(k->path, '/') + 1, (unsigned long long)h.n_tokens,
               h.n_tokens == 1 ? "" : "s", (unsigned long long)h.n_docs, h.n_docs == 1 ? "" : "s",
               (unsigned long long)h.n_frames, h.n_frames == 1 ? "" : "s",
               (unsigned long long)h.file_size);
    return 0;
}

static int sink_open_shard(sink *k, char *err, size_t errlen) {
    int n = snprintf(k->path, sizeof k->path, "%s/%s-%05d%s", k->stage, k->in.o->prefix,
                     k->res->n_shards, SL_SHARD_SUFFIX);
    if (n < 0 || (size_t)n >= sizeof k->path) return sl_fail(err, errlen, "output path too long");
    k->w = sl_shard_writer_open(k->path, &k->wo, err, errlen);
    return k->w ? 0 : -1;
}

/* Writes the buffered tokens. A shard boundary is placed before a document start once the
 * shard reached its target, or anywhere once it reached twice the target. */
int sl_sink_flush(sl_sink *in, char *err, size_t errlen) {
    sink *k = (sink *)in;
    size_t i = 0;
    while (i < in->n) {
        if (!k->w && sink_open_shard(k, err, errlen) != 0) return -1;
        size_t n = in->n - i;
        if (n > 8192) n = 8192; /* check the size now and then */
        if (sl_shard_writer_add(k->w, in->buf + i, n, err, errlen) != 0) return -1;
        i += n;
        if (sl_shard_writer_bytes(k->w) >= 2 * k->target && sink_close_shard(k, err, errlen))
            return -1;
    }
    in->n = 0;
    return 0;
}

int sl_sink_doc(sl_sink *in, char *err, size_t errlen) {
    sink *k = (sink *)in;
    if (sl_sink_flush(in, err, errlen) != 0) return -1;
    if (k->w && sl_shard_writer_bytes(k->w) >= k->target && sink_close_shard(k, err, errlen))
        return -1;
    if (!k->w && sink_open_shard(k, err, errlen) != 0) return -1;
    sl_shard_writer_doc(k->w);
    return 0;
}

/* ---- the output directory ---- */

static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

/* Whether `name` is PREFIX-<digits>.shard.zst; *index gets the number. */
static bool shard_name(const char *name, const char *prefix, long *index) {
    size_t pl = strlen(prefix);
    if (strncmp(name, prefix, pl) != 0 || name[pl] != '-' || !ends_with(name, SL_SHARD_SUFFIX))
        return false;
    const char *d = name + pl + 1;
    char *end;
    long v = strtol(d, &end, 10);
    *index = end > d && strcmp(end, SL_SHARD_SUFFIX) == 0 && *d != '-' && *d != '+' ? v : -1;
    return true;
}

/* Without --force, refuses when PREFIX-*.shard.zst exist in out_dir. */
static int check_existing(const sl_build_opts *o, char *err, size_t errlen) {
    if (o->force) return 0;
    DIR *d = opendir(o->out_dir);
    if (!d) return 0;
    struct dirent *e;
    int rc = 0;
    long idx;
    while ((e = readdir(d)))
        if (shard_name(e->d_name, o->prefix, &idx)) {
            rc = sl_fail(err, errlen,
                         "%s/%s: shards with prefix '%s' exist already (use --force to replace "
                         "them)",
                         o->out_dir, e->d_name, o->prefix);
            break;
        }
    closedir(d);
    return rc;
}

/* Moves the staged shards into out_dir (replacing same-named ones), then with --force removes
 * the older PREFIX-*.shard.zst that the new build did not write. */
static int publish(const sink *k, char *err, size_t errlen) {
    const sl_build_opts *o = k->in.o;
    char from[4200], to[4200];
    for (int i = 0; i < k->res->n_shards; i++) {
        snprintf(from, sizeof from, "%s/%s-%05d%s", k->stage, o->prefix, i, SL_SHARD_SUFFIX);
        snprintf(to, sizeof to, "%s/%s-%05d%s", o->out_dir, o->prefix, i, SL_SHARD_SUFFIX);
        if (rename(from, to) != 0)
            return sl_fail(err, errlen, "%s: cannot move %s into place: %s", to, from,
                           strerror(errno));
    }
    DIR *d = opendir(o->out_dir);
    if (!d)
        return sl_fail(err, errlen, "%s: cannot read directory: %s", o->out_dir, strerror(errno));
    struct dirent *e;
    int rc = 0;
    long idx;
    while ((e = readdir(d))) {
        if (!shard_name(e->d_name, o->prefix, &idx)) continue;
        char want[512];
        snprintf(want, sizeof want, "%s-%05ld%s", o->prefix, idx, SL_SHARD_SUFFIX);
        if (idx >= 0 && idx < k->res->n_shards && strcmp(want, e->d_name) == 0) continue;
        snprintf(to, sizeof to, "%s/%s", o->out_dir, e->d_name);
        if (unlink(to) != 0) {
            rc = sl_fail(err, errlen, "%s: cannot remove the old shard: %s", to, strerror(errno));
            break;
        }
    }
    closedir(d);
    int dfd = open(o->out_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) fsync(dfd), close(dfd);
    return rc;
}

static void remove_stage(const char *stage) {
    DIR *d = opendir(stage);
    if (!d) return;
    struct dirent *e;
    char p[4400];
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(p, sizeof p, "%s/%s", stage, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(stage);
}

/* The staging directories (.sluice-build-*) that killed builds left in out_dir: a running build
 * holds an exclusive flock on its own, which goes with its process however that ends, so one
 * that can be locked and is older than a minute (a build locks its directory right after
 * creating it) belongs to no build: removed, and said. */
static void remove_stale(const char *out_dir) {
    DIR *d = opendir(out_dir);
    if (!d) return;
    struct dirent *e;
    char p[4400];
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, ".sluice-build-", 14) != 0) continue;
        snprintf(p, sizeof p, "%s/%s", out_dir, e->d_name);
        struct stat st;
        if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode) || time(NULL) - st.st_mtime < 60) continue;
        const int fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) continue;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            remove_stage(p);
            sl_info("data build: removed %s, left by an interrupted build", p);
        }
        close(fd);
    }
    closedir(d);
}

/* The first directory of `dir`'s path that does not exist yet ("" when dir exists): what a
 * build creates, so that a failed build can leave the file system as it found it. */
static void first_missing_dir(const char *dir, char *out, size_t n) {
    char p[4096];
    struct stat st;
    snprintf(p, sizeof p, "%s", dir);
    out[0] = '\0';
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0') continue;
        const char c = *s;
        *s = '\0';
        if (stat(p, &st) != 0) {
            snprintf(out, n, "%s", p);
            return;
        }
        *s = c;
        if (c == '\0') return;
    }
}

/* Removes the directories a failed build created: dir and its parents up to `created`. */
static void remove_created_dirs(const char *dir, const char *created) {
    if (!created[0]) return;
    char p[4096];
    snprintf(p, sizeof p, "%s", dir);
    for (;;) {
        rmdir(p);
        if (strcmp(p, created) == 0) return;
        char *slash = strrchr(p, '/');
        if (!slash || slash == p) return;
        *slash = '\0';
    }
}

/* --tokenizer: the vocabulary (the tokenizer's, or a larger --vocab) and the end-of-document
 * token (--eod by id or name, none, or the tokenizer's default). 0, or -1 with err. */
static int tokenizer_defaults(const sl_build_opts *o, sl_input_format fmt, const sl_tokenizer *t,
                              int64_t *vocab, int64_t *eod, char *err, size_t errlen) {
    if (fmt != SL_FMT_TEXT && fmt != SL_FMT_JSONL)
        return sl_fail(err, errlen,
                       "--tokenizer applies to text and jsonl input, not %s (its ids are "
                       "already tokens)",
                       sl_input_format_name(fmt));
    const uint32_t tv = sl_tokenizer_vocab_size(t);
    *vocab = o->vocab < 0 ? tv : o->vocab;
    if (*vocab < tv)
        return sl_fail(err, errlen, "--vocab %lld is smaller than the tokenizer's %u (%s)",
                       (long long)o->vocab, tv, sl_tokenizer_path(t));
    if (o->eod_token) {
        *eod = sl_tokenizer_token_id(t, o->eod_token, strlen(o->eod_token));
        if (*eod < 0)
            return sl_fail(err, errlen, "--eod %s: no such token in %s", o->eod_token,
                           sl_tokenizer_path(t));
    } else if (o->eod >= 0) {
        if (o->eod >= tv || !sl_tokenizer_id_bytes(t, (uint32_t)o->eod, &(size_t){0}))
            return sl_fail(err, errlen, "--eod %lld: no such token id in %s", (long long)o->eod,
                           sl_tokenizer_path(t));
        *eod = o->eod;
    } else if (o->eod == -2) {
        *eod = -1;
    } else {
        *eod = sl_tokenizer_default_eod(t);
        if (*eod < 0)
            return sl_fail(err, errlen,
                           "%s has none of the end-of-document tokens <|endoftext|>, "
                           "<|end_of_text|>, </s>: name one with --eod TOKEN, or --eod none",
                           sl_tokenizer_path(t));
    }
    return 0;
}

static int build(const sl_build_opts *op, sl_input_format fmt, const sl_tokenizer *tok,
                 int64_t vocab, int64_t eod_hdr, char *const *inputs, int n_inputs,
                 sl_build_result *res, char *err, size_t errlen);

int sl_data_build(const sl_build_opts *oin, char *const *inputs, int n_inputs, sl_build_result *res,
                  char *err, size_t errlen) {
    sl_build_opts o = *oin;
    memset(res, 0, sizeof *res);
    if (!o.prefix || !*o.prefix) o.prefix = "shard";
    if (strchr(o.prefix, '/')) return sl_fail(err, errlen, "--prefix must not contain '/'");
    if (!o.out_dir || !*o.out_dir) return sl_fail(err, errlen, "no output directory (-o DIR)");
    if (strlen(o.out_dir) > 3000 || strlen(o.prefix) > 200)
        return sl_fail(err, errlen, "output directory or prefix too long");
    if (n_inputs < 1) return sl_fail(err, errlen, "no input files");
    if (!o.shard_bytes) o.shard_bytes = 1ull << 30;
    sl_input_format fmt;
    if (sl_import_format(o.format, inputs, n_inputs, &fmt, err, errlen) != 0) return -1;
    /* vocabulary, separator, token width */
    int64_t vocab, eod_hdr;
    sl_tokenizer *tok = NULL;
    if (o.tokenizer) {
        if (!(tok = sl_tokenizer_load(o.tokenizer, err, errlen))) return -1;
        if (tokenizer_defaults(&o, fmt, tok, &vocab, &eod_hdr, err, errlen) != 0) {
            sl_tokenizer_free(tok);
            return -1;
        }
    } else if (o.eod_token) {
        return sl_fail(err, errlen, "--eod %s: a token name needs --tokenizer", o.eod_token);
    } else if (sl_import_defaults(fmt, &o, inputs[0], &vocab, &eod_hdr, err, errlen) != 0) {
        return -1;
    }
    int rc = build(&o, fmt, tok, vocab, eod_hdr, inputs, n_inputs, res, err, errlen);
    sl_tokenizer_free(tok);
    return rc;
}

/* The build proper, the format's (or the tokenizer's) vocabulary and separator known. */
static int build(const sl_build_opts *op, sl_input_format fmt, const sl_tokenizer *tok,
                 int64_t vocab, int64_t eod_hdr, char *const *inputs, int n_inputs,
                 sl_build_result *res, char *err, size_t errlen) {
    sl_build_opts o = *op;
    if (vocab < 1 || vocab > INT32_MAX)
        return sl_fail(err, errlen, "--vocab %lld out of range [1, 2^31)", (long long)vocab);
    if (eod_hdr >= vocab || o.add_eod >= vocab)
        return sl_fail(err, errlen, "the end-of-document token %lld is >= vocab_size %lld",
                       (long long)(o.add_eod >= vocab ? o.add_eod : eod_hdr), (long long)vocab);
    int tbytes = o.token_bytes ? o.token_bytes : (vocab <= 65536 ? 2 : 4);
    if (tbytes != 2 && tbytes != 4) return sl_fail(err, errlen, "--token-bytes must be 2 or 4");
    if (tbytes == 2 && vocab > 65536)
        return sl_fail(err, errlen, "vocab_size %lld needs 4-byte tokens", (long long)vocab);
    char created[4096];
    first_missing_dir(o.out_dir, created, sizeof created);
    if (sl_mkdirs(o.out_dir, err, errlen) != 0) {
        remove_created_dirs(o.out_dir, created);
        return -1;
    }
    if (check_existing(&o, err, errlen) != 0) return -1;
    remove_stale(o.out_dir);

    sink *k = sl_xcalloc(1, sizeof *k);
    snprintf(k->stage, sizeof k->stage, "%s/.sluice-build-XXXXXX", o.out_dir);
    if (!mkdtemp(k->stage)) {
        sl_fail(err, errlen, "%s: cannot create a staging directory: %s", o.out_dir,
                strerror(errno));
        free(k);
        remove_created_dirs(o.out_dir, created);
        return -1;
    }
    k->stage_lock = open(k->stage, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (k->stage_lock >= 0) (void)flock(k->stage_lock, LOCK_EX | LOCK_NB);
    k->in.o = &o;
    k->in.vocab = (uint32_t)vocab;
    k->res = res;
    k->target = o.shard_bytes;
    k->wo = (sl_shard_writer_opts){.token_bytes = (uint32_t)tbytes,
                                   .vocab_size = (uint32_t)vocab,
                                   .eod_token = eod_hdr >= 0 ? (uint32_t)eod_hdr : SL_SHARD_NO_EOD,
                                   .frame_tokens = o.frame_tokens,
                                   .level = o.level,
                                   .threads = o.threads};
    res->vocab = (uint32_t)vocab;
    res->token_bytes = tbytes;
    res->eod = eod_hdr;
    if (tok) {
        memcpy(k->wo.tokenizer_hash, sl_tokenizer_hash(tok), SL_SHARD_TOKENIZER_HASH);
        sl_shard_tokenizer_hex(k->wo.tokenizer_hash, res->tokenizer);
        k->in.eod = eod_hdr;
        k->in.enc = sl_doc_encoder_new(tok, o.threads, sl_sink_encoded, &k->in);
    }
    int rc = 0;
    for (int i = 0; i < n_inputs && rc == 0; i++)
        rc = sl_import(&k->in, fmt, inputs[i], err, errlen);
    if (rc == 0 && k->in.enc) rc = sl_doc_encoder_finish(k->in.enc, err, errlen);
    sl_doc_encoder_free(k->in.enc);
    k->in.enc = NULL;
    if (rc == 0) rc = sl_sink_flush(&k->in, err, errlen);
    if (rc == 0 && k->w && sl_shard_writer_tokens(k->w) == 0) {
        sl_shard_writer_abort(k->w);
        k->w = NULL;
    }
    if (rc == 0) rc = sink_close_shard(k, err, errlen);
    if (rc == 0 && res->tokens == 0)
        rc = sl_fail(err, errlen, "empty corpus: the inputs contain no tokens");
    if (rc != 0 && k->w) sl_shard_writer_abort(k->w);
    if (rc == 0) rc = publish(k, err, errlen);
    remove_stage(k->stage);
    if (k->stage_lock >= 0) close(k->stage_lock);
    free(k);
    /* a failed build into a new directory leaves no directory behind (docs/data.md) */
    if (rc != 0) remove_created_dirs(o.out_dir, created);
    return rc;
}
