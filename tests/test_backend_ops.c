/*
 * tests/test_backend_ops.c - backend conformance: every operation of sl_ops_i
 * (core/backend_impl.h), on random inputs of several shapes, on the backend under test,
 * compared with a reference. The cases, tolerances and comparison are the library's
 * (backends/conformance.h, which says how each output is judged), shared with `sluice doctor`.
 *
 * usage: test_backend_ops [backend] [--require-all]
 *   backend: argv, else $SLUICE_TEST_BACKEND, else "cpu".
 *   $SLUICE_TEST_DTYPE: f32 (default) or bf16, the dtype of the float tensors on the backend
 *     under test. $SLUICE_TEST_VERBOSE=1 prints every (shape, output).
 *   $SLUICE_TEST_PERTURB=OP moves OP's first output on the backend under test (the harness's
 *     fault injection): the run must then fail, naming OP (tests/backend_ops.cmake checks it).
 *
 * Reference: the CPU backend; when the backend under test IS the CPU, the naive
 * double-precision loops of backends/ref_ops.c.
 *
 * Not implemented: an operation whose slot is NULL in the backend under test is reported
 * "not implemented: <op>". It counts as a failure only with --require-all or
 * SLUICE_TEST_REQUIRE_ALL=1, and always for the CPU, the reference, which must be complete.
 * Why: a device backend gains its kernels one at a time and core/ops.c already stops any run
 * that reaches a missing one with the operation's name, so a partial backend is a normal
 * state to report, not a regression; a backend that claims completeness runs with the flag.
 *
 * Coverage: before anything runs, the library's operation table must cover every
 * function-pointer slot of sl_ops_i exactly once, each with a tolerance row: an operation
 * added to sl_ops_i without a conformance case fails the test with the slot's name (read from
 * core/backend_impl.h here).
 */
#include <stdlib.h>
#include <string.h>

#include "backends/conformance.h"
#include "tests/test_util.h"

/* Field names of sl_ops_i in declaration order, read from core/backend_impl.h (every field is
 * `ret (*name)(...)`), so that a slot without a case is reported by its name. Returns how many
 * were read, or -1 when the header is not at hand. */
static int ops_field_names(char names[][40], int max) {
#ifdef SLUICE_SOURCE_DIR
    FILE *f = fopen(SLUICE_SOURCE_DIR "/core/backend_impl.h", "rb");
    if (!f) return -1;
    static char text[1 << 16];
    const size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = '\0';
    const char *p = strstr(text, "typedef struct sl_ops_i {"), *end = strstr(text, "} sl_ops_i;");
    if (!p || !end) return -1;
    int n = 0;
    while ((p = strstr(p, "(*")) && p < end && n < max) {
        p += 2;
        int i = 0;
        while ((p[i] == '_' || (p[i] >= 'a' && p[i] <= 'z') || (p[i] >= '0' && p[i] <= '9')) &&
               i < 39)
            names[n][i] = p[i], i++;
        names[n++][i] = '\0';
    }
    return n;
#else
    (void)names, (void)max;
    return -1;
#endif
}

/* The one place that obtains backends (the registry call may be renamed). */
static sl_backend *make_backend(const char *name, char *err, size_t errlen) {
    const sl_backend_params p = {.threads = 2, .device = -1};
    return sl_backend_create(name, &p, err, errlen);
}

static bool env_flag(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* summary lines and CHECK messages in order in logs */
    sl_conformance_cfg cfg = {.dt = SL_F32, .out = stdout};
    const char *name = getenv("SLUICE_TEST_BACKEND"), *dt = getenv("SLUICE_TEST_DTYPE");
    if (!name || !*name) name = "cpu";
    cfg.require_all = env_flag("SLUICE_TEST_REQUIRE_ALL");
    cfg.verbose = env_flag("SLUICE_TEST_VERBOSE");
    cfg.perturb = getenv("SLUICE_TEST_PERTURB");
    if (cfg.perturb && !*cfg.perturb) cfg.perturb = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--require-all") == 0)
            cfg.require_all = true;
        else
            name = argv[i];
    }
    if (dt && *dt && strcmp(dt, "f32") != 0) {
        if (strcmp(dt, "bf16") != 0) {
            fprintf(stderr, "SLUICE_TEST_DTYPE must be f32 or bf16, not '%s'\n", dt);
            return 2;
        }
        cfg.dt = SL_BF16;
    }
    if (cfg.perturb && sl_conformance_find(cfg.perturb) < 0) {
        fprintf(stderr, "SLUICE_TEST_PERTURB: no operation '%s'\n", cfg.perturb);
        return 2;
    }
    char names[64][40], problems[4096];
    const int nnames = ops_field_names(names, 64);
    const bool covered =
        sl_conformance_coverage(nnames >= 0 ? names : NULL, nnames, problems, sizeof problems);
    CHECK(covered, "the conformance table does not cover sl_ops_i:\n%s", problems);
    if (!covered) return sl_test_finish("test_backend_ops");

    char err[256] = "";
    cfg.test = make_backend(name, err, sizeof err);
    if (!cfg.test) {
        /* A backend this build or machine lacks (cuda without a GPU) is skipped; the CPU
         * always exists. */
        printf("%s: %s\n", strcmp(name, "cpu") == 0 ? "FAIL" : "SKIP", err);
        return strcmp(name, "cpu") == 0 ? 1 : 77;
    }
    const bool on_cpu = strcmp(sl_backend_name(cfg.test), "cpu") == 0;
    if (on_cpu && cfg.dt != SL_F32) {
        fprintf(stderr, "the CPU backend computes in f32 only (SLUICE_TEST_DTYPE=%s)\n", dt);
        return 2;
    }
    cfg.require_all |= on_cpu; /* the reference must be complete */
    if (!on_cpu && !(cfg.ref = make_backend("cpu", err, sizeof err))) {
        fprintf(stderr, "cannot create the CPU reference: %s\n", err);
        return 1;
    }
    printf("backend under test: %s (%s); reference: %s; all operations required: %s\n", name,
           sl_dtype_name(cfg.dt), on_cpu ? "naive double loops (backends/ref_ops.c)" : "cpu",
           cfg.require_all ? "yes" : "no");
    int count[3] = {0};
    const int nops = sl_conformance_count();
    for (int r = 0; r < nops; r++) {
        const sl_conf_result res = sl_conformance_run(r, &cfg);
        count[res.status]++;
        const char *op = sl_conformance_name(r);
        if (res.status == SL_CONF_MISSING)
            CHECK(!cfg.require_all, "%s: not implemented by backend '%s' (all operations required)",
                  op, sl_backend_name(cfg.test));
        else
            CHECK(res.status == SL_CONF_OK, "%s on backend '%s' (%s) does not match the reference",
                  op, sl_backend_name(cfg.test), sl_dtype_name(cfg.dt));
    }
    printf("%d operations: %d OK, %d failed, %d not implemented\n", nops, count[SL_CONF_OK],
           count[SL_CONF_FAILED], count[SL_CONF_MISSING]);
    sl_backend_free(cfg.ref);
    sl_backend_free(cfg.test);
    return sl_test_finish("test_backend_ops");
}
