/* fuzz_pipeline.c — FusedPipeline (clean -> quality -> dedup -> PII in one pass)
 * against the modular chain lm_cleaner_run -> lm_quality_run -> lm_dedup_run ->
 * lm_pii_run, on arbitrary documents.
 *
 * Input: three parameter bytes (stages on/off, options, threads), then the
 * documents (length-prefixed), split into two batches so deduplication and the
 * PII replacement cycle carry across batches.
 * Invariants:
 *  - the fused output (texts, source indexes, one reason per input document)
 *    equals the chain's, batch by batch, and the deduplicators end at the same LSN;
 *  - the fused pipeline gives the same output on 1 and 3 threads;
 *  - with the cleaner on, every output text is valid UTF-8.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "luminamoon/pipeline.h"

#define MAX_DOCS 40

typedef struct {
  lm_cleaner *cl;
  lm_quality *q;
  lm_dedup *d;
  lm_pii_masker *pii;
} stages;

/* The chain over one batch: reasons per input, texts and source indexes. */
typedef struct {
  int32_t reasons[MAX_DOCS];
  int64_t src[MAX_DOCS];
  uint8_t *data;
  int64_t offs[MAX_DOCS + 1];
  size_t n_out;
} flat;

static void flat_from(flat *f, const lm_batch_result *r, size_t n_in) {
  memcpy(f->reasons, r->reasons, n_in * sizeof(int32_t));
  f->n_out = r->n_out;
  memcpy(f->src, r->source_index, r->n_out * sizeof(int64_t));
  memcpy(f->offs, r->offsets, (r->n_out + 1) * sizeof(int64_t));
  f->data = malloc((size_t)r->offsets[r->n_out] + 1);
  if (r->offsets[r->n_out]) memcpy(f->data, r->data, (size_t)r->offsets[r->n_out]);
}

static void flat_eq(const flat *a, const flat *b, size_t n_in) {
  for (size_t i = 0; i < n_in; i++)
    if (a->reasons[i] != b->reasons[i]) {
      fprintf(stderr, "doc %zu: reason %d vs %d\n", i, a->reasons[i], b->reasons[i]);
      CHECK(0);
    }
  CHECK(a->n_out == b->n_out);
  for (size_t k = 0; k < a->n_out; k++) {
    CHECK(a->src[k] == b->src[k]);
    size_t la = (size_t)(a->offs[k + 1] - a->offs[k]), lb = (size_t)(b->offs[k + 1] - b->offs[k]);
    if (la != lb || (la && memcmp(a->data + a->offs[k], b->data + b->offs[k], la) != 0)) {
      fprintf(stderr, "output %zu (doc %lld) differs: %zu vs %zu bytes\n", k, (long long)a->src[k], la, lb);
      CHECK(0);
    }
  }
}

/* One stage of the chain: run `fn` on the texts of cur (their input indexes in
 * idx), record drops in reasons, and make its output the next `cur`. */
typedef lm_status (*stage_fn)(void *obj, const lm_docs *, lm_batch_result *, const lm_exec *);
static lm_status run_cleaner(void *o, const lm_docs *d, lm_batch_result *r, const lm_exec *e) { return lm_cleaner_run(o, d, r, e); }
static lm_status run_quality(void *o, const lm_docs *d, lm_batch_result *r, const lm_exec *e) { return lm_quality_run(o, d, r, e); }
static lm_status run_dedup(void *o, const lm_docs *d, lm_batch_result *r, const lm_exec *e) { return lm_dedup_run(o, d, r, e); }
static lm_status run_pii(void *o, const lm_docs *d, lm_batch_result *r, const lm_exec *e) { return lm_pii_run(o, d, r, e); }

static void chain(const stages *s, const lm_docs *in, flat *out, const lm_exec *ex) {
  size_t n = in->n;
  for (size_t i = 0; i < n; i++) out->reasons[i] = LM_REASON_KEPT;
  /* current texts: start with the input */
  int64_t *idx = malloc((n + 1) * sizeof *idx);
  for (size_t i = 0; i < n; i++) idx[i] = (int64_t)i;
  lm_batch_result cur, next;
  lm_batch_result_init(&cur);
  lm_batch_result_init(&next);
  CHECK(lm_batch_result_begin(&cur, n, in->data_len) == LM_OK);
  for (size_t i = 0; i < n; i++)
    CHECK(lm_batch_result_push(&cur, (int64_t)i, in->data + in->offsets[i],
                               (size_t)(in->offsets[i + 1] - in->offsets[i])) == LM_OK);
  void *objs[4] = {s->cl, s->q, s->d, s->pii};
  stage_fn fns[4] = {run_cleaner, run_quality, run_dedup, run_pii};
  for (int k = 0; k < 4; k++) {
    if (!objs[k]) continue;
    lm_docs d = {cur.offsets, cur.data, cur.n_out, cur.data_len};
    CHECK(fns[k](objs[k], &d, &next, ex) == LM_OK);
    for (size_t j = 0; j < cur.n_out; j++)
      if (next.reasons[j] != LM_REASON_KEPT) out->reasons[idx[j]] = next.reasons[j];
    for (size_t j = 0; j < next.n_out; j++) next.source_index[j] = idx[next.source_index[j]];
    for (size_t j = 0; j < next.n_out; j++) idx[j] = next.source_index[j];
    lm_batch_result t = cur;
    cur = next;
    next = t;
  }
  out->n_out = cur.n_out;
  memcpy(out->src, cur.source_index, cur.n_out * sizeof(int64_t));
  memcpy(out->offs, cur.offsets, (cur.n_out + 1) * sizeof(int64_t));
  out->data = malloc(cur.data_len + 1);
  if (cur.data_len) memcpy(out->data, cur.data, cur.data_len);
  lm_batch_result_free(&cur);
  lm_batch_result_free(&next);
  free(idx);
}

static void make_stages(uint8_t a, uint8_t b, stages *s) {
  memset(s, 0, sizeof *s);
  if (!(a & 1)) {
    lm_cleaner_params p;
    lm_cleaner_params_default(&p);
    p.normalize = (lm_normalization)((b >> 4) % 3);
    p.max_doc_bytes = (b & 0x40) ? 64 : 0;
    CHECK(lm_cleaner_create(&p, &s->cl) == LM_OK);
  }
  if (!(a & 2)) {
    lm_quality_params p;
    lm_quality_params_default(&p);
    p.gq_min_doc_words = b & 3;
    p.c4_min_sentences = (b >> 2) & 1;
    p.c4_modify_text = !(a & 0x40);
    CHECK(lm_quality_create(&p, &s->q) == LM_OK);
  }
  if (!(a & 4)) {
    lm_dedup_params p;
    lm_dedup_params_default(&p);
    p.initial_capacity = 16;
    CHECK(lm_dedup_create(&p, &s->d) == LM_OK);
  }
  if (!(a & 8)) {
    lm_pii_params p;
    lm_pii_params_default(&p, (a & 0x10) ? LM_PII_MODE_DATATROVE : LM_PII_MODE_STRICT);
    p.max_doc_bytes = (b & 0x80) ? 48 : 0;
    CHECK(lm_pii_create(&p, &s->pii) == LM_OK);
  }
}

static void free_stages(stages *s) {
  lm_cleaner_destroy(s->cl);
  lm_quality_destroy(s->q);
  lm_dedup_destroy(s->d);
  lm_pii_destroy(s->pii);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz f = {data, size};
  uint8_t a = fz_u8(&f), b = fz_u8(&f), c = fz_u8(&f);
  int64_t offs[MAX_DOCS + 1];
  uint8_t *buf = malloc(size + 1);
  size_t n = 0, pos = 0;
  offs[0] = 0;
  while (f.n && n < MAX_DOCS) {
    size_t len;
    const uint8_t *s = fz_str(&f, &len);
    memcpy(buf + pos, s, len);
    pos += len;
    offs[++n] = (int64_t)pos;
  }
  size_t split = n ? c % (n + 1) : 0;
  stages sf, s1, sc; /* fused on 3 threads, fused on 1 thread, chain */
  make_stages(a, b, &sf);
  make_stages(a, b, &s1);
  make_stages(a, b, &sc);
  lm_fused_stages fs = {sf.cl, sf.q, sf.d, sf.pii, NULL}, fs1 = {s1.cl, s1.q, s1.d, s1.pii, NULL};
  lm_fused *fu = NULL, *fu1 = NULL;
  CHECK(lm_fused_create(&fs, &fu) == LM_OK);
  CHECK(lm_fused_create(&fs1, &fu1) == LM_OK);
  lm_exec ex3 = {3, 1};
  for (int batch = 0; batch < 2; batch++) {
    size_t lo = batch ? split : 0, hi = batch ? n : split;
    int64_t bo[MAX_DOCS + 1];
    for (size_t i = lo; i <= hi; i++) bo[i - lo] = offs[i] - offs[lo];
    lm_docs d = {bo, buf + offs[lo], hi - lo, (size_t)(offs[hi] - offs[lo])};
    lm_batch_result r;
    lm_batch_result_init(&r);
    flat ff, f1, fc;
    CHECK(lm_fused_run(fu, &d, &r, &ex3) == LM_OK);
    CHECK(r.n_in == d.n);
    flat_from(&ff, &r, d.n);
    CHECK(lm_fused_run(fu1, &d, &r, NULL) == LM_OK);
    flat_from(&f1, &r, d.n);
    lm_batch_result_free(&r);
    chain(&sc, &d, &fc, &ex3);
    flat_eq(&ff, &fc, d.n);
    flat_eq(&ff, &f1, d.n);
    if (sf.cl)
      for (size_t k = 0; k < ff.n_out; k++)
        CHECK(ref_utf8_valid(ff.data + ff.offs[k], (size_t)(ff.offs[k + 1] - ff.offs[k])));
    free(ff.data), free(f1.data), free(fc.data);
  }
  if (sf.d) {
    uint64_t l1 = 0, l2 = 0;
    CHECK(lm_dedup_lsn(sf.d, &l1) == LM_OK && lm_dedup_lsn(sc.d, &l2) == LM_OK && l1 == l2);
  }
  lm_fused_destroy(fu);
  lm_fused_destroy(fu1);
  free_stages(&sf), free_stages(&s1), free_stages(&sc);
  free(buf);
  return 0;
}
