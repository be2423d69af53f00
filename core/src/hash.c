#include "luminamoon/hash.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

uint64_t lm_hash64(const void *data, size_t len, uint64_t seed) {
  static const uint8_t empty = 0;
  return (uint64_t)XXH3_64bits_withSeed(len ? data : &empty, len, (XXH64_hash_t)seed);
}

lm_hash128_t lm_hash128(const void *data, size_t len, uint64_t seed) {
  static const uint8_t empty = 0;
  XXH128_hash_t h = XXH3_128bits_withSeed(len ? data : &empty, len, (XXH64_hash_t)seed);
  lm_hash128_t r = {h.low64, h.high64};
  return r;
}

#include <stdlib.h>

#include "hash_internal.h"

/* Block size of lm_hash64_many: the class lists of one block stay in L1. */
#define LM_HASH_BLOCK 256

/* One pass over a block: a string of over 16 bytes is hashed at once, in order (the
 * payload streams in: lines, documents), a shorter one is listed by XXH3's length class
 * and the lists are hashed after the pass (words: no mispredicted branch per string).
 * Hashing the short lists first instead (all classes sorted, the long list last) read
 * each short string's bytes as a cache miss before the stream reached them: 13-14 ns a
 * line against 7.6-8.3 ns this way (/tmp/s26 lines, 500k, 17% of them <= 16 bytes). */
static inline void lm_hash64_many_impl(const uint8_t *const *ptrs, const size_t *lens, size_t n, uint64_t seed,
                                       uint64_t *out, int level) {
  static const uint8_t empty = 0;
  const xxh_u8 *secret = XXH3_kSecret;
  /* the hash of "" depends on the seed only */
  const uint64_t h0 = XXH3_len_0to16_64b(&empty, 0, secret, seed);
  uint16_t idx[4][LM_HASH_BLOCK];
  for (size_t b0 = 0; b0 < n; b0 += LM_HASH_BLOCK) {
    const size_t m = n - b0 < LM_HASH_BLOCK ? n - b0 : LM_HASH_BLOCK;
    const size_t *L = lens + b0;
    const uint8_t *const *P = ptrs + b0;
    uint64_t *O = out + b0;
    /* branch-free for the short ones: every list gets i and the counter of its class
     * moves on; the counters live in registers (an array of counters chains each step
     * to the last one's store) */
    size_t c0 = 0, c1 = 0, c2 = 0, c3 = 0;
    for (size_t i = 0; i < m; i++) {
      const size_t len = L[i];
      if (len > 16) {
        O[i] = lm_hash64_inline(P[i], len, seed, level);
        continue;
      }
      const uint16_t k = (uint16_t)i;
      idx[0][c0] = k;
      idx[1][c1] = k;
      idx[2][c2] = k;
      idx[3][c3] = k;
      c0 += len == 0;
      c1 += (len - 1) < 3;
      c2 += (len - 4) < 5;
      c3 += (len - 9) < 8;
    }
    for (size_t k = 0; k < c0; k++) O[idx[0][k]] = h0;
    for (size_t k = 0; k < c1; k++) {
      const size_t i = idx[1][k];
      O[i] = XXH3_len_1to3_64b(P[i], L[i], secret, seed);
    }
    for (size_t k = 0; k < c2; k++) {
      const size_t i = idx[2][k];
      O[i] = XXH3_len_4to8_64b(P[i], L[i], secret, seed);
    }
    for (size_t k = 0; k < c3; k++) {
      const size_t i = idx[3][k];
      O[i] = XXH3_len_9to16_64b(P[i], L[i], secret, seed);
    }
  }
}

uint64_t lm_hash64_any(const uint8_t *p, size_t len, uint64_t seed, int level) {
  return lm_hash64_inline(p, len, seed, level);
}

void lm_hash64_listed(const uint8_t *const *ptrs, const size_t *lens, const uint16_t (*idx)[LM_HASH_LIST_MAX],
                      const size_t cnt[4], uint64_t seed, uint64_t *out) {
  const xxh_u8 *secret = XXH3_kSecret;
  for (size_t k = 0; k < cnt[0]; k++) {
    const size_t i = idx[0][k];
    out[i] = XXH3_len_1to3_64b(ptrs[i], lens[i], secret, seed);
  }
  for (size_t k = 0; k < cnt[1]; k++) {
    const size_t i = idx[1][k];
    out[i] = XXH3_len_4to8_64b(ptrs[i], lens[i], secret, seed);
  }
  for (size_t k = 0; k < cnt[2]; k++) {
    const size_t i = idx[2][k];
    out[i] = XXH3_len_9to16_64b(ptrs[i], lens[i], secret, seed);
  }
  if (!cnt[3]) return;
  const int level = lm_hash_long_level();
  for (size_t k = 0; k < cnt[3]; k++) {
    const size_t i = idx[3][k];
    out[i] = lm_hash64_inline(ptrs[i], lens[i], seed, level);
  }
}

void lm_hash64_many_generic(const uint8_t *const *ptrs, const size_t *lens, size_t n, uint64_t seed,
                            uint64_t *out) {
  lm_hash64_many_impl(ptrs, lens, n, seed, out, 0);
}

int lm_env_switch_on(const char *name) {
  const char *v = getenv(name);
  return v && *v && *v != '0';
}

/* 1 when the CPU has AVX2 and LM_NO_AVX2 is not set in the environment; read once (a
 * benign race: every thread computes the same value).  0 off x86 / GNU C. */
int lm_cpu_avx2_on(void) {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
  static int cached = -1;
  int c = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (c < 0) {
    __builtin_cpu_init();
    c = __builtin_cpu_supports("avx2") && !lm_env_switch_on("LM_NO_AVX2");
    __atomic_store_n(&cached, c, __ATOMIC_RELAXED);
  }
  return c;
#else
  return 0;
#endif
}

/* 1 when the AVX2 copy runs (lm_cpu_avx2_on where the copy is built; the tests call both
 * copies directly). */
int lm_hash_uses_avx2(void) {
#if LM_HASH_HAVE_AVX2
  return lm_cpu_avx2_on();
#else
  return 0;
#endif
}

/* 1 when lm_hash64_views_avx512 may run: the CPU has AVX-512 F/DQ/BW/VL + VBMI + VBMI2 and
 * neither LM_NO_AVX512 nor LM_NO_AVX2 is set in the environment; read once. */
int lm_hash_uses_avx512(void) {
#if LM_HASH_HAVE_AVX512
  static int cached = -1; /* a benign race: every thread computes the same value */
  int c = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (c < 0) {
    __builtin_cpu_init();
    c = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512vbmi2") &&
        !lm_env_switch_on("LM_NO_AVX512") && !lm_env_switch_on("LM_NO_AVX2");
    __atomic_store_n(&cached, c, __ATOMIC_RELAXED);
  }
  return c;
#else
  return 0;
#endif
}

int lm_hash_long_level(void) {
#if LM_HASH_HAVE_AVX2
  static int cached = -1; /* a benign race: every thread computes the same value */
  int c = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (c < 0) {
    c = lm_hash_uses_avx2();
    if (c) {
      __builtin_cpu_init();
      if (__builtin_cpu_supports("avx512f") && !lm_env_switch_on("LM_NO_AVX512")) c = 2;
    }
    __atomic_store_n(&cached, c, __ATOMIC_RELAXED);
  }
  return c;
#else
  return 0;
#endif
}

void lm_hash64_many(const uint8_t *const *ptrs, const size_t *lens, size_t n, uint64_t seed, uint64_t *out) {
  lm_hash64_many_impl(ptrs, lens, n, seed, out, lm_hash_long_level());
}
