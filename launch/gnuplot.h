/*
 * launch/gnuplot.h - PNG plots through gnuplot (Debian gnuplot-nox), run as a subprocess on a
 * generated script, for `sluice eval --plot` and `sluice plot`.
 */
#ifndef SL_GNUPLOT_H
#define SL_GNUPLOT_H

#include <stddef.h>
#include <stdio.h>

/* Writes s as a gnuplot single-quoted string literal (quotes doubled) to f. */
void sl_gnuplot_quote(FILE *f, const char *s);

/* The script's preamble: a PNG terminal of width x height pixels (pngcairo when gnuplot has it,
 * else png) writing to `png`. */
void sl_gnuplot_png(FILE *f, const char *png, int width, int height);

/* Runs gnuplot (found on PATH) on `script`, then checks that `png` exists and is a PNG. Returns 0,
 * or -1 with err naming the cause: gnuplot missing (with the package to install), gnuplot's
 * exit status (its messages went to stderr), or a missing or malformed output file. */
int sl_gnuplot_run(const char *script, const char *png, char *err, size_t errlen);

#endif
