/* Internal to hash.c / hash_avx2.c / hash_avx512_long.c (and the tests).  lm_hash64_many
 * hashes strings of more than 240 bytes with lm_hash64_avx512 when the CPU has AVX-512 F, else
 * with lm_hash64_avx2 when it has AVX2 (LM_NO_AVX512 / LM_NO_AVX2 not set in the environment
 * when first asked: lm_hash_long_level); lm_hash64_many_generic never does.  All give XXH3-64
 * bit for bit.  Thread-safe (pure). */
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
/* the same for AVX-512 F (hash_avx512_long.c); call only where lm_hash_long_level() is 2 */
uint64_t lm_hash64_avx512(const void *data, size_t len, uint64_t seed);
#else
#define LM_HASH_HAVE_AVX2 0
#endif
#ifdef XXH_INLINE_ALL
/* XXH3-64 of p[0..len), inlined where <xxhash.h> was included with XXH_INLINE_ALL before this
 * header (hash.c, ops_offsets.c): over 240 bytes, XXH3's vector loop in its AVX-512 copy where
 * level is 2, its AVX2 copy where level is 1 (level = lm_hash_long_level()), libxxhash's
 * otherwise; bit-identical every way.  p may be NULL when len == 0.  lm_hash64_any is the same
 * as a call. */
static inline uint64_t lm_hash64_inline(const uint8_t *p, size_t len, uint64_t seed, int level) {
  static const uint8_t empty = 0;
  (void)level; /* unused where no vector copy is built */
#if LM_HASH_HAVE_AVX2
  if (level && len > 240) return level > 1 ? lm_hash64_avx512(p, len, seed) : lm_hash64_avx2(p, len, seed);
#endif
  return (uint64_t)XXH3_64bits_withSeed(len ? p : &empty, len, (XXH64_hash_t)seed);
}
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
/* XXH3-64 of p[0..len) for any len (p may be NULL when len == 0), with the vector copy of
 * level (= lm_hash_long_level(): 2 AVX-512, 1 AVX2, 0 none) over 240 bytes: for a caller that
 * hashes long strings in order as it checks them (ops_offsets_impl.h's hash64).  Thread-safe
 * (pure). */
uint64_t lm_hash64_any(const uint8_t *p, size_t len, uint64_t seed, int level);
/* 1 when the environment variable `name` is set and does not start with '0': the LM_NO_AVX2 /
 * LM_NO_AVX512 switches of every runtime-dispatched kernel (hash, ops, minhash).  Thread-safe
 * as getenv is (nothing here sets the environment). */
int lm_env_switch_on(const char *name);
/* 1 when the CPU has AVX2 and LM_NO_AVX2 was not set (read once): the AVX2 switch of the hash and
 * of jsonl_scan.c's string runs. */
int lm_cpu_avx2_on(void);
/* 1 when lm_hash64_many uses the AVX2 copy (the CPU has AVX2 and LM_NO_AVX2 was not set). */
int lm_hash_uses_avx2(void);
/* Which copy of XXH3's loop over 240 bytes runs: 2 the AVX-512 one (the CPU has AVX-512 F, and
 * lm_hash_uses_avx2() with LM_NO_AVX512 not set), 1 the AVX2 one (lm_hash_uses_avx2()), 0 the
 * generic one; read once.  The level argument of lm_hash64_inline / lm_hash64_any. */
int lm_hash_long_level(void);

/* hash_avx512.c: XXH3-64 of the inline views (len <= 12, bytes in the view) 8 at a
 * time.  For the n <= LM_HASH_VIEWS_BLOCK views at `views` (lm_string_view[n]): out[i] =
 * XXH3_64bits_withSeed(bytes, len, seed) when views[i].len <= 12; the indices of the
 * others (len > 12, whose bytes are in a payload) go to rest[] in order (room for n + 8:
 * it is written 8 entries at a time) and their out[i] is left to the caller; the return
 * value is their count.  *pad is made non-zero when an inline view has a non-zero byte at
 * or past its length (the padding, which must be 0).  `pending` (may be NULL): long strings
 * of an earlier block that the caller checked (and prefetched), hashed during this call (one
 * a step of the vector loop, in scalar code) and emptied.  Call only when
 * lm_hash_uses_avx512() (the CPU has AVX-512 F/DQ/BW/VL, VBMI and VBMI2, and neither
 * LM_NO_AVX512 nor LM_NO_AVX2 was set).  Thread-safe (pure; `pending` is the caller's). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LM_HASH_HAVE_AVX512 1
#define LM_HASH_VIEWS_BLOCK 256 /* n <= this */
#define LM_HASH_LONGS_MAX 128   /* lm_hash_longs holds at most this many */
/* Checked long strings of one block of views: out[i[k]] = XXH3-64 of p[k][0..len[k]), k < n. */
typedef struct {
  uint64_t *out;
  size_t n;
  const uint8_t *p[LM_HASH_LONGS_MAX];
  uint32_t len[LM_HASH_LONGS_MAX];
  uint8_t i[LM_HASH_LONGS_MAX];
} lm_hash_longs;
size_t lm_hash64_views_avx512(const void *views, size_t n, uint64_t seed, uint64_t *out, uint8_t *rest,
                              uint64_t *pad, lm_hash_longs *pending);
/* Hashes l's strings into l->out and empties l. */
void lm_hash64_longs(lm_hash_longs *l, uint64_t seed);
/* The same kernel on (pointer, length) pairs (the offsets layout): out[i] = XXH3-64 of
 * ptrs[i][0..lens[i]) for i < n <= LM_HASH_VIEWS_BLOCK.  heads[i] must hold the 8 bytes at
 * ptrs[i] (little-endian load) wherever ptrs[i] + 8 <= end (the payload's end; elsewhere
 * anything): a string of 1..8 bytes there is hashed from it in vector lanes; every other
 * string is read only within its bytes.  Same conditions as lm_hash64_views_avx512. */
void lm_hash64_ptrs_avx512(const uint8_t *const *ptrs, const size_t *lens, const uint64_t *heads, size_t n,
                           const uint8_t *end, uint64_t seed, uint64_t *out);
#else
#define LM_HASH_HAVE_AVX512 0
#endif
int lm_hash_uses_avx512(void);

#ifdef __cplusplus
}
#endif
#endif
