/* launch/gnuplot.c - runs gnuplot on a generated script (see gnuplot.h). */
#include "launch/gnuplot.h"

#include <errno.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/log.h"

extern char **environ;

void sl_gnuplot_quote(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

void sl_gnuplot_png(FILE *f, const char *png, int width, int height) {
    fprintf(f,
            "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
            "  set terminal pngcairo noenhanced size %d,%d font 'sans,10'\n"
            "} else {\n"
            "  set terminal png noenhanced size %d,%d\n"
            "}\n"
            "set output ",
            width, height, width, height);
    sl_gnuplot_quote(f, png);
    fputc('\n', f);
}

static bool is_png(const char *path) {
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    unsigned char b[8] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    const size_t n = fread(b, 1, sizeof b, f);
    fclose(f);
    return n == sizeof b && memcmp(b, sig, sizeof b) == 0;
}

int sl_gnuplot_run(const char *script, const char *png, char *err, size_t errlen) {
    /* The script goes through a file, not a pipe: gnuplot's messages then name its lines. */
    char path[] = "/tmp/sluice-plot-XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) return sl_fail(err, errlen, "cannot create a temporary file: %s", strerror(errno));
    const size_t len = strlen(script);
    const bool wrote = write(fd, script, len) == (ssize_t)len;
    close(fd);
    if (!wrote) {
        unlink(path);
        return sl_fail(err, errlen, "cannot write the gnuplot script %s", path);
    }
    if (remove(png) != 0 && errno != ENOENT)
        sl_warn("%s: cannot remove the old file: %s", png, strerror(errno));
    char *argv[] = {"gnuplot", path, NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, "gnuplot", NULL, NULL, argv, environ);
    if (rc != 0) {
        unlink(path);
        if (rc == ENOENT)
            return sl_fail(err, errlen,
                           "gnuplot is not installed (apt-get install gnuplot-nox, or "
                           "launch/install-deps.sh --tests)");
        return sl_fail(err, errlen, "cannot run gnuplot: %s", strerror(rc));
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    unlink(path);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return sl_fail(err, errlen, "gnuplot failed (exit status %d) writing %s",
                       WIFEXITED(status) ? WEXITSTATUS(status) : -1, png);
    if (!is_png(png)) return sl_fail(err, errlen, "gnuplot wrote no PNG file at %s", png);
    return 0;
}
