/*
 * launch/host_check.h - SLUICE_HOST_MEMORY, and the host memory check of `sluice eval` and
 * `sluice generate` (docs/memory.md, "Host memory"; `sluice train`'s is trainer/fit_host.c).
 */
#ifndef SL_HOST_CHECK_H
#define SL_HOST_CHECK_H

#include <stdint.h>

#include "core/backend.h"
#include "core/tensor.h"
#include "model/config.h"

/* SLUICE_HOST_MEMORY for `sluice <cmd>`: unset or empty 0 (read the node's figure), "off" -1
 * (no check), or a size in bytes with K, M, G, T (the node's figure to assume); 0, or -1 after
 * printing "sluice <cmd>: error: SLUICE_HOST_MEMORY=..." for anything else. */
int sl_cli_host_memory_env(const char *cmd, int64_t *out);

/* What a forward-only model needs in memory. */
typedef struct {
    const sl_model_config *cfg;
    sl_dtype compute; /* SL_F32, or SL_BF16 (fp32 weights and bf16 copies) */
    int64_t tokens;   /* the most tokens one forward runs (its activations) */
    /* bytes beyond weights and activations (a KV cache, sampling buffers), 0 for none, what
     * each is, as the message names it, and what lowers it (as `advice`) */
    double extra[2];
    const char *extra_what[2];
    const char *extra_advice[2];
    const char *weights_path; /* what the message starts with: the --weights argument */
    /* what lowers the activations, a sentence without its full stop: the message gives the
     * advice of the largest part beside the weights (when the weights alone fit) */
    const char *advice;
} sl_forward_need;

/* The bytes of a forward-only model's parameters: fp32 weights, and compute copies in bf16. */
double sl_forward_weight_bytes(const sl_model_config *mc, sl_dtype compute);

/* On a backend whose tensors are host memory (the CPU), before the model is created: when the
 * weights (sl_forward_weight_bytes), a forward's activations (model/counts.h, forward-only) and
 * n->extra exceed what the node can still give (core/host_memory.h, or `assume` bytes when
 * positive), prints one error naming both figures and returns -1; else (or on a device backend,
 * or with assume < 0) 0. The estimate is a floor: the process itself (libraries, the reader,
 * tokenizer) comes on top. */
int sl_cli_check_forward_memory(const sl_forward_need *n, const sl_backend *be, int64_t assume);

#endif
