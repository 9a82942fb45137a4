"""tests/hf_yarn_reference.py - YaRN inverse frequencies and attention factor as Hugging Face
transformers computes them from a config.json (_compute_yarn_parameters), written out in NumPy
float32 as transformers does in torch float32, for tests/test_rope_hf.c.

usage: python3 hf_yarn_reference.py CONFIG_JSON
Prints two blocks, one per rule transformers has used for the factor:
  implicit  transformers 4.45-4.5x: factor = max_position_embeddings / original_max_position_embeddings
            whenever rope_scaling has original_max_position_embeddings
  explicit  later versions: rope_scaling.factor
each as "RULE mscale M low L high H" then "RULE inv_freq f0 f1 ...".
"""
import json
import math
import sys

import numpy as np


def yarn(cfg, factor):
    rs = cfg["rope_scaling"]
    base = float(cfg["rope_theta"])
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    dim = int(head_dim * cfg.get("partial_rotary_factor", 1.0))
    orig = rs["original_max_position_embeddings"]
    attention_factor = rs.get("attention_factor")
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0
    beta_fast = rs.get("beta_fast") or 32
    beta_slow = rs.get("beta_slow") or 1

    def corr_dim(rot):
        return (dim * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))

    low = max(math.floor(corr_dim(beta_fast)), 0)
    high = min(math.ceil(corr_dim(beta_slow)), dim - 1)
    pos_freqs = np.float32(base) ** (np.arange(0, dim, 2).astype(np.float32) / np.float32(dim))
    extrapolation = np.float32(1.0) / pos_freqs
    interpolation = np.float32(1.0) / (np.float32(factor) * pos_freqs)
    hi = high + 0.001 if low == high else high
    ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - np.float32(low))
                   / np.float32(hi - low), 0, 1).astype(np.float32)
    extra_factor = np.float32(1) - ramp
    inv_freq = interpolation * (np.float32(1) - extra_factor) + extrapolation * extra_factor
    return attention_factor, low, high, inv_freq.astype(np.float32)


def main():
    cfg = json.load(open(sys.argv[1]))
    rs = cfg["rope_scaling"]
    rules = [("implicit", cfg["max_position_embeddings"] / rs["original_max_position_embeddings"]),
             ("explicit", rs["factor"])]
    for name, factor in rules:
        mscale, low, high, inv = yarn(cfg, factor)
        print(f"{name} mscale {mscale!r} low {low} high {high}")
        print(f"{name} inv_freq " + " ".join(repr(float(v)) for v in inv))


main()
