/* attention/rope.c - RoPE inverse frequencies and YaRN (see rope.h for the formulas). */
#include "attention/rope.h"

#include <math.h>

#include "core/log.h"

static double corr_dim(double n, int rot, double base, int orig_len) {
    return rot * log(orig_len / (n * 2.0 * M_PI)) / (2.0 * log(base));
}

int sl_rope_inv_freq(const sl_rope_params *p, float *inv_freq, float *mscale, int *low, int *high) {
    const int rot = (int)(p->head_dim * p->partial_rotary_factor);
    if (p->head_dim <= 0 || rot < 2 || rot % 2 != 0 || rot > p->head_dim) {
        sl_error("rope: head_dim %d x partial_rotary_factor %g gives %d rotary dims (need an "
                 "even number in [2, head_dim])",
                 p->head_dim, p->partial_rotary_factor, rot);
        return -1;
    }
    if (!(p->base > 1.0)) {
        sl_error("rope: base %g must be > 1", p->base);
        return -1;
    }
    const int half = rot / 2;
    int lo = -1, hi = -1;
    double ms = 1.0;
    if (p->yarn) {
        if (!(p->factor >= 1.0) || p->original_max_position_embeddings <= 0 ||
            !(p->beta_fast > 0.0) || !(p->beta_slow > 0.0) || !(p->attention_factor >= 0.0)) {
            sl_error("rope: invalid YaRN parameters (factor %g, original_max_position_embeddings "
                     "%d, beta_fast %g, beta_slow %g, attention_factor %g)",
                     p->factor, p->original_max_position_embeddings, p->beta_fast, p->beta_slow,
                     p->attention_factor);
            return -1;
        }
        const int len = p->original_max_position_embeddings;
        lo = (int)floor(corr_dim(p->beta_fast, rot, p->base, len));
        hi = (int)ceil(corr_dim(p->beta_slow, rot, p->base, len));
        if (lo < 0) lo = 0;
        if (hi > rot - 1) hi = rot - 1;
        ms = p->attention_factor != 0.0 ? p->attention_factor : 0.1 * log(p->factor) + 1.0;
    }
    const double span = hi == lo ? 0.001 : (double)(hi - lo);
    for (int i = 0; i < half; i++) {
        const double f = 1.0 / pow(p->base, 2.0 * i / rot);
        if (!p->yarn) {
            inv_freq[i] = (float)f;
            continue;
        }
        double ramp = (i - lo) / span;
        ramp = ramp < 0.0 ? 0.0 : ramp > 1.0 ? 1.0 : ramp;
        inv_freq[i] = (float)(f / p->factor * ramp + f * (1.0 - ramp));
    }
    *mscale = (float)ms;
    if (low) *low = lo;
    if (high) *high = hi;
    return half;
}
