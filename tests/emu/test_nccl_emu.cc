/*
 * tests/emu/test_nccl_emu.cc - the emulator's NCCL (emu/src/nccl_emu.cc), run under mpirun
 * with 1, 2 and 4 ranks (tests/emu_nccl.cmake).
 *
 * Every rank's inputs are a function of (rank, index), so each rank computes the expected
 * results by hand: reductions in rank order in fp32, bf16 rounded once at the end (the fake's
 * documented order, checked bitwise with inputs whose sum depends on the order), all-gather,
 * reduce-scatter, reduce, broadcast, grouped send/receive with uneven, zero and self counts and
 * two messages to one peer, ncclCommSplit into two groups (a key reversing the order) with a
 * collective in each and NCCL_SPLIT_NOCOLOR, collectives of two communicators grouped in
 * opposite orders on different ranks, and the error returns of bad arguments with the reason
 * ncclGetLastError gives. Buffers are the emulated device's memory; bytes past what a call
 * may write must stay untouched, and cudaFree checks the allocations' guard zones.
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <string>
#include <vector>

#include "tests/emu/emu_test.h"

extern "C" int nccl_emu_c_smoke(void); /* test_nccl_emu_c.c: nccl.h from C */

namespace {

int g_rank, g_size;

#define NCCL_OK(call)                                                                              \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        CHECK(r_ == ncclSuccess, "rank %d: %s: %s (%s)", g_rank, #call, ncclGetErrorString(r_),    \
              ncclGetLastError(nullptr));                                                          \
    } while (0)

/* A call that must fail with `want`, naming `reason` in ncclGetLastError. */
#define NCCL_FAILS(call, want, reason)                                                             \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        CHECK(r_ == (want), "rank %d: %s returned %d, expected %d", g_rank, #call, (int)r_,        \
              (int)(want));                                                                        \
        CHECK(strstr(ncclGetLastError(nullptr), reason), "rank %d: %s: last error \"%s\"", g_rank, \
              #call, ncclGetLastError(nullptr));                                                   \
    } while (0)

/* A device buffer of n elements of T, with `pad` more elements of sentinel after the n. */
template <typename T> struct dbuf {
    T *d = nullptr;
    size_t n, pad;
    dbuf(size_t n_, size_t pad_ = 0) : n(n_), pad(pad_) {
        CUDA_CHECK(cudaMalloc((void **)&d, (n + pad) * sizeof(T) + 1));
        std::vector<unsigned char> s((n + pad) * sizeof(T) + 1, 0xa5);
        CUDA_CHECK(cudaMemcpy(d, s.data(), s.size(), cudaMemcpyHostToDevice));
    }
    ~dbuf() { CUDA_CHECK(cudaFree(d)); } /* cudaFree checks the guard zones */
    void put(const std::vector<T> &h) {
        CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    }
    std::vector<T> get() const {
        std::vector<T> h(n);
        CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
        return h;
    }
    /* The sentinel after the n elements is intact. */
    bool pad_intact() const {
        std::vector<unsigned char> s(pad * sizeof(T) + 1);
        CUDA_CHECK(cudaMemcpy(s.data(), d + n, s.size(), cudaMemcpyDeviceToHost));
        for (unsigned char c : s)
            if (c != 0xa5) return false;
        return true;
    }
};

/* Rank r's element i: magnitudes far apart, so that the fp32 sum depends on the order. */
float value(int r, size_t i) {
    const float big[4] = {1e8f, 3.0f, -1e8f, 0.375f};
    return big[(r + i) % 4] + (float)(i % 7) * 0.25f + (float)r * 0.125f;
}
__nv_bfloat16 bvalue(int r, size_t i) {
    return __float2bfloat16_rn(value(r, i) * 1e-6f + (float)r * 1.5f + (float)i * 0.01f);
}

/* Expected reduction over `ranks` (in that order) of f(rank, i), in fp32. */
template <typename F> float expect_sum(const std::vector<int> &ranks, size_t i, F f) {
    float acc = f(ranks[0], i);
    for (size_t k = 1; k < ranks.size(); k++) acc += f(ranks[k], i);
    return acc;
}

std::vector<int> all_ranks(int n) {
    std::vector<int> v(n);
    for (int i = 0; i < n; i++) v[i] = i;
    return v;
}

bool same_bits(float a, float b) {
    return memcmp(&a, &b, 4) == 0;
}
bool same_bits(__nv_bfloat16 a, __nv_bfloat16 b) {
    return memcmp(&a, &b, 2) == 0;
}
template <typename T> bool same_bytes(const std::vector<T> &a, const std::vector<T> &b) {
    return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

/* This rank's fp32 inputs: value(g_rank, i) for i < n. */
std::vector<float> rank_values(size_t n) {
    std::vector<float> h(n);
    for (size_t i = 0; i < n; i++) h[i] = value(g_rank, i);
    return h;
}

/* How many of got[0 .. n) differ in bits from the sum over `ranks` of value(rank, first + i). */
int sum_mismatches(const std::vector<float> &got, size_t n, const std::vector<int> &ranks,
                   size_t first = 0) {
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        if (!same_bits(got[i], expect_sum(ranks, first + i, value))) bad++;
    return bad;
}

/* The same in bf16: bvalue(g_rank, i), and results against the sum over `ranks` in fp32 (rank
 * order) rounded once to bf16. */
std::vector<__nv_bfloat16> rank_bvalues(size_t n) {
    std::vector<__nv_bfloat16> h(n);
    for (size_t i = 0; i < n; i++) h[i] = bvalue(g_rank, i);
    return h;
}
int bsum_mismatches(const std::vector<__nv_bfloat16> &got, size_t n, const std::vector<int> &ranks,
                    size_t first = 0) {
    auto bf = [](int r, size_t i) { return __bfloat162float(bvalue(r, i)); };
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        if (!same_bits(got[i], __float2bfloat16_rn(expect_sum(ranks, first + i, bf)))) bad++;
    return bad;
}

void test_comm_queries(ncclComm_t comm) {
    int v = 0, n = -1, r = -1, dev = -1;
    NCCL_OK(ncclGetVersion(&v));
    CHECK(v == NCCL_VERSION_CODE, "version %d", v);
    NCCL_OK(ncclCommCount(comm, &n));
    NCCL_OK(ncclCommUserRank(comm, &r));
    NCCL_OK(ncclCommCuDevice(comm, &dev));
    CHECK(n == g_size && r == g_rank && dev == g_rank, "count %d rank %d device %d", n, r, dev);
    ncclResult_t a = ncclInternalError;
    NCCL_OK(ncclCommGetAsyncError(comm, &a));
    CHECK(a == ncclSuccess, "async error %d", (int)a);
    CHECK(nccl_emu_c_smoke() == NCCL_VERSION_CODE, "nccl.h from C");
}

void test_allreduce(ncclComm_t comm, cudaStream_t s) {
    const size_t n = 1000;
    const std::vector<int> ranks = all_ranks(g_size);
    /* fp32, out of place */
    dbuf<float> x(n), y(n, 3);
    const std::vector<float> h = rank_values(n);
    x.put(h);
    NCCL_OK(ncclAllReduce(x.d, y.d, n, ncclFloat32, ncclSum, comm, s));
    std::vector<float> got = y.get();
    int bad = sum_mismatches(got, n, ranks);
    CHECK(bad == 0 && y.pad_intact(), "rank %d: fp32 all-reduce: %d of %zu differ", g_rank, bad, n);
    CHECK(same_bytes(x.get(), h), "fp32 all-reduce changed its input");
    /* fp32 in place, max and avg */
    NCCL_OK(ncclAllReduce(x.d, x.d, n, ncclFloat32, ncclMax, comm, s));
    got = x.get();
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        float m = value(0, i);
        for (int r = 1; r < g_size; r++) m = fmaxf(m, value(r, i));
        if (!same_bits(got[i], m)) bad++;
    }
    CHECK(bad == 0, "rank %d: fp32 in-place max: %d differ", g_rank, bad);
    x.put(h);
    NCCL_OK(ncclAllReduce(x.d, y.d, n, ncclFloat32, ncclAvg, comm, s));
    got = y.get();
    bad = 0;
    for (size_t i = 0; i < n; i++)
        if (!same_bits(got[i], expect_sum(ranks, i, value) / (float)g_size)) bad++;
    CHECK(bad == 0, "rank %d: fp32 avg: %d differ", g_rank, bad);

    /* bf16: fp32 accumulation in rank order, one rounding */
    dbuf<__nv_bfloat16> bx(n), by(n, 2);
    bx.put(rank_bvalues(n));
    NCCL_OK(ncclAllReduce(bx.d, by.d, n, ncclBfloat16, ncclSum, comm, s));
    bad = bsum_mismatches(by.get(), n, ranks);
    CHECK(bad == 0 && by.pad_intact(), "rank %d: bf16 all-reduce: %d of %zu differ", g_rank, bad,
          n);
    /* in place */
    NCCL_OK(ncclAllReduce(bx.d, bx.d, n, ncclBfloat16, ncclSum, comm, s));
    CHECK(same_bytes(bx.get(), by.get()), "bf16 in-place all-reduce differs from out of place");
    /* count 0: nothing is read or written */
    NCCL_OK(ncclAllReduce(nullptr, nullptr, 0, ncclFloat32, ncclSum, comm, s));
}

void test_reduce_scatter_allgather(ncclComm_t comm, cudaStream_t s) {
    const size_t rc = 37;
    const int n = g_size;
    const std::vector<int> ranks = all_ranks(n);
    dbuf<float> x(rc * n), y(rc, 1);
    const std::vector<float> h = rank_values(rc * n);
    x.put(h);
    NCCL_OK(ncclReduceScatter(x.d, y.d, rc, ncclFloat32, ncclSum, comm, s));
    std::vector<float> got = y.get();
    int bad = sum_mismatches(got, rc, ranks, g_rank * rc);
    CHECK(bad == 0 && y.pad_intact(), "rank %d: fp32 reduce-scatter: %d differ", g_rank, bad);

    dbuf<__nv_bfloat16> bx(rc * n), by(rc);
    bx.put(rank_bvalues(rc * n));
    NCCL_OK(ncclReduceScatter(bx.d, by.d, rc, ncclBfloat16, ncclSum, comm, s));
    bad = bsum_mismatches(by.get(), rc, ranks, g_rank * rc);
    CHECK(bad == 0, "rank %d: bf16 reduce-scatter: %d differ", g_rank, bad);

    /* all-gather: fp32, then bytes (uint8), in place (sendbuff = recvbuff + rank * count) */
    dbuf<float> g(rc * n, 2);
    std::vector<float> mine(rc);
    for (size_t i = 0; i < rc; i++) mine[i] = value(g_rank, i);
    dbuf<float> src(rc);
    src.put(mine);
    NCCL_OK(ncclAllGather(src.d, g.d, rc, ncclFloat32, comm, s));
    got = g.get();
    bad = 0;
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < rc; i++)
            if (!same_bits(got[r * rc + i], value(r, i))) bad++;
    CHECK(bad == 0 && g.pad_intact(), "rank %d: fp32 all-gather: %d differ", g_rank, bad);

    const size_t nb = 5;
    dbuf<uint8_t> b(nb * n);
    std::vector<uint8_t> bytes(nb * n, 0);
    for (size_t i = 0; i < nb; i++) bytes[g_rank * nb + i] = (uint8_t)(g_rank * 16 + i);
    b.put(bytes);
    NCCL_OK(ncclAllGather(b.d + g_rank * nb, b.d, nb, ncclUint8, comm, s));
    std::vector<uint8_t> bgot2 = b.get();
    bad = 0;
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < nb; i++)
            if (bgot2[r * nb + i] != (uint8_t)(r * 16 + i)) bad++;
    CHECK(bad == 0, "rank %d: in-place byte all-gather: %d differ", g_rank, bad);
}

void test_broadcast_reduce(ncclComm_t comm, cudaStream_t s) {
    const size_t n = 11;
    const int root = g_size - 1;
    dbuf<int64_t> x(n), y(n, 1);
    std::vector<int64_t> h(n);
    for (size_t i = 0; i < n; i++) h[i] = (int64_t)g_rank * 1000000000000ll + (int64_t)i;
    x.put(h);
    NCCL_OK(ncclBroadcast(x.d, y.d, n, ncclInt64, root, comm, s));
    std::vector<int64_t> got = y.get();
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        if (got[i] != (int64_t)root * 1000000000000ll + (int64_t)i) bad++;
    CHECK(bad == 0 && y.pad_intact(), "rank %d: broadcast: %d differ", g_rank, bad);
    /* in place (ncclBcast) from rank 0 */
    NCCL_OK(ncclBcast(x.d, n, ncclInt64, 0, comm, s));
    got = x.get();
    CHECK(got[n - 1] == (int64_t)n - 1 && got[0] == 0, "rank %d: ncclBcast", g_rank);

    /* reduce to rank 0: only the root's buffer is written */
    dbuf<float> a(n), b(n);
    std::vector<float> ha(n);
    for (size_t i = 0; i < n; i++) ha[i] = value(g_rank, i);
    a.put(ha);
    b.put(std::vector<float>(n, -7.0f));
    NCCL_OK(ncclReduce(a.d, b.d, n, ncclFloat32, ncclSum, 0, comm, s));
    std::vector<float> r = b.get();
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        const float want = g_rank == 0 ? expect_sum(all_ranks(g_size), i, value) : -7.0f;
        if (!same_bits(r[i], want)) bad++;
    }
    CHECK(bad == 0, "rank %d: reduce: %d differ", g_rank, bad);
}

/* Elements rank `from` sends to rank `to`: uneven, zero for some pairs, self included. */
size_t pair_count(int from, int to) {
    return (size_t)((from * 7 + to * 3) % 5) * 3;
}
float pair_value(int from, int to, size_t i, int msg) {
    return (float)(from * 100000 + to * 1000 + msg * 500) + (float)i;
}

void test_send_recv(ncclComm_t comm, cudaStream_t s) {
    const int n = g_size;
    /* Per peer: two messages (the second of 2 elements), so that the order of messages
     * between one pair of ranks matters. */
    std::vector<dbuf<float> *> sends, recvs1, recvs2;
    std::vector<dbuf<float> *> sends2;
    for (int p = 0; p < n; p++) {
        const size_t c = pair_count(g_rank, p);
        std::vector<float> h(c), h2(2);
        for (size_t i = 0; i < c; i++) h[i] = pair_value(g_rank, p, i, 0);
        for (size_t i = 0; i < 2; i++) h2[i] = pair_value(g_rank, p, i, 1);
        sends.push_back(new dbuf<float>(c));
        if (c) sends.back()->put(h);
        sends2.push_back(new dbuf<float>(2));
        sends2.back()->put(h2);
        recvs1.push_back(new dbuf<float>(pair_count(p, g_rank), 4));
        recvs2.push_back(new dbuf<float>(2, 1));
    }
    NCCL_OK(ncclGroupStart());
    /* Receives posted first on odd ranks, sends first on even ones: the group ignores order. */
    for (int k = 0; k < n; k++) {
        const int p = (g_rank + k) % n;
        if (g_rank % 2) {
            NCCL_OK(ncclRecv(recvs1[p]->d, pair_count(p, g_rank), ncclFloat32, p, comm, s));
            NCCL_OK(ncclRecv(recvs2[p]->d, 2, ncclFloat32, p, comm, s));
        }
        NCCL_OK(ncclSend(sends[p]->d, pair_count(g_rank, p), ncclFloat32, p, comm, s));
        NCCL_OK(ncclSend(sends2[p]->d, 2, ncclFloat32, p, comm, s));
        if (g_rank % 2 == 0) {
            NCCL_OK(ncclRecv(recvs1[p]->d, pair_count(p, g_rank), ncclFloat32, p, comm, s));
            NCCL_OK(ncclRecv(recvs2[p]->d, 2, ncclFloat32, p, comm, s));
        }
    }
    NCCL_OK(ncclGroupEnd());
    int bad = 0;
    for (int p = 0; p < n; p++) {
        const size_t c = pair_count(p, g_rank);
        std::vector<float> got = recvs1[p]->get(), got2 = recvs2[p]->get();
        for (size_t i = 0; i < c; i++)
            if (got[i] != pair_value(p, g_rank, i, 0)) bad++;
        for (size_t i = 0; i < 2; i++)
            if (got2[i] != pair_value(p, g_rank, i, 1)) bad++;
        if (!recvs1[p]->pad_intact() || !recvs2[p]->pad_intact()) bad++;
    }
    CHECK(bad == 0, "rank %d: grouped send/recv: %d wrong", g_rank, bad);
    for (auto *v : {&sends, &sends2, &recvs1, &recvs2})
        for (auto *b : *v) delete b;
}

void test_split(ncclComm_t world, cudaStream_t s) {
    /* Two groups by parity; the key reverses the order inside each. */
    ncclComm_t sub = nullptr;
    const int colour = g_rank % 2;
    NCCL_OK(ncclCommSplit(world, colour, -g_rank, &sub, nullptr));
    CHECK(sub != nullptr, "split gave no communicator");
    if (!sub) return;
    std::vector<int> members; /* world ranks of the group, in the new rank order */
    for (int r = g_size - 1; r >= 0; r--)
        if (r % 2 == colour) members.push_back(r);
    int n = 0, me = -1;
    NCCL_OK(ncclCommCount(sub, &n));
    NCCL_OK(ncclCommUserRank(sub, &me));
    CHECK(n == (int)members.size() && me >= 0 && me < n && members[me] == g_rank,
          "rank %d: split: count %d rank %d", g_rank, n, me);
    const size_t c = 64;
    dbuf<float> x(c), y(c);
    x.put(rank_values(c));
    NCCL_OK(ncclAllReduce(x.d, y.d, c, ncclFloat32, ncclSum, sub, s));
    std::vector<float> got = y.get();
    int bad = sum_mismatches(got, c, members);
    CHECK(bad == 0, "rank %d: all-reduce in the split group: %d differ", g_rank, bad);

    /* Collectives of two communicators in one group, in opposite orders on odd and even
     * ranks: real NCCL runs them concurrently, the fake must not deadlock either. */
    dbuf<float> wy(c), sy(c);
    NCCL_OK(ncclGroupStart());
    if (g_rank % 2) NCCL_OK(ncclAllReduce(x.d, sy.d, c, ncclFloat32, ncclSum, sub, s));
    NCCL_OK(ncclAllReduce(x.d, wy.d, c, ncclFloat32, ncclSum, world, s));
    if (g_rank % 2 == 0) NCCL_OK(ncclAllReduce(x.d, sy.d, c, ncclFloat32, ncclSum, sub, s));
    NCCL_OK(ncclGroupEnd());
    got = sy.get();
    std::vector<float> wgot = wy.get();
    bad = 0;
    for (size_t i = 0; i < c; i++)
        if (!same_bits(got[i], expect_sum(members, i, value)) ||
            !same_bits(wgot[i], expect_sum(all_ranks(g_size), i, value)))
            bad++;
    CHECK(bad == 0, "rank %d: grouped collectives of two communicators: %d differ", g_rank, bad);

    /* NCCL_SPLIT_NOCOLOR: rank 0 stays out and gets no communicator. */
    ncclComm_t rest = (ncclComm_t)&rest;
    NCCL_OK(ncclCommSplit(world, g_rank == 0 ? NCCL_SPLIT_NOCOLOR : 0, g_rank, &rest, nullptr));
    if (g_rank == 0) {
        CHECK(rest == nullptr, "NCCL_SPLIT_NOCOLOR gave a communicator");
    } else {
        int rn = 0;
        NCCL_OK(ncclCommCount(rest, &rn));
        CHECK(rn == g_size - 1, "split without rank 0: %d ranks", rn);
    }
    /* Abort frees locally; destroy is the ordinary end. */
    NCCL_OK(ncclCommAbort(rest));
    NCCL_OK(ncclCommDestroy(sub));
}

void test_errors(ncclComm_t comm, cudaStream_t s) {
    dbuf<float> x(8), y(8);
    float host[8] = {0};
    NCCL_FAILS(ncclAllReduce(x.d, y.d, 8, ncclFloat32, ncclSum, nullptr, s), ncclInvalidArgument,
               "comm is NULL");
    NCCL_FAILS(ncclAllReduce(x.d, y.d, 8, (ncclDataType_t)99, ncclSum, comm, s),
               ncclInvalidArgument, "invalid datatype 99");
    NCCL_FAILS(ncclAllReduce(x.d, y.d, 8, ncclInt32, ncclSum, comm, s), ncclInvalidArgument,
               "ncclFloat32 and ncclBfloat16 only");
    NCCL_FAILS(ncclAllReduce(x.d, y.d, 8, ncclFloat32, ncclNumOps, comm, s), ncclInvalidArgument,
               "built-in ops only");
    NCCL_FAILS(ncclAllReduce(host, y.d, 8, ncclFloat32, ncclSum, comm, s), ncclInvalidArgument,
               "sendbuff");
    CHECK(strstr(ncclGetLastError(nullptr), "not device memory"), "host pointer: %s",
          ncclGetLastError(nullptr));
    NCCL_FAILS(ncclAllReduce(x.d, y.d, 9, ncclFloat32, ncclSum, comm, s), ncclInvalidArgument,
               "runs past the end");
    NCCL_FAILS(ncclAllReduce(x.d, nullptr, 8, ncclFloat32, ncclSum, comm, s), ncclInvalidArgument,
               "recvbuff is NULL");
    NCCL_FAILS(ncclAllReduce(x.d, y.d, 8, ncclFloat32, ncclSum, comm, (cudaStream_t)&host),
               ncclUnhandledCudaError, "not a stream");
    NCCL_FAILS(ncclSend(x.d, 8, ncclFloat32, g_size, comm, s), ncclInvalidArgument, "peer");
    NCCL_FAILS(ncclRecv(x.d, 8, ncclFloat32, -1, comm, s), ncclInvalidArgument, "peer -1");
    NCCL_FAILS(ncclBroadcast(x.d, y.d, 8, ncclFloat32, g_size, comm, s), ncclInvalidArgument,
               "root");
    NCCL_FAILS(ncclAllGather(x.d, y.d, 8, ncclFloat32, comm, s),
               g_size > 1 ? ncclInvalidArgument : ncclSuccess, g_size > 1 ? "recvbuff" : "");
    NCCL_FAILS(ncclGroupEnd(), ncclInvalidUsage, "no matching ncclGroupStart");
    NCCL_FAILS(ncclCommCount(comm, nullptr), ncclInvalidArgument, "count is NULL");
    NCCL_FAILS(ncclCommSplit(comm, -5, 0, nullptr, nullptr), ncclInvalidArgument, "newcomm");

    /* A bad operation inside a group fails the group: nothing of it runs, not even a valid
     * self send and receive queued before it. */
    std::vector<float> h(8, 2.5f);
    x.put(h);
    y.put(std::vector<float>(8, -1.0f));
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclSend(x.d, 8, ncclFloat32, g_rank, comm, s));
    NCCL_OK(ncclRecv(y.d, 8, ncclFloat32, g_rank, comm, s));
    NCCL_FAILS(ncclSend(x.d, 8, ncclFloat64, g_rank, comm, s), ncclInvalidArgument,
               "runs past the end");
    NCCL_FAILS(ncclGroupEnd(), ncclInvalidArgument, "runs past the end");
    CHECK(same_bytes(y.get(), std::vector<float>(8, -1.0f)), "a failed group ran");
    /* ... and the next group works. */
    NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclSend(x.d, 8, ncclFloat32, g_rank, comm, s));
    NCCL_OK(ncclRecv(y.d, 8, ncclFloat32, g_rank, comm, s));
    NCCL_OK(ncclGroupEnd());
    CHECK(same_bytes(y.get(), h), "self send/recv");

    /* Communicator creation: every world rank calls it, so every rank sees the error. */
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    ncclComm_t bad = nullptr;
    NCCL_FAILS(ncclCommInitRank(&bad, g_size, id, g_rank), ncclInvalidArgument,
               "does not come from ncclGetUniqueId");
    if (g_rank == 0) NCCL_OK(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    NCCL_FAILS(ncclCommInitRank(&bad, g_size + 1, id, g_rank), ncclInvalidArgument, "nranks");
    CHECK(bad == nullptr, "a failed init gave a communicator");
    NCCL_FAILS(ncclCommInitRank(&bad, g_size, id, 0),
               g_size > 1 ? ncclInvalidArgument : ncclSuccess, g_size > 1 ? "each once" : "");
    if (bad) NCCL_OK(ncclCommDestroy(bad));
    ncclConfig_t cfg = {};
    NCCL_FAILS(ncclCommInitRankConfig(&bad, g_size, id, g_rank, &cfg), ncclInvalidArgument,
               "NCCL_CONFIG_INITIALIZER");
    /* Two members on one device: refused as real NCCL refuses it, on every member. */
    if (g_size > 1) {
        CUDA_CHECK(cudaSetDevice(0));
        if (g_rank == 0) NCCL_OK(ncclGetUniqueId(&id));
        MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
        NCCL_FAILS(ncclCommInitRank(&bad, g_size, id, g_rank), ncclInvalidUsage,
                   "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 10000");
        CHECK(bad == nullptr, "a duplicate device gave a communicator");
        CUDA_CHECK(cudaSetDevice(g_rank));
    }
}

} // namespace

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    /* one device per rank, as NCCL requires (tests/emu_nccl.cmake sets SLUICE_EMU_DEVICES) */
    CUDA_CHECK(cudaSetDevice(g_rank));
    ncclUniqueId id;
    if (g_rank == 0) NCCL_OK(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm = nullptr;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    NCCL_OK(ncclCommInitRankConfig(&comm, g_size, id, g_rank, &cfg));
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreate(&s));
    if (comm) {
        test_comm_queries(comm);
        test_allreduce(comm, s);
        test_reduce_scatter_allgather(comm, s);
        test_broadcast_reduce(comm, s);
        test_send_recv(comm, s);
        test_split(comm, s);
        test_errors(comm, s);
        NCCL_OK(ncclCommFinalize(comm));
        NCCL_OK(ncclCommDestroy(comm));
    }
    CUDA_CHECK(cudaStreamSynchronize(s));
    CUDA_CHECK(cudaStreamDestroy(s));
    char name[32];
    snprintf(name, sizeof name, "test_nccl_emu rank %d/%d", g_rank, g_size);
    const int rc = emu_finish(name);
    MPI_Finalize();
    return rc;
}
