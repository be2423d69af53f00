// The pool of started worker threads behind lm_parallel_for / lm_parallel_tasks
// (core/src/parallel.c): every range runs exactly once, workers are started once and
// reused, concurrent and nested callers neither deadlock nor share a job, a child of
// fork() runs parallel calls on workers of its own, shutdown joins them and a later call
// starts new ones, and an idle pool burns no CPU.  Runs in the plain, ASan and TSan
// builds (scripts/tsan.sh runs Parallel.*).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

extern "C" {
#include "luminamoon/parallel.h"
}

namespace {

#if defined(__SANITIZE_THREAD__)
constexpr bool kTsan = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kTsan = true;
#else
constexpr bool kTsan = false;
#endif
#else
constexpr bool kTsan = false;
#endif

struct Marks {
  std::vector<std::atomic<int>> hit;
  std::atomic<int> calls{0};
  explicit Marks(size_t n) : hit(n) {}
};

lm_status mark(void *ctx, size_t b, size_t e) {
  auto *m = static_cast<Marks *>(ctx);
  m->calls++;
  for (size_t i = b; i < e; i++) m->hit[i]++;
  return LM_OK;
}

bool all_once(Marks &m) {
  for (auto &h : m.hit)
    if (h.load() != 1) return false;
  return true;
}

lm_status run_marked(int threads, size_t n, int *ranges) {
  Marks m(n);
  lm_exec ex{threads, 1};
  lm_status s = lm_parallel_for(&ex, n, mark, &m);
  if (ranges) *ranges = m.calls.load();
  return s == LM_OK && all_once(m) ? LM_OK : LM_EIO;
}

// One range fails: the call still runs every range and reports it.
lm_status fail_third(void *ctx, size_t b, size_t e) {
  auto *m = static_cast<Marks *>(ctx);
  for (size_t i = b; i < e; i++) m->hit[i]++;
  return b <= 2 && 2 < e ? LM_EUTF8 : LM_OK;
}

}  // namespace

TEST(Parallel, PoolRunsEveryRangeOnceAndReusesItsWorkers) {
  lm_parallel_shutdown();
  EXPECT_EQ(lm_parallel_pool_size(), 0u);
  int ranges = 0;
  ASSERT_EQ(run_marked(2, 1000, &ranges), LM_OK);
  EXPECT_EQ(ranges, 2);
  EXPECT_EQ(lm_parallel_pool_size(), 1u);  // started for the first call, sized to it
  for (int rep = 0; rep < 300; rep++) {
    int t = 1 + rep % 6;
    ASSERT_EQ(run_marked(t, 1 + size_t(rep) * 7, &ranges), LM_OK) << rep;
    EXPECT_EQ(ranges, int(std::min<size_t>(t, 1 + size_t(rep) * 7)));
  }
  EXPECT_EQ(lm_parallel_pool_size(), 5u);  // the largest call (6 threads) less the caller
  Marks m(64);
  lm_exec ex{4, 1};
  EXPECT_EQ(lm_parallel_for(&ex, 64, fail_third, &m), LM_EUTF8);
  EXPECT_TRUE(all_once(m));
  EXPECT_EQ(lm_parallel_for(&ex, 64, nullptr, nullptr), LM_EINVAL);
}

TEST(Parallel, PoolConcurrentCallersAndNestedCallsDoNotDeadlock) {
  std::atomic<int> bad{0};
  std::vector<std::thread> ts;
  for (int k = 0; k < 4; k++)
    ts.emplace_back([&bad, k] {
      for (int rep = 0; rep < 150; rep++)
        if (run_marked(2 + (k + rep) % 3, 500 + size_t(rep), nullptr) != LM_OK) bad++;
    });
  for (auto &t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);

  // fn itself calls lm_parallel_for (the pool is owned by the outer call)
  struct Nest {
    std::atomic<int> bad{0};
  } nest;
  auto outer = [](void *ctx, size_t b, size_t e) -> lm_status {
    auto *n = static_cast<Nest *>(ctx);
    for (size_t i = b; i < e; i++)
      if (run_marked(3, 300, nullptr) != LM_OK) n->bad++;
    return LM_OK;
  };
  lm_exec ex{3, 1};
  EXPECT_EQ(lm_parallel_for(&ex, 6, outer, &nest), LM_OK);
  EXPECT_EQ(nest.bad.load(), 0);

  // lm_parallel_tasks shares the pool with lm_parallel_for
  std::vector<std::atomic<int>> seen(2000);
  auto task = [](void *ctx, size_t w, size_t t) -> lm_status {
    auto *s = static_cast<std::vector<std::atomic<int>> *>(ctx);
    (*s)[t]++;
    return w < 4 ? LM_OK : LM_EINVAL;
  };
  EXPECT_EQ(lm_parallel_tasks(4, seen.size(), task, &seen), LM_OK);
  for (auto &x : seen) EXPECT_EQ(x.load(), 1);
}

TEST(Parallel, PoolForkedChildStartsItsOwnWorkers) {
  ASSERT_EQ(run_marked(4, 10000, nullptr), LM_OK);  // the parent's pool is started
  ASSERT_GE(lm_parallel_pool_size(), 3u);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(60);  // a child waiting on the parent's workers would hang: fail it instead
    int ok = lm_parallel_pool_size() == 0;
    if (kTsan) _exit(ok ? 0 : 3);  // TSan refuses to start threads after a multi-threaded fork
    for (int rep = 0; rep < 50 && ok; rep++) ok = run_marked(3, 5000, nullptr) == LM_OK;
    ok = ok && lm_parallel_pool_size() == 2;
    _exit(ok ? 0 : 3);
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st)) << "child killed by signal " << (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  EXPECT_EQ(WEXITSTATUS(st), 0);
  EXPECT_EQ(run_marked(4, 10000, nullptr), LM_OK);  // the parent's pool still works
}

TEST(Parallel, PoolShutdownJoinsAndAnIdlePoolUsesNoCpu) {
  ASSERT_EQ(run_marked(3, 1000, nullptr), LM_OK);
  EXPECT_GE(lm_parallel_pool_size(), 2u);
  // idle: the workers sleep after a short spin; the process uses (almost) no CPU
  rusage a{}, b{};
  usleep(20000);
  getrusage(RUSAGE_SELF, &a);
  usleep(300000);
  getrusage(RUSAGE_SELF, &b);
  auto us = [](const rusage &r) {
    return (r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1000000L + r.ru_utime.tv_usec + r.ru_stime.tv_usec;
  };
  EXPECT_LT(us(b) - us(a), 30000L) << "CPU microseconds used by an idle pool in 300 ms";
  lm_parallel_shutdown();
  EXPECT_EQ(lm_parallel_pool_size(), 0u);
  lm_parallel_shutdown();  // twice is fine
  ASSERT_EQ(run_marked(2, 1000, nullptr), LM_OK);  // a later call starts new workers
  EXPECT_EQ(lm_parallel_pool_size(), 1u);
  lm_parallel_shutdown();
}
