/* quality_rules.c — the rules of the QualityFilter, one document at a time.
 * Each function mirrors the datatrove filter named above it (see quality.h). */
#define _GNU_SOURCE /* MAP_ANONYMOUS, MADV_HUGEPAGE, MADV_POPULATE_WRITE */
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/mman.h>
#endif

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

/* Slot arrays of LMQ_MAP_MIN bytes and more (the sets of a document of
 * megabytes: a 2 MB document's n-gram set is 24 MB) are a mapping of their
 * own, 2 MiB aligned, with transparent huge pages asked for (madvise; the
 * system default on most distributions) and populated writable in one call:
 * 12 page faults instead of ~6,000 for 24 MB, the kernel's zeroed pages need
 * no memset, and the random probes of a set larger than the L2 TLB's reach
 * (~12 MB with 4 KiB pages on Zen 4) stop missing it.  Each thread of a
 * FusedPipeline grows its own set for the documents it gets, so on 2 threads
 * these faults were paid twice (issue 14: the batch with the corpus's four
 * 2 MB documents scaled 1.87x where the others did 1.95-2.0x).  Elsewhere, or
 * when the mapping fails: malloc, cleared by a write (set_clear). */
#define LMQ_MAP_MIN ((size_t)4 << 20)
#define LMQ_MAP_ALIGN ((size_t)2 << 20)
/* Not under AddressSanitizer: its allocator watches malloc'd slot arrays (an
 * overrun of a mapping rounded to 2 MiB would go unseen), so sanitized builds
 * take the malloc path for every size. */
#if defined(__SANITIZE_ADDRESS__)
#define LMQ_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LMQ_SANITIZED 1
#endif
#endif
#if !defined(LMQ_SANITIZED) && defined(__linux__) && defined(MAP_ANONYMOUS) && defined(MADV_HUGEPAGE)
#define LMQ_USE_MAP 1
#else
#define LMQ_USE_MAP 0
#endif

static size_t map_bytes(size_t bytes) { return (bytes + LMQ_MAP_ALIGN - 1) & ~(LMQ_MAP_ALIGN - 1); }

static _Thread_local uint64_t set_maps;
uint64_t lmq_debug_set_maps(void) { return set_maps; }
int lmq_set_maps_built(void) { return LMQ_USE_MAP; }

/* Every slot zero (generation 0: empty).  *mapped = 1 for a mapping (free
 * it with slots_free and the same n).  NULL on ENOMEM / overflow. */
static void *(*const volatile set_clear)(void *, int, size_t) = memset; /* not folded into calloc */
static lmq_slot *slots_alloc(size_t n, int zero, uint8_t *mapped) {
  *mapped = 0;
  if (n > SIZE_MAX / sizeof(lmq_slot) / 2) return NULL;
  size_t bytes = n * sizeof(lmq_slot);
#if LMQ_USE_MAP
  if (bytes >= LMQ_MAP_MIN) {
    size_t len = map_bytes(bytes);
    char *m = (char *)mmap(NULL, len + LMQ_MAP_ALIGN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m != (char *)MAP_FAILED) {
      /* trim to a 2 MiB aligned [p, p + len) */
      char *p = (char *)(((uintptr_t)m + LMQ_MAP_ALIGN - 1) & ~(uintptr_t)(LMQ_MAP_ALIGN - 1));
      if (p > m) munmap(m, (size_t)(p - m));
      if (p + len < m + len + LMQ_MAP_ALIGN) munmap(p + len, (size_t)(m + len + LMQ_MAP_ALIGN - (p + len)));
      (void)madvise(p, len, MADV_HUGEPAGE); /* a hint */
      int populated = 0;
#ifdef MADV_POPULATE_WRITE
      populated = madvise(p, len, MADV_POPULATE_WRITE) == 0; /* written (zero) pages: no read-then-write fault */
#endif
      /* not populated (an older kernel): written first, see set_alloc */
      if (!populated && zero) set_clear(p, 0, bytes);
      *mapped = 1;
      set_maps++;
      return (lmq_slot *)(void *)p;
    }
  }
#endif
  lmq_slot *e = (lmq_slot *)malloc(bytes);
  if (e && zero) set_clear(e, 0, bytes);
  return e;
}

static void slots_free(lmq_slot *e, size_t n, uint8_t mapped) {
  if (!e) return;
#if LMQ_USE_MAP
  if (mapped) {
    munmap(e, map_bytes(n * sizeof(lmq_slot)));
    return;
  }
#else
  (void)n;
  (void)mapped;
#endif
  free(e);
}

void lmq_set_free(lmq_set *st) {
  slots_free(st->e, st->cap, st->e_mapped);
  slots_free(st->tmp, st->cap_tmp, st->tmp_mapped);
  memset(st, 0, sizeof *st);
}

size_t lmq_set_bytes(const lmq_set *st) {
  size_t e = st->cap * sizeof(lmq_slot), t = st->cap_tmp * sizeof(lmq_slot);
  return (st->e_mapped ? map_bytes(e) : e) + (st->tmp_mapped ? map_bytes(t) : t);
}

/* A new slot array, every slot empty (generation 0).  Not by calloc: calloc
 * leaves fresh pages unwritten, the probes then read them first (the kernel
 * maps its shared zero page) and the first write to each page replaces that
 * mapping, which flushes the TLB of every CPU running the process (an
 * inter-processor interrupt per page with two threads; it was most of the
 * extra CPU time of FusedPipeline on 2 threads).  Written (or populated
 * writable) first, a page costs one plain fault.  set_clear goes through a
 * volatile pointer: the compiler turns malloc + memset(0) into calloc.  The
 * copy buffer (set_grow) is kept. */
static int set_alloc(lmq_set *st, size_t cap) { /* st->e: none (freed); st->tmp is kept */
  st->e = slots_alloc(cap, 1, &st->e_mapped);
  if (!st->e) {
    lmq_set_free(st);
    return -1;
  }
  st->cap = cap;
  st->mask = cap - 1;
  st->count = 0;
  st->gen = 1;
  return 0;
}

/* Start a new generation: every slot of the allocation is empty again. */
static void set_next_gen(lmq_set *st) {
  if (++st->gen == 0) { /* wrapped: clear the stamps once per 2^32 resets */
    memset(st->e, 0, st->cap * sizeof(lmq_slot));
    st->gen = 1;
  }
}

/* Empty the set, expecting about `hint` elements (it grows past that as
 * needed: its memory follows the distinct elements, not the text).  Keeps
 * the allocation (set_doc_start drops a huge one).  No clearing: the set
 * moves to a new generation. */
#define SET_MAX_HINT ((size_t)1 << 12)
static int set_reset(lmq_set *st, size_t hint) {
  size_t need = 16; /* the slots `hint` elements need (load <= 1/2) */
  while (need < 2 * hint + 2) need <<= 1;
  if (hint > SET_MAX_HINT) hint = SET_MAX_HINT;
  size_t cap = 16;
  while (cap < 2 * hint + 2) cap <<= 1;
  /* Start from the slots the previous pass ended with, up to `need`: the
   * passes of one big document (top 2..4-grams, dup 5..10-grams) each grew
   * from the capped hint again, 6 rehashes a pass for a 2 MB document (issue
   * 14: set_grow + its copies were ~3% of a corpus run).  Uses the kept
   * allocation: no new memory, no clearing. */
  if (st->e && st->mask + 1 > cap) cap = st->mask + 1 < need ? st->mask + 1 : need;
  if (cap > st->cap) {
    slots_free(st->e, st->cap, st->e_mapped);
    st->e = NULL;
    st->cap = 0;
    return set_alloc(st, cap);
  }
  st->mask = cap - 1; /* use the front of a larger allocation */
  st->count = 0;
  set_next_gen(st);
  return 0;
}

/* Before a document of n bytes: a set grown huge by an earlier document is
 * freed unless this one could need a quarter of it (its elements, words or
 * lines, are at most n + 1).  Per document, not per pass: every pass of one
 * huge document grew the set from the hint again (each pass freed it). */
static void set_doc_start(lmq_set *st, size_t n) {
  if (st->cap > 64 * SET_MAX_HINT && st->cap / 4 > 2 * (n + 1)) lmq_set_free(st);
}

/* Double the slots in use (load above 1/2). */
static int set_grow(lmq_set *st) {
  size_t used = st->mask + 1, cap = 2 * used;
  uint32_t old_gen = st->gen;
  lmq_slot *old;
  size_t old_cap = st->cap;
  uint8_t old_mapped = st->e_mapped;
  int keep_old = 0;
  if (cap <= st->cap) { /* the allocation is large enough: rehash through a copy of the used part */
    if (used > st->cap_tmp) { /* the copy buffer, kept with the set (grows to half the allocation at most) */
      uint8_t m;
      lmq_slot *t = slots_alloc(used, 0, &m);
      if (!t) return -1;
      slots_free(st->tmp, st->cap_tmp, st->tmp_mapped);
      st->tmp = t;
      st->cap_tmp = used;
      st->tmp_mapped = m;
    }
    old = st->tmp;
    keep_old = 1;
    memcpy(old, st->e, used * sizeof(lmq_slot));
    set_next_gen(st);
    st->mask = cap - 1;
  } else {
    lmq_set big;
    memset(&big, 0, sizeof big);
    if (set_alloc(&big, cap)) return -1;
    old = st->e;
    big.tmp = st->tmp;
    big.cap_tmp = st->cap_tmp;
    big.tmp_mapped = st->tmp_mapped;
    *st = big;
  }
  size_t count = 0;
  uint32_t gen = st->gen;
  for (size_t k = 0; k < used; k++) {
    if (old[k].gen != old_gen) continue;
    uint64_t h = old[k].h;
    size_t i = (size_t)(h ^ (h >> 32)) & st->mask;
    while (st->e[i].gen == gen) i = (i + 1) & st->mask;
    st->e[i] = old[k];
    st->e[i].gen = gen;
    count++;
  }
  st->count = count;
  if (!keep_old) slots_free(old, old_cap, old_mapped);
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
  uint32_t gen = st->gen;
  for (;;) {
    lmq_slot *e = &st->e[i];
    if (e->gen != gen) {
      if (2 * (st->count + 1) > st->mask + 1) {
        if (set_grow(st)) return SIZE_MAX;
        gen = st->gen;
        i = (size_t)(h ^ (h >> 32)) & st->mask;
        while (st->e[i].gen == gen) i = (i + 1) & st->mask;
        e = &st->e[i];
      }
      e->h = h;
      e->a = a;
      e->b = b;
      e->cnt = 1;
      e->gen = gen;
      st->count++;
      *seen = 0;
      return i;
    }
    if (e->h == h && eq(ctx, e->a, e->b, a, b)) {
      e->cnt++;
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
    if (i + 8 <= n) { /* 8 bytes in [0x20, 0x80): no line break among them */
      uint64_t v;
      memcpy(&v, s + i, 8);
      if (!((((v - 0x2020202020202020ull) & ~v) | v) & 0x8080808080808080ull)) {
        i += 8;
        continue;
      }
    }
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

/* ---- n-gram hash: a polynomial in the bytes (each byte + 1), mod 2^32 ----
 * It depends on the bytes only (not on where the words split them), so
 * "".join n-grams that are equal have equal hashes; from the prefix values at
 * the word boundaries (wp) every n-gram's hash costs one multiplication,
 * instead of hashing its bytes again for each n and each window (XXH3 per
 * n-gram before).  The values only place elements in the sets (equality is
 * always compared), so they never decide anything.  Crafted text can make
 * n-grams collide (strings built from Thue-Morse blocks hash alike for any
 * odd base); that costs probes, at most 2^n per n-gram shape, never a
 * different decision. */
#define HBASE 0x5BD1E995u /* odd */
#define HB2 ((uint32_t)(HBASE * HBASE)) /* powers mod 2^32 (unsigned: wraps) */
#define HB3 ((uint32_t)(HB2 * HBASE))
#define HB4 ((uint32_t)(HB3 * HBASE))

void lmq_pow_init(lm_quality *q) {
  uint32_t v = 1;
  for (size_t k = 0; k < LMQ_POW_N; k++) {
    q->pw[k] = v;
    v *= HBASE;
  }
}

static uint32_t pow_len_slow(size_t len) {
  uint32_t r = 1, b = HBASE;
  for (; len; len >>= 1) {
    if (len & 1) r *= b;
    b *= b;
  }
  return r;
}

/* Set key of the n-gram of words [i, i + ng), whose bytes (in wb) are len long. */
static inline uint64_t ngram_key(const lm_quality *q, const uint32_t *wp, size_t i, size_t ng, size_t len) {
  uint32_t pw = __builtin_expect(len < LMQ_POW_N, 1) ? q->pw[len] : pow_len_slow(len);
  uint32_t h = wp[i + ng] - wp[i] * pw;
  return ((uint64_t)h + 1) * 0x9E3779B97F4A7C15ull; /* spread over the 64 bits (the set takes h ^ h >> 32) */
}

/* Build wb: the words concatenated (word k's bytes follow word k-1's), and
 * wp: the hash of wb's bytes before each word.  With `index`, also s->wx:
 * wo[0..nw] (word k's offset in wb), room for one position list of nw + 1 and
 * a bitmap over the positions (the n-gram passes then visit only the
 * positions that can repeat); 8 bytes a word, so only asked for when words
 * average 4 bytes or more (the scratch stays within its bytes per input byte). */
#ifndef LMQ_INDEX_WORD_BYTES /* (a test build sets 0: always, or a large value: never) */
#define LMQ_INDEX_WORD_BYTES 4
#endif
static int build_word_buffers(lm_quality_scratch *s, const uint8_t *text, int index) {
  size_t nw = s->nw, bytes = 0;
  const lmq_tok *w = s->tb.tok;
  for (size_t i = 0; i < nw; i++) bytes += w[i].len;
  if (reserve(&s->wb, &s->cap_wb, bytes + 1)) return -1;
  if (nw + 1 > s->cap_wp) {
    void *p = realloc(s->wp, (nw + 1) * sizeof(uint32_t));
    if (!p) return -1;
    s->wp = (uint32_t *)p;
    s->cap_wp = nw + 1;
  }
  size_t nx = 2 * (nw + 1) + 2 * ((nw + 63) / 64); /* wo, a position list, a bitmap (uint64) */
  if (index && nx > s->cap_wx) {
    void *p = realloc(s->wx, nx * sizeof(uint32_t));
    if (!p) return -1;
    s->wx = (uint32_t *)p;
    s->cap_wx = nx;
  }
  uint32_t *wo = index ? s->wx : NULL;
  size_t o = 0;
  uint32_t h = 0;
  uint8_t *wb = s->wb;
  uint32_t *wp = s->wp;
  for (size_t i = 0; i < nw; i++) {
    const uint8_t *src = text + w[i].off;
    size_t len = w[i].len;
    wp[i] = h;
    if (wo) wo[i] = (uint32_t)o;
    /* copy and hash in one pass, 4 bytes a step (the same value mod 2^32 as
     * h = h * HBASE + src[k] + 1 byte by byte; a shorter dependency chain and no
     * memcpy call for the short words) */
    uint8_t *dst = wb + o;
    size_t k = 0;
    for (; k + 4 <= len; k += 4) {
      uint32_t b0 = src[k], b1 = src[k + 1], b2 = src[k + 2], b3 = src[k + 3];
      dst[k] = (uint8_t)b0;
      dst[k + 1] = (uint8_t)b1;
      dst[k + 2] = (uint8_t)b2;
      dst[k + 3] = (uint8_t)b3;
      h = h * HB4 + (b0 + 1u) * HB3 + (b1 + 1u) * HB2 + (b2 + 1u) * HBASE + b3 + 1u;
    }
    for (; k < len; k++) {
      dst[k] = src[k];
      h = h * HBASE + src[k] + 1u;
    }
    o += len;
  }
  wp[nw] = h;
  if (wo) wo[nw] = (uint32_t)o;
  s->wb_len = o;
  return 0;
}

/* The n-gram passes: the set probed inline with its state in locals (in the
 * rule function the compiler kept it on the stack: ~80 instructions per
 * n-gram); the rare growth goes through set_grow. */

/* Slot for a new element after the set grew (the probe restarts). */
static size_t set_free_slot(const lmq_set *st, uint64_t h) {
  size_t i = (size_t)(h ^ (h >> 32)) & st->mask;
  while (st->e[i].gen == st->gen) i = (i + 1) & st->mask;
  return i;
}

/* Counter of the " ".join n-grams of words [i, i + ng): elements are (offset
 * in wb, index of the first word), equal when their words are, one by one;
 * the most frequent, ties to the first seen (nw >= ng).
 * Only the positions cand[0..ncand) (in order; cand NULL: every position) are
 * counted: an n-gram that occurs twice has its (n-1)-gram prefix occur twice,
 * so the positions whose (n-1)-gram repeats (the previous pass's *rep_list)
 * hold every n-gram with a count >= 2, counted exactly and met in the same
 * order; when none repeats the answer is the first n-gram (count 1), as in
 * the full count.  rep_list[0..*nrep) receives the positions whose n-gram
 * repeats, in order (mark: a bitmap over the positions, scratch). */
static __attribute__((noinline)) int top_pass(const lm_quality *q, lmq_set *st, const lmq_tok *w, const uint32_t *wo,
                                              const uint8_t *wb, const uint32_t *wp, size_t nw, size_t ng,
                                              const uint32_t *cand, size_t ncand, uint64_t *mark, uint32_t *rep_list,
                                              size_t *nrep, uint32_t *best_cnt_out, uint32_t *best_first_out,
                                              uint32_t *best_word_out) {
  lmq_slot *E = st->e;
  size_t mask = st->mask, count = st->count, limit = (mask + 1) / 2;
  uint32_t gen = st->gen;
  uint32_t best_cnt = 0, best_first = 0, best_word = 0;
  size_t np = nw - ng + 1, nm = (np + 63) / 64, total = cand ? ncand : np;
  if (mark) memset(mark, 0, nm * sizeof(uint64_t));
  uint32_t a = 0, e = 0; /* wb span of words [i, i + ng) */
  if (!wo)
    for (size_t t2 = 0; t2 < ng; t2++) e += w[t2].len;
  for (size_t p = 0; p < total; p++) {
    size_t i = cand ? cand[p] : p;
    if (i >= np) break;
    if (wo) {
      a = wo[i];
      e = wo[i + ng];
    } else if (i) {
      a += w[i - 1].len;
      e += w[i + ng - 1].len;
    }
    uint64_t h = ngram_key(q, wp, i, ng, e - a) | 1u;
    size_t k = (size_t)(h ^ (h >> 32)) & mask;
    lmq_slot *sl;
    for (;;) {
      sl = &E[k];
      if (sl->gen != gen) break;
      if (sl->h == h) {
        uint32_t i0 = sl->b;
        size_t t2 = 0;
        while (t2 < ng && w[i0 + t2].len == w[i + t2].len) t2++;
        if (t2 == ng && memcmp(wb + sl->a, wb + a, e - a) == 0) break;
      }
      k = (k + 1) & mask;
    }
    uint32_t c, first;
    if (sl->gen == gen) {
      c = ++sl->cnt;
      first = sl->a;
      if (mark) {
        if (c == 2) mark[sl->b >> 6] |= (uint64_t)1 << (sl->b & 63);
        mark[i >> 6] |= (uint64_t)1 << (i & 63);
      }
    } else {
      if (count + 1 > limit) {
        st->count = count;
        if (set_grow(st)) return -1;
        E = st->e;
        mask = st->mask;
        count = st->count;
        gen = st->gen;
        limit = (mask + 1) / 2;
        sl = &E[set_free_slot(st, h)];
      }
      *sl = (lmq_slot){h, a, (uint32_t)i, 1, gen};
      count++;
      c = 1;
      first = a;
    }
    if (c > best_cnt || (c == best_cnt && first < best_first)) {
      best_cnt = c;
      best_first = first;
      best_word = sl->b;
    }
  }
  st->count = count;
  if (best_cnt < 2) { /* no n-gram repeats: the first one, once */
    best_cnt = 1;
    best_first = 0;
    best_word = 0;
  }
  size_t nr = 0;
  if (mark) /* after the loop: rep_list may be cand */
    for (size_t m = 0; m < nm; m++)
      for (uint64_t v = mark[m]; v; v &= v - 1) rep_list[nr++] = (uint32_t)(m * 64 + (size_t)__builtin_ctzll(v));
  *nrep = nr;
  *best_cnt_out = best_cnt;
  *best_first_out = best_first;
  *best_word_out = best_word;
  return 0;
}

/* ---- duplicated n-grams: the positions that can repeat ----
 * Two "".join n-grams (n >= 5) at word positions i != j that are equal have
 * one length L >= both 5-gram lengths L5_i, L5_j.  If L >= 16, the 16 bytes of
 * wb at a_i and at a_j are equal (and both lie inside wb); if L < 16, both
 * L5 < 16.  So an n-gram at i can only equal another one when L5_i < 16, or
 * the 16 bytes at a_i are not inside wb, or they occur at another position's
 * start too: the candidates.  Any other n-gram is never found again and never
 * finds an earlier one, so the greedy passes skip it (it is left out of the
 * set) with the same result.  The 16-byte keys are compared exactly. */
static inline int eq16(const void *ctx, uint32_t a0, uint32_t b0, uint32_t a, uint32_t b) {
  (void)b0;
  (void)b;
  const uint8_t *wb = (const uint8_t *)ctx;
  uint64_t x0, x1, y0, y1;
  memcpy(&x0, wb + a0, 8);
  memcpy(&x1, wb + a0 + 8, 8);
  memcpy(&y0, wb + a, 8);
  memcpy(&y1, wb + a + 8, 8);
  return ((x0 ^ y0) | (x1 ^ y1)) == 0;
}

/* cand[0..*ncand): the candidate positions of [0, nw - 4) in order (nw >= 5). */
static int dup_candidates(lmq_set *st, const uint8_t *wb, size_t wb_len, const uint32_t *wo, size_t nw,
                          uint32_t *cand, uint64_t *mark, size_t *ncand) {
  size_t np = nw - 4, nm = (np + 63) / 64;
  memset(mark, 0, nm * sizeof(uint64_t));
  if (set_reset(st, np)) return -1;
  for (size_t i = 0; i < np; i++) {
    uint32_t a = wo[i];
    if (wo[i + 5] - a < 16) mark[i >> 6] |= (uint64_t)1 << (i & 63);
    if ((size_t)a + 16 > wb_len) {
      mark[i >> 6] |= (uint64_t)1 << (i & 63);
      continue;
    }
    uint64_t k0, k1;
    memcpy(&k0, wb + a, 8);
    memcpy(&k1, wb + a + 8, 8);
    uint64_t h = (k0 ^ (k1 * 0x9E3779B97F4A7C15ull)) * 0xFF51AFD7ED558CCDull;
    int seen;
    size_t sl = set_add_eq(st, h, a, (uint32_t)i, eq16, wb, &seen);
    if (sl == SIZE_MAX) return -1;
    if (seen) {
      uint32_t first = st->e[sl].b;
      mark[first >> 6] |= (uint64_t)1 << (first & 63);
      mark[i >> 6] |= (uint64_t)1 << (i & 63);
    }
  }
  size_t nc = 0;
  for (size_t m = 0; m < nm; m++)
    for (uint64_t v = mark[m]; v; v &= v - 1) cand[nc++] = (uint32_t)(m * 64 + (size_t)__builtin_ctzll(v));
  *ncand = nc;
  return 0;
}

/* The largest x >= -1 with (double)x / tc > thr false: for integers x >= 0,
 * x > frac_limit(thr, tc) exactly when the rule's (double)x / tc > thr holds
 * (tc > 0; the same double division decides, so the rounding is the rule's). */
static int64_t frac_limit(double thr, double tc) {
  const int64_t big = (int64_t)1 << 60;
  if (thr != thr) return big; /* NaN: the comparison is never true */
  double f = thr * tc;
  if (f >= 1e18) return big;
  int64_t x = f < 0 ? -1 : (int64_t)f;
  while (x + 1 < big && (double)(x + 1) / tc <= thr) x++;
  while (x >= 0 && (double)x / tc > thr) x--;
  return x;
}

/* find_all_duplicate: "".join n-grams of words, greedy left to right; *rep =
 * the code points of the repeated ones.  Elements are wb spans.
 * The caller only asks whether rep > lim (lim = frac_limit of the rule), so
 * the pass stops as soon as the answer is known: rep > lim (rep only grows),
 * or rep + the bytes of wb not yet passed <= lim (what is still to come adds
 * the code points of disjoint spans of wb[a..wb_len), at most its bytes).
 * *rep_out is then a value with the same answer. */
static __attribute__((noinline)) int dup_pass(const lm_quality *q, lmq_set *st, const lmq_tok *w, const uint32_t *wo,
                                              const uint8_t *wb, const uint32_t *wp, size_t nw, size_t ng,
                                              const uint32_t *cand, size_t ncand, size_t wb_len, int64_t lim,
                                              size_t *rep_out) {
  lmq_slot *E = st->e;
  size_t mask = st->mask, count = st->count, limit = (mask + 1) / 2;
  uint32_t gen = st->gen;
  size_t rep = 0, i = 0, last = nw - ng + 1, p = 0; /* nw >= ng */
  /* stop once rep + (wb_len - a) <= lim, i.e. a >= rep + wb_len - lim */
  int64_t stop_a = (int64_t)wb_len - lim;
  uint32_t a = 0, e = 0; /* wb span of words [i, i + ng) */
  if (!cand)
    for (size_t t2 = 0; t2 < ng; t2++) e += w[t2].len;
  for (;;) {
    if (cand) { /* the candidates only (wo: word offsets in wb) */
      while (p < ncand && cand[p] < i) p++; /* the positions before the next candidate never repeat */
      if (p == ncand || cand[p] >= last) break;
      i = cand[p];
      a = wo[i];
      e = wo[i + ng];
    } else if (i >= last) { /* every position, a and e kept up to date below */
      break;
    }
    if ((int64_t)a >= stop_a) break; /* the rest can not push rep past lim */
    uint32_t len = e - a;
    uint64_t h = ngram_key(q, wp, i, ng, len) | 1u;
    size_t k = (size_t)(h ^ (h >> 32)) & mask;
    int seen = 0;
    for (;;) {
      lmq_slot *sl = &E[k];
      if (sl->gen != gen) break;
      if (sl->h == h && sl->b - sl->a == len && memcmp(wb + sl->a, wb + a, len) == 0) {
        seen = 1;
        break;
      }
      k = (k + 1) & mask;
    }
    if (seen) {
      size_t c = cp_count(wb + a, len);
      rep += c;
      if ((int64_t)rep > lim) break; /* decided: over the limit */
      stop_a += (int64_t)c;
      i += ng;
      if (!cand) {
        a = e;
        if (i < last)
          for (size_t t2 = 0; t2 < ng; t2++) e += w[i + t2].len;
      }
      continue;
    }
    if (count + 1 > limit) {
      st->count = count;
      if (set_grow(st)) return -1;
      E = st->e;
      mask = st->mask;
      count = st->count;
      gen = st->gen;
      limit = (mask + 1) / 2;
      k = set_free_slot(st, h);
    }
    E[k] = (lmq_slot){h, a, e, 1, gen};
    count++;
    if (!cand) {
      a += w[i].len;
      if (i + 1 < last) e += w[i + ng].len;
    }
    i++;
  }
  st->count = count;
  *rep_out = rep;
  return 0;
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
      for (;;) { /* the next "\n\n" before b, or b */
        const uint8_t *nl = e < b ? (const uint8_t *)memchr(t + e, '\n', b - e) : NULL;
        if (!nl) { e = b; break; }
        e = (size_t)(nl - t);
        if (e + 1 < b && t[e + 1] == '\n') break;
        e++;
      }
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
      const uint8_t *nlp = i < n ? (const uint8_t *)memchr(t + i, '\n', n - i) : NULL;
      size_t e = nlp ? (size_t)(nlp - t) : n;
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
  size_t nw = s->nw;
  int index = (size_t)LMQ_INDEX_WORD_BYTES * nw <= n; /* see build_word_buffers */
  if (build_word_buffers(s, t, index)) return -1;
  const lmq_tok *w = s->tb.tok;
  const uint32_t *wo = index ? s->wx : NULL;
  size_t wb_len = s->wb_len;
  const uint8_t *wb = s->wb;
  const uint32_t *wp = s->wp;
  /* without the index: every position, one by one (wo, list, mark NULL) */
  uint32_t *list = index ? s->wx + (nw + 1) : NULL;
  /* the bitmap after wo and the list: 2 * (nw + 1) uint32 in, so 8-byte aligned */
  uint64_t *mark = index ? (uint64_t *)(void *)(s->wx + 2 * (nw + 1)) : NULL;
  /* top n-grams (n = 2..4): the most frequent " ".join of n words; ties go to
   * the first seen (Counter.most_common) */
  const uint32_t *tcand = NULL; /* the positions whose shorter n-gram repeats (NULL: all) */
  size_t ntcand = 0;
  for (int k = 0; k < 3; k++) {
    size_t ng = (size_t)k + 2;
    if (!ON(q, LM_Q_GR_TOP_2_GRAM + k) || nw < ng) continue;
    if (set_reset(&s->set, nw)) return -1;
    uint32_t best_cnt = 0, best_first = 0, best_word = 0;
    if (top_pass(q, &s->set, w, wo, wb, wp, nw, ng, tcand, ntcand, mark, list, &ntcand, &best_cnt, &best_first,
                 &best_word))
      return -1;
    tcand = list; /* rewritten after each pass has read it */
    size_t bytes = 0;
    for (size_t t2 = 0; t2 < ng; t2++) bytes += w[best_word + t2].len;
    double best_len = (double)cp_count(wb + best_first, bytes) + (double)(ng - 1);
    if (best_len * best_cnt / text_cp > p->gr_top_ngram_frac[k]) {
      *reason = LM_Q_GR_TOP_2_GRAM + k;
      return 0;
    }
  }
  /* duplicated n-grams (n = 5..10): "".join of n words, greedy left to right */
  size_t ncand = 0;
  uint32_t *cand = list;
  int cand_ok = !index; /* without the index: cand NULL, every position */
  for (int k = 0; k < 6; k++) {
    size_t ng = (size_t)k + 5;
    if (!ON(q, LM_Q_GR_DUP_5_GRAMS + k)) continue;
    size_t rep = 0;
    if (nw >= ng) {
      if (!cand_ok) {
        if (dup_candidates(&s->set, wb, wb_len, wo, nw, cand, mark, &ncand)) return -1;
        cand_ok = 1;
      }
      if (set_reset(&s->set, nw)) return -1;
      int64_t lim = frac_limit(p->gr_dup_ngram_frac[k], text_cp);
      if (dup_pass(q, &s->set, w, wo, wb, wp, nw, ng, cand, ncand, wb_len, lim, &rep)) return -1;
    }
    if ((double)rep / text_cp > p->gr_dup_ngram_frac[k]) {
      *reason = LM_Q_GR_DUP_5_GRAMS + k;
      return 0;
    }
  }
  return 0;
}

/* ---- GopherQualityFilter ---- */
/* Gopher's stop words, bit k of `stop`: the, be, to, of, and, that, have, with.
 * 1 << k when x[0..len) is stop word k (2 <= len <= 4), else 0. */
static inline unsigned stop_bit(const uint8_t *x, size_t len) {
  uint32_t v = (uint32_t)x[0] | (uint32_t)x[1] << 8;
  if (len == 2) return v == ('b' | 'e' << 8) ? 1u << 1 : v == ('t' | 'o' << 8) ? 1u << 2 : v == ('o' | 'f' << 8) ? 1u << 3 : 0;
  v |= (uint32_t)x[2] << 16;
  if (len == 3) return v == ('t' | 'h' << 8 | 'e' << 16) ? 1u : v == ('a' | 'n' << 8 | 'd' << 16) ? 1u << 4 : 0;
  v |= (uint32_t)x[3] << 24;
  return v == ('t' | 'h' << 8 | 'a' << 16 | (uint32_t)'t' << 24)   ? 1u << 5
         : v == ('h' | 'a' << 8 | 'v' << 16 | (uint32_t)'e' << 24) ? 1u << 6
         : v == ('w' | 'i' << 8 | 't' << 16 | (uint32_t)'h' << 24) ? 1u << 7
                                                                    : 0;
}

static int gopher_quality(const lm_quality *q, lm_quality_scratch *s, const uint8_t *t, size_t n, int *words_ok,
                          int *reason) {
  const lm_quality_params *p = &q->p;
  if (!*words_ok) {
    if (lmq_words(q, s, t, n)) return -1;
    *words_ok = 1;
  }
  size_t nw = s->nw, nsym = 0, symlen = 0, nalpha = 0;
  unsigned stop = 0;
  /* no continuation byte in the text: every word's code points are its bytes */
  int bytes_are_cps = cp_count(t, n) == n;
  for (size_t i = 0; i < nw; i++) {
    const lmq_tok *w = &s->tb.tok[i];
    uint8_t at = s->tb.attr[i];
    if (at & LMQ_T_NONSYMBOL) nsym++, symlen += bytes_are_cps ? w->len : cp_count(t + w->off, w->len);
    if (at & LMQ_T_ALPHA) nalpha++;
    if (w->len >= 2 && w->len <= 4) stop |= stop_bit(t + w->off, w->len);
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
      for (const uint8_t *d = t, *end = t + n; d < end && (d = (const uint8_t *)memchr(d, '#', (size_t)(end - d)));)
        h++, d++;
      if ((double)h / (double)nw > p->gq_max_symbol_word_ratio) {
        *reason = LM_Q_GQ_HASH_RATIO;
        return 0;
      }
    }
    if (ON(q, LM_Q_GQ_ELLIPSIS_RATIO)) {
      /* "..." and "\xE2\x80\xA6" left to right without overlap: the two share no
       * byte, so this is every run of k dots giving k / 3, plus every U+2026 */
      size_t e = 0;
      for (const uint8_t *d = t, *end = t + n; d < end && (d = (const uint8_t *)memchr(d, '.', (size_t)(end - d)));) {
        const uint8_t *r = d;
        while (r < end && *r == '.') r++;
        e += (size_t)(r - d) / 3;
        d = r;
      }
      for (const uint8_t *d = t, *end = t + n; d < end && (d = (const uint8_t *)memchr(d, 0xE2, (size_t)(end - d)));) {
        if (end - d >= 3 && d[1] == 0x80 && d[2] == 0xA6) e++, d += 3;
        else d++;
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

/* Which of C4's case-insensitive literals s[0..n) contains, in one pass:
 * bit 0 "lorem ipsum", bit 1 "javascript", bit 2 + k the k-th policy phrase (the
 * ASCII letters of the text lower-cased; the literals are k_c4_lit). */
static const char *const k_c4_lit[8] = {"lorem ipsum", "javascript", "terms of use", "privacy policy",
                                        "cookie policy", "uses cookies", "use of cookies", "use cookies"};
static unsigned c4_literals(const uint8_t *s, size_t n) {
  unsigned found = 0;
  for (size_t i = 0; i < n; i++) {
    uint8_t c = s[i];
    if (c >= 'A' && c <= 'Z') c = (uint8_t)(c | 32);
    if (c != 'l' && c != 'j' && c != 't' && c != 'p' && c != 'c' && c != 'u') continue;
    for (unsigned k = 0; k < 8; k++) {
      const char *lit = k_c4_lit[k];
      if ((uint8_t)lit[0] != c || (found >> k) & 1) continue;
      size_t m = strlen(lit);
      if (n - i < m) continue;
      size_t j = 1;
      while (j < m) {
        uint8_t d = s[i + j];
        if (d >= 'A' && d <= 'Z') d = (uint8_t)(d | 32);
        if (d != (uint8_t)lit[j]) break;
        j++;
      }
      if (j == m) found |= 1u << k;
    }
  }
  return found;
}


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
      for (;;) {
        {
          size_t e = lmq_graphic_end(t, i, b); /* ASCII, not whitespace */
          wcp += e - i;
          i = e;
        }
        if (i < b && !(flags_at(t, b, i, &l) & LMQ_F_SPACE)) i += l, wcp++;
        else break;
      }
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
    unsigned lit = ON(q, LM_Q_C4_LOREM_IPSUM) || ON(q, LM_Q_C4_JAVASCRIPT) || ON(q, LM_Q_C4_POLICY)
                       ? c4_literals(ln, len) : 0;
    if (ON(q, LM_Q_C4_LOREM_IPSUM) && (lit & 1u)) { *reason = LM_Q_C4_LOREM_IPSUM; return 0; }
    if (ON(q, LM_Q_C4_JAVASCRIPT) && (lit & 2u)) { removed[LM_Q_C4_JAVASCRIPT]++; continue; }
    if (ON(q, LM_Q_C4_CURLY_BRACKET) && memchr(ln, '{', len)) { *reason = LM_Q_C4_CURLY_BRACKET; return 0; }
    if (ON(q, LM_Q_C4_POLICY) && (lit >> 2)) { removed[LM_Q_C4_POLICY]++; continue; }
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
    const uint8_t *nlp = i < n ? (const uint8_t *)memchr(t + i, '\n', n - i) : NULL;
    size_t e = nlp ? (size_t)(nlp - t) : n;
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
  set_doc_start(&s->set, n);
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
