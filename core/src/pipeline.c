/* pipeline.c — FusedPipeline: clean -> quality -> hash in parallel, dedup in
 * input order, PII in parallel, one output arena per batch (see pipeline.h). */
#include "luminamoon/pipeline.h"
#include "luminamoon/bytebuf.h"

#include <stdlib.h>
#include <string.h>

#include "dedup_internal.h" /* the deduplicator's seed and state (same library) */
#include "pii_internal.h"   /* the masker's cycling configuration */

#define LM_FUSED_GRAIN 64 /* documents per phase-1 range */

typedef struct {
  lm_bytebuf out; /* the range's output arena */
  lm_clean_counters cc;
  lm_quality_counters qc;
  lm_quality_scratch *qs;
  uint64_t drop_clean, drop_quality;
} range_state;

struct lm_fused {
  lm_fused_stages st;
  size_t clean_max_doc_bytes; /* the cleaner's limit (0: none): no arena room for a document above it */
  lm_fused_counters counters;
  uint64_t cycle[LM_PII_TYPE_COUNT]; /* PII replacement positions (cycle_across_documents) */
  /* kept between batches */
  range_state *ranges;
  size_t nranges_cap;
  lm_pii_buf *pbufs;
  size_t npbufs;
};

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
  *out = f;
  return LM_OK;
}

void lm_fused_destroy(lm_fused *f) {
  if (!f) return;
  for (size_t r = 0; r < f->nranges_cap; r++) {
    lm_bytebuf_free(&f->ranges[r].out);
    lm_quality_scratch_destroy(f->ranges[r].qs);
  }
  free(f->ranges);
  for (size_t k = 0; k < f->npbufs; k++) lm_pii_buf_free(&f->pbufs[k]);
  free(f->pbufs);
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

/* ------------------------------------------------------------ phase 1 */

typedef struct {
  const lm_fused *f;
  const lm_docs *docs;
  range_state *ranges;
  int32_t *reasons;     /* n */
  size_t *pos;          /* n: offset in the range arena, or SIZE_MAX: the input text itself */
  size_t *len;          /* n: length of the text after clean + quality */
  lm_hash128_t *hashes; /* n (dedup on) */
  uint64_t seed;
} p1_ctx;

static lm_status arena_reserve(range_state *rs, size_t extra) {
  return lm_bytebuf_reserve(&rs->out, extra, 4096);
}

static lm_status p1_doc(p1_ctx *x, range_state *rs, size_t d) {
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
      st = arena_reserve(rs, need);
      if (st) return st;
      st = lm_clean_text(f->st.cleaner, t, n, rs->out.data + rs->out.len, rs->out.cap - rs->out.len, &ol, &reason, &rs->cc);
      if (st != LM_ERANGE) break;
      need = ol;
    }
    if (st) return st;
    pos = rs->out.len; /* not committed to the arena until the doc is kept */
    len = reason == LM_REASON_KEPT ? ol : 0;
    if (reason != LM_REASON_KEPT) rs->drop_clean++;
  }
  if (reason == LM_REASON_KEPT && f->st.quality) {
    const uint8_t *in = pos == SIZE_MAX ? t : rs->out.data + pos;
    lm_quality_doc_result qr;
    st = lm_quality_check(f->st.quality, rs->qs, in, len, &qr, &rs->qc);
    if (st) return st;
    reason = qr.reason;
    if (reason != LM_REASON_KEPT) rs->drop_quality++;
    if (reason == LM_REASON_KEPT && qr.text != in) {
      /* rewritten (C4 removed lines): the new text lives in the scratch; it
       * replaces the cleaned text at the (uncommitted) arena tail */
      pos = rs->out.len;
      st = arena_reserve(rs, qr.len);
      if (st) return st;
      if (qr.len) memcpy(rs->out.data + pos, qr.text, qr.len);
      len = qr.len;
    } else if (reason == LM_REASON_KEPT) {
      len = qr.len;
    }
  }
  if (reason != LM_REASON_KEPT) {
    len = 0;
    pos = SIZE_MAX;
  } else if (pos != SIZE_MAX) {
    rs->out.len = pos + len; /* commit the doc's bytes to the arena */
  }
  x->reasons[d] = reason;
  x->pos[d] = pos;
  x->len[d] = len;
  if (reason == LM_REASON_KEPT && f->st.dedup)
    x->hashes[d] = lm_hash128(pos == SIZE_MAX ? t : rs->out.data + pos, len, x->seed);
  return LM_OK;
}

static lm_status p1_run(void *vctx, size_t begin, size_t end) {
  p1_ctx *x = (p1_ctx *)vctx;
  for (size_t r = begin; r < end; r++) {
    range_state *rs = &x->ranges[r];
    rs->out.len = 0;
    memset(&rs->cc, 0, sizeof rs->cc);
    memset(&rs->qc, 0, sizeof rs->qc);
    rs->drop_clean = rs->drop_quality = 0;
    if (x->f->st.quality && !rs->qs) {
      lm_status st = lm_quality_scratch_create(&rs->qs);
      if (st) return st;
    }
    size_t d0 = r * LM_FUSED_GRAIN, d1 = d0 + LM_FUSED_GRAIN;
    if (d1 > x->docs->n) d1 = x->docs->n;
    for (size_t d = d0; d < d1; d++) {
      lm_status st = p1_doc(x, rs, d);
      if (st) return st;
    }
  }
  return LM_OK;
}

/* ------------------------------------------------------------ phase 3 */

typedef struct {
  const lm_fused *f;
  const lm_docs *docs;
  const range_state *ranges;
  const size_t *pos, *len;
  const size_t *surv; /* survivor document indexes, in order */
  size_t nsurv, nchunks;
  lm_pii_buf *bufs;          /* per chunk */
  size_t *out_len;           /* per survivor */
  uint64_t (*cyc)[LM_PII_TYPE_COUNT];   /* per chunk: cycle start */
  lm_pii_counts *counts;     /* per chunk */
  int count_only;
  /* copy step */
  uint8_t *dst;
  const size_t *chunk_off; /* per chunk: offset of its output in dst */
} p3_ctx;

static void chunk_range(size_t n, size_t nchunks, size_t c, size_t *b, size_t *e) {
  *b = n / nchunks * c + (c < n % nchunks ? c : n % nchunks);
  *e = *b + n / nchunks + (c < n % nchunks ? 1 : 0);
}

static const uint8_t *doc_text(const p3_ctx *x, size_t d) {
  if (x->pos[d] == SIZE_MAX) return x->docs->data + x->docs->offsets[d];
  return x->ranges[d / LM_FUSED_GRAIN].out.data + x->pos[d];
}

static lm_status p3_mask(void *vctx, size_t cb, size_t ce) {
  p3_ctx *x = (p3_ctx *)vctx;
  const lm_pii_masker *m = x->f->st.pii;
  for (size_t c = cb; c < ce; c++) {
    size_t b, e;
    chunk_range(x->nsurv, x->nchunks, c, &b, &e);
    lm_pii_buf *buf = &x->bufs[c];
    buf->len = 0;
    uint64_t cyc[LM_PII_TYPE_COUNT];
    memcpy(cyc, x->cyc[c], sizeof cyc);
    lm_pii_counts *tot = &x->counts[c];
    memset(tot, 0, sizeof *tot);
    for (size_t k = b; k < e; k++) {
      size_t d = x->surv[k], before = buf->len;
      lm_pii_counts dc;
      lm_status st = lm_pii_mask_doc(m, doc_text(x, d), x->len[d], cyc, buf, &dc);
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
  }
  return LM_OK;
}

/* Gather: chunk c's output goes to dst + chunk_off[c].  With PII off, the texts
 * are copied straight from the arenas / the input. */
static lm_status p3_copy(void *vctx, size_t cb, size_t ce) {
  p3_ctx *x = (p3_ctx *)vctx;
  for (size_t c = cb; c < ce; c++) {
    uint8_t *dst = x->dst + x->chunk_off[c];
    if (x->f->st.pii) {
      if (x->bufs[c].len) memcpy(dst, x->bufs[c].data, x->bufs[c].len);
      continue;
    }
    size_t b, e;
    chunk_range(x->nsurv, x->nchunks, c, &b, &e);
    for (size_t k = b; k < e; k++) {
      size_t d = x->surv[k], n = x->len[d];
      if (n) memcpy(dst, doc_text(x, d), n);
      dst += n;
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

static size_t threads_for(const lm_exec *ex, size_t items, size_t grain) {
  if (!ex || ex->num_threads <= 1) return 1;
  size_t t = (size_t)ex->num_threads, by = items / (grain ? grain : 1);
  if (t > 256) t = 256;
  return by < t ? (by ? by : 1) : t;
}

lm_status lm_fused_run(lm_fused *f, const lm_docs *docs, lm_batch_result *out, const lm_exec *exec) {
  if (!f || !out) return LM_EINVAL;
  lm_status st = lm_docs_validate(docs);
  if (st) return st;
  if (f->st.dedup && (f->st.dedup->closed || f->st.dedup->failed)) return LM_ESTATE;
  const size_t n = docs->n;
  st = lm_batch_result_begin(out, n, (size_t)(docs->offsets[n] - docs->offsets[0]) + 16);
  if (st) return st;
  if (n == 0) {
    f->counters.batches++;
    return LM_OK;
  }
  lm_exec ex = exec ? *exec : (lm_exec){1, 0};
  size_t grain = ex.min_items_per_thread ? ex.min_items_per_thread : 0;

  /* phase 1 */
  const size_t nr = (n + LM_FUSED_GRAIN - 1) / LM_FUSED_GRAIN;
  if (f->nranges_cap < nr) {
    range_state *q = (range_state *)realloc(f->ranges, nr * sizeof *q);
    if (!q) return LM_ENOMEM;
    memset(q + f->nranges_cap, 0, (nr - f->nranges_cap) * sizeof *q);
    f->ranges = q;
    f->nranges_cap = nr;
  }
  size_t *pos = (size_t *)malloc(n * sizeof(size_t));
  size_t *len = (size_t *)malloc(n * sizeof(size_t));
  size_t *surv = (size_t *)malloc(n * sizeof(size_t));
  lm_hash128_t *hashes = f->st.dedup ? (lm_hash128_t *)malloc(n * sizeof(lm_hash128_t)) : NULL;
  uint8_t *is_new = f->st.dedup ? (uint8_t *)malloc(n) : NULL;
  p3_ctx p3;
  memset(&p3, 0, sizeof p3);
  if (!pos || !len || !surv || (f->st.dedup && (!hashes || !is_new))) {
    st = LM_ENOMEM;
    goto done;
  }
  p1_ctx x1 = {f, docs, f->ranges, out->reasons, pos, len, hashes, f->st.dedup ? f->st.dedup->seed : 0};
  lm_exec ex1 = ex;
  ex1.min_items_per_thread = grain ? (grain + LM_FUSED_GRAIN - 1) / LM_FUSED_GRAIN : 4;
  st = lm_parallel_for(&ex1, nr, p1_run, &x1);
  if (st) goto done;

  /* phase 2: survivors of clean + quality, admitted in input order */
  size_t nsurv = 0;
  for (size_t d = 0; d < n; d++)
    if (out->reasons[d] == LM_REASON_KEPT) surv[nsurv++] = d;
  lm_fused_counters *C = &f->counters;
  if (f->st.dedup && nsurv) {
    for (size_t k = 0; k < nsurv; k++) hashes[k] = hashes[surv[k]]; /* compact, order kept (k <= surv[k]) */
    size_t done_n = nsurv;
    st = lm_dedup_check_insert_hashes(f->st.dedup, hashes, nsurv, is_new, &done_n);
    if (st) nsurv = done_n; /* those stay admitted (counted below); the batch fails */
    size_t w = 0;
    for (size_t k = 0; k < nsurv; k++) {
      C->dedup_probes++;
      if (is_new[k]) {
        C->dedup_inserts++;
        surv[w++] = surv[k];
      } else {
        out->reasons[surv[k]] = LM_REASON_DUPLICATE;
        C->dropped_duplicate++;
      }
    }
    nsurv = w;
    if (st) goto done;
  }

  /* The masker refuses documents over its max_doc_bytes: dropped (TOO_LARGE),
   * after the dedup admission exactly as in the chain lm_dedup_run -> lm_pii_run. */
  uint64_t pii_too_large = 0;
  if (f->st.pii && f->st.pii->max_doc_bytes) {
    size_t w = 0;
    for (size_t k = 0; k < nsurv; k++) {
      if (len[surv[k]] > f->st.pii->max_doc_bytes) {
        out->reasons[surv[k]] = LM_REASON_TOO_LARGE;
        pii_too_large++;
      } else {
        surv[w++] = surv[k];
      }
    }
    nsurv = w;
  }

  /* phase 3 */
  {
    size_t nch = threads_for(&ex, nsurv, grain ? grain : 256);
    if (nch > f->npbufs && f->st.pii) {
      lm_pii_buf *nb = (lm_pii_buf *)realloc(f->pbufs, nch * sizeof *nb);
      if (!nb) {
        st = LM_ENOMEM;
        goto done;
      }
      memset(nb + f->npbufs, 0, (nch - f->npbufs) * sizeof *nb);
      f->pbufs = nb;
      f->npbufs = nch;
    }
    p3.f = f;
    p3.docs = docs;
    p3.ranges = f->ranges;
    p3.pos = pos;
    p3.len = len;
    p3.surv = surv;
    p3.nsurv = nsurv;
    p3.nchunks = nch;
    p3.bufs = f->pbufs;
    p3.out_len = (size_t *)malloc((nsurv ? nsurv : 1) * sizeof(size_t));
    p3.cyc = (uint64_t(*)[LM_PII_TYPE_COUNT])calloc(nch, sizeof *p3.cyc);
    p3.counts = (lm_pii_counts *)calloc(nch, sizeof *p3.counts);
    size_t *chunk_off = (size_t *)calloc(nch + 1, sizeof(size_t));
    p3.chunk_off = chunk_off;
    if (!p3.out_len || !p3.cyc || !p3.counts || !chunk_off) {
      free(chunk_off);
      st = LM_ENOMEM;
      goto done;
    }
    lm_exec ex3 = {(int)nch, 1};
    const lm_pii_masker *m = f->st.pii;
    int cycling = 0;
    if (m && m->cycle_across_documents)
      for (int t = 0; t < LM_PII_TYPE_COUNT; t++) cycling |= ((m->types >> t) & 1) && m->nrepl[t] > 1;
    if (m) {
      for (size_t c = 0; c < nch; c++) memcpy(p3.cyc[c], f->cycle, sizeof f->cycle);
      if (cycling && nch > 1) { /* count pass: where each chunk's cycle starts */
        p3.count_only = 1;
        st = lm_parallel_for(&ex3, nch, p3_mask, &p3);
        uint64_t acc[LM_PII_TYPE_COUNT];
        memcpy(acc, f->cycle, sizeof acc);
        for (size_t c = 0; c < nch && !st; c++) {
          memcpy(p3.cyc[c], acc, sizeof acc);
          for (int t = 0; t < LM_PII_TYPE_COUNT; t++) acc[t] += p3.counts[c].matches[t];
        }
        p3.count_only = 0;
      }
      if (!st) st = lm_parallel_for(&ex3, nch, p3_mask, &p3);
    } else {
      for (size_t k = 0; k < nsurv; k++) p3.out_len[k] = len[surv[k]];
    }
    if (!st) {
      for (size_t c = 0; c < nch; c++) {
        size_t b, e, sum = 0;
        chunk_range(nsurv, nch, c, &b, &e);
        for (size_t k = b; k < e; k++) sum += p3.out_len[k];
        chunk_off[c + 1] = chunk_off[c] + sum;
      }
      st = lm_batch_result_reserve_data(out, chunk_off[nch], &p3.dst);
    }
    if (!st) st = lm_parallel_for(&ex3, nch, p3_copy, &p3);
    for (size_t k = 0; k < nsurv && !st; k++) st = lm_batch_result_commit(out, (int64_t)surv[k], p3.out_len[k]);
    if (!st) {
      /* counters (only for a complete batch) */
      C->batches++;
      C->docs_in += n;
      C->docs_out += nsurv;
      C->bytes_in += (uint64_t)(docs->offsets[n] - docs->offsets[0]);
      C->bytes_out += out->data_len;
      for (size_t r = 0; r < nr; r++) {
        add_u64((uint64_t *)&C->clean, (const uint64_t *)&f->ranges[r].cc, sizeof C->clean / sizeof(uint64_t));
        add_u64((uint64_t *)&C->quality, (const uint64_t *)&f->ranges[r].qc, sizeof C->quality / sizeof(uint64_t));
      }
      C->dropped_pii += pii_too_large;
      C->pii.docs_too_large += pii_too_large;
      for (size_t r = 0; r < nr; r++) {
        C->dropped_clean += f->ranges[r].drop_clean;
        C->dropped_quality += f->ranges[r].drop_quality;
      }
      if (m) {
        for (size_t c = 0; c < nch; c++) {
          add_pii(&C->pii, &p3.counts[c]);
          if (cycling)
            for (int t = 0; t < LM_PII_TYPE_COUNT; t++) f->cycle[t] += p3.counts[c].matches[t];
        }
      }
    }
    free(chunk_off);
  }

done:
  free(p3.out_len);
  free(p3.cyc);
  free(p3.counts);
  free(pos);
  free(len);
  free(surv);
  free(hashes);
  free(is_new);
  return st;
}
