/*
 * io/checkpoint_internal.h - what the checkpoint writer, loader and fuzz harness share: the
 * in-memory form of the three JSON files (rank manifest, COMMIT index, train_state.json), their
 * parsers (io/checkpoint_manifest.c) and printers (io/checkpoint_print.c), and the coverage
 * index (io/checkpoint_index.c). Internal to io/checkpoint_*.c and tests/fuzz; users include
 * io/checkpoint.h.
 *
 * Parsers take the file's bytes (not necessarily NUL-terminated) and its name for messages,
 * accept exactly the schema of docs/checkpoint-format.md (unknown keys are ignored, every known
 * key is type- and range-checked) and never trust a number: counts, offsets and ranges are
 * checked before use.
 */
#ifndef SL_IO_CHECKPOINT_INTERNAL_H
#define SL_IO_CHECKPOINT_INTERNAL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io/checkpoint.h"

#define CK_FORMAT_NAME     "sluice-checkpoint"
#define CK_MANIFEST_FORMAT "sluice-checkpoint-manifest"
#define CK_COMMIT_FILE     "COMMIT"
#define CK_STATE_FILE      "train_state.json"
#define CK_LATEST_FILE     "latest"
#define CK_DIR_NAME        "checkpoints"
/* Integers in the JSON files: cJSON holds numbers as doubles, exact up to 2^53. */
#define CK_INT_MAX (INT64_C(1) << 53)
/* Most ranks a checkpoint may have been written by (file names hold five digits). */
#define CK_MAX_RANKS 99999
/* Buffer size for paths built here. */
#define CK_PATH_MAX 4096
/* Largest manifest / index / train-state file read (a sanity bound against a damaged file). */
#define CK_MAX_JSON_BYTES ((size_t)1 << 30)

/* A piece as a manifest lists it. */
typedef struct {
    char *tensor;
    const char *dtype; /* static (canonical spelling from the safetensors dtype table) */
    size_t esize;
    int ndim;
    int64_t shape[SL_CKPT_MAX_DIMS];
    int64_t numel;
    int64_t begin, end;
    char *file;      /* data file name, relative to the checkpoint directory */
    uint64_t offset; /* absolute byte offset of the piece's first byte in the file */
    uint32_t crc32c;
} ck_piece;

typedef struct {
    char *name;
    uint64_t bytes;
} ck_file;

/* rank-<r>.manifest.json */
typedef struct {
    int format_version;
    int64_t step;
    int rank, world_size;
    ck_file *files;
    int nfiles;
    ck_piece *pieces;
    int npieces;
} ck_manifest;

/* One file the COMMIT index lists with its size and checksum. */
typedef struct {
    char *file;
    int rank; /* manifests: the rank; train state: -1 */
    uint64_t bytes;
    uint32_t crc32c;
} ck_indexed;

/* COMMIT */
typedef struct {
    int format_version;
    int64_t step;
    int world_size;
    ck_indexed state;      /* train_state.json */
    ck_indexed *manifests; /* world_size entries, rank order */
} ck_commit;

/* train_state.json */
typedef struct {
    int format_version;
    int64_t step;
    int world_size;
    char sluice_version[64];
    cJSON *trainer; /* owned; an empty object when absent */
} ck_state;

/* Data file and manifest names of rank r. */
void ck_data_name(char *buf, size_t n, int rank);
void ck_manifest_name(char *buf, size_t n, int rank);
/* Whether s is a plain file name (no '/', not "." or "..", no control characters, not empty). */
bool ck_plain_name(const char *s);

/* Parsers: 0, or -1 with "<name>: <what>" in err. The output is zeroed first and, on failure,
 * freed again (the free functions accept a zeroed struct). */
int ck_manifest_parse(const char *json, size_t len, const char *name, ck_manifest *m, char *err,
                      size_t errlen);
void ck_manifest_free(ck_manifest *m);
int ck_commit_parse(const char *json, size_t len, const char *name, ck_commit *c, char *err,
                    size_t errlen);
void ck_commit_free(ck_commit *c);
int ck_state_parse(const char *json, size_t len, const char *name, ck_state *s, char *err,
                   size_t errlen);
void ck_state_free(ck_state *s);

/* Printers (malloc'ed JSON text, ending in a newline). */
char *ck_manifest_print(const ck_manifest *m);
char *ck_commit_print(const ck_commit *c);
/* train_state.json: the library's fields and the trainer's object (NULL: {}). */
char *ck_state_print(int64_t step, int world_size, const char *sluice_version,
                     const cJSON *trainer);

/* ---- the coverage index ----
 * Built from the pieces of every manifest: tensors sorted by name, each with its pieces sorted
 * by begin. Building reports every inconsistency: a piece whose dtype or shape differs from the
 * tensor's other pieces, ranges not covered by any piece, ranges covered twice. */
typedef struct {
    const ck_piece *piece;
    int origin; /* index of the manifest it came from (for messages) */
} ck_ref;

typedef struct {
    const char *name;
    const ck_piece *first; /* dtype and shape of the tensor */
    int start, count;      /* its pieces: refs[start .. start + count), sorted by begin */
} ck_tensor;

typedef struct {
    ck_ref *refs;
    int nrefs;
    ck_tensor *tensors;
    int ntensors;
} ck_index;

/* Reports one problem (a whole line without the trailing newline). */
typedef void (*ck_report_fn)(void *user, const char *line);

/* Builds the index over manifests[0..n) (origin i = manifests[i]); `where` (e.g. the checkpoint
 * directory) and origin_names[i] prefix the messages. Returns the number of problems reported. */
int ck_index_build(const ck_manifest *manifests, int n, const char *const *origin_names,
                   const char *where, ck_report_fn report, void *user, ck_index *idx);
void ck_index_free(ck_index *idx);
/* Index of the tensor called name, or -1. */
int ck_index_find(const ck_index *idx, const char *name);

/* snprintf for paths: false (and an empty string) when the result does not fit. */
bool ck_path(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Steps of the committed step-<N> directories (those holding COMMIT) of a checkpoints
 * directory, malloc'ed (NULL when there is none or the directory cannot be listed). */
int64_t *ck_committed_steps(const char *ckdir, int *count);

/* ---- directories (io/checkpoint_publish.c): the checkpoint writer's and the export's ---- */

/* rm -rf of path, a directory tree or a single file (symlinks removed, never followed). */
int ck_rmtree(const char *path);
/* Puts the directory tmp in place as dir (both in one directory, so on one file system): a
 * rename when dir does not exist; else the two are exchanged in one atomic rename
 * (renameat2 RENAME_EXCHANGE) and the old one, now at tmp, is removed (a warning naming `what`
 * when it cannot be). On a file system without the exchange, dir is first renamed to `aside`
 * (a crash between the two renames leaves the old one there and nothing at dir). The
 * directory holding dir is fsynced. 0, or -1 with a message (dir and tmp then as they were). */
int ck_replace_dir(const char *dir, const char *tmp, const char *aside, const char *what, char *err,
                   size_t errlen);

/* "[2, 3]" into buf. */
const char *ck_fmt_shape(char *buf, size_t n, int ndim, const int64_t *shape);

#endif
