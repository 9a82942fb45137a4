/* model/counts.c - parameter and FLOP counts (formulas in model/counts.h). */
#include "model/counts.h"

#include <stdbool.h>

#include "core/ops.h" /* sl_qgate_width */

/* Per-model pieces shared by the parameter and FLOP counts. */
typedef struct {
    int64_t embed;      /* V*h */
    int64_t lm_head;    /* V*h: the output matmul, whether or not tied */
    int64_t norms;      /* every norm weight */
    int64_t attn_mm;    /* q/k/v/o per layer, summed over layers */
    int64_t ffn_mm_all; /* router + all experts + shared expert + dense FFNs */
    int64_t ffn_mm_act; /* the same with k experts per MoE layer */
} counts;

static int64_t q_width(const sl_model_config *m) {
    return sl_qgate_width(m->attn_output_gate, m->num_attention_heads, m->head_dim);
}

static counts count(const sl_model_config *m) {
    counts c = {0, 0, 0, 0, 0, 0};
    const int64_t h = m->hidden_size, D = m->head_dim;
    const int64_t H = m->num_attention_heads, KV = m->num_key_value_heads;
    c.embed = (int64_t)m->vocab_size * h;
    c.lm_head = (int64_t)m->vocab_size * h;
    c.norms = h; /* final norm */
    for (int l = 0; l < m->num_hidden_layers && l < SL_MAX_LAYERS; l++) {
        c.norms += 2 * h + 2 * D;
        c.attn_mm += h * q_width(m) + 2 * h * KV * D + H * D * h;
        if (sl_layer_is_moe(m, l)) {
            const int64_t expert = 3 * h * m->moe_intermediate_size;
            int64_t shared = 0;
            if (m->shared_expert_intermediate_size > 0)
                shared = 3 * h * m->shared_expert_intermediate_size + h;
            const int64_t router = h * m->num_experts;
            c.ffn_mm_all += router + m->num_experts * expert + shared;
            c.ffn_mm_act += router + m->num_experts_per_tok * expert + shared;
        } else {
            const int64_t dense = 3 * h * m->intermediate_size;
            c.ffn_mm_all += dense;
            c.ffn_mm_act += dense;
        }
    }
    return c;
}

void sl_model_param_count(const sl_model_config *m, int64_t *total, int64_t *active_per_token) {
    counts c = count(m);
    int64_t head = m->tie_word_embeddings ? 0 : c.lm_head;
    if (total) *total = c.embed + head + c.norms + c.attn_mm + c.ffn_mm_all;
    if (active_per_token) *active_per_token = c.embed + head + c.norms + c.attn_mm + c.ffn_mm_act;
}

double sl_model_flops_per_token(const sl_model_config *m, int seq_len) {
    counts c = count(m);
    double mm = (double)(c.attn_mm + c.ffn_mm_act + c.lm_head);
    double attn =
        6.0 * m->num_hidden_layers * (double)m->num_attention_heads * m->head_dim * (double)seq_len;
    return 6.0 * mm + attn;
}
