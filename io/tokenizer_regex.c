/*
 * io/tokenizer_regex.c - the pre-tokenizer regexes: tokenizer.json's patterns are Oniguruma's
 * (Ruby syntax), which the Rust `tokenizers` library runs; sluice runs them with PCRE2 (JIT).
 * The two engines agree on most of the syntax (alternation order, greedy / lazy / possessive
 * quantifiers, lookaround, atomic groups, \p{..} general categories, both on Unicode 14) but
 * not on every escape, so each pattern is translated construct by construct, and a construct
 * whose meaning differs or that this file has not checked is refused with its byte offset:
 *
 *   \s \S   Oniguruma: White_Space (Unicode).   PCRE2: Zs, \h, \v (adds U+180E) -> \p{White_Space}
 *   \d \D   Decimal_Number                                              -> \p{Nd}
 *   \w \W   Letter, Mark, Decimal_Number, Connector_Punctuation          -> that class
 *   \h \H   a hexadecimal digit (PCRE2: horizontal space)                -> [0-9a-fA-F]
 *   \v      U+000B (PCRE2: any vertical space)                           -> \x{0B}
 *   .       any character but \n                                         -> [^\n]
 *   {,n}    {0,n} (PCRE2 10.42 reads it as a literal)                    -> {0,n}
 *   (...)   capturing group                                              -> (?:...)
 *   (?i:..) case-insensitive: allowed around ASCII literals only, and without the pairs that
 *           Oniguruma's multi-character case folding matches (ss ~ U+00DF, st, ff, fi, fl ~
 *           the ligatures); PCRE2 folds single characters the same way (s ~ U+017F, k ~
 *           U+212A).
 * Refused: anchors (^ $ \A \z \Z \G \b \B), back-references, named groups, inline options
 * other than (?i:, nested classes and POSIX brackets, class intersections, {n,m}+ (Oniguruma:
 * a repeat of a repeat, PCRE2: possessive), \p{..} with a script or long name, other escapes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "io/tokenizer_internal.h"

/* The general categories (short names) whose \p{..} both engines read alike. */
static const char *const k_categories[] = {
    "L",  "Lu", "Ll", "Lt", "Lm", "Lo", "M",  "Mn", "Mc", "Me", "N",  "Nd", "Nl",
    "No", "P",  "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "S",  "Sm", "Sc", "Sk",
    "So", "Z",  "Zs", "Zl", "Zp", "C",  "Cc", "Cf", "Cs", "Co", "Cn", NULL};

#define WORD_CLASS "\\p{L}\\p{M}\\p{Nd}\\p{Pc}"

typedef struct {
    char *s;
    size_t n, cap;
} sbuf;

static void put(sbuf *b, const char *s, size_t n) {
    sl_xreserve((void **)&b->s, &b->cap, b->n + n + 1);
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}
static void puts_(sbuf *b, const char *s) {
    put(b, s, strlen(s));
}

typedef struct {
    const char *p;
    size_t n, i;
    sbuf out;
    char *err;
    size_t errlen;
    int ci;         /* depth of (?i: groups around the current position */
    int depth;      /* open groups */
    char ci_prev;   /* the previous literal in a case-insensitive group (0: none) */
    bool can_quant; /* the last item can take a quantifier */
} xl;

static int refuse(xl *x, size_t at, const char *what) {
    return sl_fail(x->err, x->errlen, "byte offset %zu of the pattern: %s", at, what);
}

/* The bytes of the UTF-8 character starting at x->i (0 when the pattern ends inside it). */
static size_t char_len(const xl *x) {
    const unsigned char u = (unsigned char)x->p[x->i];
    const size_t len = u >= 0xF0 ? 4 : u >= 0xE0 ? 3 : u >= 0xC0 ? 2 : 1;
    return x->i + len > x->n ? 0 : len;
}

static bool is_hex(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
static bool is_alnum(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
static char lower(char c) {
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* \p{Name} / \P{Name} at x->i (the backslash): appends it; 0 or -1. */
static int property(xl *x) {
    size_t at = x->i;
    const char kind = x->p[x->i + 1];
    if (x->i + 2 >= x->n || x->p[x->i + 2] != '{')
        return refuse(x, at, "\\p without {Name} is not supported");
    size_t e = x->i + 3;
    while (e < x->n && x->p[e] != '}') e++;
    if (e >= x->n) return refuse(x, at, "unterminated \\p{");
    const char *name = x->p + x->i + 3;
    size_t len = e - (x->i + 3);
    bool known = false;
    for (int k = 0; k_categories[k]; k++)
        if (strlen(k_categories[k]) == len && memcmp(k_categories[k], name, len) == 0) known = true;
    if (!known)
        return refuse(x, at,
                      "only general-category properties (\\p{L}, \\p{Nd}, ...) are supported; "
                      "script and long property names differ between Oniguruma and PCRE2");
    put(&x->out, kind == 'P' ? "\\P{" : "\\p{", 3);
    put(&x->out, name, len);
    put(&x->out, "}", 1);
    x->i = e + 1;
    return 0;
}

/* \xHH, \x{H..}, \uHHHH at x->i: appends \x{..}; 0 or -1. */
static int hex_escape(xl *x) {
    size_t at = x->i, j = x->i + 2;
    char digits[16];
    size_t nd = 0;
    if (x->p[x->i + 1] == 'u') {
        for (; nd < 4 && j < x->n && is_hex(x->p[j]); j++) digits[nd++] = x->p[j];
        if (nd != 4) return refuse(x, at, "\\u needs four hexadecimal digits");
    } else if (j < x->n && x->p[j] == '{') {
        for (j++; j < x->n && is_hex(x->p[j]) && nd < 8; j++) digits[nd++] = x->p[j];
        if (j >= x->n || x->p[j] != '}' || nd == 0) return refuse(x, at, "malformed \\x{...}");
        j++;
    } else {
        for (; nd < 2 && j < x->n && is_hex(x->p[j]); j++) digits[nd++] = x->p[j];
        if (nd == 0) return refuse(x, at, "\\x needs hexadecimal digits");
    }
    put(&x->out, "\\x{", 3);
    put(&x->out, digits, nd);
    put(&x->out, "}", 1);
    x->i = j;
    return 0;
}

/* Oniguruma's escapes that both engines can spell: the PCRE2 text outside a class and inside
 * one (NULL: refused there), and whether the escape stands for a set of characters (which
 * cannot bound a range in a class). */
static const struct {
    char c;
    const char *out, *in;
    bool set;
} k_escapes[] = {
    {'s', "\\p{White_Space}", "\\p{White_Space}", true},
    {'S', "\\P{White_Space}", "\\P{White_Space}", true},
    {'d', "\\p{Nd}", "\\p{Nd}", true},
    {'D', "\\P{Nd}", "\\P{Nd}", true},
    {'w', "[" WORD_CLASS "]", WORD_CLASS, true},
    {'W', "[^" WORD_CLASS "]", NULL, true},
    {'h', "[0-9a-fA-F]", "0-9a-fA-F", true},
    {'H', "[^0-9a-fA-F]", NULL, true},
    {'t', "\\t", "\\t", false},
    {'n', "\\n", "\\n", false},
    {'r', "\\r", "\\r", false},
    {'f', "\\f", "\\f", false},
    {'v', "\\x{0B}", "\\x{0B}", false},
    {'a', "\\x{07}", "\\x{07}", false},
    {'e', "\\x{1B}", "\\x{1B}", false},
};

/* One escape at x->i, outside a class or inside one (in_class); *set: it stands for a set of
 * characters. 0, or -1 with err. */
static int escape(xl *x, bool in_class, bool *set) {
    size_t at = x->i;
    if (x->i + 1 >= x->n) return refuse(x, at, "a trailing backslash");
    const char c = x->p[x->i + 1];
    if (x->ci && (is_alnum(c) || (unsigned char)c >= 0x80))
        return refuse(x, at,
                      "inside (?i: only literal ASCII characters are supported (case folding "
                      "of classes differs between Oniguruma and PCRE2)");
    *set = false;
    for (size_t k = 0; k < sizeof k_escapes / sizeof k_escapes[0]; k++) {
        if (k_escapes[k].c != c) continue;
        const char *rep = in_class ? k_escapes[k].in : k_escapes[k].out;
        if (!rep) break;
        puts_(&x->out, rep);
        x->i += 2;
        *set = k_escapes[k].set;
        return 0;
    }
    if (c == 'p' || c == 'P') {
        *set = true;
        return property(x);
    }
    if (c == 'x' || c == 'u') return hex_escape(x);
    if (is_alnum(c)) {
        char what[192];
        snprintf(what, sizeof what,
                 "the escape \\%c is not supported%s (anchors, back-references and the other "
                 "escapes are read differently by Oniguruma and PCRE2)",
                 c, in_class ? " in a class" : "");
        return refuse(x, at, what);
    }
    if ((unsigned char)c < 0x20 || (unsigned char)c >= 0x7f)
        return refuse(x, at, "a backslash before a control or non-ASCII character");
    char lit[2] = {'\\', c};
    put(&x->out, lit, 2); /* an escaped ASCII punctuation character: itself in both */
    x->i += 2;
    if (x->ci) x->ci_prev = c;
    return 0;
}

/* A class [...] at x->i. */
static int klass(xl *x) {
    size_t at = x->i;
    if (x->ci)
        return refuse(x, at,
                      "a character class inside (?i: is not supported (case folding of classes "
                      "differs between Oniguruma and PCRE2)");
    x->i++;
    put(&x->out, "[", 1);
    if (x->i < x->n && x->p[x->i] == '^') put(&x->out, "^", 1), x->i++;
    if (x->i < x->n && x->p[x->i] == ']')
        return refuse(x, x->i, "']' first in a class is read differently by the two engines");
    int prev = 0; /* 0: nothing yet, 1: a single character (may start a range), 2: a set, 3: '-'
                   * after a character (a range is open) */
    while (x->i < x->n && x->p[x->i] != ']') {
        const size_t ia = x->i;
        const char c = x->p[x->i];
        if (c == '[') return refuse(x, ia, "nested classes and POSIX brackets are not supported");
        if (c == '&' && x->i + 1 < x->n && x->p[x->i + 1] == '&')
            return refuse(x, ia, "class intersections (&&) are not supported");
        if (c == '-') {
            const bool last = x->i + 1 < x->n && x->p[x->i + 1] == ']';
            if (prev == 1 && !last) {
                put(&x->out, "-", 1);
                prev = 3;
            } else if (prev == 0 || last) {
                put(&x->out, "\\-", 2);
                prev = 1;
            } else {
                return refuse(x, ia, "a '-' after a set or a range in a class is not supported");
            }
            x->i++;
            continue;
        }
        bool single = true;
        if (c == '\\') {
            bool set;
            if (escape(x, true, &set) != 0) return -1;
            single = !set;
        } else {
            /* one UTF-8 character, copied */
            const size_t len = char_len(x);
            if (!len) return refuse(x, ia, "a truncated UTF-8 character");
            put(&x->out, x->p + x->i, len);
            x->i += len;
        }
        if (!single && prev == 3) return refuse(x, ia, "a range ending in a set is not supported");
        prev = single ? (prev == 3 ? 2 : 1) : 2;
    }
    if (x->i >= x->n) return refuse(x, at, "unterminated character class");
    if (prev == 0) return refuse(x, at, "an empty character class");
    put(&x->out, "]", 1);
    x->i++;
    x->can_quant = true;
    return 0;
}

/* A quantifier at x->i: ? * + or {..}, with its lazy / possessive suffix. */
static int quantifier(xl *x) {
    size_t at = x->i;
    const char c = x->p[x->i];
    if (c != '{' && !x->can_quant) return refuse(x, at, "a quantifier with nothing to repeat");
    if (c == '{') {
        size_t j = x->i + 1;
        long lo = -1, hi = -1;
        bool comma = false;
        char num[24];
        size_t k = 0;
        for (; j < x->n && x->p[j] >= '0' && x->p[j] <= '9' && k < 9; j++) num[k++] = x->p[j];
        num[k] = 0;
        if (k) lo = strtol(num, NULL, 10);
        if (j < x->n && x->p[j] == ',') {
            comma = true;
            k = 0;
            for (j++; j < x->n && x->p[j] >= '0' && x->p[j] <= '9' && k < 9; j++)
                num[k++] = x->p[j];
            num[k] = 0;
            if (k) hi = strtol(num, NULL, 10);
        }
        if (j >= x->n || x->p[j] != '}' || (lo < 0 && hi < 0)) {
            /* not an interval: Oniguruma reads '{' as a literal */
            put(&x->out, "\\{", 2);
            x->i++;
            x->can_quant = true;
            return 0;
        }
        if (!x->can_quant) return refuse(x, at, "a quantifier with nothing to repeat");
        if (lo < 0) lo = 0;
        if (comma && hi >= 0 && hi < lo) return refuse(x, at, "an interval {n,m} with m < n");
        char q[48];
        if (!comma)
            snprintf(q, sizeof q, "{%ld}", lo);
        else if (hi < 0)
            snprintf(q, sizeof q, "{%ld,}", lo);
        else
            snprintf(q, sizeof q, "{%ld,%ld}", lo, hi);
        puts_(&x->out, q);
        x->i = j + 1;
        if (x->i < x->n && x->p[x->i] == '+')
            return refuse(x, x->i,
                          "{n,m}+ repeats the interval in Oniguruma but is possessive in PCRE2");
        if (x->i < x->n && x->p[x->i] == '?') put(&x->out, "?", 1), x->i++;
    } else {
        put(&x->out, &c, 1);
        x->i++;
        if (x->i < x->n && (x->p[x->i] == '?' || x->p[x->i] == '+'))
            put(&x->out, x->p + x->i, 1), x->i++;
    }
    if (x->i < x->n &&
        (x->p[x->i] == '?' || x->p[x->i] == '*' || x->p[x->i] == '+' || x->p[x->i] == '{'))
        return refuse(x, x->i, "a repeat of a repeat is not supported");
    x->can_quant = false;
    return 0;
}

char *tok_regex_translate(const char *pattern, size_t n, char *err, size_t errlen) {
    xl x = {.p = pattern, .n = n, .err = err, .errlen = errlen};
    int ci_at[64]; /* the (?i: depth outside each open group */
    int rc = 0;
    puts_(&x.out, "");
    while (rc == 0 && x.i < x.n) {
        const size_t at = x.i;
        const char c = x.p[x.i];
        switch (c) {
        case '\\': {
            bool set;
            rc = escape(&x, false, &set);
            x.can_quant = true;
            break;
        }
        case '[':
            rc = klass(&x);
            break;
        case '?':
        case '*':
        case '+':
        case '{':
            rc = quantifier(&x);
            break;
        case '(': {
            if (x.depth >= 63) {
                rc = refuse(&x, at, "groups nested too deeply");
                break;
            }
            const char *r = x.p + x.i;
            size_t left = x.n - x.i;
            bool ci = false;
            size_t skip;
            const char *out;
            if (left >= 4 && memcmp(r, "(?i:", 4) == 0)
                skip = 4, out = "(?i:", ci = true;
            else if (left >= 3 && memcmp(r, "(?:", 3) == 0)
                skip = 3, out = "(?:";
            else if (left >= 4 && (memcmp(r, "(?<=", 4) == 0 || memcmp(r, "(?<!", 4) == 0))
                skip = 4, out = r[3] == '=' ? "(?<=" : "(?<!";
            else if (left >= 3 && (memcmp(r, "(?=", 3) == 0 || memcmp(r, "(?!", 3) == 0 ||
                                   memcmp(r, "(?>", 3) == 0))
                skip = 3, out = r[2] == '=' ? "(?=" : r[2] == '!' ? "(?!" : "(?>";
            else if (left >= 2 && r[1] == '?') {
                rc = refuse(&x, at,
                            "this group kind is not supported (named groups, comments and inline "
                            "options other than (?i: differ between Oniguruma and PCRE2)");
                break;
            } else
                skip = 1, out = "(?:";
            ci_at[x.depth] = x.ci;
            x.depth++;
            if (ci) x.ci++;
            puts_(&x.out, out);
            x.i += skip;
            x.ci_prev = 0;
            x.can_quant = false;
            break;
        }
        case ')':
            if (x.depth == 0) {
                rc = refuse(&x, at, "an unbalanced ')'");
                break;
            }
            x.depth--;
            x.ci = ci_at[x.depth];
            put(&x.out, ")", 1);
            x.i++;
            x.ci_prev = 0;
            x.can_quant = true;
            break;
        case '|':
            put(&x.out, "|", 1);
            x.i++;
            x.ci_prev = 0;
            x.can_quant = false;
            break;
        case '.':
            if (x.ci) {
                rc = refuse(&x, at, "'.' inside (?i: is not supported");
                break;
            }
            puts_(&x.out, "[^\\n]");
            x.i++;
            x.can_quant = true;
            break;
        case '^':
        case '$':
            rc = refuse(&x, at,
                        "anchors (^ $) are not supported (Oniguruma's Ruby syntax makes them "
                        "line anchors)");
            break;
        case ']':
        case '}': {
            char lit[2] = {'\\', c};
            put(&x.out, lit, 2);
            x.i++;
            x.can_quant = true;
            break;
        }
        default: {
            const size_t len = char_len(&x);
            const unsigned char u = (unsigned char)c;
            if (!len) {
                rc = refuse(&x, at, "a truncated UTF-8 character");
                break;
            }
            if (x.ci) {
                if (u >= 0x80 || u < 0x20) {
                    rc = refuse(&x, at,
                                "inside (?i: only ASCII literals are supported (case folding "
                                "beyond ASCII differs between Oniguruma and PCRE2)");
                    break;
                }
                const char a = lower(x.ci_prev), b = lower(c);
                if ((a == 's' && (b == 's' || b == 't')) ||
                    (a == 'f' && (b == 'f' || b == 'i' || b == 'l'))) {
                    rc = refuse(&x, at,
                                "inside (?i:, the pairs ss, st, ff, fi and fl also match a "
                                "single character in Oniguruma (multi-character case "
                                "folding), which PCRE2 does not do");
                    break;
                }
                x.ci_prev = c;
            }
            put(&x.out, x.p + x.i, len);
            x.i += len;
            x.can_quant = true;
            break;
        }
        }
    }
    if (rc == 0 && x.depth != 0) rc = refuse(&x, x.n, "an unclosed group");
    if (rc != 0) {
        free(x.out.s);
        return NULL;
    }
    return x.out.s;
}

int tok_regex_compile(tok_regex *r, const char *pattern, size_t n, bool literal, const char *file,
                      const char *field, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    char msg[512];
    char *src;
    if (literal) {
        src = sl_xmalloc(n + 1);
        memcpy(src, pattern, n);
        src[n] = '\0';
    } else {
        src = tok_regex_translate(pattern, n, msg, sizeof msg);
        if (!src) return sl_fail(err, errlen, "%s: %s: %s", file, field, msg);
    }
    int code;
    PCRE2_SIZE off;
    /* PCRE2_LITERAL refuses every option but a few (PCRE2_NEVER_BACKSLASH_C and PCRE2_UCP among
     * them: "invalid option bits"); a literal has no \C and no classes anyway */
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C);
    r->code = pcre2_compile((PCRE2_SPTR)src, literal ? n : PCRE2_ZERO_TERMINATED, opts, &code, &off,
                            NULL);
    if (!r->code) {
        PCRE2_UCHAR buf[256];
        pcre2_get_error_message(code, buf, sizeof buf);
        sl_fail(err, errlen,
                "%s: %s: PCRE2 cannot compile the pattern (as translated: %s): %s at "
                "offset %zu",
                file, field, literal ? "(literal)" : src, (const char *)buf, (size_t)off);
        free(src);
        return -1;
    }
    free(src);
    uint32_t minlen = 0;
    pcre2_pattern_info(r->code, PCRE2_INFO_MINLENGTH, &minlen);
    if (minlen == 0) {
        pcre2_code_free(r->code);
        r->code = NULL;
        return sl_fail(err, errlen,
                       "%s: %s: the pattern can match the empty string, which the two engines "
                       "split differently; it is refused",
                       file, field);
    }
    /* JIT where the platform has it; the interpreter gives the same matches, slower */
    r->jit = pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE) == 0;
    r->source = sl_xmalloc(n + 1);
    memcpy(r->source, pattern, n);
    r->source[n] = '\0';
    return 0;
}

void tok_regex_free(tok_regex *r) {
    if (r->code) pcre2_code_free(r->code);
    free(r->source);
    memset(r, 0, sizeof *r);
}
