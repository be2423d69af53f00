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

/* Does o[0..on) equal the repaired form of s[0..n) (ill-formed subparts ->
 * U+FFFD)? */
static int eq_repaired(const uint8_t *s, size_t n, const uint8_t *o, size_t on) {
  size_t i = 0, k = 0;
  while (i < n) {
    if (s[i] < 0x80) {
      if (k >= on || o[k] != s[i]) return 0;
      i++;
      k++;
      continue;
    }
    uint32_t cp;
    int bad;
    size_t l = decode(s, n, i, &cp, &bad);
    if (bad) {
      if (on - k < 3 || memcmp(o + k, "\xEF\xBF\xBD", 3) != 0) return 0;
      k += 3;
    } else {
      if (on - k < l || memcmp(o + k, s + i, l) != 0) return 0;
      k += l;
    }
    i += l;
  }
  return k == on;
}

/* ---- NFC / NFKC ----
 * utf8proc_map's canonical reordering is an adjacent-swap sort over the whole
 * decomposed buffer: quadratic in a run of combining marks ("a" + 100 KB of
 * U+0301 U+0316 took seconds).  We decompose each code point with
 * utf8proc_decompose_char (what utf8proc_map does), put each run of
 * non-starters in canonical order with a stable sort by combining class
 * (exactly the order the swap loop produces: starters never move, equal
 * classes keep their order), and compose + encode with utf8proc_reencode (the
 * same call utf8proc_map ends with; its composition pass is linear).  The
 * output is byte for byte utf8proc_map's. */

static inline uint8_t ccc_of(int32_t cp) {
  return cp < 0x300 ? 0 : (uint8_t)utf8proc_get_property(cp)->combining_class;
}

/* Stable sort of v[0..n) by combining class; tmp has room for n. */
static void sort_marks(int32_t *v, uint8_t *cls, size_t n, int32_t *tmp, uint8_t *tcls) {
  if (n <= 16) { /* insertion sort: stable */
    for (size_t i = 1; i < n; i++) {
      int32_t x = v[i];
      uint8_t c = cls[i];
      size_t j = i;
      while (j > 0 && cls[j - 1] > c) {
        v[j] = v[j - 1];
        cls[j] = cls[j - 1];
        j--;
      }
      v[j] = x;
      cls[j] = c;
    }
    return;
  }
  /* counting sort by class (256 keys): stable, linear */
  size_t cnt[257];
  memset(cnt, 0, sizeof cnt);
  for (size_t i = 0; i < n; i++) cnt[cls[i] + 1]++;
  for (int k = 0; k < 256; k++) cnt[k + 1] += cnt[k];
  for (size_t i = 0; i < n; i++) {
    size_t d = cnt[cls[i]]++;
    tmp[d] = v[i];
    tcls[d] = cls[i];
  }
  memcpy(v, tmp, n * sizeof *v);
  memcpy(cls, tcls, n);
}

/* Normalize one stretch: the repaired form of s[0..n) (ill-formed subparts
 * -> U+FFFD), its UTF-8 left at the start of *bufp (a growable buffer of
 * *capp code points, the caller's), *out_len bytes.  *invalid += U+FFFD
 * inserted.  Memory: 4 bytes per decomposed code point plus, for runs of
 * more than 16 marks, 5 bytes per mark of the longest run. */
static lm_status normalize_seg(const uint8_t *s, size_t n, int compat, int32_t **bufp, size_t *capp, size_t *out_len,
                               uint64_t *invalid) {
  utf8proc_option_t opts = (utf8proc_option_t)(UTF8PROC_STABLE | UTF8PROC_COMPOSE | (compat ? UTF8PROC_COMPAT : 0));
  size_t cap = *capp, w = 0;
  int32_t *buf = *bufp;
  if (cap < n + 16) {
    int32_t *q = (int32_t *)realloc(buf, (n + 16) * sizeof(int32_t));
    if (!q) return LM_ENOMEM;
    *bufp = buf = q;
    *capp = cap = n + 16;
  }
  size_t i = 0;
  while (i < n) {
    if (w + 32 > cap) {
      size_t nc = cap + cap / 2 + 64;
      int32_t *q = (int32_t *)realloc(buf, nc * sizeof(int32_t));
      if (!q) return LM_ENOMEM;
      *bufp = buf = q;
      *capp = cap = nc;
    }
    uint8_t b = s[i];
    if (b < 0x80) { /* ASCII decomposes to itself */
      buf[w++] = b;
      i++;
      continue;
    }
    uint32_t cp;
    int bad;
    size_t l = decode(s, n, i, &cp, &bad);
    if (bad) (*invalid)++;
    i += l;
    int bc = 0;
    utf8proc_ssize_t r = utf8proc_decompose_char((utf8proc_int32_t)cp, buf + w, (utf8proc_ssize_t)(cap - w), opts, &bc);
    if (r < 0) return LM_EUTF8;
    if ((size_t)r > cap - w) { /* longer than the room left: grow and redo */
      size_t nc = cap + (size_t)r + cap / 2;
      int32_t *q = (int32_t *)realloc(buf, nc * sizeof(int32_t));
      if (!q) return LM_ENOMEM;
      *bufp = buf = q;
      *capp = cap = nc;
      r = utf8proc_decompose_char((utf8proc_int32_t)cp, buf + w, (utf8proc_ssize_t)(cap - w), opts, &bc);
    }
    w += (size_t)r;
  }
  /* canonical order: each run of non-starters sorted by class */
  int32_t *tmp = NULL;
  uint8_t *cls = NULL, *tcls = NULL;
  size_t tcap = 0;
  uint8_t small_cls[17];
  for (size_t k = 0; k < w;) {
    uint8_t c0 = ccc_of(buf[k]);
    if (!c0) { k++; continue; }
    size_t e = k + 1;
    int sorted = 1;
    uint8_t prev = c0;
    while (e < w) {
      uint8_t c = ccc_of(buf[e]);
      if (!c) break;
      if (c < prev) sorted = 0;
      prev = c;
      e++;
    }
    if (!sorted) {
      size_t m = e - k;
      uint8_t *cl = small_cls;
      if (m > 16) {
        if (m > tcap) {
          free(tmp);
          free(cls);
          free(tcls);
          tmp = (int32_t *)malloc(m * sizeof(int32_t));
          cls = (uint8_t *)malloc(m);
          tcls = (uint8_t *)malloc(m);
          tcap = m;
          if (!tmp || !cls || !tcls) {
            free(tmp); free(cls); free(tcls);
            return LM_ENOMEM;
          }
        }
        cl = cls;
      }
      for (size_t t = 0; t < m; t++) cl[t] = ccc_of(buf[k + t]);
      sort_marks(buf + k, cl, m, tmp, tcls);
    }
    k = e;
  }
  free(tmp);
  free(cls);
  free(tcls);
  /* compose and encode in place (UTF-8 never needs more than 4 bytes per code point; one spare byte) */
  if (w + 1 > cap) {
    int32_t *q = (int32_t *)realloc(buf, (w + 1) * sizeof(int32_t));
    if (!q) return LM_ENOMEM;
    *bufp = buf = q;
    *capp = cap = w + 1;
  }
  utf8proc_ssize_t nl = utf8proc_reencode(buf, (utf8proc_ssize_t)w, opts);
  if (nl < 0) return nl == UTF8PROC_ERROR_NOMEM ? LM_ENOMEM : LM_EUTF8;
  *out_len = (size_t)nl;
  return LM_OK;
}

/* Normalize the repaired form of s[0..n) into a malloc'd string *out (the
 * caller frees) of *out_len bytes; *invalid += U+FFFD inserted; *changed = it
 * differs from the repaired input.  ASCII runs are copied as they are; each
 * stretch of non-ASCII bytes is normalized together with the ASCII character
 * before it (a starter it may compose with).  Cutting before an ASCII
 * character is exact: it is a starter, never reordered, never the second
 * character of a composition, and never part of an ill-formed sequence. */
static lm_status normalize(const uint8_t *s, size_t n, int compat, uint8_t **out, size_t *out_len, uint64_t *invalid,
                           int *changed) {
  size_t cap = n + 16, o = 0;
  uint8_t *res = (uint8_t *)malloc(cap);
  if (!res) return LM_ENOMEM;
  int32_t *buf = NULL;
  size_t bcap = 0;
  size_t i = 0;
  while (i < n) {
    size_t j = i;
    while (j < n && s[j] < 0x80) j++;
    size_t a = j == n ? n : (j > i ? j - 1 : i); /* the ASCII copied as is: s[i..a) */
    size_t k = j;
    while (k < n && s[k] >= 0x80) k++;
    size_t seg = 0;
    if (k > a) {
      lm_status st = normalize_seg(s + a, k - a, compat, &buf, &bcap, &seg, invalid);
      if (st) {
        free(buf);
        free(res);
        return st;
      }
    }
    if (o + (a - i) + seg > cap) {
      size_t nc = cap + cap / 2 + (a - i) + seg;
      uint8_t *q = (uint8_t *)realloc(res, nc);
      if (!q) {
        free(buf);
        free(res);
        return LM_ENOMEM;
      }
      res = q;
      cap = nc;
    }
    memcpy(res + o, s + i, a - i);
    o += a - i;
    if (seg) memcpy(res + o, buf, seg);
    o += seg;
    i = k;
  }
  free(buf);
  *changed = !eq_repaired(s, n, res, o);
  *out = res;
  *out_len = o;
  return LM_OK;
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
      /* a single ' ' between two printable characters is copied as it is
       * (after a printable character nothing collapses or trims it) */
      size_t j = i + 1;
      for (;;) {
        /* 8 bytes at a time while they are printable ASCII and single spaces
         * ending on a printable (s[j - 1] is always a printable non-space here,
         * so each space in the block is between two printables) */
        while (j + 8 <= n) {
          uint64_t v;
          memcpy(&v, s + j, 8);
          const uint64_t H = 0x8080808080808080ull, L7 = 0x7F7F7F7F7F7F7F7Full;
          uint64_t t = v ^ L7;
          uint64_t bad = (v & H) | ((v - 0x2020202020202020ull) & ~v & H) | ((t - 0x0101010101010101ull) & ~t & H);
          if (bad) break; /* a byte >= 0x80, < 0x20 or 0x7F (exact as a whole once no byte >= 0x80) */
          uint64_t u = v ^ 0x2020202020202020ull;
          uint64_t sp = ~(((u & L7) + L7) | u) & H; /* exactly the ' ' bytes */
          if ((sp & (sp >> 8)) || (sp >> 63)) break; /* two spaces in a row, or a space last */
          j += 8;
        }
        while (j < n && s[j] > 0x20 && s[j] < 0x7F) j++;
        if (j + 1 < n && s[j] == ' ' && s[j + 1] > 0x20 && s[j + 1] < 0x7F) {
          j += 2;
          continue;
        }
        break;
      }
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
    uint64_t inv = 0;
    uint8_t *norm = NULL;
    size_t nl = 0;
    int changed = 0;
    lm_status ns = normalize(text, len, p->normalize == LM_NORM_NFKC, &norm, &nl, &inv, &changed);
    if (ns) return ns;
    if (out_cap < nl) {
      free(norm);
      *out_len = nl;
      return LM_ERANGE;
    }
    /* folding never lengthens valid UTF-8 */
    lm_clean_counters sub;
    memset(&sub, 0, sizeof sub);
    o = fold(p, norm, nl, out, &sub);
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
