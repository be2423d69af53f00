/* UTF-8 validation (RFC 3629: no overlongs, no surrogates, at most U+10FFFF). */
#include <string.h>

#include "luminamoon/string_tensor.h"

lm_status lm_utf8_validate(const uint8_t *s, size_t len, size_t *error_pos) {
  if (!s && len) return LM_EINVAL;
  size_t i = 0;
  while (i < len) {
    /* ASCII fast path, 8 bytes at a time. */
    while (i + 8 <= len) {
      uint64_t w;
      memcpy(&w, s + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= len) break;
    uint8_t c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
      need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      need = 2;
      if (c == 0xE0) lo = 0xA0;      /* no overlongs */
      else if (c == 0xED) hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
      need = 3;
      if (c == 0xF0) lo = 0x90;      /* no overlongs */
      else if (c == 0xF4) hi = 0x8F; /* at most U+10FFFF */
    } else {
      goto bad;
    }
    if (need >= len - i) goto bad; /* truncated sequence */
    if (s[i + 1] < lo || s[i + 1] > hi) goto bad;
    for (size_t k = 2; k <= need; k++)
      if ((s[i + k] & 0xC0) != 0x80) goto bad;
    i += need + 1;
  }
  return LM_OK;
bad:
  if (error_pos) *error_pos = i;
  return LM_EUTF8;
}
