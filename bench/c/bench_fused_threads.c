/* bench_fused_threads — FusedPipeline (clean -> quality -> [dedup] -> PII
 * datatrove) on 1 and 2 threads over a documents file, in batches.
 *
 * Usage: bench_fused_threads DOCS_FILE [batch=4096] [rounds=3] [dedup=0] [threads=1,2|1|2]
 *        bench_fused_threads --heavy-tiny DOCS_FILE [rounds=3]
 *        bench_fused_threads --retained DOCS_FILE
 *
 * DOCS_FILE: little-endian u64 n, int64 offsets[n + 1], then the payload
 * (write it from the corpus with a few lines of Python: see bench_stages.py).
 * Each round runs every thread count once, interleaved, with a fresh
 * pipeline, and prints wall seconds, docs/s and the process CPU seconds used;
 * the speed-up is per round (this machine is shared: print every round).
 * With a core that has lm_parallel_set_stats_hook it also prints the 2-thread
 * run's critical path: its serial CPU plus, for every parallel call, the CPU
 * of its busiest worker; cpu(1 thread) / critical path is the speed-up two
 * dedicated cores would give (load balance and serial parts; contention from
 * other processes on a shared machine does not enter, memory bandwidth does
 * only as far as it shows in CPU time).
 * Each run also prints user and sys CPU seconds and minor page faults (getrusage):
 * the process, the calling thread and the pool's workers (the difference), and
 * each round the CPU other processes took meanwhile (/proc/stat; > 0.1 s: noisy).
 * --heavy-tiny: 512 documents of ~100 KB (corpus text run together) then 512
 * of ~100 B, one batch (issue 21 item 5).
 * --retained: the resident memory (RSS) a FusedPipeline (all stages, 2
 * threads) keeps after one batch of 64 x 1 MB documents (corpus text run
 * together), with the batch's result freed (issue 21 item 4); all stages,
 * then without quality (which drops these run-together texts, so only the
 * second run sends 64 MB through the arenas).
 * The same source builds against an older core for a before/after in one run.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "bench_docs.h"
#include "luminamoon/pipeline.h"

/* critical path (new core only): CPU of the busiest worker of each parallel call */
static double g_busy_sum, g_busy_max;
#ifdef LM_PARALLEL_STATS_HOOK
static void stats(void *arg, size_t nw, const double *busy) {
  (void)arg;
  double mx = 0;
  for (size_t i = 0; i < nw; i++) {
    g_busy_sum += busy[i];
    if (busy[i] > mx) mx = busy[i];
  }
  g_busy_max += mx;
}
#endif

static double g_serial, g_imbalance; /* of the last run */

static double self_cpu(void) {
  struct rusage r;
  memset(&r, 0, sizeof r);
  getrusage(RUSAGE_SELF, &r);
  return (double)r.ru_utime.tv_sec + (double)r.ru_utime.tv_usec * 1e-6 + (double)r.ru_stime.tv_sec +
         (double)r.ru_stime.tv_usec * 1e-6;
}

/* user / sys CPU seconds and minor page faults of the last run: the whole process
 * and the calling thread (RUSAGE_THREAD, Linux); the pool's workers are the difference */
static usage g_proc, g_main;
static int thread_usage(usage *u) {
#ifdef RUSAGE_THREAD
  get_usage(RUSAGE_THREAD, u);
  return 1;
#else
  memset(u, 0, sizeof *u);
  return 0;
#endif
}
static void usage_sub(usage *a, const usage *b) { /* clamped at 0 (the clocks tick separately) */
  a->user = a->user > b->user ? a->user - b->user : 0;
  a->sys = a->sys > b->sys ? a->sys - b->sys : 0;
  a->minflt = a->minflt > b->minflt ? a->minflt - b->minflt : 0;
}
static void print_usage(const char *label) {
  usage w = g_proc;
  usage_sub(&w, &g_main);
  printf("         %s: user/sys cpu s, minor faults: process %.3f/%.3f %ld | calling thread %.3f/%.3f %ld | "
         "pool workers %.3f/%.3f %ld\n",
         label, g_proc.user, g_proc.sys, g_proc.minflt, g_main.user, g_main.sys, g_main.minflt, w.user, w.sys,
         w.minflt);
}

static double run(const corpus *c, size_t batch, int threads, int dedup, double *cpu, double *crit) {
  lm_cleaner *cl;
  lm_quality *q;
  lm_pii_masker *p;
  lm_dedup *d = NULL;
  lm_pii_params pp;
  lm_pii_params_default(&pp, LM_PII_MODE_DATATROVE);
  if (lm_cleaner_create(NULL, &cl) || lm_quality_create(NULL, &q) || lm_pii_create(&pp, &p)) exit(2);
  if (dedup) {
    lm_dedup_params dp;
    lm_dedup_params_default(&dp);
    if (lm_dedup_create(&dp, &d)) exit(2);
  }
  lm_fused_stages st;
  memset(&st, 0, sizeof st); /* stages not named here are off */
  st.cleaner = cl;
  st.quality = q;
  st.dedup = d;
  st.pii = p;
  lm_fused *f;
  if (lm_fused_create(&st, &f)) exit(2);
  lm_batch_result r;
  lm_batch_result_init(&r);
  lm_exec ex = {threads, 0};
  g_busy_sum = g_busy_max = 0;
#ifdef LM_PARALLEL_STATS_HOOK
  lm_parallel_set_stats_hook(stats, NULL);
#endif
  usage p0, m0;
  get_usage(RUSAGE_SELF, &p0);
  int have_thread = thread_usage(&m0);
  double c0 = now(CLOCK_PROCESS_CPUTIME_ID), t0 = now(CLOCK_MONOTONIC);
  for (size_t b = 0; b < c->n; b += batch) {
    size_t e = b + batch < c->n ? b + batch : c->n;
    lm_docs docs = {c->off + b, c->data, e - b, (size_t)c->off[c->n]};
    lm_status s = lm_fused_run(f, &docs, &r, &ex);
    if (s) {
      fprintf(stderr, "lm_fused_run: %d\n", (int)s);
      exit(2);
    }
  }
  double t = now(CLOCK_MONOTONIC) - t0;
  *cpu = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
  get_usage(RUSAGE_SELF, &g_proc);
  usage_sub(&g_proc, &p0);
  if (have_thread) {
    thread_usage(&g_main);
    usage_sub(&g_main, &m0);
  } else {
    g_main = g_proc; /* no per-thread figures: all counted as the caller's */
  }
  /* serial CPU (outside parallel calls) + the busiest worker of each call; 0 without the hook */
  *crit = g_busy_max > 0 ? *cpu - g_busy_sum + g_busy_max : 0;
  g_serial = *cpu - g_busy_sum;
  g_imbalance = g_busy_max - g_busy_sum / threads;
#ifdef LM_PARALLEL_STATS_HOOK
  lm_parallel_set_stats_hook(NULL, NULL);
#endif
  lm_batch_result_free(&r);
  lm_fused_destroy(f);
  lm_cleaner_destroy(cl);
  lm_quality_destroy(q);
  lm_pii_destroy(p);
  lm_dedup_destroy(d);
  return t;
}

/* 512 x ~100 KB of corpus text, then 512 x ~100 B */
static void heavy_tiny(const corpus *src, corpus *c) {
  size_t cap = 512 * 100000 + 512 * 100 + 16;
  c->data = (uint8_t *)malloc(cap);
  c->off = (int64_t *)malloc(1025 * 8);
  c->n = 1024;
  c->off[0] = 0;
  size_t pos = 0, k = 0;
  for (int i = 0; i < 1024; i++) {
    size_t want = i < 512 ? 100000 : 100, got = 0;
    while (got < want) {
      size_t len = (size_t)(src->off[k + 1] - src->off[k]);
      if (len > want - got) len = want - got;
      memcpy(c->data + pos + got, src->data + src->off[k], len);
      got += len;
      k = (k + 7919) % src->n;
    }
    pos += want;
    c->off[i + 1] = (int64_t)pos;
  }
}

static double rss_mb(void) {
  long pages = 0, rss = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return 0;
  if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0;
  fclose(f);
  return (double)rss * 4096.0 / 1e6;
}

static int retained(const corpus *src, int with_quality) {
  corpus big;
  size_t mb1 = (size_t)1 << 20;
  big.n = 64;
  big.data = (uint8_t *)malloc(64 * mb1);
  big.off = (int64_t *)malloc(65 * 8);
  big.off[0] = 0;
  size_t k = 0;
  for (int i = 0; i < 64; i++) {
    size_t got = 0;
    while (got < mb1) {
      size_t len = (size_t)(src->off[k + 1] - src->off[k]);
      if (len > mb1 - got) len = mb1 - got;
      memcpy(big.data + (size_t)i * mb1 + got, src->data + src->off[k], len);
      got += len;
      k = (k + 7919) % src->n;
    }
    big.off[i + 1] = (int64_t)((size_t)(i + 1) * mb1);
  }
  lm_cleaner *cl;
  lm_quality *q;
  lm_pii_masker *p;
  lm_dedup *d;
  lm_pii_params pp;
  lm_pii_params_default(&pp, LM_PII_MODE_DATATROVE);
  lm_dedup_params dp;
  lm_dedup_params_default(&dp);
  if (lm_cleaner_create(NULL, &cl) || lm_quality_create(NULL, &q) || lm_pii_create(&pp, &p) ||
      lm_dedup_create(&dp, &d))
    return 2;
  if (!with_quality) {
    lm_quality_destroy(q);
    q = NULL;
  }
  lm_fused_stages st;
  memset(&st, 0, sizeof st);
  st.cleaner = cl;
  st.quality = q;
  st.dedup = d;
  st.pii = p;
  lm_fused *f;
  if (lm_fused_create(&st, &f)) return 2;
  lm_exec ex = {2, 0};
  lm_batch_result r;
  lm_batch_result_init(&r);
  lm_docs warm = {src->off, src->data, 1000, (size_t)src->off[src->n]};
  if (lm_fused_run(f, &warm, &r, &ex)) return 2;
  lm_batch_result_free(&r);
#ifdef __GLIBC__
  malloc_trim(0);
#endif
  double r0 = rss_mb();
  lm_docs bd = {big.off, big.data, 64, 64 * mb1};
  lm_batch_result_init(&r);
  if (lm_fused_run(f, &bd, &r, &ex)) return 2;
  size_t out = r.data_len;
  lm_batch_result_free(&r);
  double r1 = rss_mb(), r2 = r1;
#ifdef __GLIBC__
  malloc_trim(0); /* what the allocator caches is not the pipeline's */
  r2 = rss_mb();
#endif
  size_t kept = 0;
#ifdef LM_PARALLEL_STATS_HOOK
  lm_fused_retained_bytes(f, &kept);
#endif
  printf("%s, 64 x 1 MB batch (%zu bytes out): RSS before %.1f MB, after (result freed) %.1f MB: kept %+.1f MB; "
         "after malloc_trim %+.1f MB; retained_bytes %.1f MB\n",
         with_quality ? "all stages" : "clean+dedup+PII", out, r0, r1, r1 - r0, r2 - r0, (double)kept / 1e6);
  lm_fused_destroy(f);
  lm_cleaner_destroy(cl);
  lm_quality_destroy(q);
  lm_pii_destroy(p);
  lm_dedup_destroy(d);
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc > 2 && strcmp(argv[1], "--retained") == 0) {
    corpus c;
    if (load(argv[2], &c)) return 2;
    return retained(&c, 1) || retained(&c, 0);
  }
  int ht = argc > 1 && strcmp(argv[1], "--heavy-tiny") == 0;
  int a = ht ? 2 : 1;
  if (argc <= a) {
    fprintf(stderr, "usage: bench_fused_threads [--heavy-tiny] DOCS_FILE [batch] [rounds] [dedup]\n");
    return 2;
  }
  corpus c;
  if (load(argv[a], &c)) {
    fprintf(stderr, "cannot read %s\n", argv[a]);
    return 2;
  }
  size_t batch = ht ? 1024 : (argc > a + 1 ? (size_t)atol(argv[a + 1]) : 4096);
  int rounds = argc > a + 2 ? atoi(argv[a + 2]) : 3;
  int dedup = argc > a + 3 ? atoi(argv[a + 3]) : 0;
  /* threads: "1,2" (default: both, interleaved), "1" or "2" (one count only, e.g. under callgrind) */
  const char *tl = argc > a + 4 ? argv[a + 4] : "1,2";
  int only = strchr(tl, ',') ? 0 : atoi(tl);
  if (ht) {
    corpus h;
    heavy_tiny(&c, &h);
    c = h;
  }
  double mb = (double)(c.off[c.n] - c.off[0]) / 1e6;
  printf("%s: %llu docs, %.1f MB, batch %zu, dedup %d\n", ht ? "heavy-then-tiny" : argv[a], (unsigned long long)c.n,
         mb, batch, dedup);
  double best1 = 0, best2 = 0;
  double *ratios = rounds > 0 ? (double *)malloc((size_t)rounds * sizeof *ratios) : NULL;
  int nr = 0;
  for (int r = 0; r < rounds; r++) {
    double cpu1, cpu2, crit1, crit2;
    double m0 = machine_busy(), s0 = self_cpu();
    if (only) {
      double t = run(&c, batch, only, dedup, &cpu1, &crit1);
      printf("round %d: %d thread(s) %.3f s (%.0f docs/s, %.1f MB/s, cpu %.2f s)\n", r + 1, only, t, c.n / t, mb / t,
             cpu1);
      print_usage(only == 1 ? "1 thread" : "threads");
      fflush(stdout);
      continue;
    }
    double t1 = run(&c, batch, 1, dedup, &cpu1, &crit1);
    usage p1 = g_proc, m1 = g_main;
    double t2 = run(&c, batch, 2, dedup, &cpu2, &crit2);
    usage p2 = g_proc, m2 = g_main;
    if (best1 == 0 || t1 < best1) best1 = t1;
    if (best2 == 0 || t2 < best2) best2 = t2;
    if (ratios) ratios[nr++] = t1 / t2;
    printf("round %d: 1 thread %.3f s (%.0f docs/s, %.1f MB/s, cpu %.2f s) | 2 threads %.3f s (%.0f docs/s, "
           "%.1f MB/s, cpu %.2f s, critical path %.2f s) | wall speed-up %.2fx | cpu(1 thread) / critical "
           "path(2) %.2fx\n",
           r + 1, t1, c.n / t1, mb / t1, cpu1, t2, c.n / t2, mb / t2, cpu2, crit2, t1 / t2,
           crit2 > 0 ? cpu1 / crit2 : 0.0);
    if (crit2 > 0)
      printf("         2 threads: serial cpu %.3f s, imbalance (busiest worker - mean, summed) %.3f s\n", g_serial,
             g_imbalance);
    g_proc = p1;
    g_main = m1;
    print_usage("1 thread ");
    g_proc = p2;
    g_main = m2;
    print_usage("2 threads");
    double others = machine_busy() - m0 - (self_cpu() - s0);
    printf("         other processes' CPU during the round (/proc/stat, +-0.03 s): %.2f s%s\n", others,
           others > 0.1 ? " (noisy round)" : "");
    fflush(stdout);
  }
  if (nr > 0) { /* the best of the rounds for each count, and the rounds' own ratios (paired in time) */
    qsort(ratios, (size_t)nr, sizeof *ratios, cmp_double);
    double med = nr % 2 ? ratios[nr / 2] : (ratios[nr / 2 - 1] + ratios[nr / 2]) / 2;
    printf("best of %d rounds: 1 thread %.3f s (%.0f docs/s), 2 threads %.3f s (%.0f docs/s): %.2fx | rounds' "
           "speed-ups min / median / max %.2fx / %.2fx / %.2fx\n",
           nr, best1, c.n / best1, best2, c.n / best2, best1 / best2, ratios[0], med, ratios[nr - 1]);
  }
  free(ratios);
  return 0;
}
