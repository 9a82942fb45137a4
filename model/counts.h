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
#include "model/model.h" /* sl_memory_mode */

/* Total parameters and parameters touched per token (formulas above). */
void sl_model_param_count(const sl_model_config *m, int64_t *total, int64_t *active_per_token);

/* Training (forward + backward) FLOPs per token at sequence length seq_len (formula above). */
double sl_model_flops_per_token(const sl_model_config *m, int seq_len);

/* Extra (hardware, not model) training FLOPs per token that recomputation in memory mode
 * `mode` adds (docs/memory.md): `attention` reruns the input norm and the Q/K/V projections of
 * every layer but the last, 2*h*(Wq + 2*KV*D) per token and layer; `layer` reruns the whole
 * forward of every layer but the last, 2 * (its matmul parameters, k experts) + 2*H*D*S.
 * 0 for `none`. Elementwise work is not counted, as above. */
double sl_model_recompute_flops_per_token(const sl_model_config *m, sl_memory_mode mode,
                                          int seq_len);

/* The routed experts' parameters: E * 3*h*Im per MoE layer (the part expert parallelism
 * splits; everything else of sl_model_param_count is replicated on every rank). */
int64_t sl_model_expert_param_count(const sl_model_config *m);

/*
 * Activation memory of one micro-batch of `tokens` tokens in memory mode `mode`, counted from
 * the tensors the blocks allocate (attention/attn_block.c, moe/ffn_block.c, moe/router.c,
 * moe/token_dispatcher.c, moe/experts.c, moe/swiglu_mlp.c, model/model.c); `act_bytes` is the
 * activation element size (2 for bf16, 4 for fp32). Per layer and token, in elements:
 *   residual        x[l] and h[l] (h each)
 *   attention set   xn h, qall Wq, qn H*D, k, kn, v KV*D each, g (Wq - H*D),
 *                   fp32 rstd 1, q_rstd H, k_rstd KV
 *   kernel outputs  y and o H*D each, fp32 lse H
 *   FFN             xn and y h each, fp32 rstd 1; MoE: fp32 router logits, probs, dlogits E
 *                   each, topk_w and dtopk_w k each, int32 topk_idx, sorted_token, slot_pos k
 *                   each, in bf16 the router's fp32 input copy and its gradient h each; routed
 *                   rows xs, ys, dxs, dys k*h each, with ep > 1 the received rows (k*h each on
 *                   average: balanced routing) in expert_in, expert_out and their gradients; the
 *                   experts' gu, h, dgu, dh 6*Im per routed row; shared expert 6*Is + 3h + 2
 *                   (its MLP, output, gated output, gate logit and their gradients);
 *                   dense FFN 6*I
 * Which of them each layer keeps (docs/memory.md):
 *   none       every layer its own residual, attention set, kernel outputs and FFN
 *   attention  every layer its own residual, kernel outputs and FFN; one attention set
 *   layer      every layer its own x[l] (plus x[L]); one h, attention set, kernel outputs,
 *              and one FFN set per kind (MoE, dense)
 *   forward-only (sluice eval and generate) two x buffers that alternate and one h; one
 *              attention set, kernel outputs and FFN set per kind without the backward's
 *              tensors (the router's dlogits, dtopk_w and fp32 input gradient, dxs, dys,
 *              the MLPs' dgu and dh, the shared expert's gradients); no workspace but the
 *              final norm's xf and rstd, ids, targets, positions, losses and a logits chunk
 * The workspace (every mode that trains): the attention gradients (dy, dq H*D each,
 * dk, dk_pre, dv KV*D each, dg Wq - H*D, dqall Wq, dxn h), the FFN's dxn h, the residual gradients
 * dx and dh, the final norm's xf, dxf (h each) and fp32 rstd, int32 ids, targets, positions, fp32
 * losses, and one logits chunk of sl_logits_chunk_rows(tokens, V, device) rows of V.
 * tests/test_memory_counts.c checks these against the bytes the tensors hold, on the CPU.
 * Not counted: the tensors without a token dimension (router statistics, selection biases,
 * per-expert counts, the step statistics, the RoPE table), with capacity drops two int32 per
 * routed row (the dispatcher's gather and combine positions), and with document masks the
 * segment ids (an int32 per token on the backend and on the host).
 */
/* The LM head's logits chunk (model/model.c): at most this many bytes. Every chunk re-reads
 * the head weight and re-reads and re-writes its fp32 gradient (8 V h bytes: 2.5 GB at 15A2B),
 * so fewer chunks save that traffic where memory allows: 2 GiB on a device (2^30 logits in
 * bf16: a micro-batch of 4,096 tokens at vocabulary 151,936 is one chunk), 64 MiB on the CPU
 * (2^24 in fp32). Either way a chunk has fewer than 2^31 elements (the kernels' int indices). */
#define SL_LOGITS_CHUNK_BYTES_DEVICE ((int64_t)1 << 31)
#define SL_LOGITS_CHUNK_BYTES_HOST   ((int64_t)1 << 26)

/* Rows per logits chunk for `tokens` rows of vocabulary `vocab` in elements of `elem_bytes`:
 * the fewest chunks that keep each within the bound above (device or host), of equal rows (the
 * last one up to chunks - 1 fewer), so no chunk is a sliver and the buffer holds no rows it
 * never uses: one chunk of 4,096 rows at 4,096 tokens and vocabulary 151,936 in bf16 on a
 * device, 5 of 6,554 at 32,768. */
int64_t sl_logits_chunk_rows(int64_t tokens, int64_t vocab, int elem_bytes, bool device);
typedef struct {
    double per_layer_max; /* the most any one layer keeps for itself (residual included) */
    double layers;        /* what all layers keep for themselves */
    double shared;        /* the sets the layers share in this mode */
    double workspace;     /* backward workspaces, final norm, ids, one logits chunk */
    double total;         /* layers + shared + workspace */
} sl_activation_bytes;
/* The activation memory of one micro-batch of `tokens` tokens per rank in memory mode `mode`,
 * activations of act_bytes bytes, expert parallelism ep (the routed rows a rank holds), on a
 * device or (device false) on the CPU backend, whose logits chunk is smaller. */
void sl_model_activation_bytes(const sl_model_config *m, sl_memory_mode mode, int64_t tokens,
                               int act_bytes, int ep, bool device, sl_activation_bytes *out);
/* What training.defer_expert_wgrad keeps on top for each parked micro-batch (moe/experts.h,
 * sl_experts_parked): in each MoE layer its routed rows and their output gradients (h each),
 * the SwiGLU output (Im) and gate_up's gradient (2 Im): k (2 h + 3 Im) act_bytes per token
 * (with expert parallelism the received rows, k per token under balanced routing). by_tokens
 * (training.park_expert_rows "tokens", moe/parked_tokens.h): instead of the rows, the layer's
 * input and output gradient (2 h act_bytes per token) and the routing (12 bytes per slot),
 * plus the buffers the rows are regathered into, which the layers share: 2 k h act_bytes per
 * token once. */
double sl_model_deferred_wgrad_bytes(const sl_model_config *m, int64_t tokens, int act_bytes,
                                     bool by_tokens);

#endif
