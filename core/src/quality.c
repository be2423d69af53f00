/* quality.c — QualityFilter object: parameters, rule names, batch entry point. */
#include <stdlib.h>
#include <string.h>

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
  lmq_tokbuf_free(&s->lb);
  free(s->w);
  free(s->wb);
  free(s->sb);
  free(s->wo);
  free(s->so);
  free(s->wc);
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
    spans[2 * i] = s->tb.tok[s->w[i]].off;
    spans[2 * i + 1] = s->tb.tok[s->w[i]].len;
  }
  *n_words = s->nw;
  return LM_OK;
}

/* ---- batch ---- */

typedef struct {
  const lm_quality *q;
  const lm_docs *docs;
  int32_t *reasons;
  /* per range: output bytes and lengths, written into a private buffer */
  struct range_out {
    uint8_t *data;
    size_t len, cap;
    lm_quality_counters c;
    lm_status st;
  } *ranges;
  size_t grain, nranges;
  size_t *out_len; /* per document: kept length */
} run_ctx;

static lm_status run_range(void *vctx, size_t begin, size_t end) {
  run_ctx *x = (run_ctx *)vctx;
  lm_quality_scratch *s = NULL;
  lm_status st = lm_quality_scratch_create(&s);
  if (st) return st;
  for (size_t r = begin; r < end; r++) {
    struct range_out *ro = &x->ranges[r];
    size_t d0 = r * x->grain, d1 = d0 + x->grain;
    if (d1 > x->docs->n) d1 = x->docs->n;
    for (size_t d = d0; d < d1; d++) {
      const uint8_t *t = x->docs->data + x->docs->offsets[d];
      size_t n = (size_t)(x->docs->offsets[d + 1] - x->docs->offsets[d]);
      lm_quality_doc_result res;
      st = lm_quality_check(x->q, s, t, n, &res, &ro->c);
      if (st) goto done;
      x->reasons[d] = res.reason;
      x->out_len[d] = res.len;
      if (res.reason == LM_REASON_KEPT) {
        if (ro->len + res.len > ro->cap) {
          size_t nc = ro->cap ? ro->cap : 4096;
          while (nc < ro->len + res.len) nc *= 2;
          uint8_t *p = (uint8_t *)realloc(ro->data, nc);
          if (!p) { st = LM_ENOMEM; goto done; }
          ro->data = p;
          ro->cap = nc;
        }
        if (res.len) memcpy(ro->data + ro->len, res.text, res.len);
        ro->len += res.len;
      }
    }
  }
done:
  lm_quality_scratch_destroy(s);
  return st;
}

lm_status lm_quality_run(lm_quality *q, const lm_docs *docs, lm_batch_result *out, const lm_exec *exec) {
  if (!q || !out) return LM_EINVAL;
  lm_status st = lm_docs_validate(docs);
  if (st) return st;
  size_t n = docs->n;
  st = lm_batch_result_begin(out, n, docs->data_len);
  if (st) return st;
  if (n == 0) return LM_OK;
  run_ctx x = {q, docs, out->reasons, NULL, 64, 0, NULL};
  x.nranges = (n + x.grain - 1) / x.grain;
  x.ranges = (struct range_out *)calloc(x.nranges, sizeof *x.ranges);
  x.out_len = (size_t *)malloc(n * sizeof(size_t));
  if (!x.ranges || !x.out_len) {
    free(x.ranges);
    free(x.out_len);
    return LM_ENOMEM;
  }
  lm_exec ex = exec ? *exec : (lm_exec){1, 0};
  if (ex.min_items_per_thread == 0) ex.min_items_per_thread = 4; /* ranges of 64 docs */
  st = lm_parallel_for(&ex, x.nranges, run_range, &x);
  if (!st) {
    for (size_t r = 0; r < x.nranges && !st; r++) {
      const struct range_out *ro = &x.ranges[r];
      size_t d0 = r * x.grain, d1 = d0 + x.grain, pos = 0;
      if (d1 > n) d1 = n;
      for (size_t d = d0; d < d1 && !st; d++) {
        if (out->reasons[d] != LM_REASON_KEPT) continue;
        /* ro->data is NULL when the range kept only empty texts (NULL + 0 is UB) */
        st = lm_batch_result_push(out, (int64_t)d, ro->data ? ro->data + pos : NULL, x.out_len[d]);
        pos += x.out_len[d];
      }
    }
    if (!st) {
      lm_quality_counters *c = &q->counters;
      for (size_t r = 0; r < x.nranges; r++) {
        const lm_quality_counters *rc = &x.ranges[r].c;
        c->docs_in += rc->docs_in;
        c->docs_kept += rc->docs_kept;
        c->docs_dropped += rc->docs_dropped;
        c->docs_modified += rc->docs_modified;
        c->bytes_in += rc->bytes_in;
        c->bytes_out += rc->bytes_out;
        c->too_large += rc->too_large;
        for (int i = 0; i < LM_Q_RULE_COUNT; i++) c->rule[i] += rc->rule[i];
      }
    }
  }
  for (size_t r = 0; r < x.nranges; r++) free(x.ranges[r].data);
  free(x.ranges);
  free(x.out_len);
  return st;
}
