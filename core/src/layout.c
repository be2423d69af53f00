/* Validation of both layouts and conversion between them. */
#include <string.h>

#include "luminamoon/string_tensor.h"

#define LM_WINDOW_MASK ((1ull << LM_WINDOW_SHIFT) - 1)

uint32_t lm_window_count(uint64_t data_len) {
  uint64_t w = data_len >> LM_WINDOW_SHIFT;
  return (uint32_t)(w + 1);
}

lm_status lm_offsets32_validate(const int32_t *offsets, size_t n, size_t data_len) {
  if (!offsets) return LM_EINVAL;
  if (offsets[0] < 0) return LM_EINVAL;
  for (size_t i = 0; i < n; i++)
    if (offsets[i + 1] < offsets[i]) return LM_EINVAL;
  if ((uint64_t)offsets[n] > (uint64_t)data_len) return LM_ERANGE;
  return LM_OK;
}

lm_status lm_offsets64_validate(const int64_t *offsets, size_t n, size_t data_len) {
  if (!offsets) return LM_EINVAL;
  if (offsets[0] < 0) return LM_EINVAL;
  for (size_t i = 0; i < n; i++)
    if (offsets[i + 1] < offsets[i]) return LM_EINVAL;
  if ((uint64_t)offsets[n] > (uint64_t)data_len) return LM_ERANGE;
  return LM_OK;
}

lm_status lm_views_validate(const lm_string_view *views, size_t n, const uint8_t *const *buffers,
                            const size_t *buffer_sizes, uint32_t nbuffers) {
  if (n && !views) return LM_EINVAL;
  if (nbuffers && (!buffers || !buffer_sizes)) return LM_EINVAL;
  for (size_t i = 0; i < n; i++) {
    const lm_string_view *v = &views[i];
    if (v->len > LM_MAX_STRING_LEN) return LM_ECORRUPT;
    if (v->len <= LM_INLINE_MAX) {
      for (uint32_t k = v->len; k < LM_INLINE_MAX; k++) {
        uint8_t byte = k < 4 ? v->prefix_or_inline[k] : v->suffix_or_offset[k - 4];
        if (byte) return LM_ECORRUPT;
      }
      continue;
    }
    uint32_t b = lm_sv_buffer_index(v), off = lm_sv_offset(v);
    if (b >= nbuffers) return LM_ECORRUPT;
    if ((uint64_t)off + v->len > (uint64_t)buffer_sizes[b]) return LM_ECORRUPT;
    if (!buffers[b] || memcmp(buffers[b] + off, v->prefix_or_inline, 4) != 0) return LM_ECORRUPT;
  }
  return LM_OK;
}

lm_status lm_views_check_bounds(const lm_string_view *views, size_t n, const size_t *buffer_sizes,
                                uint32_t nbuffers) {
  if ((n && !views) || (nbuffers && !buffer_sizes)) return LM_EINVAL;
  for (size_t i = 0; i < n; i++) {
    const lm_string_view *v = &views[i];
    if (v->len <= LM_INLINE_MAX) continue;
    if (v->len > LM_MAX_STRING_LEN) return LM_ERANGE;
    uint32_t b = lm_sv_buffer_index(v);
    if (b >= nbuffers || (uint64_t)lm_sv_offset(v) + v->len > (uint64_t)buffer_sizes[b]) return LM_ERANGE;
  }
  return LM_OK;
}

lm_status lm_views_check_padding(const lm_string_view *views, size_t n, size_t *bad) {
  if (n && !views) return LM_EINVAL;
  uint64_t acc = 0;
  for (size_t i = 0; i < n; i++) acc |= lm_sv_padding_bits(&views[i]);
  if (!acc) return LM_OK;
  for (size_t i = 0; i < n; i++) {
    if (lm_sv_padding_bits(&views[i])) {
      if (bad) *bad = i;
      return LM_ECORRUPT;
    }
  }
  return LM_OK; /* changed under us: nothing left to report */
}

lm_status lm_views_total_bytes(const lm_string_view *views, size_t n, uint64_t *total) {
  if ((n && !views) || !total) return LM_EINVAL;
  uint64_t t = 0;
  for (size_t i = 0; i < n; i++) t += views[i].len;
  *total = t;
  return LM_OK;
}

/* ---- views -> offsets: offsets are a serial prefix sum; the copy is parallel. */

typedef struct {
  const lm_string_view *views;
  const uint8_t *const *buffers;
  const void *offsets;
  int wide;
  uint8_t *data;
} copy_ctx;

static lm_status copy_range(void *p, size_t begin, size_t end) {
  copy_ctx *c = (copy_ctx *)p;
  for (size_t i = begin; i < end; i++) {
    const lm_string_view *v = &c->views[i];
    size_t at = c->wide ? (size_t)((const int64_t *)c->offsets)[i] : (size_t)((const int32_t *)c->offsets)[i];
    if (v->len) memcpy(c->data + at, lm_sv_data(v, c->buffers), v->len);
  }
  return LM_OK;
}

static lm_status views_to_offsets(const lm_string_view *views, size_t n, const uint8_t *const *buffers,
                                  void *offsets, int wide, uint8_t *data, const lm_exec *exec) {
  if (!offsets || (n && !views)) return LM_EINVAL;
  uint64_t pos = 0;
  for (size_t i = 0; i < n; i++) {
    if (wide) ((int64_t *)offsets)[i] = (int64_t)pos;
    else ((int32_t *)offsets)[i] = (int32_t)pos;
    pos += views[i].len;
    if (!wide && pos > INT32_MAX) return LM_EOVERFLOW;
    if (views[i].len > LM_INLINE_MAX && !buffers) return LM_EINVAL;
  }
  if (wide) ((int64_t *)offsets)[n] = (int64_t)pos;
  else ((int32_t *)offsets)[n] = (int32_t)pos;
  if (pos && !data) return LM_EINVAL;
  copy_ctx c = {views, buffers, offsets, wide, data};
  lm_exec e = exec ? *exec : (lm_exec){1, 0};
  if (!e.min_items_per_thread) e.min_items_per_thread = 65536;
  return lm_parallel_for(&e, n, copy_range, &c);
}

lm_status lm_views_to_offsets32(const lm_string_view *views, size_t n, const uint8_t *const *buffers,
                                int32_t *offsets, uint8_t *data, const lm_exec *exec) {
  return views_to_offsets(views, n, buffers, offsets, 0, data, exec);
}

lm_status lm_views_to_offsets64(const lm_string_view *views, size_t n, const uint8_t *const *buffers,
                                int64_t *offsets, uint8_t *data, const lm_exec *exec) {
  return views_to_offsets(views, n, buffers, offsets, 1, data, exec);
}

/* ---- offsets -> views: no payload copy. */

typedef struct {
  const void *offsets;
  int wide;
  const uint8_t *data;
  uint32_t base;
  lm_string_view *views;
} from_ctx;

static lm_status from_range(void *p, size_t begin, size_t end) {
  from_ctx *c = (from_ctx *)p;
  for (size_t i = begin; i < end; i++) {
    uint64_t a, b;
    if (c->wide) {
      a = (uint64_t)((const int64_t *)c->offsets)[i];
      b = (uint64_t)((const int64_t *)c->offsets)[i + 1];
    } else {
      a = (uint64_t)(uint32_t)((const int32_t *)c->offsets)[i];
      b = (uint64_t)(uint32_t)((const int32_t *)c->offsets)[i + 1];
    }
    uint32_t window = (uint32_t)(a >> LM_WINDOW_SHIFT);
    lm_sv_make(&c->views[i], c->data + a, (uint32_t)(b - a), c->base + window, (uint32_t)(a & LM_WINDOW_MASK));
  }
  return LM_OK;
}

static lm_status views_from_offsets(const void *offsets, int wide, size_t n, const uint8_t *data, size_t data_len,
                                    uint32_t base, lm_string_view *views, const lm_exec *exec) {
  if (!offsets || (n && !views) || (!data && data_len)) return LM_EINVAL;
  lm_status s = wide ? lm_offsets64_validate((const int64_t *)offsets, n, data_len)
                     : lm_offsets32_validate((const int32_t *)offsets, n, data_len);
  if (s) return s;
  for (size_t i = 0; i < n; i++) {
    uint64_t len = wide ? (uint64_t)(((const int64_t *)offsets)[i + 1] - ((const int64_t *)offsets)[i])
                        : (uint64_t)(((const int32_t *)offsets)[i + 1] - ((const int32_t *)offsets)[i]);
    if (len > LM_MAX_STRING_LEN) return LM_EOVERFLOW;
  }
  if ((uint64_t)base + lm_window_count(data_len) > UINT32_MAX) return LM_EOVERFLOW;
  from_ctx c = {offsets, wide, data, base, views};
  lm_exec e = exec ? *exec : (lm_exec){1, 0};
  if (!e.min_items_per_thread) e.min_items_per_thread = 262144;
  return lm_parallel_for(&e, n, from_range, &c);
}

lm_status lm_views_from_offsets32(const int32_t *offsets, size_t n, const uint8_t *data, size_t data_len,
                                  uint32_t base_buffer, lm_string_view *views, const lm_exec *exec) {
  return views_from_offsets(offsets, 0, n, data, data_len, base_buffer, views, exec);
}

lm_status lm_views_from_offsets64(const int64_t *offsets, size_t n, const uint8_t *data, size_t data_len,
                                  uint32_t base_buffer, lm_string_view *views, const lm_exec *exec) {
  return views_from_offsets(offsets, 1, n, data, data_len, base_buffer, views, exec);
}
