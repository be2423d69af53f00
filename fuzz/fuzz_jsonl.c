/* fuzz_jsonl.c — the JSON Lines scanner (jsonl.h) on arbitrary bytes.
 *
 * Input: one parameter byte (bit 0..6: max_line_bytes = that * 8 when bit 7 is set,
 * else no limit), then the buffer.  Invariants:
 *  - lm_jsonl_scan succeeds with the line count of lm_jsonl_count_lines, one
 *    status in 0..3 per line, line ends strictly increasing up to len;
 *  - text offsets are non-decreasing, never past the input length, one per OK line;
 *  - every decoded value is valid UTF-8 (reference validator) and no longer than
 *    its line;
 *  - a line is OK only if it starts (after whitespace) with '{' and holds the key;
 *  - BLANK lines hold only ASCII whitespace; TOO_LONG only above the limit;
 *  - lm_jsonl_scan2 with the second key "id" (outputs sized exactly) gives the same
 *    statuses, line ends and texts, and an OK line's "id" is decoded exactly when
 *    lm_jsonl_scan with the key "id" on that line alone says OK, to the same bytes.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "luminamoon/jsonl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int64_t lim = (data[0] & 0x80) ? (int64_t)(data[0] & 0x7F) * 8 : -1;
  const uint8_t *buf = data + 1;
  size_t len = size - 1;
  size_t n_lines = 0;
  CHECK_EQ_STATUS(lm_jsonl_count_lines(buf, len, &n_lines), LM_OK);
  uint8_t *out = malloc(len ? len : 1);
  int64_t *offs = malloc((n_lines + 1) * sizeof *offs);
  int64_t *ends = malloc((n_lines ? n_lines : 1) * sizeof *ends);
  int8_t *st = malloc(n_lines ? n_lines : 1);
  CHECK(out && offs && ends && st);
  size_t n_ok = 0;
  static const uint8_t key[] = "text";
  CHECK_EQ_STATUS(lm_jsonl_scan(buf, len, key, 4, lim, out, offs, ends, st, n_lines, &n_ok), LM_OK);
  if (n_lines > 0) CHECK_EQ_STATUS(lm_jsonl_scan(buf, len, key, 4, lim, out, offs, ends, st, n_lines - 1, &n_ok),
                                   LM_EINVAL);
  CHECK_EQ_STATUS(lm_jsonl_scan(buf, len, key, 4, lim, out, offs, ends, st, n_lines, &n_ok), LM_OK);
  CHECK(offs[0] == 0);
  size_t ok = 0;
  int64_t prev = 0;
  for (size_t i = 0; i < n_lines; i++) {
    CHECK(st[i] >= 0 && st[i] <= 3);
    CHECK(ends[i] > prev && (size_t)ends[i] <= len);
    const uint8_t *l = buf + prev;
    size_t n = (size_t)(ends[i] - prev);
    if (i + 1 == n_lines) CHECK((size_t)ends[i] == len);
    if (st[i] == LM_JSONL_BLANK) {
      for (size_t j = 0; j < n; j++)
        CHECK(l[j] == ' ' || l[j] == '\t' || l[j] == '\n' || l[j] == '\r' || l[j] == '\v' || l[j] == '\f');
    }
    if (st[i] == LM_JSONL_TOO_LONG) CHECK(lim >= 0 && n > (size_t)lim);
    if (st[i] == LM_JSONL_OK) {
      ok++;
      CHECK(offs[ok] >= offs[ok - 1] && (size_t)offs[ok] <= len);
      CHECK((size_t)(offs[ok] - offs[ok - 1]) <= n);
      CHECK(ref_utf8_valid(out + offs[ok - 1], (size_t)(offs[ok] - offs[ok - 1])));
      size_t j = 0;
      while (j < n && (l[j] == ' ' || l[j] == '\t' || l[j] == '\r' || l[j] == '\n')) j++;
      CHECK(j < n && l[j] == '{');
    }
    prev = ends[i];
  }
  CHECK(ok == n_ok);

  /* the second key in the same pass */
  static const uint8_t key2[] = "id";
  uint8_t *out_a = malloc(len ? len : 1), *out_b = malloc(len ? len : 1);
  int64_t *offs_a = malloc((n_lines + 1) * sizeof *offs_a), *offs_b = malloc((n_lines + 1) * sizeof *offs_b);
  int64_t *ends_a = malloc((n_lines ? n_lines : 1) * sizeof *ends_a);
  int8_t *st_a = malloc(n_lines ? n_lines : 1), *ok_b = malloc(n_lines ? n_lines : 1);
  CHECK(out_a && out_b && offs_a && offs_b && ends_a && st_a && ok_b);
  size_t n_ok2 = 0;
  CHECK_EQ_STATUS(lm_jsonl_scan2(buf, len, key, 4, key2, 2, lim, out_a, offs_a, out_b, offs_b, ok_b, ends_a, st_a,
                                 n_lines, &n_ok2),
                  LM_OK);
  CHECK(n_ok2 == n_ok && offs_b[0] == 0);
  CHECK(memcmp(offs_a, offs, (n_ok + 1) * sizeof *offs) == 0);
  CHECK(n_lines == 0 || memcmp(ends_a, ends, n_lines * sizeof *ends) == 0);
  CHECK(n_lines == 0 || memcmp(st_a, st, n_lines) == 0);
  CHECK(offs[n_ok] == 0 || memcmp(out_a, out, (size_t)offs[n_ok]) == 0);
  prev = 0;
  size_t r = 0;
  for (size_t i = 0; i < n_lines; i++) {
    if (st[i] == LM_JSONL_OK) {
      /* the line alone, scanned for "id" (its line ending kept: same status rules) */
      size_t n = (size_t)(ends[i] - prev);
      uint8_t *one = malloc(n ? n : 1);
      int64_t one_offs[2], one_end[1];
      int8_t one_st[1];
      size_t one_ok = 0;
      CHECK(one);
      CHECK_EQ_STATUS(lm_jsonl_scan(buf + prev, n, key2, 2, -1, one, one_offs, one_end, one_st, 1, &one_ok), LM_OK);
      CHECK(ok_b[r] == (one_st[0] == LM_JSONL_OK));
      CHECK(offs_b[r + 1] >= offs_b[r] && (size_t)offs_b[r + 1] <= len);
      if (ok_b[r]) {
        CHECK(offs_b[r + 1] - offs_b[r] == one_offs[1]);
        CHECK(memcmp(out_b + offs_b[r], one, (size_t)one_offs[1]) == 0);
      } else {
        CHECK(offs_b[r + 1] == offs_b[r]);
      }
      free(one);
      r++;
    }
    prev = ends[i];
  }
  free(out_a);
  free(out_b);
  free(offs_a);
  free(offs_b);
  free(ends_a);
  free(st_a);
  free(ok_b);
  free(out);
  free(offs);
  free(ends);
  free(st);
  return 0;
}
