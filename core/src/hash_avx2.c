/* XXH3-64 compiled for AVX2: its loop over inputs of more than 240 bytes then
 * runs on 256-bit vectors (documents hash about 1.6x faster); the values are the
 * same bits (XXH3 is defined on scalars, its vector forms are exact).
 * lm_hash64_many calls it only when the CPU reports AVX2 (hash.c).  GCC on
 * x86-64 only: elsewhere this file is empty and hash.c uses its generic code. */
#include "hash_internal.h"

#if LM_HASH_HAVE_AVX2
#pragma GCC target("avx2")
#define XXH_INLINE_ALL
#include <xxhash.h>
#if XXH_VECTOR != XXH_AVX2
#error "hash_avx2.c: xxhash.h did not select its AVX2 code under #pragma GCC target(\"avx2\")"
#endif

uint64_t lm_hash64_avx2(const void *data, size_t len, uint64_t seed) {
  static const uint8_t empty = 0;
  return (uint64_t)XXH3_64bits_withSeed(len ? data : &empty, len, (XXH64_hash_t)seed);
}
#else
typedef int lm_hash_avx2_unused; /* ISO C forbids an empty translation unit */
#endif
