/* dedup_wal.c — the StreamDeduplicator's write-ahead log: record format,
 * buffered appends, sync, recovery (torn-tail cut vs. mid-log corruption),
 * truncation to an LSN and snapshots.  Formats are described in dedup.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dedup_internal.h"
#include "durable_internal.h"
#include "luminamoon/crc32c.h"

static const uint8_t k_wal_magic[8] = {'L', 'M', 'D', 'D', 'W', 'A', 'L', 0};
static const uint8_t k_snap_magic[8] = {'L', 'M', 'D', 'D', 'S', 'N', 'P', 0};
static const uint8_t k_rec_magic[4] = {'L', 'M', 'R', '1'};

static lm_status io_fail(lm_dedup *d) {
  d->failed = 1;
  return LM_EIO;
}

/* -------------------------------------------------------------- records */

static void rec_header(uint8_t *h, uint32_t count, uint64_t first_lsn, const void *payload) {
  memcpy(h, k_rec_magic, 4);
  lm_le_put32(h + 4, count);
  lm_le_put64(h + 8, first_lsn);
  lm_le_put32(h + 16, lm_crc32c(payload, (size_t)count * 16u));
  lm_le_put32(h + 20, lm_crc32c(h, 20));
}

/* A header that stands on its own (magic, CRC, count in range). */
static int rec_header_ok(const uint8_t *h) {
  if (memcmp(h, k_rec_magic, 4) != 0) return 0;
  if (lm_crc32c(h, 20) != lm_le_get32(h + 20)) return 0;
  uint32_t c = lm_le_get32(h + 4);
  return c >= 1 && c <= LM_WAL_MAX_REC;
}

/* Append one record of `count` hashes stored (host order) at raw +
 * LM_WAL_REC_HDR (the header is built in the first LM_WAL_REC_HDR bytes of raw). */
static lm_status write_record(lm_dedup *d, uint8_t *raw, size_t count) {
  lm_hash128_t *payload = (lm_hash128_t *)(void *)(raw + LM_WAL_REC_HDR);
  lm_le_hashes_swap(payload, count); /* to file order (nothing on little-endian hosts) */
  rec_header(raw, (uint32_t)count, d->written_lsn, payload);
  size_t len = LM_WAL_REC_HDR + count * 16u;
  int bad = lm_io_pwrite_full(d->fd, raw, len, d->wal_size);
  lm_le_hashes_swap(payload, count); /* back: truncation reads the buffer */
  if (bad) return io_fail(d);
  d->last_rec_off = d->wal_size;
  d->last_rec_hcrc = lm_le_get32(raw + 20);
  d->wal_size += len;
  d->written_lsn += count;
  return LM_OK;
}

lm_status lm_dwal_flush(lm_dedup *d) {
  if (!d->npend) return LM_OK;
  lm_status s = write_record(d, d->pend_raw, d->npend);
  if (!s) d->npend = 0;
  return s;
}

lm_status lm_dwal_append(lm_dedup *d, lm_hash128_t h) {
  d->pend[d->npend++] = h;
  if (d->npend == d->buf_cap) return lm_dwal_flush(d);
  return LM_OK;
}

lm_status lm_dwal_sync(lm_dedup *d) {
  lm_status s = lm_dwal_flush(d);
  if (s) return s;
  if (d->durable_lsn == d->written_lsn) return LM_OK;
  if (lm_io_fdatasync(d->fd)) return io_fail(d);
  d->durable_lsn = d->written_lsn;
  return LM_OK;
}

lm_status lm_dwal_close(lm_dedup *d) {
  lm_status s = LM_OK;
  if (d->fd < 0) return LM_OK;
  if (!d->failed) s = lm_dwal_sync(d);
  lm_io_close_quietly(d->fd);
  d->fd = -1;
  return s;
}

/* ------------------------------------------------------------- recovery */

/* Is there a valid record header anywhere in [from, size)?  1 yes, 0 no, -1 I/O. */
static int valid_record_after(int fd, uint64_t from, uint64_t size) {
  enum { CHUNK = 1 << 20 };
  uint8_t *buf = (uint8_t *)malloc(CHUNK + LM_WAL_REC_HDR);
  if (!buf) return -1;
  int found = 0;
  for (uint64_t off = from; off + LM_WAL_REC_HDR <= size && !found;) {
    size_t want = CHUNK + LM_WAL_REC_HDR;
    if (want > size - off) want = (size_t)(size - off);
    ssize_t r = lm_io_pread_full(fd, buf, want, off);
    if (r < 0) {
      free(buf);
      return -1;
    }
    for (size_t i = 0; i + LM_WAL_REC_HDR <= (size_t)r; i++) {
      if (buf[i] == 'L' && rec_header_ok(buf + i)) {
        found = 1;
        break;
      }
    }
    if ((size_t)r < want || want <= LM_WAL_REC_HDR) break;
    off += want - LM_WAL_REC_HDR + 1;
  }
  free(buf);
  return found;
}

/* Read the record at off expecting first_lsn == lsn.  Returns 1 (valid: *count,
 * hashes in buf), 0 (invalid or short), -1 (I/O error). */
static int read_record(int fd, uint64_t off, uint64_t size, uint64_t lsn, uint8_t *hdr, lm_hash128_t *buf,
                       uint32_t *count) {
  if (size - off < LM_WAL_REC_HDR) return 0;
  if (lm_io_pread_full(fd, hdr, LM_WAL_REC_HDR, off) != (ssize_t)LM_WAL_REC_HDR) return -1;
  if (!rec_header_ok(hdr) || lm_le_get64(hdr + 8) != lsn) return 0;
  uint32_t c = lm_le_get32(hdr + 4);
  uint64_t plen = (uint64_t)c * 16u;
  if (size - off - LM_WAL_REC_HDR < plen) return 0;
  ssize_t r = lm_io_pread_full(fd, buf, (size_t)plen, off + LM_WAL_REC_HDR);
  if (r < 0) return -1;
  if ((uint64_t)r != plen || lm_crc32c(buf, (size_t)plen) != lm_le_get32(hdr + 16)) return 0;
  lm_le_hashes_swap(buf, c);
  *count = c;
  return 1;
}

/* Replay records from d->wal_size (expected lsn d->lsn) to the end; cut a torn
 * tail, or LM_ECORRUPT for damage followed by valid records. */
static lm_status replay(lm_dedup *d, uint64_t size) {
  lm_hash128_t *buf = (lm_hash128_t *)malloc((size_t)LM_WAL_MAX_REC * 16u);
  if (!buf) return LM_ENOMEM;
  uint8_t hdr[LM_WAL_REC_HDR];
  lm_status s = LM_OK;
  uint64_t off = d->wal_size;
  while (off < size) {
    uint32_t c = 0;
    int r = read_record(d->fd, off, size, d->lsn, hdr, buf, &c);
    if (r < 0) {
      s = LM_EIO;
      break;
    }
    if (r == 0) {
      int more = valid_record_after(d->fd, off + 1, size);
      if (more < 0) {
        s = more == -1 && errno ? LM_EIO : LM_ENOMEM;
      } else if (more) {
        s = LM_ECORRUPT; /* damage in the middle of the log: never silently dropped */
      } else if (ftruncate(d->fd, (off_t)off) || lm_io_fdatasync(d->fd)) {
        s = LM_EIO;
      } else {
        d->st.tail_bytes_cut = size - off;
      }
      break;
    }
    for (uint32_t k = 0; k < c; k++) {
      if (d->max_entries && lm_dedup_table_count(d) >= d->max_entries) {
        s = LM_ETOOBIG;
        break;
      }
      int ins = lm_dedup_table_insert(d, buf[k]);
      if (ins < 0) {
        s = LM_ENOMEM;
        break;
      }
      if (ins == 0) { /* a log never holds a hash twice */
        s = LM_ECORRUPT;
        break;
      }
    }
    if (s) break;
    d->lsn += c;
    d->st.replayed_hashes += c;
    d->last_rec_off = off;
    d->last_rec_hcrc = lm_le_get32(hdr + 20);
    off += LM_WAL_REC_HDR + (uint64_t)c * 16u;
    d->wal_size = off;
  }
  free(buf);
  d->written_lsn = d->durable_lsn = d->lsn;
  return s;
}

/* ------------------------------------------------------------- snapshot */

static int load_snapshot(lm_dedup *d, uint64_t wal_file_size) {
  int fd = open(d->snap_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    d->snapshot_known = errno == ENOENT ? 0 : -1;
    return 0;
  }
  d->snapshot_known = -1;
  uint8_t h[LM_SNAP_HDR_SIZE];
  int ok = lm_io_pread_full(fd, h, sizeof h, 0) == (ssize_t)sizeof h && memcmp(h, k_snap_magic, 8) == 0 &&
           lm_le_get32(h + 8) == LM_DEDUP_WAL_VERSION && lm_le_get32(h + 12) == LM_SNAP_HDR_SIZE &&
           lm_crc32c(h, 92) == lm_le_get32(h + 92) && lm_le_get64(h + 16) == d->seed;
  uint64_t lsn = ok ? lm_le_get64(h + 24) : 0, cap = ok ? lm_le_get64(h + 32) : 0, nslots = ok ? lm_le_get64(h + 40) : 0;
  uint64_t count = ok ? lm_le_get64(h + 48) : 0, woff = ok ? lm_le_get64(h + 56) : 0, prev = ok ? lm_le_get64(h + 64) : 0;
  uint32_t prev_crc = ok ? lm_le_get32(h + 72) : 0, flags = ok ? lm_le_get32(h + 76) : 0, pcrc = ok ? lm_le_get32(h + 80) : 0;
  ok = ok && nslots == cap + LM_DT_TAIL && count == lsn && woff <= wal_file_size && cap >= 16 &&
       cap < ((uint64_t)1 << 40) && (!d->max_entries || count <= d->max_entries);
  /* the WAL must hold, just before woff, the record the snapshot names */
  if (ok && lsn == 0) ok = woff == LM_WAL_HDR_SIZE;
  if (ok && lsn > 0) {
    uint8_t rh[LM_WAL_REC_HDR];
    ok = prev >= LM_WAL_HDR_SIZE && lm_io_pread_full(d->fd, rh, sizeof rh, prev) == (ssize_t)sizeof rh &&
         rec_header_ok(rh) && lm_le_get32(rh + 20) == prev_crc && lm_le_get64(rh + 8) + lm_le_get32(rh + 4) == lsn &&
         prev + LM_WAL_REC_HDR + (uint64_t)lm_le_get32(rh + 4) * 16u == woff;
  }
  /* the file must hold exactly the slot array the header announces: checked
   * before allocating, so a damaged header cannot ask for terabytes */
  struct stat sb;
  ok = ok && fstat(fd, &sb) == 0 && (uint64_t)sb.st_size == LM_SNAP_HDR_SIZE + nslots * 16u;
  lm_dtable t;
  if (ok && lm_dt_init(&t, (size_t)cap) == 0) {
    size_t bytes = (size_t)nslots * 16u;
    ok = lm_io_pread_full(fd, t.slots, bytes, LM_SNAP_HDR_SIZE) == (ssize_t)bytes && lm_crc32c(t.slots, bytes) == pcrc;
    lm_le_hashes_swap(t.slots, (size_t)nslots);
    /* a well-formed table, not just a matching CRC */
    ok = ok && lm_dt_finish_load(&t, (flags & 1u) != 0) && t.count == count;
    if (ok) {
      lm_dedup_table_replace(d, &t);
      d->lsn = lsn;
      d->wal_size = woff;
      d->last_rec_off = lsn ? prev : 0;
      d->last_rec_hcrc = prev_crc;
      d->snapshot_lsn = lsn;
      d->snapshot_known = 1;
      d->st.snapshot_loaded = 1;
    } else {
      lm_dt_free(&t);
    }
  } else {
    ok = 0;
  }
  close(fd);
  return ok;
}

lm_status lm_dwal_snapshot(lm_dedup *d) {
  lm_status s = lm_dwal_sync(d);
  if (s) return s;
  const lm_dtable *t = lm_dedup_table(d);
  size_t bytes = t->nslots * 16u;
  const lm_hash128_t *slots = t->slots;
#if LM_HOST_BIG_ENDIAN
  lm_hash128_t *copy = (lm_hash128_t *)malloc(bytes); /* the slot array in file order */
  if (!copy) return LM_ENOMEM;
  memcpy(copy, t->slots, bytes);
  lm_le_hashes_swap(copy, t->nslots);
  slots = copy;
#endif
  uint8_t h[LM_SNAP_HDR_SIZE];
  memset(h, 0, sizeof h);
  memcpy(h, k_snap_magic, 8);
  lm_le_put32(h + 8, LM_DEDUP_WAL_VERSION);
  lm_le_put32(h + 12, LM_SNAP_HDR_SIZE);
  lm_le_put64(h + 16, d->seed);
  lm_le_put64(h + 24, d->lsn);
  lm_le_put64(h + 32, t->cap);
  lm_le_put64(h + 40, t->nslots);
  lm_le_put64(h + 48, t->count);
  lm_le_put64(h + 56, d->wal_size);
  lm_le_put64(h + 64, d->lsn ? d->last_rec_off : 0);
  lm_le_put32(h + 72, d->lsn ? d->last_rec_hcrc : 0);
  lm_le_put32(h + 76, t->has_zero ? 1u : 0u);
  lm_le_put32(h + 80, lm_crc32c(slots, bytes));
  lm_le_put32(h + 92, lm_crc32c(h, 92));
  struct iovec parts[2] = {{h, sizeof h}, {(void *)(uintptr_t)slots, bytes}};
  /* on failure the old snapshot (if any) and the log are untouched */
  int bad = lm_io_replace_file(d->tmp_path, d->snap_path, d->dir_path, parts, 2, NULL);
#if LM_HOST_BIG_ENDIAN
  int e = errno;
  free(copy);
  errno = e;
#endif
  if (bad) return LM_EIO;
  d->snapshot_lsn = d->lsn;
  d->snapshot_known = 1;
  return LM_OK;
}

/* ----------------------------------------------------------------- open */

/* Header field offsets (dedup.h). */
enum { WH_VERSION = 8, WH_SIZE = 12, WH_SEED = 16, WH_TAG = 24, WH_CRC = 60 };
_Static_assert(WH_TAG + LM_DEDUP_TAG_SIZE <= WH_CRC, "the tag fits before the header CRC");

static void wal_header(uint8_t *h, uint64_t seed, const uint8_t tag[LM_DEDUP_TAG_SIZE]) {
  memset(h, 0, LM_WAL_HDR_SIZE);
  memcpy(h, k_wal_magic, 8);
  lm_le_put32(h + WH_VERSION, LM_DEDUP_WAL_VERSION);
  lm_le_put32(h + WH_SIZE, LM_WAL_HDR_SIZE);
  lm_le_put64(h + WH_SEED, seed);
  memcpy(h + WH_TAG, tag, LM_DEDUP_TAG_SIZE);
  lm_le_put32(h + WH_CRC, lm_crc32c(h, WH_CRC));
}

/* Check the 64-byte header h (n bytes of it present) and fill info's header
 * fields: LM_OK, LM_ECORRUPT or LM_EVERSION (see lm_dedup_wal_inspect). */
static lm_status wal_header_parse(const uint8_t *h, size_t n, lm_dedup_wal_info *info) {
  info->magic_ok = n >= 8 && memcmp(h, k_wal_magic, 8) == 0;
  if (!info->magic_ok || n < LM_WAL_HDR_SIZE) return LM_ECORRUPT;
  info->version = lm_le_get32(h + WH_VERSION);
  info->header_size = lm_le_get32(h + WH_SIZE);
  if (info->version != LM_DEDUP_WAL_VERSION) return LM_EVERSION;
  if (info->header_size != LM_WAL_HDR_SIZE || lm_crc32c(h, WH_CRC) != lm_le_get32(h + WH_CRC)) return LM_ECORRUPT;
  info->seed = lm_le_get64(h + WH_SEED);
  memcpy(info->tag, h + WH_TAG, LM_DEDUP_TAG_SIZE);
  return LM_OK;
}

lm_status lm_dwal_open(lm_dedup *d) {
  d->fd = open(d->path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (d->fd < 0) return LM_EIO;
  /* one writer per log: a second deduplicator on the same path (this process or
   * another) is refused; the lock goes away with the descriptor or the process */
  if (flock(d->fd, LOCK_EX | LOCK_NB)) return errno == EWOULDBLOCK ? LM_ESTATE : LM_EIO;
  struct stat sb;
  if (fstat(d->fd, &sb)) return LM_EIO;
  uint64_t size = (uint64_t)sb.st_size;
  uint8_t h[LM_WAL_HDR_SIZE], want[LM_WAL_HDR_SIZE];
  wal_header(want, d->seed, d->tag);
  if (size < LM_WAL_HDR_SIZE) {
    /* new, or a header torn while the file was created: the bytes present
     * must be a prefix of the magic + version, nothing else is overwritten */
    if (size) {
      size_t k = (size_t)size < 12 ? (size_t)size : 12;
      if (lm_io_pread_full(d->fd, h, k, 0) != (ssize_t)k) return LM_EIO;
      if (memcmp(h, want, k) != 0) return LM_ECORRUPT;
    }
    if (ftruncate(d->fd, 0) || lm_io_pwrite_full(d->fd, want, LM_WAL_HDR_SIZE, 0) || lm_io_fsync(d->fd) ||
        lm_io_fsync_dir(d->dir_path))
      return LM_EIO;
    unlink(d->snap_path); /* a snapshot cannot belong to a new log */
    d->wal_size = LM_WAL_HDR_SIZE;
    d->snapshot_known = 0;
    return LM_OK;
  }
  if (lm_io_pread_full(d->fd, h, LM_WAL_HDR_SIZE, 0) != (ssize_t)LM_WAL_HDR_SIZE) return LM_EIO;
  lm_dedup_wal_info info;
  memset(&info, 0, sizeof info);
  lm_status hs = wal_header_parse(h, LM_WAL_HDR_SIZE, &info);
  if (hs) return hs;
  /* another configuration's log: refused before anything is read or changed */
  if (info.seed != d->seed || memcmp(info.tag, d->tag, LM_DEDUP_TAG_SIZE) != 0) return LM_EINVAL;
  d->wal_size = LM_WAL_HDR_SIZE;
  load_snapshot(d, size); /* falls back to the whole log when absent or invalid */
  return replay(d, size);
}

/* ------------------------------------------------------------- truncate */

lm_status lm_dwal_truncate(lm_dedup *d, uint64_t lsn) {
  /* 1. a snapshot newer than the target (or one we do not know) goes first */
  if (d->snapshot_known != 0 && !(d->snapshot_known == 1 && d->snapshot_lsn <= lsn)) {
    if (unlink(d->snap_path) && errno != ENOENT) return io_fail(d);
    if (lm_io_fsync_dir(d->dir_path)) return io_fail(d);
    d->snapshot_known = 0;
  }
  /* 2. buffered hashes past the target */
  while (d->npend && d->written_lsn + d->npend > lsn) {
    if (lm_dedup_table_remove(d, d->pend[d->npend - 1]) != 1) return LM_ECORRUPT;
    d->npend--;
    d->lsn--;
  }
  if (lsn >= d->written_lsn) return LM_OK;
  /* 3. written records: find the one holding `lsn`, undo everything after */
  lm_hash128_t *buf = (lm_hash128_t *)malloc((size_t)LM_WAL_MAX_REC * 16u);
  if (!buf) return LM_ENOMEM;
  uint8_t hdr[LM_WAL_REC_HDR];
  uint64_t off = LM_WAL_HDR_SIZE, first = 0, prev_off = 0, cut_off = 0;
  uint32_t prev_crc = 0, keep = 0;
  lm_status s = LM_OK;
  uint8_t *kept = NULL;
  while (off < d->wal_size) { /* header walk to the record holding lsn */
    if (lm_io_pread_full(d->fd, hdr, LM_WAL_REC_HDR, off) != (ssize_t)LM_WAL_REC_HDR || !rec_header_ok(hdr) ||
        lm_le_get64(hdr + 8) != first) {
      s = LM_ECORRUPT;
      break;
    }
    uint32_t c = lm_le_get32(hdr + 4);
    if (lsn < first + c) break;
    prev_off = off;
    prev_crc = lm_le_get32(hdr + 20);
    first += c;
    off += LM_WAL_REC_HDR + (uint64_t)c * 16u;
  }
  cut_off = off;
  keep = (uint32_t)(lsn - first);
  for (uint64_t o = off, f = first; !s && o < d->wal_size;) { /* undo records from here on */
    uint32_t c = 0;
    int r = read_record(d->fd, o, d->wal_size, f, hdr, buf, &c);
    if (r != 1) {
      s = r < 0 ? LM_EIO : LM_ECORRUPT;
      break;
    }
    uint32_t from = o == off ? keep : 0;
    if (o == off && keep) {
      kept = (uint8_t *)malloc(LM_WAL_REC_HDR + (size_t)keep * 16u);
      if (!kept) {
        s = LM_ENOMEM;
        break;
      }
      memcpy(kept + LM_WAL_REC_HDR, buf, (size_t)keep * 16u);
      lm_le_hashes_swap((lm_hash128_t *)(void *)(kept + LM_WAL_REC_HDR), keep); /* file order, for the CRC */
    }
    for (uint32_t k = c; k-- > from;)
      if (lm_dedup_table_remove(d, buf[k]) != 1) s = LM_ECORRUPT;
    o += LM_WAL_REC_HDR + (uint64_t)c * 16u;
    f += c;
  }
  free(buf);
  if (s) {
    free(kept);
    d->failed = 1; /* the table may be half undone: refuse further use */
    return s;
  }
  if (!keep) {
    /* a record boundary (every LSN lm_dedup_sync returned is one): one cut */
    if (ftruncate(d->fd, (off_t)cut_off) || lm_io_fdatasync(d->fd)) return io_fail(d);
    d->wal_size = cut_off;
    d->last_rec_off = prev_off;
    d->last_rec_hcrc = prev_crc;
  } else {
    /* inside record R at cut_off: (1) drop the records after R, (2) rewrite R's
     * 24-byte header in place for its first `keep` hashes (already on disk),
     * (3) cut the rest of R.  A crash between the steps leaves either the whole
     * R or R' + a tail without any valid record, which reopening cuts. */
    uint64_t r_end = 0;
    uint8_t rh[LM_WAL_REC_HDR];
    if (lm_io_pread_full(d->fd, rh, sizeof rh, cut_off) == (ssize_t)sizeof rh)
      r_end = cut_off + LM_WAL_REC_HDR + (uint64_t)lm_le_get32(rh + 4) * 16u;
    rec_header(kept, keep, first, kept + LM_WAL_REC_HDR);
    uint64_t new_end = cut_off + LM_WAL_REC_HDR + (uint64_t)keep * 16u;
    int bad = !r_end || ftruncate(d->fd, (off_t)r_end) || lm_io_fdatasync(d->fd) ||
              lm_io_pwrite_full(d->fd, kept, LM_WAL_REC_HDR, cut_off) || lm_io_fdatasync(d->fd) ||
              ftruncate(d->fd, (off_t)new_end) || lm_io_fdatasync(d->fd);
    d->last_rec_hcrc = lm_le_get32(kept + 20);
    free(kept);
    if (bad) return io_fail(d);
    d->wal_size = new_end;
    d->last_rec_off = cut_off;
  }
  d->written_lsn = lsn;
  d->lsn = lsn;
  d->durable_lsn = d->written_lsn;
  return LM_OK;
}

/* ------------------------------------------------------ read-only access */

/* Open `path` read-only, read and check its header into *info (zeroed first,
 * file_bytes and valid_bytes set).  *fd_out is the descriptor on LM_OK, else -1. */
static lm_status wal_open_ro(const char *path, lm_dedup_wal_info *info, int *fd_out) {
  *fd_out = -1;
  memset(info, 0, sizeof *info);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return LM_EIO;
  struct stat sb;
  uint8_t h[LM_WAL_HDR_SIZE];
  ssize_t r = fstat(fd, &sb) ? -1 : lm_io_pread_full(fd, h, sizeof h, 0);
  if (r < 0) {
    lm_io_close_quietly(fd);
    return LM_EIO;
  }
  info->file_bytes = (uint64_t)sb.st_size;
  lm_status s = wal_header_parse(h, (size_t)r, info);
  if (s) {
    close(fd);
    return s;
  }
  info->valid_bytes = LM_WAL_HDR_SIZE;
  *fd_out = fd;
  return LM_OK;
}

lm_status lm_dedup_wal_inspect(const char *path, lm_dedup_wal_info *info) {
  if (!path || !info) return LM_EINVAL;
  int fd;
  lm_status s = wal_open_ro(path, info, &fd);
  if (s) return s;
  uint8_t hdr[LM_WAL_REC_HDR];
  uint64_t off = LM_WAL_HDR_SIZE, size = info->file_bytes, last_off = 0;
  uint32_t last_count = 0;
  while (size - off >= LM_WAL_REC_HDR) {
    ssize_t r = lm_io_pread_full(fd, hdr, sizeof hdr, off);
    if (r < 0) {
      s = LM_EIO;
      break;
    }
    if (r != (ssize_t)sizeof hdr || !rec_header_ok(hdr) || lm_le_get64(hdr + 8) != info->lsn_end) break;
    uint64_t len = LM_WAL_REC_HDR + (uint64_t)lm_le_get32(hdr + 4) * 16u;
    if (size - off < len) break; /* payload incomplete */
    last_off = off;
    last_count = lm_le_get32(hdr + 4);
    off += len;
    info->lsn_end += last_count;
    info->records++;
    info->valid_bytes = off;
  }
  info->lsn_kept = info->lsn_end;
  if (s == LM_OK && info->records) { /* the last record's payload: an open cuts it when bad */
    lm_hash128_t *buf = (lm_hash128_t *)malloc((size_t)(last_count ? last_count : 1) * 16u);
    uint8_t h2[LM_WAL_REC_HDR];
    uint32_t c = 0;
    int r = buf ? read_record(fd, last_off, size, info->lsn_end - last_count, h2, buf, &c) : -2;
    if (r == -2)
      s = LM_ENOMEM;
    else if (r < 0)
      s = LM_EIO;
    else if (r == 0)
      info->lsn_kept = info->lsn_end - last_count;
    free(buf);
  }
  lm_io_close_quietly(fd);
  return s;
}

lm_status lm_dedup_wal_read_hashes(const char *path, uint64_t limit_lsn, lm_hash128_t *out, uint64_t *n_read) {
  if (n_read) *n_read = 0;
  if (!path || (!out && limit_lsn)) return LM_EINVAL;
  lm_dedup_wal_info info;
  int fd;
  lm_status s = wal_open_ro(path, &info, &fd);
  if (s) return s;
  lm_hash128_t *buf = limit_lsn ? (lm_hash128_t *)malloc((size_t)LM_WAL_MAX_REC * 16u) : NULL;
  if (limit_lsn && !buf) {
    close(fd);
    return LM_ENOMEM;
  }
  uint8_t hdr[LM_WAL_REC_HDR];
  uint64_t off = LM_WAL_HDR_SIZE, size = info.file_bytes, got = 0;
  while (got < limit_lsn) {
    if (size - off < LM_WAL_REC_HDR) {
      s = LM_ERANGE; /* the log ends before limit_lsn */
      break;
    }
    uint32_t c = 0;
    int r = read_record(fd, off, size, got, hdr, buf, &c);
    if (r < 0) {
      s = LM_EIO;
      break;
    }
    if (r == 0) {
      /* a record that is complete on disk but fails a check is damage; one cut
       * short by the end of the file is the end of the log */
      int cut_short = lm_io_pread_full(fd, hdr, sizeof hdr, off) == (ssize_t)sizeof hdr && rec_header_ok(hdr) &&
                  lm_le_get64(hdr + 8) == got && size - off - LM_WAL_REC_HDR < (uint64_t)lm_le_get32(hdr + 4) * 16u;
      s = cut_short ? LM_ERANGE : LM_ECORRUPT;
      break;
    }
    uint64_t take = c < limit_lsn - got ? c : limit_lsn - got;
    memcpy(out + got, buf, (size_t)take * 16u);
    got += take;
    off += LM_WAL_REC_HDR + (uint64_t)c * 16u;
  }
  free(buf); /* free keeps errno (POSIX 2024; glibc) */
  lm_io_close_quietly(fd);
  if (n_read) *n_read = got;
  return s;
}
