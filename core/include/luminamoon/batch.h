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
  LM_REASON_NEAR_DUPLICATE = 4, /* NearDeduplicator: a band key seen before */
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
/* Make room for `extra` more outputs: source_index[n_out .. n_out + extra) and
 * offsets[n_out + 1 .. n_out + extra] may then be written directly (e.g. by
 * several threads, each its own entries), after which the caller sets n_out
 * and data_len to match (with payload reserved by reserve_data; offsets stay
 * non-decreasing).  LM_EINVAL (NULL), LM_ENOMEM, LM_EOVERFLOW. */
lm_status lm_batch_result_reserve_out(lm_batch_result *r, size_t extra);

/* Check an lm_docs: non-NULL arrays (data may be NULL when data_len == 0),
 * offsets[0] >= 0, non-decreasing, offsets[n] <= data_len.  LM_EINVAL otherwise. */
lm_status lm_docs_validate(const lm_docs *d);

/* ---- the batch runner shared by the per-document stages ----
 *
 * lm_batch_run validates `docs`, starts `out` (lm_batch_result_begin), cuts the
 * documents into ranges by bytes (lm_batch_plan below: at most `grain`
 * documents each), runs the ranges with dynamic scheduling (exec as given), each
 * range writing its kept texts into its own lm_bytebuf arena and its own
 * counters, then gathers the kept texts into `out` in document order and,
 * only when everything succeeded, merges each range's counters, in range
 * order, with `merge`.  Output, reason codes and counters therefore do not
 * depend on the thread count.
 *
 * Ownership: the runner allocates and frees the arenas, the per-range
 * counters (counters_size bytes each, zeroed) and the scratch (created once
 * per worker thread that runs a range).  `stage` is passed through.
 * Thread-safety: `doc` runs concurrently on different documents with distinct
 * scratch, arena and counters; it must only read `stage`.  `merge` runs in the
 * calling thread.
 * Errors: LM_EINVAL (NULL vt, vt->doc, vt->merge or out, or invalid docs), the
 * first error a callback returned, LM_ENOMEM / LM_EOVERFLOW from allocation.
 * On an error `out` holds an unspecified prefix and no counter is merged. */
typedef struct lm_batch_stage {
  size_t grain;         /* at most this many documents per range (0: 256) */
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

/* Run stage `vt` over `docs` into `out` as described above (lm_batch_run_ex with no options).
 * out is caller-owned (lm_batch_result_init / _free); docs and stage are borrowed for the call. */
lm_status lm_batch_run(const lm_batch_stage *vt, void *stage, const lm_docs *docs, lm_batch_result *out,
                       const lm_exec *exec);

/* ---- ranges by bytes, dynamic scheduling ----
 *
 * lm_batch_plan cuts n items (documents, or the survivors of an earlier phase)
 * into contiguous ranges by weight, where item i weighs its byte size
 * prefix[i+1] - prefix[i] plus LM_BATCH_ITEM_COST (a fixed per-document cost),
 * and picks the number of workers:
 *   workers = exec->num_threads (<= 1: one; at most 256), then
 *     with exec->min_items_per_thread > 0: at most n / min_items_per_thread;
 *     with 0 (the default): at most total weight / LM_BATCH_MIN_THREAD_BYTES;
 *   target range weight = total / (workers * 32) (each worker gets ~32 ranges
 *     to balance), at most LM_BATCH_MAX_RANGE_BYTES and, by default, at least
 *     LM_BATCH_MIN_RANGE_BYTES; with more than one worker the last
 *     workers * target of weight (in item order) gets ranges of target /
 *     LM_BATCH_TAIL_SPLIT (handed out last: a short tail); a range holds at most `max_items` items (0: 256)
 *     and at least one; a document heavier than the target gets a range of its
 *     own (large documents: small ranges);
 *   workers is then at most the number of ranges.
 * lm_batch_plan_run hands the ranges to the workers with lm_parallel_tasks
 * (one atomic range counter: a worker that finishes early takes the next
 * range), heaviest range first when there is more than one worker (the
 * longest tasks start first and the short ones fill in behind them).  Which
 * worker runs a range is not deterministic; results written per
 * range (or per item) and gathered in range order are.
 *
 * Ownership: the plan owns `start` (grown as needed, reused across plans);
 * zero it to start (or lm_batch_plan_init), free with lm_batch_plan_free.
 * Thread-safety: one plan per thread; lm_batch_plan_run only reads it.
 * Errors: LM_EINVAL (NULL plan or prefix, or a decreasing prefix), LM_ENOMEM. */
#define LM_BATCH_ITEM_COST 64
#define LM_BATCH_MIN_THREAD_BYTES ((size_t)64 << 10)
#define LM_BATCH_MIN_RANGE_BYTES ((size_t)16 << 10)
#define LM_BATCH_MAX_RANGE_BYTES ((size_t)1 << 20)
#define LM_BATCH_TAIL_SPLIT 4 /* the tail's ranges (workers * target of weight) are this much finer */

typedef struct lm_batch_plan {
  size_t nranges;
  size_t *start;   /* nranges + 1 entries: range r is items [start[r], start[r+1]) */
  size_t cap;      /* capacity of start, in entries */
  size_t nworkers; /* 1 .. 256 */
  /* With more than one worker: the order the ranges are handed out in, heaviest
   * first (ties in range order), so a batch that ends with a few large documents
   * does not leave one worker running them alone at the end.  NULL / unused
   * with one worker (range order). */
  size_t *order;   /* nranges entries when ordered */
  size_t cap_order; /* capacity of order, in entries (2 per range: the sort's scratch) */
  int ordered;      /* order holds the hand-out order */
} lm_batch_plan;

/* lm_batch_plan_init: an empty plan (no allocation; p non-NULL).  lm_batch_plan_free: frees
 * `start` and empties the plan (NULL is ignored; the plan may be made again).
 * lm_batch_plan_make: cut items [0, n) with byte prefix sums prefix[0..n] (borrowed, read
 * only) into ranges for exec (NULL: one worker), at most max_items per range (0: 256), into
 * *p (its `start` reused or grown).  LM_EINVAL (NULL p or prefix, decreasing prefix), LM_ENOMEM;
 * on an error *p stays valid for lm_batch_plan_free. */
void lm_batch_plan_init(lm_batch_plan *p);
void lm_batch_plan_free(lm_batch_plan *p);
lm_status lm_batch_plan_make(lm_batch_plan *p, const int64_t *prefix, size_t n, const lm_exec *exec,
                             size_t max_items);
/* fn(ctx, worker, range, begin, end) for every range; errors as lm_parallel_tasks. */
typedef lm_status (*lm_batch_range_fn)(void *ctx, size_t worker, size_t range, size_t begin, size_t end);
lm_status lm_batch_plan_run(const lm_batch_plan *p, lm_batch_range_fn fn, void *ctx);

/* ---- arenas kept between batches, with a bound ----
 *
 * An lm_batch_pool keeps the per-range output arenas of a stage or pipeline
 * from one batch to the next (no fresh page faults per batch).  After a batch,
 * lm_batch_pool_trim frees arenas until the capacity kept is at most
 * `keep_bytes` (arenas above keep_bytes / 4 each are always freed): one batch
 * of huge documents does not leave its memory resident for the life of the
 * object.  lm_batch_pool_bytes reports the bytes kept (arena capacities plus
 * the array).
 * Ownership: the pool owns its arenas; zero it to start, free with
 * lm_batch_pool_free.  Thread-safety: lm_batch_pool_get in one thread; the
 * arenas it returns may then be used by one thread each. */
typedef struct lm_batch_pool {
  lm_bytebuf *arenas;
  size_t n; /* arenas allocated (zeroed when new) */
} lm_batch_pool;

#define LM_BATCH_RETAIN_BYTES ((size_t)16 << 20) /* default keep_bytes */

/* Make at least `n` arenas available (new ones zeroed; existing keep their
 * memory) and set every arena's len to 0.  LM_ENOMEM / LM_EOVERFLOW. */
lm_status lm_batch_pool_get(lm_batch_pool *p, size_t n);
void lm_batch_pool_trim(lm_batch_pool *p, size_t keep_bytes);
size_t lm_batch_pool_bytes(const lm_batch_pool *p);
void lm_batch_pool_free(lm_batch_pool *p);

/* ---- lm_batch_run_ex: lm_batch_run with options ----
 *
 * Ranges are cut by bytes (lm_batch_plan, at most vt->grain documents each)
 * and scheduled dynamically; scratch is created once per worker (lazily, by
 * the worker that needs it) and destroyed at the end of the call.
 *   pre_doc / pre_done (both NULL or both set): a counting pass that runs
 *     before the main pass when the batch runs on more than one worker (on
 *     one worker the whole batch is one range and it is skipped): pre_doc
 *     sees every document with its range's counters (zeroed first); then
 *     pre_done(stage, counters, nranges) runs in the calling thread with all
 *     ranges' counters in range order and prepares them for the main pass
 *     (e.g. the position each range starts from: PII replacement cycling),
 *     which sees them as pre_done left them.  With one range the main pass
 *     starts from zeroed counters.
 *   pool: the arenas are taken from it and left in it (trimmed to
 *     keep_bytes, 0: LM_BATCH_RETAIN_BYTES); NULL: allocated and freed here.
 * Output, reasons and merged counters do not depend on the thread count. */
typedef struct lm_batch_opts {
  lm_status (*pre_doc)(const void *stage, void *scratch, const uint8_t *text, size_t len, void *counters);
  void (*pre_done)(void *stage, void *counters, size_t nranges);
  lm_batch_pool *pool;
  size_t keep_bytes;
} lm_batch_opts;

/* lm_batch_run with options (opts NULL = none); ownership, thread-safety and errors as
 * lm_batch_run, plus LM_EINVAL when only one of pre_doc / pre_done is set. */
lm_status lm_batch_run_ex(const lm_batch_stage *vt, const lm_batch_opts *opts, void *stage, const lm_docs *docs,
                          lm_batch_result *out, const lm_exec *exec);

/* Test hook (tests only; NULL by default): called at the start of every range
 * that lm_batch_plan_run runs, from the worker running it.  Set it only while
 * no batch runs.  Lets a test check deterministically that several workers
 * ran ranges (e.g. by making worker 0 wait for another worker). */
typedef void (*lm_batch_range_hook)(void *arg, size_t worker, size_t range);
void lm_batch_set_test_hook(lm_batch_range_hook hook, void *arg);

#ifdef __cplusplus
}
#endif
#endif
