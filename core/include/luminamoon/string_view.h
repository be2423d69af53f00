/* luminamoon/string_view.h — the 16-byte string view (Arrow Utf8View layout).
 *
 *   bytes 0..3    uint32 length (little-endian), at most 2^31-1
 *   length <= 12: bytes 4..15   the string itself, zero-padded
 *   length >  12: bytes 4..7    the first 4 bytes of the string (prefix)
 *                 bytes 8..11   uint32 index of the payload buffer
 *                 bytes 12..15  uint32 offset of the string inside that buffer
 *
 * Byte for byte the Apache Arrow "BinaryView/Utf8View" view (little-endian hosts).
 * Thread-safety: all functions here are pure and thread-safe.
 */
#ifndef LUMINAMOON_STRING_VIEW_H
#define LUMINAMOON_STRING_VIEW_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LM_INLINE_MAX 12u
#define LM_PREFIX_LEN 4u
#define LM_MAX_STRING_LEN 0x7fffffffu

typedef struct lm_string_view {
  uint32_t len;
  uint8_t prefix_or_inline[4];
  uint8_t suffix_or_offset[8];
} lm_string_view;

#ifdef __cplusplus
static_assert(sizeof(lm_string_view) == 16, "lm_string_view must be 16 bytes");
#else
_Static_assert(sizeof(lm_string_view) == 16, "lm_string_view must be 16 bytes");
#endif

/* Accessors of one view (v non-NULL; nothing is checked): whether the string is stored inline
 * (len <= 12), and for a long string its payload buffer index and byte offset. */
static inline int lm_sv_is_inline(const lm_string_view *v) { return v->len <= LM_INLINE_MAX; }

static inline uint32_t lm_sv_buffer_index(const lm_string_view *v) {
  uint32_t b;
  memcpy(&b, v->suffix_or_offset, 4);
  return b;
}

static inline uint32_t lm_sv_offset(const lm_string_view *v) {
  uint32_t o;
  memcpy(&o, v->suffix_or_offset + 4, 4);
  return o;
}

/* The string's bytes.  `buffers` is the array of payload base pointers the
 * view's buffer index refers to (unused for inline strings).  The caller must
 * have validated the view (lm_views_validate) first. */
static inline const uint8_t *lm_sv_data(const lm_string_view *v, const uint8_t *const *buffers) {
  if (v->len <= LM_INLINE_MAX) return v->prefix_or_inline;
  return buffers[lm_sv_buffer_index(v)] + lm_sv_offset(v);
}

/* The first 8 bytes of a view (length + prefix) as one word: equal strings have equal words. */
static inline uint64_t lm_sv_head(const lm_string_view *v) {
  uint64_t w;
  memcpy(&w, v, 8);
  return w;
}

/* The padding bits of one view: 0 when the view is long or its inline string is
 * zero-padded, as Arrow requires.  The inline bytes 0..11 sit at p[4..16): `lo`
 * holds bytes 0..7, `hi` bytes 4..11 (little-endian words, as Arrow's layout
 * is); every byte at or past len must be 0.  Branch-free, so loops vectorise. */
static inline uint64_t lm_sv_padding_bits(const lm_string_view *v) {
  const uint8_t *p = (const uint8_t *)v;
  uint32_t len;
  uint64_t lo, hi;
  memcpy(&len, p, 4);
  memcpy(&lo, p + 4, 8);
  memcpy(&hi, p + 8, 8);
  /* masks[min(len, 12)]: the bytes of lo / hi at or past len (none for len >= 12) */
  static const uint64_t mlo[13] = {~0ull, ~0ull << 8, ~0ull << 16, ~0ull << 24, ~0ull << 32, ~0ull << 40,
                                   ~0ull << 48, ~0ull << 56, 0, 0, 0, 0, 0};
  static const uint64_t mhi[13] = {~0ull, ~0ull, ~0ull, ~0ull, ~0ull, ~0ull << 8, ~0ull << 16, ~0ull << 24,
                                   ~0ull << 32, ~0ull << 40, ~0ull << 48, ~0ull << 56, 0};
  const uint32_t k = len < 12 ? len : 12;
  return (lo & mlo[k]) | (hi & mhi[k]);
}

/* Make a view for `len` bytes at `s`.  Strings of at most 12 bytes are copied
 * inline; longer ones record (buffer_index, offset) and their 4-byte prefix.
 * Returns 0, or -1 when len > LM_MAX_STRING_LEN. */
static inline int lm_sv_make(lm_string_view *v, const uint8_t *s, uint32_t len,
                             uint32_t buffer_index, uint32_t offset) {
  if (len > LM_MAX_STRING_LEN) return -1;
  memset(v, 0, sizeof *v);
  v->len = len;
  if (len <= LM_INLINE_MAX) {
    if (len) memcpy(v->prefix_or_inline, s, len);
  } else {
    memcpy(v->prefix_or_inline, s, 4);
    memcpy(v->suffix_or_offset, &buffer_index, 4);
    memcpy(v->suffix_or_offset + 4, &offset, 4);
  }
  return 0;
}

#ifdef __cplusplus
}
#endif
#endif
