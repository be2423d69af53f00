/* fuzz_wal.c — the StreamDeduplicator's WAL reader on arbitrary file bytes.
 *
 * The input describes a WAL file: a header (valid, or raw bytes) and a list of
 * operations — append a valid record (hashes from the input, the right LSN and
 * CRCs), append raw bytes, append a record with a wrong LSN, flip a byte, cut
 * the end.  The file is written to a private tmpfs directory and opened with
 * lm_dedup_create.  An independent reference parser (written here from the
 * format in dedup.h) predicts the result:
 *  - the status (OK, ECORRUPT, EVERSION, EINVAL for another seed);
 *  - on OK: the LSN and the exact set of hashes (every record up to the first
 *    bad one; a bad record followed by no valid record header is a tail that
 *    is cut, and the file is then exactly that long); nothing else is read as data;
 *  - on an error: the file is left byte for byte as it was;
 *  - a second open (a fresh replay) gives the same LSN and set, cuts nothing;
 *  - admitting more, syncing, truncating to an LSN from the input and reopening
 *    leaves exactly the first L hashes of the log;
 *  - the read-only reader (lm_dedup_wal_read_hashes) returns the same hashes in
 *    LSN order and nothing past them, without changing the file.
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

#define MAX_FILE (1 << 16)
#define MAX_HASHES 4096

static uint8_t g_file[MAX_FILE + 4096];
static char g_path[512], g_snap[600];

static void cleanup(void) {
  unlink(g_path);
  unlink(g_snap);
  rmdir(fz_tmpdir());
}

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static void make_header(uint8_t *h, uint64_t seed) {
  memset(h, 0, 64);
  memcpy(h, "LMDDWAL\0", 8);
  put32(h + 8, 1);
  put32(h + 12, 64);
  put64(h + 16, seed);
  put32(h + 60, lm_crc32c(h, 60));
}

static int rec_hdr_ok(const uint8_t *h) {
  if (memcmp(h, "LMR1", 4) != 0) return 0;
  if (lm_crc32c(h, 20) != get32(h + 20)) return 0;
  uint32_t c = get32(h + 4);
  return c >= 1 && c <= 65536;
}

typedef struct {
  int status;        /* expected lm_status */
  uint64_t lsn;      /* on OK */
  uint64_t keep_len; /* file length after open, on OK */
  lm_hash128_t *hashes;
  size_t nh;
} ref_result;

static int hash_eq(lm_hash128_t a, lm_hash128_t b) { return a.lo == b.lo && a.hi == b.hi; }

static void ref_parse(const uint8_t *f, size_t size, uint64_t seed, ref_result *r) {
  uint8_t want[64];
  make_header(want, seed);
  r->nh = 0;
  r->lsn = 0;
  if (size < 64) {
    size_t k = size < 12 ? size : 12;
    r->status = memcmp(f, want, k) == 0 ? LM_OK : LM_ECORRUPT;
    r->keep_len = 64;
    return;
  }
  if (memcmp(f, "LMDDWAL\0", 8) != 0) { r->status = LM_ECORRUPT; return; }
  if (get32(f + 8) != 1) { r->status = LM_EVERSION; return; }
  if (get32(f + 12) != 64 || lm_crc32c(f, 60) != get32(f + 60)) { r->status = LM_ECORRUPT; return; }
  if (get64(f + 16) != seed) { r->status = LM_EINVAL; return; }
  size_t off = 64;
  r->status = LM_OK;
  while (off < size) {
    int ok = size - off >= 24 && rec_hdr_ok(f + off) && get64(f + off + 8) == r->lsn;
    uint32_t c = ok ? get32(f + off + 4) : 0;
    if (ok) ok = size - off - 24 >= (uint64_t)c * 16 && lm_crc32c(f + off + 24, (size_t)c * 16) == get32(f + off + 16);
    if (!ok) {
      int later = 0;
      for (size_t i = off + 1; i + 24 <= size && !later; i++) later = rec_hdr_ok(f + i);
      if (later) { r->status = LM_ECORRUPT; return; }
      break;
    }
    for (uint32_t k = 0; k < c; k++) {
      lm_hash128_t h;
      memcpy(&h, f + off + 24 + (size_t)k * 16, 16);
      for (size_t j = 0; j < r->nh; j++)
        if (hash_eq(r->hashes[j], h)) { r->status = LM_ECORRUPT; return; }
      r->hashes[r->nh++] = h;
    }
    r->lsn += c;
    off += 24 + (size_t)c * 16;
  }
  r->keep_len = off;
}

static size_t file_size(const char *p) {
  struct stat sb;
  CHECK(stat(p, &sb) == 0);
  return (size_t)sb.st_size;
}

static void write_file(const uint8_t *b, size_t n) {
  int fd = open(g_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CHECK(fd >= 0);
  CHECK(n == 0 || write(fd, b, n) == (ssize_t)n);
  close(fd);
}

static size_t read_file(uint8_t *b, size_t cap) {
  int fd = open(g_path, O_RDONLY);
  CHECK(fd >= 0);
  ssize_t r = read(fd, b, cap);
  close(fd);
  CHECK(r >= 0);
  return (size_t)r;
}

typedef struct {
  const lm_hash128_t *want;
  size_t n;
  size_t seen;
} set_ctx;

static int count_fn(void *ctx, lm_hash128_t h) {
  set_ctx *c = (set_ctx *)ctx;
  int found = 0;
  for (size_t j = 0; j < c->n && !found; j++) found = hash_eq(c->want[j], h);
  CHECK(found);
  c->seen++;
  return 0;
}

/* The deduplicator holds exactly want[0..n). */
static void check_set(const lm_dedup *d, const lm_hash128_t *want, size_t n) {
  uint64_t lsn = 0;
  CHECK(lm_dedup_lsn(d, &lsn) == LM_OK && lsn == n);
  for (size_t j = 0; j < n; j++) {
    int found = 0;
    CHECK(lm_dedup_contains(d, want[j], &found) == LM_OK && found);
  }
  set_ctx c = {want, n, 0};
  CHECK(lm_dedup_foreach(d, count_fn, &c) == LM_OK && c.seen == n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_path[0]) {
    snprintf(g_path, sizeof g_path, "%s/wal", fz_tmpdir());
    snprintf(g_snap, sizeof g_snap, "%s.snap", g_path);
    atexit(cleanup);
  }
  static lm_hash128_t hashes[MAX_HASHES + 64];
  static uint8_t orig[MAX_FILE + 4096];
  fz f = {data, size};
  uint8_t mode = fz_u8(&f);
  uint64_t seed = (mode & 2) ? 42 : 0;
  size_t len = 0;
  uint64_t lsn = 0;
  if (mode & 1) { /* raw header bytes */
    size_t got;
    const uint8_t *h = fz_bytes(&f, fz_u8(&f) % 80, &got);
    memcpy(g_file, h, got);
    len = got;
  } else {
    make_header(g_file, (mode & 4) ? 42 : 0); /* sometimes another seed than the open's */
    len = 64;
  }
  while (f.n && len < MAX_FILE) {
    uint8_t op = fz_u8(&f);
    switch (op % 6) {
      case 0:
      case 1: { /* a valid record */
        uint32_t c = 1 + fz_u8(&f) % 8;
        if (len + 24 + c * 16 > MAX_FILE) break;
        uint8_t *r = g_file + len;
        for (uint32_t k = 0; k < c; k++) {
          lm_hash128_t h;
          if (op & 0x40) { /* small values: duplicates and the zero key happen */
            h.lo = fz_u8(&f) % 4;
            h.hi = 0;
          } else {
            h.lo = fz_u64(&f);
            h.hi = fz_u64(&f);
          }
          memcpy(r + 24 + k * 16, &h, 16);
        }
        memcpy(r, "LMR1", 4);
        put32(r + 4, c);
        put64(r + 8, (op & 0x80) ? lsn + 1 : lsn); /* sometimes out of sequence */
        put32(r + 16, lm_crc32c(r + 24, c * 16));
        put32(r + 20, lm_crc32c(r, 20));
        lsn += c;
        len += 24 + c * 16;
        break;
      }
      case 2: { /* raw bytes */
        size_t got;
        const uint8_t *b = fz_bytes(&f, fz_u8(&f) % 64, &got);
        memcpy(g_file + len, b, got);
        len += got;
        break;
      }
      case 3: /* flip one byte */
        if (len) g_file[fz_u16(&f) % len] ^= (uint8_t)(1u << (fz_u8(&f) & 7));
        break;
      case 4: { /* cut the end */
        size_t cut = fz_u8(&f) % 40;
        len = cut < len ? len - cut : 0;
        break;
      }
      case 5: /* a copy of the last 24 bytes (a stale header) */
        if (len >= 88) {
          memmove(g_file + len, g_file + len - 24, 24);
          len += 24;
        }
        break;
    }
  }
  unlink(g_snap);
  write_file(g_file, len);
  memcpy(orig, g_file, len);

  ref_result ref = {0, 0, 0, hashes, 0};
  ref_parse(g_file, len, seed, &ref);

  /* the read-only reader, before the open may cut anything: the same hashes in
   * LSN order, nothing past them, and the file untouched */
  if (ref.status == LM_OK && len >= 64) {
    static lm_hash128_t rd[MAX_HASHES + 64];
    uint64_t n = 0;
    CHECK(lm_dedup_wal_read_hashes(g_path, ref.nh, rd, &n) == LM_OK && n == ref.nh);
    for (size_t j = 0; j < ref.nh; j++) CHECK(hash_eq(rd[j], ref.hashes[j]));
    CHECK(lm_dedup_wal_read_hashes(g_path, ref.nh + 1, rd, &n) != LM_OK && n == ref.nh);
    lm_dedup_wal_info info;
    CHECK(lm_dedup_wal_inspect(g_path, &info) == LM_OK && info.seed == seed && info.lsn_end >= ref.nh);
    CHECK(file_size(g_path) == len);
  }

  lm_dedup_params p;
  lm_dedup_params_default(&p);
  p.wal_path = g_path;
  p.seed = seed;
  p.initial_capacity = 16;
  p.wal_buffer_hashes = 1 + (mode >> 4);
  lm_dedup *d = NULL;
  lm_status s = lm_dedup_create(&p, &d);
  if (s != (lm_status)ref.status) {
    fprintf(stderr, "open: got %s, reference %s (file %zu bytes)\n", lm_status_name(s),
            lm_status_name((lm_status)ref.status), len);
    CHECK(0);
  }
  if (s != LM_OK) {
    CHECK(d == NULL);
    static uint8_t now[MAX_FILE + 4096];
    size_t nl = read_file(now, sizeof now);
    CHECK(nl == len && (len == 0 || memcmp(now, orig, len) == 0)); /* left as it was */
    return 0;
  }
  check_set(d, ref.hashes, ref.nh);
  lm_dedup_stats st;
  CHECK(lm_dedup_stats_get(d, &st) == LM_OK);
  CHECK(st.entries == ref.nh && st.replayed_hashes == ref.nh);
  CHECK(file_size(g_path) == ref.keep_len);
  if (len >= 64) CHECK(st.tail_bytes_cut == len - ref.keep_len);
  CHECK(lm_dedup_close(d) == LM_OK);
  lm_dedup_destroy(d);

  /* a fresh replay sees the same */
  CHECK(lm_dedup_create(&p, &d) == LM_OK);
  check_set(d, ref.hashes, ref.nh);
  CHECK(lm_dedup_stats_get(d, &st) == LM_OK && st.tail_bytes_cut == 0);
  /* admit more (new hashes only), sync, truncate, reopen */
  size_t nh = ref.nh;
  uint8_t more = fz_u8(&f) % 24;
  for (uint8_t k = 0; k < more && nh < MAX_HASHES; k++) {
    lm_hash128_t h = {0x9e3779b97f4a7c15ull * (k + 1), 0xfeedull + k + ((uint64_t)1 << 63)};
    int dup = 0;
    for (size_t j = 0; j < nh; j++) dup |= hash_eq(hashes[j], h);
    int is_new = 0;
    CHECK(lm_dedup_check_insert_hash(d, h, &is_new) == LM_OK && is_new == !dup);
    if (!dup) hashes[nh++] = h;
  }
  if (more & 1) CHECK(lm_dedup_sync(d, NULL) == LM_OK);
  if (more & 2) CHECK(lm_dedup_snapshot(d) == LM_OK);
  uint64_t target = nh ? (uint64_t)(mode * 7919u) % (nh + 1) : 0;
  CHECK(lm_dedup_truncate(d, target) == LM_OK);
  check_set(d, hashes, (size_t)target);
  CHECK(lm_dedup_truncate(d, target + 1) == LM_ERANGE);
  CHECK(lm_dedup_close(d) == LM_OK);
  lm_dedup_destroy(d);
  CHECK(lm_dedup_create(&p, &d) == LM_OK);
  check_set(d, hashes, (size_t)target);
  lm_dedup_destroy(d);
  return 0;
}
