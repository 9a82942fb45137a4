/* io/batch_hash.c - sl_sequence_hash (reader.h): the hash of one global sequence, whose sums
 * over a batch prove that runs at different world sizes read the same batches. */
#include <stddef.h>
#include <stdint.h>

#include "core/rng.h"
#include "io/reader.h"

static inline uint64_t rotl64(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

/* Four independent multiply-rotate lanes (xxHash64's round on 32-bit token values) so that
 * hashing keeps up with copying, then splitmix64's finalizer over the lanes, the length and
 * the index. */
uint64_t sl_sequence_hash(uint64_t index, const int32_t *t, size_t n) {
    const uint64_t P1 = 0x9E3779B185EBCA87ull, P2 = 0xC2B2AE3D27D4EB4Full;
    uint64_t a = P1 + P2, b = P2, c = 0, d = 0 - P1;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        a = rotl64(a + (uint64_t)(uint32_t)t[i] * P2, 31) * P1;
        b = rotl64(b + (uint64_t)(uint32_t)t[i + 1] * P2, 31) * P1;
        c = rotl64(c + (uint64_t)(uint32_t)t[i + 2] * P2, 31) * P1;
        d = rotl64(d + (uint64_t)(uint32_t)t[i + 3] * P2, 31) * P1;
    }
    for (; i < n; i++) a = rotl64(a + (uint64_t)(uint32_t)t[i] * P2, 31) * P1;
    uint64_t h = rotl64(a, 1) + rotl64(b, 7) + rotl64(c, 12) + rotl64(d, 18);
    return sl_mix64(h ^ sl_mix64((uint64_t)n ^ sl_mix64(index)));
}
