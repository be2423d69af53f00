/* luminamoon/quality.h — QualityFilter: Gopher quality, Gopher repetition, C4 and FineWeb rules.
 *
 * The rules and their default thresholds are those of HuggingFace datatrove
 * 0.10 (GopherRepetitionFilter, GopherQualityFilter, C4QualityFilter,
 * FineWebQualityFilter), and their definitions follow datatrove's code:
 *  - "word": a non-whitespace token of spaCy's English tokenizer
 *    (spacy.blank("en"), what datatrove's split_into_words(text, "en") uses),
 *    reproduced in C (quality_words.c) including its tokenizer exceptions,
 *    prefix/suffix/infix rules and URL matching; C4's per-line words are
 *    Python's str.split();
 *  - "line": Python's str.splitlines() (Gopher quality, C4), re.split("\n+")
 *    (Gopher repetition), str.split("\n") minus blank lines (FineWeb);
 *  - "paragraph": re.split("\n{2,}", text.strip()) (Gopher repetition);
 *  - lengths and character fractions count code points (Python len), not bytes.
 * Rule sets are evaluated in the order of the FineWeb recipe: Gopher
 * repetition, Gopher quality, C4, FineWeb; inside a set, in datatrove's order.
 * The first failing rule is the document's reason (LM_REASON_QUALITY_BASE + id).
 *
 * Drop vs modify: every rule drops a document except C4's line rules
 * (too_long_word, citations, no_terminal_punct, too_few_words, javascript,
 * policy), which remove lines — datatrove *rewrites* kept documents as the
 * kept lines joined by "\n" and stripped.  With `c4_modify_text` (default 1)
 * our output is that rewritten text, and the FineWeb rules (evaluated after C4)
 * see it, as in a datatrove pipeline; with 0 the text passes unchanged and the
 * C4 line rules only decide how many sentences count.  Line-rule counters
 * count removed lines; document rules count dropped documents.
 *
 * Documented differences from datatrove: a document with no words where
 * datatrove divides by zero (only possible with min_doc_words disabled, or a
 * FineWeb document of only zero-width characters) passes the ratio rule
 * (Gopher) or is dropped by list_ratio (FineWeb); spaCy's second special-case
 * pass (re-merging exceptions split by affix rules, e.g. emoticons inside
 * brackets) is not reproduced; lower-casing for C4's phrase rules is ASCII.
 * The filter expects valid UTF-8 (TextCleaner output); invalid bytes count as
 * one U+FFFD each.
 *
 * Thread-safety: an lm_quality is immutable after creation except for its
 * counters; lm_quality_run may not be called concurrently on one object
 * (it runs its own threads).  lm_quality_check is thread-safe on one object as
 * long as each thread uses its own scratch and its own counters.
 */
#ifndef LUMINAMOON_QUALITY_H
#define LUMINAMOON_QUALITY_H

#include <stddef.h>
#include <stdint.h>

#include "luminamoon/batch.h"
#include "luminamoon/parallel.h"
#include "luminamoon/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Stable rule ids (never renumbered; new rules are appended). */
typedef enum lm_quality_rule {
  /* Gopher repetition (datatrove GopherRepetitionFilter) */
  LM_Q_GR_EMPTY = 0,          /* "gopher_repetition.empty" */
  LM_Q_GR_DUP_PARA_FRAC,      /* "gopher_repetition.dup_para_frac" */
  LM_Q_GR_DUP_PARA_CHAR_FRAC, /* "gopher_repetition.dup_para_char_frac" */
  LM_Q_GR_DUP_LINE_FRAC,      /* "gopher_repetition.dup_line_frac" */
  LM_Q_GR_DUP_LINE_CHAR_FRAC, /* "gopher_repetition.dup_line_char_frac" */
  LM_Q_GR_TOP_2_GRAM,         /* "gopher_repetition.top_2_gram" (3, 4 follow) */
  LM_Q_GR_TOP_3_GRAM,
  LM_Q_GR_TOP_4_GRAM,
  LM_Q_GR_DUP_5_GRAMS, /* "gopher_repetition.duplicated_5_n_grams" (6..10 follow) */
  LM_Q_GR_DUP_6_GRAMS,
  LM_Q_GR_DUP_7_GRAMS,
  LM_Q_GR_DUP_8_GRAMS,
  LM_Q_GR_DUP_9_GRAMS,
  LM_Q_GR_DUP_10_GRAMS,
  /* Gopher quality (datatrove GopherQualityFilter) */
  LM_Q_GQ_MIN_DOC_WORDS, /* "gopher_quality.min_doc_words" */
  LM_Q_GQ_MAX_DOC_WORDS,
  LM_Q_GQ_MIN_AVG_WORD_LENGTH,
  LM_Q_GQ_MAX_AVG_WORD_LENGTH,
  LM_Q_GQ_HASH_RATIO,     /* "gopher_quality.max_hash_ratio" */
  LM_Q_GQ_ELLIPSIS_RATIO, /* "gopher_quality.max_ellipsis_ratio" */
  LM_Q_GQ_BULLET_LINES,   /* "gopher_quality.max_bullet_lines_ratio" */
  LM_Q_GQ_ELLIPSIS_LINES, /* "gopher_quality.max_ellipsis_lines_ratio" */
  LM_Q_GQ_ALPHA_WORDS,    /* "gopher_quality.min_alpha_words_ratio" */
  LM_Q_GQ_STOP_WORDS,     /* "gopher_quality.min_stop_words" */
  /* C4 (datatrove C4QualityFilter): line rules remove lines, the others drop */
  LM_Q_C4_TOO_LONG_WORD,     /* line rule "c4.line_too_long_word" */
  LM_Q_C4_CITATIONS,         /* modifier "c4.remove_citations" */
  LM_Q_C4_NO_TERMINAL_PUNCT, /* line rule "c4.line_no_terminal_punct" */
  LM_Q_C4_TOO_FEW_WORDS,     /* line rule "c4.line_too_few_words" */
  LM_Q_C4_LOREM_IPSUM,       /* "c4.lorem_ipsum" */
  LM_Q_C4_JAVASCRIPT,        /* line rule "c4.line_javascript" */
  LM_Q_C4_CURLY_BRACKET,     /* "c4.curly_bracket" */
  LM_Q_C4_POLICY,            /* line rule "c4.line_policy" */
  LM_Q_C4_TOO_FEW_SENTENCES, /* "c4.too_few_sentences" */
  /* FineWeb (datatrove FineWebQualityFilter) */
  LM_Q_FW_EMPTY,            /* "fineweb.empty" */
  LM_Q_FW_LINE_PUNCT_RATIO, /* "fineweb.line_punct_ratio" */
  LM_Q_FW_SHORT_LINE_RATIO, /* "fineweb.short_line_ratio" */
  LM_Q_FW_CHAR_DUP_RATIO,   /* "fineweb.char_dup_ratio" */
  LM_Q_FW_LIST_RATIO,       /* "fineweb.list_ratio" */
  LM_Q_RULE_COUNT
} lm_quality_rule;

/* Rule sets, for switching a whole family. */
typedef enum lm_quality_rule_set {
  LM_QSET_GOPHER_REPETITION = 0,
  LM_QSET_GOPHER_QUALITY = 1,
  LM_QSET_C4 = 2,
  LM_QSET_FINEWEB = 3,
  LM_QSET_COUNT = 4
} lm_quality_rule_set;

typedef struct lm_quality_params {
  uint64_t enabled; /* bit (1 << id): the rule is on; default: all */
  int c4_modify_text; /* 1 (default): kept documents carry C4's line-filtered text */
  size_t max_doc_bytes; /* 0 (default): no limit; larger docs get LM_REASON_TOO_LARGE */
  /* Gopher repetition */
  double gr_dup_para_frac, gr_dup_para_char_frac;   /* 0.3, 0.2 */
  double gr_dup_line_frac, gr_dup_line_char_frac;   /* 0.3, 0.2 */
  double gr_top_ngram_frac[3];                      /* n = 2,3,4: 0.20, 0.18, 0.16 */
  double gr_dup_ngram_frac[6];                      /* n = 5..10: 0.15 .. 0.10 */
  /* Gopher quality */
  size_t gq_min_doc_words, gq_max_doc_words;        /* 50, 100000 (non-symbol words) */
  double gq_min_avg_word_length, gq_max_avg_word_length; /* 3, 10 */
  double gq_max_symbol_word_ratio;                  /* 0.1 ('#' and ellipses per word) */
  double gq_max_bullet_lines_ratio;                 /* 0.9 */
  double gq_max_ellipsis_lines_ratio;               /* 0.3 */
  double gq_min_alpha_words_ratio;                  /* 0.8 */
  size_t gq_min_stop_words;                         /* 2 of the, be, to, of, and, that, have, with */
  /* C4 */
  size_t c4_min_sentences;      /* 5 */
  size_t c4_min_words_per_line; /* 3 */
  size_t c4_max_word_length;    /* 1000 (code points) */
  /* FineWeb */
  double fw_line_punct_thr;      /* 0.12 */
  int fw_line_punct_exclude_zero; /* 0 */
  double fw_short_line_thr;      /* 0.67 */
  size_t fw_short_line_length;   /* 30 */
  double fw_char_dup_ratio;      /* 0.01 */
  double fw_new_line_ratio;      /* 0.3 */
} lm_quality_params;

typedef struct lm_quality_counters {
  uint64_t docs_in, docs_kept, docs_dropped, docs_modified;
  uint64_t bytes_in, bytes_out;
  uint64_t too_large;
  uint64_t rule[LM_Q_RULE_COUNT]; /* documents dropped by the rule; lines removed for C4 line rules */
} lm_quality_counters;

typedef struct lm_quality lm_quality;
typedef struct lm_quality_scratch lm_quality_scratch;

/* Fill *p with datatrove's defaults.  LM_EINVAL on NULL.  Pure, thread-safe. */
lm_status lm_quality_params_default(lm_quality_params *p);
/* Switch one rule, or a whole rule set, on or off in *p (caller-owned; nothing else is kept).
 * LM_EINVAL on NULL p or an unknown rule id / set.  Thread-safe on distinct *p. */
lm_status lm_quality_params_set_rule(lm_quality_params *p, int rule_id, int on);
lm_status lm_quality_params_set_rule_set(lm_quality_params *p, lm_quality_rule_set set, int on);

/* Rule metadata (static strings; do not free).  NULL / LM_ENOTFOUND when unknown.
 * lm_quality_rule_count: LM_Q_RULE_COUNT.  lm_quality_rule_set_of: the set of a valid id (an id
 * out of range is not checked).  lm_quality_rule_find: LM_EINVAL on NULL name or rule_id.  Pure,
 * thread-safe. */
int lm_quality_rule_count(void);
const char *lm_quality_rule_name(int rule_id);
lm_quality_rule_set lm_quality_rule_set_of(int rule_id);
lm_status lm_quality_rule_find(const char *name, int *rule_id);

/* Create / destroy.  params NULL = defaults; *params is copied (read during the call only).
 * *out owned by the caller, freed by lm_quality_destroy (NULL is ignored; not while a call uses
 * it).  Create errors: LM_EINVAL (NULL out), LM_ENOMEM (*out is NULL then).  Thread-safe. */
lm_status lm_quality_create(const lm_quality_params *params, lm_quality **out);
void lm_quality_destroy(lm_quality *q);

/* Batch: reasons[i] for every input document, kept (possibly rewritten) texts
 * appended to `out` in input order.  Output identical for any thread count (exec NULL: one
 * thread).  docs borrowed for the call; out caller-owned (lm_batch_result_init / _free).  Errors
 * as lm_batch_run (LM_EINVAL, LM_ENOMEM, LM_EOVERFLOW); counters added only on success.  One
 * call at a time per object. */
lm_status lm_quality_run(lm_quality *q, const lm_docs *docs, lm_batch_result *out, const lm_exec *exec);

/* Counters accumulated over lm_quality_run calls (copied into caller-owned *out) / zeroed.
 * LM_EINVAL on NULL.  Not concurrently with lm_quality_run on q. */
lm_status lm_quality_get_counters(const lm_quality *q, lm_quality_counters *out);
lm_status lm_quality_reset_counters(lm_quality *q);

/* ---- one document at a time (FusedPipeline) ---- */

/* Per-thread working memory, reusable across documents.  Owned by the caller: free with
 * lm_quality_scratch_destroy (NULL is ignored).  LM_EINVAL (NULL out), LM_ENOMEM.  One thread
 * at a time per scratch. */
lm_status lm_quality_scratch_create(lm_quality_scratch **out);
void lm_quality_scratch_destroy(lm_quality_scratch *s);
/* Bytes the scratch holds allocated (its buffers' capacities; 0 for NULL).
 * After a document of n bytes: 9 B per token (at most one per byte), a copy
 * of the words and C4's two line buffers (n each), 12 B per code point of the
 * longest whitespace-free non-ASCII span, and 40-80 B per distinct paragraph,
 * line or word n-gram of the hash set (not per byte). */
size_t lm_quality_scratch_bytes(const lm_quality_scratch *s);

typedef struct lm_quality_doc_result {
  int32_t reason;      /* LM_REASON_KEPT, LM_REASON_TOO_LARGE or LM_REASON_QUALITY_BASE + rule id */
  int modified;        /* 1: the kept text differs from the input (C4 removed lines) */
  const uint8_t *text; /* the kept text: the input itself, or scratch memory valid until the
                          next call with this scratch */
  size_t len;
} lm_quality_doc_result;

/* Evaluate one document into *res (caller-owned; text borrowed for the call).  `counters`
 * (may be NULL) is added to.  Thread-safe given a scratch and counters per thread.  Errors:
 * LM_EINVAL (NULL q, s or res; NULL text with len > 0), LM_ETOOBIG (a document of 4 GiB or more:
 * token offsets are 32-bit), LM_ENOMEM. */
lm_status lm_quality_check(const lm_quality *q, lm_quality_scratch *s, const uint8_t *text, size_t len,
                           lm_quality_doc_result *res, lm_quality_counters *counters);

/* The words (datatrove's English split_into_words) of text, as byte spans:
 * up to `cap` (offset, length) pairs written to spans[2*i], spans[2*i+1];
 * *n_words receives the total count (may exceed cap).  For tests and tools. */
lm_status lm_quality_words(const lm_quality *q, lm_quality_scratch *s, const uint8_t *text, size_t len, size_t *spans, size_t cap,
                           size_t *n_words);

#ifdef __cplusplus
}
#endif
#endif
