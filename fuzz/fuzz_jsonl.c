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
 *  - BLANK lines hold only ASCII whitespace; TOO_LONG only above the limit.
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
  free(out);
  free(offs);
  free(ends);
  free(st);
  return 0;
}
