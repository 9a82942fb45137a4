/*
 * model/hf_export.h - model weights in Hugging Face layout (safetensors + config.json).
 *
 * sluice stores some tensors fused for speed (gate and up projections stacked; experts
 * stacked per layer). The mapping below splits them into the Hugging Face Qwen3-MoE names
 * (docs/safetensors.md), so that other tools load the files, and joins them on import:
 *   <p>.gate_up_proj.weight [2F, C]  ->  <p>.gate_proj.weight [F, C], <p>.up_proj.weight [F, C]
 *   layers.L.mlp.experts.gate_up_proj [E, 2I, C] -> layers.L.mlp.experts.{e}.{gate,up}_proj.weight
 *   layers.L.mlp.experts.down_proj [E, C, I]     -> layers.L.mlp.experts.{e}.down_proj.weight
 * lm_head.weight is omitted when the embeddings are tied.
 */
#ifndef SL_HF_EXPORT_H
#define SL_HF_EXPORT_H

#include <stddef.h>

#include "io/checkpoint.h" /* sl_ckpt_export_entry */
#include "model/model.h"

/* The Hugging Face layouts sluice writes (docs/safetensors.md):
 *   SL_HF_QWEN3_MOE   Qwen3-MoE tensor names and config.json (model_type "qwen3_moe") plus
 *                     attn_output_gate; what sluice itself reads back (sl_hf_load, eval, generate).
 *   SL_HF_QWEN3_NEXT  Qwen3-Next (model_type "qwen3_next", every layer "full_attention"), whose
 *                     attention has sluice's elementwise gate, so transformers'
 * Qwen3NextForCausalLM runs the model: norms stored as weight - 1 (its RMSNorm multiplies by 1 +
 * weight), a headwise gate as D copies of each head's gate row, no gate as zero gate rows with
 * o_proj doubled (sigmoid(0) = 1/2, exactly undone), a missing shared expert as a width-1 one of
 * zeros (its MoE block always has one). For other tools; sluice does not read it back. */
typedef enum { SL_HF_QWEN3_MOE = 0, SL_HF_QWEN3_NEXT = 1 } sl_hf_format;

/* "qwen3_moe", "qwen3_next"; and back (0, or -1 for another name). */
const char *sl_hf_format_name(sl_hf_format f);
int sl_hf_format_parse(const char *name, sl_hf_format *f);

/* A layout: the format and the model it cuts (shapes, gate mode, shared expert). It owns the
 * piece arrays of the entries it hands out: free it after the export that used them. */
typedef struct {
    sl_hf_format format;
    sl_model_config cfg;
    void **blocks;
    int nblocks;
} sl_hf_layout;

/* The tensor layout of format f for model m (how sluice's tensors map to the format's names and
 * shapes); freed with sl_hf_layout_free. */
void sl_hf_layout_init(sl_hf_layout *l, sl_hf_format f, const sl_model_config *m);
void sl_hf_layout_free(sl_hf_layout *l);
/* The Hugging Face tensors cut from one sluice tensor `name` of shape[0..ndim) (by name and
 * shape, so that it also serves a checkpoint's global tensors): calls emit(user, entry) for each,
 * in order; an entry's offset, pieces and transform say which elements of the sluice tensor it
 * holds and how (io/checkpoint.h). In an expert stack (ndim 3, ".mlp.experts." in the name)
 * shape[0] counts experts and first_expert is the global index of its first one. Returns how many
 * entries were emitted. */
typedef void (*sl_hf_emit_fn)(void *user, const sl_ckpt_export_entry *e);
int sl_hf_layout_map(sl_hf_layout *l, const char *name, int ndim, const int64_t *shape,
                     int64_t first_expert, sl_hf_emit_fn emit, void *user);
/* The config.json text of the layout (malloc'ed). With YaRN, max_position_embeddings states the
 * extended context factor x original, which is what Hugging Face transformers derives the factor
 * from. */
char *sl_hf_layout_config_json(const sl_hf_layout *l);

/* One Hugging Face tensor of a live model's parameter. */
typedef struct {
    sl_ckpt_export_entry e;
    sl_param *param;
} sl_hf_entry;

/* The Hugging Face tensors of the parameters this rank holds in layout l (malloc'ed array). */
int sl_hf_entries(const sl_model *m, sl_hf_layout *l, sl_hf_entry **out);

/* The Qwen3-MoE config.json text sl_hf_save writes for model config m (malloc'ed). */
char *sl_hf_config_json(const sl_model_config *m);
/* Writes the weights to dir (created) with atomic file writes: <dir>/model.safetensors and
 * <dir>/config.json, in layout f. With expert parallelism (`ep` of size P > 1; every rank of the
 * group calls this) each EP rank writes its own shard model-0000{r+1}-of-0000P.safetensors (rank
 * 0's also holds the dense parameters) and rank 0 writes model.safetensors.index.json (the
 * Hugging Face sharded layout) and config.json: no rank ever holds all experts. */
int sl_hf_save_format(const sl_model *m, sl_hf_format f, const char *dir, sl_comm *ep, char *err,
                      size_t errlen);
/* sl_hf_save_format in the Qwen3-MoE layout. */
int sl_hf_save(const sl_model *m, const char *dir, sl_comm *ep, char *err, size_t errlen);
/* Writes the accumulated gradients under the Qwen3-MoE names to one safetensors file (for
 * cross-checks against other implementations). */
int sl_hf_save_grads(const sl_model *m, const char *path, char *err, size_t errlen);
/* Loads every parameter this rank holds from a Qwen3-MoE weights directory (model.safetensors,
 * or the shards listed by model.safetensors.index.json) or a .safetensors path; shapes must
 * match; F32 tensors, or BF16 ones widened exactly to f32 (sluice ckpt export --dtype bf16). */
int sl_hf_load(sl_model *m, const char *path, char *err, size_t errlen);

/* model/hf_qwen3_next.c: the Qwen3-Next cuts of one tensor (sl_hf_layout_map for that format)
 * and its config.json. */
int sl_qwen3_next_map(sl_hf_layout *l, const char *name, int ndim, const int64_t *shape,
                      int64_t first_expert, sl_hf_emit_fn emit, void *user);
char *sl_qwen3_next_config_json(const sl_model_config *m);
/* Pieces that live as long as the layout (for its entries). */
sl_ckpt_export_piece *sl_hf_layout_pieces(sl_hf_layout *l, int n);

#endif
