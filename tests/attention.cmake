# attention/: q/gate split, RoPE and YaRN tables, fused gated attention (CPU kernels).
sluice_test(test_attention_qgate SOURCES test_attention_qgate.c LABELS attention)
sluice_test(test_attention_rope SOURCES test_attention_rope.c LABELS attention)
sluice_test(test_attention_fwd SOURCES test_attention_fwd.c LABELS attention)
sluice_test(test_attention_grad SOURCES test_attention_grad.c LABELS attention)
# S = 16384: ~0.5 s optimized, ~2 min in a -O0 sanitizer build.
sluice_test(test_attention_long SOURCES test_attention_long.c LABELS attention TIMEOUT 900)
