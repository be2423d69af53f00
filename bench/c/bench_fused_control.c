/* bench_fused_control — is it the pipeline or the machine?  The hardware control
 * for FusedPipeline's 2-thread speed-up (issue 14 acceptance 2).
 *
 * Usage: bench_fused_control DOCS_FILE [batch=4096] [rounds=3]
 *        bench_fused_control --per-batch DOCS_FILE [batch=4096] [rounds=3]
 *
 * Default mode, per round (interleaved):
 *   A  one thread: a FusedPipeline (clean + quality + PII datatrove, one thread)
 *      over the whole corpus;
 *   B  two threads at once, each with its OWN private copy of the corpus and its
 *      OWN stage objects and pipeline (created in that thread), each running the
 *      same one-thread work as A over its whole copy.  Nothing is shared between
 *      the two but the machine (cores, L3, memory, the hypervisor).
 *   speed-up of the machine = 2 x corpus / wall(B) over corpus / wall(A).
 *   If B scales below 1.8x, no scheduling of the pipeline's own threads can
 *   reach 1.8x on this machine: it is the machine's limit.
 *   C  then the pipeline itself on 2 threads (its pool) over the corpus, for
 *      its speed-up over A in the same round.
 * Each run prints the user / sys CPU seconds and minor faults of every thread
 * (getrusage RUSAGE_THREAD) and its own wall time.
 *
 * --per-batch: the pipeline with 1 and 2 threads, batch by batch (interleaved:
 * every batch runs on 1 thread and then on 2, each on its own pipeline), with
 * the wall time of each batch and the thread-CPU of the calling thread; shows
 * which batches scale and which do not (serial parts, tails, the 2 MB documents).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>

#include "bench_docs.h"
#include "luminamoon/pipeline.h"

static void copy_corpus(const corpus *src, corpus *dst) {
  dst->n = src->n;
  dst->off = (int64_t *)malloc((src->n + 1) * 8);
  memcpy(dst->off, src->off, (src->n + 1) * 8);
  dst->data = (uint8_t *)malloc((size_t)src->off[src->n] + 1);
  memcpy(dst->data, src->data, (size_t)src->off[src->n]);
}

static void free_corpus(corpus *c) {
  free(c->off);
  free(c->data);
}

typedef struct {
  lm_cleaner *cl;
  lm_quality *q;
  lm_pii_masker *p;
  lm_fused *f;
} stages;

static void stages_make(stages *s) {
  lm_pii_params pp;
  lm_pii_params_default(&pp, LM_PII_MODE_DATATROVE);
  if (lm_cleaner_create(NULL, &s->cl) || lm_quality_create(NULL, &s->q) || lm_pii_create(&pp, &s->p)) exit(2);
  lm_fused_stages st;
  memset(&st, 0, sizeof st);
  st.cleaner = s->cl;
  st.quality = s->q;
  st.pii = s->p;
  if (lm_fused_create(&st, &s->f)) exit(2);
}

static void stages_free(stages *s) {
  lm_fused_destroy(s->f);
  lm_cleaner_destroy(s->cl);
  lm_quality_destroy(s->q);
  lm_pii_destroy(s->p);
}

#ifndef RUSAGE_THREAD
#define RUSAGE_THREAD RUSAGE_SELF
#endif

/* one private one-thread run over a corpus: the thread's wall, user, sys, faults */
typedef struct {
  const corpus *src; /* copied privately by the thread before timing */
  size_t batch;
  pthread_barrier_t *start; /* NULL: run in the caller */
  double wall, user, sys;
  long minflt;
  uint64_t docs_out;
} job;

/* the corpus through s in batches of `batch` on ex; j gets the wall time, the CPU and faults of
 * `who` (RUSAGE_THREAD: this thread; RUSAGE_SELF: the process) and the documents kept */
static void timed_run(const corpus *c, size_t batch, stages *s, lm_batch_result *r, const lm_exec *ex, int who,
                      job *j) {
  usage u0, u1;
  get_usage(who, &u0);
  double t0 = now(CLOCK_MONOTONIC);
  for (size_t b = 0; b < c->n; b += batch) {
    size_t e = b + batch < c->n ? b + batch : c->n;
    lm_docs docs = {c->off + b, c->data, e - b, (size_t)c->off[c->n]};
    if (lm_fused_run(s->f, &docs, r, ex)) exit(3);
  }
  j->wall = now(CLOCK_MONOTONIC) - t0;
  get_usage(who, &u1);
  j->user = u1.user - u0.user;
  j->sys = u1.sys - u0.sys;
  j->minflt = u1.minflt - u0.minflt;
  lm_fused_counters fc;
  lm_fused_get_counters(s->f, &fc);
  j->docs_out = fc.docs_out;
}

static void *run_private(void *arg) {
  job *j = (job *)arg;
  corpus c;
  copy_corpus(j->src, &c); /* private data, touched once before timing */
  stages s;
  stages_make(&s);
  lm_batch_result r;
  lm_batch_result_init(&r);
  lm_exec ex = {1, 0};
  if (j->start) pthread_barrier_wait(j->start);
  timed_run(&c, j->batch, &s, &r, &ex, RUSAGE_THREAD, j);
  lm_batch_result_free(&r);
  stages_free(&s);
  free_corpus(&c);
  return NULL;
}

/* the pipeline itself on `threads` threads (its pool), over the shared corpus */
static void run_pipeline(const corpus *c, size_t batch, int threads, job *j) {
  stages s;
  stages_make(&s);
  lm_batch_result r;
  lm_batch_result_init(&r);
  lm_exec ex = {threads, 0};
  timed_run(c, batch, &s, &r, &ex, RUSAGE_SELF, j);
  lm_batch_result_free(&r);
  stages_free(&s);
}

static int control(const corpus *c, size_t batch, int rounds) {
  double mb = (double)c->off[c->n] / 1e6;
  printf("control: %llu docs, %.1f MB, batch %zu; A = 1 thread, B = 2 threads each with a private copy of the "
         "corpus and of the stages (nothing shared)\n",
         (unsigned long long)c->n, mb, batch);
  for (int rd = 0; rd < rounds; rd++) {
    usage s0, s1;
    double m0 = machine_busy();
    get_usage(RUSAGE_SELF, &s0);
    job a = {c, batch, NULL, 0, 0, 0, 0, 0};
    run_private(&a);
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 2);
    job b[2] = {{c, batch, &bar, 0, 0, 0, 0, 0}, {c, batch, &bar, 0, 0, 0, 0, 0}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
      if (pthread_create(&t[i], NULL, run_private, &b[i])) exit(2);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&bar);
    if (b[0].docs_out != a.docs_out || b[1].docs_out != a.docs_out) {
      fprintf(stderr, "control: different outputs\n");
      return 3;
    }
    job p;
    memset(&p, 0, sizeof p);
    run_pipeline(c, batch, 2, &p);
    get_usage(RUSAGE_SELF, &s1);
    double others = machine_busy() - m0 - (s1.user + s1.sys - s0.user - s0.sys);
    if (p.docs_out != a.docs_out) {
      fprintf(stderr, "control: the pipeline gave different outputs\n");
      return 3;
    }
    double wb = b[0].wall > b[1].wall ? b[0].wall : b[1].wall;
    printf("round %d: A %.3f s (%.0f docs/s) | B %.3f s / %.3f s (%.0f docs/s together) | machine speed-up "
           "%.2fx (each thread alone: %.2fx / %.2fx) | pipeline, 2 threads: %.3f s, %.2fx\n",
           rd + 1, a.wall, c->n / a.wall, b[0].wall, b[1].wall, 2 * c->n / wb, 2 * a.wall / wb, a.wall / b[0].wall,
           a.wall / b[1].wall, p.wall, a.wall / p.wall);
    printf("         user/sys cpu s, minor faults: A %.3f/%.3f %ld | B thread 1 %.3f/%.3f %ld | B thread 2 "
           "%.3f/%.3f %ld | pipeline 2 threads (process) %.3f/%.3f %ld\n",
           a.user, a.sys, a.minflt, b[0].user, b[0].sys, b[0].minflt, b[1].user, b[1].sys, b[1].minflt, p.user,
           p.sys, p.minflt);
    printf("         other processes' CPU during the round (/proc/stat, +-0.03 s): %.2f s%s\n", others,
           others > 0.1 ? " (noisy round)" : "");
    fflush(stdout);
  }
  return 0;
}

/* ---- --per-batch ---- */

/* per parallel call of the current batch (stats hook): busy CPU of each worker */
#define MAXCALLS 64
static size_t g_ncalls;
static double g_busy[MAXCALLS][2];
static void stats_hook(void *arg, size_t nw, const double *busy) {
  (void)arg;
  if (g_ncalls >= MAXCALLS) return;
  g_busy[g_ncalls][0] = busy[0];
  g_busy[g_ncalls][1] = nw > 1 ? busy[1] : 0;
  g_ncalls++;
}

static int per_batch(const corpus *c, size_t batch, int rounds) {
  size_t nb = (c->n + batch - 1) / batch;
  double *w1 = (double *)calloc(nb, sizeof(double)), *w2 = (double *)calloc(nb, sizeof(double));
  double *c1 = (double *)calloc(nb, sizeof(double)), *c2 = (double *)calloc(nb, sizeof(double));
  for (int rd = 0; rd < rounds; rd++) {
    stages s1, s2;
    stages_make(&s1);
    stages_make(&s2);
    lm_batch_result r1, r2;
    lm_batch_result_init(&r1);
    lm_batch_result_init(&r2);
    lm_exec e1 = {1, 0}, e2 = {2, 0};
    for (size_t k = 0; k < nb; k++) {
      size_t b = k * batch, e = b + batch < c->n ? b + batch : c->n;
      lm_docs docs = {c->off + b, c->data, e - b, (size_t)c->off[c->n]};
      double t0 = now(CLOCK_MONOTONIC), u0 = now(CLOCK_THREAD_CPUTIME_ID);
      if (lm_fused_run(s1.f, &docs, &r1, &e1)) return 3;
      double t1 = now(CLOCK_MONOTONIC), u1 = now(CLOCK_THREAD_CPUTIME_ID);
      g_ncalls = 0;
      lm_parallel_set_stats_hook(stats_hook, NULL);
      if (lm_fused_run(s2.f, &docs, &r2, &e2)) return 3;
      double t2 = now(CLOCK_MONOTONIC), u2 = now(CLOCK_THREAD_CPUTIME_ID);
      lm_parallel_set_stats_hook(NULL, NULL);
      if (rd == rounds - 1 && (k == nb - 1 || getenv("LM_BENCH_ALL_CALLS"))) {
        double b0 = 0, b1 = 0, mx = 0;
        printf("batch %zu, 2 threads: wall %.2f ms, calling thread cpu %.2f ms; per parallel call busy ms (worker 0 "
               "| 1):",
               k, (t2 - t1) * 1e3, (u2 - u1) * 1e3);
        for (size_t i = 0; i < g_ncalls; i++) {
          printf(" %.2f|%.2f", g_busy[i][0] * 1e3, g_busy[i][1] * 1e3);
          b0 += g_busy[i][0];
          b1 += g_busy[i][1];
          mx += g_busy[i][0] > g_busy[i][1] ? g_busy[i][0] : g_busy[i][1];
        }
        printf("\n         busy sum %.2f + %.2f ms, critical %.2f ms, serial (calling thread outside calls) %.2f ms\n",
               b0 * 1e3, b1 * 1e3, mx * 1e3, (u2 - u1 - b0) * 1e3);
      }
      double dw1 = t1 - t0, dw2 = t2 - t1;
      if (rd == 0 || dw1 < w1[k]) w1[k] = dw1;
      if (rd == 0 || dw2 < w2[k]) w2[k] = dw2;
      if (rd == 0 || u1 - u0 < c1[k]) c1[k] = u1 - u0;
      if (rd == 0 || u2 - u1 < c2[k]) c2[k] = u2 - u1;
    }
    lm_batch_result_free(&r1);
    lm_batch_result_free(&r2);
    stages_free(&s1);
    stages_free(&s2);
  }
  double s1 = 0, s2 = 0;
  printf("per batch (best of %d rounds): batch, docs, MB, 1 thread ms, 2 threads ms, speed-up, calling thread cpu "
         "ms 1 | 2\n",
         rounds);
  for (size_t k = 0; k < nb; k++) {
    size_t b = k * batch, e = b + batch < c->n ? b + batch : c->n;
    printf("%3zu %5zu %6.2f %8.2f %8.2f %5.2fx   %7.2f | %7.2f\n", k, e - b, (double)(c->off[e] - c->off[b]) / 1e6,
           w1[k] * 1e3, w2[k] * 1e3, w1[k] / w2[k], c1[k] * 1e3, c2[k] * 1e3);
    s1 += w1[k];
    s2 += w2[k];
  }
  printf("sum of best: 1 thread %.3f s, 2 threads %.3f s: %.2fx\n", s1, s2, s1 / s2);
  free(w1);
  free(w2);
  free(c1);
  free(c2);
  return 0;
}

int main(int argc, char **argv) {
  int pb = argc > 1 && strcmp(argv[1], "--per-batch") == 0;
  int a = pb ? 2 : 1;
  if (argc <= a) {
    fprintf(stderr, "usage: bench_fused_control [--per-batch] DOCS_FILE [batch=4096] [rounds=3]\n");
    return 2;
  }
  corpus c;
  if (load(argv[a], &c)) {
    fprintf(stderr, "cannot read %s\n", argv[a]);
    return 2;
  }
  size_t batch = argc > a + 1 ? (size_t)atol(argv[a + 1]) : 4096;
  int rounds = argc > a + 2 ? atoi(argv[a + 2]) : 3;
  if (!batch || rounds < 1) return 2;
  return pb ? per_batch(&c, batch, rounds) : control(&c, batch, rounds);
}
