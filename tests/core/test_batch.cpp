// The batch runner's scheduling (issue 21 item 5) and the fused pipeline's
// retained memory (issue 21 item 4):
//  - lm_batch_plan cuts by bytes (a heavy document gets a range of its own,
//    tiny ones share), picks workers by weight, covers every item once;
//  - lm_parallel_tasks hands out every task once, reports the lowest failed
//    task, and really runs on several workers (checked with a hook in which
//    worker 0 waits for another worker: deterministic, no timing);
//  - FusedPipeline on 256 documents of 100 KB with 2 threads uses both
//    workers;
//  - after a batch of 64 x 1 MB documents the pipeline keeps a bounded number
//    of bytes (lm_fused_retained_bytes), and the PII masker's pool likewise.
#include <gtest/gtest.h>

#include "docs_builder.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "luminamoon/batch.h"
#include "luminamoon/parallel.h"
#include "luminamoon/pipeline.h"
}

namespace {

using lmtest::Docs;  // docs_builder.h

// Prose-like text of about `bytes` bytes (sentences of common words), distinct per seed.
std::string prose(size_t bytes, uint32_t seed) {
  static const char *words[] = {"the",  "data",   "model", "and",   "of",    "with", "text",  "is",
                                "that", "server", "file",  "which", "from",  "this", "have",  "for",
                                "will", "their",  "when",  "about", "there", "would", "other", "into"};
  std::mt19937 rng(seed);
  std::string s;
  s.reserve(bytes + 64);
  size_t in_sentence = 0;
  while (s.size() < bytes) {
    const char *w = words[rng() % (sizeof words / sizeof *words)];
    if (in_sentence == 0) {
      s += static_cast<char>(w[0] - 32);
      s += w + 1;
    } else {
      s += ' ';
      s += w;
    }
    if (++in_sentence >= 8 + rng() % 10) {
      s += rng() % 4 ? ". " : ".\n";
      in_sentence = 0;
    }
  }
  s += " id" + std::to_string(seed) + ".\n";
  return s;
}

TEST(BatchPlan, CutsByBytesAndCoversEveryItemOnce) {
  // 512 heavy (100 KB) then 512 tiny (100 B) documents on 2 threads
  std::vector<int64_t> prefix{0};
  for (int i = 0; i < 1024; i++) prefix.push_back(prefix.back() + (i < 512 ? 100000 : 100));
  lm_batch_plan p;
  lm_batch_plan_init(&p);
  lm_exec ex = {2, 0};
  ASSERT_EQ(lm_batch_plan_make(&p, prefix.data(), 1024, &ex, 256), LM_OK);
  EXPECT_EQ(p.nworkers, 2u);
  ASSERT_GE(p.nranges, 16u);  // ~8 ranges per worker at least
  EXPECT_EQ(p.start[0], 0u);
  EXPECT_EQ(p.start[p.nranges], 1024u);
  size_t max_w = 0;
  for (size_t r = 0; r < p.nranges; r++) {
    ASSERT_LT(p.start[r], p.start[r + 1]);  // no empty range
    size_t w = 0;
    for (size_t i = p.start[r]; i < p.start[r + 1]; i++)
      w += static_cast<size_t>(prefix[i + 1] - prefix[i]) + LM_BATCH_ITEM_COST;
    max_w = std::max(max_w, w);
    EXPECT_LE(p.start[r + 1] - p.start[r], 256u);
  }
  EXPECT_LE(max_w, LM_BATCH_MAX_RANGE_BYTES + 100000 + LM_BATCH_ITEM_COST);
  // the tiny tail is not cut into as many ranges as the heavy head: ranges by weight, not by count
  size_t heavy_ranges = 0;
  for (size_t r = 0; r < p.nranges; r++) heavy_ranges += p.start[r] < 512;
  EXPECT_GT(heavy_ranges, p.nranges - heavy_ranges);

  // a document above the target weight has a range of its own
  std::vector<int64_t> pre2{0, 10, 20, 20 + 5000000, 5000030, 5000040};
  ASSERT_EQ(lm_batch_plan_make(&p, pre2.data(), 5, &ex, 0), LM_OK);
  bool alone = false;
  for (size_t r = 0; r < p.nranges; r++) alone |= p.start[r] == 2 && p.start[r + 1] == 3;
  EXPECT_TRUE(alone);

  // one thread: one worker; a tiny batch on 8 threads: one worker (not worth a thread)
  lm_exec one = {1, 0}, eight = {8, 0};
  ASSERT_EQ(lm_batch_plan_make(&p, prefix.data(), 1024, &one, 64), LM_OK);
  EXPECT_EQ(p.nworkers, 1u);
  std::vector<int64_t> small{0, 5, 9, 12};
  ASSERT_EQ(lm_batch_plan_make(&p, small.data(), 3, &eight, 0), LM_OK);
  EXPECT_EQ(p.nworkers, 1u);
  EXPECT_EQ(p.nranges, 1u);
  // an explicit min_items_per_thread = 1 forces workers even on tiny input (tests use this)
  lm_exec forced = {3, 1};
  ASSERT_EQ(lm_batch_plan_make(&p, small.data(), 3, &forced, 0), LM_OK);
  EXPECT_EQ(p.nworkers, 3u);
  EXPECT_EQ(p.nranges, 3u);
  // empty input, bad input
  ASSERT_EQ(lm_batch_plan_make(&p, small.data(), 0, &ex, 0), LM_OK);
  EXPECT_EQ(p.nranges, 0u);
  std::vector<int64_t> bad{0, 5, 3};
  EXPECT_EQ(lm_batch_plan_make(&p, bad.data(), 2, &ex, 0), LM_EINVAL);
  EXPECT_EQ(lm_batch_plan_make(nullptr, small.data(), 3, &ex, 0), LM_EINVAL);
  lm_batch_plan_free(&p);
}

// With more than one worker the ranges are handed out heaviest first (ties in range order): a batch that ends
// with a few large documents (the shared corpus's four 2 MB ones) starts them first instead of last.
TEST(BatchPlan, HandsOutHeaviestRangesFirst) {
  // 600 small documents, then 4 large ones, then 20 small
  std::vector<int64_t> prefix{0};
  for (int i = 0; i < 624; i++) prefix.push_back(prefix.back() + (i >= 600 && i < 604 ? 2000000 : 700));
  lm_batch_plan p;
  lm_batch_plan_init(&p);
  lm_exec ex = {2, 0};
  ASSERT_EQ(lm_batch_plan_make(&p, prefix.data(), 624, &ex, 0), LM_OK);
  ASSERT_EQ(p.nworkers, 2u);
  ASSERT_TRUE(p.ordered);
  auto weight = [&](size_t r) {
    return static_cast<size_t>(prefix[p.start[r + 1]] - prefix[p.start[r]]) +
           (p.start[r + 1] - p.start[r]) * LM_BATCH_ITEM_COST;
  };
  std::vector<size_t> seen(p.nranges, 0);
  for (size_t k = 0; k < p.nranges; k++) {
    ASSERT_LT(p.order[k], p.nranges);
    seen[p.order[k]]++;
    if (k) {
      size_t a = weight(p.order[k - 1]), b = weight(p.order[k]);
      EXPECT_TRUE(a > b || (a == b && p.order[k - 1] < p.order[k])) << k;
    }
  }
  for (size_t c : seen) EXPECT_EQ(c, 1u);  // a permutation
  for (size_t k = 0; k < 4; k++) EXPECT_EQ(p.start[p.order[k]], 600 + k);  // the four large documents first
  // one worker: range order (no permutation kept)
  lm_exec one = {1, 0};
  ASSERT_EQ(lm_batch_plan_make(&p, prefix.data(), 624, &one, 0), LM_OK);
  EXPECT_FALSE(p.ordered);
  lm_batch_plan_free(&p);
}

struct TaskLog {
  std::vector<std::atomic<int>> seen;
  std::atomic<int> other_worker{0};
  size_t fail_from = SIZE_MAX;
  explicit TaskLog(size_t n) : seen(n) {}
};

lm_status log_task(void *ctx, size_t worker, size_t task) {
  TaskLog *l = static_cast<TaskLog *>(ctx);
  l->seen[task]++;
  if (worker) l->other_worker = 1;
  if (task >= l->fail_from) return task == l->fail_from ? LM_EUTF8 : LM_EIO;
  return LM_OK;
}

TEST(ParallelTasks, EveryTaskOnceAndLowestFailure) {
  for (size_t workers : {1, 2, 5}) {
    TaskLog l(1000);
    ASSERT_EQ(lm_parallel_tasks(workers, 1000, log_task, &l), LM_OK);
    for (size_t t = 0; t < 1000; t++) ASSERT_EQ(l.seen[t].load(), 1) << t;
  }
  TaskLog l(1000);
  l.fail_from = 10;  // task 10 fails with EUTF8, later ones (if run) with EIO
  EXPECT_EQ(lm_parallel_tasks(3, 1000, log_task, &l), LM_EUTF8);
  for (size_t t = 0; t < 10; t++) EXPECT_EQ(l.seen[t].load(), 1);
  EXPECT_EQ(lm_parallel_tasks(2, 5, nullptr, nullptr), LM_EINVAL);
  EXPECT_EQ(lm_parallel_tasks(2, 0, log_task, &l), LM_OK);
}

// Hook: record the workers that ran ranges; worker 0 waits (up to 60 s) at its
// first range until another worker has started one.  With one thread the wait
// times out and the test sees a single worker; with two it passes at once.
struct HookState {
  std::mutex mu;
  std::set<size_t> workers;
  std::atomic<bool> other{false};
  std::atomic<bool> waited{false};
  size_t ranges = 0;
};

void hook_fn(void *arg, size_t worker, size_t) {
  HookState *h = static_cast<HookState *>(arg);
  {
    std::lock_guard<std::mutex> lk(h->mu);
    h->workers.insert(worker);
    h->ranges++;
  }
  if (worker) h->other = true;
  if (worker == 0 && !h->waited.exchange(true)) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!h->other && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

struct Fused {
  lm_cleaner *c = nullptr;
  lm_quality *q = nullptr;
  lm_dedup *d = nullptr;
  lm_pii_masker *p = nullptr;
  lm_fused *f = nullptr;
  explicit Fused(bool quality = true, lm_pii_mode mode = LM_PII_MODE_DATATROVE) {
    EXPECT_EQ(lm_cleaner_create(nullptr, &c), LM_OK);
    if (quality) {
      EXPECT_EQ(lm_quality_create(nullptr, &q), LM_OK);
    }
    lm_dedup_params dp;
    lm_dedup_params_default(&dp);
    EXPECT_EQ(lm_dedup_create(&dp, &d), LM_OK);
    lm_pii_params pp;
    lm_pii_params_default(&pp, mode);
    EXPECT_EQ(lm_pii_create(&pp, &p), LM_OK);
    lm_fused_stages st;
    std::memset(&st, 0, sizeof st);  // stages not named here are off
    st.cleaner = c;
    st.quality = q;
    st.dedup = d;
    st.pii = p;
    EXPECT_EQ(lm_fused_create(&st, &f), LM_OK);
  }
  ~Fused() {
    lm_fused_destroy(f);
    lm_cleaner_destroy(c);
    lm_quality_destroy(q);
    lm_dedup_destroy(d);
    lm_pii_destroy(p);
  }
};

std::string result_key(const lm_batch_result &r) {
  std::string k(reinterpret_cast<const char *>(r.data), r.data_len);
  for (size_t i = 0; i < r.n_out; i++) k += "|" + std::to_string(r.source_index[i]);
  for (size_t i = 0; i < r.n_in; i++) k += "," + std::to_string(r.reasons[i]);
  return k;
}

TEST(BatchRunner, FusedBatchOf256x100KBUsesBothThreads) {
  Docs docs;
  for (uint32_t i = 0; i < 256; i++) {
    std::string t = prose(100000, i);
    if (i % 16 == 3) t += " mail me at someone@example.org or 8.8.8.8\n";
    docs.add(t);
  }
  docs.add(docs.data.substr(0, static_cast<size_t>(docs.off[1])));  // an exact duplicate of document 0
  lm_docs v = docs.view();
  // (the output equals one thread's: FusedPipeline.ThreadCountInvariance; here: both workers run ranges)
  Fused two;
  HookState h;
  lm_batch_set_test_hook(hook_fn, &h);
  lm_batch_result r;
  lm_batch_result_init(&r);
  lm_exec ex2 = {2, 0};
  lm_status s = lm_fused_run(two.f, &v, &r, &ex2);
  lm_batch_set_test_hook(nullptr, nullptr);
  ASSERT_EQ(s, LM_OK);
  lm_fused_run_info info;
  ASSERT_EQ(lm_fused_last_run(two.f, &info), LM_OK);
  EXPECT_EQ(info.workers1, 2u);
  EXPECT_GE(info.ranges1, 16u);
  EXPECT_EQ(h.workers.size(), 2u) << "ranges run by one worker only";
  EXPECT_TRUE(h.other.load());
  EXPECT_GT(r.n_out, 128u);  // the prose passes the default quality rules
  EXPECT_EQ(r.reasons[256], LM_REASON_DUPLICATE);
  lm_batch_result_free(&r);
}

TEST(BatchRunner, FusedRetainedMemoryIsBoundedAfterHugeBatch) {
  Docs small;
  for (uint32_t i = 0; i < 200; i++) small.add(prose(2000, 1000 + i));
  lm_docs sv = small.view();
  Docs big;  // 64 x 1 MB
  for (uint32_t i = 0; i < 64; i++) big.add(prose(1 << 20, 5000 + i));
  lm_docs bv = big.view();
  // clean + dedup + PII: all 64 MB go through the arenas of both phases (quality would drop
  // most of this synthetic prose; its scratch is freed after such a batch, see pipeline.h)
  for (bool quality : {false}) {
    Fused fp(quality);
    lm_batch_result r;
    lm_batch_result_init(&r);
    lm_exec ex = {2, 0};
    ASSERT_EQ(lm_fused_run(fp.f, &sv, &r, &ex), LM_OK);
    size_t after_small = 0;
    ASSERT_EQ(lm_fused_retained_bytes(fp.f, &after_small), LM_OK);
    EXPECT_GT(after_small, 0u);
    ASSERT_EQ(lm_fused_run(fp.f, &bv, &r, &ex), LM_OK);
    if (!quality) {
      EXPECT_GT(r.data_len, (size_t)60 << 20);  // the batch did produce ~64 MB of output
    }
    size_t after_big = 0;
    ASSERT_EQ(lm_fused_retained_bytes(fp.f, &after_big), LM_OK);
    // two arena pools, each trimmed to LM_BATCH_RETAIN_BYTES, plus bookkeeping
    EXPECT_LE(after_big, 2 * LM_BATCH_RETAIN_BYTES + ((size_t)64 << 10)) << quality;
    // and again a small batch works and stays small
    ASSERT_EQ(lm_fused_run(fp.f, &sv, &r, &ex), LM_OK);
    size_t again = 0;
    ASSERT_EQ(lm_fused_retained_bytes(fp.f, &again), LM_OK);
    EXPECT_LE(again, 2 * LM_BATCH_RETAIN_BYTES + ((size_t)64 << 10));
    EXPECT_EQ(lm_fused_retained_bytes(nullptr, &again), LM_EINVAL);
    EXPECT_EQ(lm_fused_retained_bytes(fp.f, nullptr), LM_EINVAL);
    lm_batch_result_free(&r);
  }
}

TEST(BatchRunner, PoolTrimKeepsAtMostTheBound) {
  lm_batch_pool p = {nullptr, 0};
  ASSERT_EQ(lm_batch_pool_get(&p, 10), LM_OK);
  for (size_t i = 0; i < 10; i++) ASSERT_EQ(lm_bytebuf_reserve(&p.arenas[i], (i + 1) << 20, 16), LM_OK);
  EXPECT_GE(lm_batch_pool_bytes(&p), (size_t)55 << 20);
  lm_batch_pool_trim(&p, (size_t)8 << 20);
  size_t caps = 0;
  for (size_t i = 0; i < p.n; i++) {
    EXPECT_LE(p.arenas[i].cap, (size_t)2 << 20);  // above a quarter of the bound: freed
    caps += p.arenas[i].cap;
  }
  EXPECT_LE(caps, (size_t)8 << 20);
  EXPECT_EQ(lm_batch_pool_bytes(&p), caps + p.n * sizeof(lm_bytebuf));
  ASSERT_EQ(lm_batch_pool_get(&p, 3), LM_OK);  // reuse: lengths reset
  for (size_t i = 0; i < p.n; i++) EXPECT_EQ(p.arenas[i].len, 0u);
  lm_batch_pool_trim(&p, 0);
  EXPECT_EQ(lm_batch_pool_bytes(&p), 0u);
  lm_batch_pool_free(&p);
}

// PII on the runner: heavy documents then tiny ones, datatrove cycling across
// documents (a counting pass when there are several ranges): same output and
// cycle on 1 and 2..4 threads.
TEST(BatchRunner, PiiHeavyThenTinyCyclingMatchesOneThread) {
  Docs docs;
  for (uint32_t i = 0; i < 40; i++) {
    std::string t = prose(60000, 77 + i);
    for (int k = 0; k < 1 + static_cast<int>(i % 3); k++) t += " a" + std::to_string(k) + "@b.org 1.2.3." + std::to_string(k);
    docs.add(t);
  }
  for (uint32_t i = 0; i < 400; i++) docs.add(i % 5 ? "x@y.com and 9.9.9.9" : "nothing");
  lm_docs v = docs.view();
  std::string ref;
  uint64_t ref_cycle[LM_PII_TYPE_COUNT];
  for (int threads : {1, 2, 4}) {
    lm_pii_params pp;
    lm_pii_params_default(&pp, LM_PII_MODE_DATATROVE);
    lm_pii_masker *m = nullptr;
    ASSERT_EQ(lm_pii_create(&pp, &m), LM_OK);
    lm_batch_result r;
    lm_batch_result_init(&r);
    lm_exec ex = {threads, 0};
    for (int rep = 0; rep < 2; rep++) ASSERT_EQ(lm_pii_run(m, &v, &r, &ex), LM_OK);
    uint64_t cyc[LM_PII_TYPE_COUNT];
    ASSERT_EQ(lm_pii_get_cycle(m, cyc), LM_OK);
    if (threads == 1) {
      ref = result_key(r);
      memcpy(ref_cycle, cyc, sizeof cyc);
      EXPECT_GT(cyc[LM_PII_EMAIL], 400u);
    } else {
      EXPECT_EQ(result_key(r), ref) << threads;
      EXPECT_EQ(memcmp(cyc, ref_cycle, sizeof cyc), 0) << threads;
    }
    lm_batch_result_free(&r);
    lm_pii_destroy(m);
  }
}

}  // namespace
