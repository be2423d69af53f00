/* dedup.c — StreamDeduplicator: the ordered linear-probing table and the
 * public API.  The log, snapshots and recovery are in dedup_wal.c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dedup_internal.h"

/* ---------------------------------------------------------------- table */

static inline int is_empty(const lm_hash128_t *s) { return (s->lo | s->hi) == 0; }
static inline int is_zero_key(lm_hash128_t h) { return (h.lo | h.hi) == 0; }

static inline size_t home_of(uint64_t hi, size_t cap) {
  __extension__ typedef unsigned __int128 u128;
  return (size_t)(((u128)hi * (u128)cap) >> 64);
}

/* <0, 0, >0 as a < b, a == b, a > b, comparing (hi, lo). */
static inline int key_cmp(const lm_hash128_t *a, lm_hash128_t b) {
  if (a->hi != b.hi) return a->hi < b.hi ? -1 : 1;
  if (a->lo != b.lo) return a->lo < b.lo ? -1 : 1;
  return 0;
}

int lm_dt_init(lm_dtable *t, size_t cap) {
  if (cap < 16) cap = 16;
  memset(t, 0, sizeof *t);
  if (cap > ((size_t)1 << 40)) return -1; /* 16 TiB of slots: refuse rather than overflow */
  t->slots = (lm_hash128_t *)calloc(cap + LM_DT_TAIL, sizeof(lm_hash128_t));
  if (!t->slots) return -1;
  t->cap = cap;
  t->nslots = cap + LM_DT_TAIL;
  return 0;
}

void lm_dt_free(lm_dtable *t) {
  free(t->slots);
  memset(t, 0, sizeof *t);
}

/* 1 and *pos = its slot if found; 0 and *pos = where it would go. */
static inline int dt_find(const lm_dtable *t, lm_hash128_t h, size_t *pos) {
  size_t i = home_of(h.hi, t->cap);
  for (; i < t->nslots; i++) {
    const lm_hash128_t *s = &t->slots[i];
    if (is_empty(s)) break;
    int c = key_cmp(s, h);
    if (c >= 0) {
      *pos = i;
      return c == 0;
    }
  }
  *pos = i;
  return 0;
}

/* Rebuild into a table of new_cap home slots: the old array is globally sorted,
 * so each key goes to max(home, previous + 1). */
static int dt_rebuild(lm_dtable *t, size_t new_cap) {
  for (;;) {
    size_t nslots = new_cap + LM_DT_TAIL;
    lm_hash128_t *ns = (lm_hash128_t *)calloc(nslots, sizeof(lm_hash128_t));
    if (!ns) return -1;
    size_t next = 0;
    int ok = 1;
    for (size_t i = 0; i < t->nslots; i++) {
      const lm_hash128_t *s = &t->slots[i];
      if (is_empty(s)) continue;
      size_t p = home_of(s->hi, new_cap);
      if (p < next) p = next;
      if (p >= nslots) {
        ok = 0;
        break;
      }
      ns[p] = *s;
      next = p + 1;
    }
    if (ok) {
      free(t->slots);
      t->slots = ns;
      t->cap = new_cap;
      t->nslots = nslots;
      return 0;
    }
    free(ns);
    new_cap += new_cap / 2 + 1;
  }
}

static size_t grown_cap(size_t cap) { return cap + (cap * 3) / 5 + 1; /* x1.6 */ }

int lm_dt_insert(lm_dtable *t, lm_hash128_t h) {
  if (is_zero_key(h)) {
    if (t->has_zero) return 0;
    t->has_zero = 1;
    t->count++;
    return 1;
  }
  size_t pos;
  if (dt_find(t, h, &pos)) return 0;
  if ((t->count + 1) * 5 > t->cap * 4) { /* keep the load at most 80% */
    if (dt_rebuild(t, grown_cap(t->cap))) return -1;
    dt_find(t, h, &pos);
  }
  for (;;) {
    size_t j = pos;
    while (j < t->nslots && !is_empty(&t->slots[j])) j++;
    if (j < t->nslots) {
      memmove(&t->slots[pos + 1], &t->slots[pos], (j - pos) * sizeof(lm_hash128_t));
      t->slots[pos] = h;
      t->count++;
      return 1;
    }
    /* the run reached the end of the spare tail: grow and retry */
    if (dt_rebuild(t, grown_cap(t->cap))) return -1;
    dt_find(t, h, &pos);
  }
}

int lm_dt_check(const lm_dtable *t) {
  size_t held = 0, run_start = 0; /* first slot of the current run of occupied slots */
  const lm_hash128_t *prev = NULL;
  for (size_t i = 0; i < t->nslots; i++) {
    const lm_hash128_t *s = &t->slots[i];
    if (is_empty(s)) {
      run_start = i + 1;
      continue;
    }
    size_t home = home_of(s->hi, t->cap);
    /* at or after its home, with no empty slot in between, and globally sorted */
    if (home > i || home < run_start) return 0;
    if (prev && key_cmp(prev, *s) >= 0) return 0;
    prev = s;
    held++;
  }
  return held + (size_t)(t->has_zero != 0) == t->count;
}

int lm_dt_finish_load(lm_dtable *t, int has_zero) {
  size_t held = 0;
  for (size_t i = 0; i < t->nslots; i++) held += !is_empty(&t->slots[i]);
  t->has_zero = has_zero != 0;
  t->count = held + (size_t)t->has_zero;
  return lm_dt_check(t);
}

size_t lm_dedup_table_count(const lm_dedup *d) { return d->t.count; }
int lm_dedup_table_insert(lm_dedup *d, lm_hash128_t h) { return lm_dt_insert(&d->t, h); }
int lm_dedup_table_remove(lm_dedup *d, lm_hash128_t h) { return lm_dt_remove(&d->t, h); }
const lm_dtable *lm_dedup_table(const lm_dedup *d) { return &d->t; }
void lm_dedup_table_replace(lm_dedup *d, lm_dtable *t) {
  lm_dt_free(&d->t);
  d->t = *t;
  memset(t, 0, sizeof *t);
}

int lm_dt_contains(const lm_dtable *t, lm_hash128_t h) {
  if (is_zero_key(h)) return t->has_zero;
  size_t pos;
  return dt_find(t, h, &pos);
}

int lm_dt_remove(lm_dtable *t, lm_hash128_t h) {
  if (is_zero_key(h)) {
    if (!t->has_zero) return 0;
    t->has_zero = 0;
    t->count--;
    return 1;
  }
  size_t pos;
  if (!dt_find(t, h, &pos)) return 0;
  size_t j = pos + 1;
  while (j < t->nslots && !is_empty(&t->slots[j]) && home_of(t->slots[j].hi, t->cap) < j) {
    t->slots[j - 1] = t->slots[j];
    j++;
  }
  memset(&t->slots[j - 1], 0, sizeof(lm_hash128_t));
  t->count--;
  return 1;
}

/* ------------------------------------------------------------------ API */

lm_status lm_dedup_params_default(lm_dedup_params *p) {
  if (!p) return LM_EINVAL;
  memset(p, 0, sizeof *p);
  p->initial_capacity = 1024;
  p->wal_buffer_hashes = 4096;
  return LM_OK;
}

static char *dup_cat(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  char *s = (char *)malloc(la + lb + 1);
  if (!s) return NULL;
  memcpy(s, a, la);
  memcpy(s + la, b, lb + 1);
  return s;
}

lm_status lm_dedup_create(const lm_dedup_params *params, lm_dedup **out) {
  if (!out) return LM_EINVAL;
  *out = NULL;
  lm_dedup_params def;
  if (!params) {
    lm_dedup_params_default(&def);
    params = &def;
  }
  size_t bufc = params->wal_buffer_hashes ? params->wal_buffer_hashes : 4096;
  if (bufc > LM_WAL_MAX_REC || (params->wal_path && !params->wal_path[0])) return LM_EINVAL;
  lm_dedup *d = (lm_dedup *)calloc(1, sizeof *d);
  if (!d) return LM_ENOMEM;
  d->fd = -1;
  d->seed = params->seed;
  d->max_entries = params->max_entries;
  d->buf_cap = bufc;
  if (lm_dt_init(&d->t, params->initial_capacity ? params->initial_capacity : 1024)) {
    free(d);
    return LM_ENOMEM;
  }
  if (params->wal_path) {
    const char *p = params->wal_path;
    d->path = dup_cat(p, "");
    d->snap_path = dup_cat(p, ".snap");
    d->tmp_path = dup_cat(p, ".snap.tmp");
    d->dir_path = dup_cat(p, "");
    d->pend_raw = (uint8_t *)malloc(LM_WAL_REC_HDR + bufc * sizeof(lm_hash128_t));
    if (!d->path || !d->snap_path || !d->tmp_path || !d->dir_path || !d->pend_raw) {
      lm_dedup_destroy(d);
      return LM_ENOMEM;
    }
    d->pend = (lm_hash128_t *)(void *)(d->pend_raw + LM_WAL_REC_HDR);
    char *slash = strrchr(d->dir_path, '/');
    if (!slash) {
      strcpy(d->dir_path, ".");
    } else if (slash == d->dir_path) {
      slash[1] = 0;
    } else {
      *slash = 0;
    }
    lm_status s = lm_dwal_open(d);
    if (s) {
      int saved = errno; /* LM_EIO keeps the errno of the failed call */
      lm_dedup_destroy(d);
      errno = saved;
      return s;
    }
  }
  *out = d;
  return LM_OK;
}

lm_status lm_dedup_close(lm_dedup *d) {
  if (!d) return LM_EINVAL;
  if (d->closed) return LM_OK;
  lm_status s = LM_OK;
  if (d->fd >= 0) s = lm_dwal_close(d);
  d->closed = 1;
  return s;
}

void lm_dedup_destroy(lm_dedup *d) {
  if (!d) return;
  if (!d->closed && !d->failed) lm_dedup_close(d);
  if (d->fd >= 0) lm_dwal_close(d);
  lm_dt_free(&d->t);
  free(d->path);
  free(d->snap_path);
  free(d->tmp_path);
  free(d->dir_path);
  free(d->pend_raw);
  free(d);
}

static lm_status check_open(const lm_dedup *d) {
  if (!d) return LM_EINVAL;
  if (d->closed || d->failed) return LM_ESTATE;
  return LM_OK;
}

/* Admit h if new.  Table first, then the log buffer. */
static inline lm_status admit(lm_dedup *d, lm_hash128_t h, int *is_new) {
  d->st.probes++;
  int r;
  if (d->max_entries && d->t.count >= d->max_entries) {
    r = lm_dt_contains(&d->t, h) ? 0 : -2;
    if (r == -2) return LM_ETOOBIG;
  } else {
    r = lm_dt_insert(&d->t, h); /* one probe: finds it, or inserts where the probe stopped */
    if (r < 0) return LM_ENOMEM;
  }
  if (r == 0) {
    *is_new = 0;
    d->st.duplicates++;
    return LM_OK;
  }
  d->lsn++;
  d->st.inserts++;
  *is_new = 1;
  if (d->fd >= 0) return lm_dwal_append(d, h);
  return LM_OK;
}

lm_status lm_dedup_check_insert_hash(lm_dedup *d, lm_hash128_t h, int *is_new) {
  lm_status s = check_open(d);
  if (s) return s;
  if (!is_new) return LM_EINVAL;
  return admit(d, h, is_new);
}

lm_status lm_dedup_check_insert(lm_dedup *d, const uint8_t *text, size_t len, int *is_new) {
  lm_status s = check_open(d);
  if (s) return s;
  if (!is_new || (len && !text)) return LM_EINVAL;
  return admit(d, lm_hash128(text, len, d->seed), is_new);
}

static int cmp_hash(const void *a, const void *b) {
  const lm_hash128_t *x = (const lm_hash128_t *)a, *y = (const lm_hash128_t *)b;
  if (x->hi != y->hi) return x->hi < y->hi ? -1 : 1;
  if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
  return 0;
}

/* Would admitting hashes[0..n) pass max_entries?  Counts the distinct hashes the
 * table does not hold (only when the bound could be reached by this batch). */
static lm_status check_room(const lm_dedup *d, const lm_hash128_t *hashes, size_t n) {
  if (!d->max_entries || d->t.count + n <= d->max_entries) return LM_OK;
  lm_hash128_t *fresh = (lm_hash128_t *)malloc((n ? n : 1) * sizeof *fresh);
  if (!fresh) return LM_ENOMEM;
  size_t m = 0;
  for (size_t k = 0; k < n; k++)
    if (!lm_dt_contains(&d->t, hashes[k])) fresh[m++] = hashes[k];
  qsort(fresh, m, sizeof *fresh, cmp_hash);
  size_t distinct = 0;
  for (size_t k = 0; k < m; k++) distinct += k == 0 || cmp_hash(&fresh[k - 1], &fresh[k]) != 0;
  free(fresh);
  return d->t.count + distinct > d->max_entries ? LM_ETOOBIG : LM_OK;
}

lm_status lm_dedup_check_insert_hashes(lm_dedup *d, const lm_hash128_t *hashes, size_t n, uint8_t *is_new,
                                       size_t *n_done) {
  if (n_done) *n_done = 0;
  lm_status s = check_open(d);
  if (s) return s;
  if (n && (!hashes || !is_new)) return LM_EINVAL;
  s = check_room(d, hashes, n); /* all or nothing at the bound: no document admitted but not delivered */
  if (s) return s;
  enum { AHEAD = 16 };
  for (size_t k = 0; k < n; k++) {
    if (k + AHEAD < n) { /* the home slot's cache line and the next one (runs are short) */
      const lm_hash128_t *f = &hashes[k + AHEAD];
      const lm_hash128_t *slot = &d->t.slots[home_of(f->hi, d->t.cap)];
      __builtin_prefetch(slot);
      __builtin_prefetch(slot + 4);
    }
    int nw;
    s = admit(d, hashes[k], &nw);
    if (s) {
      if (n_done) *n_done = k;
      return s;
    }
    is_new[k] = (uint8_t)nw;
  }
  if (n_done) *n_done = n;
  return LM_OK;
}

lm_status lm_dedup_contains(const lm_dedup *d, lm_hash128_t h, int *found) {
  if (!d || !found) return LM_EINVAL;
  *found = lm_dt_contains(&d->t, h);
  return LM_OK;
}

typedef struct {
  const lm_docs *docs;
  lm_hash128_t *h;
  uint64_t seed;
} hash_ctx;

static lm_status hash_range(void *vctx, size_t b, size_t e) {
  hash_ctx *c = (hash_ctx *)vctx;
  for (size_t i = b; i < e; i++) {
    int64_t o0 = c->docs->offsets[i], o1 = c->docs->offsets[i + 1];
    c->h[i] = lm_hash128(c->docs->data + o0, (size_t)(o1 - o0), c->seed);
  }
  return LM_OK;
}

lm_status lm_dedup_run(lm_dedup *d, const lm_docs *docs, lm_batch_result *out, const lm_exec *exec) {
  lm_status s = check_open(d);
  if (s) return s;
  if (!out) return LM_EINVAL;
  s = lm_docs_validate(docs);
  if (s) return s;
  size_t n = docs->n;
  s = lm_batch_result_begin(out, n, (size_t)(docs->offsets[n] - docs->offsets[0]) + 1);
  if (s || !n) return s;
  lm_hash128_t *h = (lm_hash128_t *)malloc(n * sizeof *h);
  uint8_t *is_new = (uint8_t *)malloc(n);
  if (!h || !is_new) {
    free(h);
    free(is_new);
    return LM_ENOMEM;
  }
  hash_ctx hc = {docs, h, d->seed};
  lm_exec ex = {1, 0};
  if (exec) {
    ex = *exec;
    if (!ex.min_items_per_thread) ex.min_items_per_thread = 1024;
  }
  s = lm_parallel_for(&ex, n, hash_range, &hc);
  size_t done = 0;
  if (!s) s = lm_dedup_check_insert_hashes(d, h, n, is_new, &done);
  for (size_t i = 0; i < done; i++) {
    lm_status s2;
    if (is_new[i]) {
      int64_t o0 = docs->offsets[i], o1 = docs->offsets[i + 1];
      out->reasons[i] = LM_REASON_KEPT;
      s2 = lm_batch_result_push(out, (int64_t)i, docs->data + o0, (size_t)(o1 - o0));
    } else {
      out->reasons[i] = LM_REASON_DUPLICATE;
      s2 = LM_OK;
    }
    if (s2 && !s) s = s2;
    if (s2) break;
  }
  free(h);
  free(is_new);
  return s;
}

lm_status lm_dedup_lsn(const lm_dedup *d, uint64_t *lsn) {
  if (!d || !lsn) return LM_EINVAL;
  *lsn = d->lsn;
  return LM_OK;
}

lm_status lm_dedup_sync(lm_dedup *d, uint64_t *lsn) {
  lm_status s = check_open(d);
  if (s) return s;
  if (d->fd >= 0) s = lm_dwal_sync(d);
  if (!s && lsn) *lsn = d->lsn;
  return s;
}

lm_status lm_dedup_truncate(lm_dedup *d, uint64_t lsn) {
  lm_status s = check_open(d);
  if (s) return s;
  if (lsn > d->lsn) return LM_ERANGE;
  if (lsn == d->lsn) return LM_OK;
  if (d->fd < 0) return LM_ESTATE;
  return lm_dwal_truncate(d, lsn);
}

lm_status lm_dedup_snapshot(lm_dedup *d) {
  lm_status s = check_open(d);
  if (s) return s;
  if (d->fd < 0) return LM_OK;
  return lm_dwal_snapshot(d);
}

lm_status lm_dedup_stats_get(const lm_dedup *d, lm_dedup_stats *out) {
  if (!d || !out) return LM_EINVAL;
  *out = d->st;
  out->entries = d->t.count;
  out->capacity = d->t.nslots;
  out->table_bytes = (uint64_t)d->t.nslots * sizeof(lm_hash128_t);
  out->bytes_per_entry = d->t.count ? (double)out->table_bytes / (double)d->t.count : 0.0;
  out->max_entries = d->max_entries;
  out->lsn = d->lsn;
  out->written_lsn = d->fd >= 0 || d->path ? d->written_lsn : d->lsn;
  out->durable_lsn = d->fd >= 0 || d->path ? d->durable_lsn : d->lsn;
  out->wal_bytes = d->wal_size;
  out->snapshot_lsn = d->snapshot_known == 1 ? d->snapshot_lsn : 0;
  return LM_OK;
}

lm_status lm_dedup_foreach(const lm_dedup *d, int (*fn)(void *ctx, lm_hash128_t h), void *ctx) {
  if (!d || !fn) return LM_EINVAL;
  if (d->t.has_zero) {
    lm_hash128_t z = {0, 0};
    if (fn(ctx, z)) return LM_OK;
  }
  for (size_t i = 0; i < d->t.nslots; i++)
    if (!is_empty(&d->t.slots[i]) && fn(ctx, d->t.slots[i])) break;
  return LM_OK;
}
