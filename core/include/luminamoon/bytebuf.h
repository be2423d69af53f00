/* luminamoon/bytebuf.h — the core's one growable buffer.
 *
 * lm_grow_array grows any heap array by doubling (from `first_cap` elements),
 * checking every size computation for overflow; lm_bytebuf is a byte buffer
 * (data, len, cap) built on it, used as the per-range output arena of the
 * batch stages and by anything else that appends bytes.
 *
 * Ownership: the buffer owns `data` (malloc/realloc); the caller owns the
 * struct, starts it zeroed (lm_bytebuf_init or `= {0}`) and releases it with
 * lm_bytebuf_free.  Pointers into `data` are invalidated by any call that may
 * grow it (reserve, append).
 * Thread-safety: none inside; one buffer is used by one thread at a time
 * (distinct buffers may be used concurrently).
 * Errors: LM_OK; LM_EINVAL (NULL buffer, or NULL source with a non-zero length);
 * LM_EOVERFLOW (the new size does not fit size_t); LM_ENOMEM (realloc failed).
 * On an error the buffer is unchanged.
 */
#ifndef LUMINAMOON_BYTEBUF_H
#define LUMINAMOON_BYTEBUF_H

#include <stddef.h>
#include <stdint.h>

#include "luminamoon/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Make room for at least `need` elements of `elem` bytes in *p (capacity *cap,
 * in elements).  Nothing happens when need <= *cap.  Otherwise the capacity
 * doubles from *cap (first_cap, or 1, when *cap is 0) until it holds `need`, and *p is
 * reallocated; on failure *p and *cap are unchanged.  elem must be >= 1.
 * *p is malloc'd memory the caller owns (free() it); pointers into it are invalidated by a
 * growth.  Errors: LM_EINVAL (NULL p or cap, elem 0), LM_EOVERFLOW (the size would pass
 * SIZE_MAX), LM_ENOMEM.  Not concurrently on the same array. */
lm_status lm_grow_array(void **p, size_t *cap, size_t need, size_t elem, size_t first_cap);

typedef struct lm_bytebuf {
  uint8_t *data; /* cap bytes, of which the first len are in use; NULL when cap == 0 */
  size_t len, cap;
} lm_bytebuf;

/* Zero the struct (no allocation).  NULL is ignored. */
void lm_bytebuf_init(lm_bytebuf *b);
/* Free data and zero the struct.  NULL is ignored. */
void lm_bytebuf_free(lm_bytebuf *b);

/* Make room for `extra` more bytes after len (the first allocation holds at
 * least first_cap bytes).  len is unchanged. */
static inline lm_status lm_bytebuf_reserve(lm_bytebuf *b, size_t extra, size_t first_cap) {
  if (b->cap - b->len >= extra) return LM_OK;
  if (extra > SIZE_MAX - b->len) return LM_EOVERFLOW;
  return lm_grow_array((void **)&b->data, &b->cap, b->len + extra, 1, first_cap);
}

/* Append n bytes copied from src (src may be NULL when n == 0). */
lm_status lm_bytebuf_append(lm_bytebuf *b, const void *src, size_t n, size_t first_cap);

#ifdef __cplusplus
}
#endif
#endif
