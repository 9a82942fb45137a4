/*
 * model/diagnostics.h - optional per-layer diagnostics of the forward pass: the quantities of the
 * Gated Attention paper's Table 4, for `sluice eval --diagnostics` (docs/evaluation.md).
 *
 * Set a collector on a model (m->diag = sl_model_diagnostics_create(m)) and every forward fills,
 * for each layer l right after the layer ran (so buffers that later layers reuse are still
 * intact), the row l of a small device table:
 *   SL_DIAG_GATE         mean sigmoid(gate) over tokens, heads (and dims) (0 without a gate)
 *   SL_DIAG_FIRST_TOKEN  mean over sequences, heads and query positions i >= 1 of the softmax
 *                        weight on key 0 (sl_op_attn_sink_share)
 *   SL_DIAG_MAX_ACT      largest |x| of the layer's output residual stream (sl_op_absmax)
 * Nothing is read by the host until sl_model_diagnostics_read (one read per call).
 */
#ifndef SL_MODEL_DIAGNOSTICS_H
#define SL_MODEL_DIAGNOSTICS_H

#include "attention/attn_block.h"
#include "core/tensor.h"

enum { SL_DIAG_GATE = 0, SL_DIAG_FIRST_TOKEN = 1, SL_DIAG_MAX_ACT = 2, SL_DIAG_COLS = 3 };

typedef struct sl_model_diagnostics {
    int layers;
    sl_tensor *values; /* [layers, SL_DIAG_COLS] fp32 on the model's backend */
    sl_tensor *cell;   /* view handle of one entry */
} sl_model_diagnostics;

struct sl_model;
/* A collector for model m's layers, on its backend (free with sl_model_diagnostics_free). */
sl_model_diagnostics *sl_model_diagnostics_create(const struct sl_model *m);
void sl_model_diagnostics_free(sl_model_diagnostics *d);

/* The hook model.c calls after layer `layer` ran: attn is the layer's attention block (its saved
 * q, k, gate and lse), in the batch's inputs, out the layer's output residual stream. */
void sl_model_diagnostics_layer(sl_model_diagnostics *d, int layer, const sl_attn_block *attn,
                                const sl_attn_inputs *in, const sl_tensor *out);

/* Copies the table of the last forward to host [layers * SL_DIAG_COLS] (row-major). */
void sl_model_diagnostics_read(const sl_model_diagnostics *d, float *host);

#endif
