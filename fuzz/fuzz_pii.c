/* fuzz_pii.c — PIIMasker (strict and datatrove modes) on arbitrary bytes.
 *
 * Input: two parameter bytes, then the documents (length-prefixed).
 * Invariants:
 *  - lm_pii_find: spans in bounds, non-empty, sorted and non-overlapping (strict
 *    mode: in input coordinates, so each span's bytes hold an ASCII anchor);
 *  - the masked text of a document is exactly the input with each span
 *    replaced by its type's replacement (strict mode, one replacement per type),
 *    so it is valid UTF-8 whenever the input is;
 *  - the replacement tokens are never matched: lm_pii_find on the masked text
 *    reports no span that overlaps an inserted token (masking is not a fixed
 *    point in general: context rules look at the neighbours, e.g. a phone glued
 *    to the digit of an IPv4 address is refused, and accepted once that address
 *    became "<IP_ADDRESS>" — found by this target, and correct);
 *  - lm_pii_run equals lm_pii_mask_doc per document, 1 thread == 4 threads;
 *    the counters add up to the spans found;
 *  - with max_doc_bytes set, a larger document is refused (LM_REASON_TOO_LARGE,
 *    no output; LM_ETOOBIG from mask_doc / find) and the others come out as
 *    without the limit.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "luminamoon/pii.h"

#define MAX_DOCS 32
#define MAX_SPANS 512

static const char *k_repl[LM_PII_TYPE_COUNT] = {"<EMAIL>", "<IP_ADDRESS>", "<IP_ADDRESS>",
                                                 "<PHONE>", "<CREDIT_CARD>", "<IBAN>"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz f = {data, size};
  uint8_t a = fz_u8(&f), b = fz_u8(&f);
  lm_pii_params p;
  lm_pii_mode mode = (a & 1) ? LM_PII_MODE_DATATROVE : LM_PII_MODE_STRICT;
  CHECK(lm_pii_params_default(&p, mode) == LM_OK);
  if (mode == LM_PII_MODE_STRICT) {
    p.types = (b & 0x3f) ? (b & 0x3f) : LM_PII_ALL_TYPES;
    p.ipv4_public_only = (a >> 1) & 1;
    p.ipv6_public_only = (a >> 2) & 1;
  } else {
    p.ipv4_public_only = (a >> 1) & 1;
  }
  p.cycle_across_documents = (a >> 3) & 1;
  lm_pii_masker *m = NULL;
  CHECK(lm_pii_create(&p, &m) == LM_OK);

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
  lm_pii_match *sp = malloc(MAX_SPANS * sizeof *sp);
  lm_pii_buf outs[MAX_DOCS];
  memset(outs, 0, sizeof outs);
  uint64_t cycle[LM_PII_TYPE_COUNT] = {0};
  uint64_t total_matches[LM_PII_TYPE_COUNT] = {0};
  for (size_t i = 0; i < n; i++) {
    const uint8_t *t = buf + offs[i];
    size_t len = (size_t)(offs[i + 1] - offs[i]);
    size_t nf = 0;
    CHECK(lm_pii_find(m, t, len, sp, MAX_SPANS, &nf) == LM_OK);
    size_t nf0 = 0;
    CHECK(lm_pii_find(m, t, len, NULL, 0, &nf0) == LM_OK && nf0 == nf);
    lm_pii_counts c;
    uint64_t *cs = p.cycle_across_documents ? cycle : NULL;
    CHECK(lm_pii_mask_doc(m, t, len, cs, &outs[i], &c) == LM_OK);
    uint64_t sum = 0;
    for (int k = 0; k < LM_PII_TYPE_COUNT; k++) {
      sum += c.matches[k];
      total_matches[k] += c.matches[k];
      if (p.cycle_across_documents) cycle[k] += c.matches[k];
    }
    CHECK(sum == nf);
    CHECK(c.bytes_in == len && c.bytes_out == outs[i].len);
    CHECK((nf > 0) == (c.docs_changed == 1) || mode == LM_PII_MODE_DATATROVE);
    /* strict: one coordinate system, sorted and disjoint.  datatrove: the
     * e-mail spans are in input coordinates and the IPv4 spans in those of the
     * text after e-mail replacement (pii.h), so each pass is sorted on its own */
    size_t prev[LM_PII_TYPE_COUNT] = {0}, prev_all = 0;
    for (size_t k = 0; k < nf && k < MAX_SPANS; k++) {
      CHECK(sp[k].start < sp[k].end);
      CHECK((int)sp[k].type >= 0 && sp[k].type < LM_PII_TYPE_COUNT);
      if (mode == LM_PII_MODE_STRICT) {
        CHECK(sp[k].start >= prev_all);
        CHECK(sp[k].end <= len);
        CHECK(p.types & (1u << sp[k].type));
      } else {
        CHECK(sp[k].type == LM_PII_EMAIL || sp[k].type == LM_PII_IPV4);
        CHECK(sp[k].start >= prev[sp[k].type]);
        if (sp[k].type == LM_PII_EMAIL) CHECK(sp[k].end <= len);
      }
      prev[sp[k].type] = sp[k].end;
      prev_all = sp[k].end;
    }
    if (mode == LM_PII_MODE_STRICT && nf <= MAX_SPANS) {
      /* rebuild the masked text from the spans */
      size_t cap = len + nf * 16 + 1, o = 0, at = 0;
      uint8_t *want = malloc(cap);
      size_t *tok = malloc((2 * nf + 1) * sizeof *tok); /* token intervals in the output */
      for (size_t k = 0; k < nf; k++) {
        memcpy(want + o, t + at, sp[k].start - at);
        o += sp[k].start - at;
        size_t rl = strlen(k_repl[sp[k].type]);
        tok[2 * k] = o;
        tok[2 * k + 1] = o + rl;
        memcpy(want + o, k_repl[sp[k].type], rl);
        o += rl;
        at = sp[k].end;
      }
      memcpy(want + o, t + at, len - at);
      o += len - at;
      CHECK(o == outs[i].len && (o == 0 || memcmp(want, outs[i].data, o) == 0));
      free(want);
      if (ref_utf8_valid(t, len)) CHECK(ref_utf8_valid(outs[i].data, outs[i].len));
      /* the inserted tokens are never matched again */
      lm_pii_match *sp2 = malloc(MAX_SPANS * sizeof *sp2);
      size_t nf2 = 0;
      CHECK(lm_pii_find(m, outs[i].data, outs[i].len, sp2, MAX_SPANS, &nf2) == LM_OK);
      for (size_t a2 = 0; a2 < nf2 && a2 < MAX_SPANS; a2++)
        for (size_t k = 0; k < nf; k++) CHECK(sp2[a2].end <= tok[2 * k] || sp2[a2].start >= tok[2 * k + 1]);
      free(sp2);
      free(tok);
    }
  }
  /* batch: 1 and 4 threads, same output as per document (counters reset between) */
  lm_docs docs = {offs, buf, n, pos};
  for (int threads = 1; threads <= 4; threads += 3) {
    CHECK(lm_pii_reset_counters(m) == LM_OK);
    lm_exec ex = {threads, 1};
    lm_batch_result r;
    lm_batch_result_init(&r);
    CHECK(lm_pii_run(m, &docs, &r, &ex) == LM_OK);
    CHECK(r.n_out == n);
    for (size_t i = 0; i < n; i++) {
      CHECK(r.reasons[i] == LM_REASON_KEPT && r.source_index[i] == (int64_t)i);
      size_t l = (size_t)(r.offsets[i + 1] - r.offsets[i]);
      CHECK(l == outs[i].len && (l == 0 || memcmp(r.data + r.offsets[i], outs[i].data, l) == 0));
    }
    lm_pii_counts c;
    CHECK(lm_pii_get_counters(m, &c) == LM_OK && c.docs == n);
    for (int k = 0; k < LM_PII_TYPE_COUNT; k++) CHECK(c.matches[k] == total_matches[k]);
    lm_batch_result_free(&r);
  }
  /* the size limit */
  p.max_doc_bytes = (size_t)(a >> 4) * 8 + 1;
  lm_pii_masker *ml = NULL;
  CHECK(lm_pii_create(&p, &ml) == LM_OK);
  {
    lm_exec ex = {2, 1};
    lm_batch_result r;
    lm_batch_result_init(&r);
    CHECK(lm_pii_run(ml, &docs, &r, &ex) == LM_OK);
    size_t j = 0, refused = 0;
    int same_cycle = mode == LM_PII_MODE_STRICT || !p.cycle_across_documents;
    for (size_t i = 0; i < n; i++) {
      size_t len = (size_t)(offs[i + 1] - offs[i]);
      if (len > p.max_doc_bytes) {
        CHECK(r.reasons[i] == LM_REASON_TOO_LARGE);
        lm_pii_buf tb = {NULL, 0, 0};
        size_t nf = 0;
        CHECK(lm_pii_mask_doc(ml, buf + offs[i], len, NULL, &tb, NULL) == LM_ETOOBIG && tb.len == 0);
        CHECK(lm_pii_find(ml, buf + offs[i], len, NULL, 0, &nf) == LM_ETOOBIG);
        lm_pii_buf_free(&tb);
        refused++;
        continue;
      }
      CHECK(r.reasons[i] == LM_REASON_KEPT && j < r.n_out && r.source_index[j] == (int64_t)i);
      size_t l = (size_t)(r.offsets[j + 1] - r.offsets[j]);
      if (same_cycle) CHECK(l == outs[i].len && (l == 0 || memcmp(r.data + r.offsets[j], outs[i].data, l) == 0));
      j++;
    }
    CHECK(j == r.n_out);
    lm_pii_counts c;
    CHECK(lm_pii_get_counters(ml, &c) == LM_OK && c.docs == j && c.docs_too_large == refused);
    lm_batch_result_free(&r);
  }
  lm_pii_destroy(ml);
  for (size_t i = 0; i < n; i++) lm_pii_buf_free(&outs[i]);
  free(sp), free(buf);
  lm_pii_destroy(m);
  return 0;
}
