/* luminamoon/hash.h — XXH3 hashing of strings (through libxxhash).
 *
 * lm_hash64 is XXH3_64bits_withSeed and lm_hash128 is XXH3_128bits_withSeed,
 * bit for bit; the CUDA kernels reproduce the same values.
 * Thread-safety: all functions are pure and thread-safe.
 */
#ifndef LUMINAMOON_HASH_H
#define LUMINAMOON_HASH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lm_hash128_t {
  uint64_t lo;
  uint64_t hi;
} lm_hash128_t;

/* XXH3-64 of len bytes at data (data may be NULL when len == 0).  Cannot fail. */
uint64_t lm_hash64(const void *data, size_t len, uint64_t seed);

/* out[i] = lm_hash64(ptrs[i], lens[i], seed) for i < n, bit for bit.  Strings of at most 16
 * bytes are grouped by XXH3's length class (0, 1-3, 4-8, 9-16) in blocks and each group is
 * hashed by straight-line code: a per-string branch on the length, mispredicted about every
 * other time on real words, cost more than the hash itself.  ptrs[i] may be NULL when
 * lens[i] == 0.  Cannot fail; thread-safe (pure). */
void lm_hash64_many(const uint8_t *const *ptrs, const size_t *lens, size_t n, uint64_t seed, uint64_t *out);

/* XXH3-128 of len bytes at data (data may be NULL when len == 0).  Cannot fail. */
lm_hash128_t lm_hash128(const void *data, size_t len, uint64_t seed);

#ifdef __cplusplus
}
#endif
#endif
