/* Template for the offsets-layout operations; included by ops_offsets.c once
 * per offset width with SUF (o32/o64) and OFF_T (int32_t/int64_t) defined. */

#define LM_CAT_(a, b) a##b
#define LM_CAT(a, b) LM_CAT_(a, b)
#define FN(name) LM_CAT(LM_CAT(lm_, SUF), LM_CAT(_, name))
#define CTX(name) LM_CAT(SUF, LM_CAT(_ctx_, name))
#define RNG(name) LM_CAT(SUF, LM_CAT(_range_, name))

/* ---- element-wise ops: prefix_match, equal_scalar, equal, hash64.
 *
 * Each op checks the offsets it reads as it goes (the _checked forms): every
 * element's pair (a, b) = (offsets[i], offsets[i + 1]) must satisfy
 * 0 <= a <= b <= data_len, else the op returns LM_EINVAL.  Over all i that is
 * exactly "non-negative, non-decreasing, last <= data_len", so no separate
 * validation pass over all the offsets is needed: a pair is read once into
 * locals (or a block of offsets into a private copy on the stack: equal's short
 * strings), checked, and only then used to address the payload, so a thread
 * writing into the offsets while the op runs changes answers, never the bounds
 * of what is read.
 *
 * Work goes in blocks of LM_OFF_BLOCK elements: pass 1 decides on the lengths
 * and checks the pairs (branch-free, vectorised); pass 2 visits the candidates,
 * re-reads and re-checks their pair, and compares bytes: up to 8 (16) bytes as
 * one (two) unaligned words when that stays inside data, else memcmp.  Pass 2
 * prefetches the payload of the element LM_OFF_AHEAD places on (long strings
 * lie one cache miss apart). */
#ifndef LM_OFF_COMMON
#define LM_OFF_COMMON
#include "mask_lut.h"
#define LM_OFF_BLOCK 1024
#define LM_OFF_AHEAD 12
/* equality against a scalar: a rare candidate is compared this many candidates after its prefetch */
#define LM_OFF_LAG 16
/* equal: blocks of strings of at most this many bytes on average compare every pair's first 16
 * bytes without a branch; longer ones read only the pairs of equal length */
#define LM_OFF_SHORT 24
#ifndef LM_EQ_BLOCK
#define LM_EQ_BLOCK 256 /* equal's block: its copies, w and lg (3.3 KB with int32 offsets); 256 measured
                          * 1.19-1.24 ns a word, 512: 1.26-1.30, 1024: 1.33-1.39, 2048: 1.46-1.59 (interleaved) */
#endif
static inline uint64_t lm_off_load64(const uint8_t *p) {
  uint64_t w;
  memcpy(&w, p, 8);
  return w;
}
/* the low n bytes (1 <= n <= 8) of a little-endian word */
static inline uint64_t lm_off_mask(uint64_t n) { return ~0ull >> (64 - 8 * n); }
#if defined(__GNUC__)
#define LM_OFF_PREFETCH(p) __builtin_prefetch((const void *)(p))
#else
#define LM_OFF_PREFETCH(p) ((void)0)
#endif
/* cand[0..k) = the positions j < n with bit sh (0 or 1) of out[j] set, in order;
 * returns k.  cand has room for n + 8 entries (rows of 8 are stored
 * whole).  Eight bytes at a time and without a branch: their low bits packed into
 * an 8-bit mask by one multiply (little-endian), whose set positions come from a
 * table; a branch on out[j] mispredicts for every candidate on words. */
static inline size_t lm_off_gather(const uint8_t *restrict out, size_t n, unsigned sh, uint16_t *restrict cand) {
  size_t nc = 0, j = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  for (; j + 8 <= n; j += 8) {
    const uint64_t w = (lm_off_load64(out + j) >> sh) & 0x0101010101010101ull;
    const unsigned m = (unsigned)((w * 0x0102040810204080ull) >> 56);
    const uint64_t base = (uint64_t)j * 0x0001000100010001ull; /* j in each 16-bit lane */
    uint64_t r0, r1;
    memcpy(&r0, lm_mask_lut[m], 8);
    memcpy(&r1, lm_mask_lut[m] + 4, 8);
    r0 += base; /* lane-wise: j + 7 < 65536, no carry between lanes */
    r1 += base;
    memcpy(cand + nc, &r0, 8);
    memcpy(cand + nc + 4, &r1, 8);
    nc += lm_mask_pop[m];
  }
#endif
  for (; j < n; j++) {
    cand[nc] = (uint16_t)j;
    nc += (out[j] >> sh) & 1u;
  }
  return nc;
}
/* The same as lm_off_gather(out, n, 0, cand) when out[0..n) holds exactly `hits` 1s (the other
 * bytes 0) and few of them: eight marks at a time, a branch per candidate (a mispredict each,
 * which the table avoids where candidates are many: one string in ten for words), and the scan
 * stops at the last one. */
static inline size_t lm_off_gather_few(const uint8_t *restrict out, size_t n, size_t hits, uint16_t *restrict cand) {
  size_t nc = 0;
  for (size_t j = 0; nc < hits && j < n; j += 8) {
    uint64_t w = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (j + 8 <= n) {
      w = lm_off_load64(out + j);
    } else
#endif
    {
      for (size_t t = j; t < n && t < j + 8; t++) w |= (uint64_t)out[t] << (8 * (t - j));
    }
    for (; w; w &= w - 1) cand[nc++] = (uint16_t)(j + (size_t)(__builtin_ctzll(w) >> 3));
  }
  return nc;
}
/* Do s[0..n) (inside data of dlen bytes, at offset a) and t[0..n) match?  t is
 * readable for max(n, 8) bytes when tw/tm describe its first min(n, 8) bytes. */
static inline int lm_off_prefix_eq(const uint8_t *data, uint64_t dlen, uint64_t a, const uint8_t *t, uint64_t n,
                                   uint64_t tw, uint64_t tm) {
  if (a + 8 <= dlen) {
    if ((lm_off_load64(data + a) ^ tw) & tm) return 0;
    return n <= 8 || memcmp(data + a + 8, t + 8, n - 8) == 0;
  }
  return memcmp(data + a, t, n) == 0;
}
#endif

typedef struct {
  const OFF_T *off;
  const uint8_t *data, *p;
  uint64_t dlen, plen;
  uint64_t pw, pm; /* the first min(plen, 8) bytes of p as a word, and their mask */
  int exact;       /* 0: prefix (len >= plen), 1: equality (len == plen) */
  uint8_t *out;
} CTX(prefix);

/* Pass 1 of one block (equality): out[i] = the pair is valid and its length is
 * plen; returns -1 when some pair in the block is invalid, else how many are 1
 * (a block is at most LM_OFF_BLOCK pairs).  Unsigned compares of one width
 * (a <= z <= lim as unsigned also rules out a < 0, as lim <= OFF_MAX), so the
 * loop vectorises. */
static int LM_CAT(SUF, _len_eq)(const OFF_T *restrict off, uint8_t *restrict out, size_t b0, size_t b1, UOFF_T lim,
                                UOFF_T plen) {
  UOFF_T bad = 0, hits = 0;
  for (size_t i = b0; i < b1; i++) {
    const UOFF_T a = (UOFF_T)off[i], z = (UOFF_T)off[i + 1];
    const UOFF_T ok = (UOFF_T)(a <= z) & (UOFF_T)(z <= lim);
    const UOFF_T m = ok & (UOFF_T)(z - a == plen);
    bad |= ok ^ 1u;
    hits += m;
    out[i] = (uint8_t)m;
  }
  return bad ? -1 : (int)hits;
}

/* Slow path of one element (near the end of data, or a long prefix): 1/0, or -1 for an invalid pair. */
static int LM_CAT(SUF, _one)(const OFF_T *off, size_t i, const uint8_t *d, uint64_t dlen, UOFF_T lim,
                             const uint8_t *p, uint64_t plen, int exact, uint64_t pw, uint64_t pm) {
  const UOFF_T a = (UOFF_T)off[i], z = (UOFF_T)off[i + 1]; /* read once, checked, used */
  if (!(a <= z && z <= lim)) return -1;
  const uint64_t len = (uint64_t)(z - a);
  if (exact ? len != plen : len < plen) return 0;
  return plen == 0 || lm_off_prefix_eq(d, dlen, (uint64_t)a, p, plen, pw, pm);
}

/* Equality's pass 2 for one candidate i (its length matched in pass 1): out[i] = 1/0, or -1 for
 * an invalid pair.  The pair is re-read and checked before it addresses the payload. */
static inline int RNG(eq_one)(const CTX(prefix) *c, const OFF_T *off, UOFF_T lim, UOFF_T pl, size_t i) {
  const UOFF_T a = (UOFF_T)off[i], z = (UOFF_T)off[i + 1];
  if (!((a <= z) & (z <= lim))) return -1;
  const uint8_t *d = c->data;
  if (c->plen <= 8 && (uint64_t)a + 8 <= c->dlen) {
    c->out[i] = (uint8_t)((z - a == pl) & (((lm_off_load64(d + a) ^ c->pw) & c->pm) == 0));
  } else {
    c->out[i] = (uint8_t)(z - a == pl && lm_off_prefix_eq(d, c->dlen, (uint64_t)a, c->p, c->plen, c->pw, c->pm));
  }
  return 0;
}

static lm_status RNG(prefix)(void *ctx, size_t begin, size_t end) {
  const CTX(prefix) *c = ctx;
  const OFF_T *off = c->off;
  const uint8_t *d = c->data;
  uint8_t *out = c->out;
  const uint64_t dlen = c->dlen, plen = c->plen, pw = c->pw, pm = c->pm;
  const UOFF_T lim = dlen > (uint64_t)OFF_MAX ? (UOFF_T)OFF_MAX : (UOFF_T)dlen;
  if (plen > (uint64_t)OFF_MAX) { /* longer than any string: only the pairs to check */
    for (size_t b0 = begin; b0 < end; b0 += LM_OFF_BLOCK) {
      const size_t b1 = end - b0 < LM_OFF_BLOCK ? end : b0 + LM_OFF_BLOCK;
      if (LM_CAT(SUF, _len_eq)(off, out, b0, b1, lim, (UOFF_T)0) < 0) return LM_EINVAL;
      memset(out + b0, 0, b1 - b0);
    }
    return LM_OK;
  }
  const UOFF_T pl = (UOFF_T)plen;
#if LM_HASH_HAVE_AVX2
  const int simd = lm_ops_simd_level(); /* the first pass of equality: 1 AVX2, 2 AVX-512 */
#endif
  if (!c->exact && plen <= 8 && dlen >= 8) {
    /* prefixes of up to 8 bytes: one branch-free pass, one unaligned word per string
     * (the strings starting in the last 8 bytes of data take the slow path). */
    const uint64_t wlim = dlen - 8;
    /* strings of a cache line or more on average (documents): each string's first word is a
     * miss the hardware does not predict (the starts are an irregular stride apart), so the
     * start LM_OFF_AHEAD strings on is prefetched; short strings share lines and skip it
     * (pf_end = begin). The average only sets pf_end: offsets are still checked one by one. */
    const uint64_t span = (uint64_t)(UOFF_T)off[end] - (uint64_t)(UOFF_T)off[begin];
    const size_t pf_end = end - begin > LM_OFF_AHEAD && span / (end - begin) >= 64 ? end - LM_OFF_AHEAD : begin;
    for (size_t i = begin; i < end; i++) {
      if (i < pf_end) LM_OFF_PREFETCH((uintptr_t)d + (uint64_t)(UOFF_T)off[i + LM_OFF_AHEAD]);
      const UOFF_T a = (UOFF_T)off[i], z = (UOFF_T)off[i + 1];
      const int ok = (a <= z) & (z <= lim);
      const int fits = ok & ((uint64_t)a <= wlim);
      const uint64_t w = lm_off_load64(d + (fits ? (uint64_t)a : 0));
      if (fits) {
        out[i] = (uint8_t)((z - a >= pl) & (((w ^ pw) & pm) == 0));
      } else {
        const int r = LM_CAT(SUF, _one)(off, i, d, dlen, lim, c->p, plen, 0, pw, pm);
        if (r < 0) return LM_EINVAL;
        out[i] = (uint8_t)r;
      }
    }
    return LM_OK;
  }
  size_t pend[LM_OFF_LAG], npend = 0, npend_head = 0; /* equality's deferred candidates (a ring) */
  for (size_t b0 = begin; b0 < end; b0 += LM_OFF_BLOCK) {
    const size_t b1 = end - b0 < LM_OFF_BLOCK ? end : b0 + LM_OFF_BLOCK;
    if (c->exact) {
      /* equality: lengths first (4 or 8 bytes a string), then the candidates.  Their indices:
       * with AVX-512 from the length pass itself (compressed, no second look at the marks);
       * else few (documents, lines: under 1 in 16) found by lm_off_gather_few, many (words) by
       * lm_off_gather's table, without a branch on out[i] */
      uint16_t cand[LM_OFF_BLOCK + 16];
      size_t nc;
      int hits;
#if LM_HASH_HAVE_AVX2
      if (simd == 2) {
        hits = LM_CAT(LM_CAT(lm_, SUF), _len_eq_cand_avx512)(off, out, b0, b1, lim, pl, cand);
      } else {
        hits = simd == 1 ? LM_CAT(LM_CAT(lm_, SUF), _len_eq_avx2)(off, out, b0, b1, lim, pl)
                         : LM_CAT(SUF, _len_eq)(off, out, b0, b1, lim, pl);
      }
#else
      hits = LM_CAT(SUF, _len_eq)(off, out, b0, b1, lim, pl);
#endif
      if (hits < 0) return LM_EINVAL;
      /* no string of the scalar's length in the block: out is final (the gather below cost as
       * much as the length pass: fast_eq(str) on the corpus' documents, 19.5% against 22% of
       * the samples, perf) */
      if (plen == 0 || hits == 0) continue;
      const int few = (size_t)hits * 16 < b1 - b0;
#if LM_HASH_HAVE_AVX2
      if (simd == 2)
        nc = (size_t)hits;
      else
#endif
        nc = few ? lm_off_gather_few(out + b0, b1 - b0, (size_t)hits, cand) : lm_off_gather(out + b0, b1 - b0, 0, cand);
      for (size_t k = 0; k < nc; k++) {
        const size_t i = b0 + cand[k];
        if (few) {
          /* few candidates lie far apart in the payload (documents: 85 of 68 k), each one's first
           * bytes a cache miss: prefetched now, compared LM_OFF_LAG candidates later (their
           * line has arrived by then; compared at once, every miss stalled the length pass) */
          LM_OFF_PREFETCH((uintptr_t)d + (uint64_t)(UOFF_T)off[i]);
          if (npend == LM_OFF_LAG && RNG(eq_one)(c, off, lim, pl, pend[npend_head]) < 0) return LM_EINVAL;
          pend[npend_head] = i;
          npend_head = (npend_head + 1) % LM_OFF_LAG;
          npend += npend < LM_OFF_LAG;
          continue;
        }
        if (RNG(eq_one)(c, off, lim, pl, i) < 0) return LM_EINVAL;
      }
    } else {
      /* long prefixes: one element at a time, the payload LM_OFF_AHEAD strings on prefetched */
      for (size_t i = b0; i < b1; i++) {
        if (i + LM_OFF_AHEAD < b1) LM_OFF_PREFETCH((uintptr_t)d + (uint64_t)(UOFF_T)off[i + LM_OFF_AHEAD]);
        const int r = LM_CAT(SUF, _one)(off, i, d, dlen, lim, c->p, plen, 0, pw, pm);
        if (r < 0) return LM_EINVAL;
        out[i] = (uint8_t)r;
      }
    }
  }
  /* the deferred candidates not compared yet, oldest first (the ring holds npend of them) */
  for (size_t k = 0; k < npend; k++)
    if (RNG(eq_one)(c, off, lim, pl, pend[(npend_head + LM_OFF_LAG - npend + k) % LM_OFF_LAG]) < 0) return LM_EINVAL;
  return LM_OK;
}

static lm_status LM_CAT(SUF, _match)(const OFF_T *offsets, size_t n, const uint8_t *data, size_t data_len,
                                     const uint8_t *prefix, size_t plen, int exact, uint8_t *out,
                                     const lm_exec *exec) {
  if (!offsets || (n && !out) || (plen && !prefix) || (data_len && !data)) return LM_EINVAL;
  if (n == 0) return offsets[0] >= 0 && (uint64_t)offsets[0] <= (uint64_t)data_len ? LM_OK : LM_EINVAL;
  /* the prefix's first bytes as one word; p is read for max(plen, 8) bytes, so copy a short one */
  uint8_t head[8] = {0};
  const size_t k = plen < 8 ? plen : 8;
  if (k) memcpy(head, prefix, k);
  uint64_t pw = 0, pm = 0;
  if (k) {
    pm = lm_off_mask(k);
    pw = lm_off_load64(head) & pm;
  }
  CTX(prefix) c = {offsets, data, prefix, (uint64_t)data_len, (uint64_t)plen, pw, pm, exact, out};
  /* a second thread is a started pool worker (parallel.c: ~1-3 us to wake, was ~20 us to
   * start); a prefix reads every string's first bytes (a cache line a document), while
   * equality's length pass (AVX-512: ~0.12-0.16 ns a string since f96f9b1) reads only the
   * offsets: with 16384 a thread, two threads ran it slower than one up to ~45 k strings
   * (the corpus' documents' int32 offsets, median of 2000 calls, Dec 3: 16 k strings 2.5 ->
   * 4.0-4.3 us, 32 k 5.1-5.3 -> 5.6-6.2, 68 k 10.7-11.0 -> 8.8-9.6, 131 k 21.0-21.5 ->
   * 13.8-14.2), so it takes a second thread from 2 x 32768 strings on */
  lm_exec e = grain(exec, exact ? 32768 : 4096);
  return lm_cut_even(&e, n, RNG(prefix), &c);
}

lm_status FN(prefix_match_checked)(const OFF_T *offsets, size_t n, const uint8_t *data, size_t data_len,
                                   const uint8_t *prefix, size_t plen, uint8_t *out, const lm_exec *exec) {
  return LM_CAT(SUF, _match)(offsets, n, data, data_len, prefix, plen, 0, out, exec);
}

lm_status FN(equal_scalar_checked)(const OFF_T *offsets, size_t n, const uint8_t *data, size_t data_len,
                                   const uint8_t *s, size_t slen, uint8_t *out, const lm_exec *exec) {
  return LM_CAT(SUF, _match)(offsets, n, data, data_len, s, slen, 1, out, exec);
}

/* The unchecked forms trust validated offsets: offsets[n] bounds the payload. */
static size_t LM_CAT(SUF, _trusted_len)(const OFF_T *offsets, size_t n) {
  return offsets && offsets[n] > 0 ? (size_t)offsets[n] : 0;
}

lm_status FN(prefix_match)(const OFF_T *offsets, size_t n, const uint8_t *data, const uint8_t *prefix,
                           size_t plen, uint8_t *out, const lm_exec *exec) {
  return LM_CAT(SUF, _match)(offsets, n, data, LM_CAT(SUF, _trusted_len)(offsets, n), prefix, plen, 0, out, exec);
}

lm_status FN(equal_scalar)(const OFF_T *offsets, size_t n, const uint8_t *data, const uint8_t *s, size_t slen,
                           uint8_t *out, const lm_exec *exec) {
  return LM_CAT(SUF, _match)(offsets, n, data, LM_CAT(SUF, _trusted_len)(offsets, n), s, slen, 1, out, exec);
}

/* ---- equal */
typedef struct {
  const OFF_T *oa, *ob;
  const uint8_t *da, *db;
  uint64_t la, lb;
  uint8_t *out;
} CTX(eq);

/* Per block of LM_EQ_BLOCK pairs, one of two modes, chosen by the block's average
 * length (a guess from its first and last offset, not trusted for anything else):
 *
 * Short strings (<= LM_OFF_SHORT bytes on average: words): both sides' offsets of
 * the block are copied onto the thread's stack and the copies checked in one
 * vectorised pass (non-decreasing, the last <= the payload's length; the pass also
 * writes, per pair, which bits of a 16-byte compare decide it: _eq_prep, with AVX2
 * and AVX-512 copies); every later read of an offset is of the checked copy, so a
 * thread writing into the caller's offsets while the op runs changes answers, never
 * the bounds of what is read.  Then every pair's first 16 bytes are compared with
 * no branch (one SSE2 compare: 8-9 instructions a pair; a branch on the lengths
 * mispredicts for about every other word, and reading a string whose length differs
 * costs little when ~10 share a cache line), only for the pairs with 16 bytes
 * readable from both starts (a prefix of the block, as the starts never decrease;
 * the last few pairs of a payload take memcmp).  The equal-length pairs over 16
 * bytes whose first 16 matched (few, flagged) are finished by 16-byte chunks (up
 * to 64 bytes) or memcmp.
 *
 * Longer strings (lines, documents): one pass in order, each offset read once and
 * each pair checked before its bytes are read, only the pairs of equal length
 * compared (memcmp), as a branch: such strings lie about a cache line or more apart,
 * so comparing the pairs of different lengths would cost more than the mispredicted
 * branch.  In blocks averaging LM_EQ_TOUCH_MIN bytes or more (documents) the bytes of
 * those pairs are prefetched all the same where lm_eq_touch_on (AMD CPUs: ops_internal.h):
 * skipped, they left gaps at which the hardware prefetchers stopped there.  Both modes: a pair at the same
 * offset of one payload (a tensor against itself or a slice of itself) is equal
 * without being read. */
#ifndef LM_OFF_EQ16
#define LM_OFF_EQ16
#if defined(__SSE2__)
#include <emmintrin.h>
/* bit j (j < 16) set when p[j] != q[j], bits 16..31 always set (16 bytes readable at each) */
static inline uint32_t lm_off_ne16(const uint8_t *p, const uint8_t *q) {
  const __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
  const __m128i y = _mm_loadu_si128((const __m128i *)(const void *)q);
  return ~(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(x, y));
}
#else
/* the non-zero bytes of a word as the low 8 bits (bit j: byte j, little-endian) */
static inline uint32_t lm_off_nz8(uint64_t x) {
  x |= x >> 4;
  x |= x >> 2;
  x |= x >> 1;
  x &= 0x0101010101010101ull;
  return (uint32_t)((x * 0x0102040810204080ull) >> 56);
}
static inline uint32_t lm_off_ne16(const uint8_t *p, const uint8_t *q) {
  return 0xFFFF0000u | lm_off_nz8(lm_off_load64(p) ^ lm_off_load64(q)) |
         (lm_off_nz8(lm_off_load64(p + 8) ^ lm_off_load64(q + 8)) << 8);
}
#endif
static inline unsigned lm_off_eq16(const uint8_t *p, const uint8_t *q) {
  return (lm_off_ne16(p, q) & 0xFFFFu) == 0;
}
/* 1 when p[0..l) == q[0..l), l > 16, both readable for l bytes */
static inline unsigned lm_off_eq_long(const uint8_t *p, const uint8_t *q, uint64_t l) {
  if (l > 64) return memcmp(p, q, l) == 0;
  uint64_t j = 16;
  for (; j + 16 < l; j += 16)
    if (!lm_off_eq16(p + j, q + j)) return 0;
  return lm_off_eq16(p + l - 16, q + l - 16);
}
#endif

/* The vectorised first pass of a short-strings block (ops_internal.h's LM_EQ_PREP;
 * the AVX2 and AVX-512 copies are in ops_avx2.c). */
static LM_EQ_PREP(LM_CAT(SUF, _eq_prep), UOFF_T)

/* Pair k of a block's checked copies, near a payload's end (fewer than 16 bytes after a start). */
static inline uint8_t LM_CAT(SUF, _eq_tail)(const UOFF_T *ca, const UOFF_T *cb, size_t k, const uint8_t *da,
                                            const uint8_t *db, int same) {
  const UOFF_T a0 = ca[k], x0 = cb[k];
  const uint64_t la = (uint64_t)(UOFF_T)(ca[k + 1] - a0), lb = (uint64_t)(UOFF_T)(cb[k + 1] - x0);
  return (uint8_t)(la == lb && (la == 0 || (same && a0 == x0) || memcmp(da + a0, db + x0, la) == 0));
}

/* Longer strings, pairs [b0, b1): one pass in order, each offset read once (a0, x0
 * carried from the previous pair), the pair checked (a0 <= a1 <= lim) before its bytes
 * are read, and only the pairs of equal length compared (a branch on the lengths: such
 * strings lie about a cache line or more apart); with `touch` (a literal: two copies
 * of the loop) the bytes of the others are prefetched (lm_eq_touch).  Returns non-zero
 * when a pair is invalid. */
static inline __attribute__((always_inline)) int LM_CAT(SUF, _eq_stream)(
    const OFF_T *restrict oa, const OFF_T *restrict ob, const uint8_t *da, const uint8_t *db, UOFF_T lima,
    UOFF_T limb, int same, uint8_t *restrict out, size_t b0, size_t b1, const int touch) {
  UOFF_T a0 = (UOFF_T)oa[b0], x0 = (UOFF_T)ob[b0];
  if ((a0 > lima) | (x0 > limb)) return 1;
  /* room left after a0 / x0: a0 <= a1 <= lim  <=>  a1 - a0 (unsigned) <= lim - a0 */
  UOFF_T ra = lima - a0, rb = limb - x0;
  for (size_t i = b0; i < b1; i++) {
    const UOFF_T a1 = (UOFF_T)oa[i + 1], x1 = (UOFF_T)ob[i + 1];
    const UOFF_T la = a1 - a0, lb = x1 - x0;
    if ((la > ra) | (lb > rb)) return 1;
    ra -= la;
    rb -= lb;
    LM_OFF_PREFETCH((uintptr_t)da + a0 + LM_EQ_AHEAD); /* (ops_internal.h; may lie past the payload) */
    LM_OFF_PREFETCH((uintptr_t)db + x0 + LM_EQ_AHEAD);
    out[i] = (uint8_t)(la == lb && (la == 0 || (same && a0 == x0) || memcmp(da + a0, db + x0, la) == 0));
    if (touch && la != lb) {
      lm_eq_touch(da + a0, la);
      lm_eq_touch(db + x0, lb);
    }
    a0 = a1;
    x0 = x1;
  }
  return 0;
}

/* Pair k (equal lengths over 16 bytes, 16 bytes readable at both starts) when its first 16 matched. */
static inline void LM_CAT(SUF, _eq_rest)(const UOFF_T *ca, const UOFF_T *cb, size_t k, const uint8_t *da,
                                         const uint8_t *db, int same, uint8_t *o) {
  if (!o[k]) return;
  const UOFF_T a0 = ca[k], x0 = cb[k];
  const uint64_t l = (uint64_t)(UOFF_T)(ca[k + 1] - a0); /* == the other's: flagged so */
  o[k] = (uint8_t)((same && a0 == x0) || lm_off_eq_long(da + a0, db + x0, l));
}

/* ca[0..k) = oa[0..k), cb[0..k) = ob[0..k): a block's offsets copied once (the copies are checked
 * and used; the caller's may change under a concurrent writer).  A loop the compiler vectorises:
 * memcpy of the variable size became `rep movsq`, whose start-up cost twice a block of 256 words
 * was ~25% of equal's time on words (perf, Xeon VM). */
static inline void LM_CAT(SUF, _copy_offsets)(UOFF_T *restrict ca, UOFF_T *restrict cb, const OFF_T *restrict oa,
                                              const OFF_T *restrict ob, size_t k) {
  for (size_t i = 0; i < k; i++) {
    ca[i] = (UOFF_T)oa[i];
    cb[i] = (UOFF_T)ob[i];
  }
}

static lm_status RNG(eq)(void *ctx, size_t begin, size_t end) {
  const CTX(eq) *c = ctx;
  const uint8_t *da = c->da, *db = c->db;
  uint8_t *restrict out = c->out;
  const uint64_t dla = c->la, dlb = c->lb;
  const UOFF_T lima = dla > (uint64_t)OFF_MAX ? (UOFF_T)OFF_MAX : (UOFF_T)dla;
  const UOFF_T limb = dlb > (uint64_t)OFF_MAX ? (UOFF_T)OFF_MAX : (UOFF_T)dlb;
  const int same = da == db; /* one payload: a pair at one offset is equal without reading it */
  const int touch_on = lm_eq_touch_on();
  UOFF_T ca[LM_EQ_BLOCK + 1], cb[LM_EQ_BLOCK + 1];
  uint32_t w[LM_EQ_BLOCK];
  uint8_t lg[LM_EQ_BLOCK];
#if LM_HASH_HAVE_AVX2
  const int simd = lm_ops_simd_level();
#endif
  for (size_t b0 = begin; b0 < end; b0 += LM_EQ_BLOCK) {
    const size_t m = end - b0 < LM_EQ_BLOCK ? end - b0 : LM_EQ_BLOCK;
    /* the mode (only a guess from two offsets, read here and not trusted later) */
    const uint64_t span = (uint64_t)(UOFF_T)((UOFF_T)c->oa[b0 + m] - (UOFF_T)c->oa[b0]);
    if (span > LM_OFF_SHORT * (uint64_t)m) {
      /* long strings; the skipped pairs' bytes touched where they are long on average (lm_eq_touch) */
      const int touch = touch_on && span >= LM_EQ_TOUCH_MIN * (uint64_t)m;
      int bad;
#if LM_HASH_HAVE_AVX2
      if (!touch && simd == 2 && span < LM_EQ_MASKED_MAX * (uint64_t)m) /* (ops_avx2.c) */
        bad = LM_CAT(LM_CAT(lm_, SUF), _eq_stream_avx512)(c->oa, c->ob, da, db, lima, limb, same, out, b0, b0 + m);
      else
#endif
        /* touch as a literal: two copies of the loop */
        bad = touch ? LM_CAT(SUF, _eq_stream)(c->oa, c->ob, da, db, lima, limb, same, out, b0, b0 + m, 1)
                    : LM_CAT(SUF, _eq_stream)(c->oa, c->ob, da, db, lima, limb, same, out, b0, b0 + m, 0);
      if (bad) return LM_EINVAL;
      continue;
    }
    /* short strings: the offsets copied, the copies checked and every pair's first 16 bytes compared */
#if LM_HASH_HAVE_AVX2
    UOFF_T down;
    if (simd == 2) { /* the copy and the first pass in one (ops_avx2.c) */
      down = (UOFF_T)LM_CAT(LM_CAT(lm_, SUF), _eq_copy_prep_avx512)(c->oa + b0, c->ob + b0, m, ca, cb, w, lg);
    } else {
      LM_CAT(SUF, _copy_offsets)(ca, cb, c->oa + b0, c->ob + b0, m + 1);
      down = simd == 1 ? (UOFF_T)LM_CAT(LM_CAT(lm_, SUF), _eq_prep_avx2)(ca, cb, m, w, lg)
                       : (UOFF_T)LM_CAT(SUF, _eq_prep)(ca, cb, m, w, lg);
    }
#else
    LM_CAT(SUF, _copy_offsets)(ca, cb, c->oa + b0, c->ob + b0, m + 1);
    const UOFF_T down = LM_CAT(SUF, _eq_prep)(ca, cb, m, w, lg);
#endif
    if (down | (UOFF_T)(ca[m] > lima) | (UOFF_T)(cb[m] > limb)) return LM_EINVAL;
    /* the pairs [0, ks) have 16 bytes from their start inside both payloads */
    size_t ks = m;
    while (ks && ((uint64_t)ca[ks - 1] + 16 > dla || (uint64_t)cb[ks - 1] + 16 > dlb)) ks--;
    uint8_t *restrict o = out + b0;
    /* no branch: for strings many to a cache line, reading every pair costs less than a
     * mispredicted branch on their lengths */
#if defined(__GNUC__)
#pragma GCC unroll 4
#endif
    for (size_t k = 0; k < ks; k++) o[k] = (uint8_t)((lm_off_ne16(da + ca[k], db + cb[k]) & w[k]) == 0);
    for (size_t k = ks; k < m; k++) o[k] = LM_CAT(SUF, _eq_tail)(ca, cb, k, da, db, same);
    /* the equal-length pairs over 16 bytes whose first 16 matched (lg bit 1; few among short
     * strings: 8 flags a word): the rest of their bytes */
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (size_t j = 0; j < ks; j += 8) {
      uint64_t f = 0;
      if (j + 8 <= ks) {
        f = lm_off_load64(lg + j) & 0x0202020202020202ull;
      } else {
        for (size_t t = j; t < ks; t++) f |= (uint64_t)(lg[t] & 2u) << (8 * (t - j));
      }
      for (; f; f &= f - 1) LM_CAT(SUF, _eq_rest)(ca, cb, j + (size_t)(__builtin_ctzll(f) >> 3), da, db, same, o);
    }
#else
    for (size_t k = 0; k < ks; k++)
      if (lg[k] & 2u) LM_CAT(SUF, _eq_rest)(ca, cb, k, da, db, same, o);
#endif
  }
  return LM_OK;
}

/* Run fn over [0, n) split by weight: item i weighs (its bytes by offsets, read here
 * only to cut: a bad or racing value gives a worse cut, never a wrong read) plus
 * LM_CUT_ITEM_BYTES; documents vary from ~100 B to ~100 KB, so equal counts can
 * hold very unequal bytes (the corpus' first half of documents: 29% of them). */
#ifndef LM_CUT_ITEM_BYTES
#define LM_CUT_ITEM_BYTES 16
#endif
static lm_status LM_CAT(SUF, _by_bytes)(const lm_exec *e, const OFF_T *off, size_t n, lm_range_fn fn, void *ctx) {
  const size_t threads = lm_cut_threads(e, n);
  if (threads <= 1) return fn(ctx, 0, n);
  const size_t parts = lm_cut_parts(threads);
  size_t cut[LM_CUT_MAX + 1];
  const UOFF_T o0 = (UOFF_T)off[0];
  /* weight before item i: (off[i] - off[0]) + i * LM_CUT_ITEM_BYTES, non-decreasing for valid offsets */
#define LM_W(i) ((uint64_t)(UOFF_T)((UOFF_T)off[i] - o0) + (uint64_t)(i) * LM_CUT_ITEM_BYTES)
  const uint64_t total = LM_W(n);
  cut[0] = 0;
  cut[parts] = n;
  for (size_t p = 1; p < parts; p++) {
    const uint64_t want = lm_cut_at(total, p, parts);
    size_t lo = cut[p - 1], hi = n; /* the first i in [lo, n] with W(i) >= want */
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      if (LM_W(mid) < want) lo = mid + 1;
      else hi = mid;
    }
    cut[p] = lo;
  }
#undef LM_W
  return lm_cut_run(threads, parts, cut, fn, ctx);
}

lm_status FN(equal_checked)(const OFF_T *offsets_a, const uint8_t *data_a, size_t len_a, const OFF_T *offsets_b,
                            const uint8_t *data_b, size_t len_b, size_t n, uint8_t *out, const lm_exec *exec) {
  if (!offsets_a || !offsets_b || (n && !out) || (len_a && !data_a) || (len_b && !data_b)) return LM_EINVAL;
  if (n == 0)
    return offsets_a[0] >= 0 && (uint64_t)offsets_a[0] <= (uint64_t)len_a && offsets_b[0] >= 0 &&
                   (uint64_t)offsets_b[0] <= (uint64_t)len_b
               ? LM_OK
               : LM_EINVAL;
  CTX(eq) c = {offsets_a, offsets_b, data_a, data_b, (uint64_t)len_a, (uint64_t)len_b, out};
  lm_exec e = grain(exec, 32768);
  return LM_CAT(SUF, _by_bytes)(&e, offsets_a, n, RNG(eq), &c);
}

lm_status FN(equal)(const OFF_T *offsets_a, const uint8_t *data_a, const OFF_T *offsets_b, const uint8_t *data_b,
                    size_t n, uint8_t *out, const lm_exec *exec) {
  if (!offsets_a || !offsets_b) return LM_EINVAL;
  return FN(equal_checked)(offsets_a, data_a, LM_CAT(SUF, _trusted_len)(offsets_a, n), offsets_b, data_b,
                           LM_CAT(SUF, _trusted_len)(offsets_b, n), n, out, exec);
}

/* ---- hash64: a block of short strings on average (words): pass 1 checks its pairs, hashes
 * the strings of over 16 bytes in order and puts the others into (pointer, length) lists by
 * XXH3's length class, which lm_hash64_listed hashes after it (or, with AVX-512, 8 at a time);
 * a block of long strings on average (lines, documents): each hashed in order as its pair is
 * checked. */
typedef struct {
  const OFF_T *off;
  const uint8_t *data;
  uint64_t dlen;
  uint64_t seed;
  uint64_t *out;
} CTX(hash);

/* A block's m strings checked (non-decreasing, the last end <= lim) into (pointer, length) lists,
 * and each string's first 8 bytes where they lie inside the payload (0 elsewhere) into heads.
 * Non-zero when an offset is out of order or past lim: no string is then hashed. */
static inline int LM_CAT(SUF, _hash_list)(const OFF_T *off, size_t m, const uint8_t *base, UOFF_T lim,
                                          const uint8_t **ptrs, size_t *lens, uint64_t *heads) {
  UOFF_T down = 0;
  UOFF_T a = (UOFF_T)off[0];
  for (size_t k = 0; k < m; k++) {
    const UOFF_T z = (UOFF_T)off[k + 1];
    down |= (UOFF_T)(z < a);
    ptrs[k] = (const uint8_t *)((uintptr_t)base + (uintptr_t)a);
    lens[k] = (size_t)(UOFF_T)(z - a);
    heads[k] = 0;
    if (lim >= 8 && a <= lim - 8) memcpy(&heads[k], ptrs[k], 8);
    a = z;
  }
  return (down | (UOFF_T)(a > lim)) != 0;
}

static lm_status RNG(hash)(void *ctx, size_t begin, size_t end) {
  const CTX(hash) *c = ctx;
  const OFF_T *off = c->off;
  const UOFF_T lim = c->dlen > (uint64_t)OFF_MAX ? (UOFF_T)OFF_MAX : (UOFF_T)c->dlen;
  static const uint8_t empty = 0;
  const uint8_t *base = c->data ? c->data : &empty;
  const uint8_t *ptrs[LM_HASH_LIST_MAX];
  size_t lens[LM_HASH_LIST_MAX];
  uint16_t idx[4][LM_HASH_LIST_MAX];
#if LM_HASH_HAVE_AVX512
  const int v512 = lm_hash_uses_avx512();
  _Static_assert(LM_HASH_LIST_MAX <= LM_HASH_VIEWS_BLOCK, "a block fits lm_hash64_ptrs_avx512");
#endif
  /* XXH3's length class of a length (0: 1-3, 1: 4-8, 2: 9-16, 3: 0 or over 16) times 16:
   * the shift of its 16-bit counter in `cnt` */
  static const uint8_t shift_of[18] = {48, 0, 0, 0, 16, 16, 16, 16, 16, 32, 32, 32, 32, 32, 32, 32, 32, 48};
  for (size_t b0 = begin; b0 < end; b0 += LM_HASH_LIST_MAX) {
    const size_t m = end - b0 < LM_HASH_LIST_MAX ? end - b0 : LM_HASH_LIST_MAX;
#if LM_HASH_HAVE_AVX512
    /* AVX-512 and short strings (<= 16 bytes a string on average in this block, a guess
     * from its first and last offsets: words): the same check, then 8 strings a step
     * (hash_avx512.c); long strings (documents) take the class lists below */
    if (v512 && (UOFF_T)off[b0 + m] - (UOFF_T)off[b0] <= (UOFF_T)(16 * m)) {
      uint64_t heads[LM_HASH_LIST_MAX]; /* each string's first 8 bytes where inside the payload */
      if (LM_CAT(SUF, _hash_list)(off + b0, m, base, lim, ptrs, lens, heads)) return LM_EINVAL;
      lm_hash64_ptrs_avx512(ptrs, lens, heads, m, base + lim, c->seed, c->out + b0);
      continue;
    }
#endif
    /* long strings on average (lines, documents: over 16 bytes a string in this block):
     * every string hashed in order as its pair is checked (a <= z <= lim: nothing outside
     * the payload is read; a bad pair stops the call with LM_EINVAL), one pass and no lists:
     * 7.8-8.0 ns a line against 9.0-9.2 for the pairs checked into (pointer, length) lists
     * first and lm_hash64_many after (500k lines of the shared corpus, 18% of them <= 16
     * bytes: their class branch mispredicts less than the lists cost) */
    if ((UOFF_T)off[b0 + m] - (UOFF_T)off[b0] > (UOFF_T)(16 * m)) {
      const int level = lm_hash_long_level();
      UOFF_T a = (UOFF_T)off[b0];
      for (size_t k = 0; k < m; k++) {
        const UOFF_T z = (UOFF_T)off[b0 + k + 1];
        if (z < a || z > lim) return LM_EINVAL;
        c->out[b0 + k] =
            lm_hash64_inline((const uint8_t *)((uintptr_t)base + (uintptr_t)a), (size_t)(z - a), c->seed, level);
        a = z;
      }
      continue;
    }
    /* one pass: every offset of the block read once (a string's end is the next one's
     * start, the same value), its (pointer, length) kept and its index put in the list of
     * its length class.  The check: the block's offsets never decrease and its last one
     * is <= the payload's length (unsigned: a negative offset is huge, so it fails).
     * A string of over 16 bytes whose own pair is in bounds (a <= z <= lim) is hashed at
     * once, in order, so the payload streams in before the short lists read it (hashing
     * the short ones first made each a cache miss: 13 ns a line against 8); one whose
     * pair is out of bounds fails the block's check, so it is never hashed */
    UOFF_T down = 0;
    uint64_t cnt = 0; /* four 16-bit counters, one per class (at most 256 each) */
    UOFF_T a = (UOFF_T)off[b0];
    const int level = lm_hash_long_level();
    for (size_t k = 0; k < m; k++) {
      const UOFF_T z = (UOFF_T)off[b0 + k + 1];
      down |= (UOFF_T)(z < a);
      const size_t len = (size_t)(UOFF_T)(z - a);
      ptrs[k] = (const uint8_t *)((uintptr_t)base + (uintptr_t)a);
      lens[k] = len;
      if (len > 16 && a <= z && z <= lim) {
        c->out[b0 + k] = lm_hash64_any(ptrs[k], len, c->seed, level);
        a = z;
        continue;
      }
      const unsigned sh = shift_of[len < 17 ? len : 17];
      idx[sh >> 4][(cnt >> sh) & 0xFFFFu] = (uint16_t)k;
      cnt += (uint64_t)1 << sh;
      a = z;
    }
    if (down | (UOFF_T)(a > lim)) return LM_EINVAL;
    const size_t cn[4] = {(size_t)(cnt & 0xFFFFu), (size_t)((cnt >> 16) & 0xFFFFu), (size_t)((cnt >> 32) & 0xFFFFu),
                          (size_t)(cnt >> 48)};
    lm_hash64_listed(ptrs, lens, (const uint16_t(*)[LM_HASH_LIST_MAX])idx, cn, c->seed, c->out + b0);
  }
  return LM_OK;
}

lm_status FN(hash64_checked)(const OFF_T *offsets, size_t n, const uint8_t *data, size_t data_len, uint64_t seed,
                             uint64_t *out, const lm_exec *exec) {
  if (!offsets || (n && !out) || (data_len && !data)) return LM_EINVAL;
  if (n == 0) return offsets[0] >= 0 && (uint64_t)offsets[0] <= (uint64_t)data_len ? LM_OK : LM_EINVAL;
  CTX(hash) c = {offsets, data, (uint64_t)data_len, seed, out};
  lm_exec e = grain(exec, 4096);
  return LM_CAT(SUF, _by_bytes)(&e, offsets, n, RNG(hash), &c);
}

lm_status FN(hash64)(const OFF_T *offsets, size_t n, const uint8_t *data, uint64_t seed, uint64_t *out,
                     const lm_exec *exec) {
  return FN(hash64_checked)(offsets, n, data, LM_CAT(SUF, _trusted_len)(offsets, n), seed, out, exec);
}

/* ---- pad_bytes */
typedef struct {
  const OFF_T *off;
  const uint8_t *data;
  size_t max_len;
  int64_t pad, bos, eos;
  int64_t *tokens, *lengths;
} CTX(pad);

static lm_status RNG(pad)(void *ctx, size_t begin, size_t end) {
  const CTX(pad) *c = ctx;
  const size_t specials = (size_t)(c->bos >= 0) + (size_t)(c->eos >= 0);
  const size_t room = c->max_len > specials ? c->max_len - specials : 0;
  for (size_t i = begin; i < end; i++) {
    int64_t *row = c->tokens + i * c->max_len;
    size_t len = (size_t)(c->off[i + 1] - c->off[i]);
    if (len > room) len = room;
    const uint8_t *s = c->data + c->off[i];
    size_t k = 0;
    if (c->bos >= 0 && k < c->max_len) row[k++] = c->bos;
    for (size_t j = 0; j < len; j++) row[k++] = s[j];
    if (c->eos >= 0 && k < c->max_len) row[k++] = c->eos;
    c->lengths[i] = (int64_t)k;
    for (; k < c->max_len; k++) row[k] = c->pad;
  }
  return LM_OK;
}

lm_status FN(pad_bytes)(const OFF_T *offsets, size_t n, const uint8_t *data, size_t max_len, int64_t pad_id,
                        int64_t bos_id, int64_t eos_id, int64_t *tokens, int64_t *lengths, const lm_exec *exec) {
  if (!offsets || (n && !lengths) || (n && max_len && !tokens)) return LM_EINVAL;
  if (max_len && n > SIZE_MAX / max_len) return LM_EOVERFLOW;
  CTX(pad) c = {offsets, data, max_len, pad_id, bos_id, eos_id, tokens, lengths};
  lm_exec e = grain(exec, 8192);
  return lm_parallel_for(&e, n, RNG(pad), &c);
}

/* ---- gather */
lm_status FN(gather_offsets)(const OFF_T *offsets, size_t n, const int64_t *index, size_t m, OFF_T *out_offsets) {
  if (!offsets || !out_offsets || (m && !index)) return LM_EINVAL;
  uint64_t pos = 0;
  out_offsets[0] = 0;
  for (size_t k = 0; k < m; k++) {
    int64_t i = index[k];
    if (i < 0 || (uint64_t)i >= n) return LM_ERANGE;
    pos += (uint64_t)(offsets[i + 1] - offsets[i]);
    if (pos > (uint64_t)OFF_MAX) return LM_EOVERFLOW;
    out_offsets[k + 1] = (OFF_T)pos;
  }
  return LM_OK;
}

typedef struct {
  const OFF_T *off;
  const uint8_t *data;
  const int64_t *index;
  const OFF_T *out_off;
  uint8_t *out;
} CTX(gather);

static lm_status RNG(gather)(void *ctx, size_t begin, size_t end) {
  const CTX(gather) *c = ctx;
  for (size_t k = begin; k < end; k++) {
    size_t len = (size_t)(c->out_off[k + 1] - c->out_off[k]);
    if (len) memcpy(c->out + c->out_off[k], c->data + c->off[c->index[k]], len);
  }
  return LM_OK;
}

lm_status FN(gather_data)(const OFF_T *offsets, const uint8_t *data, const int64_t *index, size_t m,
                          const OFF_T *out_offsets, uint8_t *out_data, const lm_exec *exec) {
  if (!offsets || !out_offsets || (m && !index) || (out_offsets[m] && !out_data)) return LM_EINVAL;
  CTX(gather) c = {offsets, data, index, out_offsets, out_data};
  lm_exec e = grain(exec, 32768);
  return lm_parallel_for(&e, m, RNG(gather), &c);
}

/* ---- compact */
lm_status FN(compact_count)(const OFF_T *offsets, size_t n, const uint8_t *mask, size_t *out_n,
                            uint64_t *out_bytes) {
  if (!offsets || (n && !mask) || !out_n || !out_bytes) return LM_EINVAL;
  size_t k = 0;
  uint64_t bytes = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t keep = mask[i] != 0;
    k += keep;
    bytes += keep * (uint64_t)(offsets[i + 1] - offsets[i]);
  }
  *out_n = k;
  *out_bytes = bytes;
  return LM_OK;
}

lm_status FN(compact)(const OFF_T *offsets, size_t n, const uint8_t *data, const uint8_t *mask,
                      OFF_T *out_offsets, uint8_t *out_data) {
  if (!offsets || (n && !mask) || !out_offsets) return LM_EINVAL;
  size_t k = 0;
  uint64_t pos = 0;
  out_offsets[0] = 0;
  for (size_t i = 0; i < n; i++) {
    if (!mask[i]) continue;
    size_t len = (size_t)(offsets[i + 1] - offsets[i]);
    if (len) memcpy(out_data + pos, data + offsets[i], len);
    pos += len;
    out_offsets[++k] = (OFF_T)pos;
  }
  return LM_OK;
}

#undef FN
#undef CTX
#undef RNG
