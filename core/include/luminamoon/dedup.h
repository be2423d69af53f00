/* luminamoon/dedup.h — StreamDeduplicator: exact deduplication by XXH3-128,
 * with a write-ahead log (WAL), truncation to an LSN and snapshots.
 *
 * Table.  The 128-bit hashes live in one open-addressing array of 16-byte
 * slots with linear probing in *ordered* form (Amble & Knuth): the home slot is
 * floor(hi * capacity / 2^64), and the keys of every run are kept sorted, so a
 * probe stops at the first larger key and the whole array is globally sorted
 * (growth is a sequential merge; deletion is a backward shift).  The table
 * grows by x1.6 when it is 80% full, so it is always between 50% and 80% full
 * after the first growth: 20-32 bytes per distinct document (plus 64 spare
 * slots at the end instead of wrap-around).  Growth is incremental, never a
 * stop-the-world rebuild: each later check_insert (new or duplicate) moves 16
 * slots of the old array into the new one, so no call pays for the whole table
 * (growing to 10 M entries in batches of 4096: worst batch ~2 ms); while it
 * runs both arrays are held (less the old pages already migrated), which the
 * stats' table_bytes counts.  A snapshot finishes a growth in progress first.  `max_entries` bounds it:
 * admitting one more distinct hash returns LM_ETOOBIG and changes nothing.
 *
 * LSN.  The log sequence number counts admitted (distinct) hashes: after n
 * admissions lsn == n == the number of entries.  The state "at LSN L" is the
 * set of the first L admitted hashes.
 *
 * WAL file (little-endian; format version 1): a 64-byte header (magic
 * "LMDDWAL\0" at 0, u32 version at 8, u32 header size at 12, u64 hash seed at
 * 16, the 32-byte tag at 24, zeros at 56, u32 CRC32C of bytes 0-59 at 60;
 * WALs written before the tag existed hold zeros there: tag = all zero), then
 * records:
 *   u32 magic "LMR1" | u32 count | u64 first_lsn | u32 payload CRC32C |
 *   u32 header CRC32C (over the 20 bytes before it) | count x 16-byte hashes.
 * New hashes are buffered in memory (wal_buffer_hashes) and written as one
 * record when the buffer fills (write(2), no sync); lm_dedup_sync writes the
 * rest and calls fdatasync — call it on commit, never per record.
 * Opening an existing WAL validates every record after the snapshot (or all
 * of them): a bad record (short, bad CRC, LSN out of sequence) after which no
 * valid record follows is a torn or garbage tail and is cut (ftruncate +
 * fsync), never read as data; a bad record followed by a valid one is
 * corruption in the middle: LM_ECORRUPT, the file is left as it is.
 * A WAL of another format version gives LM_EVERSION; another seed or another
 * tag LM_EINVAL (and nothing is changed): lm_dedup_wal_inspect tells which.
 *
 * Snapshots (path + ".snap"): lm_dedup_snapshot syncs the WAL, then writes the
 * slot array with its LSN and the position of that LSN in the WAL to
 * path + ".snap.tmp", fsyncs it, renames it over path + ".snap" and fsyncs the
 * directory.  Opening loads the snapshot (one sequential read, no rehash),
 * checks that the WAL record before its position is the one it names (CRC),
 * and replays only the records after it.  A snapshot that fails any check is
 * ignored and the whole log is replayed (it is only an accelerator).
 * The log is never compacted: it keeps every admitted hash since LSN 0, so
 * truncation to ANY LSN — also one older than the snapshot — is exact: the
 * hashes admitted after it are read back from the log (in bounded chunks) and
 * deleted from the table; a snapshot newer than the target is deleted first.
 * Cost: 16 bytes of log per distinct document on disk.
 * Crash safety of truncation: every LSN that lm_dedup_sync returned ends a
 * record, so truncating to a committed LSN is one ftruncate at a record
 * boundary (a crash leaves the old or the new log, and truncating again is
 * idempotent).  A target inside a record drops the later records, rewrites
 * that record's 24-byte header in place for the hashes it keeps, then cuts;
 * a crash in between leaves a tail that reopening cuts.
 *
 * In-memory mode (wal_path NULL): the same table, no files; lm_dedup_sync
 * and lm_dedup_snapshot do nothing, and lm_dedup_truncate works only to the
 * current LSN (LM_ESTATE otherwise: there is no log to undo from).
 *
 * Errors.  An unwritable path gives LM_EIO with errno kept.  After a failed
 * write/sync the object refuses further changes (LM_ESTATE) — reopen it.
 * Thread-safety: one object may be used by one thread at a time (lm_dedup_run
 * hashes the documents of a batch on several threads internally).  A WAL is
 * locked (flock) while open: a second object on the same path, in this or
 * another process, gets LM_ESTATE; the lock ends with lm_dedup_close/destroy or
 * the process.
 */
#ifndef LUMINAMOON_DEDUP_H
#define LUMINAMOON_DEDUP_H

#include <stddef.h>
#include <stdint.h>

#include "luminamoon/batch.h"
#include "luminamoon/hash.h"
#include "luminamoon/parallel.h"
#include "luminamoon/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LM_DEDUP_WAL_VERSION 1u
#define LM_DEDUP_TAG_SIZE 32u

typedef struct lm_dedup_params {
  const char *wal_path;      /* NULL: in memory only.  Copied at create. */
  uint64_t seed;             /* XXH3-128 seed of the document hashes; default 0 */
  size_t initial_capacity;   /* slots to start with; default 1024 */
  uint64_t max_entries;      /* 0: unlimited; else the most distinct hashes kept */
  size_t wal_buffer_hashes;  /* hashes buffered per WAL record; default 4096 (64 KiB), max 65536 */
  /* Opaque bytes naming the configuration the log belongs to (e.g. the settings
   * of the stage that computes the hashes); all zero by default.  Written into
   * the header of a new WAL; opening an existing WAL whose header holds other
   * bytes gives LM_EINVAL and changes nothing (lm_dedup_wal_inspect reads the
   * stored tag).  In-memory mode ignores it.  Copied at create. */
  uint8_t tag[LM_DEDUP_TAG_SIZE];
} lm_dedup_params;

typedef struct lm_dedup_stats {
  uint64_t entries;         /* distinct hashes held (== lsn) */
  uint64_t capacity;        /* slots (including the spare tail) */
  uint64_t table_bytes;     /* bytes of the slot array */
  double bytes_per_entry;   /* table_bytes / entries (0 when empty) */
  uint64_t max_entries;     /* the configured bound (0 = none) */
  uint64_t lsn;             /* admitted so far */
  uint64_t written_lsn;     /* handed to write(2) */
  uint64_t durable_lsn;     /* fdatasync'ed */
  uint64_t wal_bytes;       /* size of the WAL file (written part) */
  uint64_t snapshot_lsn;    /* LSN covered by the current snapshot file (0 if none) */
  uint64_t probes;          /* lookups (check_insert / contains calls) */
  uint64_t inserts;         /* admitted */
  uint64_t duplicates;      /* rejected as seen */
  uint64_t replayed_hashes; /* read from the log when opening */
  uint64_t tail_bytes_cut;  /* torn/garbage tail bytes removed when opening */
  int snapshot_loaded;      /* 1 if opening used the snapshot */
} lm_dedup_stats;

typedef struct lm_dedup lm_dedup;

/* Defaults (see the fields).  LM_EINVAL if p is NULL. */
lm_status lm_dedup_params_default(lm_dedup_params *p);

/* Create a deduplicator; with a WAL path, open (or create) the log there and
 * recover its state (snapshot + replay, torn tail cut).  params NULL = defaults.
 * Errors: LM_EIO (errno kept), LM_ECORRUPT, LM_EVERSION, LM_EINVAL (bad params
 * or a WAL written with another seed or tag), LM_ENOMEM, LM_ETOOBIG (the log holds
 * more than max_entries).  Ownership: *out is the caller's; lm_dedup_destroy. */
lm_status lm_dedup_create(const lm_dedup_params *params, lm_dedup **out);

/* Write the buffered hashes, fdatasync and close the log; the object then only
 * answers lm_dedup_stats / lm_dedup_lsn and lm_dedup_destroy (LM_ESTATE otherwise). */
lm_status lm_dedup_close(lm_dedup *d);

/* For a process forked from the one that opened the log: close this copy's
 * descriptor of the log without writing anything (the hashes buffered in this
 * copy are dropped: they are the parent's to write) and mark the object closed
 * (lm_dedup_stats / lm_dedup_lsn still answer; lm_dedup_destroy then frees
 * without writing).  The parent's log, descriptor and lock are untouched (an
 * flock belongs to the open file both processes share; it ends when the last
 * descriptor of it closes, so a child that keeps its copy would otherwise hold
 * the parent's log locked after the parent closed it).  In-memory or already
 * closed: nothing to do.  Errors: LM_EINVAL (NULL).  Never call it in the
 * process that opened the log: use lm_dedup_close. */
lm_status lm_dedup_abandon_log(lm_dedup *d);

/* lm_dedup_close (errors ignored) and free.  NULL is ignored. */
void lm_dedup_destroy(lm_dedup *d);

/* Errors shared by the calls below that admit, sync, truncate or snapshot: LM_EINVAL (NULL d or
 * a NULL pointer that must be read or written), LM_ESTATE (d was closed, or an earlier write to
 * its log failed: it then refuses every change), LM_EIO from the log (errno kept), LM_ENOMEM.
 * The inputs are borrowed for the call; nothing is retained.  One thread at a time per d. */

/* Is the hash of text[0..len) new?  If so admit it (*is_new = 1, lsn + 1),
 * else *is_new = 0.  LM_ETOOBIG at max_entries (nothing admitted). */
lm_status lm_dedup_check_insert(lm_dedup *d, const uint8_t *text, size_t len, int *is_new);

/* The same for a hash computed by the caller (lm_hash128(text, len, seed)). */
lm_status lm_dedup_check_insert_hash(lm_dedup *d, lm_hash128_t h, int *is_new);

/* Batch form: is_new[k] for hashes[k], in order (a hash repeated inside the
 * batch is new only the first time).  Prefetches ahead.  On an error (e.g.
 * LM_EIO) *n_done (may be NULL) receives how many were processed; those stay
 * admitted.  At max_entries it is all or nothing: LM_ETOOBIG, *n_done = 0 and
 * no hash of the batch admitted, when the batch's new distinct hashes do not
 * all fit. */
lm_status lm_dedup_check_insert_hashes(lm_dedup *d, const lm_hash128_t *hashes, size_t n, uint8_t *is_new,
                                       size_t *n_done);

/* Lookup only: *found = 1 if the hash is held. */
lm_status lm_dedup_contains(const lm_dedup *d, lm_hash128_t h, int *found);

/* Deduplicate a batch: keep the first occurrence (across batches and within
 * the batch), drop later ones with LM_REASON_DUPLICATE; kept texts are copied
 * to out unchanged, in input order.  Hashing runs on exec's threads, admission
 * in input order.  At max_entries nothing of the batch is admitted
 * (LM_ETOOBIG, see lm_dedup_check_insert_hashes); on another error (LM_EIO)
 * the documents before the failing one stay admitted and out is incomplete. */
lm_status lm_dedup_run(lm_dedup *d, const lm_docs *docs, lm_batch_result *out, const lm_exec *exec);

/* The current LSN (number of admitted hashes). */
lm_status lm_dedup_lsn(const lm_dedup *d, uint64_t *lsn);

/* Make everything admitted so far durable: write the buffered hashes, then
 * fdatasync.  *lsn (may be NULL) receives the durable LSN (== lm_dedup_lsn). */
lm_status lm_dedup_sync(lm_dedup *d, uint64_t *lsn);

/* Cut the log AND the table back to exactly the state at `lsn` (the first lsn
 * admitted hashes), durably.  lsn > current: LM_ERANGE (for recovery this means
 * the log lost committed records: treat it as corruption). */
lm_status lm_dedup_truncate(lm_dedup *d, uint64_t lsn);

/* Write a snapshot of the table (see above).  In-memory mode: LM_OK, nothing. */
lm_status lm_dedup_snapshot(lm_dedup *d);

/* Copy the table, WAL and counter figures into *out (caller-owned).  LM_EINVAL on NULL.
 * Reads d without a lock: not concurrently with a call that changes d (run, sync,
 * truncate, snapshot, close). */
lm_status lm_dedup_stats_get(const lm_dedup *d, lm_dedup_stats *out);

/* Visit every held hash in table order (for tests and export).  fn returns
 * non-zero to stop. */
lm_status lm_dedup_foreach(const lm_dedup *d, int (*fn)(void *ctx, lm_hash128_t h), void *ctx);

/* ------------------------------------------------ read-only WAL access
 *
 * For tools and for re-partitioning a log without opening a deduplicator: no
 * lock is taken and the file is never changed, so a log held open by a live
 * deduplicator may be read (a record being appended reads as the end).
 * Thread-safety: the functions share no state; any thread may call them. */

typedef struct lm_dedup_wal_info {
  int magic_ok;                   /* 1 if the file starts with the WAL magic */
  uint32_t version;               /* format version stored in the header */
  uint32_t header_size;           /* header size stored in the header */
  uint64_t seed;                  /* hash seed stored in the header */
  uint8_t tag[LM_DEDUP_TAG_SIZE]; /* tag stored in the header (zeros: none) */
  uint64_t lsn_end;               /* the valid records hold LSNs [0, lsn_end) */
  uint64_t records;               /* number of those records */
  uint64_t valid_bytes;           /* header + those records */
  uint64_t file_bytes;            /* size of the file (more than valid_bytes:
                                     a torn tail, damage, or a record being written) */
  uint64_t lsn_kept;              /* the LSNs opening the log would keep, [0, lsn_kept):
                                     lsn_end, less the last of those records when its
                                     payload fails its CRC (an open cuts a bad record
                                     that no valid one follows).  Lets a caller refuse a
                                     log that lost committed records before opening it
                                     (which cuts).  A snapshot is not consulted. */
} lm_dedup_wal_info;

/* Read the header of the WAL at `path` and walk its record headers (magic,
 * header CRC, count, LSN sequence, payload present; payload CRCs are checked by
 * lm_dedup_wal_read_hashes, not here, except the last record's: lsn_kept) up to
 * the first one that fails.
 * *info is zeroed, then filled as far as the file allows.
 * Errors: LM_EINVAL (NULL argument), LM_EIO (errno kept; e.g. ENOENT),
 * LM_ECORRUPT (shorter than a header, no magic (magic_ok 0), or a damaged
 * header: magic_ok 1), LM_EVERSION (another format version: info->version
 * says which; seed and tag are not filled).  Ownership: nothing retained. */
lm_status lm_dedup_wal_inspect(const char *path, lm_dedup_wal_info *info);

/* The first `limit_lsn` admitted hashes of the WAL at `path`, in LSN order,
 * into out[0..limit_lsn) (caller-owned; may be NULL when limit_lsn is 0).
 * Every record read is fully checked (header, LSN sequence, payload CRC).
 * *n_read (may be NULL) receives how many hashes were stored.
 * Returns LM_OK when all limit_lsn were read; LM_ERANGE when the file ends
 * (or a record is incomplete) before that: the log lost committed records;
 * LM_ECORRUPT for a record that fails a check before limit_lsn (or a damaged
 * header); LM_EVERSION, LM_EIO, LM_EINVAL as lm_dedup_wal_inspect.  The header's
 * seed and tag are not compared with anything: check them with
 * lm_dedup_wal_inspect. */
lm_status lm_dedup_wal_read_hashes(const char *path, uint64_t limit_lsn, lm_hash128_t *out, uint64_t *n_read);

#ifdef __cplusplus
}
#endif
#endif
