/* luminamoon/string_tensor.h — a tensor of strings in two layouts.
 *
 * Views layout (CPU): N lm_string_view (16 bytes each) + payload buffers that
 * the long views point into.  Payload buffers are reference counted and shared
 * between tensors: slicing, take and compact build new views and never copy
 * payload bytes.
 *
 * Offsets layout (GPU / Arrow / NumPy): N+1 monotone offsets (int32 while the
 * payload is under 2 GiB, int64 above) + one flat UTF-8 payload.
 *
 * Offsets -> views is zero-copy for the payload.  A payload larger than 2 GiB is
 * addressed through overlapping windows: window k starts at byte k << 31
 * (LM_WINDOW_SHIFT) and runs to the end of the payload, so a string starting at
 * byte p lives in window p >> 31 at offset p & (2^31 - 1).
 *
 * Thread-safety: functions on distinct objects are thread-safe.  A finished
 * lm_string_tensor is immutable and may be read from many threads; the
 * reference counts of lm_buffer are atomic.  A builder is single-threaded.
 */
#ifndef LUMINAMOON_STRING_TENSOR_H
#define LUMINAMOON_STRING_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "luminamoon/parallel.h"
#include "luminamoon/status.h"
#include "luminamoon/string_view.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LM_WINDOW_SHIFT 31u
#define LM_DEFAULT_BLOCK_SIZE ((size_t)4 << 20) /* 4 MiB payload blocks */

/* ---------------------------------------------------------------- buffers */

/* A reference-counted, immutable-once-shared payload buffer. */
typedef struct lm_buffer lm_buffer;

/* A new buffer of `capacity` bytes owned by the core (malloc).
 * Ownership: *out holds one reference; drop it with lm_buffer_release. */
lm_status lm_buffer_create(size_t capacity, lm_buffer **out);

/* Wrap external memory without copying.  `release(owner)` runs when the last
 * reference is dropped (release may be NULL).  Ownership: the core never frees
 * `data`; *out holds one reference. */
lm_status lm_buffer_wrap(const uint8_t *data, size_t size, void (*release)(void *owner),
                         void *owner, lm_buffer **out);

/* Reference counting (atomic: any thread may retain or release).  retain adds one reference;
 * release drops one and, at zero, calls the owner's release function (lm_buffer_wrap) or frees
 * the bytes.  NULL is ignored.  Never fail. */
void lm_buffer_retain(lm_buffer *b);
void lm_buffer_release(lm_buffer *b);
/* The buffer's bytes (owned by the buffer: valid while the caller holds a reference) and its
 * size; NULL / 0 for NULL.  Thread-safe. */
const uint8_t *lm_buffer_data(const lm_buffer *b);
size_t lm_buffer_size(const lm_buffer *b);

/* ---------------------------------------------------------- string tensor */

/* Views + the buffers they point into.  Fields are read-only for users. */
typedef struct lm_string_tensor {
  lm_string_view *views; /* owned by the tensor (n entries) */
  size_t n;
  lm_buffer **buffers;   /* owned array; each entry holds one reference */
  const uint8_t **buffer_data; /* base pointers, parallel to buffers */
  uint32_t nbuffers;
} lm_string_tensor;

/* Frees the views and drops the buffer references.  NULL is ignored. */
void lm_st_destroy(lm_string_tensor *st);

/* The bytes of element i (*len receives the length).  LM_ERANGE if i >= n. */
lm_status lm_st_get(const lm_string_tensor *st, size_t i, const uint8_t **data, uint32_t *len);

/* A new tensor of elements [begin, end) sharing the payload.  Ownership: *out is the caller's. */
lm_status lm_st_slice(const lm_string_tensor *st, size_t begin, size_t end, lm_string_tensor **out);

/* A new tensor of st[index[k]] for k < m, sharing the payload.  Indices must lie in [0, n). */
lm_status lm_st_take(const lm_string_tensor *st, const int64_t *index, size_t m, lm_string_tensor **out);

/* A new tensor of the elements whose mask byte is non-zero, sharing the payload. */
lm_status lm_st_compact(const lm_string_tensor *st, const uint8_t *mask, lm_string_tensor **out);

/* ---------------------------------------------------------------- builder */

typedef struct lm_builder lm_builder;

enum { LM_BUILDER_VALIDATE_UTF8 = 1 };

/* block_size 0 means LM_DEFAULT_BLOCK_SIZE; flags: LM_BUILDER_VALIDATE_UTF8.
 * Ownership: *out is the caller's; free with lm_builder_destroy. */
lm_status lm_builder_create(size_t block_size, unsigned flags, lm_builder **out);
void lm_builder_destroy(lm_builder *b); /* NULL is ignored */

/* Room for `n` more views (an optimisation only). */
lm_status lm_builder_reserve(lm_builder *b, size_t n);

/* Append one string (copied): inline when <= 12 bytes, else into the current
 * payload block (a new block when it does not fit).  LM_EOVERFLOW when
 * len > 2^31-1, LM_EUTF8 when validating and the bytes are not UTF-8. */
lm_status lm_builder_append(lm_builder *b, const uint8_t *s, size_t len);

/* Move everything appended so far into a new tensor; the builder is reset and
 * may be reused.  Ownership: *out is the caller's. */
lm_status lm_builder_finish(lm_builder *b, lm_string_tensor **out);

/* ------------------------------------------------------------- validation */

/* Is [s, s+len) valid UTF-8?  LM_OK or LM_EUTF8 (*error_pos, if not NULL, gets
 * the offset of the first invalid byte). */
lm_status lm_utf8_validate(const uint8_t *s, size_t len, size_t *error_pos);

/* Offsets: n+1 entries, non-negative, non-decreasing, last <= data_len.  LM_OK or LM_EINVAL
 * (also for NULL offsets).  Pure, thread-safe; offsets borrowed for the call. */
lm_status lm_offsets32_validate(const int32_t *offsets, size_t n, size_t data_len);
lm_status lm_offsets64_validate(const int64_t *offsets, size_t n, size_t data_len);

/* Views: len <= 2^31-1, inline padding zero, long views inside their buffer
 * (buffer_sizes[nbuffers]) with a matching prefix.  LM_ECORRUPT otherwise. */
lm_status lm_views_validate(const lm_string_view *views, size_t n, const uint8_t *const *buffers,
                            const size_t *buffer_sizes, uint32_t nbuffers);

/* Views bounds only (no payload access): len <= 2^31-1 and every long view
 * inside its buffer.  Cheap enough to run before every views-layout op.
 * LM_ERANGE otherwise. */
lm_status lm_views_check_bounds(const lm_string_view *views, size_t n, const size_t *buffer_sizes,
                                uint32_t nbuffers);

/* Inline views (len <= 12) only: every byte after the string in the 12-byte
 * inline area is zero (the Arrow format requires it, and the comparisons read
 * the inline area as whole words).  No payload access.  LM_ECORRUPT otherwise;
 * *bad (if not NULL) gets the index of the first bad view. */
lm_status lm_views_check_padding(const lm_string_view *views, size_t n, size_t *bad);

/* ------------------------------------------------------ layout conversion */

/* Total payload bytes of the views (sum of lengths) into *total. */
lm_status lm_views_total_bytes(const lm_string_view *views, size_t n, uint64_t *total);

/* Views -> offsets + one payload (copies payload once).  offsets has n+1
 * entries, data has lm_views_total_bytes bytes.  The 32-bit form returns
 * LM_EOVERFLOW when the total exceeds INT32_MAX. */
lm_status lm_views_to_offsets32(const lm_string_view *views, size_t n, const uint8_t *const *buffers,
                                int32_t *offsets, uint8_t *data, const lm_exec *exec);
lm_status lm_views_to_offsets64(const lm_string_view *views, size_t n, const uint8_t *const *buffers,
                                int64_t *offsets, uint8_t *data, const lm_exec *exec);

/* Offsets + payload -> views (no payload copy).  Long views point at buffer
 * `base_buffer` + (start >> LM_WINDOW_SHIFT) (see above); payloads under 2 GiB
 * use the single buffer `base_buffer`.  Validates the offsets first. */
lm_status lm_views_from_offsets32(const int32_t *offsets, size_t n, const uint8_t *data, size_t data_len,
                                  uint32_t base_buffer, lm_string_view *views, const lm_exec *exec);
lm_status lm_views_from_offsets64(const int64_t *offsets, size_t n, const uint8_t *data, size_t data_len,
                                  uint32_t base_buffer, lm_string_view *views, const lm_exec *exec);

/* Number of window buffers a payload of data_len bytes needs (>= 1). */
uint32_t lm_window_count(uint64_t data_len);

/* ------------------------------------------------------ views-layout ops */
/* out has n entries.  `buffers` / `buffer_sizes` describe the nbuffers payload
 * buffers.  Comparisons decide on the length and 4-byte prefix first; a view is
 * bounds-checked before its payload is read, and a view outside its buffer
 * gives LM_ERANGE (views that are never dereferenced are not checked). */
typedef struct lm_payloads {
  const uint8_t *const *data; /* nbuffers base pointers */
  const size_t *sizes;        /* nbuffers sizes in bytes */
  uint32_t n;
} lm_payloads;

/* equal_scalar, equal and hash64 return LM_ECORRUPT for an inline view that is
 * not zero-padded (as lm_views_check_padding); prefix_match never reads a
 * padding byte, so its answer does not depend on it.  Each view an op
 * dereferences has its fields read once and re-checked, so a concurrent writer
 * to `views` changes results but never the bounds of what is read. */
/* out[i] = 1 when string i starts with prefix[0..plen). */
lm_status lm_views_prefix_match(const lm_string_view *views, size_t n, const lm_payloads *p,
                                const uint8_t *prefix, size_t plen, uint8_t *out, const lm_exec *exec);
/* out[i] = 1 when string i equals s[0..slen). */
lm_status lm_views_equal_scalar(const lm_string_view *views, size_t n, const lm_payloads *p,
                                const uint8_t *s, size_t slen, uint8_t *out, const lm_exec *exec);
/* out[i] = 1 when a[i] equals b[i]. */
lm_status lm_views_equal(const lm_string_view *a, const lm_payloads *pa, const lm_string_view *b,
                         const lm_payloads *pb, size_t n, uint8_t *out, const lm_exec *exec);
/* out[i] = XXH3-64(string i, seed). */
lm_status lm_views_hash64(const lm_string_view *views, size_t n, const lm_payloads *p, uint64_t seed,
                          uint64_t *out, const lm_exec *exec);

/* The views of the strings that start with prefix[0..plen), in order (prefix_match and compaction
 * in one pass; no payload access for plen <= 4).  out: caller-owned, room for n views (a part of
 * the work may store up to its size before it is moved down); *kept gets the number written to
 * out[0..*kept).  LM_ERANGE when a candidate's view lies outside its payload buffer (*kept 0). */
lm_status lm_views_filter_prefix(const lm_string_view *views, size_t n, const lm_payloads *p,
                                 const uint8_t *prefix, size_t plen, lm_string_view *out, size_t *kept,
                                 const lm_exec *exec);
/* The number of non-zero bytes of mask[0..n) (0 when mask is NULL). */
size_t lm_mask_count(const uint8_t *mask, size_t n);
/* Compaction of views (no payload access): out receives views[i] for every i
 * with mask[i] != 0, in order; *written gets their number.  out has room for
 * cap >= 1 views and cap must exceed the kept count by one (the loop stores
 * every view, clamped to the last slot, so it has no branch on the mask): pass
 * cap = lm_mask_count(mask, n) + 1.  LM_ERANGE when more than cap - 1 are kept
 * (the mask changed since it was counted: out then holds cap - 1 of them). */
lm_status lm_views_compact(const lm_string_view *views, size_t n, const uint8_t *mask, lm_string_view *out,
                           size_t cap, size_t *written);

/* ----------------------------------------------------- offsets-layout ops */
/* The same operations on offsets + payload, for int32 (o32) and int64 (o64)
 * offsets.  Offsets must have been validated against data (see above), except for the
 * _checked forms, which check them as they read them.
 * Contract shared by every function of this section: the inputs are borrowed for the call and
 * only read; the outputs (out[0..n) of 0/1 bytes or hashes, tokens, out_offsets, out_data) are
 * caller-allocated with the sizes given per function and fully written on LM_OK (unspecified on
 * an error).  LM_EINVAL for a NULL pointer that must be read or written (a NULL data / prefix /
 * out is allowed when its length is 0).  exec NULL = one thread; results do not depend on the
 * thread count.  No global state: thread-safe, as long as no other thread writes the outputs. */
/* int32 offsets (o32). */
lm_status lm_o32_prefix_match(const int32_t *offsets, size_t n, const uint8_t *data,
                              const uint8_t *prefix, size_t plen, uint8_t *out,
                              const lm_exec *exec);
lm_status lm_o32_equal_scalar(const int32_t *offsets, size_t n, const uint8_t *data,
                              const uint8_t *s, size_t slen, uint8_t *out, const lm_exec *exec);
lm_status lm_o32_equal(const int32_t *offsets_a, const uint8_t *data_a, const int32_t *offsets_b,
                       const uint8_t *data_b, size_t n, uint8_t *out, const lm_exec *exec);
lm_status lm_o32_hash64(const int32_t *offsets, size_t n, const uint8_t *data, uint64_t seed,
                        uint64_t *out, const lm_exec *exec);
/* The same four ops checking the offsets as they read them (no validation pass is
 * needed first): LM_EINVAL unless 0 <= offsets[i] <= offsets[i+1] <= data_len for every i
 * (out is then unspecified).  Each element's pair is read once, checked, then used, so a
 * thread writing into `offsets` meanwhile changes results, never what memory is read. */
lm_status lm_o32_prefix_match_checked(const int32_t *offsets, size_t n, const uint8_t *data,
                                      size_t data_len, const uint8_t *prefix, size_t plen,
                                      uint8_t *out, const lm_exec *exec);
lm_status lm_o32_equal_scalar_checked(const int32_t *offsets, size_t n, const uint8_t *data,
                                      size_t data_len, const uint8_t *s, size_t slen,
                                      uint8_t *out, const lm_exec *exec);
lm_status lm_o32_equal_checked(const int32_t *offsets_a, const uint8_t *data_a, size_t len_a,
                               const int32_t *offsets_b, const uint8_t *data_b, size_t len_b,
                               size_t n, uint8_t *out, const lm_exec *exec);
lm_status lm_o32_hash64_checked(const int32_t *offsets, size_t n, const uint8_t *data,
                                size_t data_len, uint64_t seed, uint64_t *out,
                                const lm_exec *exec);
/* Byte-level tokens: row i = [bos] bytes... [eos] then pad; max_len columns;
 * bos/eos < 0 mean none; content is truncated so bos and eos fit.
 * tokens has n*max_len int64, lengths n int64 (tokens that are not padding). */
lm_status lm_o32_pad_bytes(const int32_t *offsets, size_t n, const uint8_t *data, size_t max_len,
                           int64_t pad_id, int64_t bos_id, int64_t eos_id, int64_t *tokens,
                           int64_t *lengths, const lm_exec *exec);
/* Gather, pass 1: out_offsets (m+1) of the strings index[0..m); LM_ERANGE for an index
 * outside [0, n), LM_EOVERFLOW when the total does not fit int32_t. */
lm_status lm_o32_gather_offsets(const int32_t *offsets, size_t n, const int64_t *index, size_t m,
                                int32_t *out_offsets);
/* Gather, pass 2: copy the payload into out_data (out_offsets[m] bytes). */
lm_status lm_o32_gather_data(const int32_t *offsets, const uint8_t *data, const int64_t *index,
                             size_t m, const int32_t *out_offsets, uint8_t *out_data,
                             const lm_exec *exec);
/* Compact, pass 1: *out_n kept strings (mask[i] != 0) and their *out_bytes. */
lm_status lm_o32_compact_count(const int32_t *offsets, size_t n, const uint8_t *mask,
                               size_t *out_n, uint64_t *out_bytes);
/* Compact, pass 2: out_offsets (out_n+1) and out_data (out_bytes bytes), as counted by pass 1
 * on the same mask. */
lm_status lm_o32_compact(const int32_t *offsets, size_t n, const uint8_t *data,
                         const uint8_t *mask, int32_t *out_offsets, uint8_t *out_data);

/* int64 offsets (o64): the same functions and contracts as the o32 ones above. */
lm_status lm_o64_prefix_match(const int64_t *offsets, size_t n, const uint8_t *data,
                              const uint8_t *prefix, size_t plen, uint8_t *out,
                              const lm_exec *exec);
lm_status lm_o64_equal_scalar(const int64_t *offsets, size_t n, const uint8_t *data,
                              const uint8_t *s, size_t slen, uint8_t *out, const lm_exec *exec);
lm_status lm_o64_equal(const int64_t *offsets_a, const uint8_t *data_a, const int64_t *offsets_b,
                       const uint8_t *data_b, size_t n, uint8_t *out, const lm_exec *exec);
lm_status lm_o64_hash64(const int64_t *offsets, size_t n, const uint8_t *data, uint64_t seed,
                        uint64_t *out, const lm_exec *exec);
lm_status lm_o64_prefix_match_checked(const int64_t *offsets, size_t n, const uint8_t *data,
                                      size_t data_len, const uint8_t *prefix, size_t plen,
                                      uint8_t *out, const lm_exec *exec);
lm_status lm_o64_equal_scalar_checked(const int64_t *offsets, size_t n, const uint8_t *data,
                                      size_t data_len, const uint8_t *s, size_t slen,
                                      uint8_t *out, const lm_exec *exec);
lm_status lm_o64_equal_checked(const int64_t *offsets_a, const uint8_t *data_a, size_t len_a,
                               const int64_t *offsets_b, const uint8_t *data_b, size_t len_b,
                               size_t n, uint8_t *out, const lm_exec *exec);
lm_status lm_o64_hash64_checked(const int64_t *offsets, size_t n, const uint8_t *data,
                                size_t data_len, uint64_t seed, uint64_t *out,
                                const lm_exec *exec);
lm_status lm_o64_pad_bytes(const int64_t *offsets, size_t n, const uint8_t *data, size_t max_len,
                           int64_t pad_id, int64_t bos_id, int64_t eos_id, int64_t *tokens,
                           int64_t *lengths, const lm_exec *exec);
lm_status lm_o64_gather_offsets(const int64_t *offsets, size_t n, const int64_t *index, size_t m,
                                int64_t *out_offsets);
lm_status lm_o64_gather_data(const int64_t *offsets, const uint8_t *data, const int64_t *index,
                             size_t m, const int64_t *out_offsets, uint8_t *out_data,
                             const lm_exec *exec);
lm_status lm_o64_compact_count(const int64_t *offsets, size_t n, const uint8_t *mask,
                               size_t *out_n, uint64_t *out_bytes);
lm_status lm_o64_compact(const int64_t *offsets, size_t n, const uint8_t *data,
                         const uint8_t *mask, int64_t *out_offsets, uint8_t *out_data);

#ifdef __cplusplus
}
#endif
#endif
