/* Internal to ops_offsets.c / ops_avx2.c (and the tests): the AVX2 / AVX-512
 * copies of the first passes of the offsets-layout equality ops (declared where
 * hash_internal.h says an AVX2 copy is built).  lm_oXX_len_eq_avx2 checks the
 * pairs of [b0, b1) (0 <= a <= z <= lim) and writes out[i] = valid and of length
 * plen; returns -1 when some pair is invalid, else the number of 1s written
 * (b1 - b0 <= INT_MAX).  The eq_prep copies follow
 * LM_EQ_PREP below.  All thread-safe (pure). */
#ifndef LUMINAMOON_OPS_INTERNAL_H
#define LUMINAMOON_OPS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "hash_internal.h"
#include "luminamoon/string_view.h"
#include "luminamoon/parallel.h"

#if LM_HASH_HAVE_AVX2
int lm_o32_len_eq_avx2(const int32_t *restrict off, uint8_t *restrict out, size_t b0, size_t b1, uint32_t lim,
                       uint32_t plen);
int lm_o64_len_eq_avx2(const int64_t *restrict off, uint8_t *restrict out, size_t b0, size_t b1, uint64_t lim,
                       uint64_t plen);
/* The same with AVX-512 F/BW/VL/DQ (lm_ops_simd_level() == 2), 64 pairs a step, and the positions
 * (i - b0) of the pairs marked 1, in order, in cand[0..hits) (cand has room for b1 - b0 + 16
 * entries; b1 - b0 <= 65536). */
int lm_o32_len_eq_cand_avx512(const int32_t *restrict off, uint8_t *restrict out, size_t b0, size_t b1,
                              uint32_t lim, uint32_t plen, uint16_t *restrict cand);
int lm_o64_len_eq_cand_avx512(const int64_t *restrict off, uint8_t *restrict out, size_t b0, size_t b1,
                              uint64_t lim, uint64_t plen, uint16_t *restrict cand);
int lm_o32_eq_prep_avx2(const uint32_t *restrict ca, const uint32_t *restrict cb, size_t m, uint32_t *restrict w,
                        uint8_t *restrict lg);
int lm_o64_eq_prep_avx2(const uint64_t *restrict ca, const uint64_t *restrict cb, size_t m, uint32_t *restrict w,
                        uint8_t *restrict lg);
int lm_o32_eq_prep_avx512(const uint32_t *restrict ca, const uint32_t *restrict cb, size_t m, uint32_t *restrict w,
                          uint8_t *restrict lg);
int lm_o64_eq_prep_avx512(const uint64_t *restrict ca, const uint64_t *restrict cb, size_t m, uint32_t *restrict w,
                          uint8_t *restrict lg);
/* A short-strings block's copies and first pass in one (AVX-512 F/BW/VL/DQ, 32-bit offsets):
 * ca[0..m] = oa[0..m], cb[0..m] = ob[0..m] (each offset loaded once, the copies the values
 * checked), then w and lg as LM_EQ_PREP over the copies; returns non-zero when an offset
 * decreases.  Reads oa / ob [0, m] only. */
int lm_o32_eq_copy_prep_avx512(const int32_t *restrict oa, const int32_t *restrict ob, size_t m,
                               uint32_t *restrict ca, uint32_t *restrict cb, uint32_t *restrict w,
                               uint8_t *restrict lg);
int lm_o64_eq_copy_prep_avx512(const int64_t *restrict oa, const int64_t *restrict ob, size_t m,
                               uint64_t *restrict ca, uint64_t *restrict cb, uint32_t *restrict w,
                               uint8_t *restrict lg);
/* equal over long strings with AVX-512 F/BW/VL/DQ (ops_offsets_impl.h's _eq_stream without touch,
 * same contract: pairs [b0, b1), each checked (a0 <= a1 <= lim) before its bytes are read, a pair
 * at one offset of one payload (same) equal unread past 128 bytes; returns non-zero when a pair is
 * invalid): the pairs checked and their lengths compared 16 (8) at a time, then only the
 * equal-length ones compared, their first 128 bytes by two masked 64-byte loads a side (no branch
 * on the length, no call), the rest by memcmp (ops_avx2.c). */
#define LM_EQ_MASKED_MAX 256 /* taken in blocks averaging under this many bytes a string (documents: memcmp) */
int lm_o32_eq_stream_avx512(const int32_t *restrict oa, const int32_t *restrict ob, const uint8_t *da,
                            const uint8_t *db, uint32_t lima, uint32_t limb, int same, uint8_t *restrict out,
                            size_t b0, size_t b1);
int lm_o64_eq_stream_avx512(const int64_t *restrict oa, const int64_t *restrict ob, const uint8_t *da,
                            const uint8_t *db, uint64_t lima, uint64_t limb, int same, uint8_t *restrict out,
                            size_t b0, size_t b1);
/* Pass 1 of lm_views_equal (ops_views.c's pairs_equal: out[i] = 0, 1, or 2 for a long pair
 * whose payloads must decide) for the first n - n % 16 pairs, 16 a step: returns how many it
 * did, adds the number of 2s to *longs and ORs non-zero into *pad when an inline view of
 * either side is not zero-padded. */
size_t lm_views_eq_pass1_avx512(const lm_string_view *a, const lm_string_view *b, uint8_t *out, size_t n,
                                size_t *longs, uint64_t *pad);
/* lm_views_filter_prefix's pass for a prefix of at most 4 bytes (ops_views.c's filter_range) over
 * views[0, n - n % 4), four a register: the kept views (len >= plen and the first 4 bytes & pmask
 * == pword) stored at o[*k], o[*k + 1], .. in order; every step stores 64 bytes at o + *k, so o
 * needs room for the views done.  Returns how many it did. */
size_t lm_views_filter_heads_avx512(const lm_string_view *views, size_t n, lm_string_view *o, size_t *k,
                                    uint32_t plen, uint32_t pword, uint32_t pmask);
/* 2 when the CPU has AVX-512 F/BW/VL/DQ and neither LM_NO_AVX512 nor LM_NO_AVX2 is set,
 * 1 with AVX2 (LM_NO_AVX2 not set), else 0; read once.  Thread-safe. */
int lm_ops_simd_level(void);
#endif

/* The first pass of equal over one block's private copies of both sides' offsets
 * ca[0..m], cb[0..m] (ops_offsets_impl.h): for each pair k, w[k] = the bits of a
 * 16-byte compare's "differs" mask (lm_off_ne16: bit j for byte j, bits 16..31
 * always set) that must be clear for the pair to be equal as far as 16 bytes
 * go: the low min(len, 16) bits when the lengths are equal, all 32 when not;
 * lg[k] bit 0 = equal lengths, bit 1 = equal lengths over 16 bytes (the rest to
 * compare later).  Returns non-zero when an offset decreases (ca or cb).
 * Branch-free, so the compiler vectorises it (8 pairs a step in the AVX2 copy,
 * 16 in the AVX-512 one). */
#define LM_EQ_PREP(NAME, UOFF_T)                                                                                  \
  int NAME(const UOFF_T *restrict ca, const UOFF_T *restrict cb, size_t m, uint32_t *restrict w,                  \
           uint8_t *restrict lg) {                                                                                \
    UOFF_T down = 0;                                                                                              \
    for (size_t k = 0; k < m; k++) {                                                                              \
      const UOFF_T la = ca[k + 1] - ca[k], lb = cb[k + 1] - cb[k];                                                \
      down |= (UOFF_T)(ca[k + 1] < ca[k]) | (UOFF_T)(cb[k + 1] < cb[k]);                                          \
      const uint32_t lm = la >= 16 ? 0xFFFFu : ((uint32_t)1 << (uint32_t)(la & 15)) - 1u;                         \
      w[k] = la == lb ? lm : 0xFFFFFFFFu;                                                                         \
      lg[k] = (uint8_t)((la == lb) | (((la == lb) & (la > 16)) << 1));                                            \
    }                                                                                                             \
    return down != 0;                                                                                             \
  }

/* Work split for the element-wise ops (ops_offsets_impl.h, ops_views.c): the threads
 * lm_parallel_for would use for n items at the exec's grain (lm_cut_threads), and
 * LM_CUT_TASKS tasks a thread handed out dynamically (lm_parallel_tasks: the calling
 * thread and the pool's workers take the next task from one atomic counter, so a
 * worker that wakes late, or runs slower on this VM's shared memory, takes fewer;
 * a call of 20-40 us loses ~half the wake-up instead of all of it).  The caller
 * fills cut[0..parts] (cut[0] = 0, cut[parts] = n, non-decreasing): by count for
 * ops whose cost is per string (lm_cut_even), by weight for ops whose cost grows
 * with the bytes (equal, hash64: documents vary from ~100 B to ~100 KB, and the
 * shared corpus' first half of documents holds 29% of its bytes); task t is the
 * items [cut[t], cut[t + 1]).  Thread-safe. */
#define LM_CUT_THREADS_MAX 64
#define LM_CUT_TASKS 4
#define LM_CUT_MAX (LM_CUT_THREADS_MAX * LM_CUT_TASKS)
typedef struct {
  lm_range_fn fn;
  void *ctx;
  const size_t *cut;
} lm_cut_ctx;

static inline lm_status lm_cut_task(void *arg, size_t worker, size_t t) {
  const lm_cut_ctx *c = (const lm_cut_ctx *)arg;
  (void)worker;
  return c->cut[t + 1] > c->cut[t] ? c->fn(c->ctx, c->cut[t], c->cut[t + 1]) : LM_OK;
}

static inline size_t lm_cut_threads(const lm_exec *e, size_t n) {
  if (e->num_threads <= 1) return 1;
  size_t t = (size_t)e->num_threads < LM_CUT_THREADS_MAX ? (size_t)e->num_threads : LM_CUT_THREADS_MAX;
  const size_t by_grain = n / (e->min_items_per_thread ? e->min_items_per_thread : 16384);
  if (by_grain < t) t = by_grain ? by_grain : 1;
  return t;
}

/* the tasks for `threads` threads (<= LM_CUT_MAX) */
static inline size_t lm_cut_parts(size_t threads) { return threads * LM_CUT_TASKS; }

/* Guided sizes: task t of P holds a share P - t of P + (P - 1) + ... + 1 (big tasks first,
 * small ones last, so the threads finish within a small task of each other); the
 * boundary before task p is x * (p * P - p * (p - 1) / 2) / (P * (P + 1) / 2) of a total x,
 * computed without overflow (P <= LM_CUT_MAX). */
static inline uint64_t lm_cut_at(uint64_t x, size_t p, size_t parts) {
  const uint64_t num = (uint64_t)p * parts - (p ? (uint64_t)p * (p - 1) / 2 : 0);
  const uint64_t den = (uint64_t)parts * (parts + 1) / 2;
  return x / den * num + x % den * num / den;
}

static inline lm_status lm_cut_run(size_t threads, size_t parts, const size_t *cut, lm_range_fn fn, void *ctx) {
  lm_cut_ctx c = {fn, ctx, cut};
  return lm_parallel_tasks(threads, parts, lm_cut_task, &c);
}

/* fn over [0, n) in tasks of guided counts (one call in the calling thread with one thread) */
static inline lm_status lm_cut_even(const lm_exec *e, size_t n, lm_range_fn fn, void *ctx) {
  const size_t threads = lm_cut_threads(e, n);
  if (threads <= 1) return fn(ctx, 0, n);
  const size_t parts = lm_cut_parts(threads);
  size_t cut[LM_CUT_MAX + 1];
  for (size_t p = 0; p <= parts; p++) cut[p] = (size_t)lm_cut_at(n, p, parts);
  return lm_cut_run(threads, parts, cut, fn, ctx);
}

/* A pair of different lengths needs none of its bytes, but skipping them costs more than reading
 * them where strings are long: the equal pairs then lie one or more skipped strings apart, and the
 * hardware prefetchers, which follow a sequential stream, stop at each gap and start again after it.
 * lm_eq_touch prefetches every 64-byte step of a skipped string of at least LM_EQ_TOUCH_MIN bytes
 * ([p, p + len) lies in its payload), so the memory sees one stream.  bench_views_eq docs (the same
 * arrays, variants interleaved, 9 rounds, Dec 2): a per-pair loop 63-84 ns a document, the same
 * loop touching the skipped strings 51-55 (prefetch) / 55-58 (a load of one byte a line), touching
 * only their last 128-384 bytes 53-84, one memcmp of both whole payloads 53-61.  equal on offsets
 * (ops_offsets_impl.h) touches only in blocks whose strings average LM_EQ_TOUCH_MIN bytes or more,
 * equal on views (ops_views.c) only while the last equal-length pair was that long: lines (~48
 * bytes) lie a cache line apart at most, and the offsets loop with the touch branch measured ~8%
 * slower on them than without it (interleaved). */
#define LM_EQ_TOUCH_MIN 128
/* Whether equality touches the skipped pairs' bytes at all: the gain above was measured on an AMD
 * EPYC VM (32 MB L3); on an Intel Xeon VM (105 MB L3, Dec 2) the same touching cost 30-40%
 * (bench_views_eq docs, touching and not built side by side, interleaved, 2 x 9 rounds: views
 * 114-130 against 77-99 ns a document, offsets 100-117 against 71-97, a plain per-pair loop 69-95;
 * the corpus repeated 4 times, 2 x 189 MB, beyond the L3: the same order).  So: on AMD CPUs only;
 * LM_EQ_TOUCH=1 / LM_EQ_TOUCH=0 in the environment forces it on / off (read once);
 * lm_eq_set_touch(0 or 1) forces it for the tests, -1 gives the choice back.  Thread-safe. */
int lm_eq_touch_on(void);
void lm_eq_set_touch(int on);
/* How far ahead of each pair equal's in-order loop (long strings) prefetches one line of both
 * sides' payloads.  Lines of the corpus (~48 bytes), bench_views_eq lines, one thread: the
 * offsets kernel 10.9-11.6 -> 7.2-8.1 ns a pair at 2-4 KB (the plain per-pair loop 9.4-10.6);
 * 256-512 bytes gained less, 8-16 KB no more; documents neither gained nor lost.  One line per
 * pair is enough: a loop prefetching every line of the stream made it slower (13-15 ns; its
 * trip count, 0 or 1 or 2 a pair, mispredicts). */
#define LM_EQ_AHEAD 2048
static inline void lm_eq_touch(const uint8_t *p, uint64_t len) {
#if defined(__GNUC__)
  if (len >= LM_EQ_TOUCH_MIN)
    for (uint64_t k = 0; k < len; k += 64) __builtin_prefetch((const void *)(p + k));
#else
  (void)p;
  (void)len;
#endif
}
/* The same by loads (one byte a step, their sum returned for lm_eq_keep): the views kernel's pass 2
 * measured 64.9-69.1 ns a document with loads against 71.9-74.9 with prefetches, the offsets kernel
 * 56.6-63.6 against 51.4-55.4 (bench_views_eq docs, the two builds alternated three times). */
static inline uint64_t lm_eq_touch_read(const uint8_t *p, uint64_t len) {
  uint64_t s = 0;
  if (len >= LM_EQ_TOUCH_MIN)
    for (uint64_t k = 0; k < len; k += 64) s += p[k];
  return s;
}
static inline void lm_eq_keep(uint64_t v) { /* v's loads are kept: v is an input of an empty asm */
#if defined(__GNUC__)
  __asm__ __volatile__("" : : "r"(v));
#else
  volatile uint64_t sink = v;
  (void)sink;
#endif
}
#if LM_HASH_HAVE_AVX2
#include <immintrin.h>
/* 1 when p[0..k) == q[0..k) for k = min(m, 128), by two masked 64-byte loads a side: no call and no
 * branch on m; a masked-off byte is never read (p and q need only k readable bytes).  Equality's
 * long-string passes with AVX-512 BW (lm_oXX_eq_stream_avx512, ops_views.c's dense pass 2); the
 * caller compares past 128 bytes. */
__attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512dq"))) static inline unsigned lm_eq_first128_avx512(
    const uint8_t *p, const uint8_t *q, uint64_t m) {
  const uint64_t m1 = m < 64 ? m : 64, r2 = m - m1, m2 = r2 < 64 ? r2 : 64;
  const __mmask64 k1 = m1 == 64 ? ~0ull : (1ull << m1) - 1, k2 = m2 == 64 ? ~0ull : (1ull << m2) - 1;
  __mmask64 ne = _mm512_mask_cmpneq_epi8_mask(k1, _mm512_maskz_loadu_epi8(k1, p), _mm512_maskz_loadu_epi8(k1, q));
  const void *p64 = (const void *)((uintptr_t)p + 64), *q64 = (const void *)((uintptr_t)q + 64); /* k2: none past */
  ne |= _mm512_mask_cmpneq_epi8_mask(k2, _mm512_maskz_loadu_epi8(k2, p64), _mm512_maskz_loadu_epi8(k2, q64));
  return ne == 0;
}
#endif
#endif
