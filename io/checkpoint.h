/*
 * io/checkpoint.h - sharded, crash-safe training checkpoints that load on any number of ranks
 * (docs/checkpoint-format.md is the format specification).
 *
 * A checkpoint holds named tensors with a GLOBAL shape and dtype. Each rank writes the pieces it
 * owns: a piece is a contiguous range [begin, end) of the tensor's flattened (row-major) global
 * elements - an expert slice of an expert stack, a ZeRO-1 shard of a flat optimizer group, or a
 * replicated tensor written whole by one rank. Every tensor must be covered by the pieces of all
 * ranks exactly once; the save refuses to commit otherwise, and the loader checks it again.
 *
 * Saving (every rank; `agree` is the collective that doubles as the barrier):
 *
 *   sl_ckpt_save_opts o = {.root = out_dir, .step = step, .rank = r, .world_size = W,
 *                          .agree = sl_ckpt_agree_comm, .agree_user = world, .keep_last = 3};
 *   sl_ckpt_writer *w = sl_ckpt_save_begin(&o, err, sizeof err);     // collective
 *   sl_ckpt_save_piece(w, "layers.0.mlp.experts.down_proj", "F32", 3, shape, b, e, host_ptr);
 *   ...                                                              // every piece this rank owns
 *   int rc = sl_ckpt_save(w, rank == 0 ? train_state : NULL, err, sizeof err);  // collective
 *
 * sl_ckpt_save is sl_ckpt_save_write (this rank's files, local) followed by sl_ckpt_save_commit
 * (collective: rank 0 validates coverage, writes train_state.json and COMMIT, renames the
 * directory into place and replaces `latest`). A single process may act as several ranks with
 * the local agree function: begin for rank 0 first, write every rank, commit rank 0 last (its
 * commit reads every rank's manifest, so a rank that did not write is an error there).
 *
 * Loading: sl_ckpt_open validates the structure (commit index, manifests and their checksums,
 * coverage, dtype/shape consistency, data files present and large enough); sl_ckpt_read returns
 * any element range of a tensor from whichever pieces hold it, verifying the CRC-32C of every
 * piece it touches (once per handle). A handle is used by one thread at a time.
 *
 * Every error message names the path and, where it applies, the tensor, the rank, the range.
 */
#ifndef SL_IO_CHECKPOINT_H
#define SL_IO_CHECKPOINT_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The format version this sluice writes and the newest it reads. */
#define SL_CKPT_FORMAT_VERSION 1
/* Most dimensions of a checkpoint tensor. */
#define SL_CKPT_MAX_DIMS 8

/* ---- the agreement collective ----
 * Every rank calls it with its own status (0 = ok, non-zero = this rank failed) and gets the
 * number of ranks that failed; it must also be a barrier (no rank returns before every rank has
 * called it). With MPI: an all-reduce of the flags. */
typedef int (*sl_ckpt_agree_fn)(void *user, int local_failed);
/* One process, no other rank: returns local_failed != 0. */
int sl_ckpt_agree_local(void *user, int local_failed);
/* user is an sl_comm * (core/comm.h): a sum all-reduce of the flags over its ranks. */
int sl_ckpt_agree_comm(void *user, int local_failed);

/* ---- saving ---- */

typedef struct {
    const char *root;       /* the run's output directory: checkpoints go to <root>/checkpoints */
    int64_t step;           /* >= 0; the directory is checkpoints/step-<step> */
    int rank, world_size;   /* this rank among the ranks that write the checkpoint */
    sl_ckpt_agree_fn agree; /* NULL: sl_ckpt_agree_local (world_size must then be 1, or the
                               caller drives the ranks itself as described above) */
    void *agree_user;
    int keep_last;      /* after the commit keep the newest keep_last checkpoints; 0 = keep all */
    int64_t keep_every; /* also keep every checkpoint whose step is a multiple of this; 0 = none */
    /* also keep the checkpoints of these steps (a staged schedule's stage ends); copied */
    const int64_t *keep_steps;
    int n_keep_steps;
} sl_ckpt_save_opts;

typedef struct sl_ckpt_writer sl_ckpt_writer;

/* Collective. Rank 0 removes leftover .tmp-* directories of interrupted saves and creates
 * <root>/checkpoints/.tmp-step-<step>/; every rank then writes only inside it. NULL with a
 * message on every rank when any rank failed. */
sl_ckpt_writer *sl_ckpt_save_begin(const sl_ckpt_save_opts *o, char *err, size_t errlen);

/* Declares a piece this rank writes: elements [begin, end) of tensor `name` (global shape
 * shape[0..ndim), safetensors dtype name "F32", "BF16", "I64", ...). `data` holds the piece's
 * (end - begin) elements, little-endian, and must stay valid and unchanged until
 * sl_ckpt_save_write returns (it is not copied). A tensor of 0 elements is saved as the one piece
 * [0, 0). The first error is sticky (later calls fail; save_write reports it). 0, or -1. */
int sl_ckpt_save_piece(sl_ckpt_writer *w, const char *name, const char *dtype, int ndim,
                       const int64_t *shape, int64_t begin, int64_t end, const void *data);
/* The same with the data produced on demand (e.g. staged from device memory): fetch is called
 * with consecutive byte ranges of the piece, in order, each at most 8 MiB; it fills dst and
 * returns 0, or non-zero to fail the save. */
typedef int (*sl_ckpt_fetch_fn)(void *user, uint64_t byte_offset, void *dst, size_t nbytes);
int sl_ckpt_save_piece_fn(sl_ckpt_writer *w, const char *name, const char *dtype, int ndim,
                          const int64_t *shape, int64_t begin, int64_t end, sl_ckpt_fetch_fn fetch,
                          void *user);

/* Local: writes this rank's data file rank-<r>.safetensors and its manifest
 * rank-<r>.manifest.json into the temporary directory (each fsynced). 0, or -1 with a message
 * naming the file; w stays valid either way (pass it to commit or abort). */
int sl_ckpt_save_write(sl_ckpt_writer *w, char *err, size_t errlen);

/* Collective; frees w. Every rank reports its status from save_write; when all succeeded,
 * rank 0 reads every manifest, checks that the pieces cover every tensor exactly once with
 * consistent shapes and dtypes, writes train_state.json (`state`: the trainer's JSON object,
 * rank 0 only, may be NULL), then COMMIT, fsyncs, renames the directory to step-<step> (an
 * existing step-<step> is replaced atomically), replaces `latest` and applies the retention
 * options. On failure nothing committed changes: the previous checkpoints and `latest` stay,
 * and rank 0 removes the temporary directory. 0 on every rank when the checkpoint is committed,
 * else -1 (with the local agree function only rank 0 learns the outcome). */
int sl_ckpt_save_commit(sl_ckpt_writer *w, const cJSON *state, char *err, size_t errlen);

/* save_write then save_commit (the commit runs even when the write failed, so that every rank
 * takes part in the collective). Frees w. */
int sl_ckpt_save(sl_ckpt_writer *w, const cJSON *state, char *err, size_t errlen);

/* Frees w without committing (not collective; its temporary files are left for the next save
 * to remove). NULL is allowed. */
void sl_ckpt_save_abort(sl_ckpt_writer *w);

/* ---- finding a checkpoint ---- */

/* The newest committed checkpoint under `root` (a run's output directory or its checkpoints/
 * directory): the one `latest` names, or - when `latest` is missing, malformed or names no
 * committed checkpoint - the committed step-<N> with the largest N (with a warning). 1 and its
 * directory in dir, 0 when there is none (no checkpoints directory, or nothing committed: a
 * fresh start), -1 on an error (an unreadable directory or `latest`, a path too long). */
int sl_ckpt_find_latest(const char *root, char *dir, size_t dirlen, char *err, size_t errlen);

/* The newest committed checkpoint older than the checkpoint directory `newest` (.../step-<N>)
 * among its siblings whose structure opens (sl_ckpt_open: COMMIT, manifests, train state,
 * coverage; no tensor data is read), for telling a user whose newest checkpoint is damaged what
 * to resume from. 1 and its directory in dir, 0 when there is none. */
int sl_ckpt_find_previous(const char *newest, char *dir, size_t dirlen);

/* ---- loading ---- */

typedef struct sl_ckpt sl_ckpt;

/* Opens a checkpoint: `path` is a checkpoint directory (step-<N>, which must hold COMMIT), or a
 * run / checkpoints directory (its newest committed checkpoint, sl_ckpt_find_latest). Validates
 * the structure and coverage (docs/checkpoint-format.md, "Load validation"); reads no tensor
 * data. NULL with the first problem in err (and how many more were found). */
sl_ckpt *sl_ckpt_open(const char *path, char *err, size_t errlen);
void sl_ckpt_close(sl_ckpt *c);

/* The checkpoint's directory, and the optimizer step it was saved after. */
const char *sl_ckpt_dir(const sl_ckpt *c);
int64_t sl_ckpt_step(const sl_ckpt *c);
/* How many ranks wrote it. */
int sl_ckpt_world_size(const sl_ckpt *c);
int sl_ckpt_format_version(const sl_ckpt *c);
const char *sl_ckpt_sluice_version(const sl_ckpt *c);
/* The trainer's object saved with it (train_state.json "trainer"); never NULL (an empty object
 * when none was saved). Owned by c. */
const cJSON *sl_ckpt_train_state(const sl_ckpt *c);

/* Tensors, sorted by name. */
typedef struct {
    const char *name;  /* owned by the checkpoint handle */
    const char *dtype; /* "F32", "BF16", ... */
    size_t elem_size;  /* bytes per element */
    int ndim;
    int64_t shape[SL_CKPT_MAX_DIMS];
    int64_t numel;
    int pieces; /* how many pieces it was saved in */
} sl_ckpt_tensor;
/* How many tensors the checkpoint holds. */
int sl_ckpt_tensor_count(const sl_ckpt *c);
/* Tensor i (0 <= i < count) into *t. */
void sl_ckpt_tensor_at(const sl_ckpt *c, int i, sl_ckpt_tensor *t);
/* Index of tensor `name`, or -1. */
int sl_ckpt_find(const sl_ckpt *c, const char *name);
/* Checks that tensor `name` exists with this dtype (NULL: any) and shape. 0, or -1 with a
 * message naming the tensor and both shapes (or "not in the checkpoint"). */
int sl_ckpt_expect(const sl_ckpt *c, const char *name, const char *dtype, int ndim,
                   const int64_t *shape, char *err, size_t errlen);
/* Total bytes of tensor data; data files (name, bytes) in rank order. */
uint64_t sl_ckpt_data_bytes(const sl_ckpt *c);
int sl_ckpt_file_count(const sl_ckpt *c);
const char *sl_ckpt_file_at(const sl_ckpt *c, int i, uint64_t *bytes);

/* Reads elements [begin, end) of tensor `name` into dst ((end - begin) * elem_size bytes, the
 * stored dtype), from whichever pieces hold them. Every piece touched is checked against its
 * CRC-32C the first time (read whole, once per handle); a mismatch names the file and the
 * tensor. 0, or -1 with a message. */
int sl_ckpt_read(sl_ckpt *c, const char *name, int64_t begin, int64_t end, void *dst, char *err,
                 size_t errlen);

/* ---- verification ---- */

/* Called once per problem found, with one line describing it (file, tensor, range). */
typedef void (*sl_ckpt_report_fn)(void *user, const char *problem);
typedef struct {
    int64_t step;
    int tensors, pieces, files;
    uint64_t bytes_checked; /* tensor bytes whose checksum was computed */
} sl_ckpt_verify_stats;
/* Checks everything in the checkpoint at `path` (as sl_ckpt_open resolves it): the commit index,
 * every manifest and its checksum, train_state.json, coverage, every data file's safetensors
 * structure against the manifest, and every piece's CRC-32C. Reports each problem and goes on
 * where it can. Returns the number of problems (0: sound). stats may be NULL. */
int sl_ckpt_verify(const char *path, sl_ckpt_report_fn report, void *user,
                   sl_ckpt_verify_stats *stats);

/* ---- Hugging Face export ---- */

/* A piece of an exported tensor assembled from parts of its checkpoint tensor (pieces below):
 * `count` consecutive elements from element `offset`, written `repeat` (>= 1) times in a row; or,
 * with `zero`, count * repeat zeros. */
typedef struct {
    int64_t offset, count, repeat;
    bool zero;
} sl_ckpt_export_piece;

/* One exported tensor: elements [offset, offset + numel(shape)) of a checkpoint tensor, or,
 * when pieces is not NULL, the npieces pieces' elements in order (they add up to numel(shape);
 * the array must outlive sl_ckpt_export_hf). With xform every value v is written as
 * v * scale + add (Qwen3-Next's zero-centred norms: add -1). A mapper that fills entries field
 * by field sets pieces, xform to NULL, false when it wants a plain copy. */
typedef struct {
    char name[256];
    int64_t offset;
    int ndim;
    int64_t shape[SL_CKPT_MAX_DIMS];
    const sl_ckpt_export_piece *pieces;
    int npieces;
    bool xform;
    float scale, add;
} sl_ckpt_export_entry;

/* Source elements of an entry's tensor as floats: n elements from element `offset` into out.
 * 0, or -1 with a message. */
typedef int (*sl_ckpt_export_read_fn)(void *user, int64_t offset, int64_t n, float *out, char *err,
                                      size_t errlen);
/* Elements [first, first + n) of the exported tensor of e, read through `read` and transformed
 * (pieces, xform): what sl_ckpt_export_hf writes, shared with the live model's export
 * (model/hf_export.c). 0, or -1 with the read's message. */
int sl_ckpt_export_assemble(const sl_ckpt_export_entry *e, int64_t first, int64_t n, float *out,
                            sl_ckpt_export_read_fn read, void *user, char *err, size_t errlen);
/* Whether e's pieces lie within a tensor of `numel` elements and add up to its shape's. */
bool sl_ckpt_export_entry_valid(const sl_ckpt_export_entry *e, int64_t numel);
/* Maps a checkpoint tensor to the exported tensors cut from it (at most max into out): returns
 * how many (0: not exported), or -1 with a message in err. NULL map: every tensor under its own
 * name and shape. */
typedef int (*sl_ckpt_export_map_fn)(void *user, const sl_ckpt_tensor *t, sl_ckpt_export_entry *out,
                                     int max, char *err, size_t errlen);
typedef struct {
    const char *dtype;         /* "F32" or "BF16": float tensors converted; NULL: as stored */
    uint64_t max_shard_bytes;  /* 0: 2 GiB */
    const char *config_json;   /* written as config.json when not NULL */
    const char *skip_prefix;   /* tensors whose name starts with this are left out ("optim.") */
    sl_ckpt_export_map_fn map; /* NULL: names as stored */
    void *map_user;
    /* Called before the tensors with the directory the export is being written to (beside
     * dir, see below): the files it writes there (the tokenizer's) are part of the export.
     * 0, or -1 with a message, which fails the export. NULL: none. */
    int (*extra_files)(void *user, const char *stage, char *err, size_t errlen);
    void *extra_user;
} sl_ckpt_export_opts;
/* Writes a Hugging Face weights directory `dir`: model.safetensors, or
 * model-0000i-of-0000K.safetensors shards of at most max_shard_bytes each (a larger tensor gets
 * a shard of its own), always model.safetensors.index.json, and config.json. Tensors are
 * streamed (bounded memory). Everything is written into `.<name>.export-tmp` beside dir (the
 * same file system), synced and the shards' headers read back; what an existing dir holds
 * besides an earlier export's model*.safetensors and index is carried over (hard links), and
 * only then does the new directory replace dir, in one atomic exchange (ck_replace_dir). On
 * any failure dir is left as it was (not created when it did not exist). Returns the number
 * of tensors written, or -1 with a message. */
int sl_ckpt_export_hf(sl_ckpt *c, const char *dir, const sl_ckpt_export_opts *o, char *err,
                      size_t errlen);

#endif
