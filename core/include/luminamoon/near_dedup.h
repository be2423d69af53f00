/* luminamoon/near_dedup.h — NearDeduplicator: near-duplicate removal in the
 * stream, by MinHash LSH band keys held in an lm_dedup band index (dedup.h).
 *
 * Signature.  Each document's MinHash signature (minhash.h: datatrove's
 * MinhashDedupSignature, num_buckets x hashes_per_bucket values) is cut into
 * num_buckets bands of hashes_per_bucket values.
 *
 * Band key.  Band b's key is XXH3-128 (lm_hash128) of the band's values as
 * little-endian bytes (8 bytes each at precision 64, 4 bytes at precision 32)
 * with seed b, and then the top 8 bits of `lo` are replaced by b: keys of
 * different bands can never be equal (a document's band 3 never matches
 * another's band 5), and 120 bits stay for the collision-free part.
 *
 * Decision.  A document is a near duplicate (LM_REASON_NEAR_DUPLICATE) when
 * ANY of its band keys is already in the index or belongs to an earlier
 * document of the same batch; the first occurrence is kept.  A document
 * without a signature (fewer words than n_grams, or empty after datatrove's
 * simplify_text) has no band keys: it is kept and inserts nothing (datatrove
 * writes no signature for it, so it is in no cluster).
 *
 * Which keys are inserted: the band keys of EVERY document that reaches the
 * stage, kept or dropped.  (1) It follows datatrove's union-find clusters
 * better: if B shares a band with A and C shares a (different) band with B
 * only, datatrove puts A, B, C in one cluster and keeps only A; inserting only
 * the kept documents' keys would keep C.  (2) Each key's check-and-insert is
 * then independent of the document's decision (decision = OR over its keys of
 * "seen before"), so a key can be checked by the one rank that owns it (key
 * mod world_size) and the owners' answers OR-ed per document: global near
 * dedup across ranks is exactly the exact-dedup exchange, and elastic N->M
 * resume is the same re-partitioning of keys.  Cost: a dropped document adds
 * its new band keys to the index (most of its keys are usually old).
 *
 * Index.  An lm_dedup (dedup.h) in its precomputed-hash form: LSN = number of
 * distinct band keys admitted; the WAL, commit (lm_dedup_sync), truncate-to-LSN,
 * snapshots, flock and max_entries (all-or-nothing LM_ETOOBIG per batch) are
 * lm_dedup's.  lm_near_dedup_index returns it for those calls.  The MinHash
 * configuration is recorded in the WAL header's tag (lm_near_dedup_tag) and
 * checked on open: a WAL written with another configuration gives LM_EINVAL
 * (lm_near_dedup_tag_decode names the differing setting).
 *
 * Memory: each distinct key takes one 16-byte slot of a 50-80% full table:
 * about 20-32 bytes per key, num_buckets keys per new document (14 by
 * default: 280-450 bytes per distinct document).
 *
 * Thread-safety: one object may be used by one thread at a time (batch calls
 * compute signatures on exec's threads internally).  lm_near_dedup_doc_keys is
 * thread-safe for distinct scratch buffers on a const object.
 */
#ifndef LUMINAMOON_NEAR_DEDUP_H
#define LUMINAMOON_NEAR_DEDUP_H

#include <stddef.h>
#include <stdint.h>

#include "luminamoon/batch.h"
#include "luminamoon/dedup.h"
#include "luminamoon/hash.h"
#include "luminamoon/minhash.h"
#include "luminamoon/parallel.h"
#include "luminamoon/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Tag layout (32 bytes, in the band index's WAL header): "LMNEAR1\0", then
 * u64 seed, u32 n_grams, u32 num_buckets, u32 hashes_per_bucket,
 * u32 precision (little-endian). */
#define LM_NEAR_DEDUP_TAG_BYTES 32
#define LM_NEAR_DEDUP_MAX_BANDS 255
#define LM_NEAR_DEDUP_MAX_ROWS 1024

typedef struct lm_near_dedup_params {
  const char *wal_path;      /* NULL: in memory only.  Copied at create. */
  uint64_t seed;             /* MinHash seed (datatrove MinhashConfig.seed); default 1 */
  uint32_t n_grams;          /* words per shingle; default 5 */
  uint32_t num_buckets;      /* bands; default 14, at most LM_NEAR_DEDUP_MAX_BANDS */
  uint32_t hashes_per_bucket;/* rows per band; default 8, at most LM_NEAR_DEDUP_MAX_ROWS */
  uint32_t precision;        /* 64 or 32; default 64 */
  uint64_t max_entries;      /* 0: unlimited; else the most distinct band keys kept */
  size_t initial_capacity;   /* slots of the band index to start with; default 1024 */
  size_t wal_buffer_hashes;  /* keys buffered per WAL record; default 4096 */
} lm_near_dedup_params;

typedef struct lm_near_dedup lm_near_dedup;

/* Defaults (see the fields).  LM_EINVAL if p is NULL. */
lm_status lm_near_dedup_params_default(lm_near_dedup_params *p);

/* The 32-byte tag of a configuration (see above).  LM_EINVAL on NULL. */
lm_status lm_near_dedup_tag(const lm_near_dedup_params *p, uint8_t tag[LM_NEAR_DEDUP_TAG_BYTES]);

/* Decode a tag into p's seed, n_grams, num_buckets, hashes_per_bucket and
 * precision (other fields untouched).  LM_ECORRUPT if it is not a near-dedup
 * tag (e.g. the WAL of a StreamDeduplicator). */
lm_status lm_near_dedup_tag_decode(const uint8_t tag[LM_NEAR_DEDUP_TAG_BYTES], lm_near_dedup_params *p);

/* The hash seed the band index's lm_dedup is created with (a second record
 * of the configuration in the WAL header; readers such as
 * lm_dedup_wal_inspect see it).  0 on NULL. */
uint64_t lm_near_dedup_index_seed(const lm_near_dedup_params *p);

/* Create; with a WAL path, open (or create) the band index's log and recover
 * it (dedup.h).  Errors: as lm_dedup_create; LM_EINVAL for bad params or a
 * WAL written with another configuration.  *out is the caller's:
 * lm_near_dedup_destroy. */
lm_status lm_near_dedup_create(const lm_near_dedup_params *params, lm_near_dedup **out);

/* Close the band index (sync + close its WAL; see lm_dedup_close) and free.
 * NULL is ignored. */
void lm_near_dedup_destroy(lm_near_dedup *nd);

/* The band index (borrowed, owned by nd): use it for lm_dedup_lsn, _sync,
 * _truncate, _snapshot, _stats_get, _close.  NULL if nd is NULL. */
lm_dedup *lm_near_dedup_index(lm_near_dedup *nd);

/* The configuration (wal_path NULL in the copy). */
lm_status lm_near_dedup_params_get(const lm_near_dedup *nd, lm_near_dedup_params *out);

/* Keys per document (num_buckets). */
size_t lm_near_dedup_num_keys(const lm_near_dedup *nd);

/* Band keys of one signature of num_buckets * hashes_per_bucket values (at
 * precision 32 each value is < 2^32).  Pure; cannot fail on valid pointers. */
lm_status lm_near_dedup_signature_keys(const lm_near_dedup *nd, const uint64_t *signature, lm_hash128_t *keys);

/* Band keys of one document: *has_keys = 0 when it has no signature (keys
 * untouched), else 1 and num_buckets keys.  scratch: a minhash scratch
 * (minhash.h) private to the calling thread; sig: room for num_buckets *
 * hashes_per_bucket values (receives the signature).  Thread-safe on a const
 * nd with private scratch.  Errors: as lm_minhash_doc (LM_ETOOBIG above
 * LM_MINHASH_MAX_DOC_BYTES, LM_ENOMEM). */
lm_status lm_near_dedup_doc_keys(const lm_near_dedup *nd, lm_minhash_scratch *scratch, uint64_t *sig,
                                 const uint8_t *text, size_t len, lm_hash128_t *keys, int *has_keys);

/* Band keys of a batch (exec's threads): keys[i * num_buckets + b];
 * has_keys[i] as above.  keys: n * num_buckets slots. */
lm_status lm_near_dedup_batch_keys(const lm_near_dedup *nd, const lm_docs *docs, lm_hash128_t *keys,
                                   uint8_t *has_keys, const lm_exec *exec);

/* Check-and-insert the keys of n documents in order (keys as
 * lm_near_dedup_batch_keys writes them): is_dup[i] = 1 when a key of
 * document i was held before (or met earlier in the call).  The keys of every
 * document with has_keys[i] are inserted.  At max_entries: LM_ETOOBIG and
 * nothing admitted.  On LM_EIO the index refuses further changes. */
lm_status lm_near_dedup_check_keys(lm_near_dedup *nd, const lm_hash128_t *keys, const uint8_t *has_keys, size_t n,
                                   uint8_t *is_dup);

/* The stage: keys (threads), then admission in input order; kept documents
 * are copied to out unchanged, dropped ones get LM_REASON_NEAR_DUPLICATE.
 * At max_entries nothing of the batch is admitted (LM_ETOOBIG). */
lm_status lm_near_dedup_run(lm_near_dedup *nd, const lm_docs *docs, lm_batch_result *out, const lm_exec *exec);

#ifdef __cplusplus
}
#endif
#endif
