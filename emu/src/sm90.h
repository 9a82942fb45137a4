/*
 * emu/src/sm90.h - state shared by the emulated Hopper instructions (emu/README.md, "Hopper
 * instructions"): mbarriers, named barriers and fences (sm90_sync.cc), TMA and tensor maps
 * (sm90_tma.cc), wgmma (sm90_wgmma.cc). Everything here is per block and reset at its start.
 */
#ifndef SL_EMU_SM90_H
#define SL_EMU_SM90_H

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sl_emu {
namespace sm90 {

/* device_fault with a formatted message (naming the kernel, block and thread). */
[[noreturn]] void faultf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* What cuTensorMapEncodeTiled writes into CUtensorMap's 128 opaque bytes (sm90_tma.cc). */
struct tensor_map {
    uint64_t magic;
    uint64_t addr;       /* global address of element (0, ..., 0) */
    uint64_t dims[5];    /* elements per dimension, innermost first */
    uint64_t strides[5]; /* bytes; strides[0] is the element size */
    uint16_t box[5];     /* box elements per dimension */
    uint8_t rank, esize, swizzle, oob_nan;
    uint8_t dtype; /* CUtensorMapDataType */
};
static_assert(sizeof(tensor_map) <= 128, "a tensor map must fit CUtensorMap's 128 bytes");
constexpr uint64_t k_tensor_map_magic = 0x534c54454e534d50ull; /* "SLTENSMP" */

/* Validates a tensor map passed to a TMA instruction and returns a copy (device_fault else). */
tensor_map read_tensor_map(const void *p, int rank, const char *who);
/* Bytes of the box in shared memory (what complete_tx counts). */
size_t box_bytes(const tensor_map &m);

/* A TMA load issued on an mbarrier, performed when a thread needs the mbarrier's phase. */
struct tma_load {
    unsigned char *dst;
    tensor_map map;
    int32_t coords[5];
    unsigned thread; /* the issuing thread, for messages */
};
/* Copies the box into shared memory (sm90_tma.cc); the caller then completes its bytes. */
void perform_load(const tma_load &l);

/* Appends a TMA load to the mbarrier at `bar` (sm90_sync.cc); checks that the mbarrier is
 * initialized and its initialization was fenced for the async proxy. */
void mbar_add_load(uint64_t *bar, const tma_load &l);

/* The async proxy and ordinary stores (sm90_sync.cc). Dynamic shared memory has a shadow
 * copy holding what the async proxy (TMA, wgmma) last saw or wrote, and per 16-byte chunk
 * the number of fence.proxy.async executed in the block at that time. An async read of a
 * chunk that differs from its shadow (an ordinary store wrote it since) with no fence in the
 * block since then is a fault. */
void async_read(const unsigned char *p, size_t n, const char *who);
void async_write(const unsigned char *p, size_t n);

/* The range [p, p + n) must lie in the block's dynamic shared memory (device_fault naming
 * `who` otherwise); returns p's offset. */
uint32_t smem_range(const void *p, size_t n, const char *who);

/* Per-block state of TMA stores and wgmma (reset at block start, checked at thread exit and
 * block end). */
void tma_block_start(unsigned nthreads);
void tma_thread_exit(unsigned thread);
void wgmma_block_start(unsigned nthreads);
void wgmma_thread_exit(unsigned thread);
void wgmma_block_end();
void describe_wgmma_wait(const void *op, char *buf, size_t len);

} // namespace sm90
} // namespace sl_emu

#endif
