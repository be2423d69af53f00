/* Internal to hash.c / hash_avx2.c (and the tests).  lm_hash64_many hashes
 * strings of more than 240 bytes with lm_hash64_avx2 when the CPU has AVX2 (and
 * LM_NO_AVX2 was not set in the environment when first asked);
 * lm_hash64_many_generic never does.  All give XXH3-64 bit for bit.  Thread-safe
 * (pure). */
#ifndef LUMINAMOON_HASH_INTERNAL_H
#define LUMINAMOON_HASH_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* GCC on x86-64 builds an AVX2 copy of XXH3-64 (selected at run time); other
 * compilers and targets use the generic code only.  A build with -mavx2 already
 * (__AVX2__) needs no second copy. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__AVX2__)
#define LM_HASH_HAVE_AVX2 1
uint64_t lm_hash64_avx2(const void *data, size_t len, uint64_t seed); /* data may be NULL when len == 0 */
#else
#define LM_HASH_HAVE_AVX2 0
#endif
void lm_hash64_many_generic(const uint8_t *const *ptrs, const size_t *lens, size_t n, uint64_t seed,
                            uint64_t *out);
/* out[i] = lm_hash64(ptrs[i], lens[i], seed) for the i listed in idx[c][0..cnt[c]), where the
 * caller put in list c only strings of XXH3's length class c: 0 = 1..3 bytes, 1 = 4..8,
 * 2 = 9..16, 3 = empty or over 16 (any length).  For a caller that reads each length once
 * and sorts by class in the same pass (ops_offsets_impl.h's hash64). */
#define LM_HASH_LIST_MAX 256
void lm_hash64_listed(const uint8_t *const *ptrs, const size_t *lens, const uint16_t (*idx)[LM_HASH_LIST_MAX],
                      const size_t cnt[4], uint64_t seed, uint64_t *out);
/* 1 when lm_hash64_many uses the AVX2 copy (the CPU has AVX2 and LM_NO_AVX2 was not set). */
int lm_hash_uses_avx2(void);

#ifdef __cplusplus
}
#endif
#endif
