/* luminamoon/parallel.h — how a batch function may use threads.
 *
 * Batch functions take `const lm_exec *exec`; NULL means one thread.  The core
 * keeps no global thread pool: threads are started per call (pthreads) and only
 * when the work is large enough to pay for them (`min_items_per_thread`).
 * Thread-safety: lm_parallel_for is reentrant; `fn` must be safe to run on
 * disjoint ranges concurrently.
 */
#ifndef LUMINAMOON_PARALLEL_H
#define LUMINAMOON_PARALLEL_H

#include <stddef.h>
#include "luminamoon/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lm_exec {
  int num_threads;             /* <= 1: run in the calling thread */
  size_t min_items_per_thread; /* 0: a default (16384) */
} lm_exec;

/* fn(ctx, begin, end) for disjoint ranges covering [0, n).  Returns LM_EINVAL
 * when fn is NULL, else the first non-LM_OK status a range returned (every range
 * still runs).  A range whose thread cannot be started runs in the calling thread. */
typedef lm_status (*lm_range_fn)(void *ctx, size_t begin, size_t end);
lm_status lm_parallel_for(const lm_exec *exec, size_t n, lm_range_fn fn, void *ctx);

/* The number of online CPUs (>= 1). */
int lm_cpu_count(void);

#ifdef __cplusplus
}
#endif
#endif
