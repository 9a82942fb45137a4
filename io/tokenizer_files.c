/*
 * io/tokenizer_files.c - the tokenizer's files: finding tokenizer.json, its SHA-256, and
 * copying it with its companion files next to an exported model (io/tokenizer.h).
 */
#include <errno.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fsutil.h"
#include "core/log.h"
#include "io/tokenizer_internal.h"

/* What Hugging Face's AutoTokenizer reads beside tokenizer.json, copied when present. */
static const char *const k_companions[] = {"tokenizer_config.json",
                                           "special_tokens_map.json",
                                           "added_tokens.json",
                                           "vocab.json",
                                           "merges.txt",
                                           "chat_template.jinja",
                                           "chat_template.json",
                                           NULL};

void tok_sha256(const void *data, size_t n, uint8_t out[SL_TOKENIZER_HASH_BYTES]) {
    struct sha256_ctx h;
    sha256_init(&h);
    sha256_update(&h, n, data);
    sha256_digest(&h, SHA256_DIGEST_SIZE, out);
}

char *tok_resolve(const char *path, bool *is_dir, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) != 0) {
        sl_fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    *is_dir = S_ISDIR(st.st_mode);
    if (!*is_dir) return sl_xstrdup(path);
    size_t n = strlen(path);
    char *p = sl_xmalloc(n + 16);
    snprintf(p, n + 16, "%s%stokenizer.json", path, n && path[n - 1] == '/' ? "" : "/");
    if (stat(p, &st) != 0 || S_ISDIR(st.st_mode)) {
        sl_fail(err, errlen, "%s: a directory without tokenizer.json", path);
        free(p);
        return NULL;
    }
    return p;
}

/* Copies file `src` to dir/name atomically; 1 when copied, 0 when src does not exist (and
 * `optional`), -1 with err. With expect, the bytes must have that SHA-256. */
static int copy_one(const char *src, const char *dir, const char *name, bool optional,
                    const uint8_t *expect, char *err, size_t errlen) {
    struct stat st;
    if (optional && stat(src, &st) != 0) return 0;
    size_t n;
    char *data = sl_read_file(src, &n, err, errlen);
    if (!data) return -1;
    if (expect) {
        uint8_t h[SL_TOKENIZER_HASH_BYTES];
        tok_sha256(data, n, h);
        if (memcmp(h, expect, sizeof h) != 0) {
            free(data);
            return sl_fail(err, errlen,
                           "%s: changed since it was checked (its SHA-256 differs): not copied",
                           src);
        }
    }
    char to[SL_PATH_MAX + 64];
    snprintf(to, sizeof to, "%s/%s", dir, name);
    int rc = sl_write_file_atomic(to, data, n, err, errlen);
    free(data);
    return rc == 0 ? 1 : -1;
}

int sl_tokenizer_copy_files(const char *path, const char *dir, const uint8_t *expect, char *err,
                            size_t errlen) {
    bool is_dir;
    char *file = tok_resolve(path, &is_dir, err, errlen);
    if (!file) return -1;
    int copied = copy_one(file, dir, "tokenizer.json", false, expect, err, errlen);
    const char *slash = strrchr(file, '/');
    const char *base = slash ? slash + 1 : file;
    /* the companions of a tokenizer.json, not of a file named otherwise (whose directory may
     * hold another tokenizer's) */
    if (copied > 0 && (is_dir || strcmp(base, "tokenizer.json") == 0)) {
        for (int k = 0; k_companions[k]; k++) {
            char src[SL_PATH_MAX + 64];
            snprintf(src, sizeof src, "%.*s%s", (int)(base - file), file, k_companions[k]);
            int rc = copy_one(src, dir, k_companions[k], true, NULL, err, errlen);
            if (rc < 0) {
                copied = -1;
                break;
            }
            copied += rc;
        }
    }
    free(file);
    return copied;
}
