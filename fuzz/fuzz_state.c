/* fuzz_state.c — StateTracker: slot decoding and loading a state file.
 *
 * Input: one mode byte, then the file bytes (any length; 128 is the only valid
 * size) and, after them, a coordinate to commit.
 * Invariants:
 *  - lm_state_slot_decode on each 64-byte slot equals a reference classifier
 *    written here from the table in state.h (EMPTY, CORRUPT, VERSION, VALID and
 *    the decoded fields);
 *  - lm_state_open: LM_ECORRUPT for any size other than 128, else LM_OK;
 *  - lm_state_load follows LOAD RESULT exactly (the newest VALID slot's coordinate);
 *  - lm_state_commit: refused (file unchanged) when load says CORRUPT or VERSION;
 *    otherwise it writes the other slot only, and a reload returns the committed
 *    coordinate with sequence + 1 (or LM_EOVERFLOW at UINT64_MAX, file unchanged);
 *  - encode -> decode round-trips any coordinate and any sequence > 0.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "luminamoon/crc32c.h"
#include "luminamoon/state.h"

static char g_path[512];

static void cleanup(void) {
  unlink(g_path);
  rmdir(fz_tmpdir());
}

static uint16_t g16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t g32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t g64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

typedef struct {
  int status;
  uint64_t seq;
  lm_state_coord c;
} ref_slot;

static ref_slot ref_decode(const uint8_t *s) {
  ref_slot r;
  memset(&r, 0, sizeof r);
  int zero = 1;
  for (int i = 0; i < 64; i++) zero &= s[i] == 0;
  if (zero) { r.status = LM_ENOTFOUND; return r; }
  if (g16(s) != 0x534C) { r.status = LM_ECORRUPT; return r; }
  if (lm_crc32c(s, 60) != g32(s + 60)) { r.status = LM_ECORRUPT; return r; }
  if (g16(s + 2) != 1) { r.status = LM_EVERSION; return r; }
  if (g64(s + 8) == 0) { r.status = LM_ECORRUPT; return r; }
  r.status = LM_OK;
  r.seq = g64(s + 8);
  r.c.epoch = g32(s + 4);
  r.c.batch_index = g64(s + 16);
  r.c.sample_index = g64(s + 24);
  r.c.source_pos = g64(s + 32);
  r.c.source_pos2 = g64(s + 40);
  r.c.wal_lsn = g64(s + 48);
  r.c.shard = g32(s + 56);
  return r;
}

static int coord_eq(const lm_state_coord *a, const lm_state_coord *b) {
  return a->epoch == b->epoch && a->shard == b->shard && a->batch_index == b->batch_index &&
         a->sample_index == b->sample_index && a->source_pos == b->source_pos &&
         a->source_pos2 == b->source_pos2 && a->wal_lsn == b->wal_lsn;
}

static void write_file(const uint8_t *b, size_t n) {
  int fd = open(g_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CHECK(fd >= 0);
  CHECK(n == 0 || write(fd, b, n) == (ssize_t)n);
  close(fd);
}

static void read_file(uint8_t *b) {
  int fd = open(g_path, O_RDONLY);
  CHECK(fd >= 0);
  CHECK(read(fd, b, 128) == 128);
  close(fd);
}

static void fix_crc(uint8_t *s) {
  uint32_t c = lm_crc32c(s, 60);
  memcpy(s + 60, &c, 4);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_path[0]) {
    snprintf(g_path, sizeof g_path, "%s/state", fz_tmpdir());
    atexit(cleanup);
  }
  fz f = {data, size};
  uint8_t mode = fz_u8(&f);
  uint8_t file[256];
  memset(file, 0, sizeof file);
  size_t flen = 128;
  if (mode & 0x80) flen = fz_u8(&f) % 200; /* any size */
  size_t got;
  const uint8_t *b = fz_bytes(&f, flen, &got);
  memcpy(file, b, got);
  /* structure help: make slots look real (magic / version / CRC) unless raw */
  for (int k = 0; k < 2 && flen >= 128; k++) {
    uint8_t *s = file + 64 * k;
    if (mode & (1u << k)) { s[0] = 0x4C; s[1] = 0x53; }
    if (mode & (4u << k)) { s[2] = 1; s[3] = 0; }
    if (mode & (16u << k)) fix_crc(s);
  }
  if ((mode & 0x40) && flen >= 128) memset(file + 64 * (mode & 1), 0, 64); /* one slot empty */

  /* pure decode against the reference */
  ref_slot rs[2];
  for (int k = 0; k < 2; k++) {
    rs[k] = ref_decode(file + 64 * k);
    uint64_t seq = 0;
    lm_state_coord c;
    memset(&c, 0, sizeof c);
    lm_status s = lm_state_slot_decode(file + 64 * k, &seq, &c);
    CHECK_EQ_STATUS(s, rs[k].status);
    if (s == LM_OK) CHECK(seq == rs[k].seq && coord_eq(&c, &rs[k].c));
    CHECK_EQ_STATUS(lm_state_slot_decode(file + 64 * k, NULL, NULL), rs[k].status);
  }
  /* the coordinate to commit */
  lm_state_coord want;
  want.epoch = fz_u32(&f);
  want.shard = fz_u32(&f);
  want.batch_index = fz_u64(&f);
  want.sample_index = fz_u64(&f);
  want.source_pos = fz_u64(&f);
  want.source_pos2 = fz_u64(&f);
  want.wal_lsn = fz_u64(&f);
  /* encode/decode round trip */
  uint64_t seq_in = fz_u64(&f) | 1;
  uint8_t enc[64];
  CHECK(lm_state_slot_encode(seq_in, &want, enc) == LM_OK);
  CHECK(lm_state_slot_encode(0, &want, enc + 0) == LM_EINVAL);
  CHECK(lm_state_slot_encode(seq_in, &want, enc) == LM_OK);
  {
    uint64_t sq;
    lm_state_coord c;
    CHECK(lm_state_slot_decode(enc, &sq, &c) == LM_OK && sq == seq_in && coord_eq(&c, &want));
    ref_slot r = ref_decode(enc);
    CHECK(r.status == LM_OK && r.seq == seq_in && coord_eq(&r.c, &want));
  }

  write_file(file, flen);
  lm_state *st = NULL;
  lm_status os = lm_state_open(g_path, &st);
  if (flen != 128) {
    CHECK_EQ_STATUS(os, LM_ECORRUPT);
    CHECK(st == NULL);
    return 0;
  }
  CHECK_EQ_STATUS(os, LM_OK);
  /* expected load result */
  int best = -1;
  int ver = rs[0].status == LM_EVERSION || rs[1].status == LM_EVERSION;
  for (int k = 0; k < 2; k++)
    if (rs[k].status == LM_OK && (best < 0 || rs[k].seq > rs[best].seq)) best = k;
  int expect;
  if (ver) expect = LM_EVERSION;
  else if (best >= 0) expect = LM_OK;
  else if (rs[0].status == LM_ENOTFOUND && rs[1].status == LM_ENOTFOUND) expect = LM_ENOTFOUND;
  else expect = LM_ECORRUPT;
  lm_state_coord got_c;
  uint64_t got_seq = 0;
  lm_status ls = lm_state_load(st, &got_c, &got_seq);
  CHECK_EQ_STATUS(ls, expect);
  if (ls == LM_OK) {
    CHECK(got_seq == rs[best].seq);
    /* equal sequences: either slot's coordinate is acceptable */
    int other = 1 - best;
    CHECK(coord_eq(&got_c, &rs[best].c) ||
          (rs[other].status == LM_OK && rs[other].seq == got_seq && coord_eq(&got_c, &rs[other].c)));
  }
  lm_status slot_status[2];
  uint64_t slot_seq[2];
  CHECK(lm_state_inspect(st, slot_status, slot_seq) == LM_OK);
  for (int k = 0; k < 2; k++) {
    CHECK_EQ_STATUS(slot_status[k], rs[k].status);
    CHECK(slot_seq[k] == (rs[k].status == LM_OK ? rs[k].seq : 0));
  }

  /* commit */
  uint8_t before[128], after[128];
  read_file(before);
  lm_status cs = lm_state_commit(st, &want);
  read_file(after);
  if (ls == LM_ECORRUPT || ls == LM_EVERSION) {
    CHECK_EQ_STATUS(cs, ls);
    CHECK(memcmp(before, after, 128) == 0);
  } else if (ls == LM_OK && got_seq == UINT64_MAX) {
    CHECK_EQ_STATUS(cs, LM_EOVERFLOW);
    CHECK(memcmp(before, after, 128) == 0);
  } else {
    CHECK_EQ_STATUS(cs, LM_OK);
    uint64_t new_seq = ls == LM_OK ? got_seq + 1 : 1;
    /* the slot holding the loaded state is untouched */
    if (ls == LM_OK) {
      int kept = -1;
      for (int k = 0; k < 2; k++)
        if (memcmp(before + 64 * k, after + 64 * k, 64) == 0 && rs[k].status == LM_OK && rs[k].seq == got_seq)
          kept = k;
      CHECK(kept >= 0);
    }
    lm_state_coord c2;
    uint64_t s2 = 0;
    CHECK(lm_state_load(st, &c2, &s2) == LM_OK && s2 == new_seq && coord_eq(&c2, &want));
    lm_state_close(st);
    st = NULL;
    CHECK(lm_state_open(g_path, &st) == LM_OK);
    CHECK(lm_state_load(st, &c2, &s2) == LM_OK && s2 == new_seq && coord_eq(&c2, &want));
  }
  lm_state_close(st);
  return 0;
}
