/* XXH3-64 of short strings, 8 at a time in AVX-512 lanes (selected at run time,
 * hash.c: lm_hash_uses_avx512).  Bit-identical to XXH3_64bits_withSeed: XXH3 is
 * defined on 64-bit scalars and every step below is the same integer operation
 * per lane (tested against libxxhash for every length, tests/core/test_hash_views.cpp).
 *
 * Views (lm_hash64_views_avx512): a string of at most 12 bytes sits inside its
 * 16-byte view (zero-padded), so it is hashed from the view alone: no payload read,
 * no (pointer, length) list, no branch per string.
 *   - 0..8 bytes, 8 views a step: one byte shuffle per lane, its control taken from a
 *     16-entry table by the length, gives XXH3_len_1to3's `combined` or XXH3_len_4to8's
 *     `input64`, one table of seed-dependent keys XORed in gives `keyed`, and one
 *     xorshift-multiply chain finishes both classes (XXH64_avalanche and rrmxmx have
 *     the same shape: each lane takes its class's shifts and multipliers);
 *   - 9..12 bytes (XXH3_len_9to16: a 64x64->128 multiply, four products in vector
 *     lanes) are listed and hashed after the vector loop in scalar code from the view's
 *     bytes (measured faster than in the lanes: ~15% of words);
 *   - longer views are listed for the caller, which checks their payload.
 * The padding of the inline views is checked in the same pass (masks by length).
 * GCC on x86-64 only (as hash_avx2.c): elsewhere this file is empty. */
#include "hash_internal.h"
#include "luminamoon/hash.h" /* lm_hash64_many */

#if LM_HASH_HAVE_AVX512
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,avx512vbmi2")
#include <immintrin.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

static uint64_t rd64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}
static uint32_t rd32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}

/* the seed-dependent tables: key[len] XORed into the shuffled bytes, ctrl[len] the shuffle */
typedef struct {
  __m512i key0, key1, ctl0, ctl1, h0;
} short_tables;

static void make_tables(uint64_t seed, short_tables *t) {
  const uint8_t *s = XXH3_kSecret;
  uint64_t key[16], ctl[16];
  const uint64_t bf13 = (uint64_t)(rd32(s) ^ rd32(s + 4)) + seed;
  const uint64_t seed48 = seed ^ ((uint64_t)XXH_swap32((uint32_t)seed) << 32);
  const uint64_t bf48 = (rd64(s + 8) ^ rd64(s + 16)) - seed48;
  const uint64_t bf1 = (rd64(s + 24) ^ rd64(s + 32)) + seed;
  for (unsigned len = 0; len < 16; len++) {
    uint8_t c[8];
    if (len == 0) {
      key[len] = 0;
      memset(c, 0x80, 8);
    } else if (len <= 3) { /* combined = c3 | len << 8 | c1 << 16 | c2 << 24 (len comes from the key) */
      key[len] = bf13 ^ ((uint64_t)len << 8);
      memset(c, 0x80, 8);
      c[0] = (uint8_t)(len - 1);
      c[2] = 0;
      c[3] = (uint8_t)(len >> 1);
    } else if (len <= 8) { /* input64 = readLE32(in + len - 4) | readLE32(in) << 32 */
      key[len] = bf48;
      for (unsigned j = 0; j < 4; j++) {
        c[j] = (uint8_t)(len - 4 + j);
        c[4 + j] = (uint8_t)j;
      }
    } else { /* 9..16: input_lo = readLE64(in) */
      key[len] = bf1;
      for (unsigned j = 0; j < 8; j++) c[j] = (uint8_t)j;
    }
    memcpy(&ctl[len], c, 8);
  }
  t->key0 = _mm512_loadu_si512(key);
  t->key1 = _mm512_loadu_si512(key + 8);
  /* a lane's bytes sit at 8 * (lane & 1) in its 128-bit block (vpshufb works per block):
   * the odd lanes' control is 8 higher (0x80 + 8 still has the zeroing bit) */
  t->ctl0 = _mm512_loadu_si512(ctl);
  t->ctl1 = _mm512_loadu_si512(ctl + 8);
  static const uint8_t empty = 0;
  t->h0 = _mm512_set1_epi64((long long)XXH3_len_0to16_64b(&empty, 0, s, seed));
}

/* the tables of the last seed this thread used (every block of a call has the same seed) */
static const short_tables *tables_for(uint64_t seed) {
  static __thread short_tables t;
  static __thread uint64_t t_seed;
  static __thread int t_ok;
  if (!t_ok || t_seed != seed) {
    make_tables(seed, &t);
    t_seed = seed;
    t_ok = 1;
  }
  return &t;
}

/* XXH3 of the lanes whose length is in 0..8, from len and the string's bytes 0..7 (w),
 * zero-padded; k13 = the lanes of 1..3 bytes.  1..3 bytes finish with XXH64_avalanche,
 * 4..8 with rrmxmx: both are xorshift, multiply, xorshift, multiply, xorshift, so one
 * chain runs both, each lane with its class's shifts and multipliers.  Lanes of other
 * lengths get a meaningless value. */
static inline __m512i hash_0to8(__m512i len, __m512i w, __mmask8 k13, const short_tables *t, __m512i odd) {
  const __m512i ctl = _mm512_add_epi8(_mm512_permutex2var_epi64(t->ctl0, len, t->ctl1), odd);
  __m512i h = _mm512_xor_si512(_mm512_shuffle_epi8(w, ctl), _mm512_permutex2var_epi64(t->key0, len, t->key1));
  /* 4..8: h ^= rotl(h, 49) ^ rotl(h, 24);  1..3: h ^= h >> 33 */
  const __m512i x = _mm512_ternarylogic_epi64(h, _mm512_rol_epi64(h, 49), _mm512_rol_epi64(h, 24), 0x96);
  h = _mm512_mask_xor_epi64(x, k13, h, _mm512_srli_epi64(h, 33));
  const __m512i mx = _mm512_set1_epi64((long long)0x9FB21C651E98DF25ull);
  h = _mm512_mullo_epi64(h, _mm512_mask_mov_epi64(mx, k13, _mm512_set1_epi64((long long)XXH_PRIME64_2)));
  /* 4..8: h ^= (h >> 35) + len;  1..3: h ^= h >> 29 */
  __m512i s = _mm512_srlv_epi64(h, _mm512_mask_mov_epi64(_mm512_set1_epi64(35), k13, _mm512_set1_epi64(29)));
  s = _mm512_mask_add_epi64(s, (__mmask8)~k13, s, len);
  h = _mm512_xor_si512(h, s);
  h = _mm512_mullo_epi64(h, _mm512_mask_mov_epi64(mx, k13, _mm512_set1_epi64((long long)XXH_PRIME64_3)));
  /* 4..8: h ^= h >> 28;  1..3: h ^= h >> 32 */
  h = _mm512_xor_si512(h, _mm512_srlv_epi64(h, _mm512_mask_mov_epi64(_mm512_set1_epi64(28), k13, _mm512_set1_epi64(32))));
  return h;
}

/* The listed view mid[done] of 9..12 bytes, hashed from the view's inline bytes (one
 * 64x64->128 multiply) with the length read by the vector pass (<= 12: the read stays
 * inside the 16-byte view). */
static inline void mid_step(uint64_t e, const uint8_t *base, uint64_t *out, uint64_t seed) {
  const uint32_t i = (uint32_t)e, len = (uint32_t)(e >> 32);
  out[i] = XXH3_len_9to16_64b(base + 16 * (size_t)i + 4, len, XXH3_kSecret, seed);
}

size_t lm_hash64_views_avx512(const void *views, size_t n, uint64_t seed, uint64_t *out, uint32_t *rest,
                              uint64_t *pad) {
  const short_tables *tp = tables_for(seed), t = *tp;
  if (n > LM_HASH_VIEWS_BLOCK) return 0; /* (callers pass blocks) */
  const __m512i odd = _mm512_set_epi64(0x0808080808080808ll, 0, 0x0808080808080808ll, 0, 0x0808080808080808ll, 0,
                                       0x0808080808080808ll, 0);
  const __m512i ie = _mm512_set_epi64(14, 12, 10, 8, 6, 4, 2, 0), io = _mm512_set_epi64(15, 13, 11, 9, 7, 5, 3, 1);
  const __m512i m32 = _mm512_set1_epi64(0xffffffffll), one = _mm512_set1_epi64(1), two = _mm512_set1_epi64(2);
  const __m512i eight = _mm512_set1_epi64(8), twelve = _mm512_set1_epi64(12), step = _mm512_set1_epi64(8);
  /* the padding masks by length: bytes at or past len of bytes 0..7 (w) and 8..11 (w2) */
  uint64_t pm[32];
  for (unsigned len = 0; len < 16; len++) {
    pm[len] = len >= 8 ? 0 : ~0ull << (8 * len);
    pm[16 + len] = len >= 12 ? 0 : len <= 8 ? ~0ull : ~0ull << (8 * (len - 8));
  }
  const __m512i pl0 = _mm512_loadu_si512(pm), pl1 = _mm512_loadu_si512(pm + 8);
  const __m512i ph0 = _mm512_loadu_si512(pm + 16), ph1 = _mm512_loadu_si512(pm + 24);
  const uint8_t *base = (const uint8_t *)views;
  const uint64_t *q = (const uint64_t *)views;
  __m512i idx = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  unsigned padk = 0;
  /* 0..8 bytes hashed 8 at a time; 9..12 listed (index | len << 32) for mid_step, longer to rest */
  uint64_t mid[LM_HASH_VIEWS_BLOCK + 8];
  size_t nm = 0, nr = 0;
  for (size_t i = 0; i < n; i += 8) {
    const size_t m = n - i < 8 ? n - i : 8;
    const __mmask8 live = (__mmask8)((1u << m) - 1);
    __m512i v0, v1;
    if (m == 8) {
      v0 = _mm512_loadu_si512(q + 2 * i);
      v1 = _mm512_loadu_si512(q + 2 * i + 8);
    } else { /* the last views: masked loads read nothing past view n-1 */
      const unsigned qm = (1u << (2 * m)) - 1;
      v0 = _mm512_maskz_loadu_epi64((__mmask8)qm, q + 2 * i);
      v1 = _mm512_maskz_loadu_epi64((__mmask8)(qm >> 8), q + 2 * i + 8);
    }
    const __m512i q0 = _mm512_permutex2var_epi64(v0, ie, v1), q1 = _mm512_permutex2var_epi64(v0, io, v1);
    const __m512i len = _mm512_and_si512(q0, m32);
    const __m512i w = _mm512_shrdi_epi64(q0, q1, 32), w2 = _mm512_srli_epi64(q1, 32);
    const __mmask8 kin = _mm512_cmple_epu64_mask(len, twelve);
    /* padding: bytes at or past len of an inline view must be 0 */
    const __mmask8 kp = _mm512_test_epi64_mask(w, _mm512_permutex2var_epi64(pl0, len, pl1)) |
                        _mm512_test_epi64_mask(w2, _mm512_permutex2var_epi64(ph0, len, ph1));
    padk |= kp & kin;
    const __mmask8 k13 = _mm512_cmple_epu64_mask(_mm512_sub_epi64(len, one), two);
    const __mmask8 k0 = _mm512_cmpeq_epi64_mask(len, _mm512_setzero_si512());
    const __mmask8 k9 = _mm512_mask_cmpgt_epu64_mask(kin, len, eight), kl = live & (__mmask8)~kin;
    const __m512i h = _mm512_mask_mov_epi64(hash_0to8(len, w, k13, &t, odd), k0, t.h0);
    if (m == 8) _mm512_storeu_si512(out + i, h);
    else _mm512_mask_storeu_epi64(out + i, live, h);
    _mm512_storeu_si512(mid + nm, _mm512_maskz_compress_epi64(k9, _mm512_or_si512(idx, _mm512_slli_epi64(q0, 32))));
    nm += (size_t)__builtin_popcount(k9);
    _mm256_storeu_si256((__m256i *)(rest + nr), _mm256_maskz_compress_epi32(kl, _mm512_cvtepi64_epi32(idx)));
    nr += (size_t)__builtin_popcount(kl);
    idx = _mm512_add_epi64(idx, step);
  }
  *pad |= padk;
  /* then the listed views of 9..12 bytes (interleaving them with the vector loop
   * measured slower: their list entries are read right after the vector stores) */
  for (size_t k = 0; k < nm; k++) mid_step(mid[k], base, out, seed);
  return nr;
}
void lm_hash64_ptrs_avx512(const uint8_t *const *ptrs, const size_t *lens, const uint64_t *heads, size_t n,
                           const uint8_t *end, uint64_t seed, uint64_t *out) {
  const short_tables *tp = tables_for(seed), t = *tp;
  if (n > LM_HASH_VIEWS_BLOCK) return; /* (callers pass blocks) */
  const __m512i odd = _mm512_set_epi64(0x0808080808080808ll, 0, 0x0808080808080808ll, 0, 0x0808080808080808ll, 0,
                                       0x0808080808080808ll, 0);
  /* the bytes of a string of len 0..8 within the 8 read at its start */
  uint64_t km[16];
  for (unsigned len = 0; len < 16; len++) km[len] = len >= 8 ? ~0ull : (1ull << (8 * len)) - 1;
  const __m512i km0 = _mm512_loadu_si512(km), km1 = _mm512_loadu_si512(km + 8);
  const __m512i one = _mm512_set1_epi64(1), two = _mm512_set1_epi64(2), seven = _mm512_set1_epi64(7);
  const __m512i nine = _mm512_set1_epi64(9), step = _mm512_set1_epi64(8);
  /* a string is read 8 bytes at a time only when those 8 bytes end at or before `end` */
  const uintptr_t e = (uintptr_t)end;
  const __m512i last8 = _mm512_set1_epi64((long long)(e >= 8 ? e - 8 : 0));
  __m512i idx = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  uint32_t mid[LM_HASH_VIEWS_BLOCK + 8], oth[LM_HASH_VIEWS_BLOCK + 8];
  size_t nm = 0, no = 0;
  for (size_t i = 0; i < n; i += 8) {
    const size_t m = n - i < 8 ? n - i : 8;
    const __mmask8 live = (__mmask8)((1u << m) - 1);
    const __m512i p = _mm512_maskz_loadu_epi64(live, ptrs + i), len = _mm512_maskz_loadu_epi64(live, lens + i);
    const __mmask8 k18 = _mm512_mask_cmple_epu64_mask(live, _mm512_sub_epi64(len, one), seven);
    const __mmask8 kv = _mm512_mask_cmple_epu64_mask(k18, p, last8) & (e >= 8 ? 0xFF : 0);
    const __mmask8 k0 = _mm512_mask_cmpeq_epi64_mask(live, len, _mm512_setzero_si512());
    const __mmask8 k9 = _mm512_mask_cmple_epu64_mask(live, _mm512_sub_epi64(len, nine), seven);
    const __mmask8 ko = live & (__mmask8) ~(kv | k0 | k9);
    /* the caller loaded each string's first 8 bytes where they end at or before `end` */
    const __m512i w = _mm512_maskz_and_epi64(kv, _mm512_maskz_loadu_epi64(live, heads + i),
                                             _mm512_permutex2var_epi64(km0, len, km1));
    const __mmask8 k13 = _mm512_cmple_epu64_mask(_mm512_sub_epi64(len, one), two);
    const __m512i h = _mm512_mask_mov_epi64(hash_0to8(len, w, k13, &t, odd), k0, t.h0);
    _mm512_mask_storeu_epi64(out + i, live, h);
    const __m256i i32 = _mm512_cvtepi64_epi32(idx);
    _mm256_storeu_si256((__m256i *)(mid + nm), _mm256_maskz_compress_epi32(k9, i32));
    nm += (size_t)__builtin_popcount(k9);
    _mm256_storeu_si256((__m256i *)(oth + no), _mm256_maskz_compress_epi32(ko, i32));
    no += (size_t)__builtin_popcount(ko);
    idx = _mm512_add_epi64(idx, step);
  }
  /* 9..16 bytes (one 64x64->128 multiply), read within the string */
  for (size_t k = 0; k < nm; k++) {
    const uint32_t i = mid[k];
    out[i] = XXH3_len_9to16_64b(ptrs[i], lens[i], XXH3_kSecret, seed);
  }
  /* longer, or 1..8 bytes within 8 bytes of the end: lm_hash64_many (by length class, and
   * its AVX2 copy over 240 bytes: the AVX-512 form of XXH3's long loop measured ~35% slower
   * on documents here) */
  if (no) {
    const uint8_t *op[LM_HASH_VIEWS_BLOCK];
    size_t ol[LM_HASH_VIEWS_BLOCK];
    uint64_t oh[LM_HASH_VIEWS_BLOCK];
    for (size_t k = 0; k < no; k++) {
      op[k] = ptrs[oth[k]];
      ol[k] = lens[oth[k]];
    }
    lm_hash64_many(op, ol, no, seed, oh);
    for (size_t k = 0; k < no; k++) out[oth[k]] = oh[k];
  }
}
#else
typedef int lm_hash_avx512_unused; /* ISO C forbids an empty translation unit */
#endif
