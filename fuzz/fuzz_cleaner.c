/* fuzz_cleaner.c — TextCleaner on arbitrary bytes.
 *
 * Input: two parameter bytes, then the documents (length-prefixed).
 * Invariants:
 *  - every kept output is valid UTF-8 (reference validator), contains no C0
 *    control other than \t and \n, no DEL, no \r (newline normalization on);
 *  - with spaces collapsed: no "  "; with trimming: no line ends in ' ' or '\t';
 *  - with max_blank_lines = k >= 0: no run of more than k + 1 consecutive '\n';
 *  - without normalization the output fits lm_clean_bound(len);
 *  - idempotence: without normalization, cleaning the output again gives it back;
 *  - lm_cleaner_run equals lm_clean_text per document, and 1 thread == 4 threads;
 *  - documents above max_doc_bytes get LM_REASON_TOO_LARGE and no output.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "luminamoon/clean.h"

#define MAX_DOCS 48

static void check_output(const lm_cleaner_params *p, const uint8_t *o, size_t n) {
  CHECK(ref_utf8_valid(o, n));
  size_t nl_run = 0;
  for (size_t i = 0; i < n; i++) {
    uint8_t c = o[i];
    if (p->remove_control) {
      CHECK(c >= 0x20 || c == '\t' || c == '\n');
      CHECK(c != 0x7f);
      if (c == 0xC2 && i + 1 < n) CHECK(o[i + 1] >= 0xA0 || o[i + 1] < 0x80); /* no C1 */
    }
    if (p->normalize_newlines) CHECK(c != '\r');
    if (p->collapse_spaces && c == ' ' && i + 1 < n) CHECK(o[i + 1] != ' ');
    if (p->trim_trailing && (c == ' ' || c == '\t')) CHECK(i + 1 < n && o[i + 1] != '\n');
    if (c == '\n') {
      nl_run++;
      if (p->max_blank_lines >= 0) CHECK(nl_run <= (size_t)p->max_blank_lines + 1);
    } else {
      nl_run = 0;
    }
    if (p->fold_spaces && p->remove_control) {
      /* U+00A0 and U+3000 never survive folding */
      if (c == 0xC2 && i + 1 < n) CHECK(o[i + 1] != 0xA0);
      if (c == 0xE3 && i + 2 < n) CHECK(!(o[i + 1] == 0x80 && o[i + 2] == 0x80));
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz f = {data, size};
  uint8_t a = fz_u8(&f), b = fz_u8(&f);
  lm_cleaner_params p;
  CHECK(lm_cleaner_params_default(&p) == LM_OK);
  p.normalize = (lm_normalization)(a % 3);
  if (a & 0x04) p.remove_control = 0;
  if (a & 0x08) p.normalize_newlines = 0;
  if (a & 0x10) p.fold_spaces = 0;
  if (a & 0x20) p.collapse_spaces = 0;
  if (a & 0x40) p.trim_trailing = 0;
  if (a & 0x80) p.drop_empty = 0;
  p.max_blank_lines = (int)(b & 3) - 1; /* -1 (no limit) .. 2 */
  p.max_doc_bytes = (b & 4) ? (size_t)(b >> 3) * 8 : 0;
  lm_cleaner *cl = NULL;
  CHECK(lm_cleaner_create(&p, &cl) == LM_OK);

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
  /* per document */
  uint8_t **outs = calloc(n + 1, sizeof *outs);
  size_t *olen = calloc(n + 1, sizeof *olen);
  int32_t *reason = calloc(n + 1, sizeof *reason);
  for (size_t i = 0; i < n; i++) {
    const uint8_t *t = buf + offs[i];
    size_t len = (size_t)(offs[i + 1] - offs[i]);
    size_t cap = lm_clean_bound(len) + 1, ol = 0;
    outs[i] = malloc(cap);
    lm_status s = lm_clean_text(cl, t, len, outs[i], cap, &ol, &reason[i], NULL);
    if (s == LM_ERANGE) { /* normalization needed more */
      CHECK(p.normalize != LM_NORM_NONE && ol > cap);
      outs[i] = realloc(outs[i], ol);
      cap = ol;
      s = lm_clean_text(cl, t, len, outs[i], cap, &ol, &reason[i], NULL);
    }
    CHECK_EQ_STATUS(s, LM_OK);
    olen[i] = ol;
    if (p.max_doc_bytes && len > p.max_doc_bytes) {
      CHECK(reason[i] == LM_REASON_TOO_LARGE);
      continue;
    }
    CHECK(reason[i] == LM_REASON_KEPT || reason[i] == LM_REASON_EMPTY);
    if (reason[i] == LM_REASON_EMPTY) CHECK(p.drop_empty);
    CHECK(ol <= cap);
    if (p.normalize == LM_NORM_NONE) CHECK(ol <= lm_clean_bound(len));
    check_output(&p, outs[i], ol);
    /* idempotence: the cleaner's own output is a fixed point */
    if (p.normalize == LM_NORM_NONE && reason[i] == LM_REASON_KEPT &&
        !(p.max_doc_bytes && ol > p.max_doc_bytes)) {
      size_t cap2 = lm_clean_bound(ol) + 1, ol2 = 0;
      uint8_t *again = malloc(cap2);
      int32_t r2;
      CHECK(lm_clean_text(cl, outs[i], ol, again, cap2, &ol2, &r2, NULL) == LM_OK);
      if (!(r2 == LM_REASON_KEPT && ol2 == ol && memcmp(again, outs[i], ol) == 0)) {
        fprintf(stderr, "not idempotent: doc %zu len %zu -> %zu -> %zu\n", i, len, ol, ol2);
        CHECK(0);
      }
      free(again);
    }
  }
  /* batch, 1 and 4 threads, equals the per-document results.  With (b & 0x80)
   * the documents are repeated to > 2 batch grains (64) so threads really start. */
  size_t reps = (b & 0x80) && n ? (200 + n - 1) / n : 1, N = n * reps;
  int64_t *boffs = malloc((N + 1) * sizeof *boffs);
  boffs[0] = 0;
  for (size_t j = 0; j < N; j++) boffs[j + 1] = boffs[j] + (offs[j % n + 1] - offs[j % n]);
  uint8_t *bbuf = malloc((size_t)boffs[N] + 1);
  for (size_t j = 0; j < N; j++)
    memcpy(bbuf + boffs[j], buf + offs[j % n], (size_t)(boffs[j + 1] - boffs[j]));
  lm_docs docs = {boffs, bbuf, N, (size_t)boffs[N]};
  for (int threads = 1; threads <= 4; threads += 3) {
    lm_exec ex = {threads, 1};
    lm_batch_result r;
    lm_batch_result_init(&r);
    CHECK(lm_cleaner_run(cl, &docs, &r, &ex) == LM_OK);
    CHECK(r.n_in == N);
    size_t k = 0;
    for (size_t j = 0; j < N; j++) {
      size_t i = j % n;
      CHECK(r.reasons[j] == reason[i]);
      if (reason[i] != LM_REASON_KEPT) continue;
      CHECK(k < r.n_out && r.source_index[k] == (int64_t)j);
      size_t l = (size_t)(r.offsets[k + 1] - r.offsets[k]);
      CHECK(l == olen[i] && (l == 0 || memcmp(r.data + r.offsets[k], outs[i], l) == 0));
      k++;
    }
    CHECK(k == r.n_out && r.offsets[0] == 0);
    lm_batch_result_free(&r);
  }
  free(boffs), free(bbuf);
  for (size_t i = 0; i < n; i++) free(outs[i]);
  free(outs), free(olen), free(reason), free(buf);
  lm_cleaner_destroy(cl);
  return 0;
}
