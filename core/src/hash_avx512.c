/* XXH3-64 of short strings, 8 at a time in AVX-512 lanes (selected at run time,
 * hash.c: lm_hash_uses_avx512).  Bit-identical to XXH3_64bits_withSeed: XXH3 is
 * defined on 64-bit scalars and every step below is the same integer operation
 * per lane (tested against libxxhash for every length, tests/core/test_hash_views.cpp).
 *
 * Views (lm_hash64_views_avx512): a string of at most 12 bytes sits inside its
 * 16-byte view (zero-padded), so it is hashed from the view alone: no payload read,
 * no (pointer, length) list, no branch per string.
 *   - 0..8 bytes, 8 views a step: XXH3_len_1to3's `combined` or XXH3_len_4to8's `input64`
 *     is one vpmultishiftqb of the string's bytes 0..7 (its byte offsets taken by the
 *     length from an 8-entry table, one 1-source vpermq), XORed with the seed-dependent key
 *     of its length (one vpermt2q; for len 0 the word XXH3_len_0to16 avalanches), and one
 *     xorshift-multiply chain finishes every class (XXH64_avalanche and rrmxmx have the same
 *     shape: each lane takes its class's shifts and multipliers);
 *   - 9..12 bytes (~15% of words) are listed (their index in the block, from the mask by a
 *     table: no vector op) and hashed after the block's loop 8 at a time in vector lanes
 *     (XXH3_len_9to16: the 64x64->128 multiply as four 32x32->64 products), their two view
 *     words fetched by two gathers;
 *   - longer views are listed for the caller, which checks their payload and prefetches
 *     it; for sparse ones (words) the caller passes the checked list back two blocks
 *     later and the loop hashes one of them per step in scalar code, beside the vector work.
 * Per 8 views the loop has 2 vpermt2d (the views' length and bytes 0..7 / 8..11 in their
 * lanes), 1 vpermq, 1 vpermt2q and 1 vpmultishiftqb (was 6 vpermt2q, vpshufb, vpmovqd and 2
 * vpcompress): on Zen 4 (512-bit ops double-pumped, few shuffle pipes) each cut op was
 * measured (/tmp/h3b harness, words, one thread, best of N).
 * The padding of the inline views is checked in the same pass (bytes 0..7 at or past the
 * length by a variable shift, bytes 8..11 of views of 0..8 bytes in the loop and of 9..12
 * bytes in the 9..12 pass).
 * GCC on x86-64 only (as hash_avx2.c): elsewhere this file is empty. */
#include "hash_internal.h"
#include "luminamoon/hash.h" /* lm_hash64_many */

#if LM_HASH_HAVE_AVX512
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,avx512vbmi,avx512vbmi2")
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

/* The seed-dependent tables of the strings of 0..8 bytes: ctl[len & 7] (len 8 at 0: vpermq
 * reads the low 3 bits of each index) the byte offsets (in bits) of vpmultishiftqb that turn
 * the string's bytes 0..7 into XXH3_len_1to3's `combined` or XXH3_len_4to8's `input64`;
 * key0/key1 (entries 0..15, by vpermt2q) the value XORed into it: for len 0 the seed ^ secret
 * word XXH3_len_0to16 avalanches, whose zero bytes (w = 0) make the 1..3 chain give the hash
 * of "" (no blend). */
typedef struct {
  __m512i key0, key1, ctl;
} short_tables;

static void make_tables(uint64_t seed, short_tables *t) {
  const uint8_t *s = XXH3_kSecret;
  uint64_t key[8], ctl[8];
  const uint64_t bf13 = (uint64_t)(rd32(s) ^ rd32(s + 4)) + seed;
  const uint64_t seed48 = seed ^ ((uint64_t)XXH_swap32((uint32_t)seed) << 32);
  const uint64_t bf48 = (rd64(s + 8) ^ rd64(s + 16)) - seed48;
  for (unsigned len = 1; len <= 8; len++) {
    uint8_t c[8];
    if (len <= 3) { /* combined = c3 | len << 8 | c1 << 16 | c2 << 24 (len comes from the key) */
      key[len & 7] = bf13 ^ ((uint64_t)len << 8);
      memset(c, 56, 8); /* byte 7: 0 (the padding / the bytes past len, zero in every caller's w) */
      c[0] = (uint8_t)(8 * (len - 1));
      c[2] = 0;
      c[3] = (uint8_t)(8 * (len >> 1));
    } else { /* input64 = readLE32(in + len - 4) | readLE32(in) << 32 */
      key[len & 7] = bf48;
      for (unsigned j = 0; j < 4; j++) {
        c[j] = (uint8_t)(8 * (len - 4 + j));
        c[4 + j] = (uint8_t)(8 * j);
      }
    }
    memcpy(&ctl[len & 7], c, 8);
  }
  uint64_t k16[16];
  for (unsigned j = 0; j < 16; j++) k16[j] = key[j & 7]; /* 8..15: 8 (and meaningless lengths) */
  k16[0] = seed ^ (rd64(s + 56) ^ rd64(s + 64)); /* XXH3_len_0to16, len 0 */
  t->key0 = _mm512_loadu_si512(k16);
  t->key1 = _mm512_loadu_si512(k16 + 8);
  t->ctl = _mm512_loadu_si512(ctl);
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
 * zero past len; k13 = the lanes of 0..3 bytes.  0..3 bytes finish with XXH64_avalanche,
 * 4..8 with rrmxmx: both are xorshift, multiply, xorshift, multiply, xorshift, so one
 * chain runs both, each lane with its class's shifts and multipliers.  Lanes of other
 * lengths get a meaningless value. */
static inline __m512i hash_0to8(__m512i len, __m512i w, __mmask8 k13, const short_tables *t) {
  __m512i h = _mm512_xor_si512(_mm512_multishift_epi64_epi8(_mm512_permutexvar_epi64(len, t->ctl), w),
                               _mm512_permutex2var_epi64(t->key0, len, t->key1));
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

/* XXH3_len_9to16_64b in 8 lanes: lo = the string's first 8 bytes, hi = its last 8 */
static inline __m512i hash_9to16v(__m512i lo, __m512i hi, __m512i len, __m512i bf1, __m512i bf2, __m512i bswap) {
  const __m512i m32 = _mm512_set1_epi64(0xffffffffll);
  lo = _mm512_xor_si512(lo, bf1);
  hi = _mm512_xor_si512(hi, bf2);
  const __m512i a1 = _mm512_srli_epi64(lo, 32), b1 = _mm512_srli_epi64(hi, 32);
  const __m512i ll = _mm512_mul_epu32(lo, hi), lh = _mm512_mul_epu32(lo, b1);
  const __m512i hl = _mm512_mul_epu32(a1, hi), hh = _mm512_mul_epu32(a1, b1);
  const __m512i cross = _mm512_add_epi64(_mm512_add_epi64(_mm512_srli_epi64(ll, 32), _mm512_and_si512(hl, m32)), lh);
  const __m512i upper = _mm512_add_epi64(_mm512_add_epi64(_mm512_srli_epi64(hl, 32), _mm512_srli_epi64(cross, 32)), hh);
  const __m512i lower = _mm512_ternarylogic_epi64(_mm512_slli_epi64(cross, 32), ll, m32, 0xF8); /* A | (B & C) */
  __m512i acc = _mm512_add_epi64(_mm512_add_epi64(len, _mm512_shuffle_epi8(lo, bswap)),
                                 _mm512_add_epi64(hi, _mm512_xor_si512(lower, upper)));
  acc = _mm512_xor_si512(acc, _mm512_srli_epi64(acc, 37));
  acc = _mm512_mullo_epi64(acc, _mm512_set1_epi64((long long)0x165667919E3779F9ull));
  return _mm512_xor_si512(acc, _mm512_srli_epi64(acc, 32));
}

/* lut8[m]: byte t = the position of the t-th set bit of m (the rest 0) */
static const uint64_t lut8[256] = {
    0x0ull, 0x0ull, 0x1ull, 0x100ull, 0x2ull, 0x200ull, 0x201ull, 0x20100ull,
    0x3ull, 0x300ull, 0x301ull, 0x30100ull, 0x302ull, 0x30200ull, 0x30201ull, 0x3020100ull,
    0x4ull, 0x400ull, 0x401ull, 0x40100ull, 0x402ull, 0x40200ull, 0x40201ull, 0x4020100ull,
    0x403ull, 0x40300ull, 0x40301ull, 0x4030100ull, 0x40302ull, 0x4030200ull, 0x4030201ull, 0x403020100ull,
    0x5ull, 0x500ull, 0x501ull, 0x50100ull, 0x502ull, 0x50200ull, 0x50201ull, 0x5020100ull,
    0x503ull, 0x50300ull, 0x50301ull, 0x5030100ull, 0x50302ull, 0x5030200ull, 0x5030201ull, 0x503020100ull,
    0x504ull, 0x50400ull, 0x50401ull, 0x5040100ull, 0x50402ull, 0x5040200ull, 0x5040201ull, 0x504020100ull,
    0x50403ull, 0x5040300ull, 0x5040301ull, 0x504030100ull, 0x5040302ull, 0x504030200ull, 0x504030201ull, 0x50403020100ull,
    0x6ull, 0x600ull, 0x601ull, 0x60100ull, 0x602ull, 0x60200ull, 0x60201ull, 0x6020100ull,
    0x603ull, 0x60300ull, 0x60301ull, 0x6030100ull, 0x60302ull, 0x6030200ull, 0x6030201ull, 0x603020100ull,
    0x604ull, 0x60400ull, 0x60401ull, 0x6040100ull, 0x60402ull, 0x6040200ull, 0x6040201ull, 0x604020100ull,
    0x60403ull, 0x6040300ull, 0x6040301ull, 0x604030100ull, 0x6040302ull, 0x604030200ull, 0x604030201ull, 0x60403020100ull,
    0x605ull, 0x60500ull, 0x60501ull, 0x6050100ull, 0x60502ull, 0x6050200ull, 0x6050201ull, 0x605020100ull,
    0x60503ull, 0x6050300ull, 0x6050301ull, 0x605030100ull, 0x6050302ull, 0x605030200ull, 0x605030201ull, 0x60503020100ull,
    0x60504ull, 0x6050400ull, 0x6050401ull, 0x605040100ull, 0x6050402ull, 0x605040200ull, 0x605040201ull, 0x60504020100ull,
    0x6050403ull, 0x605040300ull, 0x605040301ull, 0x60504030100ull, 0x605040302ull, 0x60504030200ull, 0x60504030201ull, 0x6050403020100ull,
    0x7ull, 0x700ull, 0x701ull, 0x70100ull, 0x702ull, 0x70200ull, 0x70201ull, 0x7020100ull,
    0x703ull, 0x70300ull, 0x70301ull, 0x7030100ull, 0x70302ull, 0x7030200ull, 0x7030201ull, 0x703020100ull,
    0x704ull, 0x70400ull, 0x70401ull, 0x7040100ull, 0x70402ull, 0x7040200ull, 0x7040201ull, 0x704020100ull,
    0x70403ull, 0x7040300ull, 0x7040301ull, 0x704030100ull, 0x7040302ull, 0x704030200ull, 0x704030201ull, 0x70403020100ull,
    0x705ull, 0x70500ull, 0x70501ull, 0x7050100ull, 0x70502ull, 0x7050200ull, 0x7050201ull, 0x705020100ull,
    0x70503ull, 0x7050300ull, 0x7050301ull, 0x705030100ull, 0x7050302ull, 0x705030200ull, 0x705030201ull, 0x70503020100ull,
    0x70504ull, 0x7050400ull, 0x7050401ull, 0x705040100ull, 0x7050402ull, 0x705040200ull, 0x705040201ull, 0x70504020100ull,
    0x7050403ull, 0x705040300ull, 0x705040301ull, 0x70504030100ull, 0x705040302ull, 0x70504030200ull, 0x70504030201ull, 0x7050403020100ull,
    0x706ull, 0x70600ull, 0x70601ull, 0x7060100ull, 0x70602ull, 0x7060200ull, 0x7060201ull, 0x706020100ull,
    0x70603ull, 0x7060300ull, 0x7060301ull, 0x706030100ull, 0x7060302ull, 0x706030200ull, 0x706030201ull, 0x70603020100ull,
    0x70604ull, 0x7060400ull, 0x7060401ull, 0x706040100ull, 0x7060402ull, 0x706040200ull, 0x706040201ull, 0x70604020100ull,
    0x7060403ull, 0x706040300ull, 0x706040301ull, 0x70604030100ull, 0x706040302ull, 0x70604030200ull, 0x70604030201ull, 0x7060403020100ull,
    0x70605ull, 0x7060500ull, 0x7060501ull, 0x706050100ull, 0x7060502ull, 0x706050200ull, 0x706050201ull, 0x70605020100ull,
    0x7060503ull, 0x706050300ull, 0x706050301ull, 0x70605030100ull, 0x706050302ull, 0x70605030200ull, 0x70605030201ull, 0x7060503020100ull,
    0x7060504ull, 0x706050400ull, 0x706050401ull, 0x70605040100ull, 0x706050402ull, 0x70605040200ull, 0x70605040201ull, 0x7060504020100ull,
    0x706050403ull, 0x70605040300ull, 0x70605040301ull, 0x7060504030100ull, 0x70605040302ull, 0x7060504030200ull, 0x7060504030201ull, 0x706050403020100ull,
};

/* XXH3-64 of a checked long string (13..16 bytes for most long words) */
static inline uint64_t long_one(const uint8_t *p, size_t len, uint64_t seed) {
  if (len - 9 < 8) return XXH3_len_9to16_64b(p, len, XXH3_kSecret, seed);
  if (len - 17 < 112) return XXH3_len_17to128_64b(p, len, XXH3_kSecret, sizeof(XXH3_kSecret), seed);
  return lm_hash64_any(p, len, seed, lm_hash_long_level());
}

void lm_hash64_longs(lm_hash_longs *l, uint64_t seed) {
  for (size_t k = 0; k < l->n; k++) l->out[l->i[k]] = long_one(l->p[k], l->len[k], seed);
  l->n = 0;
}

/* The views of 9..12 bytes at views + 16 * mi[k], k < nm, 8 at a time in vector lanes
 * (XXH3_len_9to16_64b), their two words (length | bytes 0..3, bytes 4..11) fetched again by
 * two gathers within the block: a view a racing writer changed since the vector pass gets
 * some value, and every read stays in its 16 bytes (the last 8 bytes of the string are made
 * from those words by shifts).  *pad gets the bytes 8..11 at or past len. */
static void mid_vec(const uint8_t *views, const uint8_t *mi, size_t nm, uint64_t seed, uint64_t *out, uint64_t *pad) {
  const uint8_t *s = XXH3_kSecret;
  const __m512i bf1 = _mm512_set1_epi64((long long)((rd64(s + 24) ^ rd64(s + 32)) + seed));
  const __m512i bf2 = _mm512_set1_epi64((long long)((rd64(s + 40) ^ rd64(s + 48)) - seed));
  const __m512i bswap = _mm512_set_epi8(8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
                                        15, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7,
                                        8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
  const __m512i m32 = _mm512_set1_epi64(0xffffffffll), c64 = _mm512_set1_epi64(64), c128 = _mm512_set1_epi64(128);
  __mmask8 pk = 0;
  for (size_t k = 0; k < nm; k += 8) {
    const size_t m = nm - k < 8 ? nm - k : 8;
    const __mmask8 live = (__mmask8)((1u << m) - 1);
    uint64_t i8;
    memcpy(&i8, mi + k, 8); /* (bytes past nm: lanes off) */
    const __m512i off = _mm512_slli_epi64(_mm512_cvtepu8_epi64(_mm_cvtsi64_si128((long long)i8)), 4);
    const __m512i qa = _mm512_mask_i64gather_epi64(_mm512_setzero_si512(), live, off, views, 1);
    const __m512i qb = _mm512_mask_i64gather_epi64(_mm512_setzero_si512(), live, off, views + 8, 1);
    const __m512i len = _mm512_and_si512(qa, m32), w = _mm512_shrdi_epi64(qa, qb, 32), w2 = _mm512_srli_epi64(qb, 32);
    /* the string's last 8 bytes: bytes len-8..7 of w, then bytes 8..len-1 (w2) */
    const __m512i sh = _mm512_slli_epi64(len, 3), s1 = _mm512_sub_epi64(sh, c64);
    const __m512i hi = _mm512_or_si512(_mm512_srlv_epi64(w, s1), _mm512_sllv_epi64(w2, _mm512_sub_epi64(c128, sh)));
    const __m512i pw = _mm512_srlv_epi64(w2, s1);
    pk |= _mm512_test_epi64_mask(pw, pw);
    uint64_t h[8];
    _mm512_storeu_si512(h, hash_9to16v(w, hi, len, bf1, bf2, bswap));
    for (size_t j = 0; j < m; j++) out[mi[k + j]] = h[j];
  }
  *pad |= pk;
}

size_t lm_hash64_views_avx512(const void *views, size_t n, uint64_t seed, uint64_t *out, uint8_t *rest,
                              uint64_t *pad, lm_hash_longs *pending) {
  const short_tables *tp = tables_for(seed), t = *tp;
  if (n > LM_HASH_VIEWS_BLOCK) return 0; /* (callers pass blocks) */
  /* dword 4j + 1, 4j + 2 of views i..i+7 (bytes 0..7) and 4j, 4j + 3 (len | bytes 8..11 << 32) */
  const __m512i iw = _mm512_set_epi32(30, 29, 26, 25, 22, 21, 18, 17, 14, 13, 10, 9, 6, 5, 2, 1);
  const __m512i iq = _mm512_set_epi32(31, 28, 27, 24, 23, 20, 19, 16, 15, 12, 11, 8, 7, 4, 3, 0);
  const __m512i m32 = _mm512_set1_epi64(0xffffffffll), hi32 = _mm512_set1_epi64((long long)0xffffffff00000000ull);
  const __m512i three = _mm512_set1_epi64(3), eight = _mm512_set1_epi64(8), twelve = _mm512_set1_epi64(12);
  const uint64_t *q = (const uint64_t *)views;
  __mmask8 padk = 0;
  uint64_t pad9 = 0;
  uint8_t mid[LM_HASH_VIEWS_BLOCK + 8]; /* the 9..12-byte views' indices */
  size_t nm = 0, nr = 0;
  uint64_t base = 0; /* the step's first index, in each byte */
  lm_hash_longs none;
  none.n = 0;
  lm_hash_longs *pl = pending ? pending : &none;
  const size_t npl = pl->n;
  size_t kl = 0;
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
    const __m512i w = _mm512_permutex2var_epi32(v0, iw, v1), qv = _mm512_permutex2var_epi32(v0, iq, v1);
    const __m512i len = _mm512_and_si512(qv, m32);
    const __mmask8 kin = _mm512_cmple_epu64_mask(len, twelve);
    const __mmask8 k9 = _mm512_mask_cmpgt_epu64_mask(kin, len, eight), kl8 = live & (__mmask8)~kin;
    const __mmask8 k13 = _mm512_cmple_epu64_mask(len, three);
    /* padding: bytes 0..7 at or past len (a shift by >= 64 gives 0), and bytes 8..11 of the
     * views of 0..8 bytes (of 9..12: mid_vec) */
    const __m512i wr = _mm512_srlv_epi64(w, _mm512_slli_epi64(len, 3));
    const __mmask8 kpw = _mm512_test_epi64_mask(wr, wr);
    padk |= (__mmask8)((kpw | _mm512_mask_test_epi64_mask((__mmask8)(kin & ~k9), qv, hi32)) & kin);
    const __m512i h = hash_0to8(len, w, k13, &t);
    if (m == 8) _mm512_storeu_si512(out + i, h);
    else _mm512_mask_storeu_epi64(out + i, live, h);
    /* the lists of 9..12 and of long views: the indices of a mask's set bits from a table
     * (8 bytes stored, popcount of them kept), no vector op */
    const uint64_t em = lut8[k9] + base, el = lut8[kl8] + base;
    memcpy(mid + nm, &em, 8);
    nm += (size_t)__builtin_popcount(k9);
    memcpy(rest + nr, &el, 8);
    nr += (size_t)__builtin_popcount(kl8);
    base += 0x0808080808080808ull;
    /* one pending long string a step (scalar: integer pipes, beside the vector work) */
    if (kl < npl) {
      pl->out[pl->i[kl]] = long_one(pl->p[kl], pl->len[kl], seed);
      kl++;
    }
  }
  for (; kl < npl; kl++) pl->out[pl->i[kl]] = long_one(pl->p[kl], pl->len[kl], seed);
  pl->n = 0;
  mid_vec((const uint8_t *)views, mid, nm, seed, out, &pad9);
  *pad |= pad9 | padk;
  return nr;
}
void lm_hash64_ptrs_avx512(const uint8_t *const *ptrs, const size_t *lens, const uint64_t *heads, size_t n,
                           const uint8_t *end, uint64_t seed, uint64_t *out) {
  const short_tables *tp = tables_for(seed), t = *tp;
  if (n > LM_HASH_VIEWS_BLOCK) return; /* (callers pass blocks) */
  /* the bytes of a string of len 0..8 within the 8 read at its start */
  uint64_t km[16];
  for (unsigned len = 0; len < 16; len++) km[len] = len >= 8 ? ~0ull : (1ull << (8 * len)) - 1;
  const __m512i km0 = _mm512_loadu_si512(km), km1 = _mm512_loadu_si512(km + 8);
  const __m512i one = _mm512_set1_epi64(1), three = _mm512_set1_epi64(3), seven = _mm512_set1_epi64(7);
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
    const __mmask8 k13 = _mm512_cmple_epu64_mask(len, three); /* (w = 0 when len is 0) */
    const __m512i h = hash_0to8(len, w, k13, &t);
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
