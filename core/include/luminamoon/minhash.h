/* luminamoon/minhash.h — MinHash signatures identical to datatrove 0.10.1's
 * MinhashDedupSignature (pipeline/dedup/minhash.py) with its default
 * MinhashConfig (n_grams 5, 14 buckets x 8 hashes, seed 1, XXH64, precision 64).
 *
 * Per document (lm_minhash_doc):
 *   1. simplify_text with the default TextNormConfig (datatrove/utils/text.py):
 *      Python str.lower(); every \p{Nd}+([.,،٫⎖⎗⎘]\p{Nd}+)? -> "0"; every
 *      character of datatrove's PUNCTUATION string -> " "; strip, every run of
 *      Python whitespace (str.isspace) -> one " "; NFD, characters of category
 *      Mn removed; strip.  (Tables generated from Python's unicodedata / the
 *      `regex` module: core/src/minhash_tables.c, scripts/gen_minhash_tables.py.)
 *   2. words: spaCy's English tokenizer (`spacy.blank("en")`, the same C
 *      tokenizer the QualityFilter uses), whitespace tokens dropped.
 *   3. shingles: every run of n_grams consecutive words, joined by one " ",
 *      hashed with XXH64 (seed 0) of its UTF-8 bytes (XXH32 for precision 32).
 *      A document with fewer than n_grams words has NO shingle (datatrove's
 *      ngrams() yields nothing then, and datatrove writes no signature for it).
 *   4. signature[j] = min over shingles h of ((h * a[j] + b[j]) mod 2^64)
 *      mod (2^61 - 1)   — numpy's uint64 wrap-around, then the Mersenne
 *      modulus (reduced by shift/mask, no division); for precision 32 each
 *      value is masked to its low 32 bits BEFORE the minimum (as datatrove).
 *   a[], b[]: numpy.random.RandomState(seed).randint(1, 2^61-1, uint64, H)
 *   then .randint(0, 2^61-1, uint64, H) (MT19937 + numpy's legacy masked
 *   rejection sampling, implemented here; H = num_buckets * hashes_per_bucket).
 *
 * Documents without shingles: every signature value is LM_MINHASH_EMPTY
 * (UINT64_MAX; -1 as int64).  Real values are < 2^61 - 1 (precision 64) or
 * < 2^32 (precision 32), so the marker is unambiguous.  Consumers (LSH
 * buckets, clustering) must skip such documents: datatrove never puts them in
 * a bucket, so they are never duplicates.
 *
 * Input text is UTF-8.  Invalid UTF-8 is not an error: each byte that does not
 * start a valid sequence is read as U+FFFD (documented, deterministic; Python
 * strings cannot hold such bytes, so there is no reference to match).  A
 * document longer than LM_MINHASH_MAX_DOC_BYTES gives LM_ETOOBIG.
 *
 * Thread-safety: an lm_minhash is immutable after creation; any number of
 * threads may use one concurrently, each with its own lm_minhash_scratch.
 * Ownership: the caller owns what it creates and destroys it; destroy
 * functions accept NULL.
 */
#ifndef LUMINAMOON_MINHASH_H
#define LUMINAMOON_MINHASH_H

#include <stddef.h>
#include <stdint.h>

#include "luminamoon/batch.h"
#include "luminamoon/parallel.h"
#include "luminamoon/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LM_MINHASH_EMPTY UINT64_MAX
#define LM_MINHASH_PRIME ((UINT64_C(1) << 61) - 1)
/* Largest document accepted (bytes): 1 GiB. */
#define LM_MINHASH_MAX_DOC_BYTES (UINT64_C(1) << 30)

typedef struct lm_minhash_params {
  uint32_t n_grams;           /* >= 1 (default 5) */
  uint32_t num_buckets;       /* >= 1 (default 14) */
  uint32_t hashes_per_bucket; /* >= 1 (default 8); num_buckets * hashes_per_bucket <= 65536 */
  uint32_t precision;         /* 64 (XXH64) or 32 (XXH32) (default 64) */
  uint64_t seed;              /* 0 .. 2^32-1, as numpy.random.RandomState accepts (default 1) */
} lm_minhash_params;

typedef struct lm_minhash lm_minhash;
typedef struct lm_minhash_scratch lm_minhash_scratch;

/* Fill *p with datatrove's defaults (5, 14, 8, 64, seed 1).  LM_EINVAL on NULL. */
lm_status lm_minhash_params_default(lm_minhash_params *p);

/* Validate *p, draw a[] and b[] and build the tokenizer's tables.
 * LM_EINVAL (NULL, a value out of its domain), LM_ENOMEM.  *p is copied; *out is owned by the
 * caller and immutable: any number of threads may use it at once (each with its own scratch).
 * lm_minhash_destroy frees it (NULL is ignored; not while a call uses it). */
lm_status lm_minhash_create(const lm_minhash_params *p, lm_minhash **out);
void lm_minhash_destroy(lm_minhash *m);

/* num_buckets * hashes_per_bucket (0 for NULL). */
size_t lm_minhash_num_hashes(const lm_minhash *m);
/* The parameters it was created with.  LM_EINVAL on NULL. */
lm_status lm_minhash_get_params(const lm_minhash *m, lm_minhash_params *p);
/* The permutation parameters (num_hashes values each), owned by m, valid
 * until lm_minhash_destroy.  NULL for NULL. */
const uint64_t *lm_minhash_a(const lm_minhash *m);
const uint64_t *lm_minhash_b(const lm_minhash *m);

/* Per-thread scratch (grows with the largest document seen; reuse it).
 * A scratch may be used with any lm_minhash, by one thread at a time.  Owned by the caller:
 * lm_minhash_scratch_destroy frees it and every buffer it holds (NULL is ignored), which ends
 * the life of pointers returned into it.  Create: LM_EINVAL (NULL out), LM_ENOMEM. */
lm_status lm_minhash_scratch_create(lm_minhash_scratch **out);
void lm_minhash_scratch_destroy(lm_minhash_scratch *s);

/* One document -> sig[0 .. num_hashes).  *n_shingles (optional, may be NULL)
 * receives the number of shingles (0: sig is all LM_MINHASH_EMPTY).
 * Safe to call from any thread on a shared const m with a private scratch.
 * LM_EINVAL (NULL m/s/sig, or NULL text with len > 0), LM_ETOOBIG, LM_ENOMEM. */
lm_status lm_minhash_doc(const lm_minhash *m, lm_minhash_scratch *s, const uint8_t *text, size_t len,
                         uint64_t *sig, size_t *n_shingles);

/* All documents: out[i * num_hashes + j].  has_sig (optional, n entries):
 * 1 when document i has at least one shingle, else 0.  Uses exec's threads
 * (NULL: one).  Output does not depend on the thread count.  Errors as
 * lm_minhash_doc plus LM_EINVAL for invalid docs; on error out is unspecified. */
lm_status lm_minhash_signatures(const lm_minhash *m, const lm_docs *docs, uint64_t *out, uint8_t *has_sig,
                                const lm_exec *exec);

/* ---- the building blocks (exposed for the torch operator and the tests) ---- */

/* The shingle hashes of one document (steps 1-3), in n-gram order (not
 * deduplicated).  *hashes points into s (valid until the next call with s).
 * XXH32 values are zero-extended for precision 32.  Errors and thread rules as
 * lm_minhash_doc. */
lm_status lm_minhash_shingles(const lm_minhash *m, lm_minhash_scratch *s, const uint8_t *text, size_t len,
                              const uint64_t **hashes, size_t *n);

/* simplify_text (step 1) into s; *out points into s (valid until the next
 * call with s), *out_len bytes of valid UTF-8.  LM_EINVAL (NULL s, out or out_len; NULL text
 * with len > 0), LM_ETOOBIG (len > LM_MINHASH_MAX_DOC_BYTES), LM_ENOMEM.  One thread at a time
 * per scratch. */
lm_status lm_minhash_simplify(lm_minhash_scratch *s, const uint8_t *text, size_t len, const uint8_t **out,
                              size_t *out_len);

/* Step 4 for one document: sig[j] = min_i perm_j(h[i]) (LM_MINHASH_EMPTY when n == 0).
 * precision 64 or 32.  Pure; thread-safe.  LM_EINVAL on NULL (h may be NULL when n == 0). */
lm_status lm_minhash_from_hashes(const uint64_t *a, const uint64_t *b, size_t num_hashes, uint32_t precision,
                                 const uint64_t *h, size_t n, uint64_t *sig);

/* x mod (2^61 - 1) for any uint64 x, without division. */
static inline uint64_t lm_mod_mersenne61(uint64_t x) {
  uint64_t r = (x & LM_MINHASH_PRIME) + (x >> 61);
  return r >= LM_MINHASH_PRIME ? r - LM_MINHASH_PRIME : r;
}

/* numpy.random.RandomState(seed).randint(1, 2^61-1, dtype=uint64, size=n) into a,
 * then .randint(0, 2^61-1, dtype=uint64, size=n) into b.  LM_EINVAL on NULL
 * or seed > 2^32-1. */
lm_status lm_minhash_draw_params(uint64_t seed, size_t n, uint64_t *a, uint64_t *b);

/* The raw generator, for tests: the first n 32-bit outputs of MT19937 seeded
 * with init_genrand(seed) (numpy's RandomState(seed), C++ std::mt19937(seed)) into the caller's
 * out[0..n).  LM_EINVAL on NULL out (n > 0).  Pure, thread-safe. */
lm_status lm_mt19937_outputs(uint32_t seed, size_t n, uint32_t *out);
/* numpy.random.RandomState(seed).randint(low, high, dtype=np.uint64, size=n)
 * (legacy masked rejection sampling).  LM_EINVAL when low >= high or NULL out. */
lm_status lm_randint_uint64_legacy(uint32_t seed, uint64_t low, uint64_t high, size_t n, uint64_t *out);

#ifdef __cplusplus
}
#endif
#endif
