/* model/diagnostics.c - per-layer forward diagnostics (see diagnostics.h). */
#include "model/diagnostics.h"

#include <stdlib.h>

#include "core/log.h"
#include "core/ops.h"
#include "model/model.h"

sl_model_diagnostics *sl_model_diagnostics_create(const sl_model *m) {
    sl_model_diagnostics *d = sl_xcalloc(1, sizeof *d);
    d->layers = m->cfg.num_hidden_layers;
    d->values = sl_tensor_new2(m->be, SL_F32, d->layers, SL_DIAG_COLS);
    d->cell = sl_tensor_view_handle();
    return d;
}

void sl_model_diagnostics_free(sl_model_diagnostics *d) {
    if (!d) return;
    sl_tensor_free(d->cell);
    sl_tensor_free(d->values);
    free(d);
}

static sl_tensor *cell(sl_model_diagnostics *d, int layer, int col) {
    return sl_tensor_view_set1(d->cell, d->values, (int64_t)layer * SL_DIAG_COLS + col, 1);
}

void sl_model_diagnostics_layer(sl_model_diagnostics *d, int layer, const sl_attn_block *attn,
                                const sl_attn_inputs *in, const sl_tensor *out) {
    SL_CHECK(layer >= 0 && layer < d->layers, "diagnostics: layer %d of %d", layer, d->layers);
    sl_attn_block_gate_score(attn, cell(d, layer, SL_DIAG_GATE));
    sl_attn_block_first_token_share(attn, in, cell(d, layer, SL_DIAG_FIRST_TOKEN));
    sl_op_absmax(cell(d, layer, SL_DIAG_MAX_ACT), out);
}

void sl_model_diagnostics_read(const sl_model_diagnostics *d, float *host) {
    sl_tensor_to_host(d->values, host);
}
