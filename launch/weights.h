/*
 * launch/weights.h - what the commands that run saved weights share (`sluice eval`,
 * `sluice generate`): opening --weights (a Hugging Face weights directory or a training
 * checkpoint) and the RoPE flags that change the model's RoPE at run time (docs/evaluation.md).
 */
#ifndef SL_LAUNCH_WEIGHTS_H
#define SL_LAUNCH_WEIGHTS_H

#include <stdbool.h>
#include <stdio.h>

#include "io/checkpoint.h"
#include "model/model.h"

/* ---- --weights ---- */

typedef struct {
    const char *path;    /* as given */
    sl_ckpt *ck;         /* a training checkpoint, or NULL: weights */
    char dir[4096];      /* the weights' directory (config.json, tokenizer.json): path, or the
                          * directory of a .safetensors file given as path */
    sl_model_config cfg; /* its model */
} sl_weights;

/* Whether path is a training checkpoint (docs/checkpoint-format.md): a step-N directory with its
 * COMMIT (or without it, uncommitted: it has train_state.json), or a run or checkpoints
 * directory whose newest checkpoint is meant. */
bool sl_weights_is_checkpoint(const char *path);
/* Opens path and reads the model's configuration: the checkpoint's train state "hf_config", or
 * <path>/config.json for a weights directory, or the config.json beside path when it is one
 * .safetensors file (or a model.safetensors.index.json: its directory). 0, or -1 with a message
 * naming the file. */
int sl_weights_open(sl_weights *w, const char *path, char *err, size_t errlen);
/* Loads the weights into m (created from w->cfg, possibly with changed RoPE settings). */
int sl_weights_load(const sl_weights *w, sl_model *m, char *err, size_t errlen);
void sl_weights_close(sl_weights *w);
/* The tokenizer that turns text into the model's tokens, in *out: `given` (--tokenizer) when
 * not NULL, else the tokenizer.json of a weights directory (beside config.json) when there is
 * one, else the tokenizer a checkpoint's run trained with (train_state.json "tokenizer", from
 * data.tokenizer), which must still have the SHA-256 recorded there; NULL: none (the byte-level
 * codec, io/text_codec.h). buf (n bytes) may hold the path. 0, or -1 with a message when the
 * recorded tokenizer cannot be read or has changed (it suggests --tokenizer). */
int sl_weights_tokenizer(const sl_weights *w, const char *given, const char **out, char *buf,
                         size_t n, char *err, size_t errlen);

/* ---- the RoPE flags ---- */

typedef struct {
    const char *scaling; /* NULL: not given (NaN / -1: the numbers not given) */
    double theta, factor, beta_fast, beta_slow, attention_factor;
    long long original;
} sl_rope_flags;

/* No RoPE flag given: the saved configuration's RoPE as it is. */
void sl_rope_flags_init(sl_rope_flags *f);
/* When argv[*i] is a RoPE flag, takes it and its value (advancing *i) and returns 1; 0 when it
 * is not one; 2 after printing "sluice <cmd>: error: ..." for a bad or missing value. */
int sl_rope_flags_parse(sl_rope_flags *f, const char *cmd, int argc, char **argv, int *i);
/* Applies the flags to the saved configuration c: 0, or 2 after printing an error naming the
 * flag. */
int sl_rope_flags_apply(const sl_rope_flags *f, const char *cmd, sl_model_config *c);
/* The flags' lines of a --help text. */
void sl_rope_flags_usage(FILE *f);

#endif
