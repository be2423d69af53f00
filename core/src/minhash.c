/* minhash.c — MinHash signatures (see luminamoon/minhash.h).  Work in progress. */
#include "luminamoon/minhash.h"

#include <stdlib.h>
#include <string.h>

lm_status lm_minhash_params_default(lm_minhash_params *p) {
  if (!p) return LM_EINVAL;
  p->n_grams = 5;
  p->num_buckets = 14;
  p->hashes_per_bucket = 8;
  p->precision = 64;
  p->seed = 1;
  return LM_OK;
}

lm_status lm_minhash_create(const lm_minhash_params *p, lm_minhash **out) {
  if (out) *out = NULL;
  (void)p;
  return LM_ESTATE;
}
void lm_minhash_destroy(lm_minhash *m) { (void)m; }
size_t lm_minhash_num_hashes(const lm_minhash *m) { (void)m; return 0; }
lm_status lm_minhash_get_params(const lm_minhash *m, lm_minhash_params *p) { (void)m; (void)p; return LM_EINVAL; }
const uint64_t *lm_minhash_a(const lm_minhash *m) { (void)m; return NULL; }
const uint64_t *lm_minhash_b(const lm_minhash *m) { (void)m; return NULL; }
lm_status lm_minhash_scratch_create(lm_minhash_scratch **out) { if (out) *out = NULL; return LM_ESTATE; }
void lm_minhash_scratch_destroy(lm_minhash_scratch *s) { (void)s; }
lm_status lm_minhash_doc(const lm_minhash *m, lm_minhash_scratch *s, const uint8_t *text, size_t len,
                         uint64_t *sig, size_t *n_shingles) {
  (void)m; (void)s; (void)text; (void)len; (void)sig; (void)n_shingles;
  return LM_ESTATE;
}
lm_status lm_minhash_signatures(const lm_minhash *m, const lm_docs *docs, uint64_t *out, uint8_t *has_sig,
                                const lm_exec *exec) {
  (void)m; (void)docs; (void)out; (void)has_sig; (void)exec;
  return LM_ESTATE;
}
lm_status lm_minhash_shingles(const lm_minhash *m, lm_minhash_scratch *s, const uint8_t *text, size_t len,
                              const uint64_t **hashes, size_t *n) {
  (void)m; (void)s; (void)text; (void)len; (void)hashes; (void)n;
  return LM_ESTATE;
}
lm_status lm_minhash_simplify(lm_minhash_scratch *s, const uint8_t *text, size_t len, const uint8_t **out,
                              size_t *out_len) {
  (void)s; (void)text; (void)len; (void)out; (void)out_len;
  return LM_ESTATE;
}
lm_status lm_minhash_from_hashes(const uint64_t *a, const uint64_t *b, size_t num_hashes, uint32_t precision,
                                 const uint64_t *h, size_t n, uint64_t *sig) {
  (void)a; (void)b; (void)num_hashes; (void)precision; (void)h; (void)n; (void)sig;
  return LM_ESTATE;
}
lm_status lm_minhash_draw_params(uint64_t seed, size_t n, uint64_t *a, uint64_t *b) {
  (void)seed; (void)n; (void)a; (void)b;
  return LM_ESTATE;
}
lm_status lm_mt19937_outputs(uint32_t seed, size_t n, uint32_t *out) {
  (void)seed; (void)n; (void)out;
  return LM_ESTATE;
}
lm_status lm_randint_uint64_legacy(uint32_t seed, uint64_t low, uint64_t high, size_t n, uint64_t *out) {
  (void)seed; (void)low; (void)high; (void)n; (void)out;
  return LM_ESTATE;
}
