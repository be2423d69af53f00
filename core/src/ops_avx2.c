/* The first passes of the offsets-layout equality ops compiled for AVX2 (eight
 * 32-bit offsets a vector instead of four) and, for equal, AVX-512 (sixteen):
 * ops_offsets_impl.h calls these when lm_ops_simd_level() says the CPU has them,
 * with the same contract as its SUF_len_eq / SUF_eq_prep.  GCC on x86-64 only
 * (hash_internal.h). */
#include <stdlib.h>
#include <string.h>

#include "hash_internal.h"
#include "ops_internal.h"

#if LM_HASH_HAVE_AVX2
/* (defined before the target pragma below: it runs before any check, so it is compiled for
 * the baseline CPU; the pragma applies to every function after it)
 * 2: AVX-512 F/BW/VL/DQ, 1: AVX2 (neither LM_NO_AVX512 nor LM_NO_AVX2 set for 2, LM_NO_AVX2
 * not set for 1), 0: neither; read once (a benign race: every thread computes the same value) */
int lm_ops_simd_level(void) {
  static int cached = -1;
  int c = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (c < 0) {
    __builtin_cpu_init();
    c = lm_hash_uses_avx2();
    if (c && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && !lm_env_switch_on("LM_NO_AVX512"))
      c = 2;
    __atomic_store_n(&cached, c, __ATOMIC_RELAXED);
  }
  return c;
}
#pragma GCC target("avx2")
#include <immintrin.h>

#define LM_LEN_EQ(NAME, OFF_T, UOFF_T)                                                                        \
  int NAME(const OFF_T *restrict off, uint8_t *restrict out, size_t b0, size_t b1, UOFF_T lim, UOFF_T plen) { \
    UOFF_T bad = 0, hits = 0;                                                                                 \
    for (size_t i = b0; i < b1; i++) {                                                                        \
      const UOFF_T a = (UOFF_T)off[i], z = (UOFF_T)off[i + 1];                                                \
      const UOFF_T ok = (UOFF_T)(a <= z) & (UOFF_T)(z <= lim);                                                \
      const UOFF_T m = ok & (UOFF_T)(z - a == plen);                                                          \
      bad |= ok ^ 1u;                                                                                         \
      hits += m;                                                                                              \
      out[i] = (uint8_t)m;                                                                                    \
    }                                                                                                         \
    return bad ? -1 : (int)hits;                                                                              \
  }
LM_LEN_EQ(lm_o32_len_eq_avx2, int32_t, uint32_t)
LM_LEN_EQ(lm_o64_len_eq_avx2, int64_t, uint64_t)

LM_EQ_PREP(lm_o32_eq_prep_avx2, uint32_t)
LM_EQ_PREP(lm_o64_eq_prep_avx2, uint64_t)

/* the same first pass of equal, 16 pairs a step (AVX-512 F/BW/VL) */
#pragma GCC push_options
#pragma GCC target("avx2,avx512f,avx512bw,avx512vl,avx512dq")
LM_EQ_PREP(lm_o32_eq_prep_avx512, uint32_t)
LM_EQ_PREP(lm_o64_eq_prep_avx512, uint64_t)

/* lm_o32_eq_copy_prep_avx512: a short-strings block's copy of both sides' offsets and its first
 * pass in one, 16 pairs a step.  Each offset is loaded once, from the caller's arrays: the pairs'
 * ends come from the same registers as their starts (valignd with the next 16), the registers
 * are stored as the copies, and the lengths, `down`, w and lg are computed from them, so the
 * copies are exactly the values checked (a concurrent writer changes answers, never what the
 * checks covered).  As two passes (copy, then LM_EQ_PREP compiled for AVX-512) the block took
 * ~0.9-1.05 ns a pair on the corpus' words against ~0.5 for the copy alone (bench_views_eq with
 * the compare loop cut out).  The loads stop at oa[m] / ob[m] (masked). */
int lm_o32_eq_copy_prep_avx512(const int32_t *restrict oa, const int32_t *restrict ob, size_t m,
                               uint32_t *restrict ca, uint32_t *restrict cb, uint32_t *restrict w,
                               uint8_t *restrict lg) {
  const __m512i sixteen = _mm512_set1_epi32(16), one = _mm512_set1_epi32(1), ones = _mm512_set1_epi32(-1);
  const __m128i b1 = _mm_set1_epi8(1), b2 = _mm_set1_epi8(2);
  __mmask16 down = 0;
  /* lanes of offsets [k, k + 16) that exist (index <= m) */
#define LM_LANES(k) ((m + 1 - (k)) >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (m + 1 - (k))) - 1u))
  __m512i a = _mm512_maskz_loadu_epi32(LM_LANES(0), oa), b = _mm512_maskz_loadu_epi32(LM_LANES(0), ob);
  size_t k = 0;
  for (; k < m; k += 16) {
    const __mmask16 nx = k + 16 <= m ? LM_LANES(k + 16) : 0;
    const __m512i an = _mm512_maskz_loadu_epi32(nx, oa + k + 16), bn = _mm512_maskz_loadu_epi32(nx, ob + k + 16);
    const __mmask16 st = LM_LANES(k); /* the copies of offsets k.. (ca[m] included in the last step) */
    _mm512_mask_storeu_epi32(ca + k, st, a);
    _mm512_mask_storeu_epi32(cb + k, st, b);
    const __mmask16 live = m - k >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (m - k)) - 1u); /* pairs */
    const __m512i a1 = _mm512_alignr_epi32(an, a, 1), b1v = _mm512_alignr_epi32(bn, b, 1);
    const __m512i la = _mm512_sub_epi32(a1, a), lb = _mm512_sub_epi32(b1v, b);
    down |= _mm512_mask_cmplt_epu32_mask(live, a1, a) | _mm512_mask_cmplt_epu32_mask(live, b1v, b);
    const __mmask16 eq = _mm512_cmpeq_epi32_mask(la, lb);
    const __m512i lm = _mm512_sub_epi32(_mm512_sllv_epi32(one, _mm512_min_epu32(la, sixteen)), one);
    _mm512_mask_storeu_epi32(w + k, live, _mm512_mask_mov_epi32(ones, eq, lm));
    const __mmask16 gt = _mm512_mask_cmpgt_epu32_mask(eq, la, sixteen);
    _mm_mask_storeu_epi8(lg + k, live, _mm_or_si128(_mm_maskz_mov_epi8(eq, b1), _mm_maskz_mov_epi8(gt, b2)));
    a = an;
    b = bn;
  }
  if (k == m) { /* offsets [m, m + 16): ca[m] is lane 0, not stored by the loop */
    ca[m] = (uint32_t)_mm_cvtsi128_si32(_mm512_castsi512_si128(a));
    cb[m] = (uint32_t)_mm_cvtsi128_si32(_mm512_castsi512_si128(b));
  }
#undef LM_LANES
  return down != 0;
}

/* The same contract for 64-bit offsets: the copy, then LM_EQ_PREP's AVX-512 copy over it. */
int lm_o64_eq_copy_prep_avx512(const int64_t *restrict oa, const int64_t *restrict ob, size_t m,
                               uint64_t *restrict ca, uint64_t *restrict cb, uint32_t *restrict w,
                               uint8_t *restrict lg) {
  for (size_t i = 0; i <= m; i++) {
    ca[i] = (uint64_t)oa[i];
    cb[i] = (uint64_t)ob[i];
  }
  return lm_o64_eq_prep_avx512(ca, cb, m, w, lg);
}

/* lm_oXX_len_eq_cand_avx512: LM_LEN_EQ's contract (ops_internal.h), 64 offsets' pairs a step (four
 * registers of 16 32-bit offsets, or eight of 8 64-bit ones), the three unsigned compares as mask
 * registers and the step's 64 marks stored as 64 bytes at once (vpmovm2b); and the positions
 * (i - b0) of the pairs marked 1, in order, in cand[0..hits) (room for b1 - b0 + 16 entries: 16 are
 * stored at a time).  GCC does not vectorise LM_LEN_EQ well under the AVX-512 target (the byte
 * stores stay per element; a C bench on the corpus' 68k documents: 120-200 us a pass against 29-32
 * us for the AVX2 copy and 9.4-13.8 us for the marks alone in this form, the offsets in L2).  A
 * step of 64 pairs with a mark compresses each group of 16's positions (vpcompressd)
 * and stores them as 16-bit words; a step without one skips that, so a pass with almost no
 * candidates (documents) costs what the plain pass does.  The caller then visits the candidates
 * without scanning the marks again: lm_off_gather_few's scan of the block's 1024 bytes, with a
 * mispredicted branch at every candidate, took twice the length pass on the corpus' lines (4.5 k
 * candidates in 500 k). */
#define LM_CAND_GROUP(SHIFT)                                                                             \
  do {                                                                                                   \
    const uint16_t mg = (uint16_t)(mm >> (SHIFT));                                                       \
    const __m512i ids = _mm512_add_epi32(iota, _mm512_set1_epi32((int)(i - b0 + (size_t)(SHIFT))));      \
    _mm256_storeu_si256((__m256i *)(void *)(cand + nc),                                                  \
                        _mm512_cvtepi32_epi16(_mm512_maskz_compress_epi32((__mmask16)mg, ids)));         \
    nc += (size_t)__builtin_popcount((unsigned)mg);                                                      \
  } while (0)

int lm_o32_len_eq_cand_avx512(const int32_t *restrict off, uint8_t *restrict out, size_t b0, size_t b1,
                              uint32_t lim, uint32_t plen, uint16_t *restrict cand) {
  const __m512i vl = _mm512_set1_epi32((int)lim), vp = _mm512_set1_epi32((int)plen);
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  uint64_t bad = 0;
  size_t nc = 0, i = b0;
  for (; b1 - i >= 64; i += 64) {
    __mmask64 mm = 0;
    for (int g = 0; g < 4; g++) {
      const __m512i a = _mm512_loadu_si512((const void *)(off + i + 16 * (size_t)g));
      const __m512i z = _mm512_loadu_si512((const void *)(off + i + 16 * (size_t)g + 1));
      const __mmask16 ok = _mm512_cmple_epu32_mask(a, z) & _mm512_cmple_epu32_mask(z, vl);
      bad |= (uint16_t)~ok;
      mm |= (__mmask64)(ok & _mm512_cmpeq_epi32_mask(_mm512_sub_epi32(z, a), vp)) << (16 * g);
    }
    _mm512_storeu_si512((void *)(out + i), _mm512_maskz_set1_epi8(mm, 1));
    if (mm) {
      LM_CAND_GROUP(0);
      LM_CAND_GROUP(16);
      LM_CAND_GROUP(32);
      LM_CAND_GROUP(48);
    }
  }
  for (; i < b1; i += 16) { /* the last < 64 pairs, 16 lanes at a time, the loads masked to off[b1] */
    const size_t left = b1 - i;
    const __mmask16 live = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
    const __m512i a = _mm512_maskz_loadu_epi32(live, off + i), z = _mm512_maskz_loadu_epi32(live, off + i + 1);
    const __mmask16 ok = _mm512_mask_cmple_epu32_mask(live, a, z) & _mm512_mask_cmple_epu32_mask(live, z, vl);
    bad |= (uint16_t)(live & ~ok);
    const uint64_t mm = (uint16_t)(ok & _mm512_cmpeq_epi32_mask(_mm512_sub_epi32(z, a), vp));
    _mm_mask_storeu_epi8(out + i, live, _mm_maskz_set1_epi8((__mmask16)mm, 1));
    LM_CAND_GROUP(0);
  }
  return bad ? -1 : (int)nc;
}

int lm_o64_len_eq_cand_avx512(const int64_t *restrict off, uint8_t *restrict out, size_t b0, size_t b1,
                              uint64_t lim, uint64_t plen, uint16_t *restrict cand) {
  const __m512i vl = _mm512_set1_epi64((long long)lim), vp = _mm512_set1_epi64((long long)plen);
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  uint64_t bad = 0;
  size_t nc = 0, i = b0;
  for (; b1 - i >= 64; i += 64) {
    __mmask64 mm = 0;
    for (int g = 0; g < 8; g++) {
      const __m512i a = _mm512_loadu_si512((const void *)(off + i + 8 * (size_t)g));
      const __m512i z = _mm512_loadu_si512((const void *)(off + i + 8 * (size_t)g + 1));
      const __mmask8 ok = _mm512_cmple_epu64_mask(a, z) & _mm512_cmple_epu64_mask(z, vl);
      bad |= (uint8_t)~ok;
      mm |= (__mmask64)(ok & _mm512_cmpeq_epi64_mask(_mm512_sub_epi64(z, a), vp)) << (8 * g);
    }
    _mm512_storeu_si512((void *)(out + i), _mm512_maskz_set1_epi8(mm, 1));
    if (mm) {
      LM_CAND_GROUP(0);
      LM_CAND_GROUP(16);
      LM_CAND_GROUP(32);
      LM_CAND_GROUP(48);
    }
  }
  for (; i < b1; i += 8) { /* the last < 64 pairs, 8 lanes at a time, the loads masked to off[b1] */
    const size_t left = b1 - i;
    const __mmask8 live = left >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << left) - 1u);
    const __m512i a = _mm512_maskz_loadu_epi64(live, off + i), z = _mm512_maskz_loadu_epi64(live, off + i + 1);
    const __mmask8 ok = _mm512_mask_cmple_epu64_mask(live, a, z) & _mm512_mask_cmple_epu64_mask(live, z, vl);
    bad |= (uint8_t)(live & ~ok);
    const uint64_t mm = (uint8_t)(ok & _mm512_cmpeq_epi64_mask(_mm512_sub_epi64(z, a), vp));
    _mm_mask_storeu_epi8(out + i, (__mmask16)live, _mm_maskz_set1_epi8((__mmask16)mm, 1));
    LM_CAND_GROUP(0);
  }
  return bad ? -1 : (int)nc;
}
#undef LM_CAND_GROUP

/* lm_oXX_eq_stream_avx512 (ops_internal.h): two passes over each chunk of up to
 * LM_EQ_CAND_CHUNK pairs.  Pass 1, 16 (8) pairs a step: every pair checked (a0 <= a1 <= lim on
 * both sides, unsigned, so a0 <= lim too), its two lengths compared, an empty equal pair marked 1
 * and every other pair 0, and the positions of the non-empty equal-length pairs listed
 * (vpcompressd).  Pass 2, only those: the pair re-read and checked again (another thread may
 * have written the offsets since), then the first min(la, lb, 128) bytes compared by two masked
 * 64-byte loads a side (no call, no branch on the length; a masked-off byte never faults), the
 * rest by memcmp; one line LM_EQ_AHEAD bytes past both starts prefetched (the stream's next
 * lines), and the start of the candidate LM_EQ_CAND_AHEAD places on (the pair after a run of
 * skipped ones, whose lines the hardware prefetchers do not predict).  The in-order loop it
 * replaces spent ~40 instructions on every pair, equal length or not: on the corpus' lines in
 * cache (20 k) it ran at 0.84-0.92x of a plain per-pair memcmp loop, this one 1.19-1.28x; from
 * memory (500 k) 1.25-1.34x against 1.28-1.46x (bench_views_eq, old and new binaries alternating). */
#define LM_EQ_CAND_CHUNK 1024
#define LM_EQ_CAND_AHEAD 16
static inline unsigned lm_eq_pair512(const uint8_t *p, const uint8_t *q, uint64_t la, uint64_t lb, int same_pos) {
  __builtin_prefetch((const void *)((uintptr_t)p + LM_EQ_AHEAD)); /* (may lie past the payload) */
  __builtin_prefetch((const void *)((uintptr_t)q + LM_EQ_AHEAD));
  const uint64_t m = la < lb ? la : lb;
  unsigned e = (unsigned)(la == lb) & lm_eq_first128_avx512(p, q, m);
  if (e && m > 128 && !same_pos) e = memcmp(p + 128, q + 128, m - 128) == 0;
  return e;
}

int lm_o32_eq_stream_avx512(const int32_t *restrict oa, const int32_t *restrict ob, const uint8_t *da,
                            const uint8_t *db, uint32_t lima, uint32_t limb, int same, uint8_t *restrict out,
                            size_t b0, size_t b1) {
  const __m512i vla = _mm512_set1_epi32((int)lima), vlb = _mm512_set1_epi32((int)limb), zero = _mm512_setzero_si512();
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  uint16_t cand[LM_EQ_CAND_CHUNK + 16];
  for (size_t c0 = b0; c0 < b1; c0 += LM_EQ_CAND_CHUNK) {
    const size_t c1 = b1 - c0 < LM_EQ_CAND_CHUNK ? b1 : c0 + LM_EQ_CAND_CHUNK;
    __mmask16 bad = 0;
    size_t nc = 0;
    for (size_t i = c0; i < c1; i += 16) {
      const size_t left = c1 - i; /* the loads stop at oa[c1] / ob[c1] */
      const __mmask16 live = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
      const __m512i a = _mm512_maskz_loadu_epi32(live, oa + i), a1 = _mm512_maskz_loadu_epi32(live, oa + i + 1);
      const __m512i x = _mm512_maskz_loadu_epi32(live, ob + i), x1 = _mm512_maskz_loadu_epi32(live, ob + i + 1);
      bad |= _mm512_mask_cmpgt_epu32_mask(live, a, a1) | _mm512_mask_cmpgt_epu32_mask(live, a1, vla) |
             _mm512_mask_cmpgt_epu32_mask(live, x, x1) | _mm512_mask_cmpgt_epu32_mask(live, x1, vlb);
      const __m512i la = _mm512_sub_epi32(a1, a);
      const __mmask16 eq = _mm512_mask_cmpeq_epi32_mask(live, la, _mm512_sub_epi32(x1, x));
      const __mmask16 empty = _mm512_mask_cmpeq_epi32_mask(eq, la, zero);
      const __mmask16 cm = eq & (__mmask16)~empty;
      _mm_mask_storeu_epi8(out + i, live, _mm_maskz_set1_epi8(empty, 1));
      const __m512i ids = _mm512_add_epi32(iota, _mm512_set1_epi32((int)(i - c0)));
      _mm256_storeu_si256((__m256i *)(void *)(cand + nc), _mm512_cvtepi32_epi16(_mm512_maskz_compress_epi32(cm, ids)));
      nc += (size_t)__builtin_popcount((unsigned)cm);
    }
    if (bad) return 1;
    for (size_t k = 0; k < nc; k++) {
      if (k + LM_EQ_CAND_AHEAD < nc) {
        const size_t j = c0 + cand[k + LM_EQ_CAND_AHEAD];
        __builtin_prefetch((const void *)((uintptr_t)da + (uint32_t)oa[j]));
        __builtin_prefetch((const void *)((uintptr_t)db + (uint32_t)ob[j]));
      }
      const size_t i = c0 + cand[k];
      const uint32_t a0 = (uint32_t)oa[i], a1 = (uint32_t)oa[i + 1], x0 = (uint32_t)ob[i], x1 = (uint32_t)ob[i + 1];
      if ((a0 > a1) | (a1 > lima) | (x0 > x1) | (x1 > limb)) return 1;
      out[i] = (uint8_t)lm_eq_pair512(da + a0, db + x0, a1 - a0, x1 - x0, same && a0 == x0);
    }
  }
  return 0;
}

int lm_o64_eq_stream_avx512(const int64_t *restrict oa, const int64_t *restrict ob, const uint8_t *da,
                            const uint8_t *db, uint64_t lima, uint64_t limb, int same, uint8_t *restrict out,
                            size_t b0, size_t b1) {
  const __m512i vla = _mm512_set1_epi64((long long)lima), vlb = _mm512_set1_epi64((long long)limb);
  const __m512i zero = _mm512_setzero_si512();
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  uint16_t cand[LM_EQ_CAND_CHUNK + 16];
  for (size_t c0 = b0; c0 < b1; c0 += LM_EQ_CAND_CHUNK) {
    const size_t c1 = b1 - c0 < LM_EQ_CAND_CHUNK ? b1 : c0 + LM_EQ_CAND_CHUNK;
    __mmask8 bad = 0;
    size_t nc = 0;
    for (size_t i = c0; i < c1; i += 8) {
      const size_t left = c1 - i;
      const __mmask8 live = left >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << left) - 1u);
      const __m512i a = _mm512_maskz_loadu_epi64(live, oa + i), a1 = _mm512_maskz_loadu_epi64(live, oa + i + 1);
      const __m512i x = _mm512_maskz_loadu_epi64(live, ob + i), x1 = _mm512_maskz_loadu_epi64(live, ob + i + 1);
      bad |= _mm512_mask_cmpgt_epu64_mask(live, a, a1) | _mm512_mask_cmpgt_epu64_mask(live, a1, vla) |
             _mm512_mask_cmpgt_epu64_mask(live, x, x1) | _mm512_mask_cmpgt_epu64_mask(live, x1, vlb);
      const __m512i la = _mm512_sub_epi64(a1, a);
      const __mmask8 eq = _mm512_mask_cmpeq_epi64_mask(live, la, _mm512_sub_epi64(x1, x));
      const __mmask8 empty = _mm512_mask_cmpeq_epi64_mask(eq, la, zero);
      const __mmask8 cm = eq & (__mmask8)~empty;
      _mm_mask_storeu_epi8(out + i, (__mmask16)live, _mm_maskz_set1_epi8((__mmask16)empty, 1));
      const __m512i ids = _mm512_add_epi32(iota, _mm512_set1_epi32((int)(i - c0)));
      _mm256_storeu_si256((__m256i *)(void *)(cand + nc),
                          _mm512_cvtepi32_epi16(_mm512_maskz_compress_epi32((__mmask16)cm, ids)));
      nc += (size_t)__builtin_popcount((unsigned)cm);
    }
    if (bad) return 1;
    for (size_t k = 0; k < nc; k++) {
      if (k + LM_EQ_CAND_AHEAD < nc) {
        const size_t j = c0 + cand[k + LM_EQ_CAND_AHEAD];
        __builtin_prefetch((const void *)((uintptr_t)da + (uint64_t)oa[j]));
        __builtin_prefetch((const void *)((uintptr_t)db + (uint64_t)ob[j]));
      }
      const size_t i = c0 + cand[k];
      const uint64_t a0 = (uint64_t)oa[i], a1 = (uint64_t)oa[i + 1], x0 = (uint64_t)ob[i], x1 = (uint64_t)ob[i + 1];
      if ((a0 > a1) | (a1 > lima) | (x0 > x1) | (x1 > limb)) return 1;
      out[i] = (uint8_t)lm_eq_pair512(da + a0, db + x0, a1 - a0, x1 - x0, same && a0 == x0);
    }
  }
  return 0;
}

/* lm_views_filter_heads_avx512: word 0 of each view (len | prefix << 32) in the even 64-bit lanes;
 * a kept view's two lanes compressed to the front (vpcompressq) and the register stored at o + k,
 * whatever it holds past them (the next store starts at the new k), so nothing branches on the
 * mask. */
size_t lm_views_filter_heads_avx512(const lm_string_view *views, size_t n, lm_string_view *o, size_t *k,
                                    uint32_t plen, uint32_t pword, uint32_t pmask) {
  const __m512i low32 = _mm512_set1_epi64(0xFFFFFFFFll), least = _mm512_set1_epi64((long long)plen);
  const __m512i hmask = _mm512_set1_epi64((long long)((uint64_t)pmask << 32));
  const __m512i hword = _mm512_set1_epi64((long long)((uint64_t)pword << 32));
  size_t kk = *k, i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m512i x = _mm512_loadu_si512((const void *)(views + i));
    const __mmask8 ok = _mm512_cmpge_epu64_mask(_mm512_and_si512(x, low32), least) &
                        _mm512_cmpeq_epi64_mask(_mm512_and_si512(x, hmask), hword) & 0x55u;
    _mm512_storeu_si512((void *)(o + kk), _mm512_maskz_compress_epi64((__mmask8)(ok | (ok << 1)), x));
    kk += (size_t)__builtin_popcount(ok);
  }
  *k = kk;
  return i;
}

/* lm_views_eq_pass1_avx512: four views a register, four registers a step.  Per register of
 * each side: the views' two words compared at once (vpcmpeqq: bit 2k = length and prefix of
 * view k agree, bit 2k + 1 = its other 8 bytes), its length over 12 (vpcmpuq on the low half of
 * word 0), and the padding: min(len, 12) spread over the view's 16 bytes (vpminud, vpshufb with
 * index 0), byte j required zero when j - 4 >= that (a signed byte compare: never bytes 0..3),
 * and the required bytes that are not zero collected.  The 16 pairs' marks (bits 0, 2, .. 30 of
 * two 32-bit masks) become bytes by vpmovm2b and vpmovwb. */
size_t lm_views_eq_pass1_avx512(const lm_string_view *a, const lm_string_view *b, uint8_t *out, size_t n,
                                size_t *longs, uint64_t *pad) {
  const __m512i twelve32 = _mm512_set1_epi32((int)LM_INLINE_MAX), low32 = _mm512_set1_epi64(0xFFFFFFFFll);
  const __m512i twelve64 = _mm512_set1_epi64((long long)LM_INLINE_MAX), zero = _mm512_setzero_si512();
  const __m512i pos4 = _mm512_broadcast_i32x4(_mm_setr_epi8(-4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11));
  const __m128i one = _mm_set1_epi8(1), two = _mm_set1_epi8(2);
  __mmask64 bad = 0;
  size_t nl = 0, i = 0;
  for (; i + 16 <= n; i += 16) {
    uint32_t dec = 0, cand = 0;
    for (int g = 0; g < 4; g++) {
      const __m512i x = _mm512_loadu_si512((const void *)(a + i + 4 * (size_t)g));
      const __m512i y = _mm512_loadu_si512((const void *)(b + i + 4 * (size_t)g));
      const __mmask8 e = _mm512_cmpeq_epi64_mask(x, y);
      const __mmask8 lng = _mm512_cmpgt_epu64_mask(_mm512_and_si512(x, low32), twelve64);
      const unsigned h = e & 0x55u, t = (e >> 1) & 0x55u, l = lng & 0x55u;
      dec |= (h & t & ~l) << (8 * g);
      cand |= (h & l) << (8 * g);
      const __m512i bx = _mm512_shuffle_epi8(_mm512_min_epu32(x, twelve32), zero);
      const __m512i by = _mm512_shuffle_epi8(_mm512_min_epu32(y, twelve32), zero);
      bad |= _mm512_mask_test_epi8_mask(_mm512_cmpge_epi8_mask(pos4, bx), x, x);
      bad |= _mm512_mask_test_epi8_mask(_mm512_cmpge_epi8_mask(pos4, by), y, y);
    }
    nl += (size_t)__builtin_popcount(cand);
    const __m128i d8 = _mm256_cvtepi16_epi8(_mm256_movm_epi8(dec));
    const __m128i c8 = _mm256_cvtepi16_epi8(_mm256_movm_epi8(cand));
    _mm_storeu_si128((__m128i *)(void *)(out + i), _mm_or_si128(_mm_and_si128(d8, one), _mm_and_si128(c8, two)));
  }
  *longs += nl;
  *pad |= (uint64_t)(bad != 0);
  return i;
}
#pragma GCC pop_options

#else
typedef int lm_ops_avx2_unused; /* ISO C forbids an empty translation unit */
#endif
