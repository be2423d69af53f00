/* pipeline.c — FusedPipeline (see pipeline.h).
 *
 * One batch, lm_fused_run:
 *   phase 1  parallel, per range of documents (lm_batch_plan: ranges cut by
 *            bytes, handed out dynamically): clean -> quality -> hash, each
 *            range writing into its own arena (f->arenas1); p1_doc is the
 *            per-document step, p1_range the per-range loop.  A per-document
 *            computation on the final text goes at the end of p1_range (the
 *            arena no longer moves then): see "per-document keys".
 *   phase 2  serial, in input order (admit): exact dedup admission, then the
 *            PII size limit.  A further admission step in input order goes
 *            between the two (see "admission").
 *   phase 3  parallel, per range of survivors (again by bytes): PII masking
 *            into per-range arenas (f->arenas3; a counting pass first when the
 *            replacement cycle runs across documents), then the ordered
 *            copy into the output, parallel over the same ranges (each range
 *            at its own place: gather_range).  With PII off the survivors
 *            are copied directly, the same way.
 * After the batch the arenas are trimmed to a bound (retained memory). */
#include "luminamoon/pipeline.h"
#include "luminamoon/bytebuf.h"

#include <stdlib.h>
#include <string.h>

#include "dedup_internal.h" /* the deduplicator's seed and state (same library) */
#include "pii_internal.h"   /* the masker's cycling configuration */

#define LM_FUSED_MAX_DOCS 64 /* documents per range at most */
/* a quality scratch holding more than this after a batch is freed */
#define LM_FUSED_SCRATCH_KEEP_BYTES ((size_t)8 << 20)

typedef struct { /* phase 1 counters of one range */
  lm_clean_counters cc;
  lm_quality_counters qc;
  uint64_t drop_clean, drop_quality;
} p1_counters;

typedef struct { /* phase 3 counters of one range */
  lm_pii_counts counts;
  uint64_t base[LM_PII_TYPE_COUNT]; /* cycle position of the range's first document, from the batch start */
} p3_counters;

struct lm_fused {
  lm_fused_stages st;
  size_t clean_max_doc_bytes; /* the cleaner's limit (0: none): no arena room for a document above it */
  lm_fused_counters counters;
  uint64_t cycle[LM_PII_TYPE_COUNT]; /* PII replacement positions (cycle_across_documents) */
  /* kept between batches, bounded (trimmed after each batch) */
  lm_batch_pool arenas1, arenas3;
  lm_quality_scratch **qs; /* per worker */
  size_t *qs_max;          /* per worker: the largest document its scratch has checked */
  size_t nqs;
  size_t keep_bytes;       /* bound for each pool (LM_BATCH_RETAIN_BYTES) */
  lm_fused_run_info info;
  int near_failed; /* the last run failed in the near-dedup admission */
};

static void free_scratches(lm_fused *f, int only_big) {
  for (size_t w = 0; w < f->nqs; w++)
    if (f->qs[w] && (!only_big || lm_quality_scratch_bytes(f->qs[w]) > LM_FUSED_SCRATCH_KEEP_BYTES)) {
      lm_quality_scratch_destroy(f->qs[w]);
      f->qs[w] = NULL;
      f->qs_max[w] = 0;
    }
}

lm_status lm_fused_create(const lm_fused_stages *stages, lm_fused **out) {
  if (!out) return LM_EINVAL;
  *out = NULL;
  lm_fused *f = (lm_fused *)calloc(1, sizeof *f);
  if (!f) return LM_ENOMEM;
  if (stages) f->st = *stages;
  if (f->st.cleaner) {
    lm_cleaner_params cp;
    if (lm_cleaner_get_params(f->st.cleaner, &cp) == LM_OK) f->clean_max_doc_bytes = cp.max_doc_bytes;
  }
  f->keep_bytes = LM_BATCH_RETAIN_BYTES;
  *out = f;
  return LM_OK;
}

void lm_fused_destroy(lm_fused *f) {
  if (!f) return;
  lm_batch_pool_free(&f->arenas1);
  lm_batch_pool_free(&f->arenas3);
  free_scratches(f, 0);
  free(f->qs);
  free(f->qs_max);
  free(f);
}

lm_status lm_fused_get_counters(const lm_fused *f, lm_fused_counters *out) {
  if (!f || !out) return LM_EINVAL;
  *out = f->counters;
  return LM_OK;
}

lm_status lm_fused_reset_counters(lm_fused *f) {
  if (!f) return LM_EINVAL;
  memset(&f->counters, 0, sizeof f->counters);
  memset(f->cycle, 0, sizeof f->cycle);
  return LM_OK;
}

lm_status lm_fused_get_pii_cycle(const lm_fused *f, uint64_t *out) {
  if (!f || !out) return LM_EINVAL;
  memcpy(out, f->cycle, sizeof f->cycle);
  return LM_OK;
}

lm_status lm_fused_set_pii_cycle(lm_fused *f, const uint64_t *in) {
  if (!f || !in) return LM_EINVAL;
  memcpy(f->cycle, in, sizeof f->cycle);
  return LM_OK;
}

lm_status lm_fused_retained_bytes(const lm_fused *f, size_t *out) {
  if (!f || !out) return LM_EINVAL;
  size_t b = sizeof *f + lm_batch_pool_bytes(&f->arenas1) + lm_batch_pool_bytes(&f->arenas3) +
             f->nqs * (sizeof *f->qs + sizeof *f->qs_max);
  for (size_t w = 0; w < f->nqs; w++) b += lm_quality_scratch_bytes(f->qs[w]);
  *out = b;
  return LM_OK;
}

lm_status lm_fused_last_run(const lm_fused *f, lm_fused_run_info *out) {
  if (!f || !out) return LM_EINVAL;
  *out = f->info;
  return LM_OK;
}

/* ------------------------------------------------------------ phase 1 */

typedef struct {
  lm_fused *f;
  const lm_docs *docs;
  p1_counters *rc;      /* per range */
  int32_t *reasons;     /* n */
  size_t *pos;          /* n: offset in the range arena, or SIZE_MAX: the input text itself */
  size_t *len;          /* n: length of the text after clean + quality */
  const uint8_t **txt;  /* n: the text after clean + quality (set at the end of its range) */
  lm_hash128_t *hashes; /* n (dedup on) */
  uint64_t seed;
  lm_hash128_t *near_keys; /* n * num_buckets (near dedup on) */
  uint8_t *near_has;       /* n: the document has band keys */
} p1_ctx;

static lm_status p1_doc(p1_ctx *x, lm_bytebuf *arena, p1_counters *rc, lm_quality_scratch *qs, size_t d) {
  const lm_fused *f = x->f;
  const uint8_t *t = x->docs->data + x->docs->offsets[d];
  size_t n = (size_t)(x->docs->offsets[d + 1] - x->docs->offsets[d]);
  int32_t reason = LM_REASON_KEPT;
  size_t pos = SIZE_MAX, len = n;
  lm_status st;
  if (f->st.cleaner) {
    /* a document above the cleaner's limit is refused without output: reserve nothing for it */
    int over = f->clean_max_doc_bytes && n > f->clean_max_doc_bytes;
    size_t need = over ? 16 : lm_clean_bound(n) + 16, ol = 0;
    for (;;) {
      st = lm_bytebuf_reserve(arena, need, 4096);
      if (st) return st;
      st = lm_clean_text(f->st.cleaner, t, n, arena->data + arena->len, arena->cap - arena->len, &ol, &reason, &rc->cc);
      if (st != LM_ERANGE) break;
      need = ol;
    }
    if (st) return st;
    pos = arena->len; /* not committed to the arena until the doc is kept */
    len = reason == LM_REASON_KEPT ? ol : 0;
    if (reason != LM_REASON_KEPT) rc->drop_clean++;
  }
  if (reason == LM_REASON_KEPT && f->st.quality) {
    const uint8_t *in = pos == SIZE_MAX ? t : arena->data + pos;
    lm_quality_doc_result qr;
    st = lm_quality_check(f->st.quality, qs, in, len, &qr, &rc->qc);
    if (st) return st;
    reason = qr.reason;
    if (reason != LM_REASON_KEPT) rc->drop_quality++;
    if (reason == LM_REASON_KEPT && qr.text != in) {
      /* rewritten (C4 removed lines): the new text lives in the scratch; it
       * replaces the cleaned text at the (uncommitted) arena tail */
      pos = arena->len;
      st = lm_bytebuf_reserve(arena, qr.len, 4096);
      if (st) return st;
      if (qr.len) memcpy(arena->data + pos, qr.text, qr.len);
      len = qr.len;
    } else if (reason == LM_REASON_KEPT) {
      len = qr.len;
    }
  }
  if (reason != LM_REASON_KEPT) {
    len = 0;
    pos = SIZE_MAX;
  } else if (pos != SIZE_MAX) {
    arena->len = pos + len; /* commit the doc's bytes to the arena */
  }
  x->reasons[d] = reason;
  x->pos[d] = pos;
  x->len[d] = len;
  return LM_OK;
}

static lm_status p1_range(void *vctx, size_t worker, size_t r, size_t d0, size_t d1) {
  p1_ctx *x = (p1_ctx *)vctx;
  lm_fused *f = x->f;
  lm_bytebuf *arena = &f->arenas1.arenas[r];
  p1_counters *rc = &x->rc[r];
  lm_quality_scratch *qs = NULL;
  if (f->st.quality) { /* one scratch per worker, kept between batches (f->qs[worker]: this worker only) */
    if (!f->qs[worker]) {
      lm_status st = lm_quality_scratch_create(&f->qs[worker]);
      if (st) return st;
    }
    qs = f->qs[worker];
  }
  for (size_t d = d0; d < d1; d++) {
    if (qs) {
      size_t n = (size_t)(x->docs->offsets[d + 1] - x->docs->offsets[d]);
      if (n > f->qs_max[worker]) f->qs_max[worker] = n;
    }
    lm_status st = p1_doc(x, arena, rc, qs, d);
    if (st) return st;
  }
  /* The arena is final: the surviving texts' addresses and per-document keys. */
  lm_minhash_scratch *mhs = NULL;
  uint64_t *sig = NULL;
  const size_t nb = f->st.near ? lm_near_dedup_num_keys(f->st.near) : 0;
  if (f->st.near) { /* per range (ranges are cut by bytes: the scratch grows a few times at most) */
    lm_near_dedup_params np;
    lm_near_dedup_params_get(f->st.near, &np);
    sig = (uint64_t *)malloc((size_t)np.num_buckets * np.hashes_per_bucket * sizeof *sig);
    lm_status st = sig ? lm_minhash_scratch_create(&mhs) : LM_ENOMEM;
    if (st) {
      free(sig);
      return st;
    }
  }
  lm_status kst = LM_OK;
  for (size_t d = d0; d < d1 && !kst; d++) {
    if (x->reasons[d] != LM_REASON_KEPT) continue;
    const uint8_t *t = x->pos[d] == SIZE_MAX ? x->docs->data + x->docs->offsets[d] : arena->data + x->pos[d];
    x->txt[d] = t;
    /* per-document keys of the surviving text (parallel, any order): the
     * exact-dedup hash and the near-duplicate band keys. */
    if (f->st.dedup) x->hashes[d] = lm_hash128(t, x->len[d], x->seed);
    if (f->st.near) {
      int has = 0;
      kst = lm_near_dedup_doc_keys(f->st.near, mhs, sig, t, x->len[d], x->near_keys + d * nb, &has);
      x->near_has[d] = (uint8_t)has;
    }
  }
  lm_minhash_scratch_destroy(mhs);
  free(sig);
  return kst;
}

/* ------------------------------------------------------------ phase 3 */

typedef struct {
  const lm_fused *f;
  const uint8_t *const *txt;
  const size_t *len;
  const size_t *surv; /* survivor document indexes, in order */
  p3_counters *rc;    /* per range */
  size_t *out_len;    /* per survivor */
  int count_only;
  int cycling;
} p3_ctx;

static lm_status p3_range(void *vctx, size_t worker, size_t r, size_t k0, size_t k1) {
  (void)worker;
  p3_ctx *x = (p3_ctx *)vctx;
  const lm_pii_masker *m = x->f->st.pii;
  lm_bytebuf *buf = &((lm_fused *)x->f)->arenas3.arenas[r];
  p3_counters *rc = &x->rc[r];
  uint64_t cyc[LM_PII_TYPE_COUNT];
  for (int t = 0; t < LM_PII_TYPE_COUNT; t++) cyc[t] = x->cycling ? x->f->cycle[t] + rc->base[t] : 0;
  lm_pii_counts *tot = &rc->counts;
  for (size_t k = k0; k < k1; k++) {
    size_t d = x->surv[k], before = buf->len;
    lm_pii_counts dc;
    lm_status st = lm_pii_mask_doc(m, x->txt[d], x->len[d], cyc, buf, &dc);
    if (st) return st;
    if (x->count_only) buf->len = before;
    else x->out_len[k] = buf->len - before;
    for (int t = 0; t < LM_PII_TYPE_COUNT; t++) {
      tot->matches[t] += dc.matches[t];
      if (m->cycle_across_documents) cyc[t] += dc.matches[t];
    }
    tot->docs += 1;
    tot->docs_changed += dc.docs_changed;
    tot->bytes_in += dc.bytes_in;
    tot->bytes_out += dc.bytes_out;
  }
  return LM_OK;
}

/* ------------------------------------------------------------ gather */

/* The ordered gather into the output, parallel over the ranges of survivors
 * (phase 3's plan): range r's texts go to the output at base[r] (its first
 * byte in this batch's output), its entries of source_index / offsets at
 * n0 + k.  The bytes are the PII arenas (pii on) or the survivors' texts (pii
 * off).  On 2 threads this copy was the largest serial part of a batch. */
typedef struct {
  const lm_fused *f;
  const uint8_t *const *txt;
  const size_t *len;     /* per document (pii off) */
  const size_t *surv;
  const size_t *out_len; /* per survivor (pii on) */
  const size_t *base;    /* per range */
  lm_batch_result *out;
  uint8_t *dst; /* the batch's first output byte (out->data + d0) */
  size_t n0, d0; /* out->n_out, out->data_len before the gather */
  int pii;
} gather_ctx;

static lm_status gather_range(void *vctx, size_t worker, size_t r, size_t k0, size_t k1) {
  (void)worker;
  gather_ctx *x = (gather_ctx *)vctx;
  lm_batch_result *out = x->out;
  size_t pos = x->base[r];
  if (x->pii) {
    const lm_bytebuf *a = &x->f->arenas3.arenas[r];
    if (a->len) memcpy(x->dst + pos, a->data, a->len);
    for (size_t k = k0; k < k1; k++) {
      out->source_index[x->n0 + k] = (int64_t)x->surv[k];
      pos += x->out_len[k];
      out->offsets[x->n0 + k + 1] = (int64_t)(x->d0 + pos);
    }
  } else {
    for (size_t k = k0; k < k1; k++) {
      size_t d = x->surv[k], l = x->len[d];
      if (l) memcpy(x->dst + pos, x->txt[d], l);
      out->source_index[x->n0 + k] = (int64_t)d;
      pos += l;
      out->offsets[x->n0 + k + 1] = (int64_t)(x->d0 + pos);
    }
  }
  return LM_OK;
}

/* ------------------------------------------------------------ counters */

static void add_u64(uint64_t *a, const uint64_t *b, size_t n) {
  for (size_t i = 0; i < n; i++) a[i] += b[i];
}

static void add_pii(lm_pii_counts *a, const lm_pii_counts *b) {
  for (int t = 0; t < LM_PII_TYPE_COUNT; t++) a->matches[t] += b->matches[t];
  a->docs += b->docs;
  a->docs_changed += b->docs_changed;
  a->bytes_in += b->bytes_in;
  a->bytes_out += b->bytes_out;
}

/* ------------------------------------------------------------ run */

/* Grow the per-worker scratch arrays to `nw` workers. */
static lm_status ensure_workers(lm_fused *f, size_t nw) {
  if (nw <= f->nqs) return LM_OK;
  lm_quality_scratch **q = (lm_quality_scratch **)realloc(f->qs, nw * sizeof *q);
  if (!q) return LM_ENOMEM;
  f->qs = q;
  size_t *m = (size_t *)realloc(f->qs_max, nw * sizeof *m);
  if (!m) return LM_ENOMEM;
  f->qs_max = m;
  for (size_t w = f->nqs; w < nw; w++) {
    f->qs[w] = NULL;
    f->qs_max[w] = 0;
  }
  f->nqs = nw;
  return LM_OK;
}

typedef struct {
  lm_batch_plan plan1, plan3;
  p1_counters *rc1;
  p3_counters *rc3;
  size_t *pos, *len, *surv, *out_len, *base3;
  const uint8_t **txt;
  lm_hash128_t *hashes;
  uint8_t *is_new;
  int64_t *prefix3;
  lm_hash128_t *near_keys;
  uint8_t *near_has, *near_dup;
} run_bufs;

static void run_bufs_free(run_bufs *b) {
  lm_batch_plan_free(&b->plan1);
  lm_batch_plan_free(&b->plan3);
  free(b->rc1);
  free(b->rc3);
  free(b->pos);
  free(b->len);
  free(b->surv);
  free(b->out_len);
  free(b->base3);
  free((void *)b->txt);
  free(b->hashes);
  free(b->is_new);
  free(b->prefix3);
  free(b->near_keys);
  free(b->near_has);
  free(b->near_dup);
}

static lm_status fused_run(lm_fused *f, const lm_docs *docs, lm_batch_result *out, const lm_exec *exec, run_bufs *B) {
  const size_t n = docs->n;
  lm_fused_counters *C = &f->counters;
  lm_status st;

  /* ---- phase 1: clean, quality, per-document keys (parallel over ranges) ---- */
  st = lm_batch_plan_make(&B->plan1, docs->offsets, n, exec, LM_FUSED_MAX_DOCS);
  if (st) return st;
  const size_t nr = B->plan1.nranges;
  f->info.ranges1 = nr;
  f->info.workers1 = B->plan1.nworkers;
  st = lm_batch_pool_get(&f->arenas1, nr);
  if (!st) st = ensure_workers(f, B->plan1.nworkers);
  if (st) return st;
  B->rc1 = (p1_counters *)calloc(nr, sizeof *B->rc1);
  B->pos = (size_t *)malloc(n * sizeof(size_t));
  B->len = (size_t *)malloc(n * sizeof(size_t));
  B->surv = (size_t *)malloc(n * sizeof(size_t));
  B->txt = (const uint8_t **)malloc(n * sizeof(const uint8_t *));
  B->hashes = f->st.dedup ? (lm_hash128_t *)malloc(n * sizeof(lm_hash128_t)) : NULL;
  B->is_new = f->st.dedup ? (uint8_t *)malloc(n) : NULL;
  if (!B->rc1 || !B->pos || !B->len || !B->surv || !B->txt || (f->st.dedup && (!B->hashes || !B->is_new)))
    return LM_ENOMEM;
  const size_t nb = f->st.near ? lm_near_dedup_num_keys(f->st.near) : 0;
  if (f->st.near) {
    if (n > SIZE_MAX / (nb * sizeof(lm_hash128_t))) return LM_EOVERFLOW;
    B->near_keys = (lm_hash128_t *)malloc(n * nb * sizeof(lm_hash128_t));
    B->near_has = (uint8_t *)calloc(n, 1);
    B->near_dup = (uint8_t *)malloc(n);
    if (!B->near_keys || !B->near_has || !B->near_dup) return LM_ENOMEM;
  }
  p1_ctx x1 = {f, docs, B->rc1, out->reasons, B->pos, B->len, B->txt, B->hashes, f->st.dedup ? f->st.dedup->seed : 0,
               B->near_keys, B->near_has};
  st = lm_batch_plan_run(&B->plan1, p1_range, &x1);
  if (st) return st;

  /* ---- phase 2: admission, serial, in input order ---- */
  size_t nsurv = 0;
  size_t *surv = B->surv;
  for (size_t d = 0; d < n; d++)
    if (out->reasons[d] == LM_REASON_KEPT) surv[nsurv++] = d;
  if (f->st.dedup && nsurv) { /* exact duplicates */
    lm_hash128_t *h = B->hashes;
    for (size_t k = 0; k < nsurv; k++) h[k] = h[surv[k]]; /* compact, order kept (k <= surv[k]) */
    size_t done_n = nsurv;
    lm_status ds = lm_dedup_check_insert_hashes(f->st.dedup, h, nsurv, B->is_new, &done_n);
    if (ds) nsurv = done_n; /* those stay admitted (counted below); the batch fails */
    size_t w = 0;
    for (size_t k = 0; k < nsurv; k++) {
      C->dedup_probes++;
      if (B->is_new[k]) {
        C->dedup_inserts++;
        surv[w++] = surv[k];
      } else {
        out->reasons[surv[k]] = LM_REASON_DUPLICATE;
        C->dropped_duplicate++;
      }
    }
    nsurv = w;
    if (ds) return ds;
  }
  /* admission: near duplicates of the documents admitted so far (near_dedup.h:
   * the band keys of every document reaching the step are inserted; all or
   * nothing at the band index's max_entries), in input order. */
  if (f->st.near && nsurv) {
    lm_hash128_t *k = B->near_keys;
    for (size_t j = 0; j < nsurv; j++) { /* compact, order kept (j <= surv[j]) */
      if (j != surv[j]) memmove(k + j * nb, k + surv[j] * nb, nb * sizeof *k);
      B->near_has[j] = B->near_has[surv[j]];
    }
    lm_status ns = lm_near_dedup_check_keys(f->st.near, k, B->near_has, nsurv, B->near_dup);
    if (ns) {
      f->near_failed = 1;
      return ns;
    }
    size_t w = 0;
    for (size_t j = 0; j < nsurv; j++) {
      if (B->near_dup[j]) {
        out->reasons[surv[j]] = LM_REASON_NEAR_DUPLICATE;
        C->dropped_near_duplicate++;
      } else {
        surv[w++] = surv[j];
      }
    }
    nsurv = w;
  }

  /* The masker refuses documents over its max_doc_bytes: dropped (TOO_LARGE),
   * after the dedup admission exactly as in the chain lm_dedup_run -> lm_pii_run. */
  uint64_t pii_too_large = 0;
  if (f->st.pii && f->st.pii->max_doc_bytes) {
    size_t w = 0;
    for (size_t k = 0; k < nsurv; k++) {
      if (B->len[surv[k]] > f->st.pii->max_doc_bytes) {
        out->reasons[surv[k]] = LM_REASON_TOO_LARGE;
        pii_too_large++;
      } else {
        surv[w++] = surv[k];
      }
    }
    nsurv = w;
  }

  /* ---- phase 3: PII (parallel over ranges of survivors), ordered gather ---- */
  const lm_pii_masker *m = f->st.pii;
  int cycling = 0;
  if (m && m->cycle_across_documents)
    for (int t = 0; t < LM_PII_TYPE_COUNT; t++) cycling |= ((m->types >> t) & 1) && m->nrepl[t] > 1;
  size_t nr3 = 0;
  if (nsurv) { /* ranges of survivors by bytes: PII masking (when on), then the gather */
    B->prefix3 = (int64_t *)malloc((nsurv + 1) * sizeof(int64_t));
    B->out_len = m ? (size_t *)malloc(nsurv * sizeof(size_t)) : NULL;
    if (!B->prefix3 || (m && !B->out_len)) return LM_ENOMEM;
    B->prefix3[0] = 0;
    for (size_t k = 0; k < nsurv; k++) B->prefix3[k + 1] = B->prefix3[k] + (int64_t)B->len[surv[k]];
    st = lm_batch_plan_make(&B->plan3, B->prefix3, nsurv, exec, LM_FUSED_MAX_DOCS);
    if (st) return st;
    if (cycling && B->plan3.nworkers == 1 && B->plan3.nranges > 1) {
      B->plan3.start[1] = nsurv; /* one worker: one range, no counting pass needed */
      B->plan3.nranges = 1;
    }
  }
  const size_t nrg = nsurv ? B->plan3.nranges : 0; /* ranges of the gather */
  if (m && nsurv) {
    nr3 = nrg;
    st = lm_batch_pool_get(&f->arenas3, nr3);
    if (st) return st;
    B->rc3 = (p3_counters *)calloc(nr3, sizeof *B->rc3);
    if (!B->rc3) return LM_ENOMEM;
    p3_ctx x3 = {f, B->txt, B->len, surv, B->rc3, B->out_len, 0, cycling};
    if (cycling && nr3 > 1) { /* counting pass: where each range's cycle starts */
      x3.count_only = 1;
      st = lm_batch_plan_run(&B->plan3, p3_range, &x3);
      if (st) return st;
      uint64_t acc[LM_PII_TYPE_COUNT] = {0};
      for (size_t r = 0; r < nr3; r++) {
        memcpy(B->rc3[r].base, acc, sizeof acc);
        for (int t = 0; t < LM_PII_TYPE_COUNT; t++) acc[t] += B->rc3[r].counts.matches[t];
        memset(&B->rc3[r].counts, 0, sizeof B->rc3[r].counts);
      }
      x3.count_only = 0;
    }
    st = lm_batch_plan_run(&B->plan3, p3_range, &x3);
    if (st) return st;
  }
  if (nsurv) { /* the ordered gather (parallel over the same ranges) */
    B->base3 = (size_t *)malloc(nrg * sizeof(size_t));
    if (!B->base3) return LM_ENOMEM;
    size_t total = 0;
    for (size_t r = 0; r < nrg; r++) {
      B->base3[r] = total;
      total += m ? f->arenas3.arenas[r].len
                 : (size_t)(B->prefix3[B->plan3.start[r + 1]] - B->prefix3[B->plan3.start[r]]);
    }
    uint8_t *dst;
    st = lm_batch_result_reserve_data(out, total, &dst);
    if (!st) st = lm_batch_result_reserve_out(out, nsurv);
    if (st) return st;
    gather_ctx g = {f, B->txt, B->len, surv, B->out_len, B->base3, out, dst, out->n_out, out->data_len, m != NULL};
    st = lm_batch_plan_run(&B->plan3, gather_range, &g);
    if (st) return st;
    out->n_out += nsurv;
    out->data_len += total;
  }
  if (st) return st;

  /* counters (only for a complete batch) */
  C->batches++;
  C->docs_in += n;
  C->docs_out += nsurv;
  C->bytes_in += (uint64_t)(docs->offsets[n] - docs->offsets[0]);
  C->bytes_out += out->data_len;
  for (size_t r = 0; r < nr; r++) {
    add_u64((uint64_t *)&C->clean, (const uint64_t *)&B->rc1[r].cc, sizeof C->clean / sizeof(uint64_t));
    add_u64((uint64_t *)&C->quality, (const uint64_t *)&B->rc1[r].qc, sizeof C->quality / sizeof(uint64_t));
    C->dropped_clean += B->rc1[r].drop_clean;
    C->dropped_quality += B->rc1[r].drop_quality;
  }
  C->dropped_pii += pii_too_large;
  C->pii.docs_too_large += pii_too_large;
  for (size_t r = 0; r < nr3; r++) {
    add_pii(&C->pii, &B->rc3[r].counts);
    if (cycling)
      for (int t = 0; t < LM_PII_TYPE_COUNT; t++) f->cycle[t] += B->rc3[r].counts.matches[t];
  }
  return LM_OK;
}

lm_status lm_fused_run(lm_fused *f, const lm_docs *docs, lm_batch_result *out, const lm_exec *exec) {
  if (!f || !out) return LM_EINVAL;
  lm_status st = lm_docs_validate(docs);
  if (st) return st;
  if (f->st.dedup && (f->st.dedup->closed || f->st.dedup->failed)) return LM_ESTATE;
  if (f->st.near) {
    const lm_dedup *ni = lm_near_dedup_index(f->st.near);
    if (ni->closed || ni->failed) return LM_ESTATE;
  }
  const size_t n = docs->n;
  st = lm_batch_result_begin(out, n, (size_t)(docs->offsets[n] - docs->offsets[0]) + 16);
  if (st) return st;
  memset(&f->info, 0, sizeof f->info);
  f->near_failed = 0;
  if (n == 0) {
    f->counters.batches++;
    return LM_OK;
  }
  run_bufs B;
  memset(&B, 0, sizeof B);
  st = fused_run(f, docs, out, exec, &B);
  run_bufs_free(&B);
  /* retained memory: bounded whatever the batch was */
  lm_batch_pool_trim(&f->arenas1, f->keep_bytes);
  lm_batch_pool_trim(&f->arenas3, f->keep_bytes);
  free_scratches(f, 1);
  return st;
}

int lm_fused_near_failed(const lm_fused *f) { return f ? f->near_failed : 0; }
