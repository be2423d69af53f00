/* Element-wise operations on the views layout.
 *
 * Each operation first decides every element on the view alone (length + the
 * 4-byte prefix, one 64-bit word) in a tight loop the compiler vectorises, and
 * only then visits the few candidates that need their payload.  A view is
 * bounds-checked right before its payload is read. */
#include <string.h>

#include "luminamoon/hash.h"
#include "luminamoon/string_tensor.h"

#define LM_OPS_GRAIN 65536

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

/* The payload of a long view, or NULL when it lies outside its buffer. */
static const uint8_t *payload(const lm_string_view *v, const lm_payloads *p) {
  uint32_t b = lm_sv_buffer_index(v);
  if (!p || b >= p->n || (uint64_t)lm_sv_offset(v) + v->len > (uint64_t)p->sizes[b] || !p->data[b]) return NULL;
  return p->data[b] + lm_sv_offset(v);
}

/* The bytes of any view (inline or checked payload); NULL when out of bounds. */
static const uint8_t *bytes_of(const lm_string_view *v, const lm_payloads *p) {
  return v->len <= LM_INLINE_MAX ? v->prefix_or_inline : payload(v, p);
}

/* ---------------------------------------------------------- prefix match */

typedef struct {
  const lm_string_view *views;
  const lm_payloads *p;
  const uint8_t *prefix;
  size_t plen;
  uint32_t pword, pmask;
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
  const lm_string_view *views = c->views;
  uint8_t *out = c->out;
  const uint64_t plen = c->plen;
  if (plen > LM_MAX_STRING_LEN) { /* longer than any string */
    memset(out + begin, 0, end - begin);
    return LM_OK;
  }
  prefix_heads(views, out, begin, end, (uint32_t)plen, c->pword, c->pmask);
  if (plen <= 4) return LM_OK;
  for (size_t i = begin; i < end; i++) {
    if (!out[i]) continue;
    const uint8_t *s = bytes_of(&views[i], c->p);
    if (!s) return LM_ERANGE;
    out[i] = memcmp(s + 4, c->prefix + 4, plen - 4) == 0;
  }
  return LM_OK;
}

lm_status lm_views_prefix_match(const lm_string_view *views, size_t n, const lm_payloads *p,
                                const uint8_t *prefix, size_t plen, uint8_t *out, const lm_exec *exec) {
  if ((n && (!views || !out)) || (plen && !prefix)) return LM_EINVAL;
  uint8_t head[4] = {0, 0, 0, 0}, mask[4] = {0, 0, 0, 0};
  size_t k = plen < 4 ? plen : 4;
  if (k) memcpy(head, prefix, k);
  memset(mask, 0xFF, k);
  prefix_ctx c = {views, p, prefix, plen, load_u32(head), load_u32(mask), out};
  lm_exec e = grain_exec(exec, LM_OPS_GRAIN);
  return lm_parallel_for(&e, n, prefix_range, &c);
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
static void heads_equal(const lm_string_view *restrict views, uint8_t *restrict out, size_t begin, size_t end,
                        uint64_t head) {
  for (size_t i = begin; i < end; i++) out[i] = lm_sv_head(&views[i]) == head;
}

static lm_status eqs_range(void *arg, size_t begin, size_t end) {
  const eqs_ctx *c = (const eqs_ctx *)arg;
  const lm_string_view *views = c->views;
  uint8_t *out = c->out;
  const uint64_t head = lm_sv_head(&c->sv);
  heads_equal(views, out, begin, end, head);
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
    const uint8_t *s = payload(&views[i], c->p);
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
  return lm_parallel_for(&e, n, eqs_range, &c);
}

/* ----------------------------------------------------------------- equal */

typedef struct {
  const lm_string_view *a, *b;
  const lm_payloads *pa, *pb;
  uint8_t *out;
} eq_ctx;

static void pairs_equal(const lm_string_view *restrict a, const lm_string_view *restrict b, uint8_t *restrict out,
                        size_t begin, size_t end) {
  for (size_t i = begin; i < end; i++) out[i] = lm_sv_head(&a[i]) == lm_sv_head(&b[i]);
}

static lm_status eq_range(void *arg, size_t begin, size_t end) {
  const eq_ctx *c = (const eq_ctx *)arg;
  const lm_string_view *a = c->a, *b = c->b;
  uint8_t *out = c->out;
  pairs_equal(a, b, out, begin, end);
  for (size_t i = begin; i < end; i++) {
    if (!out[i] || a[i].len <= 4) continue;
    if (a[i].len <= LM_INLINE_MAX) {
      out[i] = memcmp(a[i].suffix_or_offset, b[i].suffix_or_offset, 8) == 0;
      continue;
    }
    const uint8_t *x = payload(&a[i], c->pa), *y = payload(&b[i], c->pb);
    if (!x || !y) return LM_ERANGE;
    out[i] = memcmp(x + 4, y + 4, a[i].len - 4) == 0;
  }
  return LM_OK;
}

lm_status lm_views_equal(const lm_string_view *a, const lm_payloads *pa, const lm_string_view *b,
                         const lm_payloads *pb, size_t n, uint8_t *out, const lm_exec *exec) {
  if (n && (!a || !b || !out)) return LM_EINVAL;
  eq_ctx c = {a, b, pa, pb, out};
  lm_exec e = grain_exec(exec, LM_OPS_GRAIN);
  return lm_parallel_for(&e, n, eq_range, &c);
}

/* ---------------------------------------------------------------- hash64 */

typedef struct {
  const lm_string_view *views;
  const lm_payloads *p;
  uint64_t seed;
  uint64_t *out;
} hash_ctx;

static lm_status hash_range(void *arg, size_t begin, size_t end) {
  const hash_ctx *c = (const hash_ctx *)arg;
  for (size_t i = begin; i < end; i++) {
    const lm_string_view *v = &c->views[i];
    const uint8_t *s = bytes_of(v, c->p);
    if (!s) return LM_ERANGE;
    c->out[i] = lm_hash64(s, v->len, c->seed);
  }
  return LM_OK;
}

lm_status lm_views_hash64(const lm_string_view *views, size_t n, const lm_payloads *p, uint64_t seed,
                          uint64_t *out, const lm_exec *exec) {
  if (n && (!views || !out)) return LM_EINVAL;
  hash_ctx c = {views, p, seed, out};
  lm_exec e = grain_exec(exec, 4096);
  return lm_parallel_for(&e, n, hash_range, &c);
}
