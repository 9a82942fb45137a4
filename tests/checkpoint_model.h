/*
 * tests/checkpoint_model.h - a made-up model layout for the checkpoint tests: which tensors a
 * trainer would save, which piece each rank of a world owns (a replicated tensor whole on one
 * rank, expert stacks split by experts, flat optimizer groups split ZeRO-1 style into uneven
 * ranges), and a deterministic content per (tensor, element, step), so that any reader can
 * check the bytes it gets without a copy of the whole model.
 */
#ifndef SL_TESTS_CHECKPOINT_MODEL_H
#define SL_TESTS_CHECKPOINT_MODEL_H

#include <stdint.h>

#include "io/checkpoint.h"

enum { CKM_REPLICATED, CKM_EXPERT, CKM_ZERO };

typedef struct {
    char name[96];
    const char *dtype;
    int ndim;
    int64_t shape[3];
    int kind;
    int owner; /* CKM_REPLICATED: the rank that writes it is owner % world */
} ckm_tensor;

typedef struct {
    ckm_tensor t[12];
    int n;
} ckm_model;

/* A model whose tensors scale with `hidden` (about 4 * 260 * hidden bytes). */
void ckm_model_init(ckm_model *m, int hidden);
int64_t ckm_numel(const ckm_tensor *t);
size_t ckm_esize(const ckm_tensor *t);
/* The element range rank r of `world` owns ([b, b) when none). */
void ckm_range(const ckm_tensor *t, int r, int world, int64_t *b, int64_t *e);
/* Elements [b, b + n) of tensor t at `step` into dst (the tensor's dtype). */
void ckm_fill(const ckm_tensor *t, int64_t step, int64_t b, int64_t n, void *dst);

/* A fault injected into a save: rank `rank` drops or duplicates (also writes the next rank's
 * range) its piece of tensor `tensor`. */
typedef struct {
    int rank;
    const char *tensor;
    int duplicate; /* 0: drop the piece, 1: also write the next rank's range */
} ckm_fault;

/* Declares the pieces rank r owns on w; the buffers go to *bufs (free with ckm_free_bufs). */
int ckm_add_pieces(sl_ckpt_writer *w, const ckm_model *m, int r, int world, int64_t step,
                   const ckm_fault *fault, void ***bufs, int *nbufs);
void ckm_free_bufs(void **bufs, int n);

/* Members added to the train state of ckm_save_sequential (NULL: none). */
extern const cJSON *ckm_extra_state;

/* One process saving as `world` ranks in turn (agree: local): begin rank 0 first, write every
 * rank, commit rank 0 last. Returns rank 0's commit status; err gets the first error. The train
 * state holds {"tokens": step * 1000, "layout": {"world": world}}. */
int ckm_save_sequential(const char *root, const ckm_model *m, int64_t step, int world,
                        int keep_last, int64_t keep_every, const ckm_fault *fault, char *err,
                        size_t errlen);

/* Reads, for every rank r of a world of `world` ranks, the range r owns of every tensor and
 * compares it with the content of `step`. Returns the number of mismatches (printed). */
int ckm_check_world(sl_ckpt *c, const ckm_model *m, int64_t step, int world);
/* The same for rank r of `world` alone: what that rank reads after a resume at that size. */
int ckm_check_rank(sl_ckpt *c, const ckm_model *m, int64_t step, int r, int world);
/* Reads n_random random ranges of every tensor and compares them. */
int ckm_check_random(sl_ckpt *c, const ckm_model *m, int64_t step, int n_random, uint64_t seed);

#endif
