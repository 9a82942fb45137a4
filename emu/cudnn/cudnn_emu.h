/*
 * emu/cudnn/cudnn_emu.h - what the files of the cuDNN test double share (emu/README.md,
 * "cuDNN"): limits, the descriptor and its attributes, and the refusals' reporting
 * (cudnn_emu.c); the tensors of an operation (cudnn_emu_finalize.c). All of it is hidden: the
 * shared library exports cuDNN's entry points only.
 */
#ifndef SL_CUDNN_EMU_H
#define SL_CUDNN_EMU_H

#include <cudnn_graph.h>
#include <stdbool.h>
#include <stdint.h>

#define MAX_ATTRS  24
#define MAX_DIMS   8
#define MAX_OPS    64
#define MAX_TENSOR 256

enum { WORKSPACE_BYTES = 4096 };

#pragma GCC visibility push(hidden)

typedef struct {
    int name, type;
    int64_t n;
    void *vals;
} attr;

typedef struct desc {
    cudnnBackendDescriptorType_t type;
    bool finalized;
    attr attrs[MAX_ATTRS];
    int nattrs;
    /* tensors, once finalized */
    int dtype, nd;
    int64_t dims[MAX_DIMS], strides[MAX_DIMS], uid, numel;
    bool is_virtual, by_value;
    /* engine configurations: the graph they run */
    struct desc *graph;
} desc;

/* Records why a call is refused (cudnnGetLastErrorString; stderr with SLUICE_CUDNN_EMU_DEBUG
 * set) and returns st. */
cudnnStatus_t fail(cudnnStatus_t st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The attribute `name` of d, or NULL. */
attr *find(desc *d, int name);
/* The single descriptor attribute `name` holds, or NULL. */
desc *desc_attr(desc *d, int name);
/* The single integer (int64, boolean or enum) attribute `name` holds, into *out. */
bool int_attr(desc *d, int name, int64_t *out);
/* The tensors of op: inputs first (count in *nin), then the output (cudnn_emu_finalize.c). */
int op_tensors(desc *op, desc **t, int *nin);

#pragma GCC visibility pop

#endif
