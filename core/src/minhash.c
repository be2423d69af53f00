/* minhash.c — MinHash signatures identical to datatrove 0.10.1's
 * MinhashDedupSignature (see luminamoon/minhash.h for the exact semantics).
 *
 * simplify_text runs as one streaming pass over the input (no per-stage
 * copies): a lowercasing reader (with CPython's Final_Sigma rule) feeds the
 * number matcher (one code point of lookahead), whose output is translated
 * (punctuation -> space), whitespace-collapsed, NFD-decomposed (tables +
 * algorithmic Hangul), canonically reordered and stripped of Mn characters,
 * then UTF-8 encoded into the scratch buffer.  Only the non-Mn characters of a
 * run of non-zero combining classes need reordering: a stable sort restricted
 * to a subsequence is the stable sort of that subsequence.
 */
#include "luminamoon/minhash.h"

#include "luminamoon/bytebuf.h"
#include "minhash_internal.h"
#include "hash_internal.h"
#include "quality_internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

struct lm_minhash {
  lm_minhash_params p;
  size_t num_hashes;
  uint64_t *a, *b;
  lmq_special_index ix;
};

struct lm_minhash_scratch {
  uint8_t *text; /* simplified text */
  size_t cap_text, len_text;
  uint32_t *run;  /* pending non-Mn code points of non-zero combining class */
  uint8_t *runc;  /* their classes */
  size_t nrun, cap_run, cap_runc;
  uint32_t *sorted;
  size_t cap_sorted;
  lmq_tokbuf tb;
  uint32_t *w; /* indexes of the word tokens */
  size_t cap_w;
  uint8_t *join; /* one n-gram joined by ' ' */
  size_t cap_join;
  uint64_t *h; /* shingle hashes */
  size_t cap_h;
  int oom;
};

/* ------------------------------------------------------------------ params */

lm_status lm_minhash_params_default(lm_minhash_params *p) {
  if (!p) return LM_EINVAL;
  p->n_grams = 5;
  p->num_buckets = 14;
  p->hashes_per_bucket = 8;
  p->precision = 64;
  p->seed = 1;
  return LM_OK;
}

/* ---------------------------------------------- MT19937 + numpy's randint */

typedef struct {
  uint32_t mt[624];
  int pos;
} mt19937;

static void mt_seed(mt19937 *g, uint32_t seed) {
  g->mt[0] = seed;
  for (int i = 1; i < 624; i++)
    g->mt[i] = (uint32_t)(UINT32_C(1812433253) * (g->mt[i - 1] ^ (g->mt[i - 1] >> 30)) + (uint32_t)i);
  g->pos = 624;
}

static uint32_t mt_next32(mt19937 *g) {
  if (g->pos >= 624) {
    for (int i = 0; i < 624; i++) {
      uint32_t y = (g->mt[i] & UINT32_C(0x80000000)) | (g->mt[(i + 1) % 624] & UINT32_C(0x7fffffff));
      uint32_t v = g->mt[(i + 397) % 624] ^ (y >> 1);
      if (y & 1) v ^= UINT32_C(0x9908b0df);
      g->mt[i] = v;
    }
    g->pos = 0;
  }
  uint32_t y = g->mt[g->pos++];
  y ^= y >> 11;
  y ^= (y << 7) & UINT32_C(0x9d2c5680);
  y ^= (y << 15) & UINT32_C(0xefc60000);
  y ^= y >> 18;
  return y;
}

/* numpy's legacy next_uint64 for MT19937: high word first. */
static uint64_t mt_next64(mt19937 *g) {
  uint64_t hi = mt_next32(g);
  return (hi << 32) | mt_next32(g);
}

static uint64_t gen_mask(uint64_t max) {
  uint64_t mask = max;
  mask |= mask >> 1;
  mask |= mask >> 2;
  mask |= mask >> 4;
  mask |= mask >> 8;
  mask |= mask >> 16;
  mask |= mask >> 32;
  return mask;
}

/* random_bounded_uint64_fill(state, off, rng, cnt, use_masked=true, out) */
static void bounded_fill(mt19937 *g, uint64_t off, uint64_t rng, size_t n, uint64_t *out) {
  if (rng == 0) {
    for (size_t i = 0; i < n; i++) out[i] = off;
  } else if (rng <= UINT32_C(0xFFFFFFFF)) {
    if (rng == UINT32_C(0xFFFFFFFF)) {
      for (size_t i = 0; i < n; i++) out[i] = off + mt_next32(g);
    } else {
      uint32_t mask = (uint32_t)gen_mask(rng), v;
      for (size_t i = 0; i < n; i++) {
        while ((v = (mt_next32(g) & mask)) > rng) {
        }
        out[i] = off + v;
      }
    }
  } else if (rng == UINT64_MAX) {
    for (size_t i = 0; i < n; i++) out[i] = off + mt_next64(g);
  } else {
    uint64_t mask = gen_mask(rng), v;
    for (size_t i = 0; i < n; i++) {
      while ((v = (mt_next64(g) & mask)) > rng) {
      }
      out[i] = off + v;
    }
  }
}

lm_status lm_mt19937_outputs(uint32_t seed, size_t n, uint32_t *out) {
  if (!out && n) return LM_EINVAL;
  mt19937 g;
  mt_seed(&g, seed);
  for (size_t i = 0; i < n; i++) out[i] = mt_next32(&g);
  return LM_OK;
}

lm_status lm_randint_uint64_legacy(uint32_t seed, uint64_t low, uint64_t high, size_t n, uint64_t *out) {
  if ((!out && n) || low >= high) return LM_EINVAL;
  mt19937 g;
  mt_seed(&g, seed);
  bounded_fill(&g, low, high - 1 - low, n, out);
  return LM_OK;
}

lm_status lm_minhash_draw_params(uint64_t seed, size_t n, uint64_t *a, uint64_t *b) {
  if (((!a || !b) && n) || seed > UINT32_MAX) return LM_EINVAL;
  mt19937 g;
  mt_seed(&g, (uint32_t)seed);
  bounded_fill(&g, 1, LM_MINHASH_PRIME - 1 - 1, n, a);
  bounded_fill(&g, 0, LM_MINHASH_PRIME - 1 - 0, n, b);
  return LM_OK;
}

/* ------------------------------------------------------------ the object */

lm_status lm_minhash_create(const lm_minhash_params *p, lm_minhash **out) {
  if (!out) return LM_EINVAL;
  *out = NULL;
  if (!p || p->n_grams < 1 || p->num_buckets < 1 || p->hashes_per_bucket < 1 ||
      (p->precision != 32 && p->precision != 64) || p->seed > UINT32_MAX)
    return LM_EINVAL;
  uint64_t nh = (uint64_t)p->num_buckets * p->hashes_per_bucket;
  if (nh > 65536 || p->n_grams > 65536) return LM_EINVAL;
  lm_minhash *m = (lm_minhash *)calloc(1, sizeof *m);
  if (!m) return LM_ENOMEM;
  m->p = *p;
  m->num_hashes = (size_t)nh;
  m->a = (uint64_t *)malloc(sizeof(uint64_t) * m->num_hashes);
  m->b = (uint64_t *)malloc(sizeof(uint64_t) * m->num_hashes);
  if (!m->a || !m->b || lmq_special_index_build(&m->ix) != 0) {
    lm_minhash_destroy(m);
    return LM_ENOMEM;
  }
  lm_status st = lm_minhash_draw_params(p->seed, m->num_hashes, m->a, m->b);
  if (st != LM_OK) {
    lm_minhash_destroy(m);
    return st;
  }
  *out = m;
  return LM_OK;
}

void lm_minhash_destroy(lm_minhash *m) {
  if (!m) return;
  free(m->a);
  free(m->b);
  lmq_special_index_free(&m->ix);
  free(m);
}

size_t lm_minhash_num_hashes(const lm_minhash *m) { return m ? m->num_hashes : 0; }

lm_status lm_minhash_get_params(const lm_minhash *m, lm_minhash_params *p) {
  if (!m || !p) return LM_EINVAL;
  *p = m->p;
  return LM_OK;
}

const uint64_t *lm_minhash_a(const lm_minhash *m) { return m ? m->a : NULL; }
const uint64_t *lm_minhash_b(const lm_minhash *m) { return m ? m->b : NULL; }

lm_status lm_minhash_scratch_create(lm_minhash_scratch **out) {
  if (!out) return LM_EINVAL;
  *out = (lm_minhash_scratch *)calloc(1, sizeof **out);
  return *out ? LM_OK : LM_ENOMEM;
}

void lm_minhash_scratch_destroy(lm_minhash_scratch *s) {
  if (!s) return;
  free(s->text);
  free(s->run);
  free(s->runc);
  free(s->sorted);
  lmq_tokbuf_free(&s->tb);
  free(s->w);
  free(s->join);
  free(s->h);
  free(s);
}

/* ------------------------------------------------------- simplify_text */

/* Append code point cp (UTF-8) to s->text. */
static inline void put_cp(lm_minhash_scratch *s, uint32_t cp) {
  if (s->len_text + 4 > s->cap_text) {
    if (lm_grow_array((void **)&s->text, &s->cap_text, s->len_text + 4, 1, 256) != LM_OK) {
      s->oom = 1;
      return;
    }
  }
  uint8_t *o = s->text + s->len_text;
  if (cp < 0x80) {
    o[0] = (uint8_t)cp;
    s->len_text += 1;
  } else if (cp < 0x800) {
    o[0] = (uint8_t)(0xC0 | (cp >> 6));
    o[1] = (uint8_t)(0x80 | (cp & 0x3F));
    s->len_text += 2;
  } else if (cp < 0x10000) {
    o[0] = (uint8_t)(0xE0 | (cp >> 12));
    o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (uint8_t)(0x80 | (cp & 0x3F));
    s->len_text += 3;
  } else {
    o[0] = (uint8_t)(0xF0 | (cp >> 18));
    o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    s->len_text += 4;
  }
}

/* Emit the pending run of non-Mn marks, stably sorted by combining class. */
static void flush_run(lm_minhash_scratch *s) {
  size_t n = s->nrun;
  if (n == 0) return;
  if (n == 1) {
    put_cp(s, s->run[0]);
  } else {
    /* stable counting sort by class (bounded time whatever the run length) */
    if (lm_grow_array((void **)&s->sorted, &s->cap_sorted, n, sizeof(uint32_t), 16) != LM_OK) {
      s->oom = 1;
      s->nrun = 0;
      return;
    }
    size_t count[257];
    memset(count, 0, sizeof count);
    for (size_t i = 0; i < n; i++) count[(size_t)s->runc[i] + 1]++;
    for (size_t c = 1; c < 257; c++) count[c] += count[c - 1];
    for (size_t i = 0; i < n; i++) s->sorted[count[s->runc[i]]++] = s->run[i];
    for (size_t i = 0; i < n; i++) put_cp(s, s->sorted[i]);
  }
  s->nrun = 0;
}

/* One fully decomposed code point into the NFD/Mn stage. */
static inline void nfd_one(lm_minhash_scratch *s, uint32_t d) {
  if (d < 0x80) {
    if (s->nrun) flush_run(s);
    put_cp(s, d);
    return;
  }
  const lmh_rec *r = lmh_lookup(d);
  if (r->ccc == 0) {
    if (s->nrun) flush_run(s);
    if (!(r->flags & LMH_F_MN)) put_cp(s, d);
  } else if (!(r->flags & LMH_F_MN)) {
    if (s->nrun + 1 > s->cap_run) {
      if (lm_grow_array((void **)&s->run, &s->cap_run, s->nrun + 1, sizeof(uint32_t), 16) != LM_OK ||
          lm_grow_array((void **)&s->runc, &s->cap_runc, s->cap_run, 1, 16) != LM_OK) {
        s->oom = 1;
        return;
      }
    }
    s->run[s->nrun] = d;
    s->runc[s->nrun] = r->ccc;
    s->nrun++;
  }
}

/* NFD of one code point (after lowercasing, numbers, punctuation, whitespace). */
static inline void nfd_cp(lm_minhash_scratch *s, uint32_t c) {
  if (c < 0x80) {
    nfd_one(s, c);
    return;
  }
  if (c >= 0xAC00 && c <= 0xD7A3) { /* Hangul syllable */
    uint32_t si = c - 0xAC00;
    nfd_one(s, 0x1100 + si / 588);
    nfd_one(s, 0x1161 + (si % 588) / 28);
    if (si % 28) nfd_one(s, 0x11A7 + si % 28);
    return;
  }
  const lmh_rec *r = lmh_lookup(c);
  if (r->dec_len == 0) {
    nfd_one(s, c);
  } else {
    for (uint32_t k = 0; k < r->dec_len; k++) nfd_one(s, lmh_dec_pool[r->dec_off + k]);
  }
}

typedef struct {
  const uint8_t *t;
  size_t n, i;
  uint32_t pend[3];
  int npend, ipend;
  int prev_cased; /* the last non-case-ignorable original code point was cased */
} lower_reader;

static inline uint32_t dec_cp(const uint8_t *t, size_t n, size_t i, size_t *len) {
  uint32_t cp;
  *len = lmq_decode(t, n, i, &cp);
  return cp;
}

/* CPython's Final_Sigma test for the U+03A3 that ends at byte i. */
static int final_sigma_after(const lower_reader *L, size_t i) {
  if (!L->prev_cased) return 0;
  size_t j = i;
  while (j < L->n) {
    size_t l;
    uint32_t c = dec_cp(L->t, L->n, j, &l);
    uint8_t f = lmh_lookup(c)->flags;
    if (!(f & LMH_F_IGN)) return !(f & LMH_F_CASED);
    j += l;
  }
  return 1;
}

/* Next code point of text.lower(); 0 at the end (*ok = 0). */
static inline uint32_t lower_next(lower_reader *L, int *ok) {
  if (L->ipend < L->npend) {
    *ok = 1;
    return L->pend[L->ipend++];
  }
  if (L->i >= L->n) {
    *ok = 0;
    return 0;
  }
  *ok = 1;
  uint8_t b = L->t[L->i];
  if (b < 0x80) {
    L->i++;
    /* ASCII: letters are cased; ' . : ^ ` are case-ignorable */
    if ((b >= 'A' && b <= 'Z')) {
      L->prev_cased = 1;
      return (uint32_t)b + 32;
    }
    if (b >= 'a' && b <= 'z') {
      L->prev_cased = 1;
      return b;
    }
    if (!(lmh_recs[lmh_stage2[b]].flags & LMH_F_IGN)) L->prev_cased = 0;
    return b;
  }
  size_t l;
  uint32_t c = dec_cp(L->t, L->n, L->i, &l);
  L->i += l;
  const lmh_rec *r = lmh_lookup(c);
  uint32_t out;
  if (c == 0x3A3) {
    out = final_sigma_after(L, L->i) ? 0x3C2 : 0x3C3;
  } else if (r->lower_multi) {
    const uint32_t *m = lmh_lower_multi[r->lower];
    int k = lmh_lower_multi_len[r->lower];
    out = m[0];
    L->npend = 0;
    L->ipend = 0;
    for (int q = 1; q < k; q++) L->pend[L->npend++] = m[q];
  } else {
    out = (uint32_t)((int32_t)c + r->lower);
  }
  if (!(r->flags & LMH_F_IGN)) L->prev_cased = (r->flags & LMH_F_CASED) != 0;
  return out;
}

static inline uint8_t cp_flags(uint32_t c) {
  return c < 0x80 ? lmh_recs[lmh_stage2[c]].flags : lmh_lookup(c)->flags;
}

/* Output of the number matcher: punctuation -> space, whitespace collapsed. */
typedef struct {
  int pending_space;
} ws_state;

static inline void emit(lm_minhash_scratch *s, ws_state *w, uint32_t c) {
  if (c < 0x80) {
    /* ASCII fast path: letters and digits are neither space nor punctuation */
    if ((c | 0x20) - 'a' < 26u || c - '0' < 10u) {
      if (w->pending_space) {
        nfd_one(s, ' ');
        w->pending_space = 0;
      }
      nfd_one(s, c);
      return;
    }
  }
  uint8_t f = cp_flags(c);
  if (f & (LMH_F_PUNCT | LMH_F_SPACE)) {
    w->pending_space = 1;
    return;
  }
  if (w->pending_space) {
    nfd_one(s, ' ');
    w->pending_space = 0;
  }
  nfd_cp(s, c);
}

/* The ASCII fast path of simplify: every ASCII character is a letter, a digit, or whitespace /
 * datatrove punctuation (checked by the tests against datatrove's table), so a run of ASCII
 * bytes needs no table lookup beyond casedness.  Called with c = an ASCII code point the reader
 * has consumed (no pending lowercase expansion).  Returns 0 when it did nothing (c is left for
 * the general path), else 1 with c / ok set to the next unprocessed code point.  A number whose
 * digits or decimal separator touch a non-ASCII byte is left to the general path (non-ASCII
 * digits are \p{Nd} too). */
static int ascii_run(lm_minhash_scratch *s, lower_reader *L, ws_state *w, uint32_t *c, int *ok) {
  if (s->nrun) flush_run(s);
  if (s->oom) return 0;
  if (s->len_text + (L->n - L->i) + 2 > s->cap_text &&
      lm_grow_array((void **)&s->text, &s->cap_text, s->len_text + (L->n - L->i) + 2, 1, 256) != LM_OK) {
    s->oom = 1;
    return 0;
  }
  const uint8_t *t = L->t;
  const size_t n = L->n;
  size_t i = L->i;
  uint8_t *o0 = s->text + s->len_text, *o = o0;
  int pend = w->pending_space, handled = 0, pc = L->prev_cased;
  uint32_t ch = *c;
  for (;;) {
    if (ch - 'a' < 26u) {
      if (pend) {
        *o++ = ' ';
        pend = 0;
      }
      *o++ = (uint8_t)ch;
    } else if (ch - '0' < 10u) {
      size_t k = i;
      while (k < n && (uint32_t)t[k] - '0' < 10u) k++;
      if (k < n && t[k] >= 0x80) break;
      if (k + 1 < n && (t[k] == '.' || t[k] == ',')) {
        if (t[k + 1] >= 0x80) break;
        if ((uint32_t)t[k + 1] - '0' < 10u) {
          k += 2;
          while (k < n && (uint32_t)t[k] - '0' < 10u) k++;
          if (k < n && t[k] >= 0x80) break;
        }
      }
      if (k > i) pc = 0; /* the last consumed character is a digit or a separator (neither cased) */
      if (pend) {
        *o++ = ' ';
        pend = 0;
      }
      *o++ = '0';
      i = k;
    } else {
      pend = 1; /* whitespace or punctuation */
    }
    handled = 1;
    if (i >= n) {
      *ok = 0;
      break;
    }
    const uint8_t b = t[i];
    if (b >= 0x80) {
      L->i = i;
      L->prev_cased = pc;
      s->len_text += (size_t)(o - o0);
      w->pending_space = pend;
      *c = lower_next(L, ok);
      return 1;
    }
    i++;
    if ((uint32_t)b - 'A' < 26u) {
      ch = (uint32_t)b + 32;
      pc = 1;
    } else {
      ch = b;
      if ((uint32_t)b - 'a' < 26u) pc = 1;
      else if (!(lmh_recs[lmh_stage2[b]].flags & LMH_F_IGN)) pc = 0;
    }
  }
  /* the end of the text, or a number left to the general path (ch consumed, not processed) */
  L->i = i;
  L->prev_cased = pc;
  s->len_text += (size_t)(o - o0);
  w->pending_space = pend;
  if (*ok == 0) return 1;
  *c = ch;
  return handled;
}

static lm_status simplify(lm_minhash_scratch *s, const uint8_t *text, size_t len) {
  s->len_text = 0;
  s->nrun = 0;
  s->oom = 0;
  if (lm_grow_array((void **)&s->text, &s->cap_text, len + 16, 1, 256) != LM_OK) return LM_ENOMEM;
  lower_reader L = {text, len, 0, {0, 0, 0}, 0, 0, 0};
  ws_state w = {0};
  int ok;
  uint32_t c = lower_next(&L, &ok);
  while (ok && !s->oom) {
    if (c < 0x80 && L.ipend >= L.npend && ascii_run(s, &L, &w, &c, &ok)) continue;
    if (c < 0x80 ? (c - '0' < 10u) : (cp_flags(c) & LMH_F_ND) != 0) {
      /* \p{Nd}+([.,،٫⎖⎗⎘]\p{Nd}+)? -> "0" */
      do {
        c = lower_next(&L, &ok);
      } while (ok && (c < 0x80 ? (c - '0' < 10u) : (cp_flags(c) & LMH_F_ND) != 0));
      if (ok && (cp_flags(c) & LMH_F_SEP)) {
        uint32_t sep = c;
        c = lower_next(&L, &ok);
        if (ok && (c < 0x80 ? (c - '0' < 10u) : (cp_flags(c) & LMH_F_ND) != 0)) {
          do {
            c = lower_next(&L, &ok);
          } while (ok && (c < 0x80 ? (c - '0' < 10u) : (cp_flags(c) & LMH_F_ND) != 0));
          emit(s, &w, '0');
        } else {
          emit(s, &w, '0');
          emit(s, &w, sep);
        }
      } else {
        emit(s, &w, '0');
      }
      continue; /* c (when ok) is not consumed yet */
    }
    emit(s, &w, c);
    c = lower_next(&L, &ok);
  }
  if (!s->oom) flush_run(s);
  if (s->oom) return LM_ENOMEM;
  return LM_OK;
}

lm_status lm_minhash_simplify(lm_minhash_scratch *s, const uint8_t *text, size_t len, const uint8_t **out,
                              size_t *out_len) {
  if (!s || !out || !out_len || (!text && len)) return LM_EINVAL;
  if ((uint64_t)len > LM_MINHASH_MAX_DOC_BYTES) return LM_ETOOBIG;
  lm_status st = simplify(s, text, len);
  if (st != LM_OK) return st;
  size_t a = 0, b = s->len_text;
  while (a < b && s->text[a] == ' ') a++;
  while (b > a && s->text[b - 1] == ' ') b--;
  *out = s->text + a;
  *out_len = b - a;
  return LM_OK;
}

/* ------------------------------------------------------------- shingles */

lm_status lm_minhash_shingles(const lm_minhash *m, lm_minhash_scratch *s, const uint8_t *text, size_t len,
                              const uint64_t **hashes, size_t *n) {
  if (!m || !s || !hashes || !n || (!text && len)) return LM_EINVAL;
  *hashes = s->h;
  *n = 0;
  const uint8_t *t;
  size_t tl;
  lm_status st = lm_minhash_simplify(s, text, len, &t, &tl);
  if (st != LM_OK) return st;
  if (tl > UINT32_MAX - 16) return LM_ETOOBIG;
  if (tl == 0) return LM_OK;
  if (lmq_tokenize(&m->ix, t, tl, 0, &s->tb, 1) != 0) return LM_ENOMEM;
  size_t nt = s->tb.ntok;
  if (lm_grow_array((void **)&s->w, &s->cap_w, nt + 1, sizeof(uint32_t), 64) != LM_OK) return LM_ENOMEM;
  size_t nw = 0;
  for (size_t i = 0; i < nt; i++)
    if (!(s->tb.attr[i] & LMQ_T_WS) && s->tb.tok[i].len > 0) s->w[nw++] = (uint32_t)i;
  size_t ng = m->p.n_grams;
  if (nw < ng) return LM_OK;
  size_t ns = nw - ng + 1;
  if (lm_grow_array((void **)&s->h, &s->cap_h, ns, sizeof(uint64_t), 64) != LM_OK) return LM_ENOMEM;
  const lmq_tok *tok = s->tb.tok;
  const int p32 = m->p.precision == 32;
  for (size_t i = 0; i < ns; i++) {
    /* contiguous when the words of the window are separated by exactly one ' ' */
    int contiguous = 1;
    for (size_t k = i; k + 1 < i + ng; k++) {
      const lmq_tok *x = &tok[s->w[k]], *y = &tok[s->w[k + 1]];
      if ((size_t)y->off != (size_t)x->off + x->len + 1 || t[x->off + x->len] != ' ') {
        contiguous = 0;
        break;
      }
    }
    const uint8_t *p;
    size_t pl;
    if (contiguous) {
      const lmq_tok *f = &tok[s->w[i]], *l = &tok[s->w[i + ng - 1]];
      p = t + f->off;
      pl = (size_t)l->off + l->len - f->off;
    } else {
      size_t need = 0;
      for (size_t k = i; k < i + ng; k++) need += (size_t)tok[s->w[k]].len + 1;
      if (lm_grow_array((void **)&s->join, &s->cap_join, need, 1, 256) != LM_OK) return LM_ENOMEM;
      size_t o = 0;
      for (size_t k = i; k < i + ng; k++) {
        const lmq_tok *x = &tok[s->w[k]];
        if (k > i) s->join[o++] = ' ';
        memcpy(s->join + o, t + x->off, x->len);
        o += x->len;
      }
      p = s->join;
      pl = o;
    }
    s->h[i] = p32 ? (uint64_t)XXH32(p, pl, 0) : (uint64_t)XXH64(p, pl, 0);
  }
  *hashes = s->h;
  *n = ns;
  return LM_OK;
}

/* ---------------------------------------------------------- signatures */

/* x mod (2^61-1) for the minimum: r = (x & P) + (x >> 61) is in [0, P + 7) and congruent to x;
 * min(r, r - P) (unsigned: r - P wraps to a huge value when r < P) is the reduced value. */
static void from_hashes_scalar(const uint64_t *a, const uint64_t *b, size_t num_hashes, uint64_t mask,
                               const uint64_t *h, size_t n, uint64_t *sig) {
  const uint64_t P = LM_MINHASH_PRIME;
  size_t j0 = 0;
  /* blocks of 8 hash functions kept in registers across all shingles */
  for (; j0 + 8 <= num_hashes; j0 += 8) {
    uint64_t mn[8];
    for (int k = 0; k < 8; k++) mn[k] = UINT64_MAX;
    const uint64_t *aa = a + j0, *bb = b + j0;
    for (size_t i = 0; i < n; i++) {
      const uint64_t x = h[i];
      for (int k = 0; k < 8; k++) {
        uint64_t v = x * aa[k] + bb[k];
        uint64_t r = (v & P) + (v >> 61), r2 = r - P;
        r = (r2 < r ? r2 : r) & mask;
        mn[k] = r < mn[k] ? r : mn[k];
      }
    }
    for (int k = 0; k < 8; k++) sig[j0 + k] = mn[k];
  }
  for (size_t j = j0; j < num_hashes; j++) {
    uint64_t mn = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
      uint64_t v = lm_mod_mersenne61(h[i] * a[j] + b[j]) & mask;
      mn = v < mn ? v : mn;
    }
    sig[j] = mn;
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(LM_NO_AVX512)
#include <immintrin.h>
#define LMH_HAVE_AVX512 1
/* 8 hash functions per zmm register (AVX-512DQ vpmullq: the low 64 bits of the product, numpy's
 * wrap-around), 4 registers (32 functions) per pass over the shingles. */
__attribute__((target("avx512f,avx512dq"))) static void from_hashes_avx512(const uint64_t *a, const uint64_t *b,
                                                                           size_t num_hashes, uint64_t mask,
                                                                           const uint64_t *h, size_t n,
                                                                           uint64_t *sig) {
  const __m512i P = _mm512_set1_epi64((long long)LM_MINHASH_PRIME);
  const __m512i M = _mm512_set1_epi64((long long)mask);
  size_t j0 = 0;
#define LMH_STEP(A, B, MN)                                                              \
  do {                                                                                  \
    __m512i v = _mm512_add_epi64(_mm512_mullo_epi64(x, A), B);                          \
    __m512i r = _mm512_add_epi64(_mm512_and_si512(v, P), _mm512_srli_epi64(v, 61));     \
    r = _mm512_and_si512(_mm512_min_epu64(r, _mm512_sub_epi64(r, P)), M);              \
    MN = _mm512_min_epu64(MN, r);                                                       \
  } while (0)
  for (; j0 + 32 <= num_hashes; j0 += 32) {
    const __m512i a0 = _mm512_loadu_si512(a + j0), a1 = _mm512_loadu_si512(a + j0 + 8);
    const __m512i a2 = _mm512_loadu_si512(a + j0 + 16), a3 = _mm512_loadu_si512(a + j0 + 24);
    const __m512i b0 = _mm512_loadu_si512(b + j0), b1 = _mm512_loadu_si512(b + j0 + 8);
    const __m512i b2 = _mm512_loadu_si512(b + j0 + 16), b3 = _mm512_loadu_si512(b + j0 + 24);
    __m512i m0 = _mm512_set1_epi64(-1), m1 = m0, m2 = m0, m3 = m0;
    for (size_t i = 0; i < n; i++) {
      const __m512i x = _mm512_set1_epi64((long long)h[i]);
      LMH_STEP(a0, b0, m0);
      LMH_STEP(a1, b1, m1);
      LMH_STEP(a2, b2, m2);
      LMH_STEP(a3, b3, m3);
    }
    _mm512_storeu_si512(sig + j0, m0);
    _mm512_storeu_si512(sig + j0 + 8, m1);
    _mm512_storeu_si512(sig + j0 + 16, m2);
    _mm512_storeu_si512(sig + j0 + 24, m3);
  }
  for (; j0 + 8 <= num_hashes; j0 += 8) {
    const __m512i a0 = _mm512_loadu_si512(a + j0), b0 = _mm512_loadu_si512(b + j0);
    __m512i m0 = _mm512_set1_epi64(-1);
    for (size_t i = 0; i < n; i++) {
      const __m512i x = _mm512_set1_epi64((long long)h[i]);
      LMH_STEP(a0, b0, m0);
    }
    _mm512_storeu_si512(sig + j0, m0);
  }
#undef LMH_STEP
  if (j0 < num_hashes) from_hashes_scalar(a + j0, b + j0, num_hashes - j0, mask, h, n, sig + j0);
}

static int have_avx512(void) {
  /* every thread computes the same value; relaxed atomics keep the race defined (TSan-clean) */
  static _Atomic int cached = -1;
  int c = atomic_load_explicit(&cached, memory_order_relaxed);
  if (c < 0) {
    __builtin_cpu_init();
    /* LM_NO_AVX512 / LM_NO_AVX2 in the environment turn it off, as for hash.c's and
     * ops_avx2.c's kernels (read once) */
    c = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") && !lm_env_switch_on("LM_NO_AVX512") &&
        !lm_env_switch_on("LM_NO_AVX2");
    atomic_store_explicit(&cached, c, memory_order_relaxed);
  }
  return c;
}
#endif

lm_status lmh_from_hashes_impl(const uint64_t *a, const uint64_t *b, size_t num_hashes, uint32_t precision,
                               const uint64_t *h, size_t n, uint64_t *sig, int impl) {
  if ((!a || !b || !sig) && num_hashes) return LM_EINVAL;
  if (!h && n) return LM_EINVAL;
  if (precision != 32 && precision != 64) return LM_EINVAL;
  if (n == 0) {
    for (size_t j = 0; j < num_hashes; j++) sig[j] = LM_MINHASH_EMPTY;
    return LM_OK;
  }
  const uint64_t mask = precision == 32 ? UINT64_C(0xFFFFFFFF) : UINT64_MAX;
#ifdef LMH_HAVE_AVX512
  if (impl != 0 && have_avx512()) {
    from_hashes_avx512(a, b, num_hashes, mask, h, n, sig);
    return LM_OK;
  }
#endif
  (void)impl;
  from_hashes_scalar(a, b, num_hashes, mask, h, n, sig);
  return LM_OK;
}

int lmh_have_simd(void) {
#ifdef LMH_HAVE_AVX512
  return have_avx512();
#else
  return 0;
#endif
}

lm_status lm_minhash_from_hashes(const uint64_t *a, const uint64_t *b, size_t num_hashes, uint32_t precision,
                                 const uint64_t *h, size_t n, uint64_t *sig) {
  return lmh_from_hashes_impl(a, b, num_hashes, precision, h, n, sig, 1);
}

lm_status lm_minhash_doc(const lm_minhash *m, lm_minhash_scratch *s, const uint8_t *text, size_t len,
                         uint64_t *sig, size_t *n_shingles) {
  if (n_shingles) *n_shingles = 0;
  if (!m || !s || !sig || (!text && len)) return LM_EINVAL;
  const uint64_t *h;
  size_t n;
  lm_status st = lm_minhash_shingles(m, s, text, len, &h, &n);
  if (st != LM_OK) return st;
  if (n_shingles) *n_shingles = n;
  return lm_minhash_from_hashes(m->a, m->b, m->num_hashes, m->p.precision, h, n, sig);
}

typedef struct {
  const lm_minhash *m;
  const lm_docs *docs;
  uint64_t *out;
  uint8_t *has_sig;
} sig_ctx;

static lm_status sig_range(void *vctx, size_t begin, size_t end) {
  sig_ctx *c = (sig_ctx *)vctx;
  lm_minhash_scratch *s;
  lm_status st = lm_minhash_scratch_create(&s);
  if (st != LM_OK) return st;
  const size_t H = c->m->num_hashes;
  for (size_t i = begin; i < end && st == LM_OK; i++) {
    int64_t o0 = c->docs->offsets[i], o1 = c->docs->offsets[i + 1];
    size_t ns = 0;
    st = lm_minhash_doc(c->m, s, c->docs->data + o0, (size_t)(o1 - o0), c->out + i * H, &ns);
    if (c->has_sig) c->has_sig[i] = ns > 0;
  }
  lm_minhash_scratch_destroy(s);
  return st;
}

lm_status lm_minhash_signatures(const lm_minhash *m, const lm_docs *docs, uint64_t *out, uint8_t *has_sig,
                                const lm_exec *exec) {
  if (!m || !docs || (!out && docs->n)) return LM_EINVAL;
  lm_status st = lm_docs_validate(docs);
  if (st != LM_OK) return st;
  if (docs->n == 0) return LM_OK;
  if (docs->n > SIZE_MAX / sizeof(uint64_t) / m->num_hashes) return LM_EOVERFLOW;
  sig_ctx c = {m, docs, out, has_sig};
  lm_exec ex = exec ? *exec : (lm_exec){1, 0};
  if (ex.min_items_per_thread == 0) ex.min_items_per_thread = 64;
  return lm_parallel_for(&ex, docs->n, sig_range, &c);
}
