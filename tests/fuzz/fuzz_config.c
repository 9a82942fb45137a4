/*
 * tests/fuzz/fuzz_config.c - libFuzzer harness for the run configuration's parser and
 * validation (trainer/config.c, config_sections.c, config_stages.c, model/config.c, the key
 * tables of core/config_keys.c) and for a model's Hugging Face config.json, built with clang
 * -fsanitize=fuzzer,address,undefined by tests/fuzz/run_fuzz_config.sh.
 *
 * The first input byte picks a mode; the rest is the text:
 *   0: a run config (sl_config_parse, as `sluice train CONFIG` reads it);
 *   1: a run config, a NUL byte, then --set overrides separated by NUL bytes
 *      (sl_config_apply_sets on the parsed config, as `--set KEY=VALUE ...`);
 *   2: a Hugging Face config.json (sl_model_config_from_hf_json, as --weights DIR reads it).
 * Besides the sanitizers' checks, the harness asserts that a refusal leaves the config as it
 * was and names the file (or the --set override), that an accepted config validates, and that
 * what is accepted prints (sl_config_to_json, sl_model_config_to_hf_json) to text that parses
 * back to a config printing the same text. Built with FUZZ_CONFIG_PRINT, the file is also a
 * program that prints a config with every key, for the seeds.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "trainer/config.h"
#include "tests/fuzz/fuzz_util.h"

#define MAX_SETS 8

static sl_config *g_cfg, *g_copy, *g_back;

/* cfg prints to JSON that parses back to a config printing the same JSON. */
static void round_trip(const sl_config *cfg) {
    char err[2048];
    REQUIRE(sl_config_validate(cfg, err, sizeof err) == 0);
    char *text = sl_config_to_json(cfg);
    sl_config_defaults(g_back);
    if (sl_config_parse(text, "reprint", g_back, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_config: the printed config is refused: %s\n%s\n", err, text);
        abort();
    }
    char *again = sl_config_to_json(g_back);
    if (strcmp(text, again) != 0) {
        fprintf(stderr, "fuzz_config: printed twice, differs:\n%s\n---\n%s\n", text, again);
        abort();
    }
    free(text);
    free(again);
}

/* Parses text into g_cfg (0), or checks the refusal (-1). */
static int parse(const char *text) {
    char err[2048] = "";
    sl_config_defaults(g_cfg);
    memcpy(g_copy, g_cfg, sizeof *g_cfg);
    if (sl_config_parse(text, "fuzz", g_cfg, err, sizeof err) != 0) {
        REQUIRE(strncmp(err, "fuzz: ", 6) == 0);
        REQUIRE(memcmp(g_copy, g_cfg, sizeof *g_cfg) == 0);
        return -1;
    }
    round_trip(g_cfg);
    return 0;
}

static void sets(const char *b, size_t n) {
    const char *nul = memchr(b, 0, n);
    if (!nul || parse(b) != 0) return;
    const char *list[MAX_SETS];
    int k = 0;
    for (const char *p = nul + 1; p < b + n && k < MAX_SETS; p += strlen(p) + 1) list[k++] = p;
    char err[4096] = "";
    memcpy(g_copy, g_cfg, sizeof *g_cfg);
    if (sl_config_apply_sets(g_cfg, list, k, err, sizeof err) != 0) {
        /* the override that is wrong, or the key the overridden config fails on */
        REQUIRE(strncmp(err, "--set ", 6) == 0 || strncmp(err, "fuzz (--set): ", 14) == 0);
        REQUIRE(memcmp(g_copy, g_cfg, sizeof *g_cfg) == 0);
        return;
    }
    round_trip(g_cfg);
}

static void hf(const char *text) {
    sl_model_config m, m2;
    char err[2048] = "";
    if (sl_model_config_from_hf_json(text, "fuzz", &m, err, sizeof err) != 0) {
        REQUIRE(strncmp(err, "fuzz: ", 6) == 0);
        return;
    }
    char *json = sl_model_config_to_hf_json(&m);
    if (sl_model_config_from_hf_json(json, "reprint", &m2, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_config: the printed config.json is refused: %s\n%s\n", err, json);
        abort();
    }
    char *again = sl_model_config_to_hf_json(&m2);
    if (strcmp(json, again) != 0) {
        fprintf(stderr, "fuzz_config: printed twice, differs:\n%s\n---\n%s\n", json, again);
        abort();
    }
    free(json);
    free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (!g_cfg) {
        g_cfg = malloc(sizeof *g_cfg);
        g_copy = malloc(sizeof *g_copy);
        g_back = malloc(sizeof *g_back);
    }
    const int mode = data[0] % 3;
    size_t n = size - 1;
    /* an exact-size copy with the terminating NUL the parsers take: a read past it is caught
     * by ASan */
    char *b = malloc(n + 1);
    memcpy(b, data + 1, n);
    b[n] = '\0';
    if (mode == 0)
        parse(b);
    else if (mode == 1)
        sets(b, n);
    else
        hf(b);
    free(b);
    return 0;
}

#ifdef FUZZ_CONFIG_PRINT
/* Built as a program of its own by run_fuzz_config.sh: prints the config file argv[1] as
 * sl_config_to_json writes it, every key with its value (defaults included). Such seeds let
 * mutations reach the checks of keys that no shipped config sets. */
int main(int argc, char **argv) {
    sl_config *cfg = malloc(sizeof *cfg);
    char err[2048];
    sl_config_defaults(cfg);
    if (argc != 2 || sl_config_load(argv[1], cfg, err, sizeof err) != 0) {
        fprintf(stderr, "print_config: %s\n", argc == 2 ? err : "usage: print_config CONFIG");
        return 1;
    }
    char *text = sl_config_to_json(cfg);
    fputs(text, stdout);
    free(text);
    free(cfg);
    return 0;
}
#endif
