/* launch/main.c - the sluice command line: dispatches to subcommands (launch/commands.h). */
#include <stdio.h>
#include <string.h>

#include "backends/backends.h"
#include "launch/commands.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command k_commands[] = {
    {"train", sl_cmd_train, "train a model from a JSON config (single process or mpirun)"},
    {"eval", sl_cmd_eval, "loss, perplexity and diagnostics of saved weights (YaRN at eval)"},
    {"generate", sl_cmd_generate, "text from saved weights or a checkpoint (KV cache, sampling)"},
    {"data", sl_cmd_data, "build, inspect and verify token shards"},
    {"ckpt", sl_cmd_ckpt, "inspect, verify and export training checkpoints"},
    {"plot", sl_cmd_plot, "plot a run's training and held-out loss (PNG through gnuplot)"},
    {"plan", sl_cmd_plan, "per-GPU memory, communication, FLOPs and step time of a run"},
    {"doctor", sl_cmd_doctor, "node self-test: versions, GPUs, op correctness, speed (--json)"},
    {NULL, NULL, NULL},
};

static void usage(FILE *f) {
    fprintf(f, "usage: sluice <command> [options]\n\n"
               "Pretrains gated-attention Mixture-of-Experts language models.\n\ncommands:\n");
    for (const command *c = k_commands; c->name; c++)
        fprintf(f, "  %-8s %s\n", c->name, c->summary);
    fprintf(f, "\nRun 'sluice <command> --help' for the options of a command; 'sluice --version'\n"
               "prints the version.\nbackends built in:");
    for (int i = 0; i < sl_backend_count(); i++) {
        fprintf(f, " %s", sl_backend_name_at(i));
#ifdef SLUICE_CUDA_EMULATED
        if (strcmp(sl_backend_name_at(i), "cuda") == 0)
            fprintf(f, " (emulated on the CPU: a test build, -DSLUICE_CUDA=EMULATED)");
#endif
    }
    fprintf(f, "\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("sluice %s\n", SLUICE_VERSION);
        return 0;
    }
    for (const command *c = k_commands; c->name; c++)
        if (strcmp(argv[1], c->name) == 0) return c->run(argc - 1, argv + 1);
    fprintf(stderr, "sluice: error: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
