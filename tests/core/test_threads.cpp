// Multi-threaded stress tests for the C core, written to run under
// ThreadSanitizer (scripts/tsan.sh) as well as in the plain and ASan builds:
//  - StringTensor builder + layout conversions + ops on 2..8 threads give the
//    same results as one thread (and the naive reference);
//  - one finished tensor read concurrently from several threads (ops, get,
//    slice/take/compact: the atomic buffer reference counts);
//  - TextCleaner / QualityFilter / PIIMasker batch runs with many threads equal
//    one thread, and their documented thread-safe per-document functions run
//    concurrently on one shared object;
//  - independent StreamDeduplicators (in memory and with a WAL) used from
//    concurrent threads, each running its own multi-threaded batches;
//  - lm_parallel_for called concurrently from several threads (reentrancy).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>

extern "C" {
#include "luminamoon/clean.h"
#include "luminamoon/dedup.h"
#include "luminamoon/hash.h"
#include "luminamoon/parallel.h"
#include "luminamoon/pii.h"
#include "luminamoon/quality.h"
#include "luminamoon/string_tensor.h"
}

namespace {

std::vector<std::string> random_strings(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  static const char *words[] = {"the", "cat", "sat", "on", "a", "mat", "caf\xc3\xa9", "\xe6\x97\xa5",
                                "prefix", "alpha", "beta", "gamma"};
  std::vector<std::string> out(n);
  for (auto &s : out) {
    size_t k = rng() % 8;
    if (rng() % 5 == 0) k += 20;
    for (size_t j = 0; j < k; j++) {
      if (j) s += ' ';
      s += words[rng() % 12];
    }
  }
  return out;
}

// Documents with dirt for the cleaner, prose for quality, PII for the masker.
std::vector<std::string> random_docs(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  static const char *parts[] = {
      "The quick brown fox jumps over the lazy dog. ", "It was the best of times, and that was that.\n",
      "mail me at john.doe@example.com today. ", "server 8.8.8.8 and 10.0.0.1 answer. ",
      "call +1 (415) 555-2671 now. ", "card 4111 1111 1111 1111 ok. ", "\xff\xfe bad bytes ",
      "ctrl\x01\x02 chars\xc2\xa0nbsp  spaces   \n\n\n\n\n", "iban DE89 3704 0044 0532 0130 00. ",
      "We have to go to the market with the children.\n"};
  std::vector<std::string> out(n);
  for (auto &s : out) {
    size_t k = 1 + rng() % 30;
    for (size_t j = 0; j < k; j++) s += parts[rng() % 10];
  }
  return out;
}

struct Docs {
  std::vector<int64_t> offs{0};
  std::string data;
  explicit Docs(const std::vector<std::string> &v) {
    for (auto &s : v) {
      data += s;
      offs.push_back((int64_t)data.size());
    }
  }
  lm_docs docs() const { return lm_docs{offs.data(), (const uint8_t *)data.data(), offs.size() - 1, data.size()}; }
};

// The batch result flattened to compare runs.
std::string flatten(const lm_batch_result &r) {
  std::string s;
  for (size_t i = 0; i < r.n_in; i++) s += std::to_string(r.reasons[i]) + ",";
  s += "|";
  for (size_t i = 0; i < r.n_out; i++) {
    s += std::to_string(r.source_index[i]) + ":";
    s.append((const char *)r.data + r.offsets[i], (size_t)(r.offsets[i + 1] - r.offsets[i]));
    s += "\x1f";
  }
  return s;
}

lm_string_tensor *build(const std::vector<std::string> &v, size_t block = 4096) {
  lm_builder *b = nullptr;
  EXPECT_EQ(lm_builder_create(block, 0, &b), LM_OK);
  for (auto &s : v) EXPECT_EQ(lm_builder_append(b, (const uint8_t *)s.data(), s.size()), LM_OK);
  lm_string_tensor *t = nullptr;
  EXPECT_EQ(lm_builder_finish(b, &t), LM_OK);
  lm_builder_destroy(b);
  return t;
}

std::vector<size_t> sizes_of(const lm_string_tensor *t) {
  std::vector<size_t> s(t->nbuffers + 1);
  for (uint32_t i = 0; i < t->nbuffers; i++) s[i] = lm_buffer_size(t->buffers[i]);
  return s;
}

}  // namespace

TEST(Threads, LayoutAndOpsSameOnAnyThreadCount) {
  auto strs = random_strings(20000, 1);
  lm_string_tensor *t = build(strs, 1 << 12);
  const size_t n = t->n;
  auto sizes = sizes_of(t);
  lm_payloads p{t->buffer_data, sizes.data(), t->nbuffers};
  uint64_t total = 0;
  ASSERT_EQ(lm_views_total_bytes(t->views, n, &total), LM_OK);
  // one-thread results, checked against the naive reference
  std::vector<int32_t> o1(n + 1);
  std::vector<uint8_t> d1(total + 1);
  ASSERT_EQ(lm_views_to_offsets32(t->views, n, t->buffer_data, o1.data(), d1.data(), nullptr), LM_OK);
  std::string concat;
  for (auto &s : strs) concat += s;
  ASSERT_EQ(std::string((const char *)d1.data(), total), concat);
  std::vector<uint64_t> h1(n);
  ASSERT_EQ(lm_views_hash64(t->views, n, &p, 5, h1.data(), nullptr), LM_OK);
  for (size_t i = 0; i < n; i += 97) EXPECT_EQ(h1[i], lm_hash64(strs[i].data(), strs[i].size(), 5));
  std::vector<uint8_t> m1(n);
  ASSERT_EQ(lm_views_prefix_match(t->views, n, &p, (const uint8_t *)"the", 3, m1.data(), nullptr), LM_OK);
  for (size_t i = 0; i < n; i++) ASSERT_EQ(m1[i], strs[i].compare(0, 3, "the") == 0 ? 1 : 0);

  for (int threads : {2, 3, 5, 8}) {
    SCOPED_TRACE(threads);
    lm_exec ex{threads, 64};
    std::vector<int32_t> o(n + 1);
    std::vector<uint8_t> d(total + 1);
    ASSERT_EQ(lm_views_to_offsets32(t->views, n, t->buffer_data, o.data(), d.data(), &ex), LM_OK);
    EXPECT_EQ(o, o1);
    EXPECT_EQ(memcmp(d.data(), d1.data(), total), 0);
    std::vector<int64_t> o64(n + 1);
    ASSERT_EQ(lm_views_to_offsets64(t->views, n, t->buffer_data, o64.data(), d.data(), &ex), LM_OK);
    for (size_t i = 0; i <= n; i++) ASSERT_EQ(o64[i], o1[i]);
    std::vector<lm_string_view> v(n);
    ASSERT_EQ(lm_views_from_offsets32(o.data(), n, d.data(), total, 0, v.data(), &ex), LM_OK);
    std::vector<uint64_t> h(n);
    ASSERT_EQ(lm_views_hash64(t->views, n, &p, 5, h.data(), &ex), LM_OK);
    EXPECT_EQ(h, h1);
    ASSERT_EQ(lm_o32_hash64(o.data(), n, d.data(), 5, h.data(), &ex), LM_OK);
    EXPECT_EQ(h, h1);
    std::vector<uint8_t> m(n);
    ASSERT_EQ(lm_views_prefix_match(t->views, n, &p, (const uint8_t *)"the", 3, m.data(), &ex), LM_OK);
    EXPECT_EQ(m, m1);
    ASSERT_EQ(lm_o64_prefix_match(o64.data(), n, d.data(), (const uint8_t *)"the", 3, m.data(), &ex), LM_OK);
    EXPECT_EQ(m, m1);
    ASSERT_EQ(lm_views_equal_scalar(t->views, n, &p, (const uint8_t *)strs[7].data(), strs[7].size(), m.data(), &ex),
              LM_OK);
    for (size_t i = 0; i < n; i++) ASSERT_EQ(m[i], strs[i] == strs[7] ? 1 : 0);
    std::vector<int64_t> tok(n * 16), lens(n), tok1(n * 16), lens1(n);
    ASSERT_EQ(lm_o32_pad_bytes(o.data(), n, d.data(), 16, 0, 256, 257, tok.data(), lens.data(), &ex), LM_OK);
    ASSERT_EQ(lm_o32_pad_bytes(o1.data(), n, d1.data(), 16, 0, 256, 257, tok1.data(), lens1.data(), nullptr), LM_OK);
    EXPECT_EQ(tok, tok1);
    EXPECT_EQ(lens, lens1);
    std::vector<int64_t> idx(n);
    for (size_t k = 0; k < n; k++) idx[k] = (int64_t)((k * 7919) % n);
    std::vector<int32_t> go(n + 1);
    ASSERT_EQ(lm_o32_gather_offsets(o.data(), n, idx.data(), n, go.data()), LM_OK);
    std::vector<uint8_t> gd((size_t)go[n] + 1);
    ASSERT_EQ(lm_o32_gather_data(o.data(), d.data(), idx.data(), n, go.data(), gd.data(), &ex), LM_OK);
    for (size_t k = 0; k < n; k += 101)
      ASSERT_EQ(std::string((const char *)gd.data() + go[k], (size_t)(go[k + 1] - go[k])), strs[idx[k]]);
  }
  lm_st_destroy(t);
}

TEST(Threads, ConcurrentReadOnlyUseOfOneTensor) {
  auto strs = random_strings(6000, 2);
  lm_string_tensor *t = build(strs, 1 << 10);
  const size_t n = t->n;
  auto sizes = sizes_of(t);
  std::vector<uint64_t> want(n);
  for (size_t i = 0; i < n; i++) want[i] = lm_hash64(strs[i].data(), strs[i].size(), 9);
  std::atomic<int> failures{0};
  auto worker = [&](int id) {
    lm_payloads p{t->buffer_data, sizes.data(), t->nbuffers};
    lm_exec ex{1 + id % 3, 256};  // some workers start threads of their own
    for (int round = 0; round < 4; round++) {
      std::vector<uint64_t> h(n);
      if (lm_views_hash64(t->views, n, &p, 9, h.data(), &ex) != LM_OK || h != want) failures++;
      for (size_t i = (size_t)id; i < n; i += 53) {
        const uint8_t *d;
        uint32_t l;
        if (lm_st_get(t, i, &d, &l) != LM_OK || std::string((const char *)d, l) != strs[i]) failures++;
      }
      // views sharing the payload: retain/release of the buffers from many threads
      lm_string_tensor *sl = nullptr, *tk = nullptr, *cp = nullptr;
      std::vector<int64_t> idx(n / 2);
      for (size_t k = 0; k < idx.size(); k++) idx[k] = (int64_t)((k * 31 + (size_t)id) % n);
      std::vector<uint8_t> mask(n);
      for (size_t k = 0; k < n; k++) mask[k] = (uint8_t)((k + (size_t)id) % 3 == 0);
      if (lm_st_slice(t, (size_t)id, n - (size_t)id, &sl) != LM_OK) failures++;
      if (lm_st_take(t, idx.data(), idx.size(), &tk) != LM_OK) failures++;
      if (lm_st_compact(t, mask.data(), &cp) != LM_OK) failures++;
      for (size_t k = 0; tk && k < idx.size(); k += 17) {
        const uint8_t *d;
        uint32_t l;
        if (lm_st_get(tk, k, &d, &l) != LM_OK || std::string((const char *)d, l) != strs[idx[k]]) failures++;
      }
      lm_st_destroy(sl);
      lm_st_destroy(cp);
      // this worker's take outlives nothing: destroyed while others still read t
      lm_st_destroy(tk);
    }
  };
  std::vector<std::thread> ts;
  for (int i = 0; i < 6; i++) ts.emplace_back(worker, i);
  for (auto &th : ts) th.join();
  EXPECT_EQ(failures.load(), 0);
  // a slice that outlives its parent keeps the payload alive
  lm_string_tensor *sl = nullptr;
  ASSERT_EQ(lm_st_slice(t, 10, 20, &sl), LM_OK);
  lm_st_destroy(t);
  std::vector<std::thread> readers;
  for (int i = 0; i < 3; i++)
    readers.emplace_back([&] {
      for (size_t k = 0; k < 10; k++) {
        const uint8_t *d;
        uint32_t l;
        if (lm_st_get(sl, k, &d, &l) != LM_OK || std::string((const char *)d, l) != strs[10 + k]) failures++;
      }
    });
  for (auto &th : readers) th.join();
  lm_st_destroy(sl);
  EXPECT_EQ(failures.load(), 0);
}

TEST(Threads, StageBatchesWithManyThreadsEqualOneThread) {
  auto docs = random_docs(1500, 3);
  Docs in(docs);
  lm_docs d = in.docs();
  lm_cleaner *cl = nullptr;
  ASSERT_EQ(lm_cleaner_create(nullptr, &cl), LM_OK);
  lm_quality_params qp;
  ASSERT_EQ(lm_quality_params_default(&qp), LM_OK);
  qp.gq_min_doc_words = 5;
  qp.c4_min_sentences = 1;
  lm_quality *q = nullptr;
  ASSERT_EQ(lm_quality_create(&qp, &q), LM_OK);
  lm_pii_masker *pm = nullptr, *pd = nullptr;
  ASSERT_EQ(lm_pii_create(nullptr, &pm), LM_OK);
  lm_pii_params pp;
  ASSERT_EQ(lm_pii_params_default(&pp, LM_PII_MODE_DATATROVE), LM_OK);
  ASSERT_EQ(lm_pii_create(&pp, &pd), LM_OK);

  auto run_all = [&](int threads) {
    lm_exec ex{threads, 1};
    std::string s;
    lm_batch_result r;
    lm_batch_result_init(&r);
    EXPECT_EQ(lm_cleaner_run(cl, &d, &r, &ex), LM_OK);
    s += flatten(r) + "#";
    EXPECT_EQ(lm_quality_run(q, &d, &r, &ex), LM_OK);
    size_t kept = r.n_out;
    s += flatten(r) + "#";
    EXPECT_EQ(lm_pii_run(pm, &d, &r, &ex), LM_OK);
    s += flatten(r) + "#";
    EXPECT_EQ(lm_pii_reset_counters(pd), LM_OK);  // datatrove cycling: start each run alike
    EXPECT_EQ(lm_pii_run(pd, &d, &r, &ex), LM_OK);
    s += flatten(r);
    lm_batch_result_free(&r);
    EXPECT_GT(kept, 0u);
    return s;
  };
  std::string one = run_all(1);
  for (int threads : {2, 4, 8, 16}) EXPECT_EQ(run_all(threads), one) << threads << " threads";

  // the documented thread-safe per-document entry points, on shared objects
  std::vector<std::string> want_clean(docs.size()), want_pii(docs.size());
  std::vector<int32_t> want_q(docs.size());
  {
    lm_quality_scratch *sc = nullptr;
    ASSERT_EQ(lm_quality_scratch_create(&sc), LM_OK);
    for (size_t i = 0; i < docs.size(); i++) {
      std::vector<uint8_t> out(lm_clean_bound(docs[i].size()) + 1);
      size_t ol = 0;
      ASSERT_EQ(lm_clean_text(cl, (const uint8_t *)docs[i].data(), docs[i].size(), out.data(), out.size(), &ol,
                              nullptr, nullptr),
                LM_OK);
      want_clean[i].assign((const char *)out.data(), ol);
      lm_quality_doc_result qr;
      ASSERT_EQ(lm_quality_check(q, sc, (const uint8_t *)docs[i].data(), docs[i].size(), &qr, nullptr), LM_OK);
      want_q[i] = qr.reason;
      lm_pii_buf b{nullptr, 0, 0};
      ASSERT_EQ(lm_pii_mask_doc(pm, (const uint8_t *)docs[i].data(), docs[i].size(), nullptr, &b, nullptr), LM_OK);
      want_pii[i].assign((const char *)b.data, b.len);
      lm_pii_buf_free(&b);
    }
    lm_quality_scratch_destroy(sc);
  }
  std::atomic<int> failures{0};
  auto worker = [&](int id) {
    lm_quality_scratch *sc = nullptr;
    if (lm_quality_scratch_create(&sc) != LM_OK) {
      failures++;
      return;
    }
    lm_clean_counters cc;
    memset(&cc, 0, sizeof cc);
    lm_quality_counters qc;
    memset(&qc, 0, sizeof qc);
    for (size_t i = (size_t)id; i < docs.size(); i += 3) {
      std::vector<uint8_t> out(lm_clean_bound(docs[i].size()) + 1);
      size_t ol = 0;
      if (lm_clean_text(cl, (const uint8_t *)docs[i].data(), docs[i].size(), out.data(), out.size(), &ol, nullptr,
                        &cc) != LM_OK ||
          std::string((const char *)out.data(), ol) != want_clean[i])
        failures++;
      lm_quality_doc_result qr;
      if (lm_quality_check(q, sc, (const uint8_t *)docs[i].data(), docs[i].size(), &qr, &qc) != LM_OK ||
          qr.reason != want_q[i])
        failures++;
      lm_pii_buf b{nullptr, 0, 0};
      if (lm_pii_mask_doc(pm, (const uint8_t *)docs[i].data(), docs[i].size(), nullptr, &b, nullptr) != LM_OK ||
          std::string((const char *)b.data, b.len) != want_pii[i])
        failures++;
      lm_pii_buf_free(&b);
      size_t nf = 0;
      if (lm_pii_find(pm, (const uint8_t *)docs[i].data(), docs[i].size(), nullptr, 0, &nf) != LM_OK) failures++;
    }
    lm_quality_scratch_destroy(sc);
  };
  std::vector<std::thread> ts;
  for (int i = 0; i < 6; i++) ts.emplace_back(worker, i % 3);
  for (auto &th : ts) th.join();
  EXPECT_EQ(failures.load(), 0);
  lm_pii_destroy(pd);
  lm_pii_destroy(pm);
  lm_quality_destroy(q);
  lm_cleaner_destroy(cl);
}

TEST(Threads, IndependentDeduplicatorsInConcurrentThreads) {
  const char *base = getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/lm_threads_XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back(0);
  ASSERT_NE(mkdtemp(buf.data()), nullptr);
  std::string dir = buf.data();
  auto docs = random_strings(4000, 4);  // many duplicates
  Docs in(docs);
  lm_docs d = in.docs();
  // the reference: first occurrences in order
  std::set<std::string> seen;
  std::vector<int64_t> want;
  for (size_t i = 0; i < docs.size(); i++)
    if (seen.insert(docs[i]).second) want.push_back((int64_t)i);
  std::atomic<int> failures{0};
  auto worker = [&](int id) {
    lm_dedup_params p;
    lm_dedup_params_default(&p);
    std::string path = dir + "/wal" + std::to_string(id);
    if (id % 2) p.wal_path = path.c_str();
    p.wal_buffer_hashes = 64;
    p.initial_capacity = 16;
    lm_dedup *dd = nullptr;
    if (lm_dedup_create(&p, &dd) != LM_OK) {
      failures++;
      return;
    }
    lm_exec ex{1 + id, 64};
    lm_batch_result r;
    lm_batch_result_init(&r);
    if (lm_dedup_run(dd, &d, &r, &ex) != LM_OK || r.n_out != want.size()) failures++;
    for (size_t k = 0; k < r.n_out && k < want.size(); k++)
      if (r.source_index[k] != want[k]) failures++;
    // a second pass: everything is a duplicate
    if (lm_dedup_run(dd, &d, &r, &ex) != LM_OK || r.n_out != 0) failures++;
    uint64_t lsn = 0;
    if (lm_dedup_sync(dd, &lsn) != LM_OK || lsn != want.size()) failures++;
    if (lm_dedup_snapshot(dd) != LM_OK) failures++;
    if (lm_dedup_truncate(dd, id % 2 ? lsn / 2 : lsn) != LM_OK) failures++;
    lm_batch_result_free(&r);
    lm_dedup_destroy(dd);
  };
  std::vector<std::thread> ts;
  for (int i = 0; i < 4; i++) ts.emplace_back(worker, i);
  for (auto &th : ts) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(system(("rm -rf '" + dir + "'").c_str()), 0);
}

namespace {
struct SumCtx {
  std::vector<uint32_t> *hits;
};
lm_status mark(void *ctx, size_t b, size_t e) {
  auto *c = static_cast<SumCtx *>(ctx);
  for (size_t i = b; i < e; i++) (*c->hits)[i]++;
  return LM_OK;
}
}  // namespace

TEST(Threads, ParallelForIsReentrantFromManyThreads) {
  std::atomic<int> failures{0};
  auto worker = [&](int id) {
    for (int round = 0; round < 20; round++) {
      size_t n = 1000 + (size_t)id * 37 + (size_t)round;
      std::vector<uint32_t> hits(n, 0);
      SumCtx c{&hits};
      lm_exec ex{2 + (id + round) % 7, 10};
      if (lm_parallel_for(&ex, n, mark, &c) != LM_OK) failures++;
      for (uint32_t h : hits)
        if (h != 1) failures++;
    }
  };
  std::vector<std::thread> ts;
  for (int i = 0; i < 4; i++) ts.emplace_back(worker, i);
  for (auto &th : ts) th.join();
  EXPECT_EQ(failures.load(), 0);
}
