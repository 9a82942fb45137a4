/*
 * tests/test_config_docs.c - docs/config.md against the parser: every key that a loaded config
 * writes back (sl_config_to_json, which writes every key of every section, defaults included)
 * has a row in its section's table, and every row of a section's key table is a key the parser
 * writes. A key added to a table in trainer/config_sections.c or model/config.c without a line
 * in the docs, or a row left behind after a key went, fails here, naming the key; so does a key
 * that README.md's "Configuration" (the keys in brief) does not name.
 * Part of the test_config program (tests/test_config.c).
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/test_config.h"
#include "tests/test_util.h"

static char *read_doc(const char *rel) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", SLUICE_SOURCE_DIR, rel);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL, "cannot open %s", path);
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = '\0';
    fclose(f);
    return s;
}

/* The text of the page under the heading line `heading` (e.g. "## training") up to the next
 * heading of any level, copied (free it); NULL and a failed check where the heading is missing. */
static char *section(const char *doc, const char *heading) {
    char pat[128];
    snprintf(pat, sizeof pat, "\n%s\n", heading);
    const char *b = strstr(doc, pat);
    CHECK(b != NULL, "no heading \"%s\" (docs/config.md or README.md)", heading);
    if (!b) return NULL;
    b += strlen(pat);
    const char *e = b;
    while ((e = strchr(e, '\n')) != NULL && e[1] != '#') e++;
    size_t n = e ? (size_t)(e - b) : strlen(b);
    char *s = malloc(n + 1);
    memcpy(s, b, n);
    s[n] = '\0';
    return s;
}

/* The keys of the section text's key tables: the rows under a header "| key | type | default |
 * valid | meaning |", each row's first backticked word. Other tables (the informational
 * Hugging Face keys) are not key tables. Returns the count; names go into out[]. */
static int table_keys(const char *text, char out[][64], int max) {
    static const char header[] = "| key | type | default | valid | meaning |";
    int n = 0;
    for (const char *t = strstr(text, header); t; t = strstr(t, header)) {
        const char *line = strchr(t, '\n'); /* the header's end, then the |---| line */
        line = line ? strchr(line + 1, '\n') : NULL;
        while (line && strncmp(line + 1, "| `", 3) == 0) {
            const char *k = line + 4, *end = strchr(k, '`');
            if (end && end - k < 64 && n < max) {
                memcpy(out[n], k, (size_t)(end - k));
                out[n][end - k] = '\0';
                n++;
            }
            line = strchr(line + 1, '\n');
        }
        t += sizeof header - 1;
    }
    return n;
}

static bool has_row(const char *text, const char *key) {
    char pat[96];
    snprintf(pat, sizeof pat, "\n| `%s`", key);
    return strstr(text, pat) != NULL;
}

/* The line of `text` that starts with the row of `key` (for keys documented inside a row). */
static char *row_of(const char *text, const char *key) {
    char pat[96];
    snprintf(pat, sizeof pat, "\n| `%s`", key);
    const char *b = strstr(text, pat);
    if (!b) return NULL;
    b++;
    const char *e = strchr(b, '\n');
    size_t n = e ? (size_t)(e - b) : strlen(b);
    char *s = malloc(n + 1);
    memcpy(s, b, n);
    s[n] = '\0';
    return s;
}

static bool mentions(const char *text, const char *key) {
    char pat[96];
    snprintf(pat, sizeof pat, "`%s`", key);
    return text && strstr(text, pat) != NULL;
}

/* Records that a config was written with `key` in `section` (seen: section -> key set). */
static void note_key(cJSON *seen, const char *section, const char *key) {
    cJSON *mine = cJSON_GetObjectItemCaseSensitive(seen, section);
    if (!mine) mine = cJSON_AddObjectToObject(seen, section);
    if (!cJSON_GetObjectItemCaseSensitive(mine, key)) cJSON_AddTrueToObject(mine, key);
}

/* rope_scaling objects (the model's or a stage's) against "### model.rope_scaling". */
static void check_rope_scaling(const cJSON *rs, const char *where, const char *doc_rs,
                               cJSON *seen) {
    for (const cJSON *k = rs->child; k; k = k->next) {
        CHECK(has_row(doc_rs, k->string),
              "%s.rope_scaling.%s is written by the parser but has no row under "
              "\"### model.rope_scaling\" in docs/config.md",
              where, k->string);
        note_key(seen, "rope_scaling", k->string);
    }
}

/* Keys documented inside one row of a section (`text`): the corpora's objects of data.train,
 * the stages' keys (with their rope_scaling and data objects). */
static void check_inline_rows(const cJSON *sec, const char *text, const char *doc_rs, cJSON *seen) {
    const cJSON *train = cJSON_GetObjectItemCaseSensitive(sec, "train");
    if (strcmp(sec->string, "data") == 0 && cJSON_IsArray(train)) {
        char *row = row_of(text, "train");
        for (const cJSON *it = train->child; it; it = it->next)
            for (const cJSON *k = it->child; k; k = k->next)
                CHECK(mentions(row, k->string),
                      "data.train[].%s is not named in docs/config.md's data.train row", k->string);
        free(row);
    }
    const cJSON *stages = cJSON_GetObjectItemCaseSensitive(sec, "stages");
    if (strcmp(sec->string, "training") != 0 || !cJSON_IsArray(stages)) return;
    char *row = row_of(text, "stages");
    for (const cJSON *st = stages->child; st; st = st->next)
        for (const cJSON *k = st->child; k; k = k->next) {
            CHECK(mentions(row, k->string),
                  "training.stages[].%s is not named in docs/config.md's stages row", k->string);
            if (strcmp(k->string, "rope_scaling") == 0 && cJSON_IsObject(k))
                check_rope_scaling(k, "training.stages[]", doc_rs, seen);
            if (strcmp(k->string, "data") == 0 && cJSON_IsObject(k))
                for (const cJSON *d = k->child; d; d = d->next)
                    CHECK(mentions(row, d->string),
                          "training.stages[].data.%s is not named in the stages row", d->string);
        }
    free(row);
}

/* One config's keys: each is documented; `seen` collects them per section ("rope_scaling" for
 * the YaRN objects) for the other direction. `sets`: --set overrides applied after loading. */
static void check_config(const char *file, const char *const *sets, int nsets, const char *doc,
                         const char *readme, cJSON *seen) {
    sl_config c;
    char err[512];
    if (!tc_load(file, &c)) return;
    CHECK(sl_config_apply_sets(&c, sets, nsets, err, sizeof err) == 0, "%s with sets: %s", file,
          err);
    char *json = sl_config_to_json(&c);
    cJSON *root = json ? cJSON_Parse(json) : NULL;
    CHECK(root != NULL, "%s: sl_config_to_json gave no JSON", file);
    free(json);
    if (!root) return;
    char *doc_rs = section(doc, "### model.rope_scaling");
    for (const cJSON *sec = root->child; sec; sec = sec->next) {
        char heading[64];
        snprintf(heading, sizeof heading, "## %s", sec->string);
        char *text = section(doc, heading);
        if (!text) continue;
        CHECK(cJSON_IsObject(sec), "%s: section %s is not an object", file, sec->string);
        for (const cJSON *k = sec->child; k; k = k->next) {
            CHECK(has_row(text, k->string),
                  "%s.%s is written by the parser but has no row in docs/config.md's \"%s\"",
                  sec->string, k->string, heading);
            CHECK(mentions(readme, k->string),
                  "%s.%s is not named in README.md's \"## Configuration\" (the keys in brief)",
                  sec->string, k->string);
            if (strcmp(k->string, "rope_scaling") == 0 && cJSON_IsObject(k))
                check_rope_scaling(k, sec->string, doc_rs, seen);
            note_key(seen, sec->string, k->string); /* for the other direction, after all */
        }
        check_inline_rows(sec, text, doc_rs, seen);
        free(text);
    }
    free(doc_rs);
    cJSON_Delete(root);
}

/* The other direction: every row of a key table names a key some config was written with. */
static void check_rows(const char *doc, const cJSON *seen) {
    for (const cJSON *sec = seen->child; sec; sec = sec->next) {
        char heading[64];
        bool rs = strcmp(sec->string, "rope_scaling") == 0;
        snprintf(heading, sizeof heading, rs ? "### model.%s" : "## %s", sec->string);
        char *text = section(doc, heading);
        char keys[64][64];
        int n = text ? table_keys(text, keys, 64) : 0;
        CHECK(n > 0, "docs/config.md's \"%s\" has no key table", heading);
        for (int i = 0; i < n; i++)
            CHECK(cJSON_GetObjectItemCaseSensitive(sec, keys[i]) != NULL,
                  "docs/config.md's \"%s\" documents `%s`, which no checked config was written "
                  "with",
                  heading, keys[i]);
        free(text);
    }
}

void test_keys_documented(void) {
    char *doc = read_doc("docs/config.md"), *top = read_doc("README.md");
    char *readme = top ? section(top, "## Configuration") : NULL;
    if (!doc || !readme) {
        free(doc), free(top), free(readme);
        return;
    }
    cJSON *seen = cJSON_CreateObject();
    /* Keys sl_config_to_json writes only when they are set: training.metrics_file (else it
     * follows out_dir), training.stages / max_steps (one or the other), rope_scaling's
     * attention_factor (else derived from the factor). The schedules carry stages with a
     * YaRN rope_scaling each. */
    static const char *const plain[] = {"training.metrics_file=runs/m.jsonl"};
    static const char *const yarn[] = {
        "model.rope_scaling={\"rope_type\": \"yarn\", \"factor\": 4, "
        "\"original_max_position_embeddings\": 256, \"attention_factor\": 1.1}"};
    check_config("configs/tiny.json", plain, 1, doc, readme, seen);
    check_config("configs/tiny.json", yarn, 1, doc, readme, seen);
    check_config("configs/tiny-schedule.json", NULL, 0, doc, readme, seen);
    check_config("configs/qwen-gated-15a2b-schedule.json", NULL, 0, doc, readme, seen);
    CHECK(cJSON_GetObjectItemCaseSensitive(seen, "rope_scaling") != NULL,
          "no config with a rope_scaling object was checked");
    check_rows(doc, seen);
    cJSON_Delete(seen);
    free(doc), free(top), free(readme);
}
