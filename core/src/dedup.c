/* dedup.c — StreamDeduplicator: the ordered linear-probing table and the
 * public API.  The log, snapshots and recovery are in dedup_wal.c. */
#define _GNU_SOURCE /* MAP_ANONYMOUS, madvise */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dedup_internal.h"
#include "durable_internal.h"

/* ---------------------------------------------------------------- table */

/* Growth is incremental: when an insert would pass 80% load, a new array of
 * x1.6 the home slots is allocated (mmap: zero pages, no memset, no copy) and
 * every later insert migrates LM_DT_MIGRATE_STEP slots of the old array into
 * it, in order.  The old array is globally sorted, so migrated keys are
 * appended: each goes to the first empty slot at or after its new home (all
 * the keys already in the new array are smaller).  The keys <= mig_last live
 * in the new array, the larger ones in old[mig_pos..): a lookup, insert or
 * delete goes to one array by comparing with mig_last.  In the old array a
 * probe starts at max(home, mig_pos): the slots before mig_pos are migrated
 * (and their pages given back), and the keys after it are all > mig_last.
 * Each insert (or duplicate) migrates 16 slots, so the migration ends after
 * old_nslots / 16 of them: the old array's load grows by at most 1/16 on the
 * way (80% -> 86%), and a batch of n hashes moves at most n * 16 slots.  The
 * new array's pages are mapped ahead of the migration (MADV_POPULATE_WRITE)
 * and the old array's migrated pages given back (MADV_DONTNEED), so growing
 * to 10 M entries in batches of 4096 takes at most ~2 ms of CPU per batch
 * (was: one 132 ms rebuild at 9.9 M). */
#define LM_DT_MIGRATE_STEP 16u
#define LM_DT_MMAP_MIN ((size_t)1 << 20) /* arrays of at least 1 MiB are mmap'ed */
#define LM_DT_RELEASE ((size_t)1 << 20)  /* migrated old pages are given back in 1 MiB steps */
#define LM_DT_MAX_CAP ((size_t)1 << 40)  /* 16 TiB of slots: refuse rather than overflow */

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

/* Zeroed slots; *mapped = 1 when they come from mmap (large arrays: the pages
 * are zero-filled on first touch, so allocating costs no time). */
static lm_hash128_t *slots_alloc(size_t n, unsigned char *mapped) {
  size_t bytes = n * sizeof(lm_hash128_t); /* n <= LM_DT_MAX_CAP + LM_DT_TAIL: no overflow */
  *mapped = 0;
  if (bytes >= LM_DT_MMAP_MIN) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    *mapped = 1;
    return (lm_hash128_t *)p;
  }
  return (lm_hash128_t *)calloc(n, sizeof(lm_hash128_t));
}

static void slots_free(lm_hash128_t *p, size_t n, unsigned char mapped) {
  if (!p) return;
  if (mapped)
    munmap(p, n * sizeof(lm_hash128_t));
  else
    free(p);
}

int lm_dt_init(lm_dtable *t, size_t cap) {
  if (cap < 16) cap = 16;
  memset(t, 0, sizeof *t);
  if (cap > LM_DT_MAX_CAP) return -1;
  t->slots = slots_alloc(cap + LM_DT_TAIL, &t->mapped);
  if (!t->slots) return -1;
  t->cap = cap;
  t->nslots = cap + LM_DT_TAIL;
  return 0;
}

void lm_dt_free(lm_dtable *t) {
  slots_free(t->slots, t->nslots, t->mapped);
  slots_free(t->old, t->old_nslots, t->old_mapped);
  memset(t, 0, sizeof *t);
}

/* One array of an ordered table: probe from max(home, from).  1 and *pos = its
 * slot if found; 0 and *pos = where it would go. */
static inline int arr_find(const lm_hash128_t *a, size_t nslots, size_t cap, size_t from, lm_hash128_t h,
                           size_t *pos) {
  size_t i = home_of(h.hi, cap);
  if (i < from) i = from;
  for (; i < nslots; i++) {
    const lm_hash128_t *s = &a[i];
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

/* Put h at pos, shifting the run right to its first empty slot: 0, or -1 when
 * the run reaches the end of the array (nothing changed). */
static inline int arr_put(lm_hash128_t *a, size_t nslots, size_t pos, lm_hash128_t h) {
  size_t j = pos;
  while (j < nslots && !is_empty(&a[j])) j++;
  if (j >= nslots) return -1;
  memmove(&a[pos + 1], &a[pos], (j - pos) * sizeof(lm_hash128_t));
  a[pos] = h;
  return 0;
}

/* Delete the key at pos by a backward shift. */
static inline void arr_del(lm_hash128_t *a, size_t nslots, size_t cap, size_t pos) {
  size_t j = pos + 1;
  while (j < nslots && !is_empty(&a[j]) && home_of(a[j].hi, cap) < j) {
    a[j - 1] = a[j];
    j++;
  }
  memset(&a[j - 1], 0, sizeof(lm_hash128_t));
}

/* The array that holds (or would hold) h. */
typedef struct {
  lm_hash128_t *a;
  size_t nslots, cap, from;
} dt_side;

static inline dt_side side_of(const lm_dtable *t, lm_hash128_t h) {
  dt_side s;
  if (!t->old || (t->mig_any && key_cmp(&t->mig_last, h) >= 0)) {
    s.a = t->slots;
    s.nslots = t->nslots;
    s.cap = t->cap;
    s.from = 0;
  } else {
    s.a = t->old;
    s.nslots = t->old_nslots;
    s.cap = t->old_cap;
    s.from = t->mig_pos;
  }
  return s;
}

/* Rebuild every key (the new array's, then the old array's rest: one sorted
 * sequence) into a fresh array of new_cap home slots, all at once; ends a
 * growth in progress.  Only when a run reaches the end of an array's spare
 * tail (keys crowding one place): normal growth is incremental. */
static int dt_rebuild_all(lm_dtable *t, size_t new_cap) {
  for (;;) {
    if (new_cap > LM_DT_MAX_CAP) return -1;
    size_t nslots = new_cap + LM_DT_TAIL;
    unsigned char mapped;
    lm_hash128_t *ns = slots_alloc(nslots, &mapped);
    if (!ns) return -1;
    size_t next = 0;
    int ok = 1;
    for (int part = 0; part < 2 && ok; part++) {
      const lm_hash128_t *a = part ? t->old : t->slots;
      size_t i = part ? t->mig_pos : 0, end = part ? t->old_nslots : t->nslots;
      if (!a) break;
      for (; i < end; i++) {
        const lm_hash128_t *s = &a[i];
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
    }
    if (ok) {
      size_t count = t->count;
      int has_zero = t->has_zero;
      lm_dt_free(t);
      t->slots = ns;
      t->mapped = mapped;
      t->cap = new_cap;
      t->nslots = nslots;
      t->count = count;
      t->has_zero = has_zero;
      return 0;
    }
    slots_free(ns, nslots, mapped);
    new_cap += new_cap / 2 + 1;
  }
}

static size_t grown_cap(size_t cap) { return cap + (cap * 3) / 5 + 1; /* x1.6 */ }

/* Migrate up to `budget` slots of the old array.  0, or -1 out of memory (only
 * when the new array overflowed and the stop-the-world rebuild failed; the
 * table is then still valid, the migration still in progress). */
static int dt_migrate(lm_dtable *t, size_t budget) {
  if (!t->old) return 0;
  size_t end = t->old_nslots - t->mig_pos > budget ? t->mig_pos + budget : t->old_nslots;
#ifdef MADV_POPULATE_WRITE
  if (t->mapped) { /* map the new array's pages ahead of the keys, 1 MiB at a time: one call instead of
                      two page faults per page (a read maps the zero page, the write copies it) */
    __extension__ typedef unsigned __int128 u128;
    size_t want = (size_t)((u128)end * t->cap / t->old_cap) + 2 * LM_DT_TAIL;
    if (want > t->nslots) want = t->nslots;
    if (want > t->populated) {
      size_t from = t->populated * sizeof(lm_hash128_t), to = want * sizeof(lm_hash128_t);
      to = (to + LM_DT_RELEASE - 1) / LM_DT_RELEASE * LM_DT_RELEASE;
      size_t total = (t->nslots * sizeof(lm_hash128_t) + 4095) / 4096 * 4096;
      if (to > total) to = total;
      (void)madvise((char *)t->slots + from, to - from, MADV_POPULATE_WRITE); /* a hint: faults do it otherwise */
      t->populated = to / sizeof(lm_hash128_t);
    }
  }
#endif
  for (size_t i = t->mig_pos; i < end; i++) {
    lm_hash128_t k = t->old[i];
    if (is_empty(&k)) continue;
    size_t p = home_of(k.hi, t->cap);
    while (p < t->nslots && !is_empty(&t->slots[p])) p++; /* every key there is smaller */
    if (p >= t->nslots) {
      t->mig_pos = i;
      return dt_rebuild_all(t, grown_cap(t->cap));
    }
    t->slots[p] = k;
    t->mig_last = k;
    t->mig_any = 1;
  }
  t->mig_pos = end;
  if (end == t->old_nslots) { /* done */
    slots_free(t->old, t->old_nslots, t->old_mapped);
    t->old = NULL;
    t->old_cap = t->old_nslots = t->mig_pos = t->old_released = t->populated = 0;
    t->old_mapped = 0;
    t->mig_any = 0;
    return 0;
  }
  if (t->old_mapped) { /* give back the pages wholly migrated (never read again) */
    size_t done_bytes = t->mig_pos * sizeof(lm_hash128_t), rel = t->old_released * sizeof(lm_hash128_t);
    if (done_bytes - rel >= LM_DT_RELEASE) {
      size_t upto = done_bytes / LM_DT_RELEASE * LM_DT_RELEASE;
      if (madvise((char *)t->old + rel, upto - rel, MADV_DONTNEED) == 0) t->old_released = upto / sizeof(lm_hash128_t);
    }
  }
  return 0;
}

int lm_dt_finish_growth(lm_dtable *t) { return dt_migrate(t, (size_t)-1); }

/* Start a growth: the current array becomes the old one. */
static int dt_start_growth(lm_dtable *t) {
  size_t ncap = grown_cap(t->cap);
  if (ncap > LM_DT_MAX_CAP) return -1;
  unsigned char mapped;
  lm_hash128_t *ns = slots_alloc(ncap + LM_DT_TAIL, &mapped);
  if (!ns) return -1;
  t->old = t->slots;
  t->old_cap = t->cap;
  t->old_nslots = t->nslots;
  t->old_mapped = t->mapped;
  t->mig_pos = t->old_released = t->populated = 0;
  t->mig_any = 0;
  t->slots = ns;
  t->mapped = mapped;
  t->cap = ncap;
  t->nslots = ncap + LM_DT_TAIL;
  return 0;
}

int lm_dt_insert(lm_dtable *t, lm_hash128_t h) {
  if (is_zero_key(h)) {
    if (t->has_zero) return 0;
    t->has_zero = 1;
    t->count++;
    return 1;
  }
  if (!t->old) { /* the common case, no growth running: one array */
    size_t pos;
    if (arr_find(t->slots, t->nslots, t->cap, 0, h, &pos)) return 0;
    if ((t->count + 1) * 5 <= t->cap * 4 && arr_put(t->slots, t->nslots, pos, h) == 0) {
      t->count++;
      return 1;
    }
  }
  for (;;) {
    dt_side s = side_of(t, h);
    size_t pos;
    if (arr_find(s.a, s.nslots, s.cap, s.from, h, &pos)) {
      /* a duplicate moves the migration on too, so a growth ends under any traffic */
      if (t->old) (void)dt_migrate(t, LM_DT_MIGRATE_STEP);
      return 0;
    }
    if ((t->count + 1) * 5 > t->cap * 4) { /* keep the load at most 80%: grow */
      if (t->old && lm_dt_finish_growth(t)) return -1; /* not reached: a growth ends well before */
      if (dt_start_growth(t)) return -1;
      continue;
    }
    if (arr_put(s.a, s.nslots, pos, h) == 0) break;
    /* the run reached the end of the spare tail: rebuild larger and retry */
    if (dt_rebuild_all(t, grown_cap(t->cap))) return -1;
  }
  t->count++;
  /* a failure here (out of memory in a rebuild) leaves the migration for the next insert */
  if (t->old) (void)dt_migrate(t, LM_DT_MIGRATE_STEP);
  return 1;
}

/* Check one array from `from` on: every key at or after max(home, from) with
 * no empty slot in between, keys strictly increasing (continuing *prev). */
static int arr_check(const lm_hash128_t *a, size_t nslots, size_t cap, size_t from, const lm_hash128_t **prev,
                     size_t *held) {
  size_t run_start = from; /* first slot of the current run of occupied slots */
  for (size_t i = from; i < nslots; i++) {
    const lm_hash128_t *s = &a[i];
    if (is_empty(s)) {
      run_start = i + 1;
      continue;
    }
    size_t home = home_of(s->hi, cap);
    if (home < from) home = from;
    if (home > i || home < run_start) return 0;
    if (*prev && key_cmp(*prev, *s) >= 0) return 0;
    *prev = s;
    (*held)++;
  }
  return 1;
}

int lm_dt_check(const lm_dtable *t) {
  size_t held = 0;
  const lm_hash128_t *prev = NULL;
  if (!arr_check(t->slots, t->nslots, t->cap, 0, &prev, &held)) return 0;
  if (t->old) {
    /* the new array holds exactly the keys <= mig_last */
    if (prev && (!t->mig_any || key_cmp(prev, t->mig_last) > 0)) return 0;
    const lm_hash128_t *p2 = NULL;
    size_t held_old = 0;
    if (!arr_check(t->old, t->old_nslots, t->old_cap, t->mig_pos, &p2, &held_old)) return 0;
    /* the first old key is above the boundary (the rest follow: increasing) */
    for (size_t i = t->mig_pos; t->mig_any && i < t->old_nslots; i++)
      if (!is_empty(&t->old[i])) {
        if (key_cmp(&t->old[i], t->mig_last) <= 0) return 0;
        break;
      }
    held += held_old;
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
  dt_side s = side_of(t, h);
  size_t pos;
  return arr_find(s.a, s.nslots, s.cap, s.from, h, &pos);
}

int lm_dt_remove(lm_dtable *t, lm_hash128_t h) {
  if (is_zero_key(h)) {
    if (!t->has_zero) return 0;
    t->has_zero = 0;
    t->count--;
    return 1;
  }
  dt_side s = side_of(t, h);
  size_t pos;
  if (!arr_find(s.a, s.nslots, s.cap, s.from, h, &pos)) return 0;
  arr_del(s.a, s.nslots, s.cap, pos);
  t->count--;
  return 1;
}

/* Bytes of slot arrays held (both while growing, less the old pages given back). */
static size_t dt_bytes(const lm_dtable *t) {
  size_t n = t->nslots;
  if (t->old) n += t->old_nslots - t->old_released;
  return n * sizeof(lm_hash128_t);
}

/* The slot where a probe for h starts (to prefetch; the prefetch itself is in
 * the caller's loop: GCC deletes a call to a void function that only
 * prefetches, as "pure"). */
static inline const lm_hash128_t *dt_probe_start(const lm_dtable *t, lm_hash128_t h) {
  if (!t->old || (t->mig_any && key_cmp(&t->mig_last, h) >= 0)) return t->slots + home_of(h.hi, t->cap);
  size_t i = home_of(h.hi, t->old_cap);
  return t->old + (i < t->mig_pos ? t->mig_pos : i);
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
  memcpy(d->tag, params->tag, sizeof d->tag);
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

lm_status lm_dedup_abandon_log(lm_dedup *d) {
  if (!d) return LM_EINVAL;
  if (d->fd >= 0) {
    lm_io_close_quietly(d->fd);
    d->fd = -1;
  }
  d->npend = 0;
  d->closed = 1;
  return LM_OK;
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
      const lm_hash128_t *slot = dt_probe_start(&d->t, hashes[k + AHEAD]);
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
  /* the snapshot is one slot array: end a growth in progress first */
  if (lm_dt_finish_growth(&d->t)) return LM_ENOMEM;
  return lm_dwal_snapshot(d);
}

lm_status lm_dedup_stats_get(const lm_dedup *d, lm_dedup_stats *out) {
  if (!d || !out) return LM_EINVAL;
  *out = d->st;
  out->entries = d->t.count;
  out->capacity = d->t.nslots;
  out->table_bytes = (uint64_t)dt_bytes(&d->t);
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
    if (!is_empty(&d->t.slots[i]) && fn(ctx, d->t.slots[i])) return LM_OK;
  if (d->t.old) /* growing: the old array's rest, all larger */
    for (size_t i = d->t.mig_pos; i < d->t.old_nslots; i++)
      if (!is_empty(&d->t.old[i]) && fn(ctx, d->t.old[i])) return LM_OK;
  return LM_OK;
}
