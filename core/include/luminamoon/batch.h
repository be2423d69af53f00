/* luminamoon/batch.h — the batch input and output shared by the text stages.
 *
 * Every stage (TextCleaner, QualityFilter, PIIMasker, StreamDeduplicator,
 * FusedPipeline) takes documents as int64 offsets + one UTF-8 payload
 * (lm_docs, the GPU/Arrow layout; a views-layout tensor converts to it with
 * lm_views_to_offsets64) and writes an lm_batch_result: the output texts as
 * offsets + payload, the input index each output came from, and one reason
 * code per *input* document (LM_REASON_KEPT when it produced an output).
 *
 * Ownership: an lm_batch_result is owned by the caller, initialised with
 * lm_batch_result_init, reused across calls (its arrays grow as needed and are
 * overwritten by each call) and released with lm_batch_result_free.
 * Thread-safety: a result may be used by one call at a time.
 */
#ifndef LUMINAMOON_BATCH_H
#define LUMINAMOON_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "luminamoon/bytebuf.h"
#include "luminamoon/parallel.h"
#include "luminamoon/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lm_docs {
  const int64_t *offsets; /* n + 1 entries, non-decreasing, offsets[n] <= data_len */
  const uint8_t *data;
  size_t n;
  size_t data_len;
} lm_docs;

/* Reason codes, one per input document.  Quality rules report
 * LM_REASON_QUALITY_BASE + the rule's id (see quality.h). */
enum {
  LM_REASON_KEPT = 0,
  LM_REASON_DUPLICATE = 1,  /* StreamDeduplicator: seen before */
  LM_REASON_EMPTY = 2,      /* nothing left after cleaning */
  LM_REASON_TOO_LARGE = 3,  /* larger than the configured document limit */
  LM_REASON_QUALITY_BASE = 16
};

typedef struct lm_batch_result {
  int64_t *offsets;      /* n_out + 1 entries */
  uint8_t *data;         /* data_len bytes of output text */
  int64_t *source_index; /* n_out entries: the input document of each output */
  int32_t *reasons;      /* n_in entries */
  size_t n_in, n_out, data_len;
  size_t cap_out, cap_data, cap_in; /* capacities, managed by the functions below */
} lm_batch_result;

/* Zero the struct (no allocation).  Cannot fail on a non-NULL pointer. */
lm_status lm_batch_result_init(lm_batch_result *r);
/* Free the arrays and zero the struct.  NULL is ignored. */
void lm_batch_result_free(lm_batch_result *r);
/* Start a new batch of n_in input documents: n_out = data_len = 0, reasons
 * sized (contents unspecified), room for at least `data_hint` bytes. */
lm_status lm_batch_result_begin(lm_batch_result *r, size_t n_in, size_t data_hint);
/* Append one output text for input document `src` (copied). */
lm_status lm_batch_result_push(lm_batch_result *r, int64_t src, const uint8_t *text, size_t len);
/* Make room for `extra` more payload bytes; *dst receives where they go (at data + data_len).
 * Use with lm_batch_result_commit to write output in place without a copy. */
lm_status lm_batch_result_reserve_data(lm_batch_result *r, size_t extra, uint8_t **dst);
/* Record `len` bytes written at data + data_len as the output text of `src`. */
lm_status lm_batch_result_commit(lm_batch_result *r, int64_t src, size_t len);

/* Check an lm_docs: non-NULL arrays (data may be NULL when data_len == 0),
 * offsets[0] >= 0, non-decreasing, offsets[n] <= data_len.  LM_EINVAL otherwise. */
lm_status lm_docs_validate(const lm_docs *d);

/* ---- the batch runner shared by the per-document stages ----
 *
 * lm_batch_run validates `docs`, starts `out` (lm_batch_result_begin), cuts the
 * documents into ranges of `grain` documents, runs the ranges on
 * lm_parallel_for (exec as given; min_items_per_thread 0 means 4 ranges), each
 * range writing its kept texts into its own lm_bytebuf arena and its own
 * counters, then gathers the kept texts into `out` in document order and,
 * only when everything succeeded, merges each range's counters, in range
 * order, with `merge`.  Output, reason codes and counters therefore do not
 * depend on the thread count.
 *
 * Ownership: the runner allocates and frees the arenas, the per-range
 * counters (counters_size bytes each, zeroed) and the scratch (created once
 * per lm_parallel_for call, i.e. per thread).  `stage` is passed through.
 * Thread-safety: `doc` runs concurrently on different documents with distinct
 * scratch, arena and counters; it must only read `stage`.  `merge` runs in the
 * calling thread.
 * Errors: LM_EINVAL (NULL vt, vt->doc, vt->merge or out, or invalid docs), the
 * first error a callback returned, LM_ENOMEM / LM_EOVERFLOW from allocation.
 * On an error `out` holds an unspecified prefix and no counter is merged. */
typedef struct lm_batch_stage {
  size_t grain;         /* documents per range (0: 64) */
  size_t counters_size; /* bytes of one range's counters (may be 0) */
  /* Optional (both NULL or both set): per-thread scratch for `doc`. */
  lm_status (*scratch_create)(const void *stage, void **scratch);
  void (*scratch_destroy)(void *scratch);
  /* One document: set *reason; when it is LM_REASON_KEPT, append the output
   * text to `arena` (the bytes appended are the document's output). */
  lm_status (*doc)(const void *stage, void *scratch, const uint8_t *text, size_t len, lm_bytebuf *arena,
                   void *counters, int32_t *reason);
  /* Add one range's counters to the stage's totals. */
  void (*merge)(void *stage, const void *counters);
} lm_batch_stage;

lm_status lm_batch_run(const lm_batch_stage *vt, void *stage, const lm_docs *docs, lm_batch_result *out,
                       const lm_exec *exec);

#ifdef __cplusplus
}
#endif
#endif
