/* clean.c — TextCleaner (see clean.h). */
#include "luminamoon/clean.h"
#include "luminamoon/bytebuf.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

struct lm_cleaner {
  lm_cleaner_params p;
  lm_clean_counters counters;
};

lm_status lm_cleaner_params_default(lm_cleaner_params *p) {
  if (!p) return LM_EINVAL;
  memset(p, 0, sizeof *p);
  p->normalize = LM_NORM_NONE;
  p->remove_control = 1;
  p->normalize_newlines = 1;
  p->fold_spaces = 1;
  p->collapse_spaces = 1;
  p->trim_trailing = 1;
  p->max_blank_lines = 2;
  p->drop_empty = 1;
  return LM_OK;
}

lm_status lm_cleaner_create(const lm_cleaner_params *params, lm_cleaner **out) {
  if (!out) return LM_EINVAL;
  *out = NULL;
  if (params && (params->normalize < LM_NORM_NONE || params->normalize > LM_NORM_NFKC)) return LM_EINVAL;
  lm_cleaner *c = (lm_cleaner *)calloc(1, sizeof *c);
  if (!c) return LM_ENOMEM;
  if (params) c->p = *params;
  else lm_cleaner_params_default(&c->p);
  *out = c;
  return LM_OK;
}

void lm_cleaner_destroy(lm_cleaner *c) { free(c); }

lm_status lm_cleaner_get_params(const lm_cleaner *c, lm_cleaner_params *out) {
  if (!c || !out) return LM_EINVAL;
  *out = c->p;
  return LM_OK;
}

lm_status lm_cleaner_get_counters(const lm_cleaner *c, lm_clean_counters *out) {
  if (!c || !out) return LM_EINVAL;
  *out = c->counters;
  return LM_OK;
}

lm_status lm_cleaner_reset_counters(lm_cleaner *c) {
  if (!c) return LM_EINVAL;
  memset(&c->counters, 0, sizeof c->counters);
  return LM_OK;
}

size_t lm_clean_bound(size_t n) { return n > SIZE_MAX / 3 ? SIZE_MAX : 3 * n; }

/* Decode one code point at s[i] with the maximal-subpart policy: returns the
 * number of bytes consumed; *cp is the code point, or 0xFFFD with *bad = 1 for
 * an ill-formed subpart. */
static inline size_t decode(const uint8_t *s, size_t n, size_t i, uint32_t *cp, int *bad) {
  uint8_t c = s[i];
  *bad = 0;
  if (c < 0x80) { *cp = c; return 1; }
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;
  uint32_t v;
  if (c >= 0xC2 && c <= 0xDF) { need = 1; v = c & 0x1F; }
  else if (c >= 0xE0 && c <= 0xEF) {
    need = 2; v = c & 0x0F;
    if (c == 0xE0) lo = 0xA0;
    else if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3; v = c & 0x07;
    if (c == 0xF0) lo = 0x90;
    else if (c == 0xF4) hi = 0x8F;
  } else {
    *cp = 0xFFFD; *bad = 1;
    return 1;
  }
  size_t k = 1;
  for (; k <= need; k++) {
    if (i + k >= n) break;
    uint8_t b = s[i + k];
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
    v = (v << 6) | (b & 0x3F);
  }
  if (k <= need) { *cp = 0xFFFD; *bad = 1; return k; }
  *cp = v;
  return need + 1;
}

static inline size_t put_utf8(uint8_t *o, uint32_t cp) {
  if (cp < 0x80) { o[0] = (uint8_t)cp; return 1; }
  if (cp < 0x800) { o[0] = (uint8_t)(0xC0 | (cp >> 6)); o[1] = (uint8_t)(0x80 | (cp & 0x3F)); return 2; }
  if (cp < 0x10000) {
    o[0] = (uint8_t)(0xE0 | (cp >> 12)); o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (uint8_t)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (uint8_t)(0xF0 | (cp >> 18)); o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
  o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (uint8_t)(0x80 | (cp & 0x3F));
  return 4;
}

static inline int is_uspace(uint32_t cp) {
  return cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

/* Repair only: ill-formed subparts -> U+FFFD.  out has room for 3n. */
static size_t repair(const uint8_t *s, size_t n, uint8_t *out, uint64_t *invalid) {
  size_t o = 0, i = 0;
  while (i < n) {
    if (s[i] < 0x80) { out[o++] = s[i++]; continue; }
    uint32_t cp;
    int bad;
    size_t l = decode(s, n, i, &cp, &bad);
    if (bad) { o += put_utf8(out + o, 0xFFFD); (*invalid)++; }
    else { memcpy(out + o, s + i, l); o += l; }
    i += l;
  }
  return o;
}

/* The folding pass: decode (repairing), drop controls, fold spaces, collapse,
 * trim, limit blank lines.  out has room for 3n.  Returns the length. */
static size_t fold(const lm_cleaner_params *p, const uint8_t *s, size_t n, uint8_t *out, lm_clean_counters *c) {
  size_t o = 0, i = 0;
  size_t ws_start = SIZE_MAX; /* start of the trailing [ \t] run of the current line in out */
  int nl_run = 0;             /* consecutive '\n' at the end of out */
  int maxnl = p->max_blank_lines < 0 ? -1 : p->max_blank_lines + 1;
  while (i < n) {
    uint8_t b = s[i];
    uint32_t cp;
    /* ASCII printable fast path */
    if (b > 0x20 && b < 0x7F) {
      size_t j = i + 1;
      while (j < n && s[j] > 0x20 && s[j] < 0x7F) j++;
      memcpy(out + o, s + i, j - i);
      o += j - i;
      i = j;
      ws_start = SIZE_MAX;
      nl_run = 0;
      continue;
    }
    size_t l;
    if (b < 0x80) { cp = b; l = 1; }
    else {
      int bad;
      l = decode(s, n, i, &cp, &bad);
      if (bad) c->invalid_sequences++;
    }
    i += l;
    if (p->normalize_newlines) {
      if (cp == '\r') {
        if (i < n && s[i] == '\n') i++;
        cp = '\n';
      } else if (cp == 0x85 || cp == 0x2028 || cp == 0x2029) {
        cp = '\n';
      }
    }
    if (cp == '\n') {
      if (p->trim_trailing && ws_start != SIZE_MAX) {
        c->trailing_trimmed += o - ws_start;
        o = ws_start;
      }
      ws_start = SIZE_MAX;
      if (maxnl >= 0 && nl_run >= maxnl) { c->blank_lines_removed++; continue; }
      out[o++] = '\n';
      nl_run++;
      continue;
    }
    if (p->remove_control && (cp < 0x20 ? cp != '\t' : (cp == 0x7F || (cp >= 0x80 && cp <= 0x9F)))) {
      c->control_removed++;
      continue;
    }
    if (p->fold_spaces && is_uspace(cp)) { cp = ' '; c->spaces_folded++; }
    if (cp == ' ' || cp == '\t') {
      if (cp == ' ' && p->collapse_spaces && o > 0 && out[o - 1] == ' ' && ws_start != SIZE_MAX) {
        c->spaces_collapsed++;
        continue;
      }
      if (ws_start == SIZE_MAX) ws_start = o;
      out[o++] = (uint8_t)cp;
      if (!p->trim_trailing) nl_run = 0; /* trimmed later otherwise: the line may still be blank */
      continue;
    }
    o += put_utf8(out + o, cp);
    ws_start = SIZE_MAX;
    nl_run = 0;
  }
  if (p->trim_trailing && ws_start != SIZE_MAX) {
    c->trailing_trimmed += o - ws_start;
    o = ws_start;
  }
  return o;
}

static int is_blank(const uint8_t *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] != ' ' && s[i] != '\t' && s[i] != '\n') return 0;
  return 1;
}

lm_status lm_clean_text(const lm_cleaner *cl, const uint8_t *text, size_t len, uint8_t *out, size_t out_cap,
                        size_t *out_len, int32_t *reason, lm_clean_counters *counters) {
  if (!cl || !out_len || (len && !text) || (out_cap && !out)) return LM_EINVAL;
  lm_clean_counters local;
  memset(&local, 0, sizeof local);
  lm_clean_counters *c = counters ? counters : &local;
  const lm_cleaner_params *p = &cl->p;
  if (reason) *reason = LM_REASON_KEPT;
  *out_len = 0;
  if (p->max_doc_bytes && len > p->max_doc_bytes) {
    c->docs_in++;
    c->bytes_in += len;
    c->docs_too_large++;
    if (reason) *reason = LM_REASON_TOO_LARGE;
    return LM_OK;
  }
  size_t o;
  if (p->normalize == LM_NORM_NONE) {
    size_t need = lm_clean_bound(len);
    if (out_cap < need) { /* exact size needed is only known after the pass: be safe */
      *out_len = need;
      return LM_ERANGE;
    }
    o = fold(p, text, len, out, c);
  } else {
    uint8_t *fixed = (uint8_t *)malloc(lm_clean_bound(len) + 1);
    if (!fixed) return LM_ENOMEM;
    uint64_t inv = 0;
    size_t fl = repair(text, len, fixed, &inv);
    utf8proc_uint8_t *norm = NULL;
    int opts = UTF8PROC_STABLE | UTF8PROC_COMPOSE | (p->normalize == LM_NORM_NFKC ? UTF8PROC_COMPAT : 0);
    utf8proc_ssize_t nl = utf8proc_map(fixed, (utf8proc_ssize_t)fl, &norm, (utf8proc_option_t)opts);
    if (nl < 0) {
      free(fixed);
      return nl == UTF8PROC_ERROR_NOMEM ? LM_ENOMEM : LM_EUTF8;
    }
    int changed = (size_t)nl != fl || memcmp(norm, fixed, fl) != 0;
    free(fixed);
    if (out_cap < (size_t)nl) {
      free(norm);
      *out_len = (size_t)nl;
      return LM_ERANGE;
    }
    /* folding never lengthens valid UTF-8 */
    lm_clean_counters sub;
    memset(&sub, 0, sizeof sub);
    o = fold(p, norm, (size_t)nl, out, &sub);
    free(norm);
    sub.invalid_sequences = inv;
    c->invalid_sequences += sub.invalid_sequences;
    c->control_removed += sub.control_removed;
    c->spaces_folded += sub.spaces_folded;
    c->spaces_collapsed += sub.spaces_collapsed;
    c->trailing_trimmed += sub.trailing_trimmed;
    c->blank_lines_removed += sub.blank_lines_removed;
    c->docs_normalized += (uint64_t)changed;
  }
  c->docs_in++;
  c->bytes_in += len;
  *out_len = o;
  if (p->drop_empty && is_blank(out, o)) {
    c->docs_empty++;
    if (reason) *reason = LM_REASON_EMPTY;
    return LM_OK;
  }
  c->docs_kept++;
  c->bytes_out += o;
  return LM_OK;
}

/* ---- batch ---- */

static lm_status clean_doc(const void *stage, void *scratch, const uint8_t *t, size_t n, lm_bytebuf *arena,
                           void *counters, int32_t *reason) {
  const lm_cleaner *cl = (const lm_cleaner *)stage;
  (void)scratch;
  /* a document above max_doc_bytes is refused without output: no room for it */
  int over = cl->p.max_doc_bytes && n > cl->p.max_doc_bytes;
  size_t need = over ? 16 : lm_clean_bound(n) + 16, ol = 0;
  lm_status st;
  for (;;) {
    st = lm_bytebuf_reserve(arena, need, 4096);
    if (st) return st;
    st = lm_clean_text(cl, t, n, arena->data + arena->len, arena->cap - arena->len, &ol, reason,
                       (lm_clean_counters *)counters);
    if (st != LM_ERANGE) break;
    need = ol;
  }
  if (st) return st;
  if (*reason == LM_REASON_KEPT) arena->len += ol;
  return LM_OK;
}

static void clean_merge(void *stage, const void *counters) {
  const uint64_t *src = (const uint64_t *)counters;
  uint64_t *dst = (uint64_t *)&((lm_cleaner *)stage)->counters;
  for (size_t i = 0; i < sizeof(lm_clean_counters) / sizeof(uint64_t); i++) dst[i] += src[i];
}

static const lm_batch_stage k_clean_stage = {64, sizeof(lm_clean_counters), NULL, NULL, clean_doc, clean_merge};

lm_status lm_cleaner_run(lm_cleaner *cl, const lm_docs *docs, lm_batch_result *out, const lm_exec *exec) {
  if (!cl) return LM_EINVAL;
  return lm_batch_run(&k_clean_stage, cl, docs, out, exec);
}
