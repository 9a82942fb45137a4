/*
 * attention/rope.h - host-side RoPE tables: the inverse frequencies and the YaRN mscale.
 *
 * The formulas are the reference card's (../shared/reference/model-math.md, see README):
 *   rot = head_dim * partial_rotary_factor (truncated; must be even and >= 2)
 *   inv_freq[i] = 1 / base^(2i / rot), i = 0 .. rot/2 - 1
 * With YaRN (factor s, L = original_max_position_embeddings):
 *   corr_dim(n) = rot * ln(L / (n * 2 pi)) / (2 ln(base))
 *   low  = max(floor(corr_dim(beta_fast)), 0),  high = min(ceil(corr_dim(beta_slow)), rot - 1)
 *   ramp[i] = clamp((i - low) / (high - low), 0, 1)   (high - low = 0.001 when equal)
 *   inv_freq[i] = inv_freq_base[i] / s * ramp[i] + inv_freq_base[i] * (1 - ramp[i])
 *   mscale = attention_factor if non-zero, else 0.1 ln(s) + 1
 * Without YaRN mscale = 1. Computed in double, stored as float.
 */
#ifndef SL_ROPE_H
#define SL_ROPE_H

typedef struct {
    int head_dim;
    double partial_rotary_factor;         /* 1.0 for the paper's models */
    double base;                          /* rope_theta */
    int yarn;                             /* non-zero: apply YaRN with the fields below */
    double factor;                        /* s >= 1 */
    int original_max_position_embeddings; /* L */
    double beta_fast, beta_slow;          /* 32, 1 */
    double attention_factor;              /* mscale override; 0 = 0.1 ln(s) + 1 */
} sl_rope_params;

/*
 * Fills inv_freq [rot/2] and *mscale, and (when not NULL) *low / *high with the YaRN ramp
 * bounds (-1 without YaRN). Returns rot/2, or -1 (with sl_error) when the parameters are
 * impossible (odd or zero rot, base <= 1, YaRN factor < 1, L <= 0, beta_slow <= 0,
 * beta_fast <= 0). inv_freq must hold head_dim/2 floats.
 */
int sl_rope_inv_freq(const sl_rope_params *p, float *inv_freq, float *mscale, int *low, int *high);

#endif
