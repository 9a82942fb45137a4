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

/* How a command-line PATH named a file (sl_data_resolve_arg). */
typedef enum {
    SL_DATA_NAMED,      /* the argument itself */
    SL_DATA_IN_DIR,     /* a *.shard.zst file of a directory: the argument, or a glob's match */
    SL_DATA_GLOB_MATCH, /* a file a glob matched */
    SL_DATA_EMPTY_DIR,  /* a directory a glob matched that holds no shards (for a note) */
} sl_data_origin;

/* sl_data_resolve for the PATH arguments of `sluice data info | show | verify`: the same files,
 * except that a glob's matches that are directories are listed as a directory argument is, in
 * the glob's order (one without shards as itself, SL_DATA_EMPTY_DIR). *origins (malloc'ed,
 * free()) tells how each was named, so that a command can skip what a glob matched but is no
 * shard (sl_shard_not_a_shard). */
int sl_data_resolve_arg(const char *spec, char ***files, sl_data_origin **origins, int *n,
                        char *err, size_t errlen);

#endif
