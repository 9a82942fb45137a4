/*
 * model/counts.h - parameter and training-FLOP counts of a model configuration.
 *
 * Notation: V = vocab_size, h = hidden_size, L = num_hidden_layers, H = num_attention_heads,
 * KV = num_key_value_heads, D = head_dim, E = num_experts, k = num_experts_per_tok,
 * I = intermediate_size, Im = moe_intermediate_size, Is = shared_expert_intermediate_size.
 * There are no biases anywhere.
 *
 * Total parameters:
 *   embed_tokens                    V*h
 *   lm_head                         V*h        (absent when tie_word_embeddings)
 *   final norm                      h
 *   per layer:
 *     input_layernorm, post_attention_layernorm     2*h
 *     q_proj       h*Wq   Wq = 2*H*D (elementwise gate), H*D + H (headwise), H*D (none)
 *     k_proj, v_proj                h*KV*D each
 *     q_norm, k_norm                D each
 *     o_proj                        H*D*h
 *     MoE layer:   router h*E; experts E * 3*h*Im (gate, up, down);
 *                  shared expert (Is > 0): 3*h*Is + shared_expert_gate h (a [1, h] Linear)
 *     dense layer (num_experts = 0 or in mlp_only_layers):  3*h*I
 *
 * Active parameters per token: the same, but only k of the E experts of each MoE layer
 * (k * 3*h*Im instead of E * 3*h*Im); embedding, router, shared expert and norms all count.
 *
 * Training FLOPs per token at sequence length S:
 *
 *   flops = 6 * N_mm + 6 * L * H * D * S
 *
 * N_mm = the active parameters of every Linear a token passes through: q/k/v/o projections,
 * router, the k selected experts, shared expert and its gate, dense FFNs and lm_head (counted
 * even when tied to the embedding, since the output matmul happens regardless) - i.e. active
 * parameters minus the embedding lookup and the norm weights. Each weight costs 2 FLOPs per
 * token forward and 4 backward (input and weight gradients): 6.
 * Attention: with causal masking a token attends to S/2 keys on average, so QK^T and PV each
 * cost 2*H*D*S/2 FLOPs forward per token; 2*H*D*S forward per layer, x3 with the backward.
 * Elementwise work (norms, RoPE, softmax, sigmoid gate, SwiGLU) is not counted.
 */
#ifndef SL_MODEL_STATS_H
#define SL_MODEL_STATS_H

#include <stdint.h>

#include "model/config.h"

/* Total parameters and parameters touched per token (formulas above). */
void sl_model_param_count(const sl_model_config *m, int64_t *total, int64_t *active_per_token);

/* Training (forward + backward) FLOPs per token at sequence length seq_len (formula above). */
double sl_model_flops_per_token(const sl_model_config *m, int seq_len);

#endif
