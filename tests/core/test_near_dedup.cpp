// Tests for the NearDeduplicator core (luminamoon/near_dedup.h): band keys
// against an independent XXH3-128 computation, the decision rule (any band key
// seen before, keys of every document inserted) against a std::set reference,
// documents without a signature, the all-or-nothing max_entries bound, the WAL
// round trip and the refusal of a WAL written with another configuration.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

extern "C" {
#include "luminamoon/minhash.h"
#include "luminamoon/near_dedup.h"
#include "luminamoon/pipeline.h"
}

namespace {

using Key = std::pair<uint64_t, uint64_t>;

std::string tmp_wal(const char *name) {
  return "/tmp/lm_nd_test_" + std::to_string(getpid()) + "_" + name + ".wal";
}

void rm_wal(const std::string &p) {
  std::remove(p.c_str());
  std::remove((p + ".snap").c_str());
  std::remove((p + ".snap.tmp").c_str());
}

lm_near_dedup_params params(uint32_t bands = 14, uint32_t rows = 8, uint32_t precision = 64) {
  lm_near_dedup_params p;
  lm_near_dedup_params_default(&p);
  p.num_buckets = bands;
  p.hashes_per_bucket = rows;
  p.precision = precision;
  return p;
}

// The key as near_dedup.h specifies it, computed here with xxhash directly.
Key ref_key(const uint64_t *band, size_t rows, uint32_t precision, size_t b) {
  std::vector<uint8_t> buf;
  for (size_t r = 0; r < rows; r++) {
    const size_t w = precision == 32 ? 4 : 8;
    for (size_t i = 0; i < w; i++) buf.push_back(uint8_t(band[r] >> (8 * i)));
  }
  XXH128_hash_t h = XXH3_128bits_withSeed(buf.data(), buf.size(), uint64_t(b));
  uint64_t lo = (h.low64 & 0x00ffffffffffffffull) | (uint64_t(b) << 56);
  return {lo, h.high64};
}

TEST(NearDedup, BandKeysMatchSpecAt64And32) {
  for (uint32_t prec : {64u, 32u}) {
    lm_near_dedup_params p = params(5, 3, prec);
    lm_near_dedup *nd = nullptr;
    ASSERT_EQ(lm_near_dedup_create(&p, &nd), LM_OK);
    std::mt19937_64 rng(7);
    std::vector<uint64_t> sig(15);
    for (auto &v : sig) v = prec == 32 ? (rng() & 0xffffffffu) : (rng() % LM_MINHASH_PRIME);
    std::vector<lm_hash128_t> keys(5);
    ASSERT_EQ(lm_near_dedup_signature_keys(nd, sig.data(), keys.data()), LM_OK);
    for (size_t b = 0; b < 5; b++) {
      Key want = ref_key(sig.data() + b * 3, 3, prec, b);
      EXPECT_EQ(keys[b].lo, want.first) << "band " << b << " precision " << prec;
      EXPECT_EQ(keys[b].hi, want.second);
      EXPECT_EQ(keys[b].lo >> 56, b);
    }
    // Equal band values in different bands give different keys.
    std::vector<uint64_t> same(15, 42);
    ASSERT_EQ(lm_near_dedup_signature_keys(nd, same.data(), keys.data()), LM_OK);
    std::set<Key> distinct;
    for (auto &k : keys) distinct.insert({k.lo, k.hi});
    EXPECT_EQ(distinct.size(), 5u);
    lm_near_dedup_destroy(nd);
  }
}

// Random signatures over a tiny alphabet (many band collisions): the decision of
// each document is "some key of it was held before", and every document's keys
// are inserted — checked against a std::set, across several batches.
TEST(NearDedup, DecisionsMatchSetReference) {
  lm_near_dedup_params p = params(4, 2);
  lm_near_dedup *nd = nullptr;
  ASSERT_EQ(lm_near_dedup_create(&p, &nd), LM_OK);
  std::mt19937_64 rng(11);
  std::set<Key> ref;
  size_t dups = 0, total = 0;
  for (int batch = 0; batch < 20; batch++) {
    const size_t n = 1 + rng() % 50;
    std::vector<lm_hash128_t> keys(n * 4);
    std::vector<uint8_t> has(n), dup(n);
    for (size_t i = 0; i < n; i++) {
      uint64_t sig[8];
      for (auto &v : sig) v = rng() % 3;
      has[i] = rng() % 10 != 0;
      ASSERT_EQ(lm_near_dedup_signature_keys(nd, sig, keys.data() + i * 4), LM_OK);
    }
    ASSERT_EQ(lm_near_dedup_check_keys(nd, keys.data(), has.data(), n, dup.data()), LM_OK);
    for (size_t i = 0; i < n; i++) {
      bool want = false;
      if (has[i])
        for (size_t b = 0; b < 4; b++) want |= ref.count({keys[i * 4 + b].lo, keys[i * 4 + b].hi}) > 0;
      if (has[i])
        for (size_t b = 0; b < 4; b++) ref.insert({keys[i * 4 + b].lo, keys[i * 4 + b].hi});
      EXPECT_EQ(bool(dup[i]), want) << "batch " << batch << " doc " << i;
      dups += want;
      total++;
    }
  }
  uint64_t lsn = 0;
  lm_dedup_lsn(lm_near_dedup_index(nd), &lsn);
  EXPECT_EQ(lsn, ref.size());
  EXPECT_GT(dups, 0u);
  EXPECT_LT(dups, total);
  lm_near_dedup_destroy(nd);
}

TEST(NearDedup, RunOnTextsEmptyAndShortDocsAreKept) {
  lm_near_dedup *nd = nullptr;
  ASSERT_EQ(lm_near_dedup_create(nullptr, &nd), LM_OK);
  std::vector<std::string> texts = {
      "",
      "word",
      "the cat sat on the mat with a hat today",
      "The cat sat on the mat, with a hat today!",  // simplify_text makes it equal to the previous one
      "one two three four",                         // four words < n_grams: no signature
      "one two three four",                         // same again: still kept (no keys)
      "completely different text about the weather in spring",
      "\xff\xfe invalid utf8 bytes here and there ok",
  };
  std::vector<int64_t> off{0};
  std::string data;
  for (auto &t : texts) {
    data += t;
    off.push_back(int64_t(data.size()));
  }
  lm_docs docs{off.data(), reinterpret_cast<const uint8_t *>(data.data()), texts.size(), data.size()};
  lm_batch_result r;
  lm_batch_result_init(&r);
  lm_exec ex{2, 1};
  ASSERT_EQ(lm_near_dedup_run(nd, &docs, &r, &ex), LM_OK);
  std::vector<int32_t> want = {0, 0, 0, LM_REASON_NEAR_DUPLICATE, 0, 0, 0, 0};
  for (size_t i = 0; i < texts.size(); i++) EXPECT_EQ(r.reasons[i], want[i]) << i;
  EXPECT_EQ(r.n_out, texts.size() - 1);
  // keys only for the documents with >= 5 words: 3 distinct documents x 14 bands
  uint64_t lsn = 0;
  lm_dedup_lsn(lm_near_dedup_index(nd), &lsn);
  EXPECT_EQ(lsn, 3u * 14u);
  // batch_keys agrees with doc_keys
  std::vector<lm_hash128_t> keys(texts.size() * 14);
  std::vector<uint8_t> has(texts.size());
  ASSERT_EQ(lm_near_dedup_batch_keys(nd, &docs, keys.data(), has.data(), &ex), LM_OK);
  lm_minhash_scratch *s = nullptr;
  ASSERT_EQ(lm_minhash_scratch_create(&s), LM_OK);
  std::vector<uint64_t> sig(14 * 8);
  for (size_t i = 0; i < texts.size(); i++) {
    lm_hash128_t k[14];
    int h = -1;
    ASSERT_EQ(lm_near_dedup_doc_keys(nd, s, sig.data(), reinterpret_cast<const uint8_t *>(texts[i].data()),
                                     texts[i].size(), k, &h),
              LM_OK);
    EXPECT_EQ(h, int(has[i]));
    if (h) {
      EXPECT_EQ(std::memcmp(k, keys.data() + i * 14, sizeof k), 0);
    }
  }
  EXPECT_EQ(std::vector<uint8_t>(has.begin(), has.end()), (std::vector<uint8_t>{0, 0, 1, 1, 0, 0, 1, 1}));
  lm_minhash_scratch_destroy(s);
  lm_batch_result_free(&r);
  lm_near_dedup_destroy(nd);
}

TEST(NearDedup, MaxEntriesAllOrNothing) {
  lm_near_dedup_params p = params(4, 2);
  p.max_entries = 10;
  lm_near_dedup *nd = nullptr;
  ASSERT_EQ(lm_near_dedup_create(&p, &nd), LM_OK);
  std::vector<lm_hash128_t> keys(3 * 4);
  std::vector<uint8_t> has{1, 1, 1}, dup(3);
  for (size_t i = 0; i < 3; i++) {
    uint64_t sig[8];
    for (size_t j = 0; j < 8; j++) sig[j] = 1000 * i + j;
    lm_near_dedup_signature_keys(nd, sig, keys.data() + i * 4);
  }
  ASSERT_EQ(lm_near_dedup_check_keys(nd, keys.data(), has.data(), 2, dup.data()), LM_OK);  // 8 keys
  EXPECT_EQ(lm_near_dedup_check_keys(nd, keys.data(), has.data(), 3, dup.data()), LM_ETOOBIG);  // 4 more: 12 > 10
  uint64_t lsn = 0;
  lm_dedup_lsn(lm_near_dedup_index(nd), &lsn);
  EXPECT_EQ(lsn, 8u);
  ASSERT_EQ(lm_near_dedup_check_keys(nd, keys.data(), has.data(), 2, dup.data()), LM_OK);  // all old: fits
  EXPECT_EQ(dup[0], 1);
  EXPECT_EQ(dup[1], 1);
  lm_near_dedup_destroy(nd);
}

TEST(NearDedup, WalRoundTripTruncateAndConfigMismatch) {
  std::string path = tmp_wal("rt");
  rm_wal(path);
  lm_near_dedup_params p = params(4, 2);
  p.wal_path = path.c_str();
  lm_near_dedup *nd = nullptr;
  ASSERT_EQ(lm_near_dedup_create(&p, &nd), LM_OK);
  std::vector<lm_hash128_t> keys(6 * 4);
  std::vector<uint8_t> has(6, 1), dup(6);
  for (size_t i = 0; i < 6; i++) {
    uint64_t sig[8];
    for (size_t j = 0; j < 8; j++) sig[j] = 100 * i + j;
    lm_near_dedup_signature_keys(nd, sig, keys.data() + i * 4);
  }
  ASSERT_EQ(lm_near_dedup_check_keys(nd, keys.data(), has.data(), 3, dup.data()), LM_OK);
  uint64_t lsn = 0;
  ASSERT_EQ(lm_dedup_sync(lm_near_dedup_index(nd), &lsn), LM_OK);
  EXPECT_EQ(lsn, 12u);
  ASSERT_EQ(lm_near_dedup_check_keys(nd, keys.data() + 12, has.data(), 3, dup.data()), LM_OK);
  ASSERT_EQ(lm_dedup_sync(lm_near_dedup_index(nd), &lsn), LM_OK);
  EXPECT_EQ(lsn, 24u);
  lm_near_dedup_destroy(nd);

  // Reopen: same state; truncate to 12 forgets documents 3..5.
  ASSERT_EQ(lm_near_dedup_create(&p, &nd), LM_OK);
  lm_dedup_lsn(lm_near_dedup_index(nd), &lsn);
  EXPECT_EQ(lsn, 24u);
  ASSERT_EQ(lm_dedup_truncate(lm_near_dedup_index(nd), 12), LM_OK);
  ASSERT_EQ(lm_near_dedup_check_keys(nd, keys.data(), has.data(), 6, dup.data()), LM_OK);
  EXPECT_EQ(std::vector<uint8_t>(dup.begin(), dup.end()), (std::vector<uint8_t>{1, 1, 1, 0, 0, 0}));
  lm_near_dedup_destroy(nd);

  // The header records the configuration (tag at byte 24).
  uint8_t head[64];
  FILE *f = std::fopen(path.c_str(), "rb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fread(head, 1, 64, f), 64u);
  std::fclose(f);
  lm_near_dedup_params got;
  lm_near_dedup_params_default(&got);
  ASSERT_EQ(lm_near_dedup_tag_decode(head + 24, &got), LM_OK);
  EXPECT_EQ(got.num_buckets, 4u);
  EXPECT_EQ(got.hashes_per_bucket, 2u);
  EXPECT_EQ(got.seed, 1u);

  // Another seed / bands / rows / precision / n_grams: refused, file unchanged.
  long size_before = 0;
  f = std::fopen(path.c_str(), "rb");
  std::fseek(f, 0, SEEK_END);
  size_before = std::ftell(f);
  std::fclose(f);
  for (int which = 0; which < 5; which++) {
    lm_near_dedup_params q = p;
    if (which == 0) q.seed = 2;
    if (which == 1) q.num_buckets = 5;
    if (which == 2) q.hashes_per_bucket = 3;
    if (which == 3) q.precision = 32;
    if (which == 4) q.n_grams = 3;
    lm_near_dedup *bad = nullptr;
    EXPECT_EQ(lm_near_dedup_create(&q, &bad), LM_EINVAL) << which;
    EXPECT_EQ(bad, nullptr);
  }
  f = std::fopen(path.c_str(), "rb");
  std::fseek(f, 0, SEEK_END);
  EXPECT_EQ(std::ftell(f), size_before);
  std::fclose(f);
  rm_wal(path);
}

TEST(NearDedup, BadArguments) {
  lm_near_dedup_params p = params();
  lm_near_dedup *nd = nullptr;
  EXPECT_EQ(lm_near_dedup_create(&p, nullptr), LM_EINVAL);
  p.num_buckets = 0;
  EXPECT_EQ(lm_near_dedup_create(&p, &nd), LM_EINVAL);
  p = params(256);
  EXPECT_EQ(lm_near_dedup_create(&p, &nd), LM_EINVAL);
  p = params(14, 8, 16);
  EXPECT_EQ(lm_near_dedup_create(&p, &nd), LM_EINVAL);
  EXPECT_EQ(nd, nullptr);
  uint8_t tag[LM_NEAR_DEDUP_TAG_BYTES] = {0};
  EXPECT_EQ(lm_near_dedup_tag_decode(tag, &p), LM_ECORRUPT);
  ASSERT_EQ(lm_near_dedup_create(nullptr, &nd), LM_OK);
  EXPECT_EQ(lm_near_dedup_check_keys(nd, nullptr, nullptr, 1, nullptr), LM_EINVAL);
  EXPECT_EQ(lm_near_dedup_check_keys(nd, nullptr, nullptr, 0, nullptr), LM_OK);
  EXPECT_EQ(lm_near_dedup_run(nd, nullptr, nullptr, nullptr), LM_EINVAL);
  lm_near_dedup_destroy(nd);
  lm_near_dedup_destroy(nullptr);
}

// FusedPipeline with exact + near dedup == the chain lm_dedup_run -> lm_near_dedup_run:
// same reasons, same texts, same index sizes (issue 12 part 4: near admission in phase 2).
TEST(NearDedup, FusedEqualsChain) {
  std::mt19937_64 rng(5);
  const char *words[] = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"};
  std::vector<std::string> base;
  for (int i = 0; i < 60; i++) {
    std::string t;
    for (int w = 0; w < 30; w++) t += std::string(words[rng() % 10]) + (w % 7 == 6 ? ". " : " ");
    base.push_back(t);
  }
  std::vector<std::string> texts;
  for (int i = 0; i < 200; i++) {
    std::string t = base[rng() % base.size()];
    if (rng() % 3 == 0) t += " extra";                          // near copy
    if (rng() % 5 == 0) t = "short " + std::to_string(i);       // no signature
    texts.push_back(t);
  }
  std::vector<int64_t> off{0};
  std::string data;
  for (auto &t : texts) {
    data += t;
    off.push_back(int64_t(data.size()));
  }
  lm_docs docs{off.data(), reinterpret_cast<const uint8_t *>(data.data()), texts.size(), data.size()};
  lm_exec ex{2, 1};
  // chain
  lm_dedup *d1 = nullptr;
  lm_near_dedup *n1 = nullptr;
  ASSERT_EQ(lm_dedup_create(nullptr, &d1), LM_OK);
  ASSERT_EQ(lm_near_dedup_create(nullptr, &n1), LM_OK);
  lm_batch_result r1, r2, rf;
  lm_batch_result_init(&r1);
  lm_batch_result_init(&r2);
  lm_batch_result_init(&rf);
  ASSERT_EQ(lm_dedup_run(d1, &docs, &r1, &ex), LM_OK);
  lm_docs mid{r1.offsets, r1.data, r1.n_out, r1.data_len};
  ASSERT_EQ(lm_near_dedup_run(n1, &mid, &r2, &ex), LM_OK);
  std::vector<int32_t> want(r1.reasons, r1.reasons + texts.size());
  for (size_t k = 0; k < r1.n_out; k++)
    if (r2.reasons[k]) want[size_t(r1.source_index[k])] = r2.reasons[k];
  // fused
  lm_dedup *d2 = nullptr;
  lm_near_dedup *n2 = nullptr;
  ASSERT_EQ(lm_dedup_create(nullptr, &d2), LM_OK);
  ASSERT_EQ(lm_near_dedup_create(nullptr, &n2), LM_OK);
  lm_fused_stages st;
  std::memset(&st, 0, sizeof st);
  st.dedup = d2;
  st.near = n2;
  lm_fused *f = nullptr;
  ASSERT_EQ(lm_fused_create(&st, &f), LM_OK);
  ASSERT_EQ(lm_fused_run(f, &docs, &rf, &ex), LM_OK);
  EXPECT_EQ(std::vector<int32_t>(rf.reasons, rf.reasons + texts.size()), want);
  ASSERT_EQ(rf.n_out, r2.n_out);
  EXPECT_EQ(std::string(reinterpret_cast<char *>(rf.data), rf.data_len),
            std::string(reinterpret_cast<char *>(r2.data), r2.data_len));
  size_t near_drops = 0;
  for (auto r : want) near_drops += r == LM_REASON_NEAR_DUPLICATE;
  EXPECT_GT(near_drops, 0u);
  lm_fused_counters c;
  lm_fused_get_counters(f, &c);
  EXPECT_EQ(c.dropped_near_duplicate, near_drops);
  uint64_t l1 = 0, l2 = 0;
  lm_dedup_lsn(lm_near_dedup_index(n1), &l1);
  lm_dedup_lsn(lm_near_dedup_index(n2), &l2);
  EXPECT_EQ(l1, l2);
  EXPECT_EQ(lm_fused_near_failed(f), 0);
  lm_fused_destroy(f);
  lm_batch_result_free(&r1);
  lm_batch_result_free(&r2);
  lm_batch_result_free(&rf);
  lm_dedup_destroy(d1);
  lm_dedup_destroy(d2);
  lm_near_dedup_destroy(n1);
  lm_near_dedup_destroy(n2);
}

}  // namespace
