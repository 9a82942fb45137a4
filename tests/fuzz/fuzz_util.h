/*
 * tests/fuzz/fuzz_util.h - what the libFuzzer harnesses share: REQUIRE (a broken promise of the
 * parser aborts, which libFuzzer reports as a finding with its input) and fuzz_file (the input
 * as a file the parser opens by path, so that its real load-from-path code runs).
 */
#ifndef SLUICE_FUZZ_UTIL_H
#define SLUICE_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#define REQUIRE(c)                                                                                 \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #c);                                \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* The path of a memfd (made once, named `name`) that now holds exactly data[0, n). */
static inline const char *fuzz_file(const char *name, const uint8_t *data, size_t n) {
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create(name, 0);
        REQUIRE(fd >= 0);
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    REQUIRE(ftruncate(fd, 0) == 0);
    REQUIRE(pwrite(fd, data, n, 0) == (ssize_t)n);
    return path;
}

#endif
