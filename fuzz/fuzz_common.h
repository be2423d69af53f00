/* fuzz_common.h — helpers shared by the libFuzzer targets in fuzz/.
 *
 * A tiny FuzzedDataProvider for C (bytes are consumed from the front; when the
 * input runs out every read returns zeros), an independent reference UTF-8
 * validator (written from RFC 3629 Table 3, not shared with the core), and
 * CHECK(), which reports a broken invariant and aborts so libFuzzer keeps the
 * input as a crash file.
 */
#ifndef LM_FUZZ_COMMON_H
#define LM_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                      \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      fprintf(stderr, "INVARIANT FAILED %s:%d: %s\n", __FILE__, __LINE__, #cond);        \
      abort();                                                                           \
    }                                                                                    \
  } while (0)

#define CHECK_EQ_STATUS(got, want)                                                       \
  do {                                                                                   \
    int g_ = (int)(got), w_ = (int)(want);                                               \
    if (g_ != w_) {                                                                      \
      fprintf(stderr, "INVARIANT FAILED %s:%d: %s = %d, expected %d\n", __FILE__, __LINE__, \
              #got, g_, w_);                                                             \
      abort();                                                                           \
    }                                                                                    \
  } while (0)

typedef struct fz {
  const uint8_t *p;
  size_t n;
} fz;

static inline uint8_t fz_u8(fz *f) {
  if (!f->n) return 0;
  uint8_t v = *f->p++;
  f->n--;
  return v;
}
static inline uint16_t fz_u16(fz *f) { return (uint16_t)(fz_u8(f) | (fz_u8(f) << 8)); }
static inline uint32_t fz_u32(fz *f) { return (uint32_t)fz_u16(f) | ((uint32_t)fz_u16(f) << 16); }
static inline uint64_t fz_u64(fz *f) { return (uint64_t)fz_u32(f) | ((uint64_t)fz_u32(f) << 32); }
/* Up to `max` bytes (fewer when the input ends); returns a pointer into the input. */
static inline const uint8_t *fz_bytes(fz *f, size_t want, size_t *got) {
  if (want > f->n) want = f->n;
  const uint8_t *r = f->p;
  f->p += want;
  f->n -= want;
  *got = want;
  return r;
}
/* A length-prefixed string: one length byte (0..254; 255 = 2-byte length). */
static inline const uint8_t *fz_str(fz *f, size_t *len) {
  size_t want = fz_u8(f);
  if (want == 255) want = fz_u16(f) & 0x3fff;
  return fz_bytes(f, want, len);
}

/* Reference UTF-8 check (RFC 3629 section 4 / Unicode Table 3-7).  Returns 1 if valid. */
static inline int ref_utf8_valid(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t b = s[i];
    size_t k;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b < 0x80) { i++; continue; }
    else if (b >= 0xC2 && b <= 0xDF) k = 1;
    else if (b == 0xE0) { k = 2; lo = 0xA0; }
    else if (b == 0xED) { k = 2; hi = 0x9F; }
    else if (b >= 0xE1 && b <= 0xEF) k = 2;
    else if (b == 0xF0) { k = 3; lo = 0x90; }
    else if (b == 0xF4) { k = 3; hi = 0x8F; }
    else if (b >= 0xF1 && b <= 0xF3) k = 3;
    else return 0;
    if (n - i <= k) return 0;
    if (s[i + 1] < lo || s[i + 1] > hi) return 0;
    for (size_t j = 2; j <= k; j++)
      if (s[i + j] < 0x80 || s[i + j] > 0xBF) return 0;
    i += k + 1;
  }
  return 1;
}

/* A private temporary directory per process (under $TMPDIR or /dev/shm). */
static inline const char *fz_tmpdir(void) {
  static char dir[256];
  if (!dir[0]) {
    const char *base = getenv("LM_FUZZ_TMP");
    if (!base) base = "/dev/shm";
    snprintf(dir, sizeof dir, "%s/lmfuzzXXXXXX", base);
    extern char *mkdtemp(char *);
    if (!mkdtemp(dir)) {
      snprintf(dir, sizeof dir, "/tmp/lmfuzzXXXXXX");
      if (!mkdtemp(dir)) abort();
    }
  }
  return dir;
}

#endif
