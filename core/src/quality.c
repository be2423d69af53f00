/* quality.c — QualityFilter object: parameters, rule names, batch entry point. */
#include <stdlib.h>
#include <string.h>

#include "luminamoon/bytebuf.h"
#include "quality_internal.h"

static const char *const k_names[LM_Q_RULE_COUNT] = {
    "gopher_repetition.empty",
    "gopher_repetition.dup_para_frac",
    "gopher_repetition.dup_para_char_frac",
    "gopher_repetition.dup_line_frac",
    "gopher_repetition.dup_line_char_frac",
    "gopher_repetition.top_2_gram",
    "gopher_repetition.top_3_gram",
    "gopher_repetition.top_4_gram",
    "gopher_repetition.duplicated_5_n_grams",
    "gopher_repetition.duplicated_6_n_grams",
    "gopher_repetition.duplicated_7_n_grams",
    "gopher_repetition.duplicated_8_n_grams",
    "gopher_repetition.duplicated_9_n_grams",
    "gopher_repetition.duplicated_10_n_grams",
    "gopher_quality.min_doc_words",
    "gopher_quality.max_doc_words",
    "gopher_quality.min_avg_word_length",
    "gopher_quality.max_avg_word_length",
    "gopher_quality.max_hash_ratio",
    "gopher_quality.max_ellipsis_ratio",
    "gopher_quality.max_bullet_lines_ratio",
    "gopher_quality.max_ellipsis_lines_ratio",
    "gopher_quality.min_alpha_words_ratio",
    "gopher_quality.min_stop_words",
    "c4.line_too_long_word",
    "c4.remove_citations",
    "c4.line_no_terminal_punct",
    "c4.line_too_few_words",
    "c4.lorem_ipsum",
    "c4.line_javascript",
    "c4.curly_bracket",
    "c4.line_policy",
    "c4.too_few_sentences",
    "fineweb.empty",
    "fineweb.line_punct_ratio",
    "fineweb.short_line_ratio",
    "fineweb.char_dup_ratio",
    "fineweb.list_ratio",
};

_Static_assert(LM_Q_RULE_COUNT <= 64, "rule mask is 64 bits");

int lm_quality_rule_count(void) { return LM_Q_RULE_COUNT; }

const char *lm_quality_rule_name(int id) {
  if (id < 0 || id >= LM_Q_RULE_COUNT) return NULL;
  return k_names[id];
}

lm_quality_rule_set lm_quality_rule_set_of(int id) {
  if (id <= LM_Q_GR_DUP_10_GRAMS) return LM_QSET_GOPHER_REPETITION;
  if (id <= LM_Q_GQ_STOP_WORDS) return LM_QSET_GOPHER_QUALITY;
  if (id <= LM_Q_C4_TOO_FEW_SENTENCES) return LM_QSET_C4;
  return LM_QSET_FINEWEB;
}

lm_status lm_quality_rule_find(const char *name, int *id) {
  if (!name || !id) return LM_EINVAL;
  for (int i = 0; i < LM_Q_RULE_COUNT; i++)
    if (strcmp(name, k_names[i]) == 0) {
      *id = i;
      return LM_OK;
    }
  return LM_ENOTFOUND;
}

lm_status lm_quality_params_default(lm_quality_params *p) {
  if (!p) return LM_EINVAL;
  memset(p, 0, sizeof *p);
  p->enabled = ((uint64_t)1 << LM_Q_RULE_COUNT) - 1;
  p->c4_modify_text = 1;
  p->gr_dup_para_frac = 0.3;
  p->gr_dup_para_char_frac = 0.2;
  p->gr_dup_line_frac = 0.3;
  p->gr_dup_line_char_frac = 0.2;
  p->gr_top_ngram_frac[0] = 0.2;
  p->gr_top_ngram_frac[1] = 0.18;
  p->gr_top_ngram_frac[2] = 0.16;
  static const double dup[6] = {0.15, 0.14, 0.13, 0.12, 0.11, 0.10};
  memcpy(p->gr_dup_ngram_frac, dup, sizeof dup);
  p->gq_min_doc_words = 50;
  p->gq_max_doc_words = 100000;
  p->gq_min_avg_word_length = 3;
  p->gq_max_avg_word_length = 10;
  p->gq_max_symbol_word_ratio = 0.1;
  p->gq_max_bullet_lines_ratio = 0.9;
  p->gq_max_ellipsis_lines_ratio = 0.3;
  p->gq_min_alpha_words_ratio = 0.8;
  p->gq_min_stop_words = 2;
  p->c4_min_sentences = 5;
  p->c4_min_words_per_line = 3;
  p->c4_max_word_length = 1000;
  p->fw_line_punct_thr = 0.12;
  p->fw_line_punct_exclude_zero = 0;
  p->fw_short_line_thr = 0.67;
  p->fw_short_line_length = 30;
  p->fw_char_dup_ratio = 0.01;
  p->fw_new_line_ratio = 0.3;
  return LM_OK;
}

lm_status lm_quality_params_set_rule(lm_quality_params *p, int id, int on) {
  if (!p || id < 0 || id >= LM_Q_RULE_COUNT) return LM_EINVAL;
  if (on) p->enabled |= (uint64_t)1 << id;
  else p->enabled &= ~((uint64_t)1 << id);
  return LM_OK;
}

lm_status lm_quality_params_set_rule_set(lm_quality_params *p, lm_quality_rule_set set, int on) {
  if (!p || (int)set < 0 || set >= LM_QSET_COUNT) return LM_EINVAL;
  for (int i = 0; i < LM_Q_RULE_COUNT; i++)
    if (lm_quality_rule_set_of(i) == set) lm_quality_params_set_rule(p, i, on);
  return LM_OK;
}

lm_status lm_quality_create(const lm_quality_params *params, lm_quality **out) {
  if (!out) return LM_EINVAL;
  *out = NULL;
  lm_quality *q = (lm_quality *)calloc(1, sizeof *q);
  if (!q) return LM_ENOMEM;
  if (params) q->p = *params;
  else lm_quality_params_default(&q->p);
  if (lmq_special_index_build(&q->ix)) {
    free(q);
    return LM_ENOMEM;
  }
  lmq_pow_init(q);
  *out = q;
  return LM_OK;
}

void lm_quality_destroy(lm_quality *q) {
  if (!q) return;
  lmq_special_index_free(&q->ix);
  free(q);
}

lm_status lm_quality_get_counters(const lm_quality *q, lm_quality_counters *out) {
  if (!q || !out) return LM_EINVAL;
  *out = q->counters;
  return LM_OK;
}

lm_status lm_quality_reset_counters(lm_quality *q) {
  if (!q) return LM_EINVAL;
  memset(&q->counters, 0, sizeof q->counters);
  return LM_OK;
}

lm_status lm_quality_scratch_create(lm_quality_scratch **out) {
  if (!out) return LM_EINVAL;
  *out = (lm_quality_scratch *)calloc(1, sizeof(lm_quality_scratch));
  return *out ? LM_OK : LM_ENOMEM;
}

void lm_quality_scratch_destroy(lm_quality_scratch *s) {
  if (!s) return;
  lmq_tokbuf_free(&s->tb);
  free(s->wb);
  free(s->wp);
  free(s->wx);
  free(s->text);
  free(s->line);
  lmq_set_free(&s->set);
  free(s);
}

lm_status lm_quality_words(const lm_quality *q, lm_quality_scratch *s, const uint8_t *text, size_t len,
                           size_t *spans, size_t cap, size_t *n_words) {
  if (!q || !s || !n_words || (len && !text) || (cap && !spans)) return LM_EINVAL;
  if (len > 0xFFFFFFF0u) return LM_ETOOBIG;
  if (lmq_words(q, s, text, len)) return LM_ENOMEM;
  for (size_t i = 0; i < s->nw && i < cap; i++) {
    spans[2 * i] = s->tb.tok[i].off;
    spans[2 * i + 1] = s->tb.tok[i].len;
  }
  *n_words = s->nw;
  return LM_OK;
}

size_t lm_quality_scratch_bytes(const lm_quality_scratch *s) {
  if (!s) return 0;
  return lmq_tokbuf_bytes(&s->tb) + s->cap_wb + (s->cap_wp + s->cap_wx) * sizeof(uint32_t) + s->cap_text + s->cap_line +
         lmq_set_bytes(&s->set);
}

/* ---- batch ---- */

static lm_status quality_scratch_create(const void *stage, void **scratch) {
  (void)stage;
  return lm_quality_scratch_create((lm_quality_scratch **)scratch);
}

static void quality_scratch_destroy(void *scratch) { lm_quality_scratch_destroy((lm_quality_scratch *)scratch); }

static lm_status quality_doc(const void *stage, void *scratch, const uint8_t *t, size_t n, lm_bytebuf *arena,
                             void *counters, int32_t *reason) {
  lm_quality_doc_result res;
  lm_status st = lm_quality_check((const lm_quality *)stage, (lm_quality_scratch *)scratch, t, n, &res,
                                  (lm_quality_counters *)counters);
  if (st) return st;
  *reason = res.reason;
  return res.reason == LM_REASON_KEPT ? lm_bytebuf_append(arena, res.text, res.len, 4096) : LM_OK;
}

static void quality_merge(void *stage, const void *counters) {
  lm_quality_counters *c = &((lm_quality *)stage)->counters;
  const lm_quality_counters *rc = (const lm_quality_counters *)counters;
  c->docs_in += rc->docs_in;
  c->docs_kept += rc->docs_kept;
  c->docs_dropped += rc->docs_dropped;
  c->docs_modified += rc->docs_modified;
  c->bytes_in += rc->bytes_in;
  c->bytes_out += rc->bytes_out;
  c->too_large += rc->too_large;
  for (int i = 0; i < LM_Q_RULE_COUNT; i++) c->rule[i] += rc->rule[i];
}

static const lm_batch_stage k_quality_stage = {64, sizeof(lm_quality_counters), quality_scratch_create,
                                               quality_scratch_destroy, quality_doc, quality_merge};

lm_status lm_quality_run(lm_quality *q, const lm_docs *docs, lm_batch_result *out, const lm_exec *exec) {
  if (!q) return LM_EINVAL;
  return lm_batch_run(&k_quality_stage, q, docs, out, exec);
}
