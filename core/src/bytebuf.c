/* bytebuf.c — lm_grow_array and lm_bytebuf (see luminamoon/bytebuf.h). */
#include "luminamoon/bytebuf.h"

#include <stdlib.h>
#include <string.h>

lm_status lm_grow_array(void **p, size_t *cap, size_t need, size_t elem, size_t first_cap) {
  if (!p || !cap || !elem) return LM_EINVAL;
  if (need <= *cap) return LM_OK;
  size_t c = *cap ? *cap : first_cap;
  if (!c) c = 1;
  while (c < need) {
    if (c > SIZE_MAX / 2) return LM_EOVERFLOW;
    c *= 2;
  }
  if (c > SIZE_MAX / elem) return LM_EOVERFLOW;
  void *q = realloc(*p, c * elem);
  if (!q) return LM_ENOMEM;
  *p = q;
  *cap = c;
  return LM_OK;
}

void lm_bytebuf_init(lm_bytebuf *b) {
  if (b) memset(b, 0, sizeof *b);
}

void lm_bytebuf_free(lm_bytebuf *b) {
  if (!b) return;
  free(b->data);
  memset(b, 0, sizeof *b);
}

lm_status lm_bytebuf_append(lm_bytebuf *b, const void *src, size_t n, size_t first_cap) {
  if (!b || (n && !src)) return LM_EINVAL;
  lm_status s = lm_bytebuf_reserve(b, n, first_cap);
  if (s) return s;
  if (n) memcpy(b->data + b->len, src, n);
  b->len += n;
  return LM_OK;
}
