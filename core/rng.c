/* core/rng.c - splitmix64 streams (see rng.h). */
#include "core/rng.h"

#include <math.h>

uint64_t sl_hash_str(const char *s) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ULL;
    }
    return h;
}

static uint64_t fmix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t sl_mix64(uint64_t z) {
    return fmix(z + 0x9e3779b97f4a7c15ULL);
}

uint64_t sl_hash_mix(uint64_t a, uint64_t b) {
    return fmix(a ^ fmix(b + 0x9e3779b97f4a7c15ULL));
}

void sl_rng_init(sl_rng *r, uint64_t seed, uint64_t stream) {
    r->state = sl_hash_mix(seed, stream);
    r->has_spare = 0;
    r->spare = 0.0;
}

uint64_t sl_rng_u64(sl_rng *r) {
    return fmix(r->state += 0x9e3779b97f4a7c15ULL);
}

double sl_rng_uniform(sl_rng *r) {
    return (double)(sl_rng_u64(r) >> 11) * 0x1.0p-53;
}

double sl_rng_normal(sl_rng *r) {
    if (r->has_spare) {
        r->has_spare = 0;
        return r->spare;
    }
    double u1, u2;
    do u1 = sl_rng_uniform(r);
    while (u1 <= 0.0);
    u2 = sl_rng_uniform(r);
    double rad = sqrt(-2.0 * log(u1));
    r->spare = rad * sin(2.0 * M_PI * u2);
    r->has_spare = 1;
    return rad * cos(2.0 * M_PI * u2);
}

uint64_t sl_rng_below(sl_rng *r, uint64_t n) {
    /* Rejection sampling removes the modulo bias. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = sl_rng_u64(r);
    while (x >= limit);
    return x % n;
}
