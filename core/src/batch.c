#include "luminamoon/batch.h"

#include <stdlib.h>
#include <string.h>

lm_status lm_batch_result_init(lm_batch_result *r) {
  if (!r) return LM_EINVAL;
  memset(r, 0, sizeof *r);
  return LM_OK;
}

void lm_batch_result_free(lm_batch_result *r) {
  if (!r) return;
  free(r->offsets);
  free(r->data);
  free(r->source_index);
  free(r->reasons);
  memset(r, 0, sizeof *r);
}

static lm_status grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return LM_OK;
  size_t ncap = *cap ? *cap : 64;
  while (ncap < need) {
    if (ncap > SIZE_MAX / 2) return LM_EOVERFLOW;
    ncap *= 2;
  }
  if (ncap > SIZE_MAX / elem) return LM_EOVERFLOW;
  void *q = realloc(*p, ncap * elem);
  if (!q) return LM_ENOMEM;
  *p = q;
  *cap = ncap;
  return LM_OK;
}

static lm_status grow_out(lm_batch_result *r, size_t need_out) {
  size_t cap = r->cap_out, cap2 = r->cap_out;
  lm_status s = grow((void **)&r->source_index, &cap, need_out, sizeof(int64_t));
  if (s) return s;
  s = grow((void **)&r->offsets, &cap2, need_out + 1, sizeof(int64_t));
  if (s) return s;
  r->cap_out = cap < cap2 - 1 ? cap : cap2 - 1;
  return LM_OK;
}

lm_status lm_batch_result_begin(lm_batch_result *r, size_t n_in, size_t data_hint) {
  if (!r) return LM_EINVAL;
  lm_status s = grow((void **)&r->reasons, &r->cap_in, n_in ? n_in : 1, sizeof(int32_t));
  if (s) return s;
  s = grow_out(r, 1);
  if (s) return s;
  s = grow((void **)&r->data, &r->cap_data, data_hint ? data_hint : 1, 1);
  if (s) return s;
  r->n_in = n_in;
  r->n_out = 0;
  r->data_len = 0;
  r->offsets[0] = 0;
  return LM_OK;
}

lm_status lm_batch_result_reserve_data(lm_batch_result *r, size_t extra, uint8_t **dst) {
  if (!r || !dst) return LM_EINVAL;
  if (extra > SIZE_MAX - r->data_len) return LM_EOVERFLOW;
  lm_status s = grow((void **)&r->data, &r->cap_data, r->data_len + extra, 1);
  if (s) return s;
  *dst = r->data + r->data_len;
  return LM_OK;
}

lm_status lm_batch_result_commit(lm_batch_result *r, int64_t src, size_t len) {
  if (!r || src < 0 || (size_t)src >= r->n_in) return LM_EINVAL;
  if (len > r->cap_data - r->data_len) return LM_EINVAL;
  lm_status s = grow_out(r, r->n_out + 1);
  if (s) return s;
  r->data_len += len;
  r->source_index[r->n_out] = src;
  r->n_out++;
  r->offsets[r->n_out] = (int64_t)r->data_len;
  return LM_OK;
}

lm_status lm_batch_result_push(lm_batch_result *r, int64_t src, const uint8_t *text, size_t len) {
  if (!r || (len && !text)) return LM_EINVAL;
  uint8_t *dst;
  lm_status s = lm_batch_result_reserve_data(r, len, &dst);
  if (s) return s;
  if (len) memcpy(dst, text, len);
  return lm_batch_result_commit(r, src, len);
}

lm_status lm_docs_validate(const lm_docs *d) {
  if (!d || !d->offsets || (!d->data && d->data_len)) return LM_EINVAL;
  if (d->offsets[0] < 0) return LM_EINVAL;
  for (size_t i = 0; i < d->n; i++)
    if (d->offsets[i + 1] < d->offsets[i]) return LM_EINVAL;
  if ((uint64_t)d->offsets[d->n] > (uint64_t)d->data_len) return LM_EINVAL;
  return LM_OK;
}
