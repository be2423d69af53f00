/* luminamoon/pipeline.h — FusedPipeline: clean -> quality -> dedup -> PII in
 * one pass per document, one output arena per batch.
 *
 * The fused pipeline borrows the stage objects it runs (each may be NULL: that
 * stage is off) and uses only their per-document entry points (lm_clean_text,
 * lm_quality_check, lm_hash128 + lm_dedup_check_insert_hashes,
 * lm_pii_mask_doc).  Its output — texts, source indexes, reasons — and the
 * dedup state it leaves (table, LSN, WAL) are identical to the modular chain
 * lm_cleaner_run -> lm_quality_run -> lm_dedup_run -> lm_pii_run over the same
 * batches, for any thread count.  A batch runs in three phases:
 *   1. parallel over ranges of documents (cut by bytes, handed out to the
 *      threads dynamically: lm_batch_plan): clean, quality-check and hash
 *      (XXH3-128 with the deduplicator's seed) into per-range arenas;
 *   2. serial, in input order: admission into the deduplicator;
 *   3. parallel over ranges of survivors: PII masking (or a plain copy with
 *      PII off), gathered into the output in input order.
 *
 * Counters: the fused pipeline keeps its own counters per stage (the stage
 * objects' own counters are those of their batch calls and are not touched);
 * the deduplicator's probes/inserts are also in its lm_dedup_stats.  The PII
 * replacement cycle (datatrove mode, cycle_across_documents) is the fused
 * pipeline's own, starting at 0 like a fresh masker's; reset_counters resets it.
 * A batch that fails (e.g. LM_ETOOBIG at max_entries) adds nothing to the fused
 * counters, while in the modular chain the stages before the failing one have
 * counted it already: after an error the two sets of counters differ.
 *
 * Ownership: the stage objects are borrowed and must outlive the pipeline.
 * Thread-safety: lm_fused_run must not run concurrently on one pipeline, nor
 * concurrently with any other use of its deduplicator.  The cleaner, quality
 * filter and masker are only read (their const per-document functions), so
 * they may be shared with other pipelines or used on their own meanwhile.
 */
#ifndef LUMINAMOON_PIPELINE_H
#define LUMINAMOON_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "luminamoon/batch.h"
#include "luminamoon/clean.h"
#include "luminamoon/dedup.h"
#include "luminamoon/near_dedup.h"
#include "luminamoon/parallel.h"
#include "luminamoon/pii.h"
#include "luminamoon/quality.h"
#include "luminamoon/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The stages to run; NULL switches a stage off.  All borrowed. */
typedef struct lm_fused_stages {
  const lm_cleaner *cleaner;
  const lm_quality *quality;
  lm_dedup *dedup; /* mutated by lm_fused_run (admissions, WAL) */
  const lm_pii_masker *pii;
  /* Near duplicates (near_dedup.h), after exact dedup and before PII: band
   * keys computed in phase 1, admitted in input order in phase 2.  Mutated
   * (its band index) by lm_fused_run.  NULL: off. */
  lm_near_dedup *near;
} lm_fused_stages;

typedef struct lm_fused_counters {
  uint64_t batches;
  uint64_t docs_in, docs_out;  /* documents in / out of the whole pipeline */
  uint64_t bytes_in, bytes_out;
  uint64_t dropped_clean;      /* LM_REASON_EMPTY or LM_REASON_TOO_LARGE from the cleaner */
  uint64_t dropped_quality;    /* dropped by a quality rule (or its size limit) */
  uint64_t dropped_duplicate;  /* LM_REASON_DUPLICATE */
  uint64_t dropped_pii;        /* LM_REASON_TOO_LARGE from the masker's max_doc_bytes */
  lm_clean_counters clean;     /* as lm_cleaner_run would count them */
  lm_quality_counters quality; /* as lm_quality_run would count them (documents the cleaner kept) */
  uint64_t dedup_probes, dedup_inserts; /* documents checked / admitted */
  lm_pii_counts pii;           /* as lm_pii_run would count them (the survivors) */
  uint64_t dropped_near_duplicate; /* LM_REASON_NEAR_DUPLICATE */
} lm_fused_counters;

typedef struct lm_fused lm_fused;

/* Create.  stages NULL, or all four NULL, is allowed (the pipeline then copies
 * its input).  LM_EINVAL (NULL out), LM_ENOMEM.  *out owned by the caller: lm_fused_destroy
 * (NULL is ignored; not while a call uses it).  The stage objects are borrowed: they must
 * outlive the pipeline, and no other call may use them while lm_fused_run runs. */
lm_status lm_fused_create(const lm_fused_stages *stages, lm_fused **out);
void lm_fused_destroy(lm_fused *f); /* NULL is ignored */

/* Run one batch: one reason per input document, the surviving texts in input
 * order.  Errors: LM_EINVAL (bad docs), LM_ENOMEM, and the deduplicator's
 * errors (LM_ETOOBIG at max_entries: nothing of the batch admitted; LM_EIO:
 * the documents before the failing admission stay admitted and `out` is then
 * incomplete, as with lm_dedup_run; LM_ESTATE when it is closed or failed).
 * exec NULL = one thread. */
lm_status lm_fused_run(lm_fused *f, const lm_docs *docs, lm_batch_result *out, const lm_exec *exec);

/* Copy the counters totalled over every lm_fused_run since creation or the last reset into
 * *out (caller-owned).  LM_EINVAL on NULL.  Not concurrently with lm_fused_run on f. */
lm_status lm_fused_get_counters(const lm_fused *f, lm_fused_counters *out);
/* Zero the counters and the PII replacement cycle.  LM_EINVAL on NULL.  Not concurrently with
 * lm_fused_run on f. */
lm_status lm_fused_reset_counters(lm_fused *f);

/* The fused pipeline's own PII replacement cycle positions (LM_PII_TYPE_COUNT
 * values, as lm_pii_get_cycle / lm_pii_set_cycle); set restores them on resume.
 * Not concurrently with lm_fused_run.  LM_EINVAL if f or the array is NULL. */
lm_status lm_fused_get_pii_cycle(const lm_fused *f, uint64_t *out);
lm_status lm_fused_set_pii_cycle(lm_fused *f, const uint64_t *in);

/* Memory the pipeline keeps between batches: its per-range arenas and its
 * per-worker quality scratches (lm_quality_scratch_bytes).  After every batch
 * the arenas are trimmed to at most LM_BATCH_RETAIN_BYTES per phase (no arena
 * above a quarter of that is kept) and a quality scratch holding more than
 * 8 MiB is freed, so one batch of huge documents does not stay resident.
 * LM_EINVAL on NULL. */
lm_status lm_fused_retained_bytes(const lm_fused *f, size_t *out);

/* How the last lm_fused_run cut its work (for tests and benchmarks): the
 * ranges of phase 1 and the workers planned for them. */
typedef struct lm_fused_run_info {
  size_t ranges1, workers1;
} lm_fused_run_info;
/* Copies into caller-owned *out; LM_EINVAL on NULL.  Not concurrently with lm_fused_run on f. */
lm_status lm_fused_last_run(const lm_fused *f, lm_fused_run_info *out);

/* 1 when the last lm_fused_run failed in the near-dedup admission (e.g. its
 * LM_ETOOBIG is the band index's, not the exact deduplicator's), else 0 (also for NULL f).
 * Not concurrently with lm_fused_run on f. */
int lm_fused_near_failed(const lm_fused *f);

#ifdef __cplusplus
}
#endif
#endif
