/* Reference-counted payload buffers, the string tensor container and its builder. */
#include "luminamoon/string_tensor.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct lm_buffer {
  const uint8_t *data;
  size_t size;
  atomic_size_t refcount;
  void (*release)(void *owner);
  void *owner;
  int owns_data;
};

lm_status lm_buffer_create(size_t capacity, lm_buffer **out) {
  if (!out) return LM_EINVAL;
  *out = NULL;
  lm_buffer *b = (lm_buffer *)malloc(sizeof *b);
  if (!b) return LM_ENOMEM;
  uint8_t *d = (uint8_t *)malloc(capacity ? capacity : 1);
  if (!d) {
    free(b);
    return LM_ENOMEM;
  }
  b->data = d;
  b->size = capacity;
  atomic_init(&b->refcount, 1);
  b->release = NULL;
  b->owner = NULL;
  b->owns_data = 1;
  *out = b;
  return LM_OK;
}

lm_status lm_buffer_wrap(const uint8_t *data, size_t size, void (*release)(void *owner), void *owner,
                         lm_buffer **out) {
  if (!out || (!data && size)) return LM_EINVAL;
  *out = NULL;
  lm_buffer *b = (lm_buffer *)malloc(sizeof *b);
  if (!b) return LM_ENOMEM;
  b->data = data;
  b->size = size;
  atomic_init(&b->refcount, 1);
  b->release = release;
  b->owner = owner;
  b->owns_data = 0;
  *out = b;
  return LM_OK;
}

void lm_buffer_retain(lm_buffer *b) {
  if (b) atomic_fetch_add_explicit(&b->refcount, 1, memory_order_relaxed);
}

void lm_buffer_release(lm_buffer *b) {
  if (!b) return;
  if (atomic_fetch_sub_explicit(&b->refcount, 1, memory_order_acq_rel) != 1) return;
  if (b->owns_data) free((void *)b->data);
  if (b->release) b->release(b->owner);
  free(b);
}

const uint8_t *lm_buffer_data(const lm_buffer *b) { return b ? b->data : NULL; }
size_t lm_buffer_size(const lm_buffer *b) { return b ? b->size : 0; }

/* ------------------------------------------------------------------ tensor */

void lm_st_destroy(lm_string_tensor *st) {
  if (!st) return;
  for (uint32_t i = 0; i < st->nbuffers; i++) lm_buffer_release(st->buffers[i]);
  free(st->buffers);
  free((void *)st->buffer_data);
  free(st->views);
  free(st);
}

/* A tensor with room for n views sharing src's buffers (retained). */
static lm_status st_alloc_sharing(const lm_string_tensor *src, size_t n, lm_string_tensor **out) {
  lm_string_tensor *st = (lm_string_tensor *)calloc(1, sizeof *st);
  if (!st) return LM_ENOMEM;
  st->views = (lm_string_view *)malloc((n ? n : 1) * sizeof(lm_string_view));
  if (src->nbuffers) {
    st->buffers = (lm_buffer **)malloc(src->nbuffers * sizeof(lm_buffer *));
    st->buffer_data = (const uint8_t **)malloc(src->nbuffers * sizeof(uint8_t *));
  }
  if (!st->views || (src->nbuffers && (!st->buffers || !st->buffer_data))) {
    lm_st_destroy(st);
    return LM_ENOMEM;
  }
  for (uint32_t i = 0; i < src->nbuffers; i++) {
    st->buffers[i] = src->buffers[i];
    st->buffer_data[i] = src->buffer_data[i];
    lm_buffer_retain(st->buffers[i]);
  }
  st->nbuffers = src->nbuffers;
  st->n = n;
  *out = st;
  return LM_OK;
}

lm_status lm_st_get(const lm_string_tensor *st, size_t i, const uint8_t **data, uint32_t *len) {
  if (!st || !data || !len) return LM_EINVAL;
  if (i >= st->n) return LM_ERANGE;
  *len = st->views[i].len;
  *data = lm_sv_data(&st->views[i], st->buffer_data);
  return LM_OK;
}

lm_status lm_st_slice(const lm_string_tensor *st, size_t begin, size_t end, lm_string_tensor **out) {
  if (!st || !out) return LM_EINVAL;
  *out = NULL;
  if (begin > end || end > st->n) return LM_ERANGE;
  lm_status s = st_alloc_sharing(st, end - begin, out);
  if (s) return s;
  if (end > begin) memcpy((*out)->views, st->views + begin, (end - begin) * sizeof(lm_string_view));
  return LM_OK;
}

lm_status lm_st_take(const lm_string_tensor *st, const int64_t *index, size_t m, lm_string_tensor **out) {
  if (!st || !out || (m && !index)) return LM_EINVAL;
  *out = NULL;
  for (size_t k = 0; k < m; k++)
    if (index[k] < 0 || (uint64_t)index[k] >= st->n) return LM_ERANGE;
  lm_status s = st_alloc_sharing(st, m, out);
  if (s) return s;
  for (size_t k = 0; k < m; k++) (*out)->views[k] = st->views[index[k]];
  return LM_OK;
}

lm_status lm_st_compact(const lm_string_tensor *st, const uint8_t *mask, lm_string_tensor **out) {
  if (!st || !out || (st->n && !mask)) return LM_EINVAL;
  *out = NULL;
  size_t m = 0;
  for (size_t i = 0; i < st->n; i++) m += mask[i] != 0;
  lm_status s = st_alloc_sharing(st, m, out);
  if (s) return s;
  size_t k = 0;
  for (size_t i = 0; i < st->n; i++)
    if (mask[i]) (*out)->views[k++] = st->views[i];
  return LM_OK;
}

/* ----------------------------------------------------------------- builder */

struct lm_builder {
  size_t block_size;
  unsigned flags;
  lm_string_view *views;
  size_t n, cap;
  lm_buffer **blocks; /* finished blocks + the current one (last) */
  uint32_t nblocks, cap_blocks;
  size_t used; /* bytes used in the current block */
};

lm_status lm_builder_create(size_t block_size, unsigned flags, lm_builder **out) {
  if (!out) return LM_EINVAL;
  *out = NULL;
  if (flags & ~(unsigned)LM_BUILDER_VALIDATE_UTF8) return LM_EINVAL;
  if (block_size == 0) block_size = LM_DEFAULT_BLOCK_SIZE;
  if (block_size > LM_MAX_STRING_LEN) return LM_EINVAL;
  lm_builder *b = (lm_builder *)calloc(1, sizeof *b);
  if (!b) return LM_ENOMEM;
  b->block_size = block_size;
  b->flags = flags;
  *out = b;
  return LM_OK;
}

static void builder_clear(lm_builder *b) {
  for (uint32_t i = 0; i < b->nblocks; i++) lm_buffer_release(b->blocks[i]);
  free(b->blocks);
  free(b->views);
  b->blocks = NULL;
  b->views = NULL;
  b->n = b->cap = b->used = 0;
  b->nblocks = b->cap_blocks = 0;
}

void lm_builder_destroy(lm_builder *b) {
  if (!b) return;
  builder_clear(b);
  free(b);
}

lm_status lm_builder_reserve(lm_builder *b, size_t n) {
  if (!b) return LM_EINVAL;
  if (n > SIZE_MAX / sizeof(lm_string_view) - b->n) return LM_EOVERFLOW;
  size_t need = b->n + n;
  if (need <= b->cap) return LM_OK;
  size_t ncap = b->cap ? b->cap : 256;
  while (ncap < need) ncap = ncap > SIZE_MAX / 4 / sizeof(lm_string_view) ? need : ncap * 2;
  lm_string_view *v = (lm_string_view *)realloc(b->views, ncap * sizeof(lm_string_view));
  if (!v) return LM_ENOMEM;
  b->views = v;
  b->cap = ncap;
  return LM_OK;
}

static lm_status builder_new_block(lm_builder *b, size_t min_size) {
  if (b->nblocks == UINT32_MAX) return LM_EOVERFLOW;
  if (b->nblocks == b->cap_blocks) {
    uint32_t nc = b->cap_blocks ? b->cap_blocks * 2 : 8;
    lm_buffer **nb = (lm_buffer **)realloc(b->blocks, nc * sizeof(lm_buffer *));
    if (!nb) return LM_ENOMEM;
    b->blocks = nb;
    b->cap_blocks = nc;
  }
  lm_buffer *blk;
  lm_status s = lm_buffer_create(min_size > b->block_size ? min_size : b->block_size, &blk);
  if (s) return s;
  b->blocks[b->nblocks++] = blk;
  b->used = 0;
  return LM_OK;
}

lm_status lm_builder_append(lm_builder *b, const uint8_t *s, size_t len) {
  if (!b || (len && !s)) return LM_EINVAL;
  if (len > LM_MAX_STRING_LEN) return LM_EOVERFLOW;
  if ((b->flags & LM_BUILDER_VALIDATE_UTF8) && lm_utf8_validate(s, len, NULL) != LM_OK) return LM_EUTF8;
  if (b->n == b->cap) {
    lm_status st = lm_builder_reserve(b, b->cap ? b->cap : 256);
    if (st) return st;
  }
  lm_string_view *v = &b->views[b->n];
  if (len <= LM_INLINE_MAX) {
    lm_sv_make(v, s, (uint32_t)len, 0, 0);
  } else {
    if (b->nblocks == 0 || lm_buffer_size(b->blocks[b->nblocks - 1]) - b->used < len) {
      lm_status st = builder_new_block(b, len);
      if (st) return st;
    }
    lm_buffer *blk = b->blocks[b->nblocks - 1];
    memcpy((uint8_t *)lm_buffer_data(blk) + b->used, s, len);
    lm_sv_make(v, s, (uint32_t)len, b->nblocks - 1, (uint32_t)b->used);
    b->used += len;
  }
  b->n++;
  return LM_OK;
}

lm_status lm_builder_finish(lm_builder *b, lm_string_tensor **out) {
  if (!b || !out) return LM_EINVAL;
  *out = NULL;
  lm_string_tensor *st = (lm_string_tensor *)calloc(1, sizeof *st);
  if (!st) return LM_ENOMEM;
  if (b->nblocks) {
    st->buffer_data = (const uint8_t **)malloc(b->nblocks * sizeof(uint8_t *));
    if (!st->buffer_data) {
      free(st);
      return LM_ENOMEM;
    }
    for (uint32_t i = 0; i < b->nblocks; i++) st->buffer_data[i] = lm_buffer_data(b->blocks[i]);
  }
  if (!b->views) { /* an empty tensor still owns a (1-entry) views array */
    b->views = (lm_string_view *)malloc(sizeof(lm_string_view));
    if (!b->views) {
      free((void *)st->buffer_data);
      free(st);
      return LM_ENOMEM;
    }
  }
  st->views = b->views;
  st->n = b->n;
  st->buffers = b->blocks;
  st->nbuffers = b->nblocks;
  b->views = NULL;
  b->blocks = NULL;
  b->n = b->cap = b->used = 0;
  b->nblocks = b->cap_blocks = 0;
  *out = st;
  return LM_OK;
}
