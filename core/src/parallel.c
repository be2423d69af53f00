#define _GNU_SOURCE
#include "luminamoon/parallel.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <stdlib.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#define LM_MAX_THREADS 256 /* parts fit the 16-bit fields of lm_pool.claim */

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

/* ---- the pool of started worker threads ----
 *
 * Workers are created lazily by the first call that wants them (as many as the largest
 * call asked for, up to LM_MAX_THREADS - 1) and then sleep.  A call that owns the pool
 * (one at a time: `owner` is taken with a compare-exchange) writes the job, publishes
 * it in `claim` (the job's number in the high 32 bits, its part count and the next
 * unclaimed part in the low 32), sets each needed worker's ticket to the job number and
 * wakes those that sleep (futex).  Every thread, the caller included, takes parts by incrementing
 * `claim` while its job number is still current, so parts go to whoever is running:
 * a worker the scheduler has not run yet leaves its part to the caller, and the call
 * is never slower than one thread by more than the wake-up.  The caller then waits
 * for `remaining` (parts not finished) to reach 0: a short spin, then a futex sleep.
 * A worker that finished spins LM_POOL_SPIN_NS on its ticket before it sleeps, so
 * back-to-back calls pay no system call; an idle pool uses no CPU.
 * A call that finds the pool owned (a concurrent caller, or a nested call from inside
 * a job) starts threads for itself as before, so no caller waits for another.
 * After fork() the child has no workers: pthread_atfork resets the pool there and
 * the first call in the child starts new ones.  lm_parallel_shutdown stops them. */

#define LM_POOL_SPIN_NS 60000L

typedef void (*lm_job_fn)(void *arg, size_t part);

typedef struct lm_pool_worker {
  _Atomic uint32_t ticket;  /* the number of the last job this worker was asked to join */
  atomic_int sleeping;      /* 1 while (about to be) in futex_wait on ticket */
  uint32_t seen;            /* the last ticket it acted on (its own thread only) */
  pthread_t tid;
} lm_pool_worker;

typedef struct {
  atomic_int owner;              /* 1 while a call uses the pool */
  size_t nworkers;               /* started workers (written by the owner only) */
  lm_pool_worker *w[LM_MAX_THREADS];
  uint32_t job;                  /* the current job's number (owner only) */
  lm_job_fn fn;                  /* the job (written by the owner before `claim`) */
  void *arg;
  _Atomic uint64_t claim;        /* job number << 32 | part count << 16 | next part */
  atomic_int stop;               /* workers exit on their next ticket */
  _Atomic uint32_t remaining;    /* parts of the job not finished yet */
  atomic_int waiting;            /* 1 while the owner (is about to) sleep on remaining */
} lm_pool;

static lm_pool g_pool;
static pthread_once_t g_pool_once = PTHREAD_ONCE_INIT;

static long futex_op(_Atomic uint32_t *addr, int op, uint32_t val) {
#ifdef __linux__
  return syscall(SYS_futex, (uint32_t *)addr, op | FUTEX_PRIVATE_FLAG, val, NULL, NULL, 0);
#else
  (void)addr;
  (void)val;
  if (op == 0) {
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
  }
  return 0;
#endif
}
#ifdef __linux__
#define LM_FUTEX_WAIT FUTEX_WAIT
#define LM_FUTEX_WAKE FUTEX_WAKE
#else
#define LM_FUTEX_WAIT 0
#define LM_FUTEX_WAKE 1
#endif

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* Spin until *addr != val (returns 1) or LM_POOL_SPIN_NS passed (returns 0). */
static int spin_while_equal(_Atomic uint32_t *addr, uint32_t val) {
  long long t0 = 0;
  for (unsigned i = 1;; i++) {
    if (atomic_load_explicit(addr, memory_order_acquire) != val) return 1;
    cpu_relax();
    if ((i & 63) == 0) {
      long long t = now_ns();
      if (!t0) t0 = t;
      else if (t - t0 > LM_POOL_SPIN_NS) return 0;
    }
  }
}

/* Take and run parts of job `job` until none is left (or the job is over).  A claim is
 * taken only while its part is below the job's part count, both read from the same
 * word, so a successful claim holds the job open (`remaining` counts it) and fn / arg
 * cannot change under it. */
static void lm_pool_take_parts(uint32_t job) {
  uint64_t c = atomic_load_explicit(&g_pool.claim, memory_order_acquire);
  for (;;) {
    if ((uint32_t)(c >> 32) != job) return;
    const uint32_t part = (uint32_t)c & 0xFFFFu, nparts = ((uint32_t)c >> 16) & 0xFFFFu;
    if (part >= nparts) return;
    if (!atomic_compare_exchange_weak_explicit(&g_pool.claim, &c, c + 1, memory_order_acq_rel,
                                               memory_order_acquire))
      continue;
    g_pool.fn(g_pool.arg, part);
    if (atomic_fetch_sub(&g_pool.remaining, 1) == 1 && atomic_load(&g_pool.waiting))
      futex_op(&g_pool.remaining, LM_FUTEX_WAKE, 1);
    c = atomic_load_explicit(&g_pool.claim, memory_order_acquire);
  }
}

static void *lm_pool_main(void *arg) {
  lm_pool_worker *w = (lm_pool_worker *)arg;
  for (;;) {
    if (!spin_while_equal(&w->ticket, w->seen)) {
      atomic_store(&w->sleeping, 1); /* seq_cst: pairs with the owner's ticket store + load */
      while (atomic_load(&w->ticket) == w->seen) futex_op(&w->ticket, LM_FUTEX_WAIT, w->seen);
      atomic_store_explicit(&w->sleeping, 0, memory_order_relaxed);
    }
    w->seen = atomic_load_explicit(&w->ticket, memory_order_acquire);
    if (atomic_load_explicit(&g_pool.stop, memory_order_acquire)) break;
    lm_pool_take_parts(w->seen);
  }
  return NULL;
}

static void lm_pool_atfork_child(void) {
  /* The workers do not exist in the child; their structs are dropped (not freed:
   * a worker of the parent may have been using one while it forked). */
  g_pool.nworkers = 0;
  atomic_store(&g_pool.stop, 0);
  atomic_store(&g_pool.remaining, 0);
  atomic_store(&g_pool.waiting, 0);
  atomic_store(&g_pool.owner, 0);
}

static void lm_pool_init_once(void) { pthread_atfork(NULL, NULL, lm_pool_atfork_child); }

/* Run fn(arg, part) for every part in [0, nparts) on the calling thread and the pool's
 * workers.  Returns 0 when it ran them, -1 (nothing ran) when the pool is owned by
 * another call or cannot get enough workers. */
static int lm_pool_exec(size_t nparts, lm_job_fn fn, void *arg) {
  pthread_once(&g_pool_once, lm_pool_init_once);
  int expect = 0;
  if (!atomic_compare_exchange_strong(&g_pool.owner, &expect, 1)) return -1;
  size_t need = nparts - 1;
  while (g_pool.nworkers < need) {
    lm_pool_worker *w = (lm_pool_worker *)calloc(1, sizeof *w);
    if (!w) break;
    atomic_init(&w->ticket, g_pool.job);
    atomic_init(&w->sleeping, 0);
    w->seen = g_pool.job;
    if (pthread_create(&w->tid, NULL, lm_pool_main, w) != 0) {
      free(w);
      break;
    }
    g_pool.w[g_pool.nworkers++] = w;
  }
  if (g_pool.nworkers < need) {
    atomic_store(&g_pool.owner, 0);
    return -1;
  }
  uint32_t job = ++g_pool.job;
  if (job == 0) job = ++g_pool.job; /* 0 is never a job: a fresh worker's ticket */
  g_pool.fn = fn;
  g_pool.arg = arg;
  atomic_store_explicit(&g_pool.waiting, 0, memory_order_relaxed);
  atomic_store(&g_pool.remaining, (uint32_t)nparts);
  atomic_store(&g_pool.claim, (uint64_t)job << 32 | (uint64_t)nparts << 16); /* publishes fn, arg */
  for (size_t i = 0; i < need; i++) {
    lm_pool_worker *w = g_pool.w[i];
    atomic_store(&w->ticket, job); /* seq_cst: pairs with the worker's sleeping store + load */
    if (atomic_load(&w->sleeping)) futex_op(&w->ticket, LM_FUTEX_WAKE, 1);
  }
  lm_pool_take_parts(job);
  for (;;) { /* the parts workers took: spin while they finish, then sleep */
    uint32_t r = atomic_load_explicit(&g_pool.remaining, memory_order_acquire);
    if (!r) break;
    if (spin_while_equal(&g_pool.remaining, r)) continue;
    atomic_store(&g_pool.waiting, 1); /* seq_cst: pairs with the worker's decrement + load */
    r = atomic_load(&g_pool.remaining);
    if (r) futex_op(&g_pool.remaining, LM_FUTEX_WAIT, r);
  }
  atomic_store(&g_pool.owner, 0); /* release: the next owner sees the finished job */
  return 0;
}

void lm_parallel_shutdown(void) {
  int expect = 0;
  if (!atomic_compare_exchange_strong(&g_pool.owner, &expect, 1)) return;
  atomic_store(&g_pool.stop, 1);
  uint32_t job = ++g_pool.job;
  if (job == 0) job = ++g_pool.job;
  for (size_t i = 0; i < g_pool.nworkers; i++) {
    lm_pool_worker *w = g_pool.w[i];
    atomic_store(&w->ticket, job);
    futex_op(&w->ticket, LM_FUTEX_WAKE, 1);
  }
  for (size_t i = 0; i < g_pool.nworkers; i++) {
    pthread_join(g_pool.w[i]->tid, NULL);
    free(g_pool.w[i]);
    g_pool.w[i] = NULL;
  }
  g_pool.nworkers = 0;
  atomic_store(&g_pool.stop, 0);
  atomic_store(&g_pool.owner, 0);
}

size_t lm_parallel_pool_size(void) {
  int expect = 0;
  if (!atomic_compare_exchange_strong(&g_pool.owner, &expect, 1)) return (size_t)-1;
  size_t n = g_pool.nworkers;
  atomic_store(&g_pool.owner, 0);
  return n;
}

static void lm_tasks_part(void *arg, size_t part) { lm_task_run(&((lm_task *)arg)[part]); }

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
  if (lm_pool_exec(threads, lm_tasks_part, tasks) == 0) {
    lm_status first = LM_OK;
    for (size_t i = 0; i < threads && first == LM_OK; i++) first = tasks[i].result;
    return first;
  }
  /* the pool is busy (a concurrent or nested call): threads of this call's own */
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

static void lm_workers_part(void *arg, size_t part) { lm_worker_main(&((lm_worker *)arg)[part]); }

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
  if (lm_pool_exec(nworkers, lm_workers_part, ws) != 0) {
    /* the pool is busy (a concurrent or nested call): threads of this call's own */
    for (size_t i = 1; i < nworkers; i++) started[i] = pthread_create(&tids[i], NULL, lm_worker_main, &ws[i]) == 0;
    lm_worker_main(&ws[0]);
    for (size_t i = 1; i < nworkers; i++)
      if (started[i]) pthread_join(tids[i], NULL);
  }
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
