/* fuzz_snapshot.c — the dedup snapshot loader on damaged and forged snapshots.
 *
 * The input gives hashes; the real code writes a valid WAL and a snapshot of it
 * (possibly with more hashes admitted after the snapshot).  Then the snapshot
 * file is damaged by operations from the input: flip / set bytes, overwrite a
 * header field (lsn, cap, nslots, count, woff, prev, flags) with a chosen value,
 * cut or extend the file — and, with the "forge" flag, the header and payload
 * CRCs are recomputed afterwards, so the loader's structural checks (not just the
 * CRCs) are what stands between the file and the table.
 * Invariants:
 *  - opening always succeeds (a snapshot is only an accelerator: the WAL is valid)
 *    with the LSN of the WAL, and never allocates more than the file can describe;
 *  - without forging, the table holds exactly the WAL's hashes;
 *  - with forging, the table is still internally consistent: every hash that
 *    lm_dedup_foreach visits is found by lm_dedup_contains, their number is the
 *    LSN, and new hashes can be admitted and found;
 *  - the snapshot that the loader rejected is not used again after a new
 *    snapshot is written (the reopened table equals the WAL's hashes).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "luminamoon/crc32c.h"
#include "luminamoon/dedup.h"

#define MAX_HASHES 512

static char g_path[512], g_snap[600], g_tmp[600];

static void cleanup(void) {
  unlink(g_path);
  unlink(g_snap);
  unlink(g_tmp);
  rmdir(fz_tmpdir());
}

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

static int hash_eq(lm_hash128_t a, lm_hash128_t b) { return a.lo == b.lo && a.hi == b.hi; }

typedef struct {
  const lm_dedup *d;
  const lm_hash128_t *want; /* NULL: only check consistency */
  size_t n, seen;
} set_ctx;

static int visit(void *ctx, lm_hash128_t h) {
  set_ctx *c = (set_ctx *)ctx;
  int found = 0;
  CHECK(lm_dedup_contains(c->d, h, &found) == LM_OK && found);
  if (c->want) {
    found = 0;
    for (size_t j = 0; j < c->n && !found; j++) found = hash_eq(c->want[j], h);
    CHECK(found);
  }
  c->seen++;
  return 0;
}

static void check_table(const lm_dedup *d, const lm_hash128_t *want, size_t n, int exact) {
  uint64_t lsn = 0;
  CHECK(lm_dedup_lsn(d, &lsn) == LM_OK && lsn == n);
  if (exact)
    for (size_t j = 0; j < n; j++) {
      int found = 0;
      CHECK(lm_dedup_contains(d, want[j], &found) == LM_OK && found);
    }
  set_ctx c = {d, exact ? want : NULL, n, 0};
  CHECK(lm_dedup_foreach(d, visit, &c) == LM_OK && c.seen == n);
}

static size_t slurp(const char *p, uint8_t **out) {
  int fd = open(p, O_RDONLY);
  CHECK(fd >= 0);
  struct stat sb;
  CHECK(fstat(fd, &sb) == 0);
  size_t n = (size_t)sb.st_size;
  *out = malloc(n + 256);
  CHECK(read(fd, *out, n) == (ssize_t)n);
  close(fd);
  return n;
}

static void spit(const char *p, const uint8_t *b, size_t n) {
  int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CHECK(fd >= 0);
  CHECK(n == 0 || write(fd, b, n) == (ssize_t)n);
  close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_path[0]) {
    snprintf(g_path, sizeof g_path, "%s/wal", fz_tmpdir());
    snprintf(g_snap, sizeof g_snap, "%s.snap", g_path);
    snprintf(g_tmp, sizeof g_tmp, "%s.snap.tmp", g_path);
    atexit(cleanup);
  }
  fz f = {data, size};
  uint8_t mode = fz_u8(&f);
  size_t n_before = fz_u8(&f) % 200, n_after = (mode & 1) ? fz_u8(&f) % 16 : 0;
  unlink(g_path);
  unlink(g_snap);
  lm_dedup_params p;
  lm_dedup_params_default(&p);
  p.wal_path = g_path;
  p.initial_capacity = 16;
  p.wal_buffer_hashes = 1 + (mode >> 3) % 32;
  static lm_hash128_t hashes[MAX_HASHES];
  size_t nh = 0;
  lm_dedup *d = NULL;
  CHECK(lm_dedup_create(&p, &d) == LM_OK);
  for (size_t k = 0; k < n_before + n_after; k++) {
    if (k == n_before) CHECK(lm_dedup_snapshot(d) == LM_OK);
    lm_hash128_t h = {fz_u16(&f) * 0x9e3779b97f4a7c15ull + k, (uint64_t)fz_u8(&f) << 56 | k};
    if (mode & 2) h.hi = (uint64_t)(k % 3) << 62; /* crowded home slots: long runs */
    int is_new = 0;
    CHECK(lm_dedup_check_insert_hash(d, h, &is_new) == LM_OK);
    if (is_new) hashes[nh++] = h;
  }
  if (n_after == 0) CHECK(lm_dedup_snapshot(d) == LM_OK);
  CHECK(lm_dedup_close(d) == LM_OK);
  lm_dedup_destroy(d);

  /* damage the snapshot */
  uint8_t *s = NULL;
  size_t sl = slurp(g_snap, &s);
  CHECK(sl >= 96);
  int forge = (mode & 4) != 0;
  while (f.n) {
    uint8_t op = fz_u8(&f);
    switch (op % 5) {
      case 0: /* flip a bit */
        if (sl) s[fz_u16(&f) % sl] ^= (uint8_t)(1u << (op >> 5));
        break;
      case 1: { /* a header field := a value (small, near a power of two, or raw) */
        static const uint8_t fields[] = {24, 32, 40, 48, 56, 64, 72, 76};
        uint8_t fi = fields[fz_u8(&f) % 8];
        uint64_t v;
        uint8_t kind = fz_u8(&f);
        if (kind % 3 == 0) v = fz_u8(&f);
        else if (kind % 3 == 1) v = ((uint64_t)1 << (fz_u8(&f) % 64)) + (uint64_t)(int8_t)fz_u8(&f);
        else v = fz_u64(&f);
        if (sl >= 96) {
          if (fi >= 72) put32(s + fi, (uint32_t)v);
          else put64(s + fi, v);
        }
        break;
      }
      case 2: /* cut */
        sl -= sl ? fz_u16(&f) % (sl + 1) : 0;
        break;
      case 3: { /* extend with zeros */
        size_t add = fz_u8(&f);
        s = realloc(s, sl + add + 256);
        memset(s + sl, 0, add);
        sl += add;
        break;
      }
      case 4: /* a slot := a chosen key */
        if (sl > 96 + 16) {
          size_t slot = fz_u16(&f) % ((sl - 96) / 16);
          put64(s + 96 + slot * 16, fz_u64(&f));
          put64(s + 96 + slot * 16 + 8, fz_u64(&f));
        }
        break;
    }
  }
  if (forge && sl >= 96) {
    put32(s + 80, lm_crc32c(s + 96, sl - 96));
    put32(s + 92, lm_crc32c(s, 92));
  }
  spit(g_snap, s, sl);
  free(s);

  CHECK(lm_dedup_create(&p, &d) == LM_OK);
  check_table(d, hashes, nh, !forge);
  /* the table keeps working */
  for (uint64_t k = 0; k < 8; k++) {
    lm_hash128_t h = {0x1234567ull + k, 0xdeadbeefull << 20 | k};
    int dup = 0, is_new = 0, found = 0;
    for (size_t j = 0; j < nh; j++) dup |= hash_eq(hashes[j], h);
    CHECK(lm_dedup_check_insert_hash(d, h, &is_new) == LM_OK);
    if (!forge) CHECK(is_new == !dup);
    CHECK(lm_dedup_contains(d, h, &found) == LM_OK && found);
  }
  lm_dedup_stats st;
  CHECK(lm_dedup_stats_get(d, &st) == LM_OK);
  CHECK(lm_dedup_truncate(d, nh) == LM_OK); /* the WAL undoes what it added */
  if (!forge) check_table(d, hashes, nh, 1);
  CHECK(lm_dedup_close(d) == LM_OK);
  lm_dedup_destroy(d);
  return 0;
}
