/*
 * attention/attn_kernels.cu - the CUDA backend's gated attention ops (sl_ops_i gated_attn_fwd/bwd):
 * the table of attention kernels, the per-backend choice (attention.kernel, attn_bench --kernel)
 * and the per-call dispatch. Interface and the kernels' list: attention/attn_kernels.h; design:
 * docs/attention.md, "Kernel choice".
 *
 * Why per call: the same backend runs problems of several kinds (fp32 reference runs, bf16 at
 * any head dim, with or without documents), and the fastest kernel that takes a problem depends
 * on all of them. The check is a few comparisons, negligible next to any attention launch.
 */
#include <stdio.h>
#include <string.h>

#include "attention/attn_kernels.h"
#include "attention/cudnn_sdpa.h"
#include "attention/kernels_cuda.h"
#include "core/backend_cuda.cuh"
#include "core/log.h"
#include "core/tensor_impl.h"

namespace {

/* What a kernel is asked to compute, for its support check. */
struct problem {
    const sl_tensor *q, *k, *g, *seg;
    int batch, seq;
};

typedef void (*fwd_fn)(void *, sl_tensor *, sl_tensor *, sl_tensor *, const sl_tensor *,
                       const sl_tensor *, const sl_tensor *, const sl_tensor *, const sl_tensor *,
                       int, int, float);
typedef void (*bwd_fn)(void *, sl_tensor *, sl_tensor *, sl_tensor *, sl_tensor *,
                       const sl_tensor *, const sl_tensor *, const sl_tensor *, const sl_tensor *,
                       const sl_tensor *, const sl_tensor *, const sl_tensor *, const sl_tensor *,
                       int, int, float);

struct kernel {
    sl_attn_kernel_info info;
    /* NULL when the kernel takes the problem on this backend, else why not (into buf) */
    const char *(*unsupported)(void *ctx, const problem *p, char *buf, size_t len);
    fwd_fn fwd;
    bwd_fn bwd;
    /* whether "auto" and "sluice" may choose it for p on ctx (NULL: yes; asked before
     * unsupported); chosen by name it runs wherever unsupported allows */
    bool (*automatic)(void *ctx, const problem *p);
};

/* The Hopper kernel's automatic choice (SLUICE_ATTN_SM90), asked only for the problems it takes
 * on any device: SLUICE_ATTN_SM90=1 stops a run whose device cannot run it, but not an fp32 run
 * or one at another head dim, which no tensor-core kernel would take anyway. */
bool sm90_automatic(void *ctx, const problem *p) {
    return sl_cuda_gated_attn_tc_supported(p->q) && sl_cuda_gated_attn_sm90_automatic(ctx);
}

const char *sm90_unsupported(void *ctx, const problem *p, char *buf, size_t len) {
    if (!sl_cuda_gated_attn_tc_supported(p->q)) {
        snprintf(buf, len,
                 "it takes bf16 tensors with head dim 64 or 128, not %s with head dim %lld",
                 sl_dtype_name(p->q->dtype), (long long)p->q->shape[2]);
        return buf;
    }
    if (sl_cuda_gated_attn_sm90_runs_on(ctx)) return NULL;
    const cudaDeviceProp *props = sl_cuda_props(ctx);
    snprintf(buf, len,
             "it needs a compute capability 9.x device, the sm_90a code in this build and the "
             "driver's cuTensorMapEncodeTiled (device %s is %d.%d)",
             props->name, props->major, props->minor);
    return buf;
}

const char *mma_unsupported(void *, const problem *p, char *buf, size_t len) {
    if (sl_cuda_gated_attn_tc_supported(p->q)) return NULL;
    snprintf(buf, len, "it takes bf16 tensors with head dim 64 or 128, not %s with head dim %lld",
             sl_dtype_name(p->q->dtype), (long long)p->q->shape[2]);
    return buf;
}

const char *simt_unsupported(void *, const problem *, char *, size_t) {
    return NULL; /* every dtype and head dim: the fallback */
}

const char *cudnn_unsupported(void *ctx, const problem *p, char *buf, size_t len) {
    const sl_cudnn *c = sl_cuda_attn_cudnn(ctx);
    const long long d = p->q->shape[2];
    if (!c)
        snprintf(buf, len, "cuDNN is not loaded on this backend (only a choice of cudnn loads it)");
    else if (p->q->dtype != SL_BF16)
        snprintf(buf, len, "it takes bf16 tensors, not %s (training.precision = \"bf16\")",
                 sl_dtype_name(p->q->dtype));
    else if (d != 64 && d != 128)
        snprintf(buf, len, "it takes head dim 64 or 128 (the dims tested), not %lld", d);
    else if (p->seg)
        snprintf(buf, len,
                 "cuDNN's SDPA has no per-document mask (training.document_mask needs "
                 "attention.kernel = \"auto\" or \"sluice\")");
    else {
        const cudaDeviceProp *props = sl_cuda_props(ctx);
        sl_cudnn_shape s = {p->batch,
                            p->seq,
                            (int)p->q->shape[1],
                            (int)p->k->shape[1],
                            (int)d,
                            10 * props->major + props->minor};
        return sl_cudnn_sdpa_unsupported(c, &s, buf, len);
    }
    return buf;
}

/* Every attention kernel of the build; sluice's in the order its choice tries them (fastest
 * first). A new kernel is a row here. */
const kernel k_kernels[] = {
    {{"sm90", "sluice",
      "Hopper: wgmma, TMA, warp specialization (FlashAttention-3's techniques; sm_90a, compute "
      "capability 9.x): bf16, head dim 64 or 128"},
     sm90_unsupported,
     sl_cuda_gated_attn_sm90_fwd,
     sl_cuda_gated_attn_sm90_bwd,
     sm90_automatic},
    {{"mma", "sluice",
      "tensor cores (mma.sync m16n8k16, sm_80+), FlashAttention-2 tiling: bf16, head dim 64 or "
      "128"},
     mma_unsupported,
     sl_cuda_gated_attn_tc_fwd,
     sl_cuda_gated_attn_tc_bwd,
     nullptr},
    {{"simt", "sluice", "CUDA cores, fp32 arithmetic: any dtype and head dim (the fallback)"},
     simt_unsupported,
     sl_cuda_gated_attn_simt_fwd,
     sl_cuda_gated_attn_simt_bwd,
     nullptr},
    {{"cudnn", "cudnn",
      "cuDNN's fused SDPA (libcudnn.so.9 at run time) plus sluice's gate: bf16, head dim 64 or "
      "128, no document mask"},
     cudnn_unsupported,
     sl_cuda_gated_attn_cudnn_fwd,
     sl_cuda_gated_attn_cudnn_bwd,
     nullptr},
};
constexpr int kNumKernels = (int)(sizeof k_kernels / sizeof k_kernels[0]);

enum mode { MODE_AUTO = 0, MODE_SLUICE, MODE_CUDNN, MODE_NAMED };

/* The per-backend state (core/backend_cuda.cuh, SL_CUDA_EXT_ATTENTION). */
struct state {
    mode how;
    int named;        /* MODE_NAMED: index into k_kernels */
    sl_cudnn *cudnn;  /* loaded when the choice may run the cudnn kernel */
    const char *last; /* the kernel of the last call */
};

void destroy_state(void *obj) {
    state *s = (state *)obj;
    sl_cudnn_close(s->cudnn);
    delete s;
}

state *state_of(void *ctx) {
    return (state *)sl_cuda_ext(ctx, SL_CUDA_EXT_ATTENTION);
}

/* The state of ctx, made with the default choice (auto) on first use. */
state *state_or_default(void *ctx) {
    state *s = state_of(ctx);
    if (!s) {
        s = new state{MODE_AUTO, -1, NULL, NULL};
        sl_cuda_set_ext(ctx, SL_CUDA_EXT_ATTENTION, s, destroy_state);
    }
    return s;
}

int find_kernel(const char *name) {
    for (int i = 0; i < kNumKernels; i++)
        if (strcmp(k_kernels[i].info.name, name) == 0) return i;
    return -1;
}

/* The SIMT kernel on bf16 is several times slower than the tensor-core one: say so once per
 * process when sluice's choice falls back to it (fp32 runs are the reference path, silently). */
void note_simt(const sl_tensor *q) {
    static bool said = false;
    if (q->dtype != SL_BF16 || said) return;
    said = true;
    sl_info("gated attention: head dim %lld has no tensor-core kernel (64 and 128 have one); "
            "using the SIMT kernel",
            (long long)q->shape[2]);
}

/* The kernel that runs problem p on ctx; stops the run when the chosen one cannot. */
const kernel *pick(void *ctx, const problem *p, const char *op) {
    state *s = state_or_default(ctx);
    char why[512];
    const kernel *k = NULL;
    if (s->how == MODE_AUTO || s->how == MODE_SLUICE) {
        for (int i = 0; i < kNumKernels && !k; i++)
            if (strcmp(k_kernels[i].info.family, "sluice") == 0 &&
                (!k_kernels[i].automatic || k_kernels[i].automatic(ctx, p)) &&
                !k_kernels[i].unsupported(ctx, p, why, sizeof why))
                k = &k_kernels[i];
        SL_CHECK(k != NULL, "%s: no attention kernel takes this problem", op);
        if (strcmp(k->info.name, "simt") == 0) note_simt(p->q);
    } else {
        k = &k_kernels[s->how == MODE_CUDNN ? find_kernel("cudnn") : s->named];
        const char *no = k->unsupported(ctx, p, why, sizeof why);
        if (no) {
            char who[64];
            if (s->how == MODE_CUDNN)
                snprintf(who, sizeof who, "attention.kernel = \"cudnn\"");
            else
                snprintf(who, sizeof who, "attention kernel \"%s\"", k->info.name);
            sl_fatal("%s: %s cannot run this problem (B %d, S %d, H %lld, KV %lld, D %lld, %s%s): "
                     "%s",
                     op, who, p->batch, p->seq, (long long)p->q->shape[1],
                     (long long)p->k->shape[1], (long long)p->q->shape[2],
                     sl_dtype_name(p->q->dtype), p->seg ? ", documents" : "", no);
        }
    }
    s->last = k->info.name;
    return k;
}

} // namespace

extern "C" int sl_attn_kernel_count(void) {
    return kNumKernels;
}

extern "C" const sl_attn_kernel_info *sl_attn_kernel_at(int i) {
    return i >= 0 && i < kNumKernels ? &k_kernels[i].info : NULL;
}

extern "C" int sl_cuda_attn_configure(void *ctx, const char *choice, char *err, size_t errlen) {
    state next = {MODE_AUTO, -1, NULL, NULL};
    const char *c = choice && choice[0] ? choice : "auto";
    if (strcmp(c, "auto") == 0) {
        next.how = MODE_AUTO;
    } else if (strcmp(c, "sluice") == 0) {
        next.how = MODE_SLUICE;
    } else if (strcmp(c, "cudnn") == 0) {
        next.how = MODE_CUDNN;
    } else if ((next.named = find_kernel(c)) >= 0) {
        next.how = MODE_NAMED;
    } else {
        char names[256] = "";
        for (int i = 0; i < kNumKernels; i++) {
            strncat(names, i ? ", " : "", sizeof names - strlen(names) - 1);
            strncat(names, k_kernels[i].info.name, sizeof names - strlen(names) - 1);
        }
        return sl_fail(err, errlen,
                       "unknown attention kernel \"%s\" (expected \"auto\", \"sluice\", "
                       "\"cudnn\" or a kernel of this build: %s)",
                       c, names);
    }
    const bool cudnn =
        next.how == MODE_CUDNN ||
        (next.how == MODE_NAMED && strcmp(k_kernels[next.named].info.name, "cudnn") == 0);
    if (cudnn) {
        const cudaDeviceProp *props = sl_cuda_props(ctx);
        if (sl_cuda_deterministic(ctx))
            return sl_fail(err, errlen,
                           "cuDNN's attention backward sums dQ with atomics, so its bits vary "
                           "run to run; it needs backend.deterministic = false");
        if (props->major < 8)
            return sl_fail(err, errlen,
                           "cuDNN's fused attention needs compute capability 8.0 or later, device "
                           "%s has %d.%d",
                           props->name, props->major, props->minor);
        char why[1024];
        next.cudnn = sl_cudnn_open(why, sizeof why);
        if (!next.cudnn) return sl_fail(err, errlen, "%s", why);
        const long v = sl_cudnn_version(next.cudnn);
        sl_info("attention: cuDNN %ld.%ld.%ld from %s", v / 10000, v / 100 % 100, v % 100,
                sl_cudnn_library(next.cudnn));
    }
    state *s = new state(next);
    sl_cuda_set_ext(ctx, SL_CUDA_EXT_ATTENTION, s, destroy_state);
    return 0;
}

extern "C" const char *sl_cuda_attn_last_kernel(void *ctx) {
    const state *s = state_of(ctx);
    return s ? s->last : NULL;
}

extern "C" struct sl_cudnn *sl_cuda_attn_cudnn(void *ctx) {
    const state *s = state_of(ctx);
    return s ? s->cudnn : NULL;
}

extern "C" void sl_cuda_gated_attn_fwd(void *ctx, sl_tensor *y, sl_tensor *o, sl_tensor *lse,
                                       const sl_tensor *q, const sl_tensor *k, const sl_tensor *v,
                                       const sl_tensor *g, const sl_tensor *seg, int batch, int seq,
                                       float scale) {
    if (batch == 0 || seq == 0) return;
    const problem p = {q, k, g, seg, batch, seq};
    const kernel *kn = pick(ctx, &p, "gated_attn_fwd");
    kn->fwd(ctx, y, o, lse, q, k, v, g, seg, batch, seq, scale);
}

extern "C" void sl_cuda_gated_attn_bwd(void *ctx, sl_tensor *dq, sl_tensor *dk, sl_tensor *dv,
                                       sl_tensor *dg, const sl_tensor *dy, const sl_tensor *q,
                                       const sl_tensor *k, const sl_tensor *v, const sl_tensor *g,
                                       const sl_tensor *seg, const sl_tensor *o,
                                       const sl_tensor *lse, int batch, int seq, float scale) {
    SL_CHECK(!g || dg, "cuda gated_attn_bwd: dg is NULL but the gate is not");
    if (batch == 0 || seq == 0) return;
    const problem p = {q, k, g, seg, batch, seq};
    const kernel *kn = pick(ctx, &p, "gated_attn_bwd");
    kn->bwd(ctx, dq, dk, dv, dg, dy, q, k, v, g, seg, o, lse, batch, seq, scale);
}
