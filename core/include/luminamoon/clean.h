/* luminamoon/clean.h — TextCleaner: repair and normalize raw text.
 *
 * One pass per document (two with Unicode normalization on):
 *  - UTF-8 validation; each ill-formed sequence is replaced by U+FFFD with the
 *    Unicode / WHATWG "maximal subpart" policy, byte for byte what Python's
 *    bytes.decode("utf-8", "replace") produces (overlong forms, surrogates
 *    U+D800..DFFF, code points above U+10FFFF, truncated sequences and stray
 *    continuation bytes are all ill-formed);
 *  - optional NFC / NFKC normalization (after repair): utf8proc's per-character
 *    decomposition and composition, with each run of combining marks put in
 *    canonical order by a stable sort (linear; output identical to utf8proc_map,
 *    whose neighbour-swap reordering is quadratic in a run of marks);
 *  - line breaks: "\r\n" and a lone "\r" become "\n"; U+0085 (NEL), U+2028 and
 *    U+2029 become "\n";
 *  - control characters removed: C0 except "\t" and "\n", DEL, C1 (U+0080..009F);
 *  - Unicode spaces (category Zs: U+00A0, U+1680, U+2000..200A, U+202F, U+205F,
 *    U+3000) folded to " ";
 *  - runs of spaces collapsed to one; spaces and tabs at the end of each line trimmed;
 *  - more than `max_blank_lines` consecutive blank lines collapsed to that many.
 * A document left with only whitespace (or nothing) gets LM_REASON_EMPTY when
 * `drop_empty` is set (the default).  Each step can be switched off.
 *
 * Thread-safety: an lm_cleaner is immutable after creation except for its
 * counters; lm_cleaner_run may not run concurrently on one object.
 * lm_clean_text is thread-safe on one cleaner with per-thread counters.
 */
#ifndef LUMINAMOON_CLEAN_H
#define LUMINAMOON_CLEAN_H

#include <stddef.h>
#include <stdint.h>

#include "luminamoon/batch.h"
#include "luminamoon/parallel.h"
#include "luminamoon/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum lm_normalization { LM_NORM_NONE = 0, LM_NORM_NFC = 1, LM_NORM_NFKC = 2 } lm_normalization;

typedef struct lm_cleaner_params {
  lm_normalization normalize; /* LM_NORM_NONE */
  int remove_control;         /* 1 */
  int normalize_newlines;     /* 1: \r\n, \r, NEL, U+2028/9 -> \n (0: \r and NEL are controls) */
  int fold_spaces;            /* 1 */
  int collapse_spaces;        /* 1 */
  int trim_trailing;          /* 1 */
  int max_blank_lines;        /* 2; < 0: no limit */
  int drop_empty;             /* 1 */
  size_t max_doc_bytes;       /* 0: no limit; larger input documents get LM_REASON_TOO_LARGE */
} lm_cleaner_params;

typedef struct lm_clean_counters {
  uint64_t docs_in, docs_kept, docs_empty, docs_too_large;
  uint64_t bytes_in, bytes_out;
  uint64_t invalid_sequences;   /* U+FFFD inserted */
  uint64_t control_removed;     /* characters */
  uint64_t spaces_folded;       /* Unicode spaces made ASCII */
  uint64_t spaces_collapsed;    /* spaces dropped from runs */
  uint64_t trailing_trimmed;    /* bytes trimmed at line ends */
  uint64_t blank_lines_removed; /* newlines dropped */
  uint64_t docs_normalized;     /* documents that NFC/NFKC changed */
} lm_clean_counters;

typedef struct lm_cleaner lm_cleaner;

/* Fill *p with the defaults (every field set).  LM_EINVAL on NULL.  Pure, thread-safe. */
lm_status lm_cleaner_params_default(lm_cleaner_params *p);

/* Create a cleaner with a copy of *params (NULL = the defaults); params is only read during
 * the call.  *out is owned by the caller: free it with lm_cleaner_destroy.  Errors: LM_EINVAL
 * (NULL out, normalize out of range), LM_ENOMEM; *out is untouched on an error.  Thread-safe. */
lm_status lm_cleaner_create(const lm_cleaner_params *params, lm_cleaner **out);
/* Free a cleaner (NULL is ignored).  Not while another call uses it. */
void lm_cleaner_destroy(lm_cleaner *c);

/* Output capacity that always suffices for an input of n bytes without
 * normalization (3n: one ill-formed byte becomes a 3-byte U+FFFD).  With
 * normalization lm_clean_text may ask for more (LM_ERANGE). */
size_t lm_clean_bound(size_t n);

/* Clean one document into out[0..out_cap).  *out_len receives the cleaned
 * length; when out_cap is too small nothing useful is written, LM_ERANGE is
 * returned and *out_len is the capacity needed.  *reason (may be NULL):
 * LM_REASON_KEPT, LM_REASON_EMPTY or LM_REASON_TOO_LARGE.  `counters` (may be
 * NULL) is added to.  out must not overlap text. */
lm_status lm_clean_text(const lm_cleaner *c, const uint8_t *text, size_t len, uint8_t *out, size_t out_cap,
                        size_t *out_len, int32_t *reason, lm_clean_counters *counters);

/* Batch: one reason per input, kept texts in input order; identical output
 * for any thread count (exec NULL: one thread).  docs is borrowed for the call; out is
 * caller-owned (lm_batch_result_init / _free) and overwritten.  The counters are added to only
 * when the call succeeds.  Errors: LM_EINVAL (NULL c or out, invalid docs), LM_ENOMEM,
 * LM_EOVERFLOW; on an error out holds an unspecified prefix.  One call at a time per cleaner
 * (it adds to c's counters); different cleaners run concurrently. */
lm_status lm_cleaner_run(lm_cleaner *c, const lm_docs *docs, lm_batch_result *out, const lm_exec *exec);

/* The cleaner's parameters (a copy).  LM_EINVAL on NULL. */
lm_status lm_cleaner_get_params(const lm_cleaner *c, lm_cleaner_params *out);

/* Copy the counters totalled over every lm_cleaner_run since creation or the last reset into
 * *out / zero them.  LM_EINVAL on NULL.  Not concurrently with lm_cleaner_run on c. */
lm_status lm_cleaner_get_counters(const lm_cleaner *c, lm_clean_counters *out);
lm_status lm_cleaner_reset_counters(lm_cleaner *c);

#ifdef __cplusplus
}
#endif
#endif
