#define _GNU_SOURCE
#include "luminamoon/parallel.h"

#include <pthread.h>
#include <stdint.h>
#include <time.h>
#include <stdlib.h>
#include <unistd.h>

#define LM_MAX_THREADS 256

typedef struct {
  lm_range_fn fn;
  void *ctx;
  size_t begin, end;
  lm_status result;
} lm_task;

static void *lm_task_run(void *arg) {
  lm_task *t = (lm_task *)arg;
  t->result = t->fn(t->ctx, t->begin, t->end);
  return NULL;
}

int lm_cpu_count(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : (int)n;
}

lm_status lm_parallel_for(const lm_exec *exec, size_t n, lm_range_fn fn, void *ctx) {
  if (!fn) return LM_EINVAL;
  if (n == 0) return LM_OK;
  size_t threads = 1;
  if (exec && exec->num_threads > 1) {
    size_t grain = exec->min_items_per_thread ? exec->min_items_per_thread : 16384;
    threads = (size_t)exec->num_threads;
    if (threads > LM_MAX_THREADS) threads = LM_MAX_THREADS;
    size_t by_grain = n / grain;
    if (by_grain < threads) threads = by_grain ? by_grain : 1;
  }
  if (threads <= 1) return fn(ctx, 0, n);

  lm_task tasks[LM_MAX_THREADS];
  pthread_t tids[LM_MAX_THREADS];
  int started[LM_MAX_THREADS];
  size_t chunk = n / threads, rem = n % threads, pos = 0;
  for (size_t i = 0; i < threads; i++) {
    size_t len = chunk + (i < rem ? 1 : 0);
    tasks[i] = (lm_task){fn, ctx, pos, pos + len, LM_OK};
    pos += len;
  }
  /* task 0 runs in the calling thread; the others get threads. */
  for (size_t i = 1; i < threads; i++)
    started[i] = pthread_create(&tids[i], NULL, lm_task_run, &tasks[i]) == 0;
  lm_task_run(&tasks[0]);
  lm_status first = tasks[0].result, spawn = LM_OK;
  for (size_t i = 1; i < threads; i++) {
    if (started[i]) {
      pthread_join(tids[i], NULL);
    } else {
      lm_task_run(&tasks[i]); /* could not start a thread: do it here */
      spawn = LM_ENOMEM;
    }
    if (first == LM_OK) first = tasks[i].result;
  }
  (void)spawn; /* the work was still done; a failed spawn is not an error */
  return first;
}

/* ---- lm_parallel_tasks: workers pull task numbers from one atomic counter ---- */

#include <stdatomic.h>

typedef struct {
  lm_task_fn fn;
  void *ctx;
  size_t ntasks;
  atomic_size_t next;   /* next task to hand out */
  atomic_size_t failed; /* lowest failed task (SIZE_MAX: none) */
} lm_pool_run;

typedef struct {
  lm_pool_run *run;
  size_t worker;
  lm_status first; /* status of this worker's failed task */
  size_t first_task;
  int timed;
  double busy; /* thread CPU seconds (stats hook only) */
} lm_worker;

static _Atomic(lm_parallel_stats_hook) g_stats_hook;
static void *_Atomic g_stats_arg;

void lm_parallel_set_stats_hook(lm_parallel_stats_hook hook, void *arg) {
  atomic_store(&g_stats_arg, arg);
  atomic_store(&g_stats_hook, hook);
}

static double thread_cpu(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *lm_worker_loop(lm_worker *w);

static void *lm_worker_main(void *arg) {
  lm_worker *w = (lm_worker *)arg;
  if (!w->timed) return lm_worker_loop(w);
  double c0 = thread_cpu();
  lm_worker_loop(w);
  w->busy = thread_cpu() - c0;
  return NULL;
}

static void *lm_worker_loop(lm_worker *w) {
  lm_pool_run *r = w->run;
  for (;;) {
    if (atomic_load_explicit(&r->failed, memory_order_relaxed) != SIZE_MAX) break;
    size_t t = atomic_fetch_add_explicit(&r->next, 1, memory_order_relaxed);
    if (t >= r->ntasks) break;
    lm_status s = r->fn(r->ctx, w->worker, t);
    if (s != LM_OK) {
      w->first = s;
      w->first_task = t;
      size_t cur = atomic_load_explicit(&r->failed, memory_order_relaxed);
      while (t < cur && !atomic_compare_exchange_weak_explicit(&r->failed, &cur, t, memory_order_relaxed,
                                                               memory_order_relaxed)) {
      }
      break;
    }
  }
  return NULL;
}

lm_status lm_parallel_tasks(size_t nworkers, size_t ntasks, lm_task_fn fn, void *ctx) {
  if (!fn) return LM_EINVAL;
  if (ntasks == 0) return LM_OK;
  if (nworkers > LM_MAX_THREADS) nworkers = LM_MAX_THREADS;
  if (nworkers > ntasks) nworkers = ntasks;
  lm_parallel_stats_hook hook = atomic_load(&g_stats_hook);
  if (nworkers <= 1) {
    double c0 = hook ? thread_cpu() : 0;
    lm_status s = LM_OK;
    for (size_t t = 0; t < ntasks && !s; t++) s = fn(ctx, 0, t);
    if (hook) {
      double busy = thread_cpu() - c0;
      hook(atomic_load(&g_stats_arg), 1, &busy);
    }
    return s;
  }
  lm_pool_run run;
  run.fn = fn;
  run.ctx = ctx;
  run.ntasks = ntasks;
  atomic_init(&run.next, 0);
  atomic_init(&run.failed, SIZE_MAX);
  lm_worker ws[LM_MAX_THREADS];
  pthread_t tids[LM_MAX_THREADS];
  int started[LM_MAX_THREADS];
  for (size_t i = 0; i < nworkers; i++) ws[i] = (lm_worker){&run, i, LM_OK, SIZE_MAX, hook != NULL, 0.0};
  for (size_t i = 1; i < nworkers; i++) started[i] = pthread_create(&tids[i], NULL, lm_worker_main, &ws[i]) == 0;
  lm_worker_main(&ws[0]);
  for (size_t i = 1; i < nworkers; i++)
    if (started[i]) pthread_join(tids[i], NULL);
  if (hook) {
    double busy[LM_MAX_THREADS];
    for (size_t i = 0; i < nworkers; i++) busy[i] = ws[i].busy;
    hook(atomic_load(&g_stats_arg), nworkers, busy);
  }
  lm_status first = LM_OK;
  size_t first_task = SIZE_MAX;
  for (size_t i = 0; i < nworkers; i++)
    if (ws[i].first != LM_OK && ws[i].first_task < first_task) {
      first = ws[i].first;
      first_task = ws[i].first_task;
    }
  return first;
}
