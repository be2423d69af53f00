/* luminamoon/pii.h — PIIMasker: find and replace personal data in text.
 *
 * Types: e-mail addresses, IPv4 and IPv6 addresses, phone numbers
 * (international "+CC ..." and North-American), credit-card numbers (Luhn and
 * issuer-prefix checked) and IBANs (country length + ISO 7064 mod-97 checked).
 *
 * Detection is a hand-written single pass over the bytes (no regex engine):
 * the scanner skips bytes that cannot start or anchor a match ('@', ':', '+',
 * '(' and digits) and runs a small deterministic parser at each anchor.  It
 * was measured against a multi-pattern regex library; see the report in
 * bench/ (it is faster, and the validations — Luhn, mod-97, octet ranges,
 * context — need code anyway).
 *
 * Two modes:
 *  - LM_PII_MODE_STRICT (default): all six types, with context rules that keep
 *    version strings ("version 1.2.3.4", "v1.2.3.4", "foo-1.2.3.4", "1.2.3.4-1",
 *    "upgrade to 1.2.3.4", "pkg (1.2.0.4)", "1.1.1.0 -> 1.1.2", section numbers
 *    "section 8.2.2.1", and 0.x.y.z; requirements "requests==2.31.0.1",
 *    "foo>=1.2.3.4"; quoted or tagged fields "\"version\": \"1.2.3.4\"",
 *    "<version>1.2.3.4", identifiers "__version__ = '1.2.3.4'", "app_version:";
 *    "vers. 1.2.3.4"; a capitalised name right before,
 *    "Firefox 115.0.2.1"), dates, hex digests, ISBNs, file names
 *    ("logo@2x.png", "po/en@quot.header") and checksum failures out.  An address
 *    word before a dotted quad keeps it an address ("ip.addr == 8.8.8.8",
 *    "Server 8.8.8.8", French "vers 8.8.8.8"), as does a host name before it in
 *    parentheses ("mirror.example.com (8.8.8.8)"); "user@8.8.4.4" masks the
 *    IPv4; zero-padded addresses ("192.168.001.001") are addresses.
 *    E-mail local parts take the RFC 5322 characters ' / ! # $ * ^ ` { | } ~
 *    (and U+2019 as an apostrophe) between other local characters; local parts
 *    and domain labels take two-byte UTF-8 letters (accented Latin, Greek,
 *    Cyrillic: "müller@münchen.de"), not CJK, so that text written without
 *    spaces is not swallowed ("メール：taro@example.jp"); IBANs are
 *    found in any letter case, compact or in groups of four separated by one
 *    space or one '-'.  Matches are found
 *    leftmost-first and never overlap; at one position the priority is
 *    e-mail > IBAN > credit card > IPv4 > phone (North-American) > IPv6.
 *  - LM_PII_MODE_DATATROVE: reproduces HuggingFace datatrove's PIIFormatter
 *    (datatrove/pipeline/formatters/pii.py) byte for byte: its e-mail regex
 *    (lower-case only, Python's Unicode \b) then its IPv4 regex (no anchors,
 *    validated by Python 3.11 ipaddress: no leading zeros, and with
 *    ipv4_public_only, `is_global`), applied in that order, with its default
 *    replacement tuples used "in a circular way".  Only EMAIL and IPV4 apply.
 *
 * Replacements: per type, a list of one or more strings used in turn.  With
 * cycle_across_documents the turn continues from one document to the next in
 * input order, across batches (as datatrove does); otherwise each document
 * starts at the first replacement.  Either way the output does not depend on
 * the number of threads.  (With cycling on several threads, lm_pii_run counts
 * each chunk's matches in a first pass to know where its turn starts; this is
 * exact unless an e-mail replacement string itself contains an IPv4 address
 * that the datatrove IPv4 pass would replace — the defaults do not.)
 *
 * Reason codes: every document is LM_REASON_KEPT, except one larger than
 * max_doc_bytes (when set), which gets LM_REASON_TOO_LARGE and no output text:
 * a document the masker refuses is dropped, never passed through unmasked.
 * Memory: lm_pii_run keeps its per-thread output buffers between calls (about
 * one batch of output), freed by lm_pii_destroy.
 *
 * Thread-safety: a masker is immutable after creation except for its counters
 * and cycle positions, which only lm_pii_run and lm_pii_reset_counters change:
 * lm_pii_run must not be called concurrently on one masker.  lm_pii_mask_doc
 * and lm_pii_find are const and may run concurrently from many threads.
 */
#ifndef LUMINAMOON_PII_H
#define LUMINAMOON_PII_H

#include <stddef.h>
#include <stdint.h>

#include "luminamoon/batch.h"
#include "luminamoon/parallel.h"
#include "luminamoon/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum lm_pii_type {
  LM_PII_EMAIL = 0,
  LM_PII_IPV4 = 1,
  LM_PII_IPV6 = 2,
  LM_PII_PHONE = 3,
  LM_PII_CREDIT_CARD = 4,
  LM_PII_IBAN = 5,
  LM_PII_TYPE_COUNT = 6
} lm_pii_type;

#define LM_PII_ALL_TYPES ((1u << LM_PII_TYPE_COUNT) - 1u)

typedef enum lm_pii_mode { LM_PII_MODE_STRICT = 0, LM_PII_MODE_DATATROVE = 1 } lm_pii_mode;

typedef struct lm_pii_params {
  lm_pii_mode mode;
  unsigned types;         /* bit (1u << lm_pii_type) per type to mask; default LM_PII_ALL_TYPES
                             (datatrove mode: EMAIL and IPV4 only, others ignored) */
  int ipv4_public_only;   /* mask only globally routable IPv4 (Python 3.11 `is_global`);
                             default 0 in strict mode, 1 in datatrove mode (its default) */
  int ipv6_public_only;   /* mask only global IPv6 (not loopback, link-local, ULA,
                             documentation, ...); default 0 */
  /* Replacement strings per type: n_replacements[t] strings at replacements[t]
   * (NUL-terminated, copied at create).  n == 0: the mode's default — strict:
   * "<EMAIL>", "<IP_ADDRESS>", "<IP_ADDRESS>", "<PHONE>", "<CREDIT_CARD>", "<IBAN>";
   * datatrove: ("email@example.com", "firstname.lastname@example.org") for e-mail
   * and its six IPv4 addresses for IPv4. */
  const char *const *replacements[LM_PII_TYPE_COUNT];
  size_t n_replacements[LM_PII_TYPE_COUNT];
  int cycle_across_documents; /* default 0 in strict mode, 1 in datatrove mode */
  size_t max_doc_bytes;       /* 0 (default): no limit; a larger document is refused
                                 (LM_REASON_TOO_LARGE in lm_pii_run, LM_ETOOBIG from
                                 lm_pii_mask_doc / lm_pii_find) */
} lm_pii_params;

/* Per-type and per-document counters. */
typedef struct lm_pii_counts {
  uint64_t matches[LM_PII_TYPE_COUNT]; /* replacements made, per type */
  uint64_t docs;                       /* documents masked (refused ones not included) */
  uint64_t docs_too_large;             /* documents refused: larger than max_doc_bytes */
  uint64_t docs_changed;               /* documents with at least one replacement */
  uint64_t bytes_in, bytes_out;
} lm_pii_counts;

/* A span found by lm_pii_find: bytes [start, end) of the input are of `type`. */
typedef struct lm_pii_match {
  size_t start, end;
  lm_pii_type type;
} lm_pii_match;

/* The growable byte buffer of lm_pii_mask_doc: the core's lm_bytebuf (see
 * bytebuf.h).  Owned by the caller: zero it to start (or {NULL, 0, 0}); the
 * core grows `data`; release it with lm_pii_buf_free (or lm_bytebuf_free). */
typedef lm_bytebuf lm_pii_buf;

typedef struct lm_pii_masker lm_pii_masker;

/* Fill *p with the defaults of `mode` (see the fields).  LM_EINVAL if p is NULL
 * or mode unknown. */
lm_status lm_pii_params_default(lm_pii_params *p, lm_pii_mode mode);

/* Create a masker.  params NULL = lm_pii_params_default(STRICT).  LM_EINVAL for
 * an unknown mode or type bit, or a replacement list with a NULL entry.
 * Ownership: *out is the caller's; free with lm_pii_destroy. */
lm_status lm_pii_create(const lm_pii_params *params, lm_pii_masker **out);
void lm_pii_destroy(lm_pii_masker *m); /* NULL is ignored */

/* Mask a batch: out receives one output text per input document (LM_REASON_KEPT;
 * LM_REASON_TOO_LARGE and no text for one over max_doc_bytes) in input order.  Documents run in parallel under exec; the
 * output is identical for any thread count.  Bytes are processed as they are
 * (invalid UTF-8 and NUL bytes are copied through; only ASCII anchors match).
 * Adds to the masker's counters and advances its cycle positions (only when the call
 * succeeds).  docs borrowed for the call; out caller-owned (lm_batch_result_init / _free).
 * Errors as lm_batch_run: LM_EINVAL (NULL m or out, invalid docs), LM_ENOMEM, LM_EOVERFLOW.
 * One call at a time per masker. */
lm_status lm_pii_run(lm_pii_masker *m, const lm_docs *docs, lm_batch_result *out, const lm_exec *exec);

/* Mask one document, appending the output to *out (out->len grows; what was
 * there is kept).  cycle_start: LM_PII_TYPE_COUNT replacement positions to start
 * from (NULL = all 0).  counts (may be NULL) receives this document's counts
 * (set, not added).  LM_ETOOBIG (nothing appended) when len > max_doc_bytes.
 * For a fused pipeline; const and thread-safe. */
lm_status lm_pii_mask_doc(const lm_pii_masker *m, const uint8_t *text, size_t len,
                          const uint64_t *cycle_start, lm_pii_buf *out, lm_pii_counts *counts);

/* The spans that lm_pii_mask_doc would replace, in order.  Writes at most cap
 * matches to out (may be NULL when cap == 0) and the total number into *n_found.
 * Datatrove mode reports the e-mail spans and the IPv4 spans of its second pass
 * in the coordinates of the text after e-mail replacement; in strict mode all
 * spans are in input coordinates.  LM_ETOOBIG when len > max_doc_bytes. */
lm_status lm_pii_find(const lm_pii_masker *m, const uint8_t *text, size_t len, lm_pii_match *out,
                      size_t cap, size_t *n_found);

/* Cumulative counters of lm_pii_run calls (copied into caller-owned *out); reset sets them
 * (and the cycle positions) back to zero.  LM_EINVAL on NULL.  Not concurrently with
 * lm_pii_run on m. */
lm_status lm_pii_get_counters(const lm_pii_masker *m, lm_pii_counts *out);
lm_status lm_pii_reset_counters(lm_pii_masker *m);

/* The replacement cycle positions (one per type, LM_PII_TYPE_COUNT values: the
 * matches replaced so far with cycle_across_documents; the string used next is
 * position mod lm_pii_replacement_count).  set restores them, e.g. on resume.
 * Same thread rules as lm_pii_run.  LM_EINVAL if m or the array is NULL. */
lm_status lm_pii_get_cycle(const lm_pii_masker *m, uint64_t *out);
lm_status lm_pii_set_cycle(lm_pii_masker *m, const uint64_t *in);

/* The configured max_doc_bytes (0 = none).  LM_EINVAL if m or out is NULL. */
lm_status lm_pii_max_doc_bytes(const lm_pii_masker *m, size_t *out);

/* The number of replacement strings of `type` (for cycle arithmetic): *n >= 1.  LM_EINVAL on
 * NULL m or n or an unknown type.  Thread-safe (the strings never change after creation). */
lm_status lm_pii_replacement_count(const lm_pii_masker *m, lm_pii_type type, size_t *n);

/* Free b->data (owned by the buffer) and zero *b, which may then be reused; NULL is ignored.
 * Not concurrently with another use of the same buffer. */
void lm_pii_buf_free(lm_pii_buf *b);

/* Validity checks, exposed for tests and other stages.  Pure, thread-safe. */
/* Luhn checksum over the ASCII digits of s (other bytes ignored); 1 if valid and
 * at least 2 digits. */
int lm_pii_luhn_valid(const char *s, size_t len);
/* IBAN mod-97 (ISO 7064) over s with spaces ignored: 1 if the rearranged number
 * is 1 mod 97 and the characters are A-Z/0-9 (no length check). */
int lm_pii_iban_mod97_valid(const char *s, size_t len);
/* The registered IBAN length of a two-letter country code, or 0 if unknown. */
int lm_pii_iban_country_length(const char cc[2]);
/* Python 3.11 ipaddress.IPv4Address(a).is_global for a = (o0<<24)|...|o3. */
int lm_pii_ipv4_is_global(uint32_t addr);

#ifdef __cplusplus
}
#endif
#endif
