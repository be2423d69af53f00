/* near_dedup.c — NearDeduplicator: MinHash LSH band keys in an lm_dedup band
 * index (see near_dedup.h for the semantics and the key format). */
#include "luminamoon/near_dedup.h"

#include <stdlib.h>
#include <string.h>

#include "luminamoon/minhash.h"

struct lm_near_dedup {
  lm_near_dedup_params p; /* wal_path NULL */
  lm_dedup *index;
  lm_minhash *mh;         /* the signature computer (minhash.h) */
  size_t num_hashes;      /* num_buckets * hashes_per_bucket */
};

static const uint8_t k_tag_magic[8] = {'L', 'M', 'N', 'E', 'A', 'R', '1', 0};

lm_status lm_near_dedup_params_default(lm_near_dedup_params *p) {
  if (!p) return LM_EINVAL;
  memset(p, 0, sizeof *p);
  p->seed = 1;
  p->n_grams = 5;
  p->num_buckets = 14;
  p->hashes_per_bucket = 8;
  p->precision = 64;
  p->initial_capacity = 1024;
  p->wal_buffer_hashes = 4096;
  return LM_OK;
}

static void put32(uint8_t *q, uint32_t v) {
  for (int i = 0; i < 4; i++) q[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *q, uint64_t v) {
  for (int i = 0; i < 8; i++) q[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *q) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | q[i];
  return v;
}
static uint64_t get64(const uint8_t *q) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | q[i];
  return v;
}

lm_status lm_near_dedup_tag(const lm_near_dedup_params *p, uint8_t tag[LM_NEAR_DEDUP_TAG_BYTES]) {
  if (!p || !tag) return LM_EINVAL;
  memset(tag, 0, LM_NEAR_DEDUP_TAG_BYTES);
  memcpy(tag, k_tag_magic, 8);
  put64(tag + 8, p->seed);
  put32(tag + 16, p->n_grams);
  put32(tag + 20, p->num_buckets);
  put32(tag + 24, p->hashes_per_bucket);
  put32(tag + 28, p->precision);
  return LM_OK;
}

lm_status lm_near_dedup_tag_decode(const uint8_t tag[LM_NEAR_DEDUP_TAG_BYTES], lm_near_dedup_params *p) {
  if (!p || !tag) return LM_EINVAL;
  if (memcmp(tag, k_tag_magic, 8) != 0) return LM_ECORRUPT;
  p->seed = get64(tag + 8);
  p->n_grams = get32(tag + 16);
  p->num_buckets = get32(tag + 20);
  p->hashes_per_bucket = get32(tag + 24);
  p->precision = get32(tag + 28);
  return LM_OK;
}

static lm_status check_params(const lm_near_dedup_params *p) {
  if (p->n_grams < 1 || p->n_grams > 4096) return LM_EINVAL;
  if (p->num_buckets < 1 || p->num_buckets > LM_NEAR_DEDUP_MAX_BANDS) return LM_EINVAL;
  if (p->hashes_per_bucket < 1 || p->hashes_per_bucket > LM_NEAR_DEDUP_MAX_ROWS) return LM_EINVAL;
  if (p->precision != 64 && p->precision != 32) return LM_EINVAL;
  return LM_OK;
}

uint64_t lm_near_dedup_index_seed(const lm_near_dedup_params *p) {
  if (!p) return 0;
  uint8_t tag[LM_NEAR_DEDUP_TAG_BYTES];
  lm_near_dedup_tag(p, tag);
  return lm_hash64(tag, sizeof tag, 0x4c4d4e454152ull);
}

lm_status lm_near_dedup_create(const lm_near_dedup_params *params, lm_near_dedup **out) {
  if (!out) return LM_EINVAL;
  *out = NULL;
  lm_near_dedup_params p;
  if (params)
    p = *params;
  else
    lm_near_dedup_params_default(&p);
  lm_status s = check_params(&p);
  if (s) return s;
  lm_near_dedup *nd = (lm_near_dedup *)calloc(1, sizeof *nd);
  if (!nd) return LM_ENOMEM;
  nd->p = p;
  nd->p.wal_path = NULL;
  nd->num_hashes = (size_t)p.num_buckets * p.hashes_per_bucket;
  lm_minhash_params mp;
  lm_minhash_params_default(&mp);
  mp.n_grams = p.n_grams;
  mp.num_buckets = p.num_buckets;
  mp.hashes_per_bucket = p.hashes_per_bucket;
  mp.precision = p.precision;
  mp.seed = p.seed;
  s = lm_minhash_create(&mp, &nd->mh);
  if (s) {
    free(nd);
    return s;
  }
  lm_dedup_params dp;
  lm_dedup_params_default(&dp);
  dp.wal_path = p.wal_path;
  dp.max_entries = p.max_entries;
  if (p.initial_capacity) dp.initial_capacity = p.initial_capacity;
  if (p.wal_buffer_hashes) dp.wal_buffer_hashes = p.wal_buffer_hashes;
  uint8_t tag[LM_NEAR_DEDUP_TAG_BYTES];
  lm_near_dedup_tag(&p, tag);
  /* The configuration is the index's tag (checked on open) and, as a second
   * check, its hash seed (a WAL remembers its seed; another gives LM_EINVAL). */
  dp.seed = lm_near_dedup_index_seed(&p);
#ifdef LM_DEDUP_TAG_SIZE
  memcpy(dp.tag, tag, sizeof tag);
#endif
  s = lm_dedup_create(&dp, &nd->index);
  if (s) {
    lm_minhash_destroy(nd->mh);
    free(nd);
    return s;
  }
  *out = nd;
  return LM_OK;
}

void lm_near_dedup_destroy(lm_near_dedup *nd) {
  if (!nd) return;
  lm_dedup_destroy(nd->index);
  lm_minhash_destroy(nd->mh);
  free(nd);
}

lm_dedup *lm_near_dedup_index(lm_near_dedup *nd) { return nd ? nd->index : NULL; }

lm_status lm_near_dedup_params_get(const lm_near_dedup *nd, lm_near_dedup_params *out) {
  if (!nd || !out) return LM_EINVAL;
  *out = nd->p;
  return LM_OK;
}

size_t lm_near_dedup_num_keys(const lm_near_dedup *nd) { return nd ? nd->p.num_buckets : 0; }

lm_status lm_near_dedup_signature_keys(const lm_near_dedup *nd, const uint64_t *sig, lm_hash128_t *keys) {
  if (!nd || !sig || !keys) return LM_EINVAL;
  const size_t rows = nd->p.hashes_per_bucket;
  const size_t w = nd->p.precision == 32 ? 4 : 8;
  uint8_t buf[LM_NEAR_DEDUP_MAX_ROWS * 8];
  for (size_t b = 0; b < nd->p.num_buckets; b++) {
    const uint64_t *v = sig + b * rows;
    uint8_t *q = buf;
    if (w == 8) {
      for (size_t r = 0; r < rows; r++, q += 8) put64(q, v[r]);
    } else {
      for (size_t r = 0; r < rows; r++, q += 4) put32(q, (uint32_t)v[r]);
    }
    lm_hash128_t h = lm_hash128(buf, rows * w, (uint64_t)b);
    h.lo = (h.lo & 0x00ffffffffffffffull) | ((uint64_t)b << 56);
    keys[b] = h;
  }
  return LM_OK;
}

lm_status lm_near_dedup_doc_keys(const lm_near_dedup *nd, lm_minhash_scratch *scratch, uint64_t *sig,
                                 const uint8_t *text, size_t len, lm_hash128_t *keys, int *has_keys) {
  if (!nd || !scratch || !sig || (!text && len) || !keys || !has_keys) return LM_EINVAL;
  size_t n_shingles = 0;
  lm_status s = lm_minhash_doc(nd->mh, scratch, text, len, sig, &n_shingles);
  if (s) return s;
  *has_keys = n_shingles > 0;
  if (n_shingles) s = lm_near_dedup_signature_keys(nd, sig, keys);
  return s;
}

typedef struct {
  const lm_near_dedup *nd;
  const lm_docs *docs;
  lm_hash128_t *keys;
  uint8_t *has_keys;
} keys_ctx;

static lm_status keys_range(void *vctx, size_t begin, size_t end) {
  keys_ctx *c = (keys_ctx *)vctx;
  const size_t B = c->nd->p.num_buckets;
  lm_minhash_scratch *scratch = NULL;
  uint64_t *sig = (uint64_t *)malloc(c->nd->num_hashes * sizeof *sig);
  lm_status s = sig ? lm_minhash_scratch_create(&scratch) : LM_ENOMEM;
  for (size_t i = begin; i < end && !s; i++) {
    const int64_t o0 = c->docs->offsets[i], o1 = c->docs->offsets[i + 1];
    int has = 0;
    s = lm_near_dedup_doc_keys(c->nd, scratch, sig, c->docs->data + o0, (size_t)(o1 - o0), c->keys + i * B, &has);
    c->has_keys[i] = (uint8_t)has;
  }
  lm_minhash_scratch_destroy(scratch);
  free(sig);
  return s;
}

lm_status lm_near_dedup_batch_keys(const lm_near_dedup *nd, const lm_docs *docs, lm_hash128_t *keys,
                                   uint8_t *has_keys, const lm_exec *exec) {
  if (!nd || !docs || (docs->n && (!keys || !has_keys))) return LM_EINVAL;
  lm_status s = lm_docs_validate(docs);
  if (s) return s;
  if (!docs->n) return LM_OK;
  keys_ctx c = {nd, docs, keys, has_keys};
  lm_exec ex = {1, 0};
  if (exec) {
    ex = *exec;
    if (!ex.min_items_per_thread) ex.min_items_per_thread = 64;
  }
  return lm_parallel_for(&ex, docs->n, keys_range, &c);
}

lm_status lm_near_dedup_check_keys(lm_near_dedup *nd, const lm_hash128_t *keys, const uint8_t *has_keys, size_t n,
                                   uint8_t *is_dup) {
  if (!nd || (n && (!keys || !has_keys || !is_dup))) return LM_EINVAL;
  const size_t B = nd->p.num_buckets;
  size_t m = 0;
  for (size_t i = 0; i < n; i++) m += has_keys[i] ? B : 0;
  if (!m) {
    if (n) memset(is_dup, 0, n);
    return LM_OK;
  }
  lm_hash128_t *k = (lm_hash128_t *)malloc(m * sizeof *k);
  uint8_t *is_new = (uint8_t *)malloc(m);
  if (!k || !is_new) {
    free(k);
    free(is_new);
    return LM_ENOMEM;
  }
  size_t j = 0;
  for (size_t i = 0; i < n; i++) {
    if (!has_keys[i]) continue;
    memcpy(k + j, keys + i * B, B * sizeof *k);
    j += B;
  }
  size_t done = 0;
  lm_status s = lm_dedup_check_insert_hashes(nd->index, k, m, is_new, &done);
  if (!s) {
    j = 0;
    for (size_t i = 0; i < n; i++) {
      uint8_t dup = 0;
      if (has_keys[i]) {
        for (size_t b = 0; b < B; b++) dup |= (uint8_t)!is_new[j + b];
        j += B;
      }
      is_dup[i] = dup;
    }
  }
  free(k);
  free(is_new);
  return s;
}

lm_status lm_near_dedup_run(lm_near_dedup *nd, const lm_docs *docs, lm_batch_result *out, const lm_exec *exec) {
  if (!nd || !out) return LM_EINVAL;
  lm_status s = lm_docs_validate(docs);
  if (s) return s;
  const size_t n = docs->n, B = nd->p.num_buckets;
  if (n > SIZE_MAX / (B * sizeof(lm_hash128_t))) return LM_EOVERFLOW;
  s = lm_batch_result_begin(out, n, (size_t)(docs->offsets[n] - docs->offsets[0]) + 1);
  if (s || !n) return s;
  lm_hash128_t *keys = (lm_hash128_t *)malloc(n * B * sizeof *keys);
  uint8_t *has = (uint8_t *)malloc(n);
  uint8_t *dup = (uint8_t *)malloc(n);
  if (!keys || !has || !dup) {
    s = LM_ENOMEM;
    goto done;
  }
  s = lm_near_dedup_batch_keys(nd, docs, keys, has, exec);
  if (!s) s = lm_near_dedup_check_keys(nd, keys, has, n, dup);
  for (size_t i = 0; i < n && !s; i++) {
    if (dup[i]) {
      out->reasons[i] = LM_REASON_NEAR_DUPLICATE;
    } else {
      const int64_t o0 = docs->offsets[i], o1 = docs->offsets[i + 1];
      out->reasons[i] = LM_REASON_KEPT;
      s = lm_batch_result_push(out, (int64_t)i, docs->data + o0, (size_t)(o1 - o0));
    }
  }
done:
  free(keys);
  free(has);
  free(dup);
  return s;
}
