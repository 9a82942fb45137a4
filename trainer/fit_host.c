/*
 * trainer/fit_host.c - the host memory check of `sluice train` on the CPU backend: the ranks
 * on a node together against what the node can still give them, before any of them allocates.
 *
 * Without it, a model too large for the node is not refused: Linux lends memory it does not
 * have (overcommit), the ranks zero their tensors, and the kernel's out-of-memory killer ends
 * one with SIGKILL, which leaves nothing on stderr but mpirun's "exited on signal 9".
 */
#include <inttypes.h>
#include <stdio.h>

#include "core/backend.h"
#include "core/host_memory.h"
#include "core/log.h"
#include "core/placement.h"
#include "trainer/plan.h"
#include "trainer/trainer_impl.h"

#define GIB ((double)(1ULL << 30))

int sl_trainer_check_host_memory(trainer *t, int host_ranks, int64_t assume) {
    if (!sl_backend_host_memory(t->be) || assume < 0) return 0;
    const sl_config *c = t->cfg;
    sl_plan_request r;
    sl_plan_request_defaults(&r);
    r.gpus = t->topo.size;
    r.ep = t->topo.ep_size;
    r.host = true;
    sl_plan p;
    char err[512];
    /* the schedule was checked against the ranks already; a plan it cannot make is no reason
     * to refuse a run, only to skip the estimate */
    if (sl_plan_compute(c, &r, &p, err, sizeof err) != 0) {
        sl_debug("host memory check skipped: %s", err);
        return 0;
    }
    uint64_t have;
    char source[160];
    if (sl_host_memory_budget(assume, &have, source, sizeof source) != 0)
        return 0; /* no /proc/meminfo: nothing to compare with */
    const int n = host_ranks > 0 ? host_ranks : 1;
    char parked[64] = "";
    if (p.deferred > 0)
        snprintf(parked, sizeof parked, ", parked expert rows %.2f", p.deferred / GIB);
    const double need = p.total * n;
    if (need <= (double)have) return 0;
    /* what lowers it: when the state alone does not fit, nothing about the activations helps;
     * fewer ranks per node only where there are several */
    const char *advice;
    if (p.state * n > (double)have && n > 1)
        advice = "The weights, gradients and AdamW moments alone need more: fewer ranks per "
                 "node, parallel.zero1 and parallel.expert_parallel over ranks on more nodes "
                 "split them, or a node with more memory";
    else if (p.state * n > (double)have)
        advice = "The weights, gradients and AdamW moments alone need more: parallel.zero1 and "
                 "parallel.expert_parallel over ranks on more nodes split them, or a node with "
                 "more memory";
    else if (n > 1)
        advice = "Fewer ranks per node, parallel.expert_parallel, parallel.zero1, "
                 "training.recompute or a smaller micro-batch lower it";
    else
        advice = "A smaller micro-batch, training.recompute, or parallel.expert_parallel and "
                 "parallel.zero1 over ranks on more nodes lower it";
    char host[64];
    sl_host_name(host, sizeof host, "this node");
    sl_error_hold("%s: the run needs about %.2f GiB of host memory on %s (%d rank%s x %.2f GiB: "
                  "weights, gradients and AdamW moments %.2f, activations of stage '%s' %.2f%s), "
                  "and %s can give %.2f GiB (%s): the kernel's out-of-memory killer would end a "
                  "rank without a message. %s; SLUICE_HOST_MEMORY=off skips this check "
                  "(docs/memory.md, \"Host memory\")",
                  c->path, need / GIB, host, n, n == 1 ? "" : "s", p.total / GIB, p.state / GIB,
                  p.stage, p.act[p.mode].total / GIB, parked, host, (double)have / GIB, source,
                  advice);
    return -1;
}
