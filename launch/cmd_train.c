/* launch/cmd_train.c - `sluice train CONFIG [--set key=value ...]`. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backends.h"
#include "core/comm.h"
#include "core/comm_nccl.h"
#include "core/log.h"
#include "core/placement.h"
#include "launch/commands.h"
#include "launch/host_check.h"
#include "trainer/config.h"
#include "trainer/trainer.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: sluice train CONFIG [--set section.key=value ...] [--resume auto|PATH]\n"
            "                    [--profile N [--profile-from STEP]]\n"
            "\n"
            "Trains the model described by CONFIG (JSON; docs/config.md lists every key) on the\n"
            "data it names. Works as a plain process and under mpirun/srun: ranks split into\n"
            "expert-parallel and data-parallel groups (parallel.expert_parallel).\n"
            "backend.name = \"cuda\" runs on one GPU per rank (the launcher's local rank over the\n"
            "visible devices, CUDA_VISIBLE_DEVICES respected), in bf16 with fp32 master weights\n"
            "unless training.precision = \"fp32\". The banner lists each rank's device;\n"
            "parallel.transport = \"auto\" uses NCCL when every rank has a GPU of its own and\n"
            "MPI when ranks share one (docs/parallelism.md, \"NCCL transport\").\n"
            "\n"
            "options:\n"
            "  --set KEY=VALUE  override one config key, e.g. --set training.lr=1e-3 or\n"
            "                   --set data.train=\"data/x.shard\" (repeatable; VALUE is JSON,\n"
            "                   or a plain string). One without '=', or whose KEY is not a\n"
            "                   path like section.key, is a bad option (2); a bad VALUE is\n"
            "                   the config's error (1): \"CONFIG (--set): KEY: ...\"\n"
            "  --resume auto|PATH\n"
            "                   continue from a checkpoint: auto = the newest committed one\n"
            "                   under training.out_dir (a fresh start when there is none), or\n"
            "                   a checkpoint directory; training continues at its step with\n"
            "                   the identical data, weights and optimizer state. Without it,\n"
            "                   an out_dir that holds a committed checkpoint is an error (the\n"
            "                   new run would replace that run's checkpoints)\n"
            "  --profile N      time where the step goes for N steps: per region of the step\n"
            "                   (attention, expert GEMMs, the reader's host work, the\n"
            "                   optimizer, ...), device and host time, host reads and the\n"
            "                   device's idle time; rank 0 prints the table after the last\n"
            "                   of them and records it in the metrics file (an event\n"
            "                   \"profile\", docs/metrics.md). Costs a mark per region in\n"
            "                   the profiled steps only\n"
            "  --profile-from STEP\n"
            "                   the first profiled step (global step number, as in the\n"
            "                   progress line; default: this process's second step)\n"
            "  -h, --help       show this help\n"
            "Each option with a value also takes it after '=' (--set=KEY=VALUE, --resume=auto).\n"
            "\n"
            "output: a progress line every training.log_every steps (redrawn in place on a\n"
            "terminal), JSON lines (one per step) in training.metrics_file (default\n"
            "<out_dir>/metrics.jsonl, always appended to: a fresh run writes a \"start\"\n"
            "line first, a resumed one a \"resume\" line), checkpoints every\n"
            "training.save_every steps and at the end in <out_dir>/checkpoints/step-N\n"
            "(docs/checkpoint-format.md), and Hugging Face safetensors weights + config.json\n"
            "in <out_dir>/final.\n"
            "\n"
            "staged schedules: with training.stages the run walks its stages in order (e.g.\n"
            "4k tokens at RoPE base 10k, 32k at base 1M, YaRN to 128k evaluated), saving a\n"
            "checkpoint at the end of each training stage; --resume auto continues mid-stage\n"
            "or at a boundary (docs/stages.md). Memory for long sequences: training.recompute\n"
            "(docs/memory.md); packed documents: training.document_mask (docs/attention.md).\n"
            "\n"
            "stopping: SIGTERM, SIGINT or SIGUSR1 (under mpirun: SIGUSR1 or SIGTERM to mpirun;\n"
            "Slurm: --signal=USR1@SECONDS) stops the run after its current step with a\n"
            "committed checkpoint; a second such signal ends it at once. On a terminal,\n"
            "launch/mpirun.sh turns Ctrl-C into that signal (a bare mpirun kills the ranks\n"
            "one second after passing it on).\n"
            "\n"
            "host memory: with backend.name = \"cpu\" each node's ranks are checked against\n"
            "the memory it can still give (MemAvailable + SwapFree, or less where a memory\n"
            "cgroup's limit leaves less) before they allocate. SLUICE_HOST_MEMORY=off skips\n"
            "the check; SLUICE_HOST_MEMORY=64G (a size) assumes that much (docs/memory.md).\n"
            "\n"
            "exit status: 0 the schedule ran to its end; 75 stopped by a signal after a\n"
            "checkpoint (continue with --resume auto); 1 an error (printed once); 2 a bad\n"
            "option.\n");
}

/* A positive step count of `flag`: 0, or -1 after printing why not. */
static int parse_steps(const char *flag, const char *v, int *out) {
    char *end = NULL;
    const long n = v ? strtol(v, &end, 10) : 0;
    if (!v || !*v || *end || n < 1 || n > 1000000000) {
        fprintf(sl_cli_error_stream(),
                "sluice train: error: %s needs a positive number of steps, got '%s'\n", flag,
                v ? v : "");
        return -1;
    }
    *out = (int)n;
    return 0;
}

int sl_cmd_train(int argc, char **argv) {
    const char *config_path = NULL, *resume = NULL;
    int profile_steps = 0, profile_from = 0;
    const char **sets = calloc((size_t)argc, sizeof *sets);
    int nsets = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            free(sets);
            return 0;
        } else if (strcmp(argv[i], "--set") == 0) {
            if (i + 1 >= argc) {
                fprintf(sl_cli_error_stream(), "sluice train: error: --set needs KEY=VALUE\n");
                free(sets);
                return 2;
            }
            sets[nsets++] = argv[++i];
        } else if (strncmp(argv[i], "--set=", 6) == 0) {
            sets[nsets++] = argv[i] + 6;
        } else if (strcmp(argv[i], "--resume") == 0) {
            if (i + 1 >= argc) {
                fprintf(sl_cli_error_stream(),
                        "sluice train: error: --resume needs auto or a checkpoint path\n");
                free(sets);
                return 2;
            }
            resume = argv[++i];
        } else if (strncmp(argv[i], "--resume=", 9) == 0) {
            resume = argv[i] + 9;
        } else if (strcmp(argv[i], "--profile") == 0 || strncmp(argv[i], "--profile=", 10) == 0 ||
                   strcmp(argv[i], "--profile-from") == 0 ||
                   strncmp(argv[i], "--profile-from=", 15) == 0) {
            const bool from = strncmp(argv[i], "--profile-from", 14) == 0;
            const char *flag = from ? "--profile-from" : "--profile";
            const char *eq = strchr(argv[i], '=');
            const char *v = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
            if (parse_steps(flag, v, from ? &profile_from : &profile_steps) != 0) {
                free(sets);
                return 2;
            }
        } else if (argv[i][0] == '-') {
            free(sets);
            return sl_cli_usage_error("train", "unknown option '%s'", argv[i]);
        } else if (!config_path) {
            config_path = argv[i];
        } else {
            free(sets);
            return sl_cli_usage_error("train", "unexpected argument '%s' (one CONFIG expected)",
                                      argv[i]);
        }
    }
    if (profile_from > 0 && profile_steps == 0) {
        fprintf(sl_cli_error_stream(), "sluice train: error: --profile-from needs --profile N\n");
        free(sets);
        return 2;
    }
    if (!config_path) {
        free(sets);
        return sl_cli_usage_error("train", "CONFIG is required");
    }
    /* a malformed --set is a bad option (2); a well-formed one with a bad value is the
     * config's error (1), found when the config is read */
    for (int i = 0; i < nsets; i++) {
        char why[1024];
        if (sl_config_set_check(sets[i], why, sizeof why) != 0) {
            fprintf(sl_cli_error_stream(), "sluice train: error: %s\n", why);
            free(sets);
            return 2;
        }
    }
    int64_t host_memory;
    if (sl_cli_host_memory_env("train", &host_memory) != 0) {
        free(sets);
        return 2;
    }
    sl_comm *world = sl_comm_init_world(&argc, &argv);
    sl_config *cfg = calloc(1, sizeof *cfg);
    char err[2048];
    int rc = 0;
    /* Every rank parses the same file and flags, so their errors are alike: printed once. */
    if (sl_config_load(config_path, cfg, err, sizeof err) != 0 ||
        sl_config_apply_sets(cfg, (const char *const *)sets, nsets, err, sizeof err) != 0) {
        sl_error_once("%s", err);
        rc = 1;
    }
    sl_backend *be = NULL;
    if (rc == 0) {
        sl_backend_params bp = {.threads = cfg->backend.threads,
                                .device = -1,
                                .allow_nondeterministic = !cfg->backend.deterministic};
        be = sl_backend_create(cfg->backend.name, &bp, err, sizeof err);
        if (!be) sl_error("%s: backend.name: %s", config_path, err);
        /* the attention kernel: the cudnn one loads libcudnn here, so a node without it fails
         * now (on that node only, like a missing device) */
        bool attn_ok = true;
        if (be && sl_backend_set_attn_kernel(be, cfg->attention.kernel, err, sizeof err) != 0) {
            sl_error("%s: attention.kernel: %s", config_path, err);
            attn_ok = false;
        }
        /* a device can be missing on one node only: all ranks agree before training */
        double fail = be == NULL || !attn_ok;
        sl_comm_allreduce_max_f64(world, &fail, 1);
        if (fail > 0) rc = 1;
    }
    /* The transport: every group is split from this world, so all are of its kind. It depends
     * on where the ranks compute (two ranks on one GPU cannot share an NCCL communicator):
     * every rank gathers every rank's device, so all decide alike and an error is printed
     * once; the banner lists the devices and the choice. */
    sl_comm *tworld = world;
    char *banner = NULL;
    int host_ranks = 1; /* this job's ranks on this rank's node */
    if (rc == 0) {
        const int n = sl_comm_size(world);
        sl_rank_place *places = sl_placement_gather(world, be);
        host_ranks = sl_placement_host_ranks(places, n, sl_comm_rank(world));
        sl_transport want = SL_TRANSPORT_AUTO, got = SL_TRANSPORT_MPI;
        (void)sl_transport_parse(cfg->parallel.transport, &want); /* validated on load */
        char why[512] = "";
        if (sl_transport_resolve(want, be, places, n, &got, why, sizeof why, err, sizeof err) !=
            0) {
            sl_error_once("%s: parallel.transport: %s", config_path, err);
            rc = 1;
        } else if (!sl_backend_host_memory(be)) {
            const size_t cap = 600 + 400 * (size_t)(n < 64 ? n : 65);
            banner = sl_xmalloc(cap);
            const int head = snprintf(banner, cap, "transport: %s\n", why);
            sl_placement_describe(places, n, 64, banner + head, cap - (size_t)head);
        }
        free(places);
        if (rc == 0 && !(tworld = sl_transport_world(got, world, be, err, sizeof err))) {
            sl_error_once("%s: parallel.transport: %s", config_path, err);
            tworld = world;
            rc = 1;
        }
    }
    const sl_train_opts opts = {.resume = resume,
                                .placement = banner,
                                .profile_steps = profile_steps,
                                .profile_from = profile_from,
                                .host_ranks = host_ranks,
                                .host_memory = host_memory,
                                .sets = (const char *const *)sets,
                                .n_sets = nsets};
    if (rc == 0) rc = sl_train(cfg, tworld, be, &opts);
    free(banner);
    if (tworld != world) sl_comm_free(tworld);
    if (be) sl_backend_free(be);
    free(cfg);
    free(sets);
    sl_comm_finalize(world);
    return rc;
}
