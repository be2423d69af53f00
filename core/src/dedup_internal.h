/* dedup_internal.h — shared by dedup.c (table, API) and dedup_wal.c (log,
 * snapshots, recovery).  Not public. */
#ifndef LUMINAMOON_DEDUP_INTERNAL_H
#define LUMINAMOON_DEDUP_INTERNAL_H

#include "luminamoon/dedup.h"

#define LM_DT_TAIL 64u                /* spare slots after `cap` (no wrap-around) */
#define LM_WAL_HDR_SIZE 64u
#define LM_WAL_REC_HDR 24u
#define LM_WAL_MAX_REC 65536u         /* hashes per record, at most */
#define LM_SNAP_HDR_SIZE 96u

/* Ordered linear-probing table of 128-bit keys; (0,0) marks an empty slot and
 * the key (0,0) itself is held by `has_zero`. */
typedef struct lm_dtable {
  lm_hash128_t *slots;
  size_t cap;    /* home slots: home(k) = floor(k.hi * cap / 2^64) */
  size_t nslots; /* cap + LM_DT_TAIL */
  size_t count;  /* keys held, including the zero key (in both arrays while growing) */
  int has_zero;
  /* Incremental growth (dedup.c only): while `old` is set, `slots` is the new,
   * larger array and the keys <= mig_last (none if !mig_any) live there; the
   * larger keys are still in old[mig_pos..old_nslots).  Each insert migrates a
   * few old slots; lm_dt_finish_growth ends it. */
  lm_hash128_t *old;
  size_t old_cap, old_nslots, mig_pos, old_released, populated;
  lm_hash128_t mig_last;
  int mig_any;
  unsigned char mapped, old_mapped; /* allocated with mmap (released page by page) */
} lm_dtable;

int lm_dt_init(lm_dtable *t, size_t cap);     /* 0 or -1 (ENOMEM) */
void lm_dt_free(lm_dtable *t);
/* 1 inserted, 0 already present, -1 out of memory. */
int lm_dt_insert(lm_dtable *t, lm_hash128_t h);
int lm_dt_contains(const lm_dtable *t, lm_hash128_t h);
int lm_dt_remove(lm_dtable *t, lm_hash128_t h); /* 1 removed, 0 absent */
/* 1 if the slot array keeps the table's invariants (every key at or after its
 * home slot with no empty slot in between, keys strictly increasing, `count`
 * right): what a loaded snapshot must satisfy before it is used. */
int lm_dt_check(const lm_dtable *t);
/* After the slot array of a fresh table (lm_dt_init) was filled from a
 * snapshot: set has_zero, recount the keys; 1 if the table then satisfies
 * lm_dt_check, else 0 (the table is still freed with lm_dt_free). */
int lm_dt_finish_load(lm_dtable *t, int has_zero);
/* Finish a growth in progress (migrate the rest of the old array): 0, or -1
 * out of memory (the table is then unchanged and still valid). */
int lm_dt_finish_growth(lm_dtable *t);

struct lm_dedup {
  lm_dtable t;
  uint64_t seed, max_entries;
  uint8_t tag[LM_DEDUP_TAG_SIZE];               /* params.tag, written to / checked against the WAL header */
  size_t buf_cap;
  /* log */
  char *path, *snap_path, *tmp_path, *dir_path; /* NULL in memory */
  int fd;                                       /* -1 in memory / closed */
  uint8_t *pend_raw;                            /* LM_WAL_REC_HDR bytes + buf_cap hashes */
  lm_hash128_t *pend;                           /* = pend_raw + LM_WAL_REC_HDR */
  size_t npend;
  uint64_t lsn, written_lsn, durable_lsn;
  uint64_t wal_size;                            /* bytes of valid log */
  uint64_t last_rec_off;                        /* offset of the last record (0: none) */
  uint32_t last_rec_hcrc;
  uint64_t snapshot_lsn;
  int snapshot_known;                           /* 1: a snapshot of snapshot_lsn exists; 0: none;
                                                   -1: a file may exist that we did not use */
  int closed, failed;
  lm_dedup_stats st;                            /* counters (probes, inserts, ...) */
};

/* The table of a dedup, for dedup_wal.c, which never touches `t` itself
 * (dedup.c owns it).  Same results as the lm_dt_* functions above. */
size_t lm_dedup_table_count(const lm_dedup *d);
int lm_dedup_table_insert(lm_dedup *d, lm_hash128_t h); /* 1, 0 or -1 as lm_dt_insert */
int lm_dedup_table_remove(lm_dedup *d, lm_hash128_t h); /* 1 removed, 0 absent */
/* read-only, for a snapshot: one plain array (lm_dedup_snapshot finishes a growth first) */
const lm_dtable *lm_dedup_table(const lm_dedup *d);
/* Free the dedup's table and take *t in its place (t is zeroed). */
void lm_dedup_table_replace(lm_dedup *d, lm_dtable *t);

/* dedup_wal.c */
lm_status lm_dwal_open(lm_dedup *d);                 /* open/create + recover */
lm_status lm_dwal_append(lm_dedup *d, lm_hash128_t h); /* buffer one admitted hash */
lm_status lm_dwal_flush(lm_dedup *d);                /* write buffered hashes as one record */
lm_status lm_dwal_sync(lm_dedup *d);                 /* flush + fdatasync */
lm_status lm_dwal_truncate(lm_dedup *d, uint64_t lsn);
lm_status lm_dwal_snapshot(lm_dedup *d);
lm_status lm_dwal_close(lm_dedup *d);

#endif
