/*
 * core/rng.h - deterministic random numbers for initialization and data order.
 *
 * Streams are keyed by (seed, stream id): a parameter's initial values depend only on the
 * run seed, its name and (for experts) the global expert index, never on how many ranks
 * hold it. That is what makes a run with 4 expert-parallel ranks start from exactly the
 * weights of a single-process run.
 */
#ifndef SL_RNG_H
#define SL_RNG_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    uint64_t state;
    int has_spare;
    double spare;
} sl_rng;

/* 64-bit FNV-1a of a string, for deriving stream ids from names. */
uint64_t sl_hash_str(const char *s);
/* splitmix64's output for state z (z plus the golden-ratio increment, then the finalizer):
 * a stateless 64-bit mixer for keyed permutations (io/reader.c's shuffles). */
uint64_t sl_mix64(uint64_t z);
/* Mixes two 64-bit values into one (for (seed, stream) and sub-streams). */
uint64_t sl_hash_mix(uint64_t a, uint64_t b);

/* A generator for (seed, stream): independent streams of one seed; the next 64 random bits. */
void sl_rng_init(sl_rng *r, uint64_t seed, uint64_t stream);
uint64_t sl_rng_u64(sl_rng *r);
/* Uniform in [0, 1) with 53 random bits. */
double sl_rng_uniform(sl_rng *r);
/* Standard normal (Box-Muller, both values used). */
double sl_rng_normal(sl_rng *r);
/* Uniform integer in [0, n). */
uint64_t sl_rng_below(sl_rng *r, uint64_t n);

/* Advances r past `draws` 64-bit draws (those sl_rng_u64 would return), in O(1): splitmix64's
 * state moves by one constant per draw. A spare normal r holds is dropped. */
void sl_rng_skip(sl_rng *r, uint64_t draws);
/* dst[i] = std * the i-th sl_rng_normal of a fresh (seed, stream) generator, for i < n: the
 * same bits as that loop, filled on OpenMP threads for large n. Chunks of whole pairs start
 * where the loop would be had it drawn two values per pair; a pair whose first uniform was 0
 * (redrawn, probability 2^-53) shifts every later draw, so each chunk checks that it ended
 * where the next began, and any mismatch refills dst in one sequence. Returns true where the
 * chunks' values were kept, false where dst was filled in one sequence (n under 2^20, one
 * thread, or that redraw). */
bool sl_rng_fill_normal(float *dst, int64_t n, uint64_t seed, uint64_t stream, float std);

#endif
