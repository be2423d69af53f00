/* quality_words.c — datatrove's English "words": spaCy's rule-based tokenizer in C.
 *
 * datatrove's split_into_words(text, "en") runs spacy.blank("en") and keeps
 * the non-whitespace tokens.  This file reproduces that tokenizer:
 *  - the text is split at whitespace (Python str.isspace); inside the text the
 *    first ' ' of a whitespace run belongs to the previous token, the rest of
 *    the run is a whitespace token (the whole run at the start of the text);
 *  - each non-whitespace span is looked up in the special cases (tokenizer
 *    exceptions: "don't" -> "do" "n't", "U.S.", ...), then prefixes and
 *    suffixes are split off one at a time (spaCy's _split_affixes loop, with its
 *    special-case checks after each step), then the remaining core is a special
 *    case, a URL (spaCy's URL_MATCH), or is split at infixes.
 * The regular expressions of spaCy's English defaults are hand-compiled below;
 * the character classes come from quality_tables.c (generated from spaCy).
 * Not reproduced: spaCy's second special-case pass (_apply_special_cases,
 * which re-merges special cases containing affix characters that were split,
 * e.g. emoticons inside brackets) — rare in text.
 */
#include "luminamoon/bytebuf.h"
#include "quality_internal.h"

#include <stdlib.h>
#include <string.h>

static uint64_t sp_hash(const uint8_t *s, size_t n) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
  return h ^ (h >> 29);
}

int lmq_special_index_build(lmq_special_index *ix) {
  memset(ix, 0, sizeof *ix);
  size_t cap = 1;
  while (cap < lmq_n_specials * 4) cap <<= 1;
  ix->slot = (uint32_t *)calloc(cap, sizeof(uint32_t));
  if (!ix->slot) return -1;
  ix->mask = cap - 1;
  for (size_t i = 0; i < lmq_n_specials; i++) {
    size_t h = (size_t)sp_hash((const uint8_t *)lmq_specials[i].key, lmq_specials[i].len) & ix->mask;
    while (ix->slot[h]) h = (h + 1) & ix->mask;
    ix->slot[h] = (uint32_t)i + 1;
    if (lmq_specials[i].len > ix->max_len) ix->max_len = lmq_specials[i].len;
    uint8_t b0 = (uint8_t)lmq_specials[i].key[0];
    ix->first[b0 >> 6] |= (uint64_t)1 << (b0 & 63);
    size_t bl = lmq_special_bloom((const uint8_t *)lmq_specials[i].key, lmq_specials[i].len);
    ix->bloom[bl >> 6] |= (uint64_t)1 << (bl & 63);
  }
  /* unit / currency literals bucketed by last byte (order inside a bucket: the tables') */
  size_t nlit = lmq_n_currency + lmq_n_units, k = 0;
  if (nlit > 256) { free(ix->slot); ix->slot = NULL; return -1; }
  for (int b = 0; b < 256; b++) {
    ix->unit_at[b] = (uint16_t)k;
    for (size_t u = 0; u < nlit; u++) {
      const char *lit = u < lmq_n_currency ? lmq_currency[u] : lmq_units[u - lmq_n_currency];
      size_t l = strlen(lit);
      if (l && (uint8_t)lit[l - 1] == b) {
        ix->unit_lit[k] = lit;
        ix->unit_len[k++] = (uint8_t)l;
      }
    }
  }
  ix->unit_at[256] = (uint16_t)k;
  if (ix->max_len > 64) ix->max_len = 64; /* special_find never looked past 64 bytes */
  return 0;
}

void lmq_special_index_free(lmq_special_index *ix) {
  if (!ix) return;
  free(ix->slot);
  ix->slot = NULL;
}

/* The hash-table probe of special_find (past its filters: rare). */
static __attribute__((noinline)) const lmq_special *special_probe(const lmq_special_index *ix, const uint8_t *s,
                                                                  size_t n) {
  size_t h = (size_t)sp_hash(s, n) & ix->mask;
  for (;;) {
    uint32_t v = ix->slot[h];
    if (!v) return NULL;
    const lmq_special *sp = &lmq_specials[v - 1];
    if (sp->len == n && memcmp(sp->key, s, n) == 0) return sp;
    h = (h + 1) & ix->mask;
  }
}

/* The special case s[0..n) is, or NULL; the filters inline (most candidates
 * stop at the first byte or the bloom bit). */
static inline const lmq_special *special_find(const lmq_special_index *ix, const uint8_t *s, size_t n) {
  if (n == 0 || n > ix->max_len || !((ix->first[s[0] >> 6] >> (s[0] & 63)) & 1)) return NULL;
  size_t bl = lmq_special_bloom(s, n);
  if (!((ix->bloom[bl >> 6] >> (bl & 63)) & 1)) return NULL;
  return special_probe(ix, s, n);
}

void lmq_tokbuf_free(lmq_tokbuf *b) {
  if (!b) return;
  free(b->tok);
  free(b->attr);
  free(b->cp);
  free(b->bo);
  free(b->fl);
  free(b->cut);
  b->tok = NULL;
  b->attr = NULL;
  b->cp = b->bo = b->fl = NULL;
  b->cut = NULL;
  b->ntok = b->cap_tok = b->cap_cp = b->cap_cut = 0;
}

size_t lmq_tokbuf_bytes(const lmq_tokbuf *b) {
  return b->cap_tok * (sizeof(lmq_tok) + 1) + b->cap_cp * 3 * sizeof(uint32_t) + b->cap_cut * sizeof(uint64_t);
}

/* ---- the state of one span being tokenized ----
 * A span is addressed by code-point index.  An ASCII span is read in place
 * (code point k is byte k); a span with other characters is decoded into
 * b->cp / b->bo / b->fl first. */
typedef struct {
  const lmq_special_index *ix;
  const uint8_t *s; /* the span's bytes */
  uint32_t base;    /* offset of s in the document */
  lmq_tokbuf *b;
  const uint32_t *cp, *bo, *fl;
  int ascii;
  /* find_suffix's currency/unit matches for the end sfx_j (the end rarely
   * moves while prefixes are split off): bit k of sfx_mask = a literal of k
   * code points ends at sfx_j with a digit before it */
  size_t sfx_j;
  uint64_t sfx_mask;
  /* special_cps's last question and answer ([sp_i, sp_j) -> sp_res): the
   * affix loop asks about the same range up to four times */
  size_t sp_i, sp_j;
  const lmq_special *sp_res;
} span_ctx;

static inline uint32_t CP(const span_ctx *c, size_t k) { return c->ascii ? (uint32_t)c->s[k] : c->cp[k]; }
static inline uint32_t FL(const span_ctx *c, size_t k) { return c->ascii ? lmq_ascii_flags[c->s[k]] : c->fl[k]; }
static inline uint32_t BO(const span_ctx *c, size_t k) { return c->ascii ? (uint32_t)k : c->bo[k]; }

static __attribute__((noinline)) int push_tok_slow(lmq_tokbuf *b, uint32_t off, uint32_t len, uint32_t attr) {
  if (b->sink) return b->sink(b->sink_ctx, off, len, attr) ? -1 : 0;
  if (b->ntok == b->cap_tok) {
    /* tok and attr grow together: both hold cap_tok elements */
    /* 1.5x, but never past the most tokens the text can still give (one per byte) */
    size_t cap = b->cap_tok ? b->cap_tok + b->cap_tok / 2 : 256;
    if (cap > b->max_tok && b->max_tok > b->ntok) cap = b->max_tok;
    /* the bound is an estimate (a special case can give more tokens than
     * bytes): always make room for this one, also from a capacity of 1 */
    if (cap <= b->ntok) cap = b->ntok + b->ntok / 2 + 1;
    void *q = realloc(b->tok, cap * sizeof(lmq_tok));
    if (!q) return -1;
    b->tok = (lmq_tok *)q;
    q = realloc(b->attr, cap);
    if (!q) return -1;
    b->attr = (uint8_t *)q;
    b->cap_tok = cap;
  }
  b->tok[b->ntok] = (lmq_tok){off, len};
  b->attr[b->ntok++] = (uint8_t)attr;
  return 0;
}

/* Append one token (or pass it to the sink); the common case inline. */
static inline int push_tok_raw(lmq_tokbuf *b, uint32_t off, uint32_t len, uint32_t attr) {
  if (__builtin_expect(b->sink != NULL || b->ntok == b->cap_tok, 0)) return push_tok_slow(b, off, len, attr);
  b->tok[b->ntok] = (lmq_tok){off, len};
  b->attr[b->ntok++] = (uint8_t)attr;
  return 0;
}

/* A token made of code points [i, j) of the span. */
static int push_cps(span_ctx *c, size_t i, size_t j) {
  uint32_t attr = LMQ_T_ALLPUNCT;
  for (size_t k = i; k < j; k++) {
    uint32_t f = FL(c, k);
    if (!(f & LMQ_F_PUNCTSET)) attr |= LMQ_T_NONSYMBOL;
    if (f & LMQ_F_PYALPHA) attr |= LMQ_T_ALPHA;
    if (!(f & LMQ_F_ISPUNCT)) attr &= ~(uint32_t)LMQ_T_ALLPUNCT;
  }
  if (j - i == 1 && (FL(c, i) & LMQ_F_SENT_PUNCT)) attr |= LMQ_T_SENTP;
  return push_tok_raw(c->b, c->base + BO(c, i), BO(c, j) - BO(c, i), attr);
}

static const lmq_special *special_cps(span_ctx *c, size_t i, size_t j) {
  if (j <= i) return NULL;
  if (i == c->sp_i && j == c->sp_j) return c->sp_res;
  c->sp_i = i;
  c->sp_j = j;
  return c->sp_res = special_find(c->ix, c->s + BO(c, i), BO(c, j) - BO(c, i));
}

/* The tokens of a special case covering code points [i, j). */
static int push_special(span_ctx *c, const lmq_special *sp, size_t i, size_t j) {
  size_t k = i;
  for (int t = 0; t < sp->ntok; t++) {
    uint32_t end_byte = BO(c, k) + sp->toklen[t];
    size_t e = k;
    while (e < j && BO(c, e) < end_byte) e++;
    if (push_cps(c, k, e)) return -1;
    k = e;
  }
  return 0;
}

static inline int is_d(uint32_t cp) { return cp >= '0' && cp <= '9'; }

/* Do the nb bytes of `lit` end the span at code point j, starting on a code
 * point p?  Returns its code-point length j - p, or 0. */
static size_t lit_at_end(span_ctx *c, size_t j, const char *lit, size_t nb) {
  uint32_t endb = BO(c, j);
  if (nb > endb) return 0;
  uint32_t startb = endb - (uint32_t)nb;
  if (memcmp(c->s + startb, lit, nb) != 0) return 0;
  /* find the code point where startb begins */
  size_t p = j;
  while (p > 0 && BO(c, p) > startb) p--;
  if (BO(c, p) != startb || p == j) return 0;
  return j - p;
}

static size_t find_prefix(span_ctx *c, size_t i, size_t j) {
  uint32_t ch = CP(c, i);
  if (ch == '+') return (i + 1 < j && is_d(CP(c, i + 1))) ? 0 : 1;
  if (FL(c, i) & LMQ_F_PREFIX_CHAR) return 1;
  if (ch == '.' && i + 1 < j && CP(c, i + 1) == '.') {
    size_t k = i;
    while (k < j && CP(c, k) == '.') k++;
    return k - i;
  }
  if (ch == 'U' && j - i >= 3 && CP(c, i + 1) == 'S' && CP(c, i + 2) == '$') return 3;
  if ((ch == 'C' || ch == 'A') && j - i >= 2 && CP(c, i + 1) == '$') return 2;
  return 0;
}

static _Thread_local uint64_t unit_scans;
uint64_t lmq_debug_unit_scans(void) { return unit_scans; }

/* The currency / unit literals ending at j with a digit before them, as a
 * mask of their code-point lengths (independent of the span's start). */
static uint64_t unit_matches(span_ctx *c, size_t j) {
  uint64_t m = 0;
  unit_scans++;
  uint32_t endb = BO(c, j);
  if (!endb) return 0;
  const lmq_special_index *ix = c->ix;
  uint8_t last = c->s[endb - 1];
  for (size_t u = ix->unit_at[last]; u < ix->unit_at[last + 1]; u++) {
    size_t k = lit_at_end(c, j, ix->unit_lit[u], ix->unit_len[u]);
    if (k && k < 64 && j - k >= 1 && is_d(CP(c, j - k - 1))) m |= (uint64_t)1 << k;
  }
  return m;
}

/* Length (code points) of the suffix of [i, j): the leftmost position from
 * which one of spaCy's suffix patterns matches to the end. */
static size_t find_suffix(span_ctx *c, size_t i, size_t j) {
  if (j <= i) return 0;
  size_t best = j; /* leftmost start found */
  size_t n = j - i;
  uint32_t last = CP(c, j - 1), prev = n >= 2 ? CP(c, j - 2) : 0;
  if (FL(c, j - 1) & LMQ_F_SUFFIX_CHAR) best = j - 1;
  if (n >= 2 && last == 0x2026 && prev == 0x2026) best = j - 2;
  if (last == '.') {
    if (n >= 2 && prev == '.') {
      size_t k = j - 1;
      while (k > i && CP(c, k - 1) == '.') k--;
      if (k < best) best = k;
    }
    if (n >= 2 && (FL(c, j - 2) & LMQ_F_DOT_SUFFIX_LB) && j - 1 < best) best = j - 1;
    if (n >= 3 && (FL(c, j - 2) & LMQ_F_SP_UPPER) && (FL(c, j - 3) & LMQ_F_SP_UPPER) && j - 1 < best) best = j - 1;
    if (n >= 3 && CP(c, j - 3) == 0xB0 && j - 1 < best) {
      uint32_t u = prev;
      if (u == 'F' || u == 'f' || u == 'C' || u == 'c' || u == 'K' || u == 'k') best = j - 1;
    }
  }
  if (n >= 2 && (last == 's' || last == 'S') && (prev == '\'' || prev == 0x2019) && j - 2 < best) best = j - 2;
  if (n >= 2 && last == '+' && is_d(prev) && j - 1 < best) best = j - 1;
  /* (?<=[0-9])(?:CURRENCY|UNITS)$ : only worth trying when a digit is near the end */
  int digit_near = 0;
  for (size_t k = (j - i > 6 ? j - 6 : i); k < j; k++)
    if (is_d(CP(c, k))) digit_near = 1;
  if (digit_near) {
    /* the literals are matched once per end j: a run of prefixes split off
     * in front of the same end ("((((1") does not repeat the 146 tests */
    if (c->sfx_j != j) {
      c->sfx_j = j;
      c->sfx_mask = unit_matches(c, j);
    }
    /* a literal of k code points needs its digit inside [i, j): j - k - 1 >= i */
    uint64_t m = c->sfx_mask;
    if (n < 64) m &= ((uint64_t)1 << n) - 1; /* k <= n - 1 */
    if (m) {
      size_t k = 63 - (size_t)__builtin_clzll(m); /* the longest: leftmost start */
      if (j - k < best) best = j - k;
    }
  }
  return j - best;
}

/* spaCy's URL_MATCH on code points [i, j) (no whitespace inside). */
static int is_url_host_char(uint32_t ch) {
  return (ch < 128 && ((ch | 32) - 'a' < 26 || is_d(ch))) || (ch >= 0xA1 && ch <= 0xFFFF);
}

static int ip_ok(span_ctx *c, size_t p, size_t j, size_t *end) {
  int oct[4];
  size_t k = p;
  for (int o = 0; o < 4; o++) {
    if (o) {
      if (k >= j || CP(c, k) != '.') return 0;
      k++;
    }
    size_t s = k;
    int v = 0;
    while (k < j && is_d(CP(c, k)) && k - s < 3) v = v * 10 + (int)(CP(c, k++) - '0');
    if (k == s || (k < j && is_d(CP(c, k)))) return 0;
    if (k - s > 1 && CP(c, s) == '0' && (o == 0 || o == 3)) return 0;
    oct[o] = v;
  }
  if (oct[0] < 1 || oct[0] > 223 || oct[3] < 1 || oct[3] > 254 || oct[1] > 255 || oct[2] > 255) return 0;
  if (oct[0] == 10 || oct[0] == 127) return 0;
  if ((oct[0] == 169 && oct[1] == 254) || (oct[0] == 192 && oct[1] == 168)) return 0;
  if (oct[0] == 172 && oct[1] >= 16 && oct[1] <= 31) return 0;
  *end = k;
  return 1;
}

static int url_rest(span_ctx *c, size_t k, size_t j) {
  if (k < j && CP(c, k) == ':') {
    size_t s = k + 1, e = s;
    while (e < j && is_d(CP(c, e))) e++;
    if (e - s >= 2 && e - s <= 5) k = e;
  }
  if (k == j) return 1;
  return CP(c, k) == '/' || CP(c, k) == '?' || CP(c, k) == '#';
}

static int host_at(span_ctx *c, size_t p, size_t j) {
  size_t ipend;
  if (ip_ok(c, p, j, &ipend) && url_rest(c, ipend, j)) return 1;
  size_t e = p;
  while (e < j && (is_url_host_char(CP(c, e)) || CP(c, e) == '_' || CP(c, e) == '-' || CP(c, e) == '.')) e++;
  /* TLD: after the last '.', all ALPHA_LOWER, 2..63 long */
  size_t dot = e;
  while (dot > p && CP(c, dot - 1) != '.') dot--;
  if (dot == p) return 0;
  size_t tl = e - dot;
  if (tl < 2 || tl > 63) return 0;
  for (size_t k = dot; k < e; k++)
    if (!(FL(c, k) & LMQ_F_SP_LOWER)) return 0;
  /* labels in [p, dot-1) separated by '.' */
  size_t s = p;
  size_t last = dot - 1;
  while (s < last) {
    size_t t = s;
    while (t < last && CP(c, t) != '.') t++;
    size_t len = t - s;
    if (len < 1 || len > 64) return 0;
    if (!is_url_host_char(CP(c, s)) || !is_url_host_char(CP(c, t - 1))) return 0;
    s = t + 1;
  }
  if (s != last + 1 && s != last) return 0;
  if (s == last && last > p && CP(c, last - 1) == '.') return 0; /* empty label */
  if (last == p) return 0; /* no label */
  return url_rest(c, e, j);
}

static int url_match(span_ctx *c, size_t i, size_t j) {
  /* every host (an IPv4 address or labels and a TLD) has a '.' */
  if (c->ascii) {
    if (!memchr(c->s + i, '.', j - i)) return 0;
  } else {
    size_t k = i;
    while (k < j && c->cp[k] != '.') k++;
    if (k == j) return 0;
  }
  size_t starts[2] = {i, i};
  int nstarts = 1;
  /* optional scheme [\w+\-.]{2,}:// */
  for (size_t k = i; k + 2 < j; k++) {
    if (CP(c, k) == ':' && CP(c, k + 1) == '/' && CP(c, k + 2) == '/') {
      int ok = k - i >= 2;
      for (size_t q = i; q < k && ok; q++)
        ok = CP(c, q) == '+' || CP(c, q) == '-' || CP(c, q) == '.' || CP(c, q) == '_' || is_d(CP(c, q)) ||
             (FL(c, q) & LMQ_F_PYALPHA);
      if (ok) starts[nstarts++] = k + 3;
      break;
    }
  }
  for (int si = nstarts - 1; si >= 0; si--) {
    size_t p = starts[si];
    if (host_at(c, p, j)) return 1;
    /* optional user[:pass]@ : any '@' with a non-empty part before it */
    for (size_t k = p + 1; k < j; k++)
      if (CP(c, k) == '@' && host_at(c, k + 1, j)) return 1;
  }
  return 0;
}

static const uint32_t k_hyph[7][2] = {{'-', 0}, {0x2013, 0}, {0x2014, 0}, {'-', '-'}, {'-', '-'}, {0x2014, 0x2014}, {'~', 0}};
static const uint8_t k_hyph_len[7] = {1, 1, 1, 2, 3, 2, 1};

/* One infix match at p of [i, j), or 0. */
static size_t infix_at(span_ctx *c, size_t i, size_t p, size_t j) {
  uint32_t ch = CP(c, p);
  if (ch == '.' && p + 1 < j && CP(c, p + 1) == '.') {
    size_t k = p;
    while (k < j && CP(c, k) == '.') k++;
    return k - p;
  }
  if (ch == 0x2026 || (FL(c, p) & LMQ_F_ICON)) return 1;
  if (p == i) return 0; /* the rest need a lookbehind inside the string */
  uint32_t prev = CP(c, p - 1), pf = FL(c, p - 1);
  int has_next = p + 1 < j;
  if (is_d(prev) && (ch == '+' || ch == '-' || ch == '*' || ch == '^') && has_next &&
      (is_d(CP(c, p + 1)) || CP(c, p + 1) == '-'))
    return 1;
  if (ch == '.' && (pf & LMQ_F_INFIX_DOT_LB) && has_next && (FL(c, p + 1) & LMQ_F_INFIX_DOT_LA)) return 1;
  if (ch == ',' && (pf & LMQ_F_SP_ALPHA) && has_next && (FL(c, p + 1) & LMQ_F_SP_ALPHA)) return 1;
  if ((pf & LMQ_F_SP_ALPHA) || is_d(prev)) {
    /* hyphens: every pattern starts with '-', U+2013, U+2014 or '~' */
    if (ch == '-' || ch == 0x2013 || ch == 0x2014 || ch == '~') {
      for (int h = 0; h < 7; h++) {
        size_t L = k_hyph_len[h];
        if (p + L >= j) continue;
        int ok = 1;
        for (size_t q = 0; q < L && ok; q++) {
          uint32_t want = h == 4 ? '-' : k_hyph[h][q];
          ok = CP(c, p + q) == want;
        }
        if (ok && (FL(c, p + L) & LMQ_F_SP_ALPHA)) return L;
      }
    }
    if ((ch == ':' || ch == '<' || ch == '>' || ch == '=' || ch == '/') && has_next &&
        (FL(c, p + 1) & LMQ_F_SP_ALPHA))
      return 1;
  }
  return 0;
}

static int attach_core(span_ctx *c, size_t i, size_t j) {
  if (i >= j) return 0;
  const lmq_special *sp = special_cps(c, i, j);
  if (sp) return push_special(c, sp, i, j);
  if (url_match(c, i, j)) return push_cps(c, i, j);
  size_t start = i, p = i;
  while (p < j) {
    size_t L = infix_at(c, i, p, j);
    if (!L) {
      p++;
      continue;
    }
    if (p != i) {
      if (p != start && push_cps(c, start, p)) return -1;
      if (push_cps(c, p, p + L)) return -1;
      start = p + L;
    }
    p += L;
  }
  if (start < j) return push_cps(c, start, j);
  return 0;
}

static inline void cut_set(uint64_t *m, size_t k) { m[k >> 6] |= (uint64_t)1 << (k & 63); }

/* The next cut point after k (k < n), or n. */
static size_t cut_next(const uint64_t *m, size_t k, size_t n) {
  k++;
  if (k >= n) return n;
  size_t w = k >> 6;
  uint64_t v = m[w] & (~(uint64_t)0 << (k & 63));
  size_t nwords = (n + 63) >> 6;
  while (!v) {
    if (++w >= nwords) return n;
    v = m[w];
  }
  size_t r = (w << 6) + (size_t)__builtin_ctzll(v);
  return r < n ? r : n;
}

/* Tokenize one non-whitespace span of code points [0, n): spaCy's
 * _split_affixes loop, then the core.  Prefix tokens are emitted as they are
 * split off (they come first, in order); suffix cut points are marked in a
 * bitmap and emitted after the core, so the memory is one bit per code point. */
static int tokenize_span(span_ctx *c, size_t n) {
  lmq_tokbuf *b = c->b;
  size_t i = 0, j = n;
  size_t nwords = (n + 64) >> 6;
  if (nwords > b->cap_cut) {
    size_t cap = nwords + 16;
    void *q = realloc(b->cut, cap * sizeof(uint64_t));
    if (!q) return -1;
    b->cut = (uint64_t *)q;
    b->cap_cut = cap;
  }
  memset(b->cut, 0, nwords * sizeof(uint64_t));
  c->sfx_j = (size_t)-1;
  c->sp_i = c->sp_j = (size_t)-1; /* a new span: forget the last answer */
  size_t last = (size_t)-1;
  while (j > i && j - i != last) {
    if (special_cps(c, i, j)) break;
    last = j - i;
    size_t pre = find_prefix(c, i, j);
    if (pre && i + pre < j && special_cps(c, i + pre, j)) {
      if (push_cps(c, i, i + pre)) return -1;
      i += pre;
      break;
    }
    size_t suf = find_suffix(c, i + pre, j);
    if (suf && j - suf > i && special_cps(c, i, j - suf)) {
      j -= suf;
      cut_set(b->cut, j);
      break;
    }
    if (pre && suf && pre + suf <= j - i) {
      if (push_cps(c, i, i + pre)) return -1;
      i += pre;
      j -= suf;
      cut_set(b->cut, j);
    } else if (pre) {
      if (push_cps(c, i, i + pre)) return -1;
      i += pre;
    } else if (suf) {
      j -= suf;
      cut_set(b->cut, j);
    }
    if (j > i && special_cps(c, i, j)) break;
  }
  if (attach_core(c, i, j)) return -1;
  for (size_t k = j; k < n;) {
    size_t e = cut_next(b->cut, k, n);
    if (push_cps(c, k, e)) return -1;
    k = e;
  }
  return 0;
}

int lmq_tokenize(const lmq_special_index *ix, const uint8_t *s, size_t n, uint32_t base,
                 lmq_tokbuf *b, int reset) {
  if (reset) b->ntok = 0;
  b->max_tok = b->ntok + n; /* tokens are disjoint non-empty byte ranges */
  span_ctx c = {ix, s, base, b, NULL, NULL, NULL, 0, (size_t)-1, 0, (size_t)-1, (size_t)-1, NULL};
  size_t i = 0;
  while (i < n) {
    /* whitespace run */
    size_t ws_start = i, ws_cps = 0;
    uint32_t cp = 0;
    while (i < n) {
      uint8_t ch = s[i];
      if (ch < 0x80) {
        if (!(lmq_ascii_flags[ch] & LMQ_F_SPACE)) break;
        i++;
      } else {
        size_t l = lmq_decode(s, n, i, &cp);
        if (!(lmq_flags(cp) & LMQ_F_SPACE)) break;
        i += l;
      }
      ws_cps++;
    }
    if (i > ws_start) {
      size_t from = ws_start, ncp = ws_cps;
      if (ws_start > 0 && s[ws_start] == ' ') from++, ncp--;
      if (ncp && push_tok_raw(b, base + (uint32_t)from, (uint32_t)(i - from), LMQ_T_WS))
        return -1;
    }
    if (i >= n) break;
    /* non-whitespace span: ASCII-letters fast path */
    size_t st = i;
    int letters = 1, ascii = 1;
    i = lmq_letters_end(s, i, n); /* ASCII letters */
    size_t ncps = i - st;
    if (i < n && !(s[i] < 0x80 && (lmq_ascii_flags[s[i]] & LMQ_F_SPACE))) {
      size_t letters_end = i;
      while (i < n) {
        uint8_t ch = s[i];
        if (ch < 0x80) {
          if (lmq_ascii_flags[ch] & LMQ_F_SPACE) break;
          i++;
        } else {
          size_t l = lmq_decode(s, n, i, &cp);
          if (lmq_flags(cp) & LMQ_F_SPACE) break;
          ascii = 0;
          i += l;
        }
        ncps++;
      }
      letters = i == letters_end; /* only letters before a non-ASCII space */
    }
    if (letters) {
      const lmq_special *sp = special_find(ix, s + st, i - st);
      if (!sp) {
        if (push_tok_raw(b, base + (uint32_t)st, (uint32_t)(i - st), LMQ_T_NONSYMBOL | LMQ_T_ALPHA))
          return -1;
        continue;
      }
    }
    size_t nb = i - st;
    c.s = s + st;
    c.base = base + (uint32_t)st;
    if (ascii) { /* read in place: code point k is byte k */
      c.ascii = 1;
      if (tokenize_span(&c, nb)) return -1;
      continue;
    }
    /* decode the span */
    if (ncps + 1 > b->cap_cp) { /* sized by code points: 12 B each */
      size_t cap = ncps + 256;
      void *q0 = realloc(b->cp, cap * sizeof(uint32_t));
      if (!q0) return -1;
      b->cp = (uint32_t *)q0;
      void *q1 = realloc(b->bo, cap * sizeof(uint32_t));
      if (!q1) return -1;
      b->bo = (uint32_t *)q1;
      void *q2 = realloc(b->fl, cap * sizeof(uint32_t));
      if (!q2) return -1;
      b->fl = (uint32_t *)q2;
      b->cap_cp = cap;
    }
    size_t k = 0, q = st;
    while (q < i) {
      size_t l = lmq_decode(s, n, q, &cp);
      b->cp[k] = cp;
      b->bo[k] = (uint32_t)(q - st);
      b->fl[k] = lmq_flags(cp);
      k++;
      q += l;
    }
    b->bo[k] = (uint32_t)nb;
    c.ascii = 0;
    c.cp = b->cp;
    c.bo = b->bo;
    c.fl = b->fl;
    if (tokenize_span(&c, k)) return -1;
  }
  return 0;
}
