/* Element-wise operations on the views layout.  Comparisons decide on the
 * length and the 4-byte prefix (one 64-bit word) before touching a payload. */
#include <string.h>

#include "luminamoon/hash.h"
#include "luminamoon/string_tensor.h"

#define LM_OPS_GRAIN 32768

static lm_exec grain_exec(const lm_exec *exec) {
  lm_exec e = exec ? *exec : (lm_exec){1, 0};
  if (!e.min_items_per_thread) e.min_items_per_thread = LM_OPS_GRAIN;
  return e;
}

static uint32_t load_u32(const uint8_t *p) {
  uint32_t w;
  memcpy(&w, p, 4);
  return w;
}

/* ---------------------------------------------------------- prefix match */

typedef struct {
  const lm_string_view *views;
  const uint8_t *const *buffers;
  const uint8_t *prefix;
  size_t plen;
  uint32_t pword, pmask; /* the prefix's first min(plen,4) bytes, and their mask */
  uint8_t *out;
} prefix_ctx;

static lm_status prefix_range(void *p, size_t begin, size_t end) {
  const prefix_ctx *c = (const prefix_ctx *)p;
  const size_t plen = c->plen;
  for (size_t i = begin; i < end; i++) {
    const lm_string_view *v = &c->views[i];
    if (v->len < plen || (load_u32(v->prefix_or_inline) & c->pmask) != c->pword) {
      c->out[i] = 0;
      continue;
    }
    if (plen <= 4) {
      c->out[i] = 1;
    } else {
      const uint8_t *s = lm_sv_data(v, c->buffers);
      c->out[i] = memcmp(s + 4, c->prefix + 4, plen - 4) == 0;
    }
  }
  return LM_OK;
}

lm_status lm_views_prefix_match(const lm_string_view *views, size_t n, const uint8_t *const *buffers,
                                const uint8_t *prefix, size_t plen, uint8_t *out, const lm_exec *exec) {
  if ((n && (!views || !out)) || (plen && !prefix)) return LM_EINVAL;
  uint8_t head[4] = {0, 0, 0, 0}, mask[4] = {0, 0, 0, 0};
  size_t k = plen < 4 ? plen : 4;
  if (k) memcpy(head, prefix, k);
  memset(mask, 0xFF, k);
  prefix_ctx c = {views, buffers, prefix, plen, load_u32(head), load_u32(mask), out};
  lm_exec e = grain_exec(exec);
  return lm_parallel_for(&e, n, prefix_range, &c);
}

/* ---------------------------------------------------------- equal scalar */

typedef struct {
  const lm_string_view *views;
  const uint8_t *const *buffers;
  lm_string_view sv; /* the scalar as a view (buffer 0, offset 0: only head/inline used) */
  const uint8_t *s;
  uint8_t *out;
} eqs_ctx;

static lm_status eqs_range(void *p, size_t begin, size_t end) {
  const eqs_ctx *c = (const eqs_ctx *)p;
  const uint64_t head = lm_sv_head(&c->sv);
  const uint32_t len = c->sv.len;
  uint64_t tail;
  memcpy(&tail, c->sv.suffix_or_offset, 8);
  for (size_t i = begin; i < end; i++) {
    const lm_string_view *v = &c->views[i];
    if (lm_sv_head(v) != head) {
      c->out[i] = 0;
    } else if (len <= LM_INLINE_MAX) {
      uint64_t t;
      memcpy(&t, v->suffix_or_offset, 8);
      c->out[i] = t == tail;
    } else {
      c->out[i] = memcmp(lm_sv_data(v, c->buffers) + 4, c->s + 4, len - 4) == 0;
    }
  }
  return LM_OK;
}

lm_status lm_views_equal_scalar(const lm_string_view *views, size_t n, const uint8_t *const *buffers,
                                const uint8_t *s, size_t slen, uint8_t *out, const lm_exec *exec) {
  if ((n && (!views || !out)) || (slen && !s)) return LM_EINVAL;
  if (slen > LM_MAX_STRING_LEN) { /* no element can be that long */
    if (n) memset(out, 0, n);
    return LM_OK;
  }
  eqs_ctx c = {views, buffers, {0, {0}, {0}}, s, out};
  lm_sv_make(&c.sv, s, (uint32_t)slen, 0, 0);
  lm_exec e = grain_exec(exec);
  return lm_parallel_for(&e, n, eqs_range, &c);
}

/* ----------------------------------------------------------------- equal */

typedef struct {
  const lm_string_view *a, *b;
  const uint8_t *const *ba, *const *bb;
  uint8_t *out;
} eq_ctx;

static lm_status eq_range(void *p, size_t begin, size_t end) {
  const eq_ctx *c = (const eq_ctx *)p;
  for (size_t i = begin; i < end; i++) {
    const lm_string_view *x = &c->a[i], *y = &c->b[i];
    if (lm_sv_head(x) != lm_sv_head(y)) {
      c->out[i] = 0;
    } else if (x->len <= LM_INLINE_MAX) {
      c->out[i] = memcmp(x->suffix_or_offset, y->suffix_or_offset, 8) == 0;
    } else {
      c->out[i] = memcmp(lm_sv_data(x, c->ba) + 4, lm_sv_data(y, c->bb) + 4, x->len - 4) == 0;
    }
  }
  return LM_OK;
}

lm_status lm_views_equal(const lm_string_view *a, const uint8_t *const *buffers_a, const lm_string_view *b,
                         const uint8_t *const *buffers_b, size_t n, uint8_t *out, const lm_exec *exec) {
  if (n && (!a || !b || !out)) return LM_EINVAL;
  eq_ctx c = {a, b, buffers_a, buffers_b, out};
  lm_exec e = grain_exec(exec);
  return lm_parallel_for(&e, n, eq_range, &c);
}

/* ---------------------------------------------------------------- hash64 */

typedef struct {
  const lm_string_view *views;
  const uint8_t *const *buffers;
  uint64_t seed;
  uint64_t *out;
} hash_ctx;

static lm_status hash_range(void *p, size_t begin, size_t end) {
  const hash_ctx *c = (const hash_ctx *)p;
  for (size_t i = begin; i < end; i++) {
    const lm_string_view *v = &c->views[i];
    c->out[i] = lm_hash64(lm_sv_data(v, c->buffers), v->len, c->seed);
  }
  return LM_OK;
}

lm_status lm_views_hash64(const lm_string_view *views, size_t n, const uint8_t *const *buffers, uint64_t seed,
                          uint64_t *out, const lm_exec *exec) {
  if (n && (!views || !out)) return LM_EINVAL;
  hash_ctx c = {views, buffers, seed, out};
  lm_exec e = grain_exec(exec);
  e.min_items_per_thread = e.min_items_per_thread / 8 + 1; /* hashing is heavier per item */
  return lm_parallel_for(&e, n, hash_range, &c);
}
