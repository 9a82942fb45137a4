/* launch/cli.c - option parsing shared by the subcommands (see commands.h). */
#include "launch/commands.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

FILE *sl_cli_error_stream(void) {
    static FILE *quiet = NULL;
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK",
                                       "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (!v || !*v) continue;
        if (strcmp(v, "0") == 0) return stderr;
        if (!quiet) quiet = fopen("/dev/null", "w");
        return quiet ? quiet : stderr;
    }
    return stderr;
}

int sl_cli_usage_error(const char *cmd, const char *fmt, ...) {
    FILE *f = sl_cli_error_stream();
    fprintf(f, "sluice %s: error: ", cmd);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fprintf(f, "\n(sluice %s --help shows the options)\n", cmd);
    return 2;
}

bool sl_cli_is_help(const char *a) {
    return strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0;
}

int sl_cli_parse_u64(const char *s, bool suffix, uint64_t *out) {
    if (!s || !*s || s[0] == '-') return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) return -1;
    uint64_t mul = 1;
    if (suffix && *end) {
        /* k, M, G, T: powers of 1024 */
        static const char units[] = "kmgt";
        const char *u = strchr(units, tolower((unsigned char)*end));
        if (!u) return -1;
        mul = 1ull << (10 * (u - units + 1));
        end++;
        if (*end == 'i' || *end == 'I') end++;
        if (*end == 'b' || *end == 'B') end++;
    }
    if (*end || v > UINT64_MAX / mul) return -1;
    *out = v * mul;
    return 0;
}

int sl_cli_int_flag(const char *cmd, const char *flag, const char *v, long long lo, long long hi,
                    long long *out) {
    if (!v) {
        fprintf(sl_cli_error_stream(), "sluice %s: error: %s needs a value\n", cmd, flag);
        return 2;
    }
    uint64_t x;
    /* parsed as unsigned: a wrapped or negative value never passes as a small one */
    if (sl_cli_parse_u64(v, false, &x) != 0 || x < (uint64_t)lo || x > (uint64_t)hi) {
        fprintf(sl_cli_error_stream(),
                "sluice %s: error: %s: expected an integer in [%lld, %lld], got '%s'\n", cmd, flag,
                lo, hi, v);
        return 2;
    }
    *out = (long long)x;
    return 0;
}
