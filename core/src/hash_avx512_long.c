/* XXH3-64 compiled for AVX-512 F: its loop over inputs of more than 240 bytes then runs on
 * 512-bit vectors, one 64-byte stripe an instruction (hash_avx2.c: two 256-bit halves).  The
 * values are the same bits (XXH3 is defined on scalars; its vector forms are exact).  Documents
 * (~690 bytes) hash 7-18% faster than with the AVX2 copy (issue 13: 31.7 against 38.6 ns a
 * string from L2, 79 against 86 from L3, one thread, xxhash.h 0.8.x on the Xeon VM).
 * lm_hash64_inline calls it for strings over 240 bytes when lm_hash_long_level() is 2 (hash.c:
 * the CPU reports AVX-512 F and neither LM_NO_AVX512 nor LM_NO_AVX2 is set).  GCC on x86-64
 * only: elsewhere this file is empty. */
#include "hash_internal.h"

#if LM_HASH_HAVE_AVX2
#pragma GCC target("avx2,avx512f")
#define XXH_INLINE_ALL
#include <xxhash.h>
#if XXH_VECTOR != XXH_AVX512
#error "hash_avx512_long.c: xxhash.h did not select its AVX-512 code under #pragma GCC target(\"avx512f\")"
#endif

uint64_t lm_hash64_avx512(const void *data, size_t len, uint64_t seed) {
  static const uint8_t empty = 0;
  return (uint64_t)XXH3_64bits_withSeed(len ? data : &empty, len, (XXH64_hash_t)seed);
}
#else
typedef int lm_hash_avx512_long_unused; /* ISO C forbids an empty translation unit */
#endif
