/*
 * io/checkpoint_load_internal.h - what the checkpoint loader's two files share (io/
 * checkpoint_load.c: finding, opening and validating; io/checkpoint_read.c: reading tensor data
 * and verifying checksums): the handle's layout and the problem reporter. Internal to them.
 */
#ifndef SL_IO_CHECKPOINT_LOAD_INTERNAL_H
#define SL_IO_CHECKPOINT_LOAD_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/log.h"
#include "io/checkpoint.h"
#include "io/checkpoint_internal.h"
#include "io/safetensors.h"

/* Bytes per read while checksumming a piece. */
#define CK_CHUNK ((size_t)8 << 20)
/* Data files kept open at once (a checkpoint of thousands of ranks would exceed the
 * descriptor limit): the least recently used one is closed beyond this. */
#define CK_MAX_OPEN 128

typedef struct {
    char *name, *path;
    uint64_t bytes;
    sl_st_file *st; /* open, or NULL */
    bool checked;   /* its safetensors header was checked against the manifests */
    bool absent;    /* missing or of the wrong size when opened (reported then) */
    char *bad;      /* the problem found then (reads from the file fail with it) */
    uint64_t last_use;
    int *refs; /* the pieces it holds: indices into idx.refs */
    int nrefs;
} dfile;

struct sl_ckpt {
    char *dir;
    ck_commit commit;
    ck_state state;
    ck_manifest *ms;
    char **mnames; /* "rank-00003.manifest.json", per manifest, for messages */
    int nms;
    ck_index idx;
    dfile *files;
    int nfiles;
    int *ref_file;       /* per ref: index into files */
    int *ref_st;         /* per ref: tensor index in the safetensors file (after the check) */
    bool *ref_verified;  /* per ref: its checksum was checked */
    uint64_t data_bytes; /* sum of the tensors' bytes */
    int open_files;
    uint64_t clock;
    unsigned char *scratch;
};

typedef struct {
    ck_report_fn report;
    void *user;
    int count;
} reporter;

/* One problem for the reporter (counted, and passed to its callback). */
void ck_problem(reporter *r, const char *fmt, ...) SL_PRINTF(2, 3);
/* Everything but the data: reports each problem; returns the handle (NULL when not even
 * COMMIT could be read, the reason in err). */
sl_ckpt *ck_load(const char *path, reporter *r, char *err, size_t errlen);

#endif
