/*
 * core/host_memory.h - how much memory this host can still give a process, read before a run
 * allocates, so that a model too large for the node is refused with a message instead of being
 * killed by the kernel's out-of-memory killer (which leaves nothing on stderr).
 */
#ifndef SL_HOST_MEMORY_H
#define SL_HOST_MEMORY_H

#include <stddef.h>
#include <stdint.h>

/* The bytes a new allocation of this process can still be backed by: MemAvailable + SwapFree
 * of /proc/meminfo, lowered to the headroom of every memory cgroup above the process that has
 * a limit (Slurm's --mem, a container's): limit - usage + the page cache (active and inactive
 * file pages), which the kernel reclaims before it kills (cgroup v2 memory.max, memory.current,
 * memory.stat; v1 memory.limit_in_bytes, memory.usage_in_bytes, memory.stat's totals). `source`
 * says which figure bounded it, for messages
 * ("MemAvailable + SwapFree of /proc/meminfo" or "the memory cgroup /slurm/job_7"). 0, or -1
 * where /proc/meminfo cannot be read (not Linux): the caller then knows nothing. */
int sl_host_memory_available(uint64_t *bytes, char *source, size_t len);
/* What a run may use: `assume` bytes when positive (source "SLUICE_HOST_MEMORY", the variable
 * that gives them), else sl_host_memory_available's figure. 0, or -1 when there is nothing to
 * compare with. The memory checks of sluice train, eval and generate start here. */
int sl_host_memory_budget(int64_t assume, uint64_t *bytes, char *source, size_t len);
/* The same with every path under `root` ("" for the real ones): the test's fake hosts. */
int sl_host_memory_available_at(const char *root, uint64_t *bytes, char *source, size_t len);

#endif
