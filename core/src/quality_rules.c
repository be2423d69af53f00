/* quality_rules.c — the rules of the QualityFilter, one document at a time.
 * Each function mirrors the datatrove filter named above it (see quality.h). */
#include <stdlib.h>
#include <string.h>

#include "luminamoon/bytebuf.h"
#include "quality_internal.h"

/* XXH3 inlined here: the n-gram sets hash millions of short keys per MB (the
 * values only place elements in the set; they never decide anything). */
#define XXH_INLINE_ALL
#include <xxhash.h>

static inline uint64_t qhash(const uint8_t *p, size_t n) { return (uint64_t)XXH3_64bits(p, n); }

#define ON(q, r) (((q)->p.enabled >> (r)) & 1u)

/* Byte buffers sized from the document: exactly what is needed (no doubling:
 * their capacity counts in the scratch's bytes per input byte). */
static int reserve(uint8_t **p, size_t *cap, size_t need) {
  if (need <= *cap) return 0;
  void *q = realloc(*p, need);
  if (!q) return -1;
  *p = (uint8_t *)q;
  *cap = need;
  return 0;
}

/* ---- exact multiset of byte strings (hash + compare) ---- */

void lmq_set_free(lmq_set *st) {
  free(st->h);
  free(st->a);
  free(st->b);
  free(st->cnt);
  memset(st, 0, sizeof *st);
}

static int set_alloc(lmq_set *st, size_t cap) {
  st->h = (uint64_t *)calloc(cap, sizeof(uint64_t));
  st->a = (uint32_t *)malloc(cap * sizeof(uint32_t));
  st->b = (uint32_t *)malloc(cap * sizeof(uint32_t));
  st->cnt = (uint32_t *)malloc(cap * sizeof(uint32_t));
  if (!st->h || !st->a || !st->b || !st->cnt) {
    lmq_set_free(st);
    return -1;
  }
  st->cap = cap;
  st->mask = cap - 1;
  st->count = 0;
  return 0;
}

/* Empty the set, expecting about `hint` elements (it grows past that as
 * needed: its memory follows the distinct elements, not the text).  Keeps
 * the allocation unless it is far larger than the hint. */
#define SET_MAX_HINT ((size_t)1 << 12)
static int set_reset(lmq_set *st, size_t hint) {
  if (hint > SET_MAX_HINT) hint = SET_MAX_HINT;
  size_t cap = 16;
  while (cap < 2 * hint + 2) cap <<= 1;
  if (st->cap > 64 * SET_MAX_HINT && st->cap > 4 * cap) lmq_set_free(st); /* shrink after a huge document */
  if (cap > st->cap) {
    lmq_set_free(st);
    return set_alloc(st, cap);
  }
  st->mask = cap - 1; /* use the front of a larger allocation */
  st->count = 0;
  memset(st->h, 0, cap * sizeof(uint64_t));
  return 0;
}

/* Double the slots in use (load above 1/2). */
static int set_grow(lmq_set *st) {
  size_t used = st->mask + 1, cap = 2 * used;
  lmq_set old = *st;
  if (cap <= st->cap) { /* the allocation is large enough: rehash through a copy of the used part */
    lmq_set tmp;
    memset(&tmp, 0, sizeof tmp);
    if (set_alloc(&tmp, used)) return -1;
    memcpy(tmp.h, st->h, used * sizeof(uint64_t));
    memcpy(tmp.a, st->a, used * sizeof(uint32_t));
    memcpy(tmp.b, st->b, used * sizeof(uint32_t));
    memcpy(tmp.cnt, st->cnt, used * sizeof(uint32_t));
    old = tmp;
    memset(st->h, 0, cap * sizeof(uint64_t));
    st->mask = cap - 1;
  } else {
    memset(st, 0, sizeof *st);
    if (set_alloc(st, cap)) {
      *st = old;
      return -1;
    }
  }
  size_t count = 0;
  for (size_t k = 0; k < used; k++) {
    uint64_t h = old.h[k];
    if (!h) continue;
    size_t i = (size_t)(h ^ (h >> 32)) & st->mask;
    while (st->h[i]) i = (i + 1) & st->mask;
    st->h[i] = h;
    st->a[i] = old.a[k];
    st->b[i] = old.b[k];
    st->cnt[i] = old.cnt[k];
    count++;
  }
  st->count = count;
  lmq_set_free(&old);
  return 0;
}

/* Find the element with hash h for which eq(ctx, a, b) holds, or insert
 * (a, b) with count 1.  Returns the slot (SIZE_MAX on ENOMEM); *seen = 1
 * when it was already there (its count is then incremented). */
typedef int (*set_eq_fn)(const void *ctx, uint32_t a0, uint32_t b0, uint32_t a, uint32_t b);
static inline __attribute__((always_inline)) size_t set_add_eq(lmq_set *st, uint64_t h, uint32_t a, uint32_t b,
                                                        set_eq_fn eq, const void *ctx, int *seen) {
  h |= 1u;
  size_t i = (size_t)(h ^ (h >> 32)) & st->mask;
  for (;;) {
    if (st->h[i] == 0) {
      if (2 * (st->count + 1) > st->mask + 1) {
        if (set_grow(st)) return SIZE_MAX;
        i = (size_t)(h ^ (h >> 32)) & st->mask;
        while (st->h[i]) i = (i + 1) & st->mask;
      }
      st->h[i] = h;
      st->a[i] = a;
      st->b[i] = b;
      st->cnt[i] = 1;
      st->count++;
      *seen = 0;
      return i;
    }
    if (st->h[i] == h && eq(ctx, st->a[i], st->b[i], a, b)) {
      st->cnt[i]++;
      *seen = 1;
      return i;
    }
    i = (i + 1) & st->mask;
  }
}

/* Byte strings base[a..b). */
static inline int eq_bytes(const void *ctx, uint32_t a0, uint32_t b0, uint32_t a, uint32_t b) {
  const uint8_t *base = (const uint8_t *)ctx;
  return b0 - a0 == b - a && memcmp(base + a0, base + a, b - a) == 0;
}

static inline __attribute__((always_inline)) size_t set_add(lmq_set *st, const uint8_t *base, uint32_t a, uint32_t b,
                                                     int *seen) {
  return set_add_eq(st, qhash(base + a, b - a), a, b, eq_bytes, base, seen);
}

static inline size_t cp_count(const uint8_t *s, size_t n) { return lmq_cp_count(s, n); }

static inline uint32_t flags_at(const uint8_t *s, size_t n, size_t i, size_t *l) {
  uint32_t cp;
  *l = lmq_decode(s, n, i, &cp);
  return lmq_flags(cp);
}

/* Python str.strip() bounds (Unicode whitespace). */
static void py_strip(const uint8_t *s, size_t *a, size_t *b) {
  size_t i = *a, j = *b, l;
  while (i < j && (flags_at(s, j, i, &l) & LMQ_F_SPACE)) i += l;
  while (j > i) {
    size_t k = j - 1;
    while (k > i && (s[k] & 0xC0) == 0x80) k--;
    if (!(flags_at(s, j, k, &l) & LMQ_F_SPACE)) break;
    j = k;
  }
  *a = i;
  *b = j;
}

/* Python str.splitlines(): next line [*a, *e) starting at pos, returns the
 * position after its terminator; pos == n ends. */
static size_t next_splitline(const uint8_t *s, size_t n, size_t pos, size_t *e) {
  size_t i = pos;
  while (i < n) {
    uint8_t c = s[i];
    if (c >= 0x20 && c < 0x80) { i++; continue; }
    size_t l;
    if (flags_at(s, n, i, &l) & LMQ_F_LINEBREAK) {
      *e = i;
      if (c == '\r' && i + 1 < n && s[i + 1] == '\n') return i + 2;
      return i + l;
    }
    i += l;
  }
  *e = n;
  return n;
}

/* The last code point of s[a..b) (b > a). */
static uint32_t last_cp(const uint8_t *s, size_t a, size_t b) {
  size_t k = b - 1;
  while (k > a && (s[k] & 0xC0) == 0x80) k--;
  uint32_t cp;
  lmq_decode(s, b, k, &cp);
  return cp;
}

static int ends_with(const uint8_t *s, size_t a, size_t b, const char *lit) {
  size_t n = strlen(lit);
  return b - a >= n && memcmp(s + b - n, lit, n) == 0;
}

static int contains_ci(const uint8_t *s, size_t n, const char *lit) {
  size_t m = strlen(lit);
  if (m > n) return 0;
  for (size_t i = 0; i + m <= n; i++) {
    size_t k = 0;
    while (k < m) {
      uint8_t c = s[i + k];
      if (c >= 'A' && c <= 'Z') c = (uint8_t)(c | 32);
      if (c != (uint8_t)lit[k]) break;
      k++;
    }
    if (k == m) return 1;
  }
  return 0;
}

/* ---- words ---- */

int lmq_words(const lm_quality *q, lm_quality_scratch *s, const uint8_t *text, size_t len) {
  if (lmq_tokenize(&q->ix, text, len, 0, &s->tb, 1)) return -1;
  /* keep the words only, in place */
  lmq_tok *tok = s->tb.tok;
  uint8_t *attr = s->tb.attr;
  size_t nw = 0, nt = s->tb.ntok;
  for (size_t i = 0; i < nt; i++)
    if (!(attr[i] & LMQ_T_WS)) {
      tok[nw] = tok[i];
      attr[nw++] = attr[i];
    }
  s->tb.ntok = nw;
  s->nw = nw;
  return 0;
}

/* Build wb: the words concatenated (word k's bytes follow word k-1's). */
static int build_word_buffers(lm_quality_scratch *s, const uint8_t *text) {
  size_t nw = s->nw, bytes = 0;
  const lmq_tok *w = s->tb.tok;
  for (size_t i = 0; i < nw; i++) bytes += w[i].len;
  if (reserve(&s->wb, &s->cap_wb, bytes + 1)) return -1;
  size_t o = 0;
  for (size_t i = 0; i < nw; i++) {
    memcpy(s->wb + o, text + w[i].off, w[i].len);
    o += w[i].len;
  }
  return 0;
}

/* " ".join(words[i:i+n]) n-grams: an element is (offset in wb, index of its
 * first word); two are equal when their words are, one by one. */
typedef struct {
  const uint8_t *wb;
  const lmq_tok *w;
  size_t ng;
} joined_ctx;

static inline int eq_joined(const void *ctx, uint32_t a0, uint32_t i0, uint32_t a, uint32_t i) {
  const joined_ctx *j = (const joined_ctx *)ctx;
  size_t bytes = 0;
  for (size_t k = 0; k < j->ng; k++) {
    if (j->w[i0 + k].len != j->w[i + k].len) return 0;
    bytes += j->w[i + k].len;
  }
  return memcmp(j->wb + a0, j->wb + a, bytes) == 0;
}

/* ---- GopherRepetitionFilter ---- */
static int gopher_repetition(const lm_quality *q, lm_quality_scratch *s, const uint8_t *t, size_t n, int *words_ok,
                             int *reason) {
  const lm_quality_params *p = &q->p;
  if (n == 0) {
    if (ON(q, LM_Q_GR_EMPTY)) { *reason = LM_Q_GR_EMPTY; return 0; }
    return 0;
  }
  double text_cp = (double)cp_count(t, n);
  int seen;
  if (ON(q, LM_Q_GR_DUP_PARA_FRAC) || ON(q, LM_Q_GR_DUP_PARA_CHAR_FRAC)) {
    size_t a = 0, b = n;
    py_strip(t, &a, &b);
    size_t npara = 0, dup = 0, dupc = 0;
    if (set_reset(&s->set, (b - a) / 256 + 8)) return -1;
    size_t i = a;
    for (;;) { /* re.split(r"\n{2,}") */
      size_t e = i;
      while (e < b && !(t[e] == '\n' && e + 1 < b && t[e + 1] == '\n')) e++;
      npara++;
      if (set_add(&s->set, t, (uint32_t)i, (uint32_t)e, &seen) == SIZE_MAX) return -1;
      if (seen) dup++, dupc += cp_count(t + i, e - i);
      if (e >= b) break;
      while (e < b && t[e] == '\n') e++;
      i = e;
    }
    if (ON(q, LM_Q_GR_DUP_PARA_FRAC) && (double)dup / (double)npara > p->gr_dup_para_frac) {
      *reason = LM_Q_GR_DUP_PARA_FRAC;
      return 0;
    }
    if (ON(q, LM_Q_GR_DUP_PARA_CHAR_FRAC) && (double)dupc / text_cp > p->gr_dup_para_char_frac) {
      *reason = LM_Q_GR_DUP_PARA_CHAR_FRAC;
      return 0;
    }
  }
  if (ON(q, LM_Q_GR_DUP_LINE_FRAC) || ON(q, LM_Q_GR_DUP_LINE_CHAR_FRAC)) {
    size_t nl = 0, dup = 0, dupc = 0, i = 0;
    if (set_reset(&s->set, n / 64 + 8)) return -1;
    for (;;) { /* re.split("\n+") */
      size_t e = i;
      while (e < n && t[e] != '\n') e++;
      nl++;
      if (set_add(&s->set, t, (uint32_t)i, (uint32_t)e, &seen) == SIZE_MAX) return -1;
      if (seen) dup++, dupc += cp_count(t + i, e - i);
      if (e >= n) break;
      while (e < n && t[e] == '\n') e++;
      i = e;
    }
    if (ON(q, LM_Q_GR_DUP_LINE_FRAC) && (double)dup / (double)nl > p->gr_dup_line_frac) {
      *reason = LM_Q_GR_DUP_LINE_FRAC;
      return 0;
    }
    if (ON(q, LM_Q_GR_DUP_LINE_CHAR_FRAC) && (double)dupc / text_cp > p->gr_dup_line_char_frac) {
      *reason = LM_Q_GR_DUP_LINE_CHAR_FRAC;
      return 0;
    }
  }
  int need_words = 0;
  for (int r = LM_Q_GR_TOP_2_GRAM; r <= LM_Q_GR_DUP_10_GRAMS; r++) need_words |= ON(q, r);
  if (!need_words) return 0;
  if (!*words_ok) {
    if (lmq_words(q, s, t, n)) return -1;
    *words_ok = 1;
  }
  if (build_word_buffers(s, t)) return -1;
  size_t nw = s->nw;
  const lmq_tok *w = s->tb.tok;
  const uint8_t *wb = s->wb;
  /* top n-grams (n = 2..4): the most frequent " ".join of n words; ties go to
   * the first seen (Counter.most_common) */
  for (int k = 0; k < 3; k++) {
    size_t ng = (size_t)k + 2;
    if (!ON(q, LM_Q_GR_TOP_2_GRAM + k) || nw < ng) continue;
    if (set_reset(&s->set, nw)) return -1;
    joined_ctx jc = {wb, w, ng};
    uint32_t best_cnt = 0, best_first = 0, best_word = 0;
    uint32_t a = 0, e = 0; /* wb span of words [i, i + ng) */
    for (size_t t2 = 0; t2 < ng; t2++) e += w[t2].len;
    for (size_t i = 0; i + ng <= nw; i++) {
      if (i) {
        a += w[i - 1].len;
        e += w[i + ng - 1].len;
      }
      size_t slot = set_add_eq(&s->set, qhash(wb + a, e - a), a, (uint32_t)i, eq_joined, &jc, &seen);
      if (slot == SIZE_MAX) return -1;
      uint32_t c = s->set.cnt[slot], first = s->set.a[slot];
      if (c > best_cnt || (c == best_cnt && first < best_first)) {
        best_cnt = c;
        best_first = first;
        best_word = s->set.b[slot];
      }
    }
    size_t bytes = 0;
    for (size_t t2 = 0; t2 < ng; t2++) bytes += w[best_word + t2].len;
    double best_len = (double)cp_count(wb + best_first, bytes) + (double)(ng - 1);
    if (best_len * best_cnt / text_cp > p->gr_top_ngram_frac[k]) {
      *reason = LM_Q_GR_TOP_2_GRAM + k;
      return 0;
    }
  }
  /* duplicated n-grams (n = 5..10): "".join of n words, greedy left to right */
  for (int k = 0; k < 6; k++) {
    size_t ng = (size_t)k + 5;
    if (!ON(q, LM_Q_GR_DUP_5_GRAMS + k)) continue;
    if (set_reset(&s->set, nw)) return -1;
    size_t rep = 0, i = 0;
    uint32_t a = 0, e = 0; /* wb span of words [i, i + ng) */
    if (nw >= ng)
      for (size_t t2 = 0; t2 < ng; t2++) e += w[t2].len;
    while (nw >= ng && i < nw - ng + 1) {
      if (set_add(&s->set, wb, a, e, &seen) == SIZE_MAX) return -1;
      if (seen) {
        rep += cp_count(wb + a, e - a);
        i += ng;
        a = e;
        if (i < nw - ng + 1)
          for (size_t t2 = 0; t2 < ng; t2++) e += w[i + t2].len;
      } else {
        a += w[i].len;
        i++;
        if (i < nw - ng + 1) e += w[i + ng - 1].len;
      }
    }
    if ((double)rep / text_cp > p->gr_dup_ngram_frac[k]) {
      *reason = LM_Q_GR_DUP_5_GRAMS + k;
      return 0;
    }
  }
  return 0;
}

/* ---- GopherQualityFilter ---- */
static const char *const k_stop[8] = {"the", "be", "to", "of", "and", "that", "have", "with"};

static int gopher_quality(const lm_quality *q, lm_quality_scratch *s, const uint8_t *t, size_t n, int *words_ok,
                          int *reason) {
  const lm_quality_params *p = &q->p;
  if (!*words_ok) {
    if (lmq_words(q, s, t, n)) return -1;
    *words_ok = 1;
  }
  size_t nw = s->nw, nsym = 0, symlen = 0, nalpha = 0;
  unsigned stop = 0;
  for (size_t i = 0; i < nw; i++) {
    const lmq_tok *w = &s->tb.tok[i];
    uint8_t at = s->tb.attr[i];
    if (at & LMQ_T_NONSYMBOL) nsym++, symlen += cp_count(t + w->off, w->len);
    if (at & LMQ_T_ALPHA) nalpha++;
    if (w->len <= 4)
      for (int k = 0; k < 8; k++)
        if (strlen(k_stop[k]) == w->len && memcmp(k_stop[k], t + w->off, w->len) == 0) stop |= 1u << k;
  }
  if (ON(q, LM_Q_GQ_MIN_DOC_WORDS) && p->gq_min_doc_words && nsym < p->gq_min_doc_words) {
    *reason = LM_Q_GQ_MIN_DOC_WORDS;
    return 0;
  }
  if (ON(q, LM_Q_GQ_MAX_DOC_WORDS) && p->gq_max_doc_words && nsym > p->gq_max_doc_words) {
    *reason = LM_Q_GQ_MAX_DOC_WORDS;
    return 0;
  }
  if (nsym) { /* np.mean of nothing is NaN: both comparisons false */
    double avg = (double)symlen / (double)nsym;
    if (ON(q, LM_Q_GQ_MIN_AVG_WORD_LENGTH) && p->gq_min_avg_word_length && avg < p->gq_min_avg_word_length) {
      *reason = LM_Q_GQ_MIN_AVG_WORD_LENGTH;
      return 0;
    }
    if (ON(q, LM_Q_GQ_MAX_AVG_WORD_LENGTH) && p->gq_max_avg_word_length && avg > p->gq_max_avg_word_length) {
      *reason = LM_Q_GQ_MAX_AVG_WORD_LENGTH;
      return 0;
    }
  }
  if (nw && p->gq_max_symbol_word_ratio) {
    if (ON(q, LM_Q_GQ_HASH_RATIO)) {
      size_t h = 0;
      for (size_t i = 0; i < n; i++) h += t[i] == '#';
      if ((double)h / (double)nw > p->gq_max_symbol_word_ratio) {
        *reason = LM_Q_GQ_HASH_RATIO;
        return 0;
      }
    }
    if (ON(q, LM_Q_GQ_ELLIPSIS_RATIO)) {
      size_t e = 0;
      for (size_t i = 0; i < n;) {
        if (i + 2 < n && t[i] == '.' && t[i + 1] == '.' && t[i + 2] == '.') { e++; i += 3; continue; }
        if (i + 2 < n && t[i] == 0xE2 && t[i + 1] == 0x80 && t[i + 2] == 0xA6) { e++; i += 3; continue; }
        i++;
      }
      if ((double)e / (double)nw > p->gq_max_symbol_word_ratio) {
        *reason = LM_Q_GQ_ELLIPSIS_RATIO;
        return 0;
      }
    }
  }
  if (ON(q, LM_Q_GQ_BULLET_LINES) || ON(q, LM_Q_GQ_ELLIPSIS_LINES)) {
    size_t nl = 0, bul = 0, ell = 0, pos = 0, e;
    while (pos < n) {
      size_t st = pos;
      pos = next_splitline(t, n, pos, &e);
      nl++;
      size_t a = st, b = e;
      py_strip(t, &a, &b);
      if (a < b && (t[a] == '-' || (b - a >= 3 && t[a] == 0xE2 && t[a + 1] == 0x80 && t[a + 2] == 0xA2))) bul++;
      if (ends_with(t, a, b, "...") || ends_with(t, a, b, "\xE2\x80\xA6")) ell++;
    }
    if (nl) {
      if (ON(q, LM_Q_GQ_BULLET_LINES) && p->gq_max_bullet_lines_ratio &&
          (double)bul / (double)nl > p->gq_max_bullet_lines_ratio) {
        *reason = LM_Q_GQ_BULLET_LINES;
        return 0;
      }
      if (ON(q, LM_Q_GQ_ELLIPSIS_LINES) && p->gq_max_ellipsis_lines_ratio &&
          (double)ell / (double)nl > p->gq_max_ellipsis_lines_ratio) {
        *reason = LM_Q_GQ_ELLIPSIS_LINES;
        return 0;
      }
    }
  }
  if (nw && ON(q, LM_Q_GQ_ALPHA_WORDS) && p->gq_min_alpha_words_ratio &&
      (double)nalpha / (double)nw < p->gq_min_alpha_words_ratio) {
    *reason = LM_Q_GQ_ALPHA_WORDS;
    return 0;
  }
  if (ON(q, LM_Q_GQ_STOP_WORDS) && p->gq_min_stop_words && (size_t)__builtin_popcount(stop) < p->gq_min_stop_words) {
    *reason = LM_Q_GQ_STOP_WORDS;
    return 0;
  }
  return 0;
}

/* ---- C4QualityFilter ---- */

/* CITATION_REGEX.sub("", line): \[\d*]|\[edit]|\[citation needed] */
static size_t remove_citations(const uint8_t *s, size_t n, uint8_t *out) {
  size_t o = 0, i = 0;
  while (i < n) {
    if (s[i] == '[') {
      size_t k = i + 1, l;
      while (k < n && (flags_at(s, n, k, &l) & LMQ_F_UDIGIT)) k += l;
      if (k < n && s[k] == ']') { i = k + 1; continue; }
      if (n - i >= 6 && memcmp(s + i, "[edit]", 6) == 0) { i += 6; continue; }
      if (n - i >= 17 && memcmp(s + i, "[citation needed]", 17) == 0) { i += 17; continue; }
    }
    out[o++] = s[i++];
  }
  return o;
}

/* Sentences of one C4 line: datatrove splits the line with spaCy's
 * Sentencizer; a new sentence starts at the first token that is neither
 * punctuation nor a sentence-final character after one.  Tokens are counted
 * as they come (nothing stored). */
typedef struct {
  size_t ntok, count;
  int seen;
} sent_state;

static int sent_sink(void *ctx, uint32_t off, uint32_t len, uint32_t a) {
  (void)off;
  (void)len;
  sent_state *st = (sent_state *)ctx;
  st->ntok++;
  if (st->seen && !(a & LMQ_T_ALLPUNCT) && !(a & LMQ_T_SENTP)) {
    st->count++;
    st->seen = 0;
  } else if (a & LMQ_T_SENTP) {
    st->seen = 1;
  }
  return 0;
}

static size_t count_sentences(const lm_quality *q, lm_quality_scratch *s, const uint8_t *line, size_t n, int *err) {
  sent_state st = {0, 1, 0};
  lmq_tokbuf *b = &s->tb;
  int (*old_sink)(void *, uint32_t, uint32_t, uint32_t) = b->sink;
  void *old_ctx = b->sink_ctx;
  b->sink = sent_sink;
  b->sink_ctx = &st;
  size_t keep = b->ntok;
  int r = lmq_tokenize(&q->ix, line, n, 0, b, 0);
  b->sink = old_sink;
  b->sink_ctx = old_ctx;
  b->ntok = keep;
  if (r) { *err = 1; return 0; }
  return st.count; /* no tokens: datatrove's split gives one part */
}

static const char *const k_policy[6] = {"terms of use", "privacy policy", "cookie policy", "uses cookies",
                                        "use of cookies", "use cookies"};

/* Returns -1 on ENOMEM; sets *reason on a drop; *out_len = rewritten length. */
static int c4(const lm_quality *q, lm_quality_scratch *s, const uint8_t *t, size_t n, int *reason, size_t *out_len,
              lm_quality_counters *c) {
  const lm_quality_params *p = &q->p;
  if (reserve(&s->text, &s->cap_text, n + 1)) return -1;
  size_t o = 0, pos = 0, e, sentences = 0;
  uint64_t removed[LM_Q_RULE_COUNT] = {0};
  while (pos < n) {
    size_t st = pos;
    pos = next_splitline(t, n, pos, &e);
    size_t a = st, b = e;
    py_strip(t, &a, &b);
    /* words = line.split() */
    size_t nwords = 0, maxw = 0, i = a;
    while (i < b) {
      size_t l;
      while (i < b && (flags_at(t, b, i, &l) & LMQ_F_SPACE)) i += l;
      if (i >= b) break;
      size_t wcp = 0;
      while (i < b && !(flags_at(t, b, i, &l) & LMQ_F_SPACE)) i += l, wcp++;
      nwords++;
      if (wcp > maxw) maxw = wcp;
    }
    if (ON(q, LM_Q_C4_TOO_LONG_WORD) && maxw > p->c4_max_word_length) { removed[LM_Q_C4_TOO_LONG_WORD]++; continue; }
    const uint8_t *ln = t + a;
    size_t len = b - a;
    if (ON(q, LM_Q_C4_CITATIONS) && memchr(ln, '[', len)) {
      if (reserve(&s->line, &s->cap_line, len + 1)) return -1;
      size_t nl = remove_citations(ln, len, s->line);
      if (nl != len) removed[LM_Q_C4_CITATIONS]++;
      ln = s->line;
      len = nl;
    }
    if (ON(q, LM_Q_C4_NO_TERMINAL_PUNCT)) {
      uint8_t last = len ? ln[len - 1] : 0;
      int term = last == '.' || last == '?' || last == '!' || last == '"' || last == '\'';
      if (!term || (len >= 3 && memcmp(ln + len - 3, "...", 3) == 0)) {
        removed[LM_Q_C4_NO_TERMINAL_PUNCT]++;
        continue;
      }
    }
    if (ON(q, LM_Q_C4_TOO_FEW_WORDS) && nwords < p->c4_min_words_per_line) { removed[LM_Q_C4_TOO_FEW_WORDS]++; continue; }
    if (ON(q, LM_Q_C4_LOREM_IPSUM) && contains_ci(ln, len, "lorem ipsum")) { *reason = LM_Q_C4_LOREM_IPSUM; return 0; }
    if (ON(q, LM_Q_C4_JAVASCRIPT) && contains_ci(ln, len, "javascript")) { removed[LM_Q_C4_JAVASCRIPT]++; continue; }
    if (ON(q, LM_Q_C4_CURLY_BRACKET) && memchr(ln, '{', len)) { *reason = LM_Q_C4_CURLY_BRACKET; return 0; }
    if (ON(q, LM_Q_C4_POLICY)) {
      int hit = 0;
      for (int k = 0; k < 6 && !hit; k++) hit = contains_ci(ln, len, k_policy[k]);
      if (hit) { removed[LM_Q_C4_POLICY]++; continue; }
    }
    if (ON(q, LM_Q_C4_TOO_FEW_SENTENCES)) {
      int err = 0;
      sentences += count_sentences(q, s, ln, len, &err);
      if (err) return -1;
    }
    if (o) s->text[o++] = '\n';
    memmove(s->text + o, ln, len);
    o += len;
  }
  if (ON(q, LM_Q_C4_TOO_FEW_SENTENCES) && sentences < p->c4_min_sentences) {
    *reason = LM_Q_C4_TOO_FEW_SENTENCES;
    return 0;
  }
  size_t a = 0, b = o;
  py_strip(s->text, &a, &b);
  if (a) memmove(s->text, s->text + a, b - a);
  *out_len = b - a;
  if (c)
    for (int r = LM_Q_C4_TOO_LONG_WORD; r <= LM_Q_C4_POLICY; r++) c->rule[r] += removed[r];
  return 0;
}

/* ---- FineWebQualityFilter ---- */
static int fineweb(const lm_quality *q, lm_quality_scratch *s, const uint8_t *t, size_t n, int *words_ok,
                   int *reason) {
  const lm_quality_params *p = &q->p;
  size_t nl = 0, punct = 0, shortl = 0, newlines = 0, dupc = 0;
  if (set_reset(&s->set, n / 64 + 8)) return -1;
  size_t i = 0;
  for (;;) {
    size_t e = i;
    while (e < n && t[e] != '\n') e++;
    size_t a = i, b = e;
    py_strip(t, &a, &b);
    if (a < b) {
      nl++;
      if (lmq_flags(last_cp(t, i, e)) & LMQ_F_TERMINAL) punct++;
      size_t ncp = cp_count(t + i, e - i);
      if (ncp <= p->fw_short_line_length) shortl++;
      int seen;
      if (set_add(&s->set, t, (uint32_t)i, (uint32_t)e, &seen) == SIZE_MAX) return -1;
      if (seen) dupc += ncp;
    }
    if (e >= n) break;
    newlines++;
    i = e + 1;
  }
  if (nl == 0) {
    if (ON(q, LM_Q_FW_EMPTY)) *reason = LM_Q_FW_EMPTY;
    return 0;
  }
  double r = (double)punct / (double)nl;
  if (ON(q, LM_Q_FW_LINE_PUNCT_RATIO) && r < p->fw_line_punct_thr && !(r == 0 && p->fw_line_punct_exclude_zero)) {
    *reason = LM_Q_FW_LINE_PUNCT_RATIO;
    return 0;
  }
  if (ON(q, LM_Q_FW_SHORT_LINE_RATIO) && (double)shortl / (double)nl > p->fw_short_line_thr) {
    *reason = LM_Q_FW_SHORT_LINE_RATIO;
    return 0;
  }
  if (ON(q, LM_Q_FW_CHAR_DUP_RATIO) &&
      (double)dupc / (double)(cp_count(t, n) - newlines) > p->fw_char_dup_ratio) {
    *reason = LM_Q_FW_CHAR_DUP_RATIO;
    return 0;
  }
  if (ON(q, LM_Q_FW_LIST_RATIO)) {
    if (!*words_ok) {
      if (lmq_words(q, s, t, n)) return -1;
      *words_ok = 1;
    }
    if (s->nw == 0 || (double)newlines / (double)s->nw > p->fw_new_line_ratio) {
      *reason = LM_Q_FW_LIST_RATIO;
      return 0;
    }
  }
  return 0;
}

#define SET_ON(q, lo, hi) (((q)->p.enabled & ((((uint64_t)2 << (hi)) - 1) & ~(((uint64_t)1 << (lo)) - 1))) != 0)

lm_status lm_quality_check(const lm_quality *q, lm_quality_scratch *s, const uint8_t *text, size_t len,
                           lm_quality_doc_result *res, lm_quality_counters *c) {
  if (!q || !s || !res || (len && !text)) return LM_EINVAL;
  /* the configured limit comes first: a document above it is refused with
   * LM_REASON_TOO_LARGE whatever its size (the 32-bit check below would
   * otherwise fail the whole batch for a document the caller asked to drop) */
  int over_limit = q->p.max_doc_bytes && len > q->p.max_doc_bytes;
  if (!over_limit && len > 0xFFFFFFF0u) return LM_ETOOBIG; /* token offsets are 32-bit */
  res->reason = LM_REASON_KEPT;
  res->modified = 0;
  res->text = text;
  res->len = len;
  if (c) c->docs_in++, c->bytes_in += len;
  if (over_limit) {
    res->reason = LM_REASON_TOO_LARGE;
    if (c) c->too_large++, c->docs_dropped++;
    return LM_OK;
  }
  int reason = -1, words_ok = 0;
  const uint8_t *t = text;
  size_t n = len;
  if (SET_ON(q, LM_Q_GR_EMPTY, LM_Q_GR_DUP_10_GRAMS) && gopher_repetition(q, s, t, n, &words_ok, &reason))
    return LM_ENOMEM;
  if (reason < 0 && SET_ON(q, LM_Q_GQ_MIN_DOC_WORDS, LM_Q_GQ_STOP_WORDS) && gopher_quality(q, s, t, n, &words_ok, &reason))
    return LM_ENOMEM;
  if (reason < 0 && SET_ON(q, LM_Q_C4_TOO_LONG_WORD, LM_Q_C4_TOO_FEW_SENTENCES)) {
    size_t nlen = 0;
    if (c4(q, s, t, n, &reason, &nlen, c)) return LM_ENOMEM;
    if (reason < 0 && q->p.c4_modify_text && (nlen != n || memcmp(s->text, t, n) != 0)) {
      t = s->text;
      n = nlen;
      res->modified = 1;
      res->text = t;
      res->len = n;
      words_ok = 0;
    }
  }
  if (reason < 0 && SET_ON(q, LM_Q_FW_EMPTY, LM_Q_FW_LIST_RATIO) && fineweb(q, s, t, n, &words_ok, &reason))
    return LM_ENOMEM;
  if (reason >= 0) {
    res->reason = LM_REASON_QUALITY_BASE + reason;
    res->modified = 0;
    res->text = NULL;
    res->len = 0;
    if (c) c->rule[reason]++, c->docs_dropped++;
  } else if (c) {
    c->docs_kept++;
    c->bytes_out += res->len;
    c->docs_modified += (uint64_t)res->modified;
  }
  return LM_OK;
}
