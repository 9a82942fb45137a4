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

#include "model/model.h"

typedef struct {
    char name[160];
    sl_param *param;
    int64_t offset; /* element offset inside the parameter */
    int ndim;
    int64_t shape[2];
} sl_hf_entry;

/* The Hugging Face tensors cut from one sluice tensor `name` of shape[0..ndim) (the mapping
 * above, by name and shape, so that it also serves a checkpoint's global tensors): calls
 * emit(user, hf_name, element offset, ndim, d0, d1) for each, in order. In an expert stack
 * (ndim 3, ".mlp.experts." in the name) shape[0] counts experts and first_expert is the global
 * index of its first one. Returns how many tensors were emitted. */
typedef void (*sl_hf_emit_fn)(void *user, const char *hf_name, int64_t offset, int ndim, int64_t d0,
                              int64_t d1);
int sl_hf_split(const char *name, int ndim, const int64_t *shape, int64_t first_expert,
                sl_hf_emit_fn emit, void *user);

/* The Hugging Face tensors of the parameters this rank holds (malloc'ed array). */
int sl_hf_entries(const sl_model *m, sl_hf_entry **out);

/* The config.json text sl_hf_save writes for model config m (malloc'ed): with YaRN,
 * max_position_embeddings states the extended context factor x original, which is what
 * Hugging Face transformers derives the factor from. */
char *sl_hf_config_json(const sl_model_config *m);
/* Writes the weights to dir (created) with atomic file writes: <dir>/model.safetensors and
 * <dir>/config.json. With expert parallelism (`ep` of size P > 1; every rank of the group
 * calls this) each EP rank writes its own shard model-0000{r+1}-of-0000P.safetensors (rank
 * 0's also holds the dense parameters) and rank 0 writes model.safetensors.index.json (the
 * Hugging Face sharded layout) and config.json: no rank ever holds all experts. */
int sl_hf_save(const sl_model *m, const char *dir, sl_comm *ep, char *err, size_t errlen);
/* Writes the accumulated gradients under the same names to one safetensors file (for
 * cross-checks against other implementations). */
int sl_hf_save_grads(const sl_model *m, const char *path, char *err, size_t errlen);
/* Loads every parameter this rank holds from a weights directory (model.safetensors, or the
 * shards listed by model.safetensors.index.json) or a .safetensors path; shapes must
 * match. */
int sl_hf_load(sl_model *m, const char *path, char *err, size_t errlen);

#endif
