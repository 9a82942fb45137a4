/*
 * io/safetensors.h - reading and writing Hugging Face safetensors files (host memory).
 *
 * File layout: an 8-byte little-endian u64 N, then N bytes of UTF-8 JSON header (starting with
 * '{', padded with trailing spaces), then the data section. The header maps each tensor name to
 * {"dtype", "shape", "data_offsets": [begin, end]} (byte offsets relative to the start of the
 * data section) and may hold "__metadata__": {string: string}. docs/safetensors.md describes
 * what sluice writes and how its model tensors are named.
 *
 * Writing is two-phase so that peak memory does not depend on the file size (only the header,
 * i.e. the names and shapes, is held in memory):
 *
 *   sl_st_writer *w = sl_st_writer_open("ckpt/model.safetensors", err, sizeof err);
 *   sl_st_writer_set_metadata(w, "format", "pt");         // any time before the data phase
 *   sl_st_writer_declare(w, "a", "F32", 2, shape_a);      // every tensor, in file order
 *   sl_st_writer_declare(w, "b", "BF16", 1, shape_b);
 *   sl_st_writer_begin_data(w);                           // optional: the first write does it
 *   sl_st_writer_write(w, "a", data_a, nbytes_a);         // in declaration order, or in pieces
 *   sl_st_writer_write_chunk(w, part1, n1);               //   with write_chunk
 *   sl_st_writer_write_chunk(w, part2, n2);
 *   if (sl_st_writer_close(w, err, sizeof err) != 0) ...  // fsync, rename, fsync directory
 *
 * Data goes to "<path>.tmp.<pid>" in the destination's directory; sl_st_writer_close makes it
 * appear at `path` atomically (a reader sees the old file or the complete new one, never a
 * partial one). The first error is sticky: later calls return -1 without doing anything,
 * sl_st_writer_error() returns the message, and sl_st_writer_close() reports it, removes the
 * temp file and leaves an existing file at `path` untouched. Tensor data is written as given
 * (the caller supplies little-endian bytes, which is the host order on every target of sluice).
 *
 * Reading validates the whole header in sl_st_open (see there); tensor data is then read with
 * pread, so a sl_st_file may be read from several threads at once.
 *
 * Every error message starts with the file path and names the tensor, field or byte offset.
 */
#ifndef SL_SAFETENSORS_H
#define SL_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Most dimensions a tensor may have in a file read or written here. */
#define SL_ST_MAX_DIMS 8
/* Largest header accepted by the reader (the limit of the reference implementation). */
#define SL_ST_MAX_HEADER (100u * 1000u * 1000u)

/* Bytes per element of a safetensors dtype name ("F32", "BF16", "I32", ...), 0 if unknown.
 * Known: BOOL U8 I8 F8_E5M2 F8_E4M3 F8_E8M0 (1 byte), I16 U16 F16 BF16 (2), I32 U32 F32 (4),
 * I64 U64 F64 (8). Sub-byte types (F4, F6_*) are not supported. */
size_t sl_st_dtype_size(const char *dtype);

/* ---- Hugging Face's names for a model's weight files (`sluice ckpt export`, a run's final/) ----
 */

#define SL_ST_HF_INDEX "model.safetensors.index.json"
/* Shard `shard` (from 0) of `count`: "model.safetensors" when count is 1, else
 * "model-00001-of-00004.safetensors" and so on. */
void sl_st_hf_shard_name(char *buf, size_t n, int shard, int count);
/* Whether `name` is a weights file of such a layout (model*.safetensors, or the index): what a
 * save of another layout into the same directory replaces. */
bool sl_st_hf_weights_file(const char *name);

/* ---- writer ---- */

typedef struct sl_st_writer sl_st_writer;

/* Creates "<path>.tmp.<pid>" (truncating a stale one). NULL with a message in err on failure.
 * One writer per destination path per process at a time. */
sl_st_writer *sl_st_writer_open(const char *path, char *err, size_t errlen);

/* Adds a string to "__metadata__" (replacing an earlier value of the same key). Before the data
 * phase only. 0, or -1 (sticky error). */
int sl_st_writer_set_metadata(sl_st_writer *w, const char *key, const char *value);

/* Declares the next tensor: its data will follow the previous tensor's in the file. ndim may be
 * 0 (a scalar: one element); dimensions may be 0 (an empty tensor, no bytes). Names must be
 * unique, valid UTF-8, non-empty and not "__metadata__". Returns the tensor's index, or -1. */
int sl_st_writer_declare(sl_st_writer *w, const char *name, const char *dtype, int ndim,
                         const int64_t *shape);

/* Ends the declaration phase: writes the header (duplicate names are reported here). */
int sl_st_writer_begin_data(sl_st_writer *w);

/* Writes the whole of tensor `name`, which must be the next tensor in declaration order (empty
 * tensors may be skipped). nbytes must equal its size (numel * dtype size). 0, or -1. */
int sl_st_writer_write(sl_st_writer *w, const char *name, const void *data, size_t nbytes);

/* Writes the next nbytes of data: the continuation of the current tensor, or the start of the
 * next one once the current is complete. A chunk never spans two tensors: nbytes must not exceed
 * what remains of the current tensor. 0, or -1. */
int sl_st_writer_write_chunk(sl_st_writer *w, const void *data, size_t nbytes);

/* The first error recorded by the writer, or NULL. */
const char *sl_st_writer_error(const sl_st_writer *w);

/* Checks that every declared byte was written, fsyncs the file, renames it to `path` and fsyncs
 * the directory. Always frees w. 0, or -1 with the message in err; on an error before the
 * rename the temp file is removed and `path` is untouched. */
int sl_st_writer_close(sl_st_writer *w, char *err, size_t errlen);

/* Removes the temp file and frees w (NULL is allowed). `path` is untouched. */
void sl_st_writer_abort(sl_st_writer *w);

/* ---- reader ---- */

typedef struct sl_st_file sl_st_file;

/* Opens and validates a file: the header length is at least 2, below SL_ST_MAX_HEADER and
 * within the file; the header is UTF-8 JSON, one object starting with '{' followed only by
 * whitespace, without duplicate names; every tensor has a known dtype, a shape of at most
 * SL_ST_MAX_DIMS non-negative integers and data_offsets [begin, end] with end - begin =
 * numel * dtype size; the tensors' byte ranges tile the data section exactly (no overlap, no
 * gap, nothing past the end of the file, no trailing bytes); "__metadata__" maps strings to
 * strings. NULL with a message in err on failure. */
sl_st_file *sl_st_open(const char *path, char *err, size_t errlen);
void sl_st_close(sl_st_file *f);

/* Tensors in header order. */
int sl_st_count(const sl_st_file *f);
const char *sl_st_name_at(const sl_st_file *f, int i);
/* Index of tensor `name`, or -1 (binary search). */
int sl_st_find(const sl_st_file *f, const char *name);
const char *sl_st_dtype(const sl_st_file *f, int i);
int sl_st_ndim(const sl_st_file *f, int i);
const int64_t *sl_st_shape(const sl_st_file *f, int i);
int64_t sl_st_numel(const sl_st_file *f, int i);
size_t sl_st_nbytes(const sl_st_file *f, int i);
/* Absolute file offset of tensor i's first byte. */
uint64_t sl_st_file_offset(const sl_st_file *f, int i);

/* Reads all of tensor i into dst; nbytes must equal sl_st_nbytes(f, i). 0, or -1 with err. */
int sl_st_read(const sl_st_file *f, int i, void *dst, size_t nbytes, char *err, size_t errlen);
/* Reads bytes [offset, offset + nbytes) of tensor i (for tensors read in pieces). */
int sl_st_read_part(const sl_st_file *f, int i, size_t offset, void *dst, size_t nbytes, char *err,
                    size_t errlen);

/* "__metadata__" value of key, or NULL. Keys in header order via count/key_at. */
const char *sl_st_metadata(const sl_st_file *f, const char *key);
int sl_st_metadata_count(const sl_st_file *f);
const char *sl_st_metadata_key_at(const sl_st_file *f, int i);

#endif
