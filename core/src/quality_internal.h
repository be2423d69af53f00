/* quality_internal.h — private to the QualityFilter's .c files.
 *
 * Character classes: quality_tables.c is generated from the reference's own
 * data (datatrove's PUNCTUATION_SET / TERMINAL_PUNCTUATION, Python's
 * str.isspace / str.isalpha / str.splitlines / re's \d, Unicode category P*,
 * and spaCy's English tokenizer classes, exceptions, units and currencies)
 * by a short Python script that tests every code point against those
 * definitions (the script is described in quality.h's notes; regenerate when
 * the reference changes).
 *
 * The English word tokenizer (quality_words.c) reproduces spaCy's rule-based
 * tokenizer (`spacy.blank("en")`, which is what datatrove's
 * split_into_words(..., "en") uses): whitespace splitting, special cases,
 * prefix / suffix / infix rules and URL matching.
 */
#ifndef LUMINAMOON_QUALITY_INTERNAL_H
#define LUMINAMOON_QUALITY_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum {
  LMQ_F_SPACE = 1u << 0,        /* Python str.isspace */
  LMQ_F_PYALPHA = 1u << 1,      /* Python str.isalpha */
  LMQ_F_PUNCTSET = 1u << 2,     /* datatrove PUNCTUATION_SET */
  LMQ_F_TERMINAL = 1u << 3,     /* datatrove TERMINAL_PUNCTUATION */
  LMQ_F_SP_ALPHA = 1u << 4,     /* spaCy ALPHA */
  LMQ_F_SP_LOWER = 1u << 5,     /* spaCy ALPHA_LOWER */
  LMQ_F_SP_UPPER = 1u << 6,     /* spaCy ALPHA_UPPER */
  LMQ_F_ICON = 1u << 7,         /* spaCy LIST_ICONS */
  LMQ_F_ISPUNCT = 1u << 8,      /* Unicode category P* (spaCy is_punct) */
  LMQ_F_SENT_PUNCT = 1u << 9,   /* spaCy Sentencizer punct_chars */
  LMQ_F_UDIGIT = 1u << 10,      /* Python re \d (category Nd) */
  LMQ_F_LINEBREAK = 1u << 11,   /* Python str.splitlines boundaries */
  LMQ_F_DOT_SUFFIX_LB = 1u << 12, /* lookbehind class of spaCy's "." suffix rule */
  LMQ_F_PREFIX_CHAR = 1u << 13, /* a one-character spaCy prefix */
  LMQ_F_SUFFIX_CHAR = 1u << 14, /* a one-character spaCy suffix */
  LMQ_F_INFIX_DOT_LB = 1u << 15, /* [ALPHA_LOWER + quotes] */
  LMQ_F_INFIX_DOT_LA = 1u << 16, /* [ALPHA_UPPER + quotes] */
  LMQ_F_QUOTE = 1u << 17        /* spaCy CONCAT_QUOTES */
};

typedef struct {
  uint32_t lo, hi, flags;
} lmq_range;

typedef struct {
  const char *key;
  uint16_t len;
  uint8_t ntok;
  uint8_t toklen[3];
} lmq_special;

extern const uint32_t lmq_ascii_flags[128];
extern const lmq_range lmq_ranges[];
extern const size_t lmq_n_ranges;
extern const char *const lmq_units[];
extern const size_t lmq_n_units;
extern const char *const lmq_currency[];
extern const size_t lmq_n_currency;
extern const lmq_special lmq_specials[];
extern const size_t lmq_n_specials;

static inline uint32_t lmq_flags(uint32_t cp) {
  if (cp < 128) return lmq_ascii_flags[cp];
  size_t lo = 0, hi = lmq_n_ranges;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (cp < lmq_ranges[mid].lo) hi = mid;
    else if (cp > lmq_ranges[mid].hi) lo = mid + 1;
    else return lmq_ranges[mid].flags;
  }
  return 0;
}

/* Decode one code point at s[i] (i < n); returns its byte length (>= 1).
 * Invalid UTF-8 decodes as one U+FFFD per byte (the filter expects cleaned
 * text; this only keeps it defined). */
static inline size_t lmq_decode(const uint8_t *s, size_t n, size_t i, uint32_t *cp) {
  uint8_t c = s[i];
  if (c < 0x80) { *cp = c; return 1; }
  if (c >= 0xC2 && c <= 0xDF && i + 1 < n && (s[i + 1] & 0xC0) == 0x80) {
    *cp = ((uint32_t)(c & 0x1F) << 6) | (s[i + 1] & 0x3F);
    return 2;
  }
  if (c >= 0xE0 && c <= 0xEF && i + 2 < n && (s[i + 1] & 0xC0) == 0x80 && (s[i + 2] & 0xC0) == 0x80) {
    uint32_t v = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
    if (v >= 0x800 && (v < 0xD800 || v > 0xDFFF)) { *cp = v; return 3; }
  }
  if (c >= 0xF0 && c <= 0xF4 && i + 3 < n && (s[i + 1] & 0xC0) == 0x80 && (s[i + 2] & 0xC0) == 0x80 &&
      (s[i + 3] & 0xC0) == 0x80) {
    uint32_t v = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) |
                 ((uint32_t)(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
    if (v >= 0x10000 && v <= 0x10FFFF) { *cp = v; return 4; }
  }
  *cp = 0xFFFD;
  return 1;
}

/* ---- tokenizer (quality_words.c) ---- */

/* Token attributes. */
enum {
  LMQ_T_WS = 1u << 0,        /* whitespace token (dropped from "words") */
  LMQ_T_NONSYMBOL = 1u << 1, /* has a character outside PUNCTUATION_SET */
  LMQ_T_ALPHA = 1u << 2,     /* has a str.isalpha character */
  LMQ_T_ALLPUNCT = 1u << 3,  /* every character is category P* (spaCy is_punct) */
  LMQ_T_SENTP = 1u << 4,     /* the token is one Sentencizer punct char */
  LMQ_T_STOP = 1u << 5       /* equals one of the stop words (set by the rules) */
};

/* One token: 8 bytes; its attributes (LMQ_T_*) are in the parallel byte array
 * lmq_tokbuf.attr, and its code-point length is computed when needed
 * (lmq_cp_count), so a document where every byte is a token costs 9 bytes of
 * token memory per input byte. */
typedef struct {
  uint32_t off;   /* byte offset in the text */
  uint32_t len;   /* bytes */
} lmq_tok;

typedef struct {
  uint32_t *slot; /* index+1 into lmq_specials; 0 = empty */
  size_t mask;
  size_t max_len;         /* longest special case (bytes) */
  uint64_t first[4];      /* bit b: some special case starts with byte b */
  uint64_t bloom[1024];   /* bit lmq_special_bloom(key): some special case may be that key */
  /* the currency and unit literals by their last byte: unit_lit[unit_at[b] .. unit_at[b+1]) */
  uint16_t unit_at[257];
  const char *unit_lit[256];
  uint8_t unit_len[256];
} lmq_special_index;

/* Bloom position of a special-case candidate s[0..n) (n >= 1). */
static inline size_t lmq_special_bloom(const uint8_t *s, size_t n) {
  return ((size_t)s[0] * 31u + (size_t)s[n - 1] * 131u + (size_t)s[n / 2] * 7u + n * 2053u) & 0xFFFFu;
}

int lmq_special_index_build(lmq_special_index *ix);
void lmq_special_index_free(lmq_special_index *ix);

/* Per-thread scratch reused across documents.
 * With `sink` set, tokens are not stored: each is passed to sink(sink_ctx, off, len, attr)
 * in order (a non-zero return aborts lmq_tokenize with -1). */
typedef struct {
  lmq_tok *tok;
  uint8_t *attr;          /* LMQ_T_* of tok[k] */
  size_t ntok, cap_tok;   /* tok and attr both have cap_tok elements */
  size_t max_tok;         /* set by lmq_tokenize: ntok can not exceed it (growth stops there) */
  uint32_t *cp, *bo, *fl; /* code points of one non-ASCII span, byte offsets, flags */
  size_t cap_cp;
  uint64_t *cut;          /* bitmap over the span's code points: suffix cut points */
  size_t cap_cut;         /* words */
  int (*sink)(void *ctx, uint32_t off, uint32_t len, uint32_t attr);
  void *sink_ctx;
} lmq_tokbuf;

void lmq_tokbuf_free(lmq_tokbuf *b);
/* Bytes held by the buffer's arrays (capacity). */
size_t lmq_tokbuf_bytes(const lmq_tokbuf *b);

/* Tokenize s[0..n) like spaCy's English tokenizer; appends to b->tok / b->attr
 * (after resetting ntok when `reset`), or passes each token to b->sink.
 * Whitespace tokens are kept (attribute LMQ_T_WS).  `base` is added to every
 * token offset.  Linear in n: memory is the tokens (9 B each) plus 12 B per
 * code point of the longest non-ASCII whitespace-free span (none for ASCII).
 * Returns 0, or -1 on allocation failure. */
int lmq_tokenize(const lmq_special_index *ix, const uint8_t *s, size_t n, uint32_t base,
                 lmq_tokbuf *b, int reset);

/* Work counter for the tests: how many times this thread matched the 146
 * currency/unit suffix literals against a token end (find_suffix). */
uint64_t lmq_debug_unit_scans(void);
/* Work counter for the tests: how many slot arrays this thread took as a mapping of their own
 * (the huge-page path of the n-gram sets, quality_rules.c slots_alloc). */
uint64_t lmq_debug_set_maps(void);
/* 1 when this build maps big slot arrays (Linux, not under AddressSanitizer). */
int lmq_set_maps_built(void);

/* Code points (Python len) in s[0..n). */
static inline size_t lmq_cp_count(const uint8_t *s, size_t n) {
  /* n minus the continuation bytes (10xxxxxx), 8 bytes at a time */
  size_t cont = 0, i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v;
    memcpy(&v, s + i, 8);
    uint64_t m = (v & ~(v << 1)) & 0x8080808080808080ull; /* bit 7 set, bit 6 clear */
    cont += (size_t)(((m >> 7) * 0x0101010101010101ull) >> 56);
  }
  for (; i < n; i++) cont += (s[i] & 0xC0) == 0x80;
  return n - cont;
}

/* Byte runs, 8 bytes at a time (SWAR, little-endian loads; byte by byte
 * elsewhere and for the last < 8 bytes: nothing is read at or past n).
 * lmq_letters_end: the first i' >= i where s[i'] is not an ASCII letter
 * ((s[i'] | 32) - 'a' >= 26 as a byte) or n.
 * lmq_graphic_end: the first i' >= i where s[i'] is not in 0x21..0x7F, or n. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define LMQ_SWAR_LE 1
#else
#define LMQ_SWAR_LE 0
#endif
#define LMQ_B7 0x8080808080808080ull
#define LMQ_ONES 0x0101010101010101ull
static inline size_t lmq_letters_end(const uint8_t *s, size_t i, size_t n) {
#if LMQ_SWAR_LE
  while (i + 8 <= n) {
    uint64_t v;
    memcpy(&v, s + i, 8);
    uint64_t x = (v | 0x20 * LMQ_ONES) & 0x7F * LMQ_ONES; /* lower-cased low 7 bits: no carry below */
    uint64_t ge_a = x + 0x1F * LMQ_ONES;                  /* bit 7: x >= 'a' */
    uint64_t gt_z = x + 0x05 * LMQ_ONES;                  /* bit 7: x > 'z' */
    uint64_t bad = (~ge_a | gt_z | v) & LMQ_B7;           /* not a letter (or not ASCII) */
    if (bad) return i + ((size_t)__builtin_ctzll(bad) >> 3);
    i += 8;
  }
#endif
  while (i < n && (uint8_t)((s[i] | 32) - 'a') < 26) i++;
  return i;
}
static inline size_t lmq_graphic_end(const uint8_t *s, size_t i, size_t n) {
#if LMQ_SWAR_LE
  while (i + 8 <= n) {
    uint64_t v;
    memcpy(&v, s + i, 8);
    uint64_t gt20 = (v & 0x7F * LMQ_ONES) + 0x5F * LMQ_ONES; /* bit 7: low 7 bits >= 0x21 */
    uint64_t bad = (~gt20 | v) & LMQ_B7;                       /* <= 0x20 or >= 0x80 */
    if (bad) return i + ((size_t)__builtin_ctzll(bad) >> 3);
    i += 8;
  }
#endif
  while (i < n && s[i] > 0x20 && s[i] < 0x80) i++;
  return i;
}

/* ---- the filter object and its scratch (quality.c, quality_rules.c) ---- */
#include "luminamoon/quality.h"

/* Gopher repetition n-grams: a polynomial hash of the words' bytes, mod 2^32
 * (quality_rules.c).  pw[k] = base^k for short
 * n-grams (longer ones compute the power). */
#define LMQ_POW_N 4096

struct lm_quality {
  lm_quality_params p;
  lmq_special_index ix;
  lm_quality_counters counters;
  uint32_t pw[LMQ_POW_N];
};

/* One slot of an lmq_set: in use when gen equals the set's generation (an
 * emptied set starts a new generation instead of clearing its slots). */
typedef struct {
  uint64_t h;   /* hash | 1 */
  uint32_t a;   /* element: start */
  uint32_t b;   /* element: end (exclusive) */
  uint32_t cnt; /* occurrences */
  uint32_t gen;
} lmq_slot;

typedef struct {
  lmq_slot *e;
  size_t mask;   /* slots in use: mask + 1 (a power of two <= cap) */
  size_t cap;    /* slots allocated */
  size_t count;  /* occupied slots */
  uint32_t gen;  /* current generation (>= 1) */
  lmq_slot *tmp; /* set_grow's copy of the slots in use, kept with the set (no fresh pages per growth) */
  size_t cap_tmp; /* slots */
  /* e / tmp is a mapping of its own (huge arrays: slots_alloc in quality_rules.c), not malloc'd */
  uint8_t e_mapped, tmp_mapped;
} lmq_set;

struct lm_quality_scratch {
  lmq_tokbuf tb;          /* tokens of the whole text; after lmq_words only the words */
  size_t nw;              /* words: tb.tok[0..nw) */
  uint8_t *wb;            /* words concatenated (Gopher repetition n-grams) */
  size_t cap_wb, wb_len;
  uint32_t *wp;           /* wp[k]: the n-gram hash of wb before word k (nw + 1 values) */
  size_t cap_wp;          /* elements */
  uint32_t *wx;           /* n-gram passes: wo[nw + 1] (offset of word k in wb), a list of the
                             positions that can repeat (nw + 1), a bitmap over the positions */
  size_t cap_wx;          /* elements */
  uint8_t *text;          /* C4's rewritten text */
  size_t cap_text;
  uint8_t *line;          /* one C4 line with citations removed */
  size_t cap_line;
  lmq_set set;
};

/* Tokenize text into s->tb and keep only the words (non-whitespace tokens):
 * s->tb.tok[0..s->nw).  0 or -1 (ENOMEM). */
int lmq_words(const lm_quality *q, lm_quality_scratch *s, const uint8_t *text, size_t len);
void lmq_set_free(lmq_set *st);
/* Bytes the set holds (its slot arrays; a mapping counts whole). */
size_t lmq_set_bytes(const lmq_set *st);
/* Fill q->pw (lm_quality_create). */
void lmq_pow_init(lm_quality *q);

#endif
