/* Element-wise operations on the views layout.
 *
 * Each operation first decides every element on the view alone (length + the
 * 4-byte prefix, one 64-bit word; for equal the whole 16 bytes, which decide an
 * inline pair) in a tight loop without a branch (equal's has an AVX-512 copy,
 * ops_avx2.c, 16 pairs a step), and only then visits the few candidates that
 * need their payload.  A view is bounds-checked right before its payload is read.
 *
 * A candidate's length, buffer index and offset are read once (view_fields)
 * and every later step (re-checking the length, the bounds check, the payload
 * read) uses those copies: another thread writing into the caller's views
 * while an op runs can change the answers but never make the op read outside
 * a payload buffer or past a view.
 *
 * Inline views must be zero-padded (the equality ops read the inline area as
 * words): equal_scalar, equal and hash64 check that in their first pass over
 * the views and return LM_ECORRUPT for a view that is not.  prefix_match reads
 * only the first plen <= len bytes of a string, never a padding byte, so its
 * answer cannot depend on the padding: it does not check it (which keeps its
 * first pass one vectorised loop). */
#include <stdlib.h>
#include <string.h>

#include "luminamoon/hash.h"
#include "luminamoon/string_tensor.h"
#include "hash_internal.h" /* lm_hash64_views_avx512, lm_hash64_many */
#include "ops_internal.h"   /* lm_cut_*: work split by bytes */
#include "mask_lut.h"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* strings a thread must have before a second one is used: the views passes run at
 * ~0.3-0.5 ns a string and a second thread is a started pool worker (~1-3 us to wake) */
#define LM_OPS_GRAIN 16384

/* The length, buffer index and offset of a view, each read once into the
 * caller's locals (the view's memory may be written by another thread). */
typedef struct {
  uint32_t len, buf, off;
} view_fields;

static view_fields fields_of(const lm_string_view *v) {
  view_fields f;
  memcpy(&f.len, &v->len, 4);
  memcpy(&f.buf, v->suffix_or_offset, 4);
  memcpy(&f.off, v->suffix_or_offset + 4, 4);
  return f;
}

/* The payload of a long view with fields f, or NULL when it lies outside its buffer. */
static const uint8_t *payload_of(view_fields f, const lm_payloads *p) {
  if (!p || f.buf >= p->n || (uint64_t)f.off + f.len > (uint64_t)p->sizes[f.buf] || !p->data[f.buf]) return NULL;
  return p->data[f.buf] + f.off;
}

/* The bytes of view v whose fields (read once) are f: the inline area (f.len <= 12
 * bytes, inside the 16-byte view whatever its current contents) or the checked payload. */
static const uint8_t *bytes_at(const lm_string_view *v, view_fields f, const lm_payloads *p) {
  return f.len <= LM_INLINE_MAX ? v->prefix_or_inline : payload_of(f, p);
}

static lm_exec grain_exec(const lm_exec *exec, size_t grain) {
  lm_exec e = exec ? *exec : (lm_exec){1, 0};
  if (!e.min_items_per_thread) e.min_items_per_thread = grain;
  return e;
}

static uint32_t load_u32(const uint8_t *p) {
  uint32_t w;
  memcpy(&w, p, 4);
  return w;
}

/* ---------------------------------------------------------- prefix match */

/* A prefix to match: its first min(plen, 4) bytes as a word (pword) and the mask of those bytes
 * (pmask), compared with a view's prefix word; prefix_match's and filter_prefix's shared part. */
typedef struct {
  const lm_string_view *views;
  const lm_payloads *p;
  const uint8_t *prefix;
  size_t plen;
  uint32_t pword, pmask;
} prefix_spec;

static prefix_spec prefix_spec_of(const lm_string_view *views, const lm_payloads *p, const uint8_t *prefix,
                                  size_t plen) {
  uint8_t head[4] = {0, 0, 0, 0}, mask[4] = {0, 0, 0, 0};
  const size_t k = plen < 4 ? plen : 4;
  if (k) memcpy(head, prefix, k);
  memset(mask, 0xFF, k);
  prefix_spec s = {views, p, prefix, plen, load_u32(head), load_u32(mask)};
  return s;
}

typedef struct {
  prefix_spec s;
  uint8_t *out;
} prefix_ctx;

/* Decide on the view alone: long enough and the first min(plen, 4) bytes match. */
static void prefix_heads(const lm_string_view *restrict views, uint8_t *restrict out, size_t begin, size_t end,
                         uint32_t plen, uint32_t pword, uint32_t pmask) {
  for (size_t i = begin; i < end; i++)
    out[i] = (uint8_t)((views[i].len >= plen) & ((load_u32(views[i].prefix_or_inline) & pmask) == pword));
}

static lm_status prefix_range(void *arg, size_t begin, size_t end) {
  const prefix_ctx *c = (const prefix_ctx *)arg;
  const lm_string_view *views = c->s.views;
  uint8_t *out = c->out;
  const uint64_t plen = c->s.plen;
  if (plen > LM_MAX_STRING_LEN) { /* longer than any string */
    memset(out + begin, 0, end - begin);
    return LM_OK;
  }
  prefix_heads(views, out, begin, end, (uint32_t)plen, c->s.pword, c->s.pmask);
  if (plen <= 4) return LM_OK;
  for (size_t i = begin; i < end; i++) {
    if (!out[i]) continue;
    const view_fields f = fields_of(&views[i]);
    if (f.len < plen) { /* changed since the heads pass */
      out[i] = 0;
      continue;
    }
    const uint8_t *s = bytes_at(&views[i], f, c->s.p);
    if (!s) return LM_ERANGE;
    out[i] = memcmp(s + 4, c->s.prefix + 4, plen - 4) == 0;
  }
  return LM_OK;
}

lm_status lm_views_prefix_match(const lm_string_view *views, size_t n, const lm_payloads *p,
                                const uint8_t *prefix, size_t plen, uint8_t *out, const lm_exec *exec) {
  if ((n && (!views || !out)) || (plen && !prefix)) return LM_EINVAL;
  prefix_ctx c = {prefix_spec_of(views, p, prefix, plen), out};
  lm_exec e = grain_exec(exec, LM_OPS_GRAIN);
  return lm_cut_even(&e, n, prefix_range, &c);
}

/* ---------------------------------------------------------- equal scalar */

typedef struct {
  const lm_string_view *views;
  const lm_payloads *p;
  lm_string_view sv; /* the scalar as a view: head + inline tail */
  const uint8_t *s;
  uint8_t *out;
} eqs_ctx;

/* out[i] = (head word of view i == head), for i in [begin, end); restrict lets
 * the compiler vectorise (the uint8 stores cannot alias the views). */
static uint64_t heads_equal(const lm_string_view *restrict views, uint8_t *restrict out, size_t begin, size_t end,
                            uint64_t head) {
  uint64_t pad = 0;
  for (size_t i = begin; i < end; i++) {
    out[i] = lm_sv_head(&views[i]) == head;
    pad |= lm_sv_padding_bits(&views[i]);
  }
  return pad;
}

static lm_status eqs_range(void *arg, size_t begin, size_t end) {
  const eqs_ctx *c = (const eqs_ctx *)arg;
  const lm_string_view *views = c->views;
  uint8_t *out = c->out;
  const uint64_t head = lm_sv_head(&c->sv);
  if (heads_equal(views, out, begin, end, head)) return LM_ECORRUPT;
  const uint32_t len = c->sv.len;
  if (len <= 4) return LM_OK; /* the head holds the whole string */
  if (len <= LM_INLINE_MAX) {
    uint64_t tail;
    memcpy(&tail, c->sv.suffix_or_offset, 8);
    for (size_t i = begin; i < end; i++) {
      if (!out[i]) continue;
      uint64_t t;
      memcpy(&t, views[i].suffix_or_offset, 8);
      out[i] = t == tail;
    }
    return LM_OK;
  }
  for (size_t i = begin; i < end; i++) {
    if (!out[i]) continue;
    const view_fields f = fields_of(&views[i]);
    if (f.len != len) { /* changed since the heads pass */
      out[i] = 0;
      continue;
    }
    const uint8_t *s = payload_of(f, c->p);
    if (!s) return LM_ERANGE;
    out[i] = memcmp(s + 4, c->s + 4, len - 4) == 0;
  }
  return LM_OK;
}

lm_status lm_views_equal_scalar(const lm_string_view *views, size_t n, const lm_payloads *p,
                                const uint8_t *s, size_t slen, uint8_t *out, const lm_exec *exec) {
  if ((n && (!views || !out)) || (slen && !s)) return LM_EINVAL;
  if (slen > LM_MAX_STRING_LEN) { /* no element can be that long */
    if (n) memset(out, 0, n);
    return LM_OK;
  }
  eqs_ctx c = {views, p, {0, {0}, {0}}, s, out};
  lm_sv_make(&c.sv, s, (uint32_t)slen, 0, 0);
  lm_exec e = grain_exec(exec, LM_OPS_GRAIN);
  return lm_cut_even(&e, n, eqs_range, &c);
}

/* ----------------------------------------------------------------- equal */

typedef struct {
  const lm_string_view *a, *b;
  const lm_payloads *pa, *pb;
  uint8_t *out;
} eq_ctx;

/* Pass 1 of equal, on the views alone and without a branch: out[i] = 0 when length or prefix
 * differ; for an inline pair (<= 12 bytes, zero-padded) 1 or 0 as its other 8 bytes agree: the
 * pair is decided; 2 for a long pair whose length and prefix agree: its payloads decide in
 * pass 2.  *pad gets the padding bits of both sides (non-zero: some inline view is not
 * zero-padded); returns the number of 2s.  lm_views_eq_pass1_avx512 (ops_avx2.c) is the same
 * for 16 pairs a step. */
static size_t pairs_equal(const lm_string_view *restrict a, const lm_string_view *restrict b,
                          uint8_t *restrict out, size_t n, uint64_t *pad_out) {
  uint64_t pad = 0;
  size_t longs = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t ta, tb;
    memcpy(&ta, a[i].suffix_or_offset, 8);
    memcpy(&tb, b[i].suffix_or_offset, 8);
    const unsigned head = lm_sv_head(&a[i]) == lm_sv_head(&b[i]);
    const unsigned lng = a[i].len > LM_INLINE_MAX;
    out[i] = (uint8_t)((0u - head) & (((unsigned)(ta == tb) & (lng ^ 1u)) | (lng << 1)));
    longs += head & lng;
    pad |= lm_sv_padding_bits(&a[i]) | lm_sv_padding_bits(&b[i]);
  }
  *pad_out |= pad;
  return longs;
}

/* Pass 2 for pair i, marked 2 by pass 1: its fields read again (another thread may have
 * written the views since) and bounds-checked.  0 or 1 when that decides it (the lengths
 * changed; one offset of one buffer: the same bytes), -1 when a payload lies outside its
 * buffer, else 2 with *x, *y, *len set: the bytes after the prefix decide. */
static inline int long_pair_prep(const eq_ctx *c, size_t i, const uint8_t **x, const uint8_t **y,
                                 uint32_t *len) {
  const view_fields fa = fields_of(&c->a[i]), fb = fields_of(&c->b[i]);
  if (fa.len != fb.len || fa.len <= LM_INLINE_MAX) return 0; /* changed since pass 1 */
  *x = payload_of(fa, c->pa);
  *y = payload_of(fb, c->pb);
  if (!*x || !*y) return -1;
  if (*x == *y) return 1;
  *len = fa.len;
  return 2;
}

static int g_eq_touch_forced = -1; /* lm_eq_set_touch: -1, 0 or 1 */

void lm_eq_set_touch(int on) { __atomic_store_n(&g_eq_touch_forced, on < 0 ? -1 : !!on, __ATOMIC_RELAXED); }

int lm_eq_touch_on(void) {
  const int f = __atomic_load_n(&g_eq_touch_forced, __ATOMIC_RELAXED);
  if (f >= 0) return f;
  static int cached = -1; /* a benign race: every thread computes the same value */
  int c = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (c < 0) {
    const char *v = getenv("LM_EQ_TOUCH");
    if (v && *v) {
      c = *v != '0';
    } else {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
      __builtin_cpu_init();
      c = __builtin_cpu_is("amd") ? 1 : 0;
#else
      c = 0;
#endif
    }
    __atomic_store_n(&cached, c, __ATOMIC_RELAXED);
  }
  return c;
}

/* lm_eq_touch_read of view v's payload (its fields read once, bounds-checked; 0 for an inline view
 * or one outside its buffer) */
static inline uint64_t touch_view(const lm_string_view *v, const lm_payloads *p) {
  const view_fields f = fields_of(v);
  if (f.len < LM_EQ_TOUCH_MIN) return 0;
  const uint8_t *b = payload_of(f, p);
  return b ? lm_eq_touch_read(b, f.len) : 0;
}

/* the long pairs of a sparse pass 2 compared together, their payloads prefetched as they are
 * listed: long words lie far apart in the payload, a cache miss (and TLB miss) each */
#define LM_VEQ_BATCH 32

#if LM_HASH_HAVE_AVX2
/* Pass 2 where long pairs are many (lines, documents), with AVX-512 BW: in order, as the
 * portable loop below, but each pair's bytes after the prefix compared by two masked 64-byte
 * loads a side (up to 128 bytes; no call, no branch on the length; memcmp past that) and one
 * line LM_EQ_AHEAD bytes on prefetched on both sides (as equal on offsets, ops_avx2.c).
 * bench_views_eq lines, the plain per-pair loop / the views kernel, old and new binaries
 * alternating: 0.70-0.71x before, 0.82-0.86x with the prefetch alone, 0.89-0.92x with the masked
 * compare too, 0.97-1.01x once eq_range ran the passes in blocks.  -1 when a pair marked 2 lies
 * outside its buffer. */
__attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512dq"))) static int eq_dense_avx512(const eq_ctx *c,
                                                                                              uint8_t *out,
                                                                                              size_t i, size_t end) {
  for (; i < end; i++) {
    if (out[i] != 2) continue;
    const view_fields fa = fields_of(&c->a[i]), fb = fields_of(&c->b[i]);
    if (fa.len != fb.len || fa.len <= LM_INLINE_MAX) { /* changed since pass 1 */
      out[i] = 0;
      continue;
    }
    const uint8_t *x = payload_of(fa, c->pa), *y = payload_of(fb, c->pb);
    if (!x || !y) return -1;
    __builtin_prefetch((const void *)((uintptr_t)x + LM_EQ_AHEAD)); /* (may lie past the payload) */
    __builtin_prefetch((const void *)((uintptr_t)y + LM_EQ_AHEAD));
    const uint8_t *p = x + 4, *q = y + 4; /* the prefix agreed in pass 1 */
    const uint64_t m = (uint64_t)fa.len - 4;
    unsigned e = lm_eq_first128_avx512(p, q, m);
    if (e && m > 128 && x != y) e = memcmp(p + 128, q + 128, m - 128) == 0;
    out[i] = (uint8_t)e;
  }
  return 0;
}
#endif

static lm_status eq_block(const eq_ctx *c, size_t begin, size_t end) {
  uint8_t *out = c->out;
  uint64_t pad = 0;
  size_t longs = 0, done = 0;
#if LM_HASH_HAVE_AVX2
  if (lm_ops_simd_level() == 2) done = lm_views_eq_pass1_avx512(c->a + begin, c->b + begin, out + begin,
                                                                 end - begin, &longs, &pad);
#endif
  longs += pairs_equal(c->a + begin + done, c->b + begin + done, out + begin + done, end - begin - done, &pad);
  if (pad) return LM_ECORRUPT;
  if (!longs) return LM_OK;
  size_t i = begin;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  if (longs * 8 < end - begin) {
    /* few long pairs (words): found eight marks at a time (bit 1 of a byte is set only in a
     * 2), in order; a branch per pair on its class mispredicted for about every other word */
    size_t ks[LM_VEQ_BATCH];
    const uint8_t *xs[LM_VEQ_BATCH], *ys[LM_VEQ_BATCH];
    uint32_t ls[LM_VEQ_BATCH];
    size_t nb = 0;
    for (; i < end; i += 8) {
      uint64_t w = 0;
      if (i + 8 <= end) {
        memcpy(&w, out + i, 8);
      } else {
        for (size_t t = i; t < end; t++) w |= (uint64_t)out[t] << (8 * (t - i));
      }
      for (w &= 0x0202020202020202ull; w; w &= w - 1) {
        const size_t k = i + (size_t)(__builtin_ctzll(w) >> 3);
        const int r = long_pair_prep(c, k, &xs[nb], &ys[nb], &ls[nb]);
        if (r < 0) return LM_ERANGE;
        if (r < 2) {
          out[k] = (uint8_t)r;
          continue;
        }
        __builtin_prefetch(xs[nb] + 4);
        __builtin_prefetch(ys[nb] + 4);
        ks[nb++] = k;
        if (nb == LM_VEQ_BATCH) {
          for (size_t t = 0; t < nb; t++) out[ks[t]] = memcmp(xs[t] + 4, ys[t] + 4, ls[t] - 4) == 0;
          nb = 0;
        }
      }
    }
    for (size_t t = 0; t < nb; t++) out[ks[t]] = memcmp(xs[t] + 4, ys[t] + 4, ls[t] - 4) == 0;
    return LM_OK;
  }
#endif
  /* many long pairs (lines, documents): in order, so the payloads stream in; while the last pair
   * compared was long, the payloads of the long pairs decided by their views are touched
   * (lm_eq_touch_read, ops_internal.h: the prefetchers then see one stream, not one per equal pair) */
  const int touch_on = lm_eq_touch_on();
#if LM_HASH_HAVE_AVX2
  if (!touch_on && lm_ops_simd_level() == 2) return eq_dense_avx512(c, out, i, end) ? LM_ERANGE : LM_OK;
#endif
  int touch = 0;
  uint64_t touched = 0;
  for (; i < end; i++) {
    if (out[i] != 2) {
      if (touch && !out[i]) touched += touch_view(&c->a[i], c->pa) + touch_view(&c->b[i], c->pb);
      continue;
    }
    const uint8_t *x = NULL, *y = NULL;
    uint32_t len = 0;
    const int r = long_pair_prep(c, i, &x, &y, &len);
    if (r < 0) return LM_ERANGE;
    out[i] = (uint8_t)(r < 2 ? r : memcmp(x + 4, y + 4, len - 4) == 0);
    touch = touch_on && r == 2 && len >= LM_EQ_TOUCH_MIN;
  }
  lm_eq_keep(touched);
  return LM_OK;
}

/* eq_block over [begin, end) in blocks of LM_VEQ_BLOCK pairs, so that pass 2 finds a block's
 * views (32 bytes a pair) still in L1 where pass 1 left them: over a whole range, pass 2 read
 * them a second time from L3 (500 k lines: 16 MB) */
#ifndef LM_VEQ_BLOCK
#define LM_VEQ_BLOCK 1024
#endif
static lm_status eq_range(void *arg, size_t begin, size_t end) {
  const eq_ctx *c = (const eq_ctx *)arg;
  for (size_t b0 = begin; b0 < end; b0 += LM_VEQ_BLOCK) {
    const lm_status s = eq_block(c, b0, end - b0 < LM_VEQ_BLOCK ? end : b0 + LM_VEQ_BLOCK);
    if (s != LM_OK) return s;
  }
  return LM_OK;
}

lm_status lm_views_equal(const lm_string_view *a, const lm_payloads *pa, const lm_string_view *b,
                         const lm_payloads *pb, size_t n, uint8_t *out, const lm_exec *exec) {
  if (n && (!a || !b || !out)) return LM_EINVAL;
  eq_ctx c = {a, b, pa, pb, out};
  lm_exec e = grain_exec(exec, LM_OPS_GRAIN);
  return lm_cut_even(&e, n, eq_range, &c);
}

/* ---------------------------------------------------------------- hash64 */

typedef struct {
  const lm_string_view *views;
  const lm_payloads *p;
  uint64_t seed;
  uint64_t *out;
} hash_ctx;

/* Blocks of 256: each view's fields are read once and its bytes checked into a
 * (pointer, length) list, then lm_hash64_many hashes the list grouped by XXH3's
 * length class (no mispredicted branch per short string). */
static lm_status hash_range(void *arg, size_t begin, size_t end) {
  const hash_ctx *c = (const hash_ctx *)arg;
  uint64_t pad = 0;
  const uint8_t *ptrs[256];
  size_t lens[256];
#if LM_HASH_HAVE_AVX512
  /* AVX-512: the inline views (<= 12 bytes) hashed from the views alone, 8 at a time
   * (hash_avx512.c); the long ones it lists are checked and hashed here */
  if (lm_hash_uses_avx512()) {
    /* where long views are few (words), software-pipelined by two blocks: the payloads of
     * block j's long views are checked and prefetched when it is listed, and hashed by the
     * kernel during block j+2's vector loop (their bytes are sparse in the payload, a cache
     * miss each otherwise; one block ahead measured too close from memory) */
    uint8_t rest[LM_HASH_VIEWS_BLOCK + 8];
    const int level = lm_hash_long_level();
    lm_hash_longs ring[3];
    ring[0].n = ring[1].n = ring[2].n = 0;
    int f = 0; /* ring[f]: this block's list; ring[f + 1 mod 3]: two blocks back */
    for (size_t b0 = begin; b0 < end; b0 += LM_HASH_VIEWS_BLOCK) {
      const size_t m = end - b0 < LM_HASH_VIEWS_BLOCK ? end - b0 : LM_HASH_VIEWS_BLOCK;
      lm_hash_longs *cur = &ring[f];
      const size_t nr =
          lm_hash64_views_avx512(c->views + b0, m, c->seed, c->out + b0, rest, &pad, &ring[f == 2 ? 0 : f + 1]);
      if (2 * nr < m) { /* sparse (words; then nr < LM_HASH_LONGS_MAX): hashed two blocks later */
        for (size_t k = 0; k < nr; k++) {
          const lm_string_view *v = &c->views[b0 + rest[k]];
          const view_fields fl = fields_of(v);
          const uint8_t *s = bytes_at(v, fl, c->p);
          if (!s) return LM_ERANGE; /* (no padding: the kernel read it as a long view) */
          __builtin_prefetch(s); /* its first and last byte: 13..16 bytes may span two lines */
          __builtin_prefetch(s + fl.len - 1);
          cur->p[k] = s;
          cur->len[k] = fl.len;
          cur->i[k] = rest[k];
        }
        cur->n = nr;
        cur->out = c->out + b0;
      } else { /* dense (lines, documents): their payload is a stream, each hashed in order as
                * its view is checked (one pass, no lists: as hash64 on offsets) */
        for (size_t k = 0; k < nr; k++) {
          const lm_string_view *v = &c->views[b0 + rest[k]];
          const view_fields fl = fields_of(v);
          const uint8_t *s = bytes_at(v, fl, c->p);
          if (!s) return LM_ERANGE;
          c->out[b0 + rest[k]] = lm_hash64_any(s, fl.len, c->seed, level);
        }
      }
      f = f == 2 ? 0 : f + 1;
    }
    for (int z = 0; z < 3; z++) lm_hash64_longs(&ring[(f + z) % 3], c->seed); /* oldest first */
    return pad ? LM_ECORRUPT : LM_OK;
  }
#endif
  for (size_t b0 = begin; b0 < end; b0 += 256) {
    const size_t m = end - b0 < 256 ? end - b0 : 256;
    for (size_t k = 0; k < m; k++) {
      const lm_string_view *v = &c->views[b0 + k];
      const view_fields f = fields_of(v);
      const uint8_t *s = bytes_at(v, f, c->p);
      if (!s) return LM_ERANGE;
      pad |= lm_sv_padding_bits(v); /* the view's cache line is loaded already */
      ptrs[k] = s;
      lens[k] = f.len;
    }
    lm_hash64_many(ptrs, lens, m, c->seed, c->out + b0);
  }
  return pad ? LM_ECORRUPT : LM_OK;
}

#define LM_HASH_SAMPLE 256
#define LM_HASH_CUT_BY_COUNT 32
lm_status lm_views_hash64(const lm_string_view *views, size_t n, const lm_payloads *p, uint64_t seed,
                          uint64_t *out, const lm_exec *exec) {
  if (n && (!views || !out)) return LM_EINVAL;
  hash_ctx c = {views, p, seed, out};
  lm_exec e = grain_exec(exec, 4096);
  /* with threads: ranges of about equal bytes (16 + the length of each string; the
   * lengths read here only to cut, ops_internal.h): equal counts of documents can hold
   * very unequal bytes.  Not for short strings: there that pass is a second read of every
   * view for a hash that costs about one (words on 2 threads ran at 0.78x of one thread);
   * LM_HASH_SAMPLE views spread evenly over the array tell them apart, and where their
   * mean length is at most LM_HASH_CUT_BY_COUNT the work is cut by count (each string's
   * cost is then mostly its view's; a long string missed by the sample only unbalances
   * the tasks, which the threads take dynamically). */
  const size_t threads = lm_cut_threads(&e, n);
  if (threads <= 1) return hash_range(&c, 0, n);
  {
    const size_t step = n / LM_HASH_SAMPLE ? n / LM_HASH_SAMPLE : 1;
    uint64_t sum = 0, k = 0;
    for (size_t i = step / 2; i < n && k < LM_HASH_SAMPLE; i += step, k++) sum += views[i].len;
    if (k && sum <= (uint64_t)LM_HASH_CUT_BY_COUNT * k) return lm_cut_even(&e, n, hash_range, &c);
  }
  const size_t parts = lm_cut_parts(threads);
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) total += (uint64_t)views[i].len + 16;
  size_t cut[LM_CUT_MAX + 1];
  cut[0] = 0;
  cut[parts] = n;
  uint64_t acc = 0;
  size_t i = 0;
  for (size_t q = 1; q < parts; q++) {
    const uint64_t want = lm_cut_at(total, q, parts);
    while (i < n && acc < want) acc += (uint64_t)views[i++].len + 16;
    cut[q] = i;
  }
  return lm_cut_run(threads, parts, cut, hash_range, &c);
}

/* ------------------------------------------------------ filter by prefix */

/* prefix_match and compaction in one pass (StringTensor.filter_by_prefix on the CPU): each view is
 * read once, decided and stored at the part's next output slot, so no mask is written, counted
 * and read again (1 M words: 1.4 + 0.8 ns a string for starts_with then views_compact). */
typedef struct {
  prefix_spec s;
  lm_string_view *out;
  const size_t *cut; /* the parts' bounds (cut[0..parts]) */
  size_t parts;
  size_t *kept; /* kept[t]: the views part t stored at out[cut[t]..] */
} filter_ctx;

static lm_status filter_range(void *arg, size_t begin, size_t end) {
  const filter_ctx *c = (const filter_ctx *)arg;
  /* this range's part: the last t with cut[t] <= begin (an empty part is never run) */
  size_t lo = 0, hi = c->parts;
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    if (c->cut[mid] <= begin) lo = mid;
    else hi = mid;
  }
  const lm_string_view *restrict views = c->s.views;
  lm_string_view *restrict o = c->out + begin;
  const uint64_t plen = c->s.plen;
  const uint32_t pword = c->s.pword, pmask = c->s.pmask;
  size_t k = 0;
  if (plen > LM_MAX_STRING_LEN) { /* longer than any string */
  } else if (plen <= 4) {
    /* decided on the view alone, without a branch: every view is stored at the next slot, which
     * moves on when it is kept (o[k] with k <= i - begin: inside this part's slots) */
    size_t i = begin;
#if LM_HASH_HAVE_AVX2
    if (lm_ops_simd_level() == 2) /* (ops_avx2.c) */
      i += lm_views_filter_heads_avx512(views + begin, end - begin, o, &k, (uint32_t)plen, pword, pmask);
#endif
    for (; i < end; i++) {
#if defined(__SSE2__) && defined(__x86_64__)
      /* one 16-byte load and store (a struct copy became two 8-byte ones) */
      const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)&views[i]);
      const uint64_t h = (uint64_t)_mm_cvtsi128_si64(v); /* len | prefix << 32 (little-endian) */
      _mm_storeu_si128((__m128i *)(void *)&o[k], v);
      k += ((uint32_t)h >= plen) & (((uint32_t)(h >> 32) & pmask) == pword);
#else
      lm_string_view v;
      memcpy(&v, &views[i], sizeof v);
      const size_t hit = (uint64_t)v.len >= plen && (load_u32(v.prefix_or_inline) & pmask) == pword;
      memcpy(&o[k], &v, sizeof v);
      k += hit;
#endif
    }
  } else {
    for (size_t i = begin; i < end; i++) {
      lm_string_view v; /* one copy decides and is stored (another thread may write views[i]) */
      memcpy(&v, &views[i], sizeof v);
      if (!((uint64_t)v.len >= plen && (load_u32(v.prefix_or_inline) & pmask) == pword)) continue;
      const view_fields f = fields_of(&v);
      const uint8_t *s = bytes_at(&v, f, c->s.p);
      if (!s) return LM_ERANGE;
      if (memcmp(s + 4, c->s.prefix + 4, plen - 4) == 0) memcpy(&o[k++], &v, sizeof v);
    }
  }
  c->kept[lo] = k;
  return LM_OK;
}

lm_status lm_views_filter_prefix(const lm_string_view *views, size_t n, const lm_payloads *p,
                                 const uint8_t *prefix, size_t plen, lm_string_view *out, size_t *kept,
                                 const lm_exec *exec) {
  if (!kept || (n && (!views || !out)) || (plen && !prefix)) return LM_EINVAL;
  *kept = 0;
  if (!n) return LM_OK;
  size_t cut[LM_CUT_MAX + 1], counts[LM_CUT_MAX];
  const lm_exec e = grain_exec(exec, LM_OPS_GRAIN);
  const size_t threads = lm_cut_threads(&e, n);
  const size_t parts = threads <= 1 ? 1 : lm_cut_parts(threads);
  for (size_t t = 0; t <= parts; t++) cut[t] = (size_t)lm_cut_at(n, t, parts);
  memset(counts, 0, parts * sizeof counts[0]);
  filter_ctx c = {prefix_spec_of(views, p, prefix, plen), out, cut, parts, counts};
  const lm_status s = parts == 1 ? filter_range(&c, 0, n) : lm_cut_run(threads, parts, cut, filter_range, &c);
  if (s != LM_OK) return s;
  /* the parts' kept views moved down behind each other, in order */
  size_t k = counts[0];
  for (size_t t = 1; t < parts; t++) {
    if (counts[t] && cut[t] != k) memmove(out + k, out + cut[t], counts[t] * sizeof *out);
    k += counts[t];
  }
  *kept = k;
  return LM_OK;
}

/* ------------------------------------------------------------ compaction */

size_t lm_mask_count(const uint8_t *mask, size_t n) {
  size_t k = 0, i = 0;
  if (!mask) return 0;
  /* 8 bytes a step: the top bit of each byte of x is set when that byte is non-zero (adding 0x7f
   * to its low 7 bits carries into bit 7 unless they are 0; no carry crosses a byte) */
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, mask + i, 8);
    const uint64_t x = (((w & 0x7f7f7f7f7f7f7f7full) + 0x7f7f7f7f7f7f7f7full) | w) & 0x8080808080808080ull;
    k += (size_t)(((x >> 7) * 0x0101010101010101ull) >> 56);
  }
  for (; i < n; i++) k += mask[i] != 0;
  return k;
}

lm_status lm_views_compact(const lm_string_view *views, size_t n, const uint8_t *mask, lm_string_view *out,
                           size_t cap, size_t *written) {
  if ((n && (!views || !mask)) || !written || !cap || !out) return LM_EINVAL;
  /* every kept view is stored at out[k] (clamped to the last slot) and k moves on */
  const size_t last = cap - 1;
  size_t k = 0, i = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  /* the mask 8 bytes at a time: a word of zeros skips 8 views without reading them (a
   * prefix filter keeps a few percent); otherwise the non-zero bytes, packed into an
   * 8-bit mask by one multiply, give the positions to copy from a table */
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, mask + i, 8);
    if (!w) continue;
    /* bit 0 of each byte = that byte is non-zero (shifts of at most 7 bring no bit of
     * the next byte down to bit 0) */
    w |= w >> 4;
    w |= w >> 2;
    w |= w >> 1;
    w &= 0x0101010101010101ull;
    const unsigned m = (unsigned)((w * 0x0102040810204080ull) >> 56);
    for (unsigned t = 0; t < lm_mask_pop[m]; t++, k++)
      memcpy(&out[k < last ? k : last], &views[i + lm_mask_lut[m][t]], sizeof(lm_string_view));
  }
#endif
  for (; i < n; i++) { /* branch-free: a random mask costs no mispredicted branch */
    memcpy(&out[k < last ? k : last], &views[i], sizeof(lm_string_view));
    k += mask[i] != 0;
  }
  *written = k;
  return k <= last ? LM_OK : LM_ERANGE;
}
