// Review of FusedPipeline's parallel ordered gather (c306840) and the tail-split plans: one
// pipeline object reused across batches of every shape (empty, all empty documents, every
// document a duplicate, one huge document, thousands of tiny ones, mixed sizes with PII) on
// 2..4 threads with small ranges (grain 1) gives exactly the output of a 1-thread pipeline
// over the same batches, PII on and off.  Runs under ASan (build-asan) and TSan (scripts/tsan.sh
// with LM_TSAN_FILTER='ReviewGather.*'), which check the ranges' writes do not overlap.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "docs_builder.h"

extern "C" {
#include "luminamoon/pipeline.h"
}

namespace {

using RBatch = lmtest::Docs;  // one batch of documents (docs_builder.h)

struct ROut {
  std::vector<std::string> texts;
  std::vector<int64_t> src;
  bool operator==(const ROut &o) const { return texts == o.texts && src == o.src; }
};

std::vector<RBatch> review_batches() {
  std::mt19937_64 g(5);
  const char *words[] = {"the", "of", "and", "system", "debian", "kernel", "mail a.b@example.org", "call 555-867-5309",
                         "ip 10.0.0.1", "\n", "\n\n", "release", "thanks"};
  auto doc = [&](size_t nw) {
    std::string s;
    for (size_t i = 0; i < nw; i++) s += std::string(i ? " " : "") + words[g() % 13];
    return s;
  };
  std::vector<RBatch> out(9);
  // 0: empty batch; 1: all empty documents
  for (int i = 0; i < 50; i++) out[1].add("");
  // 2: every document the same
  for (int i = 0; i < 300; i++) out[2].add("the same document about the debian kernel and the system.");
  // 3: one huge document (3 MB), 4: one huge + small ones around it
  out[3].add(doc(500000));
  out[4].add("x");
  out[4].add(doc(300000));
  out[4].add("");
  out[4].add(doc(10));
  // 5: thousands of tiny documents
  for (int i = 0; i < 6000; i++) out[5].add(std::string(1 + i % 3, char('a' + i % 26)));
  // 6-8: mixed sizes, with duplicates of earlier documents and of earlier batches
  std::vector<std::string> seen;
  for (int b = 6; b < 9; b++) {
    for (int i = 0; i < 700; i++) {
      if (!seen.empty() && g() % 5 == 0) {
        out[b].add(seen[g() % seen.size()]);
      } else {
        std::string d = doc(size_t(g() % 3 ? g() % 300 : g() % 20000));
        seen.push_back(d);
        out[b].add(d);
      }
    }
  }
  return out;
}

std::vector<ROut> run_all(bool pii, int threads, const std::vector<RBatch> &batches) {
  lm_cleaner *c = nullptr;
  lm_quality *q = nullptr;
  lm_dedup *d = nullptr;
  lm_pii_masker *p = nullptr;
  EXPECT_EQ(lm_cleaner_create(nullptr, &c), LM_OK);
  EXPECT_EQ(lm_quality_create(nullptr, &q), LM_OK);
  lm_dedup_params dp;
  lm_dedup_params_default(&dp);
  dp.seed = 3;
  EXPECT_EQ(lm_dedup_create(&dp, &d), LM_OK);
  if (pii) {
    lm_pii_params pp;
    lm_pii_params_default(&pp, LM_PII_MODE_DATATROVE);
    EXPECT_EQ(lm_pii_create(&pp, &p), LM_OK);
  }
  lm_fused_stages fs;
  std::memset(&fs, 0, sizeof fs);
  fs.cleaner = c;
  fs.dedup = d;
  fs.pii = p;
  std::vector<ROut> res;
  lm_fused *f = nullptr;
  EXPECT_EQ(lm_fused_create(&fs, &f), LM_OK);  // quality off: most documents survive to the gather
  lm_exec ex{threads, 1};
  lm_batch_result r;
  lm_batch_result_init(&r);  // one result reused too
  for (const RBatch &b : batches) {
    lm_docs in = b.view();
    EXPECT_EQ(lm_fused_run(f, &in, &r, &ex), LM_OK);
    ROut o;
    for (size_t i = 0; i < r.n_out; i++) {
      o.texts.emplace_back(reinterpret_cast<const char *>(r.data) + r.offsets[i], size_t(r.offsets[i + 1] - r.offsets[i]));
      o.src.push_back(r.source_index[i]);
    }
    EXPECT_EQ(r.offsets[0], 0);
    EXPECT_EQ(size_t(r.offsets[r.n_out]), r.data_len);
    res.push_back(o);
  }
  lm_batch_result_free(&r);
  lm_fused_destroy(f);
  lm_cleaner_destroy(c);
  lm_quality_destroy(q);
  lm_dedup_destroy(d);
  lm_pii_destroy(p);
  return res;
}

}  // namespace

TEST(ReviewGather, ReusedPipelineOnEveryBatchShapeIsThreadCountInvariant) {
  const std::vector<RBatch> batches = review_batches();
  for (bool pii : {true, false}) {
    const std::vector<ROut> ref = run_all(pii, 1, batches);
    size_t n = 0;
    for (const ROut &o : ref) n += o.texts.size();
    EXPECT_GT(n, 1000u);
    EXPECT_EQ(ref[3].texts.size(), 1u);  // the huge document survives (quality off)
    for (int t : {2, 3, 4}) {
      const std::vector<ROut> got = run_all(pii, t, batches);
      ASSERT_EQ(got.size(), ref.size());
      for (size_t b = 0; b < ref.size(); b++) EXPECT_TRUE(got[b] == ref[b]) << "pii " << pii << " threads " << t << " batch " << b;
    }
  }
}
