/* fuzz_quality.c — QualityFilter (Gopher, C4, FineWeb rules + the spaCy-style
 * word tokenizer) on arbitrary bytes.
 *
 * Input: two parameter bytes, then the documents (length-prefixed).
 * Invariants:
 *  - every reason is KEPT, TOO_LARGE (only above max_doc_bytes) or
 *    QUALITY_BASE + an id of an enabled rule;
 *  - a kept text is no longer than the input; unchanged when `modified` is 0
 *    or C4 rewriting is off; valid UTF-8 whenever the input is;
 *  - lm_quality_words: spans in bounds, increasing, non-overlapping,
 *    non-empty, without ASCII whitespace; the total does not depend on `cap`;
 *  - lm_quality_run equals lm_quality_check per document, 1 thread == 4 threads.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "luminamoon/quality.h"

#define MAX_DOCS 32

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz f = {data, size};
  uint8_t a = fz_u8(&f), b = fz_u8(&f);
  lm_quality_params p;
  CHECK(lm_quality_params_default(&p) == LM_OK);
  for (int s = 0; s < LM_QSET_COUNT; s++)
    if (a & (1u << s)) CHECK(lm_quality_params_set_rule_set(&p, (lm_quality_rule_set)s, 0) == LM_OK);
  p.c4_modify_text = !(a & 0x10);
  if (a & 0x20) { /* small documents can pass: relax the length rules */
    p.gq_min_doc_words = (size_t)(b & 7);
    p.c4_min_sentences = (size_t)((b >> 3) & 3);
  }
  p.max_doc_bytes = (a & 0x40) ? (size_t)(b >> 5) * 32 + 1 : 0;
  lm_quality *q = NULL;
  CHECK(lm_quality_create(&p, &q) == LM_OK);
  lm_quality_scratch *sc = NULL;
  CHECK(lm_quality_scratch_create(&sc) == LM_OK);

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
  int32_t reason[MAX_DOCS];
  uint8_t *kept[MAX_DOCS];
  size_t klen[MAX_DOCS];
  size_t spans[2 * 256];
  for (size_t i = 0; i < n; i++) {
    const uint8_t *t = buf + offs[i];
    size_t len = (size_t)(offs[i + 1] - offs[i]);
    lm_quality_doc_result r;
    CHECK(lm_quality_check(q, sc, t, len, &r, NULL) == LM_OK);
    reason[i] = r.reason;
    kept[i] = NULL;
    klen[i] = 0;
    if (p.max_doc_bytes && len > p.max_doc_bytes) {
      CHECK(r.reason == LM_REASON_TOO_LARGE);
    } else if (r.reason != LM_REASON_KEPT) {
      int id = r.reason - LM_REASON_QUALITY_BASE;
      CHECK(id >= 0 && id < LM_Q_RULE_COUNT);
      CHECK(p.enabled & ((uint64_t)1 << id));
    } else {
      CHECK(r.len <= len);
      CHECK(r.len == 0 || r.text != NULL);
      if (!r.modified) CHECK(r.len == len && (len == 0 || memcmp(r.text, t, len) == 0));
      if (!p.c4_modify_text) CHECK(!r.modified);
      if (ref_utf8_valid(t, len)) CHECK(ref_utf8_valid(r.text, r.len));
      kept[i] = malloc(r.len + 1);
      if (r.len) memcpy(kept[i], r.text, r.len);
      klen[i] = r.len;
    }
    /* the tokenizer */
    size_t nw = 0, nw2 = 0;
    CHECK(lm_quality_words(q, sc, t, len, spans, 256, &nw) == LM_OK);
    CHECK(lm_quality_words(q, sc, t, len, spans, 3, &nw2) == LM_OK && nw2 == nw);
    CHECK(lm_quality_words(q, sc, t, len, spans, 256, &nw2) == LM_OK && nw2 == nw);
    size_t prev_end = 0;
    for (size_t w = 0; w < nw && w < 256; w++) {
      size_t o = spans[2 * w], l = spans[2 * w + 1];
      CHECK(l > 0 && o >= prev_end && o + l <= len);
      for (size_t k = o; k < o + l; k++) CHECK(t[k] != ' ' && t[k] != '\n' && t[k] != '\t');
      prev_end = o + l;
    }
  }
  /* batch: 1 and 4 threads equal the per-document answers */
  lm_docs docs = {offs, buf, n, pos};
  for (int threads = 1; threads <= 4; threads += 3) {
    lm_exec ex = {threads, 1};
    lm_batch_result r;
    lm_batch_result_init(&r);
    CHECK(lm_quality_run(q, &docs, &r, &ex) == LM_OK);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
      CHECK(r.reasons[i] == reason[i]);
      if (reason[i] != LM_REASON_KEPT) continue;
      CHECK(k < r.n_out && r.source_index[k] == (int64_t)i);
      size_t l = (size_t)(r.offsets[k + 1] - r.offsets[k]);
      CHECK(l == klen[i] && (l == 0 || memcmp(r.data + r.offsets[k], kept[i], l) == 0));
      k++;
    }
    CHECK(k == r.n_out);
    lm_batch_result_free(&r);
  }
  for (size_t i = 0; i < n; i++) free(kept[i]);
  free(buf);
  lm_quality_scratch_destroy(sc);
  lm_quality_destroy(q);
  return 0;
}
