/*
 * core/fsutil.h - small filesystem helpers with crash-safe semantics.
 */
#ifndef SL_FSUTIL_H
#define SL_FSUTIL_H

#include <stddef.h>

/* Longest path sluice stores in a fixed-size field (config paths, output directories). */
#define SL_PATH_MAX 1024

/* Writes `len` bytes to `path` atomically: a temp file in the same directory, fsync,
 * rename over `path`, fsync of the directory. A crash leaves the old file or the new one,
 * never a mix. Returns 0, or -1 with a message naming the file in err. */
int sl_write_file_atomic(const char *path, const void *data, size_t len, char *err, size_t errlen);

/* Reads a whole file into a NUL-terminated malloc'ed buffer (*len without the NUL).
 * Returns NULL with a message naming the file on failure. */
char *sl_read_file(const char *path, size_t *len, char *err, size_t errlen);

/* write(2) until all n bytes are written (retrying EINTR and short writes). 0, or -1 with
 * errno set. */
int sl_write_all(int fd, const void *data, size_t n);

/* mkdir -p (the path must end up a directory). Returns 0, or -1 with a message naming the
 * directory. */
int sl_mkdirs(const char *path, char *err, size_t errlen);

/* fsyncs the directory `dir` (makes the entries created, renamed or removed in it durable).
 * 0, or -1 with errno. */
int sl_fsync_dir(const char *dir);
/* fsyncs the directory containing `path` (makes a rename durable). */
int sl_fsync_parent_dir(const char *path);

#endif
