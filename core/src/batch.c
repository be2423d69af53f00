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

lm_status lm_batch_result_reserve_out(lm_batch_result *r, size_t extra) {
  if (!r) return LM_EINVAL;
  if (extra > SIZE_MAX / 2 - r->n_out) return LM_EOVERFLOW;
  return grow_out(r, r->n_out + extra);
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

/* ---- lm_batch_plan ---- */

#include <stdatomic.h>

void lm_batch_plan_init(lm_batch_plan *p) {
  if (p) memset(p, 0, sizeof *p);
}

void lm_batch_plan_free(lm_batch_plan *p) {
  if (!p) return;
  free(p->start);
  free(p->order);
  memset(p, 0, sizeof *p);
}

static size_t sat_add(size_t a, size_t b) { return a > SIZE_MAX - b ? SIZE_MAX : a + b; }

typedef struct {
  size_t w, r;
} range_weight;

/* heaviest first, then in range order */
static int by_weight_desc(const void *a, const void *b) {
  const range_weight *x = (const range_weight *)a, *y = (const range_weight *)b;
  if (x->w != y->w) return x->w > y->w ? -1 : 1;
  return x->r < y->r ? -1 : x->r > y->r;
}

/* p->order = the ranges, heaviest first (weights as in lm_batch_plan_make). */
static lm_status plan_order(lm_batch_plan *p, const int64_t *prefix) {
  size_t nr = p->nranges;
  p->ordered = 0;
  if (p->nworkers < 2 || nr < 2) return LM_OK;
  if (nr > SIZE_MAX / (2 * sizeof(size_t))) return LM_EOVERFLOW;
  lm_status s = lm_grow_array((void **)&p->order, &p->cap_order, 2 * nr, sizeof(size_t), 64);
  if (s) return s;
  range_weight *rw = (range_weight *)(void *)p->order; /* 2 entries per range, then compacted */
  for (size_t r = 0; r < nr; r++) {
    size_t a = p->start[r], b = p->start[r + 1];
    size_t bytes = (size_t)(prefix[b] - prefix[a]), items = b - a;
    size_t w = items > SIZE_MAX / LM_BATCH_ITEM_COST ? SIZE_MAX : items * LM_BATCH_ITEM_COST;
    rw[r].w = sat_add(bytes, w);
    rw[r].r = r;
  }
  qsort(rw, nr, sizeof *rw, by_weight_desc);
  for (size_t k = 0; k < nr; k++) p->order[k] = rw[k].r; /* k <= 2k: reads ahead of the writes */
  p->ordered = 1;
  return LM_OK;
}


lm_status lm_batch_plan_make(lm_batch_plan *p, const int64_t *prefix, size_t n, const lm_exec *exec,
                             size_t max_items) {
  if (!p || !prefix) return LM_EINVAL;
  if (!max_items) max_items = 256;
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    if (prefix[i + 1] < prefix[i]) return LM_EINVAL;
    total = sat_add(total, sat_add((size_t)(prefix[i + 1] - prefix[i]), LM_BATCH_ITEM_COST));
  }
  size_t workers = 1;
  if (exec && exec->num_threads > 1) {
    workers = (size_t)exec->num_threads;
    if (workers > 256) workers = 256;
    size_t by = exec->min_items_per_thread ? n / exec->min_items_per_thread : total / LM_BATCH_MIN_THREAD_BYTES;
    if (by < workers) workers = by ? by : 1;
  }
  size_t target = total / (workers * 32);
  if (target > LM_BATCH_MAX_RANGE_BYTES) target = LM_BATCH_MAX_RANGE_BYTES;
  if (!(exec && exec->min_items_per_thread) && target < LM_BATCH_MIN_RANGE_BYTES) target = LM_BATCH_MIN_RANGE_BYTES;
  if (!target) target = 1;
  /* worst case one range per item */
  lm_status s = lm_grow_array((void **)&p->start, &p->cap, n + 2, sizeof(size_t), 64);
  if (s) return s;
  /* With more than one worker the last `workers * target` of the weight (in
   * item order) is cut LM_BATCH_TAIL_SPLIT times finer: lighter than the
   * others, those ranges are handed out last (heaviest first), so the workers
   * run out of work within a small range of each other instead of one range
   * (issue 14: the wait for the last range at the end of each parallel phase
   * was most of the 2-thread loss besides the serial parts). */
  size_t tail = workers > 1 && total < SIZE_MAX ? (workers * target < total ? workers * target : total) : 0;
  size_t small = target / LM_BATCH_TAIL_SPLIT ? target / LM_BATCH_TAIL_SPLIT : 1;
  size_t nr = 0, cur_w = 0, cur_n = 0, rest = total; /* rest: the weight of items [i, n) */
  p->start[0] = 0;
  for (size_t i = 0; i < n; i++) {
    size_t w = sat_add((size_t)(prefix[i + 1] - prefix[i]), LM_BATCH_ITEM_COST);
    size_t t = rest <= tail ? small : target;
    rest -= w < rest ? w : rest;
    if (cur_n && (cur_w > t - (w < t ? w : t) || cur_n >= max_items)) {
      p->start[++nr] = i; /* close the range before this item */
      cur_w = cur_n = 0;
    }
    cur_w = sat_add(cur_w, w);
    cur_n++;
  }
  if (cur_n || n == 0) p->start[++nr] = n;
  if (n == 0) nr = 0;
  p->nranges = nr;
  p->nworkers = workers < nr ? workers : (nr ? nr : 1);
  return plan_order(p, prefix);
}

static _Atomic(lm_batch_range_hook) g_hook;
static void *_Atomic g_hook_arg;

void lm_batch_set_test_hook(lm_batch_range_hook hook, void *arg) {
  atomic_store(&g_hook_arg, arg);
  atomic_store(&g_hook, hook);
}

typedef struct {
  const lm_batch_plan *p;
  lm_batch_range_fn fn;
  void *ctx;
  lm_batch_range_hook hook;
  void *hook_arg;
} plan_task_ctx;

static lm_status plan_task(void *vctx, size_t worker, size_t t) {
  plan_task_ctx *x = (plan_task_ctx *)vctx;
  size_t r = x->p->ordered ? x->p->order[t] : t; /* task t runs range r */
  if (x->hook) x->hook(x->hook_arg, worker, r);
  return x->fn(x->ctx, worker, r, x->p->start[r], x->p->start[r + 1]);
}

lm_status lm_batch_plan_run(const lm_batch_plan *p, lm_batch_range_fn fn, void *ctx) {
  if (!p || !fn) return LM_EINVAL;
  plan_task_ctx x = {p, fn, ctx, atomic_load(&g_hook), atomic_load(&g_hook_arg)};
  return lm_parallel_tasks(p->nworkers, p->nranges, plan_task, &x);
}

/* ---- lm_batch_pool ---- */

lm_status lm_batch_pool_get(lm_batch_pool *p, size_t n) {
  if (!p) return LM_EINVAL;
  if (n > p->n) {
    if (n > SIZE_MAX / sizeof(lm_bytebuf)) return LM_EOVERFLOW;
    lm_bytebuf *a = (lm_bytebuf *)realloc(p->arenas, n * sizeof *a);
    if (!a) return LM_ENOMEM;
    memset(a + p->n, 0, (n - p->n) * sizeof *a);
    p->arenas = a;
    p->n = n;
  }
  for (size_t i = 0; i < p->n; i++) p->arenas[i].len = 0;
  return LM_OK;
}

void lm_batch_pool_trim(lm_batch_pool *p, size_t keep_bytes) {
  if (!p) return;
  size_t kept = 0, last = 0;
  for (size_t i = 0; i < p->n; i++) {
    lm_bytebuf *a = &p->arenas[i];
    if (!a->cap) continue;
    if (a->cap > keep_bytes / 4 || a->cap > keep_bytes - kept) {
      lm_bytebuf_free(a);
    } else {
      kept += a->cap;
      last = i + 1;
    }
  }
  if (last < p->n) { /* drop the empty tail of the array too */
    if (last == 0) {
      free(p->arenas);
      p->arenas = NULL;
    } else {
      lm_bytebuf *a = (lm_bytebuf *)realloc(p->arenas, last * sizeof *a);
      if (a) p->arenas = a;
    }
    p->n = last;
  }
}

size_t lm_batch_pool_bytes(const lm_batch_pool *p) {
  if (!p) return 0;
  size_t b = p->n * sizeof(lm_bytebuf);
  for (size_t i = 0; i < p->n; i++) b += p->arenas[i].cap;
  return b;
}

void lm_batch_pool_free(lm_batch_pool *p) {
  if (!p) return;
  for (size_t i = 0; i < p->n; i++) lm_bytebuf_free(&p->arenas[i]);
  free(p->arenas);
  memset(p, 0, sizeof *p);
}

/* ---- lm_batch_run ---- */

typedef struct {
  const lm_batch_stage *vt;
  const lm_batch_opts *opts;
  void *stage;
  const lm_docs *docs;
  int32_t *reasons;
  size_t *out_len;    /* per document: bytes it appended to its range's arena */
  lm_bytebuf *arenas; /* per range */
  uint8_t *counters;  /* per range: counters_size bytes */
  void **scratch;     /* per worker (created lazily) */
  int pre;            /* the counting pass */
} run_ctx;

static lm_status run_range(void *vctx, size_t worker, size_t r, size_t d0, size_t d1) {
  run_ctx *x = (run_ctx *)vctx;
  const lm_batch_stage *vt = x->vt;
  lm_status st = LM_OK;
  if (vt->scratch_create && !x->scratch[worker]) {
    st = vt->scratch_create(x->stage, &x->scratch[worker]);
    if (st) return st;
  }
  void *scratch = x->scratch[worker];
  void *counters = x->counters + r * vt->counters_size;
  const int64_t *off = x->docs->offsets;
  if (x->pre) {
    for (size_t d = d0; d < d1 && !st; d++)
      st = x->opts->pre_doc(x->stage, scratch, x->docs->data + off[d], (size_t)(off[d + 1] - off[d]), counters);
    return st;
  }
  lm_bytebuf *arena = &x->arenas[r];
  for (size_t d = d0; d < d1; d++) {
    size_t before = arena->len;
    st = vt->doc(x->stage, scratch, x->docs->data + off[d], (size_t)(off[d + 1] - off[d]), arena, counters,
                 &x->reasons[d]);
    if (st) break;
    x->out_len[d] = arena->len - before;
  }
  return st;
}

lm_status lm_batch_run(const lm_batch_stage *vt, void *stage, const lm_docs *docs, lm_batch_result *out,
                       const lm_exec *exec) {
  return lm_batch_run_ex(vt, NULL, stage, docs, out, exec);
}

lm_status lm_batch_run_ex(const lm_batch_stage *vt, const lm_batch_opts *opts, void *stage, const lm_docs *docs,
                          lm_batch_result *out, const lm_exec *exec) {
  if (!vt || !vt->doc || !vt->merge || !out) return LM_EINVAL;
  if (!vt->scratch_create != !vt->scratch_destroy) return LM_EINVAL;
  if (opts && !opts->pre_doc != !opts->pre_done) return LM_EINVAL;
  lm_status st = lm_docs_validate(docs);
  if (st) return st;
  size_t n = docs->n;
  st = lm_batch_result_begin(out, n, (size_t)(docs->offsets[n] - docs->offsets[0]) + 16);
  if (st) return st;
  if (n == 0) return LM_OK;
  lm_batch_plan plan;
  lm_batch_plan_init(&plan);
  st = lm_batch_plan_make(&plan, docs->offsets, n, exec, vt->grain);
  if (st) return st;
  if (opts && opts->pre_doc && plan.nworkers == 1 && plan.nranges > 1) {
    plan.start[1] = n; /* one worker: one range, no counting pass needed */
    plan.nranges = 1;
  }
  size_t nr = plan.nranges, cs = vt->counters_size;
  lm_batch_pool local = {NULL, 0};
  lm_batch_pool *pool = opts && opts->pool ? opts->pool : &local;
  if (cs && nr > SIZE_MAX / cs) {
    lm_batch_plan_free(&plan);
    return LM_EOVERFLOW;
  }
  run_ctx x = {vt, opts, stage, docs, out->reasons, (size_t *)malloc(n * sizeof(size_t)), NULL,
               (uint8_t *)calloc(cs ? nr : 1, cs ? cs : 1), (void **)calloc(plan.nworkers, sizeof(void *)), 0};
  st = lm_batch_pool_get(pool, nr);
  if (!st && (!x.out_len || !x.counters || !x.scratch)) st = LM_ENOMEM;
  if (!st) {
    x.arenas = pool->arenas;
    if (opts && opts->pre_doc && nr > 1) { /* counting pass, then the stage prepares each range's counters */
      x.pre = 1;
      st = lm_batch_plan_run(&plan, run_range, &x);
      x.pre = 0;
      if (!st) opts->pre_done(stage, x.counters, nr);
    }
    if (!st) st = lm_batch_plan_run(&plan, run_range, &x);
  }
  if (!st) { /* ordered gather: one copy into the output */
    size_t total = 0;
    for (size_t r = 0; r < nr; r++) total += x.arenas[r].len;
    uint8_t *dst = NULL;
    st = lm_batch_result_reserve_data(out, total, &dst);
    (void)dst;
    for (size_t r = 0; r < nr && !st; r++) {
      const lm_bytebuf *a = &x.arenas[r];
      size_t pos = 0;
      for (size_t d = plan.start[r]; d < plan.start[r + 1] && !st; d++) {
        /* a->data is NULL when the range kept only empty texts (NULL + 0 is UB) */
        if (out->reasons[d] == LM_REASON_KEPT)
          st = lm_batch_result_push(out, (int64_t)d, a->data ? a->data + pos : NULL, x.out_len[d]);
        pos += x.out_len[d];
      }
    }
  }
  if (!st)
    for (size_t r = 0; r < nr; r++) vt->merge(stage, x.counters + r * cs);
  if (x.scratch && vt->scratch_destroy)
    for (size_t w = 0; w < plan.nworkers; w++)
      if (x.scratch[w]) vt->scratch_destroy(x.scratch[w]);
  if (pool == &local) lm_batch_pool_free(&local);
  else lm_batch_pool_trim(pool, opts->keep_bytes ? opts->keep_bytes : LM_BATCH_RETAIN_BYTES);
  lm_batch_plan_free(&plan);
  free(x.scratch);
  free(x.counters);
  free(x.out_len);
  return st;
}
