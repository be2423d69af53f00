// lm_batch_run: ordered gather, per-range counters merged once, thread-count invariance, errors.
#include <gtest/gtest.h>

#include "docs_builder.h"

#include <cstdint>
#include <string>
#include <vector>

extern "C" {
#include "luminamoon/batch.h"
}

namespace {

struct Counts {
  uint64_t docs, kept;
};

struct Toy {
  Counts total = {0, 0};
  size_t fail_at_len = SIZE_MAX;  // a document of this length makes `doc` fail
  int scratches = 0;
};

lm_status toy_doc(const void *stage, void *scratch, const uint8_t *t, size_t n, lm_bytebuf *arena, void *counters,
                  int32_t *reason) {
  const Toy *toy = static_cast<const Toy *>(stage);
  EXPECT_NE(scratch, nullptr);
  Counts *c = static_cast<Counts *>(counters);
  c->docs++;
  if (n == toy->fail_at_len) return LM_EUTF8;
  if (n && t[0] == 'x') {  // dropped
    *reason = LM_REASON_EMPTY;
    return LM_OK;
  }
  *reason = LM_REASON_KEPT;
  c->kept++;
  for (size_t i = 0; i < n; i++) {
    uint8_t u = t[i] >= 'a' && t[i] <= 'z' ? static_cast<uint8_t>(t[i] - 32) : t[i];
    lm_status s = lm_bytebuf_append(arena, &u, 1, 8);
    if (s) return s;
  }
  return LM_OK;
}

void toy_merge(void *stage, const void *counters) {
  Toy *toy = static_cast<Toy *>(stage);
  const Counts *c = static_cast<const Counts *>(counters);
  toy->total.docs += c->docs;
  toy->total.kept += c->kept;
}

int g_scratch_token;
lm_status toy_scratch_create(const void *, void **s) {
  *s = &g_scratch_token;
  return LM_OK;
}
void toy_scratch_destroy(void *s) { EXPECT_EQ(s, &g_scratch_token); }

const lm_batch_stage kToy = {3, sizeof(Counts), toy_scratch_create, toy_scratch_destroy, toy_doc, toy_merge};

using lmtest::Docs;  // docs_builder.h

std::vector<std::string> outputs(const lm_batch_result &r) {
  std::vector<std::string> v;
  for (size_t i = 0; i < r.n_out; i++)
    v.emplace_back(reinterpret_cast<const char *>(r.data) + r.offsets[i],
                   static_cast<size_t>(r.offsets[i + 1] - r.offsets[i]));
  return v;
}

}  // namespace

TEST(BatchRunner, OrderedGatherAndCountersAtAnyThreadCount) {
  Docs d;
  std::vector<std::string> want;
  std::vector<int64_t> want_src;
  for (int i = 0; i < 200; i++) {
    std::string s = (i % 5 == 0 ? "x" : "") + std::string(static_cast<size_t>(i % 7), 'a') + std::to_string(i);
    if (i % 11 == 0) s.clear();  // empty kept texts: ranges may keep only empty outputs
    d.add(s);
    if (s.empty() || s[0] != 'x') {
      std::string u = s;
      for (auto &ch : u) ch = ch >= 'a' && ch <= 'z' ? static_cast<char>(ch - 32) : ch;
      want.push_back(u);
      want_src.push_back(i);
    }
  }
  lm_docs docs = d.view();
  for (int threads : {1, 2, 3, 8}) {
    Toy toy;
    lm_batch_result r;
    lm_batch_result_init(&r);
    lm_exec ex = {threads, 1};
    ASSERT_EQ(lm_batch_run(&kToy, &toy, &docs, &r, &ex), LM_OK) << threads;
    EXPECT_EQ(outputs(r), want) << threads;
    ASSERT_EQ(r.n_out, want_src.size());
    for (size_t i = 0; i < r.n_out; i++) EXPECT_EQ(r.source_index[i], want_src[i]);
    ASSERT_EQ(r.n_in, 200u);
    for (size_t i = 0; i < 200; i++) {
      bool dropped = d.data.compare(static_cast<size_t>(d.off[i]), 1, "x") == 0 && d.off[i + 1] > d.off[i];
      EXPECT_EQ(r.reasons[i], dropped ? LM_REASON_EMPTY : LM_REASON_KEPT) << i;
    }
    EXPECT_EQ(toy.total.docs, 200u);
    EXPECT_EQ(toy.total.kept, want.size());
    lm_batch_result_free(&r);
  }
}

TEST(BatchRunner, ErrorsMergeNoCounters) {
  Docs d;
  for (int i = 0; i < 50; i++) d.add(std::string(static_cast<size_t>(i), 'b'));
  lm_docs docs = d.view();
  Toy toy;
  toy.fail_at_len = 40;
  lm_batch_result r;
  lm_batch_result_init(&r);
  lm_exec ex = {4, 1};
  EXPECT_EQ(lm_batch_run(&kToy, &toy, &docs, &r, &ex), LM_EUTF8);
  EXPECT_EQ(toy.total.docs, 0u);
  EXPECT_EQ(lm_batch_run(nullptr, &toy, &docs, &r, &ex), LM_EINVAL);
  lm_batch_stage no_doc = kToy;
  no_doc.doc = nullptr;
  EXPECT_EQ(lm_batch_run(&no_doc, &toy, &docs, &r, &ex), LM_EINVAL);
  EXPECT_EQ(lm_batch_run(&kToy, &toy, &docs, nullptr, &ex), LM_EINVAL);
  int64_t bad_off[2] = {5, 1};
  lm_docs bad = {bad_off, reinterpret_cast<const uint8_t *>("abcdef"), 1, 6};
  EXPECT_EQ(lm_batch_run(&kToy, &toy, &bad, &r, &ex), LM_EINVAL);
  Docs none;
  lm_docs empty = none.view();
  EXPECT_EQ(lm_batch_run(&kToy, &toy, &empty, &r, nullptr), LM_OK);
  EXPECT_EQ(r.n_out, 0u);
  lm_batch_result_free(&r);
}
