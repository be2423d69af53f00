/* What a second thread costs lm_parallel_for: the pool's wake-up against starting a
 * thread per call (what lm_parallel_for did before the pool, here done directly with
 * pthread_create + pthread_join).  Each call runs two empty ranges with num_threads=2;
 * prints the minimum, median and mean wall time of N calls (default 2000) in us.
 *
 *   build-cmake/bench_parallel_wake [N]
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "luminamoon/parallel.h"

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static lm_status empty(void *ctx, size_t b, size_t e) {
  (void)ctx;
  (void)b;
  (void)e;
  return LM_OK;
}

static void *empty_thread(void *arg) { return arg; }

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void report(const char *what, double *t, int n) {
  double sum = 0;
  for (int i = 0; i < n; i++) sum += t[i];
  qsort(t, (size_t)n, sizeof *t, cmp);
  printf("%-44s min %7.2f  median %7.2f  mean %7.2f us\n", what, t[0], t[n / 2], sum / n);
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2000;
  if (n < 1) n = 1;
  double *t = malloc(sizeof(double) * (size_t)n);
  if (!t) return 1;
  lm_exec ex = {2, 1};
  for (int i = 0; i < 10; i++) lm_parallel_for(&ex, 2, empty, NULL);
  for (int i = 0; i < n; i++) {
    double t0 = now_us();
    lm_parallel_for(&ex, 2, empty, NULL);
    t[i] = now_us() - t0;
  }
  report("lm_parallel_for, 2 threads, back to back", t, n);
  for (int i = 0; i < n / 10 + 1; i++) {
    struct timespec s = {0, 1000000}; /* 1 ms apart: the worker sleeps (futex wake) */
    nanosleep(&s, NULL);
    double t0 = now_us();
    lm_parallel_for(&ex, 2, empty, NULL);
    t[i] = now_us() - t0;
  }
  report("lm_parallel_for, 2 threads, 1 ms apart", t, n / 10 + 1);
  for (int i = 0; i < n; i++) {
    double t0 = now_us();
    pthread_t tid;
    if (pthread_create(&tid, NULL, empty_thread, NULL) == 0) pthread_join(tid, NULL);
    t[i] = now_us() - t0;
  }
  report("pthread_create + join per call (no pool)", t, n);
  lm_parallel_shutdown();
  free(t);
  return 0;
}
