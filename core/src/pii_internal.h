/* pii_internal.h — shared by pii.c (object, masking, batch), pii_scan.c (strict
 * detectors) and pii_datatrove.c (datatrove-compatible detectors).  Not public. */
#ifndef LUMINAMOON_PII_INTERNAL_H
#define LUMINAMOON_PII_INTERNAL_H

#include "luminamoon/pii.h"

struct lm_pii_masker {
  lm_pii_mode mode;
  unsigned types;
  int ipv4_public_only, ipv6_public_only, cycle_across_documents;
  size_t max_doc_bytes;                /* 0: no limit */
  char **repl[LM_PII_TYPE_COUNT];      /* owned copies */
  size_t *repl_len[LM_PII_TYPE_COUNT];
  size_t nrepl[LM_PII_TYPE_COUNT];
  lm_pii_counts counters;              /* cumulative, lm_pii_run only */
  uint64_t cycle[LM_PII_TYPE_COUNT];   /* next replacement position, lm_pii_run only */
  lm_batch_pool pool;                  /* lm_pii_run's per-range arenas, kept between calls (bounded) */
};

/* Called for each match in increasing, non-overlapping order.  Returns 0 to go
 * on, non-zero to stop the scan (propagated as the scanner's return value). */
typedef int (*lm_pii_emit_fn)(void *ctx, lm_pii_type type, size_t start, size_t end);

/* Strict mode: every enabled type in one pass. */
int lm_pii_scan_strict(const lm_pii_masker *m, const uint8_t *s, size_t n, lm_pii_emit_fn emit, void *ctx);

/* Datatrove mode, pass 1: its e-mail regex (leftmost-first, as Python's re.sub). */
int lm_pii_scan_dt_email(const uint8_t *s, size_t n, lm_pii_emit_fn emit, void *ctx);
/* Datatrove mode, pass 2: its IPv4 regex + validator; only validated matches are
 * emitted (the others are consumed and left unchanged, as re.sub does). */
int lm_pii_scan_dt_ipv4(int public_only, const uint8_t *s, size_t n, lm_pii_emit_fn emit, void *ctx);

static inline int lm_pii_is_digit(uint8_t c) { return (unsigned)(c - '0') < 10u; }
static inline int lm_pii_is_upper(uint8_t c) { return (unsigned)(c - 'A') < 26u; }
static inline int lm_pii_is_lower(uint8_t c) { return (unsigned)(c - 'a') < 26u; }
static inline int lm_pii_is_alpha(uint8_t c) { return lm_pii_is_upper(c) || lm_pii_is_lower(c); }
static inline int lm_pii_is_alnum(uint8_t c) { return lm_pii_is_digit(c) || lm_pii_is_alpha(c); }
static inline int lm_pii_is_hex(uint8_t c) {
  return lm_pii_is_digit(c) || (unsigned)((c | 0x20) - 'a') < 6u;
}

#endif
