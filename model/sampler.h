/*
 * model/sampler.h - the next token from a row of logits: greedy, or drawn with temperature,
 * top-k and top-p (nucleus), from a seeded random stream (docs/generate.md).
 *
 * With temperature T > 0 the candidates are the tokens of p = softmax(logits / T) (in double),
 * restricted to
 *   top-k:  the k most probable (ties broken towards the lower id), when k > 0;
 *   top-p:  then the smallest set of the most probable whose probability adds up to at least p
 *           (of what top-k left), when p < 1 (at least one token);
 * and one is drawn with probability proportional to p among them, from one uniform number of
 * the sampler's stream. T = 0 is greedy: the largest logit (the lowest id among equals), no
 * random number used. The same seed and stream give the same tokens for the same logits.
 */
#ifndef SL_SAMPLER_H
#define SL_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "core/rng.h"

typedef struct {
    double temperature; /* 0: greedy */
    int top_k;          /* 0: off */
    double top_p;       /* 1: off; in (0, 1] */
    uint64_t seed;
} sl_sampler_params;

typedef struct {
    sl_sampler_params p;
    sl_rng rng;
    int vocab;
    double *prob; /* [vocab] scratch */
    int32_t *idx; /* [vocab] scratch: candidate ids */
} sl_sampler;

/* Checks the parameters: 0, or -1 with a message naming the parameter (temperature >= 0 and
 * finite, top_k >= 0, 0 < top_p <= 1). */
int sl_sampler_check(const sl_sampler_params *p, char *err, size_t errlen);
/* A sampler over `vocab` tokens drawing from stream `stream` of p->seed (one stream per
 * sequence, so a sequence's tokens do not depend on the others of its batch). */
void sl_sampler_init(sl_sampler *s, const sl_sampler_params *p, int vocab, uint64_t stream);
/* The next token for logits [vocab]. */
int32_t sl_sampler_next(sl_sampler *s, const float *logits);
/* The candidates and their renormalized probabilities the next draw would choose from, for
 * tests and diagnostics: writes up to vocab ids and probabilities (most probable first) and
 * returns how many. Does not advance the stream. */
int sl_sampler_support(sl_sampler *s, const float *logits, int32_t *ids, double *probs);
void sl_sampler_free(sl_sampler *s);

#endif
