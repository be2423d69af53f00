// Tests for the StreamDeduplicator table and batch API (luminamoon/dedup.h):
// exactness against a std::set reference on random data with many duplicates,
// growth, the memory bound, deletion through truncation, bad arguments.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

extern "C" {
#include "luminamoon/dedup.h"
#include "luminamoon/hash.h"
}

namespace {

using Key = std::pair<uint64_t, uint64_t>;

std::set<Key> held(const lm_dedup *d) {
  std::set<Key> s;
  lm_dedup_foreach(
      d,
      [](void *ctx, lm_hash128_t h) {
        static_cast<std::set<Key> *>(ctx)->insert({h.hi, h.lo});
        return 0;
      },
      &s);
  return s;
}

lm_dedup *mem_dedup(size_t cap = 0, uint64_t max_entries = 0) {
  lm_dedup_params p;
  lm_dedup_params_default(&p);
  if (cap) p.initial_capacity = cap;
  p.max_entries = max_entries;
  lm_dedup *d = nullptr;
  EXPECT_EQ(lm_dedup_create(&p, &d), LM_OK);
  return d;
}

}  // namespace

TEST(Dedup, ExactAgainstStdSetWithManyDuplicates) {
  lm_dedup *d = mem_dedup(16);  // forces many growths
  std::set<Key> ref;
  std::mt19937_64 rng(1);
  // keys drawn from a small pool (many repeats) plus keys sharing `hi` (same home slot)
  std::vector<lm_hash128_t> pool(40000);
  for (size_t i = 0; i < pool.size(); i++) pool[i] = {rng(), i % 7 == 0 ? 42u : rng()};
  for (size_t i = 0; i < 300; i++) pool.push_back({i, 77});  // identical hi: one long run
  pool.push_back({0, 0});                                     // the zero key
  uint64_t admitted = 0;
  for (int it = 0; it < 200000; it++) {
    lm_hash128_t h = pool[rng() % pool.size()];
    int is_new = -1;
    ASSERT_EQ(lm_dedup_check_insert_hash(d, h, &is_new), LM_OK);
    bool want = ref.insert({h.hi, h.lo}).second;
    ASSERT_EQ(is_new, want ? 1 : 0) << it;
    admitted += want;
  }
  uint64_t lsn = 0;
  ASSERT_EQ(lm_dedup_lsn(d, &lsn), LM_OK);
  EXPECT_EQ(lsn, admitted);
  EXPECT_EQ(held(d), ref);
  for (auto &k : ref) {
    int f = 0;
    ASSERT_EQ(lm_dedup_contains(d, lm_hash128_t{k.second, k.first}, &f), LM_OK);
    ASSERT_EQ(f, 1);
  }
  int f = 1;
  lm_dedup_contains(d, lm_hash128_t{123456789, 987654321}, &f);
  EXPECT_EQ(f, 0);
  lm_dedup_stats st;
  ASSERT_EQ(lm_dedup_stats_get(d, &st), LM_OK);
  EXPECT_EQ(st.entries, ref.size());
  EXPECT_EQ(st.inserts, admitted);
  EXPECT_EQ(st.duplicates, 200000u - admitted);
  lm_dedup_destroy(d);
}

TEST(Dedup, GrowthKeepsLoadBetweenHalfAndFourFifths) {
  lm_dedup *d = mem_dedup(16);
  std::mt19937_64 rng(3);
  lm_dedup_stats st;
  for (int i = 1; i <= 500000; i++) {
    int nw;
    ASSERT_EQ(lm_dedup_check_insert_hash(d, lm_hash128_t{rng(), rng()}, &nw), LM_OK);
    ASSERT_EQ(nw, 1);
    if (i % 50000 == 0) {
      lm_dedup_stats_get(d, &st);
      ASSERT_EQ(st.entries, (uint64_t)i);
      double home_slots = (double)(st.capacity - 64);
      EXPECT_LE(st.entries, 0.8 * home_slots + 1);
      EXPECT_GE(st.entries, 0.45 * home_slots);
      EXPECT_LE(st.bytes_per_entry, 32.5);  // the design bound: <= 32 B per distinct document
    }
  }
  lm_dedup_destroy(d);
}

TEST(Dedup, TextApiHashesWithSeed) {
  lm_dedup_params p;
  lm_dedup_params_default(&p);
  p.seed = 99;
  lm_dedup *d = nullptr;
  ASSERT_EQ(lm_dedup_create(&p, &d), LM_OK);
  int nw;
  ASSERT_EQ(lm_dedup_check_insert(d, (const uint8_t *)"hello", 5, &nw), LM_OK);
  EXPECT_EQ(nw, 1);
  int f = 0;
  lm_dedup_contains(d, lm_hash128("hello", 5, 99), &f);
  EXPECT_EQ(f, 1);
  lm_dedup_contains(d, lm_hash128("hello", 5, 0), &f);
  EXPECT_EQ(f, 0);
  ASSERT_EQ(lm_dedup_check_insert(d, (const uint8_t *)"hello", 5, &nw), LM_OK);
  EXPECT_EQ(nw, 0);
  ASSERT_EQ(lm_dedup_check_insert(d, nullptr, 0, &nw), LM_OK);  // the empty document is a document
  EXPECT_EQ(nw, 1);
  lm_dedup_destroy(d);
}

TEST(Dedup, MaxEntriesIsAClearLimit) {
  lm_dedup *d = mem_dedup(0, 100);
  int nw;
  for (uint64_t i = 1; i <= 100; i++) ASSERT_EQ(lm_dedup_check_insert_hash(d, {i, i}, &nw), LM_OK);
  EXPECT_EQ(lm_dedup_check_insert_hash(d, {1000, 1000}, &nw), LM_ETOOBIG);
  ASSERT_EQ(lm_dedup_check_insert_hash(d, {5, 5}, &nw), LM_OK);  // a duplicate still answers
  EXPECT_EQ(nw, 0);
  uint64_t lsn;
  lm_dedup_lsn(d, &lsn);
  EXPECT_EQ(lsn, 100u);
  std::vector<lm_hash128_t> hs = {{7, 7}, {2000, 1}, {3000, 1}};
  std::vector<uint8_t> isn(3);
  size_t done = 99;
  EXPECT_EQ(lm_dedup_check_insert_hashes(d, hs.data(), 3, isn.data(), &done), LM_ETOOBIG);
  EXPECT_EQ(done, 0u);  // all or nothing: no hash of the batch admitted
  lm_dedup_lsn(d, &lsn);
  EXPECT_EQ(lsn, 100u);
  // a batch of known hashes (repeats included) still answers at the bound
  std::vector<lm_hash128_t> known = {{7, 7}, {8, 8}, {7, 7}};
  ASSERT_EQ(lm_dedup_check_insert_hashes(d, known.data(), 3, isn.data(), &done), LM_OK);
  EXPECT_EQ(done, 3u);
  EXPECT_EQ(isn, std::vector<uint8_t>({0, 0, 0}));
  lm_dedup_destroy(d);
}

// Below the bound, a batch fits iff its distinct new hashes do (repeats inside the
// batch and hashes already held count once / not at all).
TEST(Dedup, MaxEntriesBatchIsAllOrNothing) {
  lm_dedup *d = mem_dedup(0, 10);
  std::vector<lm_hash128_t> first = {{1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}, {6, 6}};
  std::vector<uint8_t> isn(16);
  size_t done = 0;
  ASSERT_EQ(lm_dedup_check_insert_hashes(d, first.data(), first.size(), isn.data(), &done), LM_OK);
  // 4 new distinct hashes among 9 (3 held, one new repeated): fits exactly
  std::vector<lm_hash128_t> fits = {{1, 1}, {7, 7}, {8, 8}, {7, 7}, {2, 2}, {9, 9}, {10, 10}, {3, 3}, {10, 10}};
  ASSERT_EQ(lm_dedup_check_insert_hashes(d, fits.data(), fits.size(), isn.data(), &done), LM_OK);
  EXPECT_EQ(std::vector<uint8_t>(isn.begin(), isn.begin() + 9), std::vector<uint8_t>({0, 1, 1, 0, 0, 1, 1, 0, 0}));
  uint64_t lsn;
  lm_dedup_lsn(d, &lsn);
  EXPECT_EQ(lsn, 10u);
  lm_dedup_destroy(d);
  // one more distinct hash than fits: nothing admitted
  d = mem_dedup(0, 10);
  ASSERT_EQ(lm_dedup_check_insert_hashes(d, first.data(), first.size(), isn.data(), &done), LM_OK);
  std::vector<lm_hash128_t> over = {{7, 7}, {8, 8}, {9, 9}, {10, 10}, {11, 11}};
  EXPECT_EQ(lm_dedup_check_insert_hashes(d, over.data(), over.size(), isn.data(), &done), LM_ETOOBIG);
  EXPECT_EQ(done, 0u);
  lm_dedup_lsn(d, &lsn);
  EXPECT_EQ(lsn, 6u);
  int found = 1;
  lm_dedup_contains(d, {7, 7}, &found);
  EXPECT_EQ(found, 0);
  lm_dedup_destroy(d);
}

TEST(Dedup, BatchRunKeepsFirstOccurrenceInOrder) {
  std::mt19937_64 rng(9);
  std::vector<std::string> docs;
  for (int i = 0; i < 20000; i++) docs.push_back("doc " + std::to_string(rng() % 5000));
  docs.push_back("");
  docs.push_back("");
  std::vector<int64_t> off{0};
  std::string data;
  for (auto &s : docs) {
    data += s;
    off.push_back((int64_t)data.size());
  }
  lm_docs in = {off.data(), (const uint8_t *)data.data(), docs.size(), data.size()};
  for (int threads : {1, 4}) {
    lm_dedup *d = mem_dedup();
    lm_batch_result r;
    lm_batch_result_init(&r);
    lm_exec ex = {threads, 16};
    // two halves as two batches: dedup state carries across batches
    size_t half = docs.size() / 2;
    lm_docs a = {off.data(), (const uint8_t *)data.data(), half, data.size()};
    lm_docs b = {off.data() + half, (const uint8_t *)data.data(), docs.size() - half, data.size()};
    std::set<std::string> seen;
    for (const lm_docs *part : {&a, &b}) {
      ASSERT_EQ(lm_dedup_run(d, part, &r, &ex), LM_OK);
      size_t base = part == &a ? 0 : half, k = 0;
      for (size_t i = 0; i < part->n; i++) {
        const std::string &s = docs[base + i];
        bool first = seen.insert(s).second;
        ASSERT_EQ(r.reasons[i], first ? LM_REASON_KEPT : LM_REASON_DUPLICATE);
        if (first) {
          ASSERT_LT(k, r.n_out);
          ASSERT_EQ(r.source_index[k], (int64_t)i);
          ASSERT_EQ(std::string((const char *)r.data + r.offsets[k], (size_t)(r.offsets[k + 1] - r.offsets[k])), s);
          k++;
        }
      }
      ASSERT_EQ(k, r.n_out);
    }
    (void)in;
    lm_batch_result_free(&r);
    lm_dedup_destroy(d);
  }
}

TEST(Dedup, InMemoryTruncateOnlyToCurrent) {
  lm_dedup *d = mem_dedup();
  int nw;
  lm_dedup_check_insert_hash(d, {1, 2}, &nw);
  EXPECT_EQ(lm_dedup_truncate(d, 1), LM_OK);
  EXPECT_EQ(lm_dedup_truncate(d, 0), LM_ESTATE);
  EXPECT_EQ(lm_dedup_truncate(d, 5), LM_ERANGE);
  uint64_t lsn = 7;
  EXPECT_EQ(lm_dedup_sync(d, &lsn), LM_OK);
  EXPECT_EQ(lsn, 1u);
  EXPECT_EQ(lm_dedup_snapshot(d), LM_OK);
  EXPECT_EQ(lm_dedup_close(d), LM_OK);
  EXPECT_EQ(lm_dedup_check_insert_hash(d, {3, 4}, &nw), LM_ESTATE);
  lm_dedup_destroy(d);
}

TEST(Dedup, BadArguments) {
  lm_dedup *d = nullptr;
  lm_dedup_params p;
  lm_dedup_params_default(&p);
  p.wal_buffer_hashes = 1u << 20;
  EXPECT_EQ(lm_dedup_create(&p, &d), LM_EINVAL);
  p.wal_buffer_hashes = 0;
  p.initial_capacity = SIZE_MAX;
  EXPECT_EQ(lm_dedup_create(&p, &d), LM_ENOMEM);
  p.initial_capacity = 0;
  p.wal_path = "";
  EXPECT_EQ(lm_dedup_create(&p, &d), LM_EINVAL);
  EXPECT_EQ(lm_dedup_create(nullptr, nullptr), LM_EINVAL);
  ASSERT_EQ(lm_dedup_create(nullptr, &d), LM_OK);
  EXPECT_EQ(lm_dedup_check_insert(d, (const uint8_t *)"x", 1, nullptr), LM_EINVAL);
  EXPECT_EQ(lm_dedup_check_insert(d, nullptr, 3, nullptr), LM_EINVAL);
  int64_t off[] = {0, 4, 2};
  lm_docs bad = {off, (const uint8_t *)"abcd", 2, 4};
  lm_batch_result r;
  lm_batch_result_init(&r);
  EXPECT_EQ(lm_dedup_run(d, &bad, &r, nullptr), LM_EINVAL);
  lm_batch_result_free(&r);
  lm_dedup_destroy(d);
  lm_dedup_destroy(nullptr);
}

TEST(Dedup, HundredMegabyteDocumentAndEmptyOnes) {
  std::string big(100u << 20, 'z');
  big[12345] = 'a';
  std::vector<int64_t> off = {0, (int64_t)big.size(), (int64_t)big.size(), (int64_t)big.size()};
  lm_docs in = {off.data(), (const uint8_t *)big.data(), 3, big.size()};  // big, empty, empty
  lm_dedup *d = mem_dedup();
  lm_batch_result r;
  lm_batch_result_init(&r);
  ASSERT_EQ(lm_dedup_run(d, &in, &r, nullptr), LM_OK);
  EXPECT_EQ(r.reasons[0], LM_REASON_KEPT);
  EXPECT_EQ(r.reasons[1], LM_REASON_KEPT);
  EXPECT_EQ(r.reasons[2], LM_REASON_DUPLICATE);
  ASSERT_EQ(r.n_out, 2u);
  EXPECT_EQ(r.offsets[1], (int64_t)big.size());
  ASSERT_EQ(lm_dedup_run(d, &in, &r, nullptr), LM_OK);
  EXPECT_EQ(r.n_out, 0u);
  lm_batch_result_free(&r);
  lm_dedup_destroy(d);
}
