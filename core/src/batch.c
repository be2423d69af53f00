#include "luminamoon/batch.h"
#include "luminamoon/bytebuf.h"

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
  return lm_grow_array(p, cap, need, elem, 64);
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

/* ---- lm_batch_run ---- */

typedef struct {
  const lm_batch_stage *vt;
  void *stage;
  const lm_docs *docs;
  int32_t *reasons;
  size_t *out_len;    /* per document: bytes it appended to its range's arena */
  lm_bytebuf *arenas; /* per range */
  uint8_t *counters;  /* per range: counters_size bytes */
  size_t grain;
} run_ctx;

static lm_status run_ranges(void *vctx, size_t begin, size_t end) {
  run_ctx *x = (run_ctx *)vctx;
  const lm_batch_stage *vt = x->vt;
  void *scratch = NULL;
  lm_status st = vt->scratch_create ? vt->scratch_create(x->stage, &scratch) : LM_OK;
  if (st) return st;
  for (size_t r = begin; r < end && !st; r++) {
    lm_bytebuf *arena = &x->arenas[r];
    void *counters = x->counters + r * vt->counters_size;
    size_t d0 = r * x->grain, d1 = d0 + x->grain;
    if (d1 > x->docs->n) d1 = x->docs->n;
    for (size_t d = d0; d < d1; d++) {
      const uint8_t *t = x->docs->data + x->docs->offsets[d];
      size_t n = (size_t)(x->docs->offsets[d + 1] - x->docs->offsets[d]);
      size_t before = arena->len;
      st = vt->doc(x->stage, scratch, t, n, arena, counters, &x->reasons[d]);
      if (st) break;
      x->out_len[d] = arena->len - before;
    }
  }
  if (vt->scratch_destroy) vt->scratch_destroy(scratch);
  return st;
}

lm_status lm_batch_run(const lm_batch_stage *vt, void *stage, const lm_docs *docs, lm_batch_result *out,
                       const lm_exec *exec) {
  if (!vt || !vt->doc || !vt->merge || !out) return LM_EINVAL;
  lm_status st = lm_docs_validate(docs);
  if (st) return st;
  size_t n = docs->n;
  st = lm_batch_result_begin(out, n, docs->data_len);
  if (st) return st;
  if (n == 0) return LM_OK;
  size_t grain = vt->grain ? vt->grain : 64;
  size_t nr = n / grain + (n % grain != 0);
  if (vt->counters_size && nr > SIZE_MAX / vt->counters_size) return LM_EOVERFLOW;
  run_ctx x = {vt, stage, docs, out->reasons, (size_t *)malloc(n * sizeof(size_t)),
               (lm_bytebuf *)calloc(nr, sizeof(lm_bytebuf)),
               (uint8_t *)calloc(vt->counters_size ? nr : 1, vt->counters_size ? vt->counters_size : 1), grain};
  if (x.out_len && x.arenas && x.counters) {
    lm_exec ex = exec ? *exec : (lm_exec){1, 0};
    if (ex.min_items_per_thread == 0) ex.min_items_per_thread = 4;
    st = lm_parallel_for(&ex, nr, run_ranges, &x);
    for (size_t r = 0; r < nr && !st; r++) { /* ordered gather */
      const lm_bytebuf *a = &x.arenas[r];
      size_t d0 = r * grain, d1 = d0 + grain, pos = 0;
      if (d1 > n) d1 = n;
      for (size_t d = d0; d < d1 && !st; d++) {
        if (out->reasons[d] != LM_REASON_KEPT) continue;
        /* a->data is NULL when the range kept only empty texts (NULL + 0 is UB) */
        st = lm_batch_result_push(out, (int64_t)d, a->data ? a->data + pos : NULL, x.out_len[d]);
        pos += x.out_len[d];
      }
    }
    if (!st)
      for (size_t r = 0; r < nr; r++) vt->merge(stage, x.counters + r * vt->counters_size);
  } else {
    st = LM_ENOMEM;
  }
  if (x.arenas)
    for (size_t r = 0; r < nr; r++) lm_bytebuf_free(&x.arenas[r]);
  free(x.arenas);
  free(x.counters);
  free(x.out_len);
  return st;
}
