/*
 * launch/host_check.c - SLUICE_HOST_MEMORY, and the host memory check of the commands that run
 * a model forward only (`sluice eval`, `sluice generate`) on the CPU backend.
 *
 * As in `sluice train` (trainer/fit_host.c): without it, a model too large for the node is not
 * refused, since Linux lends memory it does not have, and the kernel's out-of-memory killer
 * ends the process with SIGKILL, leaving nothing on stderr.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backends.h"
#include "core/backend.h"
#include "core/host_memory.h"
#include "core/log.h"
#include "core/placement.h"
#include "launch/commands.h"
#include "launch/host_check.h"
#include "model/counts.h"

#define GIB ((double)(1ULL << 30))

int sl_cli_host_memory_env(const char *cmd, int64_t *out) {
    const char *v = getenv("SLUICE_HOST_MEMORY");
    uint64_t bytes = 0;
    *out = 0;
    if (!v || !*v) return 0;
    if (strcmp(v, "off") == 0) {
        *out = -1;
        return 0;
    }
    if (sl_cli_parse_u64(v, true, &bytes) != 0 || bytes == 0 || bytes > INT64_MAX) {
        fprintf(sl_cli_error_stream(),
                "sluice %s: error: SLUICE_HOST_MEMORY=%s: expected off or a size such as 64G or "
                "1536M (a whole number of bytes, or of K, M, G or T)\n",
                cmd, v);
        return -1;
    }
    *out = (int64_t)bytes;
    return 0;
}

double sl_forward_weight_bytes(const sl_model_config *mc, sl_dtype compute) {
    int64_t params = 0;
    sl_model_param_count(mc, &params, NULL);
    /* fp32 weights and, in bf16, their compute copies; a forward-only model has no gradients */
    return (double)params * (4.0 + (compute == SL_F32 ? 0.0 : (double)sl_dtype_size(compute)));
}

int sl_cli_check_forward_memory(const sl_forward_need *n, const sl_backend *be, int64_t assume) {
    if (!sl_backend_host_memory(be) || assume < 0) return 0;
    uint64_t have;
    char source[160];
    if (sl_host_memory_budget(assume, &have, source, sizeof source) != 0)
        return 0; /* no /proc/meminfo: nothing to compare with */
    sl_activation_bytes act;
    sl_model_activation_bytes(n->cfg, SL_MEMORY_FORWARD_ONLY, n->tokens,
                              (int)sl_dtype_size(n->compute), 1, false, &act);
    const double weights = sl_forward_weight_bytes(n->cfg, n->compute);
    const double need = weights + act.total + n->extra[0] + n->extra[1];
    if (need <= (double)have) return 0;
    char host[64];
    sl_host_name(host, sizeof host, "this node");
    /* what lowers the need: nothing the command's flags set when the weights alone are too
     * many */
    bool cuda = false; /* a GPU only where this build can use one */
    for (int i = 0; i < sl_backend_count(); i++) cuda |= strcmp(sl_backend_name_at(i), "cuda") == 0;
    const char *lower = n->advice; /* the largest part's */
    double largest = act.total;
    for (int i = 0; i < 2; i++)
        if (n->extra[i] > largest) largest = n->extra[i], lower = n->extra_advice[i];
    const char *advice = weights <= (double)have ? lower
                         : cuda ? "The weights alone need more: a node with more memory, or a GPU "
                                  "(--backend cuda)"
                                : "The weights alone need more: a node with more memory";
    char extra[192] = "";
    for (int i = 0; i < 2; i++)
        if (n->extra[i] > 0)
            snprintf(extra + strlen(extra), sizeof extra - strlen(extra), ", %s %.2f",
                     n->extra_what[i], n->extra[i] / GIB);
    sl_error("%s: the model needs about %.2f GiB of host memory on %s (weights %.2f, "
             "activations of %lld tokens %.2f%s), and %s can give %.2f GiB (%s): the kernel's "
             "out-of-memory killer would end sluice without a message. %s; "
             "SLUICE_HOST_MEMORY=off skips this check (docs/memory.md, \"Host memory\")",
             n->weights_path, need / GIB, host, weights / GIB, (long long)n->tokens,
             act.total / GIB, extra, host, (double)have / GIB, source, advice);
    return -1;
}
