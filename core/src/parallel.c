#define _GNU_SOURCE
#include "luminamoon/parallel.h"

#include <pthread.h>
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
