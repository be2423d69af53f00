/* luminamoon/parallel.h — how a batch function may use threads.
 *
 * Batch functions take `const lm_exec *exec`; NULL means one thread.  Threads are
 * used only when the work is large enough to pay for them (`min_items_per_thread`).
 *
 * The process keeps one pool of started worker threads (parallel.c): created lazily by
 * the first call that needs them, as many as the largest call asked for (at most 255),
 * woken per call (a futex; a worker that just finished spins ~60 us for the next call
 * before it sleeps, so an idle pool uses no CPU).  Waking a started worker costs a few
 * microseconds where starting a thread cost ~18 us on the development VM.  One call
 * owns the pool at a time; a call that finds it owned (another thread's call running,
 * or a call nested inside `fn`) starts threads of its own for that call (the old
 * behaviour), so concurrent callers never wait for each other and nesting cannot
 * deadlock.  Fork-safe: in a child of fork() the pool is empty (pthread_atfork) and the
 * child's first call starts its own workers.
 * Thread-safety: lm_parallel_for and lm_parallel_tasks are reentrant and may be called
 * from any number of threads at once; `fn` must be safe to run on disjoint ranges
 * concurrently.
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

/* Dynamic scheduling: fn(ctx, worker, task) once for every task in [0, ntasks).
 * Up to `nworkers` workers (clamped to [1, 256] and to ntasks) take tasks in
 * increasing order from one shared atomic counter, so a worker that finishes a
 * cheap task early takes the next one (load balancing whatever the tasks'
 * costs).  Worker 0 is the calling thread; workers 1.. are threads started for
 * this call (a worker whose thread cannot be started simply takes no tasks).
 * `worker` (< nworkers) lets fn keep per-worker state without locks: tasks of
 * one worker run one after another in one thread.
 * After a task fails no further task is handed out; the result is the status of
 * the lowest-numbered failed task (LM_OK when all ran).  LM_EINVAL when fn is
 * NULL.  Reentrant; fn must be safe to run on distinct tasks concurrently. */
typedef lm_status (*lm_task_fn)(void *ctx, size_t worker, size_t task);
lm_status lm_parallel_tasks(size_t nworkers, size_t ntasks, lm_task_fn fn, void *ctx);

/* Benchmark hook (NULL by default; set it only while no parallel call runs):
 * after every lm_parallel_tasks call, hook(arg, nworkers, busy) runs in the
 * calling thread with the CPU seconds (CLOCK_THREAD_CPUTIME_ID) each worker
 * spent taking and running tasks.  A benchmark on a shared machine uses it to
 * compute the critical path of a run (serial CPU + the busiest worker of each
 * parallel call), which contention from other processes does not distort. */
#define LM_PARALLEL_STATS_HOOK 1
typedef void (*lm_parallel_stats_hook)(void *arg, size_t nworkers, const double *busy);
/* Install (hook non-NULL) or remove (NULL) the process-wide hook; arg is borrowed until the
 * hook is replaced.  Never fails. */
void lm_parallel_set_stats_hook(lm_parallel_stats_hook hook, void *arg);

/* Stop and join the pool's workers and free them (a later parallel call starts new ones).
 * Does nothing while a call is using the pool.  Never fails.  Optional: the workers sleep
 * while idle and end with the process. */
void lm_parallel_shutdown(void);

/* The number of started pool workers, or SIZE_MAX while a call is using the pool
 * (tests and benchmarks). */
size_t lm_parallel_pool_size(void);

/* The number of online CPUs (>= 1). */
int lm_cpu_count(void);

#ifdef __cplusplus
}
#endif
#endif
