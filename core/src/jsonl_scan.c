/* jsonl_scan.c — see luminamoon/jsonl.h.  A strict JSON validator for one line that
 * decodes one top-level string field; anything it is not sure of is LM_JSONL_SLOW. */
#include <string.h>

#include "hash_internal.h" /* lm_cpu_avx2_on: the CPU check and the LM_NO_AVX2 switch */
#include "luminamoon/jsonl.h"

/* The plain-ASCII runs of strings (jl_string) are found 32 bytes at a time with AVX2 when
 * the CPU has it and LM_NO_AVX2 is not set (read once), else 8 at a time (SWAR); both stop
 * at the same byte, so the output is the same.  GCC/clang on x86-64 only. */
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define JL_HAVE_AVX2 1
#include <immintrin.h>

static int jl_use_avx2(void) { return lm_cpu_avx2_on(); }
#else
#define JL_HAVE_AVX2 0
#endif

typedef struct {
  const uint8_t *p;
  const uint8_t *end;
} jl_cur;

static int jl_json_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static int jl_strip_ws(uint8_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static void jl_skip_ws(jl_cur *c) {
  while (c->p < c->end && jl_json_ws(*c->p)) c->p++;
}

static int jl_hex(uint8_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Four hex digits at p (p + 4 <= end checked by the caller); -1 if not hex. */
static long jl_hex4(const uint8_t *p) {
  long v = 0;
  for (int i = 0; i < 4; i++) {
    int h = jl_hex(p[i]);
    if (h < 0) return -1;
    v = (v << 4) | h;
  }
  return v;
}

/* Length of the valid UTF-8 sequence (2..4 bytes) starting with lead byte p[0] >= 0x80,
 * or 0 when invalid (overlong, surrogate, > U+10FFFF, truncated) — what Python's
 * strict UTF-8 decoder accepts. */
static size_t jl_utf8_len(const uint8_t *p, const uint8_t *end) {
  uint8_t b0 = p[0];
  size_t avail = (size_t)(end - p);
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    return (avail >= 2 && (p[1] & 0xC0) == 0x80) ? 2 : 0;
  }
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (avail < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
    if (b0 == 0xE0 && p[1] < 0xA0) return 0;  /* overlong */
    if (b0 == 0xED && p[1] >= 0xA0) return 0; /* UTF-16 surrogate */
    return 3;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (avail < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
    if (b0 == 0xF0 && p[1] < 0x90) return 0; /* overlong */
    if (b0 == 0xF4 && p[1] >= 0x90) return 0; /* > U+10FFFF */
    return 4;
  }
  return 0;
}

/* The high bit of each byte of x that is < 0x20, >= 0x80, '"' or '\\' (the bytes that end
 * jl_string's plain ASCII run).  A borrow can flag a byte above (more significant than) a
 * true one but never hides one and never reaches below the least significant one, so 0 is
 * exact (the run goes on through all 8 bytes) and the lowest flag marks a true byte. */
static uint64_t jl_special8(uint64_t x) {
  const uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
  uint64_t q = x ^ (ones * '"'), b = x ^ (ones * '\\');
  return (((x - ones * 0x20) & ~x) | ((q - ones) & ~q) | ((b - ones) & ~b) | x) & high;
}

static uint8_t *jl_put_utf8(uint8_t *o, unsigned long cp) {
  if (cp < 0x80) {
    *o++ = (uint8_t)cp;
  } else if (cp < 0x800) {
    *o++ = (uint8_t)(0xC0 | (cp >> 6));
    *o++ = (uint8_t)(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *o++ = (uint8_t)(0xE0 | (cp >> 12));
    *o++ = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    *o++ = (uint8_t)(0x80 | (cp & 0x3F));
  } else {
    *o++ = (uint8_t)(0xF0 | (cp >> 18));
    *o++ = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    *o++ = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    *o++ = (uint8_t)(0x80 | (cp & 0x3F));
  }
  return o;
}

/* The byte at *pp ends a plain run (or the line ends at *pp): handles it.  Returns 2 for the
 * closing quote (*pp past it), 1 when the string goes on (*pp and *oo past the byte(s) handled:
 * a valid UTF-8 sequence copied, an escape decoded), 0 for what strict JSON refuses or this
 * scanner leaves to the exact parser (SLOW).  out != NULL semantics as jl_string's. */
static inline __attribute__((always_inline)) int jl_special(const uint8_t **pp, const uint8_t *end, uint8_t **oo,
                                                            int *escaped) {
  const uint8_t *p = *pp;
  uint8_t *o = *oo;
  if (p >= end) return 0;
  uint8_t ch = *p;
  if (ch == '"') {
    *pp = p + 1;
    return 2;
  }
  if (ch < 0x20) return 0; /* a raw control character: strict JSON refuses it */
  if (ch >= 0x80) {
    size_t n = jl_utf8_len(p, end);
    if (n == 0) return 0;
    if (o != NULL) {
      memcpy(o, p, n);
      *oo = o + n;
    }
    *pp = p + n;
    return 1;
  }
  /* a backslash */
  if (escaped != NULL) *escaped = 1;
  if (p + 1 >= end) return 0;
  uint8_t e = p[1];
  uint8_t lit = 0;
  switch (e) {
    case '"': lit = '"'; break;
    case '\\': lit = '\\'; break;
    case '/': lit = '/'; break;
    case 'b': lit = '\b'; break;
    case 'f': lit = '\f'; break;
    case 'n': lit = '\n'; break;
    case 'r': lit = '\r'; break;
    case 't': lit = '\t'; break;
    case 'u': break;
    default: return 0;
  }
  if (e != 'u') {
    if (o != NULL) *oo = o + 1, *o = lit;
    *pp = p + 2;
    return 1;
  }
  if (end - p < 6) return 0;
  long cp = jl_hex4(p + 2);
  if (cp < 0) return 0;
  p += 6;
  if (cp >= 0xD800 && cp <= 0xDBFF) {
    /* a high surrogate: paired with a following \uDC00-\uDFFF escape, else lone */
    if (end - p >= 6 && p[0] == '\\' && p[1] == 'u') {
      long lo = jl_hex4(p + 2);
      if (lo >= 0xDC00 && lo <= 0xDFFF) {
        *pp = p + 6;
        if (o != NULL)
          *oo = jl_put_utf8(o, 0x10000UL + (((unsigned long)cp - 0xD800UL) << 10) + ((unsigned long)lo - 0xDC00UL));
        return 1;
      }
    }
    if (o != NULL) return 0; /* lone high surrogate in the decoded value */
    *pp = p;
    return 1;
  }
  if (cp >= 0xDC00 && cp <= 0xDFFF) {
    if (o != NULL) return 0; /* lone low surrogate */
    *pp = p;
    return 1;
  }
  if (o != NULL) *oo = jl_put_utf8(o, (unsigned long)cp);
  *pp = p;
  return 1;
}

/* The plain run at p (bytes in [0x20, 0x80) other than '"' and '\\') found 8 bytes at a time
 * (SWAR) then byte by byte, copied to *oo when out is kept; returns where it ends. */
static inline __attribute__((always_inline)) const uint8_t *jl_run_scalar(const uint8_t *p, const uint8_t *end,
                                                                         uint8_t **oo) {
  const uint8_t *s = p;
  for (uint64_t x, m; end - p >= 8; p += 8) { /* 8 bytes at a time while none ends the run */
    memcpy(&x, p, 8);
    if ((m = jl_special8(x)) != 0) {
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
      p += (unsigned)__builtin_ctzll(m) >> 3; /* the lowest flag is exact: the first byte ending the run */
#endif
      break;
    }
  }
  while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\') p++;
  if (*oo != NULL && p > s) {
    memcpy(*oo, s, (size_t)(p - s));
    *oo += p - s;
  }
  return p;
}

/* The byte a one-letter escape stands for (\" \\ \/ \b \f \n \r \t), indexed by the letter; 0 for
 * the others (\u, invalid: jl_special handles them).  Same decoding as jl_special's switch. */
static const uint8_t jl_simple_escape[256] = {['"'] = '"', ['\\'] = '\\', ['/'] = '/', ['b'] = '\b',
                                              ['f'] = '\f', ['n'] = '\n', ['r'] = '\r', ['t'] = '\t'};

/* The bytes that ended a plain run at *pp (both string paths, so they stop and decode alike): a
 * one-letter escape by the table, else jl_special.  Returns -1 (go on with the next run), 0
 * (SLOW), or 1 at the closing quote (*pp just past it). */
static inline __attribute__((always_inline)) int jl_run_end(const uint8_t **pp, const uint8_t *end, uint8_t **oo,
                                                            int *escaped) {
  const uint8_t *p = *pp;
  if (end - p >= 2 && *p == '\\' && jl_simple_escape[p[1]] != 0) { /* the common escapes (\n, \", ...) */
    if (escaped != NULL) *escaped = 1;
    if (*oo != NULL) *(*oo)++ = jl_simple_escape[p[1]];
    *pp = p + 2;
    return -1;
  }
  const int r = jl_special(pp, end, oo, escaped);
  return r == 1 ? -1 : r == 0 ? 0 : 1;
}

#if JL_HAVE_AVX2
/* jl_string with the plain runs found 32 bytes at a time (each 32 bytes read also stored at o:
 * the run's bytes, then whatever follows them up to 31 bytes; o never runs ahead of p, so
 * o + 32 stays inside the output's len bytes while p + 32 <= end), the bytes ending them
 * handled in the same loop (jl_special), the last < 32 bytes of the line as the portable
 * path does: it stops at the same bytes, so the result is the same. */
__attribute__((target("avx2"))) static int jl_string_avx2(jl_cur *c, uint8_t *out, uint8_t **out_end,
                                                          int *escaped) {
  const uint8_t *p = c->p, *end = c->end;
  uint8_t *o = out;
  const __m256i quote = _mm256_set1_epi8('"'), bslash = _mm256_set1_epi8('\\'), space = _mm256_set1_epi8(0x20);
  for (;;) {
    for (;;) {
      if (end - p < 32) {
        p = jl_run_scalar(p, end, &o);
        break;
      }
      __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)p);
      if (o != NULL) _mm256_storeu_si256((__m256i *)(void *)o, v);
      /* signed compare: 0x20 > v holds for the bytes < 0x20 and for those >= 0x80 (negative) */
      __m256i sp = _mm256_or_si256(_mm256_or_si256(_mm256_cmpeq_epi8(v, quote), _mm256_cmpeq_epi8(v, bslash)),
                                   _mm256_cmpgt_epi8(space, v));
      unsigned m = (unsigned)_mm256_movemask_epi8(sp);
      if (m != 0) {
        unsigned k = (unsigned)__builtin_ctz(m);
        p += k;
        if (o != NULL) o += k;
        break;
      }
      p += 32;
      if (o != NULL) o += 32;
    }
    const int r = jl_run_end(&p, end, &o, escaped);
    if (r == 0) return 0;
    if (r == 1) break;
  }
  c->p = p;
  if (out_end != NULL) *out_end = o;
  return 1;
}
#endif

/* A string; c->p is just past the opening quote.  With out != NULL the decoded bytes
 * are written there (*out_end: where they end) and a lone surrogate escape fails;
 * without, the string is only validated (lone surrogates are valid JSON for Python).
 * *escaped is set when the string holds any escape.  Returns 1, or 0 (SLOW). */
static int jl_string(jl_cur *c, uint8_t *out, uint8_t **out_end, int *escaped) {
#if JL_HAVE_AVX2
  if (c->end - c->p >= 32 && jl_use_avx2()) return jl_string_avx2(c, out, out_end, escaped);
#endif
  const uint8_t *p = c->p, *end = c->end;
  uint8_t *o = out;
  for (;;) {
    p = jl_run_scalar(p, end, &o);
    const int r = jl_run_end(&p, end, &o, escaped);
    if (r == 0) return 0;
    if (r == 1) break;
  }
  c->p = p;
  if (out_end != NULL) *out_end = o;
  return 1;
}

/* A number as Python's json accepts it: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?
 * (NaN, Infinity and integers too long for Python's int conversion limit: SLOW). */
static int jl_number(jl_cur *c) {
  const uint8_t *p = c->p, *end = c->end;
  if (p < end && *p == '-') p++;
  if (p >= end) return 0;
  const uint8_t *digits = p;
  if (*p == '0') {
    p++;
  } else if (*p >= '1' && *p <= '9') {
    while (p < end && *p >= '0' && *p <= '9') p++;
  } else {
    return 0;
  }
  int is_int = 1;
  if (p - digits > 4000) return 0;
  if (p < end && *p == '.') {
    p++;
    if (p >= end || *p < '0' || *p > '9') return 0;
    while (p < end && *p >= '0' && *p <= '9') p++;
    is_int = 0;
  }
  if (p < end && (*p == 'e' || *p == 'E')) {
    p++;
    if (p < end && (*p == '+' || *p == '-')) p++;
    if (p >= end || *p < '0' || *p > '9') return 0;
    while (p < end && *p >= '0' && *p <= '9') p++;
    is_int = 0;
  }
  (void)is_int;
  c->p = p;
  return 1;
}

static int jl_literal(jl_cur *c, const char *lit, size_t n) {
  if ((size_t)(c->end - c->p) < n || memcmp(c->p, lit, n) != 0) return 0;
  c->p += n;
  return 1;
}

static int jl_value(jl_cur *c, int depth);

/* Just past an array's '[' or an object's '{': skips whitespace; 1 when `close` follows
 * at once (the empty container, consumed), else 0. */
static int jl_empty(jl_cur *c, uint8_t close) {
  jl_skip_ws(c);
  if (c->p < c->end && *c->p == close) {
    c->p++;
    return 1;
  }
  return 0;
}

/* After a member of an array or object: a ',' (returns 1: another member follows, the
 * whitespace after the comma skipped) or `close` (returns 2: the container ends, consumed);
 * anything else, or the end of the line, is invalid (0). */
static int jl_next_member(jl_cur *c, uint8_t close) {
  jl_skip_ws(c);
  if (c->p >= c->end) return 0;
  if (*c->p == ',') {
    c->p++;
    jl_skip_ws(c);
    return 1;
  }
  if (*c->p == close) {
    c->p++;
    return 2;
  }
  return 0;
}

static int jl_array(jl_cur *c, int depth) {
  /* c->p just past '[' */
  if (jl_empty(c, ']')) return 1;
  for (;;) {
    if (!jl_value(c, depth + 1)) return 0;
    int next = jl_next_member(c, ']');
    if (next != 1) return next == 2;
  }
}

/* A top-level field to decode: its key, where its value goes (out), and after the object
 * the value's end (out_end) and found (0 missing, 1 decoded, 2 present but not decoded: for
 * a second field only, see jl_object). */
typedef struct {
  const uint8_t *key;
  size_t key_len;
  uint8_t *out;
  uint8_t *out_end;
  int found;
} jl_field;

/* An object; c->p just past '{'.  At top level (f != NULL) the value of f->key is decoded
 * into f->out (f->found, f->out_end set); any other case of the key, an escaped key, the key
 * twice or a value that is not a decodable string is SLOW.  f2 (top level only, may be NULL):
 * a second key decoded the same way when it can be, else only validated (f2->found = 2:
 * twice, not a string, a lone surrogate escape) -- never SLOW for f2's sake. */
static int jl_object(jl_cur *c, int depth, jl_field *f, jl_field *f2) {
  if (jl_empty(c, '}')) return 1;
  for (;;) {
    if (c->p >= c->end || *c->p != '"') return 0;
    c->p++;
    const uint8_t *k0 = c->p;
    int esc = 0;
    if (!jl_string(c, NULL, NULL, &esc)) return 0;
    const uint8_t *k1 = c->p - 1;
    jl_skip_ws(c);
    if (c->p >= c->end || *c->p != ':') return 0;
    c->p++;
    jl_skip_ws(c);
    if (f != NULL) {
      if (esc) return 0; /* keys with escapes could spell the key: let the exact parser decide */
      if ((size_t)(k1 - k0) == f->key_len && memcmp(k0, f->key, f->key_len) == 0) {
        if (f->found) return 0; /* the key twice: Python keeps the last; leave it to Python */
        f->found = 1;
        if (c->p >= c->end || *c->p != '"') return 0; /* not a string: the exact parser says so */
        c->p++;
        if (!jl_string(c, f->out, &f->out_end, NULL)) return 0;
      } else if (f2 != NULL && (size_t)(k1 - k0) == f2->key_len && memcmp(k0, f2->key, f2->key_len) == 0) {
        const uint8_t *v = c->p;
        if (f2->found == 0 && v < c->end && *v == '"') {
          c->p = v + 1;
          if (jl_string(c, f2->out, &f2->out_end, NULL)) {
            f2->found = 1;
          } else { /* not decodable here (a lone surrogate escape): valid JSON or not? */
            c->p = v;
            f2->found = 2;
            if (!jl_value(c, depth + 1)) return 0;
          }
        } else {
          f2->found = 2; /* twice (Python keeps the last), or not a string */
          if (!jl_value(c, depth + 1)) return 0;
        }
      } else if (!jl_value(c, depth + 1)) {
        return 0;
      }
    } else if (!jl_value(c, depth + 1)) {
      return 0;
    }
    int next = jl_next_member(c, '}');
    if (next != 1) return next == 2;
  }
}

static int jl_value(jl_cur *c, int depth) {
  if (depth > LM_JSONL_MAX_DEPTH || c->p >= c->end) return 0;
  uint8_t ch = *c->p;
  switch (ch) {
    case '"':
      c->p++;
      return jl_string(c, NULL, NULL, NULL);
    case '{':
      c->p++;
      return jl_object(c, depth, NULL, NULL);
    case '[':
      c->p++;
      return jl_array(c, depth);
    case 't': return jl_literal(c, "true", 4);
    case 'f': return jl_literal(c, "false", 5);
    case 'n': return jl_literal(c, "null", 4);
    default:
      if (ch == '-' || (ch >= '0' && ch <= '9')) return jl_number(c);
      return 0;
  }
}

lm_status lm_jsonl_count_lines(const uint8_t *buf, size_t len, size_t *n_lines) {
  if (n_lines == NULL || (buf == NULL && len > 0)) return LM_EINVAL;
  size_t n = 0;
  const uint8_t *p = buf, *end = buf + len;
  while (p < end) {
    const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
    n++;
    if (nl == NULL) break;
    p = nl + 1;
  }
  *n_lines = n;
  return LM_OK;
}

lm_status lm_jsonl_scan(const uint8_t *buf, size_t len, const uint8_t *key, size_t key_len,
                        int64_t max_line_bytes, uint8_t *text_out, int64_t *text_offsets,
                        int64_t *line_ends, int8_t *status, size_t lines_cap, size_t *n_ok) {
  return lm_jsonl_scan2(buf, len, key, key_len, NULL, 0, max_line_bytes, text_out, text_offsets, NULL, NULL, NULL,
                        line_ends, status, lines_cap, n_ok);
}

lm_status lm_jsonl_scan2(const uint8_t *buf, size_t len, const uint8_t *key, size_t key_len, const uint8_t *key2,
                         size_t key2_len, int64_t max_line_bytes, uint8_t *text_out, int64_t *text_offsets,
                         uint8_t *key2_out, int64_t *key2_offsets, int8_t *key2_ok, int64_t *line_ends,
                         int8_t *status, size_t lines_cap, size_t *n_ok) {
  if ((buf == NULL && len > 0) || key == NULL || key_len == 0 || text_offsets == NULL || n_ok == NULL ||
      (len > 0 && (text_out == NULL || line_ends == NULL || status == NULL)))
    return LM_EINVAL;
  if (key2 != NULL && (key2_len == 0 || key2_offsets == NULL || (len > 0 && (key2_out == NULL || key2_ok == NULL))))
    return LM_EINVAL;
  size_t line = 0, ok = 0;
  int64_t tpos = 0, kpos = 0;
  text_offsets[0] = 0;
  if (key2 != NULL) key2_offsets[0] = 0;
  const uint8_t *p = buf, *end = buf + len;
  while (p < end) {
    if (line >= lines_cap) return LM_EINVAL;
    const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
    const uint8_t *le = nl != NULL ? nl + 1 : end; /* past the line */
    size_t n = (size_t)(le - p);
    size_t body = n;
    if (nl != NULL) body = (n >= 2 && p[n - 2] == '\r') ? n - 2 : n - 1;
    int8_t st;
    if (max_line_bytes >= 0 && (uint64_t)body > (uint64_t)max_line_bytes) {
      st = LM_JSONL_TOO_LONG;
    } else {
      const uint8_t *q = p;
      while (q < le && jl_strip_ws(*q)) q++;
      if (q == le) {
        st = LM_JSONL_BLANK;
      } else {
        jl_cur c = {p, le};
        jl_skip_ws(&c); /* JSON whitespace only: a leading \v or \f is malformed JSON */
        st = LM_JSONL_SLOW;
        if (c.p < le && *c.p == '{') {
          c.p++;
          /* the decoded values never outrun the line's bytes: text_out + tpos and key2_out +
           * kpos stay at or before the line's offset in buf (see jl_run_avx2's stores) */
          jl_field f = {key, key_len, text_out + tpos, NULL, 0};
          jl_field f2 = {key2, key2_len, key2 != NULL ? key2_out + kpos : NULL, NULL, 0};
          if (jl_object(&c, 1, &f, key2 != NULL ? &f2 : NULL) && f.found) {
            jl_skip_ws(&c);
            if (c.p == le) {
              st = LM_JSONL_OK;
              tpos = (int64_t)(f.out_end - text_out);
              text_offsets[++ok] = tpos;
              if (key2 != NULL) {
                key2_ok[ok - 1] = (int8_t)(f2.found == 1);
                if (f2.found == 1) kpos = (int64_t)(f2.out_end - key2_out);
                key2_offsets[ok] = kpos;
              }
            }
          }
        }
      }
    }
    line_ends[line] = (int64_t)(le - buf);
    status[line] = st;
    line++;
    p = le;
  }
  *n_ok = ok;
  return LM_OK;
}
