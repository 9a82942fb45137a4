/*
 * io/paths.h - resolving a data path from the config or the command line into shard files.
 *
 * A path names a single shard file, a directory (every "*.shard.zst" file in it whose name does
 * not start with '.', sorted by name; subdirectories are not searched), or a glob pattern
 * (glob(3): '*', '?' and '[...]'; matches sorted by name). Resolving to no file is an error.
 */
#ifndef SL_IO_PATHS_H
#define SL_IO_PATHS_H

#include <stddef.h>

/* On success *files is a malloc'ed array of *n malloc'ed paths (free with sl_data_paths_free). */
int sl_data_resolve(const char *spec, char ***files, int *n, char *err, size_t errlen);
void sl_data_paths_free(char **files, int n);

#endif
