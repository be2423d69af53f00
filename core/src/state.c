/* state.c — the StateTracker (see luminamoon/state.h for the file format and
 * the exact load/commit rules). */
#define _POSIX_C_SOURCE 200809L

#include "luminamoon/state.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "durable_internal.h"
#include "luminamoon/crc32c.h"

/* Slot field offsets (must match the table in state.h). */
enum {
  OFF_MAGIC = 0,
  OFF_VERSION = 2,
  OFF_EPOCH = 4,
  OFF_SEQUENCE = 8,
  OFF_BATCH = 16,
  OFF_SAMPLE = 24,
  OFF_POS = 32,
  OFF_POS2 = 40,
  OFF_LSN = 48,
  OFF_SHARD = 56,
  OFF_CRC = 60
};

_Static_assert(OFF_CRC + 4 == LM_STATE_SLOT_SIZE, "slot layout must fill exactly 64 bytes");
_Static_assert(2 * LM_STATE_SLOT_SIZE == LM_STATE_FILE_SIZE, "file is two slots");
_Static_assert(OFF_SHARD + 4 == OFF_CRC && OFF_LSN + 8 == OFF_SHARD && OFF_POS2 + 8 == OFF_LSN &&
                   OFF_POS + 8 == OFF_POS2 && OFF_SAMPLE + 8 == OFF_POS &&
                   OFF_BATCH + 8 == OFF_SAMPLE && OFF_SEQUENCE + 8 == OFF_BATCH &&
                   OFF_EPOCH + 4 == OFF_SEQUENCE && OFF_VERSION + 2 == OFF_EPOCH &&
                   OFF_MAGIC + 2 == OFF_VERSION,
               "slot fields are contiguous");
_Static_assert(sizeof(lm_state_coord) == 48, "lm_state_coord has no padding");

lm_status lm_state_slot_encode(uint64_t sequence, const lm_state_coord *coord,
                               unsigned char out[LM_STATE_SLOT_SIZE]) {
  if (coord == NULL || out == NULL || sequence == 0) return LM_EINVAL;
  lm_le_put16(out + OFF_MAGIC, (uint16_t)LM_STATE_MAGIC);
  lm_le_put16(out + OFF_VERSION, (uint16_t)LM_STATE_VERSION);
  lm_le_put32(out + OFF_EPOCH, coord->epoch);
  lm_le_put64(out + OFF_SEQUENCE, sequence);
  lm_le_put64(out + OFF_BATCH, coord->batch_index);
  lm_le_put64(out + OFF_SAMPLE, coord->sample_index);
  lm_le_put64(out + OFF_POS, coord->source_pos);
  lm_le_put64(out + OFF_POS2, coord->source_pos2);
  lm_le_put64(out + OFF_LSN, coord->wal_lsn);
  lm_le_put32(out + OFF_SHARD, coord->shard);
  lm_le_put32(out + OFF_CRC, lm_crc32c(out, OFF_CRC));
  return LM_OK;
}

lm_status lm_state_slot_decode(const unsigned char in[LM_STATE_SLOT_SIZE], uint64_t *sequence,
                               lm_state_coord *coord) {
  if (in == NULL) return LM_EINVAL;
  int all_zero = 1;
  for (unsigned i = 0; i < LM_STATE_SLOT_SIZE; i++) {
    if (in[i] != 0) {
      all_zero = 0;
      break;
    }
  }
  if (all_zero) return LM_ENOTFOUND;
  if (lm_le_get16(in + OFF_MAGIC) != LM_STATE_MAGIC) return LM_ECORRUPT;
  if (lm_le_get32(in + OFF_CRC) != lm_crc32c(in, OFF_CRC)) return LM_ECORRUPT;
  if (lm_le_get16(in + OFF_VERSION) != LM_STATE_VERSION) return LM_EVERSION;
  uint64_t seq = lm_le_get64(in + OFF_SEQUENCE);
  if (seq == 0) return LM_ECORRUPT;
  if (sequence != NULL) *sequence = seq;
  if (coord != NULL) {
    coord->epoch = lm_le_get32(in + OFF_EPOCH);
    coord->shard = lm_le_get32(in + OFF_SHARD);
    coord->batch_index = lm_le_get64(in + OFF_BATCH);
    coord->sample_index = lm_le_get64(in + OFF_SAMPLE);
    coord->source_pos = lm_le_get64(in + OFF_POS);
    coord->source_pos2 = lm_le_get64(in + OFF_POS2);
    coord->wal_lsn = lm_le_get64(in + OFF_LSN);
  }
  return LM_OK;
}

/* ---- tracker ------------------------------------------------------------- */

/* In-memory knowledge of a slot.  status is what lm_state_slot_decode said
 * when the slot was last read, or LM_EIO for a slot this handle tried to write
 * and whose content is therefore unknown (ours to overwrite, never to trust). */
typedef struct slot_info {
  lm_status status;
  uint64_t sequence;
  lm_state_coord coord;
} slot_info;

struct lm_state {
  int fd;
  slot_info slot[2];
};

/* The whole of n bytes at off: LM_OK, LM_EIO, or LM_ECORRUPT when the file
 * ends first (it shrank under us). */
static lm_status pread_full(int fd, unsigned char *buf, size_t n, uint64_t off) {
  ssize_t r = lm_io_pread_full(fd, buf, n, off);
  if (r < 0) return LM_EIO;
  return (size_t)r == n ? LM_OK : LM_ECORRUPT;
}

/* Write n bytes at off, then fdatasync. */
static lm_status write_synced(int fd, const unsigned char *buf, size_t n, uint64_t off) {
  return lm_io_pwrite_full(fd, buf, n, off) || lm_io_fdatasync(fd) ? LM_EIO : LM_OK;
}

/* Creates `path` with 128 zero bytes via path.tmp + fsync + rename + dir fsync.
 * Returns an open O_RDWR descriptor in *fd_out. */
static lm_status create_file(const char *path, int *fd_out) {
  size_t plen = strlen(path);
  char *tmp = malloc(plen + 5);
  if (tmp == NULL) return LM_ENOMEM;
  memcpy(tmp, path, plen);
  memcpy(tmp + plen, ".tmp", 5);
  unsigned char zeros[LM_STATE_FILE_SIZE];
  memset(zeros, 0, sizeof zeros);
  struct iovec part = {zeros, sizeof zeros};
  int bad = lm_io_replace_file(tmp, path, NULL, &part, 1, fd_out);
  int saved = errno;
  free(tmp);
  errno = saved;
  return !bad ? LM_OK : saved == ENOMEM ? LM_ENOMEM : LM_EIO;
}

/* Reads both slots from disk into st->slot. */
static lm_status refresh(lm_state *st) {
  unsigned char buf[LM_STATE_FILE_SIZE];
  lm_status s = pread_full(st->fd, buf, sizeof buf, 0);
  if (s != LM_OK) return s;
  for (int i = 0; i < 2; i++) {
    slot_info *si = &st->slot[i];
    memset(si, 0, sizeof *si);
    si->status = lm_state_slot_decode(buf + i * LM_STATE_SLOT_SIZE, &si->sequence, &si->coord);
    if (si->status != LM_OK) si->sequence = 0;
  }
  return LM_OK;
}

lm_status lm_state_open(const char *path, lm_state **out) {
  if (out != NULL) *out = NULL;
  if (path == NULL || out == NULL || path[0] == '\0') return LM_EINVAL;
  int fd = open(path, O_RDWR | O_CLOEXEC);
  lm_status s;
  if (fd < 0) {
    if (errno != ENOENT) return LM_EIO;
    s = create_file(path, &fd);
    if (s != LM_OK) return s;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    lm_io_close_quietly(fd);
    return LM_EIO;
  }
  if (!S_ISREG(sb.st_mode) || sb.st_size != (off_t)LM_STATE_FILE_SIZE) {
    close(fd);
    return LM_ECORRUPT;
  }
  lm_state *st = calloc(1, sizeof *st);
  if (st == NULL) {
    close(fd);
    return LM_ENOMEM;
  }
  st->fd = fd;
  s = refresh(st);
  if (s != LM_OK) {
    int saved = errno;
    lm_state_close(st);
    errno = saved;
    return s;
  }
  *out = st;
  return LM_OK;
}

void lm_state_close(lm_state *st) {
  if (st == NULL) return;
  if (st->fd >= 0) close(st->fd);
  free(st);
}

/* Index of the newest VALID slot, or -1. */
static int newest_valid(const lm_state *st) {
  int best = -1;
  for (int i = 0; i < 2; i++) {
    if (st->slot[i].status != LM_OK) continue;
    if (best < 0 || st->slot[i].sequence > st->slot[best].sequence) best = i;
  }
  return best;
}

/* The load verdict from the in-memory slot classification. */
static lm_status verdict(const lm_state *st, int *best) {
  *best = -1;
  if (st->slot[0].status == LM_EVERSION || st->slot[1].status == LM_EVERSION) return LM_EVERSION;
  *best = newest_valid(st);
  if (*best >= 0) return LM_OK;
  if (st->slot[0].status == LM_ENOTFOUND && st->slot[1].status == LM_ENOTFOUND) return LM_ENOTFOUND;
  return LM_ECORRUPT;
}

lm_status lm_state_load(lm_state *st, lm_state_coord *coord, uint64_t *sequence) {
  if (st == NULL || coord == NULL) return LM_EINVAL;
  lm_status s = refresh(st);
  if (s != LM_OK) return s;
  int best;
  s = verdict(st, &best);
  if (s != LM_OK) return s;
  *coord = st->slot[best].coord;
  if (sequence != NULL) *sequence = st->slot[best].sequence;
  return LM_OK;
}

lm_status lm_state_commit(lm_state *st, const lm_state_coord *coord) {
  if (st == NULL || coord == NULL) return LM_EINVAL;
  if (st->slot[0].status == LM_EVERSION || st->slot[1].status == LM_EVERSION) return LM_EVERSION;
  int best = newest_valid(st);
  int target;
  uint64_t seq;
  if (best >= 0) {
    if (st->slot[best].sequence == UINT64_MAX) return LM_EOVERFLOW;
    target = 1 - best;
    seq = st->slot[best].sequence + 1;
  } else {
    /* No valid slot: allowed only if nothing was ever committed (EMPTY) or the
     * only non-empty content is our own failed write (LM_EIO).  A CORRUPT slot
     * on disk means a commit existed and has been lost: refuse. */
    for (int i = 0; i < 2; i++) {
      if (st->slot[i].status == LM_ECORRUPT) return LM_ECORRUPT;
    }
    target = (st->slot[1].status == LM_EIO && st->slot[0].status != LM_EIO) ? 1 : 0;
    seq = 1;
  }
  unsigned char buf[LM_STATE_SLOT_SIZE];
  lm_status s = lm_state_slot_encode(seq, coord, buf);
  if (s != LM_OK) return s;
  /* From here on the target slot's content is unknown until the sync succeeds. */
  st->slot[target].status = LM_EIO;
  st->slot[target].sequence = 0;
  s = write_synced(st->fd, buf, sizeof buf, (uint64_t)target * LM_STATE_SLOT_SIZE);
  if (s != LM_OK) return s;
  st->slot[target].status = LM_OK;
  st->slot[target].sequence = seq;
  st->slot[target].coord = *coord;
  return LM_OK;
}

lm_status lm_state_reset(lm_state *st) {
  if (st == NULL) return LM_EINVAL;
  unsigned char zeros[LM_STATE_FILE_SIZE];
  memset(zeros, 0, sizeof zeros);
  for (int i = 0; i < 2; i++) {
    st->slot[i].status = LM_EIO;
    st->slot[i].sequence = 0;
  }
  lm_status s = write_synced(st->fd, zeros, sizeof zeros, 0);
  if (s != LM_OK) return s;
  for (int i = 0; i < 2; i++) {
    memset(&st->slot[i], 0, sizeof st->slot[i]);
    st->slot[i].status = LM_ENOTFOUND;
  }
  return LM_OK;
}

lm_status lm_state_inspect(const lm_state *st, lm_status slot_status[2],
                           uint64_t slot_sequence[2]) {
  if (st == NULL || slot_status == NULL || slot_sequence == NULL) return LM_EINVAL;
  for (int i = 0; i < 2; i++) {
    slot_status[i] = st->slot[i].status;
    slot_sequence[i] = st->slot[i].status == LM_OK ? st->slot[i].sequence : 0;
  }
  return LM_OK;
}
