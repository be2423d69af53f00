/* jsonl.h — a fast, conservative scanner for JSON Lines: one string field of each
 * line decoded straight into a StringTensor-style (offsets, bytes) pair.
 *
 * The scanner is a *fast path*.  For each line it either proves the line is a JSON
 * object that Python's ``json.loads`` (strict mode) accepts and extracts the decoded
 * value of the key (LM_JSONL_OK, byte for byte what ``obj[key].encode("utf-8")``
 * gives), or says the line is blank (only bytes ``bytes.strip()`` removes), or hands
 * the line back (LM_JSONL_SLOW) for the caller's exact parser, which reports errors.
 * It never accepts a line the exact parser rejects: anything unusual (NaN /
 * Infinity, nesting deeper than LM_JSONL_MAX_DEPTH, escapes in keys, a key that
 * appears twice, a lone surrogate escape, a value that is not a string, a
 * missing key, invalid UTF-8, a byte order mark, trailing data) is SLOW.
 *
 * Thread safety: the function keeps no state (it reads the CPU's features and the
 * LM_NO_AVX2 switch once, see jsonl_scan.c); distinct calls may run
 * concurrently on distinct outputs.  It never allocates, aborts or prints.
 */
#ifndef LUMINAMOON_JSONL_H
#define LUMINAMOON_JSONL_H

#include <stddef.h>
#include <stdint.h>

#include "luminamoon/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  LM_JSONL_OK = 0,       /* the key's string value was decoded into the output */
  LM_JSONL_BLANK = 1,    /* the line holds only ASCII whitespace (space, \t, \n, \v, \f, \r) */
  LM_JSONL_SLOW = 2,     /* not handled here: the caller parses this line exactly */
  LM_JSONL_TOO_LONG = 3  /* longer (without its line ending) than max_line_bytes */
};

#define LM_JSONL_MAX_DEPTH 64

/* Number of lines in buf[0, len): the count of '\n' plus one if the last byte is
 * not '\n' (0 for len == 0).  buf may be NULL only when len == 0. */
lm_status lm_jsonl_count_lines(const uint8_t *buf, size_t len, size_t *n_lines);

/* Scans every line of buf[0, len) (lines end with '\n'; the last may end at len).
 *
 *   key, key_len     the field to extract (raw UTF-8 bytes, compared with each
 *                    top-level key that has no escapes); key_len >= 1.
 *   max_line_bytes   < 0: no limit; else a line longer than this, not counting its
 *                    "\n" or "\r\n" ending, is LM_JSONL_TOO_LONG (checked first).
 *   text_out         capacity >= len bytes: the decoded values of the OK lines,
 *                    concatenated (a decoded JSON string is never longer than its
 *                    escaped form); the bytes past text_offsets[n_ok] are unspecified
 *                    (the scanner may write there).
 *   text_offsets     capacity >= n_lines + 1: text_offsets[0] = 0 and one more entry
 *                    per OK line (the end of its value in text_out).
 *   line_ends        capacity >= n_lines: offset in buf just past each line.
 *   status           capacity >= n_lines: LM_JSONL_* per line.
 *   lines_cap        the capacity of line_ends / status (n_lines from
 *                    lm_jsonl_count_lines); fewer lines than there are is LM_EINVAL.
 *   n_ok             out: number of OK lines (entries added to text_offsets).
 *
 * Returns LM_OK, or LM_EINVAL for NULL pointers / a too-small lines_cap (outputs
 * then unspecified).  Ownership: all buffers belong to the caller. */
lm_status lm_jsonl_scan(const uint8_t *buf, size_t len, const uint8_t *key, size_t key_len,
                        int64_t max_line_bytes, uint8_t *text_out, int64_t *text_offsets,
                        int64_t *line_ends, int8_t *status, size_t lines_cap, size_t *n_ok);

/* lm_jsonl_scan that also decodes a second top-level string field of each OK line in the
 * same pass (e.g. the records' ids next to their texts).  key2 == NULL: exactly
 * lm_jsonl_scan (key2_out, key2_offsets, key2_ok unused).  Otherwise the statuses, line
 * ends and text outputs are those lm_jsonl_scan gives (the second key never makes a line
 * SLOW), and for the r-th OK line (r = 0, 1, ...):
 *   key2_ok[r]        1 when the line's top-level key2 (raw UTF-8 bytes, key2_len >= 1) is
 *                     present once and its value is a string without lone surrogate
 *                     escapes: its decoded bytes, what ``obj[key2].encode("utf-8")`` gives,
 *                     are key2_out[key2_offsets[r], key2_offsets[r + 1]); else 0 (missing,
 *                     twice, not a string, a lone surrogate: the caller parses the line)
 *                     and key2_offsets[r + 1] == key2_offsets[r].
 *   key2_out          capacity >= len bytes (bytes past key2_offsets[n_ok] unspecified);
 *   key2_offsets      capacity >= lines_cap + 1 (key2_offsets[0] = 0);
 *   key2_ok           capacity >= lines_cap.
 * A key2 equal to key is never decoded (key2_ok 0).  Returns LM_OK, or LM_EINVAL as
 * lm_jsonl_scan does and for key2 != NULL with key2_len == 0 or NULL key2 outputs.
 * Ownership and thread safety: as lm_jsonl_scan. */
lm_status lm_jsonl_scan2(const uint8_t *buf, size_t len, const uint8_t *key, size_t key_len, const uint8_t *key2,
                         size_t key2_len, int64_t max_line_bytes, uint8_t *text_out, int64_t *text_offsets,
                         uint8_t *key2_out, int64_t *key2_offsets, int8_t *key2_ok, int64_t *line_ends,
                         int8_t *status, size_t lines_cap, size_t *n_ok);

#ifdef __cplusplus
}
#endif
#endif
