/* durable_internal.h — the core's one copy of durable file I/O and of the
 * little-endian encoding of its on-disk formats, shared by the dedup WAL and
 * snapshots (dedup_wal.c) and the StateTracker (state.c).  Not public.
 *
 * Encoding.  Every multi-byte field of every file the core writes is
 * little-endian, whatever the host: lm_le_put* / lm_le_get* assemble bytes by
 * shifts (compilers turn them into plain loads and stores on little-endian
 * hosts).  Arrays of 128-bit hashes (WAL payloads, snapshot slot arrays) are
 * written as (lo, hi) little-endian pairs: on a little-endian host that is the
 * memory layout of lm_hash128_t, so they are written and read in place;
 * lm_le_hashes_swap converts such an array between host and file order in
 * place (nothing to do on little-endian hosts).
 *
 * I/O.  Every function retries on EINTR and returns 0 on success, or -1 with
 * errno set by the failing call (a write that makes no progress sets EIO).
 * Thread-safety: no shared state; the usual rules for the descriptors passed.
 */
#ifndef LUMINAMOON_DURABLE_INTERNAL_H
#define LUMINAMOON_DURABLE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "luminamoon/hash.h"

/* ------------------------------------------------------------ encoding */

/* (-DLM_HOST_BIG_ENDIAN=1 on a little-endian host compiles and exercises the
 * big-endian paths: every file then holds byte-swapped hashes, readable only by
 * such a build — for testing that each write and read converts exactly once.) */
#ifndef LM_HOST_BIG_ENDIAN
#if defined(__BYTE_ORDER__) && defined(__ORDER_BIG_ENDIAN__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define LM_HOST_BIG_ENDIAN 1
#else
#define LM_HOST_BIG_ENDIAN 0
#endif
#endif

static inline void lm_le_put16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static inline void lm_le_put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void lm_le_put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t lm_le_get16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t lm_le_get32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}
static inline uint64_t lm_le_get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

/* Host <-> file order of n hashes, in place (an involution; nothing on
 * little-endian hosts). */
static inline void lm_le_hashes_swap(lm_hash128_t *h, size_t n) {
#if LM_HOST_BIG_ENDIAN
  for (size_t i = 0; i < n; i++) {
    h[i].lo = __builtin_bswap64(h[i].lo);
    h[i].hi = __builtin_bswap64(h[i].hi);
  }
#else
  (void)h;
  (void)n;
#endif
}

/* ----------------------------------------------------------------- I/O */

/* Write all len bytes at off (pwrite loop).  0 or -1 (errno). */
int lm_io_pwrite_full(int fd, const void *buf, size_t len, uint64_t off);

/* Read up to len bytes at off (pread loop): the number read, less than len only
 * at the end of the file, or -1 (errno). */
ssize_t lm_io_pread_full(int fd, void *buf, size_t len, uint64_t off);

/* close(fd), leaving errno as it was (for error paths that report an earlier
 * failure); fd < 0 is ignored. */
void lm_io_close_quietly(int fd);

int lm_io_fsync(int fd);     /* fsync; 0 or -1 (errno) */
int lm_io_fdatasync(int fd); /* fdatasync; 0 or -1 (errno) */

/* fsync the directory `dir` (so that a create, rename or unlink in it is
 * durable).  0 or -1 (errno). */
int lm_io_fsync_dir(const char *dir);

/* The directory part of path ("." without a slash, "/" for "/x"); malloc'ed,
 * the caller frees it; NULL when out of memory (errno ENOMEM). */
char *lm_io_dirname(const char *path);

/* Put a new file at `path` atomically and durably: write the parts (in order,
 * from offset 0) to `tmp` (created or truncated, mode 0644), fsync it, rename
 * it over `path`, fsync `dir` (the directory of both; NULL: the directory of
 * path).  A reader sees the old file or the whole new one, never a part.  On
 * failure tmp is removed and errno is that of the failing call; `path` is
 * untouched unless only the directory fsync failed (then the new file is in
 * place but maybe not durable).  fd_out NULL: the file is closed; else *fd_out receives it open
 * O_RDWR (-1 on failure).  0 or -1 (errno). */
int lm_io_replace_file(const char *tmp, const char *path, const char *dir, const struct iovec *parts, int nparts,
                       int *fd_out);

#endif
