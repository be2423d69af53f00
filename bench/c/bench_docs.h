/* Shared by the FusedPipeline benchmarks of bench/c (bench_fused_threads.c, bench_fused_control.c):
 * the clock, the docs file (u64 n, then n + 1 int64 offsets, then the UTF-8 payload; see
 * bench_fused_threads.c for how it is made), getrusage figures and the machine's busy time. */
#ifndef LUMINAMOON_BENCH_DOCS_H
#define LUMINAMOON_BENCH_DOCS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>

static double now(int clock) {
  struct timespec t;
  clock_gettime(clock, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct {
  uint64_t n;
  int64_t *off;
  uint8_t *data;
} corpus;

/* 0, or -1 when the file cannot be read whole (the buffers are then the caller's to leak: a benchmark exits) */
static int load(const char *path, corpus *c) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  if (fread(&c->n, 8, 1, f) != 1) return -1;
  c->off = (int64_t *)malloc((c->n + 1) * 8);
  if (fread(c->off, 8, c->n + 1, f) != c->n + 1) return -1;
  c->data = (uint8_t *)malloc((size_t)c->off[c->n] + 1);
  if (fread(c->data, 1, (size_t)c->off[c->n], f) != (size_t)c->off[c->n]) return -1;
  fclose(f);
  return 0;
}

/* user / sys CPU seconds and minor page faults (getrusage: RUSAGE_SELF or, on Linux, RUSAGE_THREAD) */
typedef struct {
  double user, sys;
  long minflt;
} usage;

static void get_usage(int who, usage *u) {
  struct rusage r;
  memset(&r, 0, sizeof r);
  getrusage(who, &r);
  u->user = (double)r.ru_utime.tv_sec + (double)r.ru_utime.tv_usec * 1e-6;
  u->sys = (double)r.ru_stime.tv_sec + (double)r.ru_stime.tv_usec * 1e-6;
  u->minflt = r.ru_minflt;
}

/* busy CPU seconds of the whole machine (/proc/stat, all CPUs; 0 where there is none): the
 * machine's busy time over a round minus this process's CPU is what other processes took
 * meanwhile (this machine is shared: a clean round has ~0) */
static double machine_busy(void) {
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return 0;
  unsigned long long v[8] = {0};
  int k = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                 &v[7]);
  fclose(f);
  if (k < 8) return 0;
  return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / 100.0; /* USER_HZ */
}

#endif
