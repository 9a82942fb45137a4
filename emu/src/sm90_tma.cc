/*
 * emu/src/sm90_tma.cc - the tensor memory accelerator (emu/README.md, "Hopper instructions"):
 * cuTensorMapEncodeTiled (the driver API function, with cuda.h's signature, reached directly
 * or through cudaGetDriverEntryPoint[ByVersion]) and the TMA instructions of
 * core/ptx_sm90.cuh: cp.async.bulk.tensor loads (global -> shared, completing on an mbarrier),
 * stores (shared -> global, bulk async-groups) and fp32 add reductions (cp.reduce.async.bulk.
 * tensor .add: a store whose elements are added to global memory's).
 *
 * A box lands in shared memory as the hardware lays it out: dense, innermost dimension first,
 * each 16-byte chunk of a row moved by the swizzle mode's XOR of shared-address bits [4, 7)
 * with bits [7, 10) (32B: one bit, 64B: two, 128B: three), the same function wgmma's
 * descriptors decode (sm90_wgmma.cc). Elements outside the tensor read as zero (or NaN with
 * CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA) and are counted in the transaction
 * bytes; a store leaves them unwritten.
 *
 * Timing: a load fills its box with 0xff at issue and is performed when a thread needs its
 * mbarrier's phase (sm90_sync.cc). A store copies its box at issue and writes global memory
 * when cp.async.bulk.wait_group retires its group; shared memory that changed in between is a
 * fault (the source must stay untouched until the .read wait). A reduction is performed at the
 * same moment, each element added to what global memory holds then (on the hardware each
 * addition is atomic in L2; blocks run one after another here, so no two ever race).
 */
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <vector>

#include <cuda.h>

#include "internal.h"
#include "sl_emu.h"
#include "sm90.h"

namespace sl_emu {
namespace sm90 {

namespace {

struct tma_store_op {
    tensor_map map;
    int32_t coords[5];
    const unsigned char *src;
    std::vector<unsigned char> data;
    bool add; /* cp.reduce.async.bulk.tensor .add (fp32) */
};
struct store_queue {
    std::vector<tma_store_op> stores; /* issued, oldest first */
    std::vector<size_t> group_ends;   /* committed groups: end index in stores */
};
std::vector<store_queue> g_stores; /* by thread */

/* The 16-byte chunk bits [4, 7) XOR bits [7, 10), as many bits as the mode has. */
inline size_t swizzle(size_t o, int mode) {
    static const size_t mask[4] = {0, 1, 3, 7};
    return o ^ (((o >> 7) & mask[mode]) << 4);
}
size_t repeat_bytes(int mode) {
    static const size_t r[4] = {0, 256, 512, 1024};
    return r[mode];
}

size_t extent_bytes(const tensor_map &m) {
    size_t e = m.esize;
    for (int d = 0; d < m.rank; d++) e += (size_t)(m.dims[d] - 1) * m.strides[d];
    return e;
}

/* Calls f(box_offset, global_address_or_null) for every element of the box at coords. */
template <class F> void for_box(const tensor_map &m, const int32_t *coords, F f) {
    int idx[5] = {0, 0, 0, 0, 0};
    const size_t row_bytes = (size_t)m.box[0] * m.esize;
    size_t row = 0;
    for (;;) {
        bool row_in = true;
        int64_t base = 0;
        for (int d = 1; d < m.rank; d++) {
            const int64_t c = (int64_t)coords[d] + idx[d];
            row_in &= c >= 0 && (uint64_t)c < m.dims[d];
            base += c * (int64_t)m.strides[d];
        }
        for (int e = 0; e < m.box[0]; e++) {
            const int64_t x = (int64_t)coords[0] + e;
            const bool in = row_in && x >= 0 && (uint64_t)x < m.dims[0];
            f(row * row_bytes + (size_t)e * m.esize,
              in ? (unsigned char *)(uintptr_t)(m.addr + (uint64_t)(base + x * m.esize)) : nullptr);
        }
        row++;
        int d = 1;
        while (d < m.rank && ++idx[d] == m.box[d]) idx[d++] = 0;
        if (d >= m.rank) return;
    }
}

void check_smem(const void *p, const tensor_map &m, const char *who) {
    smem_range(p, box_bytes(m), who);
    const size_t align = m.swizzle ? repeat_bytes(m.swizzle) : 128;
    if ((uintptr_t)p % align)
        faultf("%s: the shared-memory box at %p is not %zu-byte aligned (128 bytes, and a "
               "swizzled box the swizzle pattern's repeat: 256, 512, 1024 bytes for 32B, 64B, "
               "128B)",
               who, p, align);
}

void check_memory(const tensor_map &m, const char *who) {
    if (!find_allocation((const void *)(uintptr_t)m.addr, extent_bytes(m)))
        faultf("%s: the tensor map's global memory (%p, %zu bytes) is no longer a live "
               "allocation",
               who, (const void *)(uintptr_t)m.addr, extent_bytes(m));
}

/* The innermost coordinate must fall on a 16-byte boundary of the row: an H200 raised
 * cudaErrorIllegalInstruction for every load and store whose innermost coordinate times the
 * element size was not a multiple of 16 bytes (-5, 60 and 84 bf16 elements; test_ptx_sm90's
 * hardware twins, 2026-11-26), in bounds or not, and completed every aligned one. */
void check_inner_coordinate(const tensor_map &m, int32_t c0, const char *who) {
    if (((int64_t)c0 * (int64_t)m.esize) % 16 != 0)
        faultf("%s: the innermost coordinate %d times the element size %u is not a multiple of "
               "16 bytes (the hardware raises an illegal instruction)",
               who, (int)c0, (unsigned)m.esize);
}

} // namespace

tensor_map read_tensor_map(const void *p, int rank, const char *who) {
    tensor_map m;
    if ((uintptr_t)p % 64) faultf("%s: the tensor map %p is not 64-byte aligned", who, p);
    memcpy(&m, p, sizeof m);
    if (m.magic != k_tensor_map_magic)
        faultf("%s: %p is not a tensor map made by cuTensorMapEncodeTiled", who, p);
    if (m.rank != rank)
        faultf("%s: a %dd instruction with a tensor map of rank %d", who, rank, (int)m.rank);
    return m;
}

size_t box_bytes(const tensor_map &m) {
    size_t n = m.esize;
    for (int d = 0; d < m.rank; d++) n *= m.box[d];
    return n;
}

void perform_load(const tma_load &l) {
    const tensor_map &m = l.map;
    check_memory(m, "cp.async.bulk.tensor (load)");
    const unsigned char fill = m.oob_nan ? 0xff : 0;
    for_box(m, l.coords, [&](size_t o, const unsigned char *src) {
        unsigned char *d = l.dst + swizzle(o, m.swizzle);
        if (src)
            memcpy(d, src, m.esize);
        else
            memset(d, fill, m.esize);
    });
    async_write(l.dst, box_bytes(m));
}

void tma_block_start(unsigned nthreads) {
    if (g_stores.size() < nthreads) g_stores.resize(nthreads);
    for (unsigned i = 0; i < nthreads; i++) {
        g_stores[i].stores.clear();
        g_stores[i].group_ends.clear();
    }
}

void tma_thread_exit(unsigned thread) {
    const store_queue &q = g_stores[thread];
    if (!q.stores.empty())
        faultf("the thread ends with %zu TMA store(s) (cp.async.bulk.tensor shared -> global) "
               "not retired by cp.async.bulk.wait_group (%zu committed group(s)): their shared "
               "memory may be gone before they read it",
               q.stores.size(), q.group_ends.size());
}

} // namespace sm90

using namespace sm90;

void tma_load(void *smem, const void *tmap, uint64_t *bar, int rank, const int32_t *coords) {
    const char *who = "cp.async.bulk.tensor (load)";
    const unsigned t = current_thread(who);
    const tensor_map m = read_tensor_map(tmap, rank, who);
    check_smem(smem, m, who);
    check_memory(m, who);
    check_inner_coordinate(m, coords[0], who);
    sm90::tma_load l;
    l.dst = (unsigned char *)smem;
    l.map = m;
    memset(l.coords, 0, sizeof l.coords);
    memcpy(l.coords, coords, sizeof(int32_t) * (size_t)rank);
    l.thread = t;
    /* The box is undefined until the mbarrier's phase completes: 0xff (NaN) shows a read
     * before the wait. The async proxy wrote it (no fence needed before wgmma reads it). */
    memset(smem, 0xff, box_bytes(m));
    async_write((const unsigned char *)smem, box_bytes(m));
    mbar_add_load(bar, l);
}

/* cp.async.bulk.prefetch.L2.global [src], size: a hint with no visible effect; the PTX ISA's
 * rules (src 16-byte aligned, size a non-zero multiple of 16) and a live allocation that
 * holds the range are checked, as a load of those bytes would be. */
void bulk_prefetch_l2(const void *src, uint32_t bytes) {
    const char *who = "cp.async.bulk.prefetch.L2.global";
    (void)current_thread(who);
    if ((uintptr_t)src % 16 || bytes == 0 || bytes % 16)
        faultf("%s [%p], %u: the address must be 16-byte aligned and the size a non-zero "
               "multiple of 16",
               who, src, (unsigned)bytes);
    if (!find_allocation(src, bytes))
        faultf("%s [%p], %u: the range is not inside a live allocation", who, src, (unsigned)bytes);
}

namespace {

void store_or_reduce(const void *tmap, const void *smem, int rank, const int32_t *coords,
                     bool add) {
    const char *who = add ? "cp.reduce.async.bulk.tensor (.add)" : "cp.async.bulk.tensor (store)";
    const unsigned t = current_thread(who);
    const tensor_map m = read_tensor_map(tmap, rank, who);
    if (add && m.dtype != CU_TENSOR_MAP_DATA_TYPE_FLOAT32)
        faultf("%s: only fp32 tensor maps are emulated (this one has data type %d)", who,
               (int)m.dtype);
    check_smem(smem, m, who);
    check_memory(m, who);
    check_inner_coordinate(m, coords[0], who);
    /* Two more things the H200 did with stores (test_ptx_sm90's twins, 2026-11-26): into a
     * tensor of 100 bf16 per row (200 bytes) it also wrote the 4 elements past each row's end,
     * up to the next 16-byte boundary; and a 4D store at innermost coordinate -8 (aligned)
     * raised an illegal instruction where loads at -8 completed. Refused here, as sluice's
     * kernels never need either. */
    if ((m.dims[0] * m.esize) % 16 != 0)
        faultf("%s: the tensor's innermost extent (%llu elements of %u bytes) is not a multiple "
               "of 16 bytes: the hardware stores whole 16-byte pieces past its last element",
               who, (unsigned long long)m.dims[0], (unsigned)m.esize);
    if (coords[0] < 0)
        faultf("%s: a negative innermost coordinate (%d): the hardware raised an illegal "
               "instruction for one",
               who, (int)coords[0]);
    /* The async proxy reads what ordinary stores wrote: they need fence.proxy.async. */
    async_read((const unsigned char *)smem, box_bytes(m), who);
    tma_store_op s;
    s.map = m;
    memset(s.coords, 0, sizeof s.coords);
    memcpy(s.coords, coords, sizeof(int32_t) * (size_t)rank);
    s.src = (const unsigned char *)smem;
    s.data.assign(s.src, s.src + box_bytes(m));
    s.add = add;
    g_stores[t].stores.push_back(std::move(s));
    note_progress();
}

} // namespace

void tma_store(const void *tmap, const void *smem, int rank, const int32_t *coords) {
    store_or_reduce(tmap, smem, rank, coords, false);
}

void tma_reduce_add(const void *tmap, const void *smem, int rank, const int32_t *coords) {
    store_or_reduce(tmap, smem, rank, coords, true);
}

void tma_store_commit() {
    store_queue &q = g_stores[current_thread("cp.async.bulk.commit_group")];
    q.group_ends.push_back(q.stores.size());
}

void tma_store_wait(int n, bool read_only) {
    const char *who = read_only ? "cp.async.bulk.wait_group.read" : "cp.async.bulk.wait_group";
    store_queue &q = g_stores[current_thread(who)];
    if (n < 0 || q.group_ends.size() <= (size_t)n) return;
    const size_t retire = q.group_ends.size() - (size_t)n, end = q.group_ends[retire - 1];
    for (size_t i = 0; i < end; i++) {
        const tma_store_op &s = q.stores[i];
        if (memcmp(s.src, s.data.data(), s.data.size()) != 0)
            faultf("%s: the shared memory a TMA store reads (at dynamic shared memory offset "
                   "%zu) changed before the wait that retires it: the store may read either",
                   who, (size_t)(s.src - smem_base()));
        check_memory(s.map, who);
        for_box(s.map, s.coords, [&](size_t o, unsigned char *dst) {
            if (!dst) return;
            const unsigned char *from = s.data.data() + swizzle(o, s.map.swizzle);
            if (!s.add) {
                memcpy(dst, from, s.map.esize);
                return;
            }
            float x, y;
            memcpy(&x, dst, sizeof x);
            memcpy(&y, from, sizeof y);
            x += y;
            memcpy(dst, &x, sizeof x);
        });
    }
    q.stores.erase(q.stores.begin(), q.stores.begin() + (ptrdiff_t)end);
    q.group_ends.erase(q.group_ends.begin(), q.group_ends.begin() + (ptrdiff_t)retire);
    for (size_t &e : q.group_ends) e -= end;
    note_progress();
}

} // namespace sl_emu

/* ---- the driver API ---------------------------------------------------------------------------
 */

using namespace sl_emu;

namespace {

CUresult encode_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
CUresult encode_error(const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "sluice emu: cuTensorMapEncodeTiled: %s (CUDA_ERROR_INVALID_VALUE)\n", msg);
    return CUDA_ERROR_INVALID_VALUE;
}

int element_size(CUtensorMapDataType t) {
    switch (t) {
    case CU_TENSOR_MAP_DATA_TYPE_UINT8:
        return 1;
    case CU_TENSOR_MAP_DATA_TYPE_UINT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16:
        return 2;
    case CU_TENSOR_MAP_DATA_TYPE_UINT32:
    case CU_TENSOR_MAP_DATA_TYPE_INT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ:
        return 4;
    case CU_TENSOR_MAP_DATA_TYPE_UINT64:
    case CU_TENSOR_MAP_DATA_TYPE_INT64:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT64:
        return 8;
    default:
        return 0; /* the packed 4- and 6-bit types are not emulated */
    }
}

bool is_float(CUtensorMapDataType t) {
    return t == CU_TENSOR_MAP_DATA_TYPE_FLOAT16 || t == CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 ||
           t == CU_TENSOR_MAP_DATA_TYPE_FLOAT32 || t == CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ ||
           t == CU_TENSOR_MAP_DATA_TYPE_FLOAT64 || t == CU_TENSOR_MAP_DATA_TYPE_TFLOAT32 ||
           t == CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ;
}

} // namespace

/* The checks are cuda.h's requirements; what the emulator does not implement (interleaved
 * layouts, element strides other than 1, the 128B_ATOM swizzles, packed types, a swizzled box
 * row narrower than the swizzle span) is refused with a message saying so. */
CUresult CUDAAPI cuTensorMapEncodeTiled(
    CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
    void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
    const cuuint32_t *boxDim, const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
    CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
    CUtensorMapFloatOOBfill oobFill) {
    std::lock_guard<std::recursive_mutex> lock(big_lock());
    if (!tensorMap || (uintptr_t)tensorMap % 64)
        return encode_error("tensorMap %p must be 64-byte aligned", (void *)tensorMap);
    const int es = element_size(tensorDataType);
    if (!es) return encode_error("tensorDataType %d is not emulated", (int)tensorDataType);
    if (tensorRank < 1 || tensorRank > 5)
        return encode_error("tensorRank %u outside 1..5", tensorRank);
    if (interleave != CU_TENSOR_MAP_INTERLEAVE_NONE)
        return encode_error("interleave %d: only CU_TENSOR_MAP_INTERLEAVE_NONE is emulated",
                            (int)interleave);
    if (swizzle > CU_TENSOR_MAP_SWIZZLE_128B)
        return encode_error("swizzle %d: the 128B_ATOM modes are not emulated", (int)swizzle);
    if ((unsigned)l2Promotion > CU_TENSOR_MAP_L2_PROMOTION_L2_256B)
        return encode_error("l2Promotion %d is not a CUtensorMapL2promotion", (int)l2Promotion);
    if (oobFill != CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE &&
        (oobFill != CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA || !is_float(tensorDataType)))
        return encode_error("oobFill %d (NaN fill needs a floating-point type)", (int)oobFill);
    if (!globalDim || !boxDim || !elementStrides || (tensorRank > 1 && !globalStrides))
        return encode_error("a null array argument");
    if ((uintptr_t)globalAddress % 16)
        return encode_error("globalAddress %p must be 16-byte aligned", globalAddress);
    sm90::tensor_map m;
    memset(&m, 0, sizeof m);
    m.magic = sm90::k_tensor_map_magic;
    m.addr = (uint64_t)(uintptr_t)globalAddress;
    m.rank = (uint8_t)tensorRank;
    m.esize = (uint8_t)es;
    m.dtype = (uint8_t)tensorDataType;
    m.swizzle = (uint8_t)swizzle;
    m.oob_nan = oobFill == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA;
    m.strides[0] = (uint64_t)es;
    for (cuuint32_t d = 0; d < tensorRank; d++) {
        if (globalDim[d] < 1 || globalDim[d] > (1ull << 32))
            return encode_error("globalDim[%u] = %llu outside 1..2^32", d,
                                (unsigned long long)globalDim[d]);
        if (boxDim[d] < 1 || boxDim[d] > 256)
            return encode_error("boxDim[%u] = %u outside 1..256", d, boxDim[d]);
        if (elementStrides[d] < 1 || elementStrides[d] > 8)
            return encode_error("elementStrides[%u] = %u outside 1..8", d, elementStrides[d]);
        if (d > 0 && elementStrides[d] != 1)
            return encode_error("elementStrides[%u] = %u: only 1 is emulated", d,
                                elementStrides[d]);
        m.dims[d] = globalDim[d];
        m.box[d] = (uint16_t)boxDim[d];
        if (d > 0) {
            const cuuint64_t s = globalStrides[d - 1];
            if (s % 16 || s >= (1ull << 40))
                return encode_error("globalStrides[%u] = %llu must be a multiple of 16 below 2^40",
                                    d - 1, (unsigned long long)s);
            m.strides[d] = s;
        }
    }
    const size_t inner = (size_t)boxDim[0] * (size_t)es;
    if (inner % 16)
        return encode_error("boxDim[0] * element size = %zu bytes must be a multiple of 16", inner);
    static const size_t span[4] = {0, 32, 64, 128};
    if (swizzle != CU_TENSOR_MAP_SWIZZLE_NONE && inner > span[swizzle])
        return encode_error("the box's inner dimension (%zu bytes) exceeds the %zu-byte swizzle",
                            inner, span[swizzle]);
    if (swizzle != CU_TENSOR_MAP_SWIZZLE_NONE && inner != span[swizzle])
        return encode_error("the box's inner dimension (%zu bytes) is narrower than the %zu-byte "
                            "swizzle: not emulated (make a row of the box the swizzle span)",
                            inner, span[swizzle]);
    size_t extent = (size_t)es;
    for (cuuint32_t d = 0; d < tensorRank; d++) extent += (size_t)(m.dims[d] - 1) * m.strides[d];
    if (!find_allocation(globalAddress, extent))
        return encode_error("the tensor (%p, %zu bytes to its last element) is not inside one "
                            "allocation of the emulated device",
                            globalAddress, extent);
    memset(tensorMap, 0, sizeof *tensorMap);
    memcpy(tensorMap, &m, sizeof m);
    return CUDA_SUCCESS;
}

/* The runtime's way to the driver API: only cuTensorMapEncodeTiled exists here. */
cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr,
                                             unsigned int cudaVersion, unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult *driverStatus) {
    (void)flags;
    if (!symbol || !funcPtr) return cudaErrorInvalidValue;
    *funcPtr = nullptr;
    cudaDriverEntryPointQueryResult r = cudaDriverEntryPointSymbolNotFound;
    if (strcmp(symbol, "cuTensorMapEncodeTiled") == 0) {
        if (cudaVersion >= 12000) {
            *funcPtr = (void *)&cuTensorMapEncodeTiled;
            r = cudaDriverEntryPointSuccess;
        } else {
            r = cudaDriverEntryPointVersionNotSufficent;
        }
    }
    if (driverStatus) *driverStatus = r;
    return cudaSuccess;
}

cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
                                    enum cudaDriverEntryPointQueryResult *driverStatus) {
    return cudaGetDriverEntryPointByVersion(symbol, funcPtr, CUDART_VERSION, flags, driverStatus);
}
