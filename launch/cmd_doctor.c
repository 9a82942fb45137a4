/* launch/cmd_doctor.c - `sluice doctor`: a node self-test (docs/doctor.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/log.h"
#include "core/placement.h"
#include "launch/commands.h"
#include "launch/doctor.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: sluice doctor [--json] [--tiny] [--quick] [--device N] [--layers N]\n"
            "                     [--config PATH]\n"
            "\n"
            "A node self-test: what a user runs first on a new GPU node and an admin on every\n"
            "node. Prints a table - environment, correctness, speed - and exits non-zero on any\n"
            "failure (docs/doctor.md says what each row means and its threshold):\n"
            "  environment  driver, CUDA runtime, cuBLAS, NCCL and cuDNN versions; each visible\n"
            "               GPU (name, compute capability, memory) and whether this build has a\n"
            "               kernel image for it, and which attention kernel a run takes\n"
            "  correctness  every operation of the CUDA backend against the CPU backend, f32\n"
            "               and bf16, at small shapes; one gated-attention shape per head dim\n"
            "               through the kernel a run takes\n"
            "  speed        bf16 GEMM peak (cuBLAS), device copy bandwidth, gated attention\n"
            "               forward and backward at the paper's shape, one training step of\n"
            "               the 15A2B shape (layers cut) with its model TFLOP/s and fraction of\n"
            "               the GEMM peak; with several GPUs, NCCL all-reduce and all-to-all bus\n"
            "               bandwidth between them\n"
            "\n"
            "options:\n"
            "  --json         one JSON object on stdout instead of the table (docs/doctor.md\n"
            "                 lists every key)\n"
            "  --tiny         tiny shapes (automatic when the CUDA backend is the CPU emulator)\n"
            "  --quick        environment and correctness only (no speed section)\n"
            "  --device N     check GPU N only (default: every visible GPU)\n"
            "  --layers N     decoder layers of the training step, cut further to fit (default 2)\n"
            "  --config PATH  the training step's config (default configs/qwen-gated-15a2b.json\n"
            "                 beside the binary, as in the bundle)\n"
            "  -h, --help     this help\n"
            "\n"
            "exit status: 0 every check passed; 1 a check failed; 2 bad usage; 3 no GPU to\n"
            "check (a build without the CUDA backend, or no device visible).\n");
}

/* A count of `flag` (a plain decimal integer: '' or '1x' is not 0 or 1): 0, or -1 after the
 * message naming the flag. */
static int parse_count(const char *flag, const char *v, int *out) {
    long long x;
    if (sl_cli_int_flag("doctor", flag, v, 0, 100000, &x) != 0) return -1;
    *out = (int)x;
    return 0;
}

int sl_cmd_doctor(int argc, char **argv) {
    sl_doctor d;
    memset(&d, 0, sizeof d);
    d.layers = 2;
    int only = -1;
    bool quick = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--json") == 0) {
            d.json = true;
        } else if (strcmp(a, "--tiny") == 0) {
            d.tiny = true;
        } else if (strcmp(a, "--quick") == 0) {
            quick = true;
        } else if (strcmp(a, "--device") == 0) {
            if (parse_count(a, i + 1 < argc ? argv[++i] : NULL, &only) != 0) return 2;
        } else if (strcmp(a, "--layers") == 0) {
            if (parse_count(a, i + 1 < argc ? argv[++i] : NULL, &d.layers) != 0) return 2;
            if (d.layers < 1) {
                fprintf(stderr, "sluice doctor: error: --layers must be at least 1\n");
                return 2;
            }
        } else if (strcmp(a, "--config") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "sluice doctor: error: --config needs a path\n");
                return 2;
            }
            d.config = argv[++i];
        } else {
            return sl_cli_usage_error("doctor", "unknown %s '%s'",
                                      a[0] == '-' ? "option" : "argument", a);
        }
    }
    const char *inject = getenv("SLUICE_DOCTOR_INJECT");
    d.inject = inject && *inject ? inject : NULL;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    d.started = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    sl_host_name(d.host, sizeof d.host, "?");
    /* The optimizer of the training step reduces over a communicator: an MPI singleton. The
     * library's info lines (e.g. the attention kernel note) would interleave with the table
     * or break the JSON: warnings and errors only. */
    d.world = sl_comm_init_world(&argc, &argv);
    sl_log_set_level(SL_LOG_WARN);

#ifdef SLUICE_CUDA_EMULATED
    d.emulated = true; /* the CPU SIMT test double: tiny shapes, speeds not judged */
    d.tiny = true;
#endif
    sl_dr_begin(&d);
    const int devices = sl_doctor_environment(&d);
    int rc = 0;
    if (devices == 0) {
        rc = 3;
    } else if (only >= devices) {
        fprintf(stderr, "sluice doctor: error: --device %d: %d device(s) visible\n", only, devices);
        rc = 2;
    }
#ifdef SLUICE_WITH_CUDA
    if (rc == 0) {
        /* devices without a kernel image failed their environment row and are not run */
        for (int dev = 0; dev < devices && dev < 64; dev++)
            if ((only < 0 || only == dev) && d.usable[dev]) sl_doctor_correctness(&d, dev);
        for (int dev = 0; dev < devices && dev < 64 && !quick; dev++)
            if ((only < 0 || only == dev) && d.usable[dev]) sl_doctor_speed(&d, dev);
        if (only < 0 && !quick) sl_doctor_nccl(&d, devices);
        for (int i = 0; i < d.nrows; i++)
            if (d.rows[i].status == SL_DR_FAIL) rc = 1;
    }
#else
    (void)quick; /* a build without CUDA has only the environment section */
#endif
    rc = sl_dr_finish(&d, rc);
    sl_dr_free(&d);
    sl_comm_finalize(d.world);
    return rc;
}
