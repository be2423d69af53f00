// FusedPipeline: identical to the modular chain (cleaner -> quality -> dedup ->
// PII batch calls) on random and tricky documents, for any thread count and
// across batches; stage subsets; counters; errors.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

extern "C" {
#include "luminamoon/pipeline.h"
}

namespace {

struct Batch {
  std::vector<int64_t> off{0};
  std::string data;
  void add(const std::string &s) {
    data += s;
    off.push_back(int64_t(data.size()));
  }
  lm_docs docs() const {
    return lm_docs{off.data(), reinterpret_cast<const uint8_t *>(data.data()), off.size() - 1, data.size()};
  }
};

struct Out {
  std::vector<std::string> texts;
  std::vector<int64_t> src;
  std::vector<int32_t> reasons;
  bool operator==(const Out &o) const { return texts == o.texts && src == o.src && reasons == o.reasons; }
};

Out collect(const lm_batch_result &r) {
  Out o;
  for (size_t i = 0; i < r.n_out; i++) {
    o.texts.emplace_back(reinterpret_cast<const char *>(r.data) + r.offsets[i], size_t(r.offsets[i + 1] - r.offsets[i]));
    o.src.push_back(r.source_index[i]);
  }
  o.reasons.assign(r.reasons, r.reasons + r.n_in);
  return o;
}

const char *kWords[] = {"the", "of", "and", "to", "with", "that", "have", "be", "system", "package", "debian",
                        "release", "kernel", "build", "version", "maintainer", "upload", "bug", "fix", "report",
                        "mirror", "archive", "security", "team", "please", "thanks", "review", "patch", "source"};

std::string sentence(std::mt19937_64 &g) {
  std::string s;
  int n = 6 + int(g() % 10);
  for (int i = 0; i < n; i++) {
    if (i) s += ' ';
    s += kWords[g() % (sizeof kWords / sizeof *kWords)];
  }
  s[0] = char(std::toupper(s[0]));
  return s + ".";
}

// English-like documents (many pass the quality rules), PII, junk, duplicates.
std::vector<std::string> make_docs(uint64_t seed, size_t n) {
  std::mt19937_64 g(seed);
  std::vector<std::string> docs;
  const char *pii[] = {" Mail alice.smith@example.org today.", " Server 8.8.8.8 answered.", " Call 555-867-5309 now.",
                       " Card 4111 1111 1111 1111 ok.", " IBAN GB82 WEST 1234 5698 7654 32 here.",
                       " Host 2001:4860:4860::8888 up.", " version 1.2.3.4 released.", " ping 10.0.0.1 internal."};
  const char *tricky[] = {"", "   ", "\n\n\n", "\xff\xfe bad bytes \xc3", "nul\0byte", "tab\tonly\t",
                          "\xc2\xa0\xe2\x80\x83spaces\xe3\x80\x80", "ctrl\x01\x02\x7f chars", "line\r\nbreaks\rmac",
                          "lorem ipsum dolor sit amet"};
  for (size_t i = 0; i < n; i++) {
    int kind = int(g() % 10);
    if (kind == 0) {
      const char *t = tricky[g() % (sizeof tricky / sizeof *tricky)];
      docs.emplace_back(t, std::strlen(t) + (std::strcmp(t, "nul") == 0 ? 5 : 0));
    } else if (kind == 1 && !docs.empty()) {
      docs.push_back(docs[g() % docs.size()]);  // exact duplicate
    } else {
      std::string d;
      int lines = 3 + int(g() % 12);
      for (int l = 0; l < lines; l++) {
        int sents = 1 + int(g() % 4);
        for (int k = 0; k < sents; k++) d += (k ? " " : "") + sentence(g);
        if (g() % 3 == 0) d += pii[g() % (sizeof pii / sizeof *pii)];
        if (g() % 7 == 0) d += "  \t ";
        d += g() % 5 == 0 ? "\n\n" : "\n";
      }
      if (g() % 11 == 0) d += "{ function() { return 1; } }\n";
      docs.push_back(d);
    }
  }
  return docs;
}

Batch to_batch(const std::vector<std::string> &docs, size_t b, size_t e) {
  Batch B;
  for (size_t i = b; i < e; i++) B.add(docs[i]);
  return B;
}

// The four stages of the chain; any other stage of lm_fused_stages is off.
lm_fused_stages stages_of(const lm_cleaner *c, const lm_quality *q, lm_dedup *d, const lm_pii_masker *p) {
  lm_fused_stages s;
  std::memset(&s, 0, sizeof s);
  s.cleaner = c;
  s.quality = q;
  s.dedup = d;
  s.pii = p;
  return s;
}

struct Stages {
  lm_cleaner *c = nullptr;
  lm_quality *q = nullptr;
  lm_dedup *d = nullptr;
  lm_pii_masker *p = nullptr;
  Stages(bool clean, bool quality, bool dedup, bool pii, lm_pii_mode mode = LM_PII_MODE_STRICT,
         const char *wal = nullptr, size_t pii_max_doc_bytes = 0) {
    if (clean) {
      EXPECT_EQ(lm_cleaner_create(nullptr, &c), LM_OK);
    }
    if (quality) {
      EXPECT_EQ(lm_quality_create(nullptr, &q), LM_OK);
    }
    if (dedup) {
      lm_dedup_params dp;
      lm_dedup_params_default(&dp);
      dp.wal_path = wal;
      dp.seed = 7;
      EXPECT_EQ(lm_dedup_create(&dp, &d), LM_OK);
    }
    if (pii) {
      lm_pii_params pp;
      lm_pii_params_default(&pp, mode);
      pp.max_doc_bytes = pii_max_doc_bytes;
      EXPECT_EQ(lm_pii_create(&pp, &p), LM_OK);
    }
  }
  ~Stages() {
    lm_cleaner_destroy(c);
    lm_quality_destroy(q);
    lm_dedup_destroy(d);
    lm_pii_destroy(p);
  }
  lm_fused_stages fused() const { return stages_of(c, q, d, p); }
};

// The modular chain: each stage's batch call on the previous one's output.
lm_status chain_run(Stages &s, const lm_docs &in, Out *out, const lm_exec *ex) {
  size_t n = in.n;
  out->reasons.assign(n, 0);
  std::vector<int64_t> idx(n);
  for (size_t i = 0; i < n; i++) idx[i] = int64_t(i);
  std::vector<int64_t> off(in.offsets, in.offsets + n + 1);
  std::string data(reinterpret_cast<const char *>(in.data), in.data_len);
  for (int k = 0; k < 4; k++) {
    lm_batch_result r;
    lm_batch_result_init(&r);
    lm_docs d{off.data(), reinterpret_cast<const uint8_t *>(data.data()), off.size() - 1, data.size()};
    lm_status st = LM_OK;
    bool ran = true;
    if (k == 0 && s.c) st = lm_cleaner_run(s.c, &d, &r, ex);
    else if (k == 1 && s.q) st = lm_quality_run(s.q, &d, &r, ex);
    else if (k == 2 && s.d) st = lm_dedup_run(s.d, &d, &r, ex);
    else if (k == 3 && s.p) st = lm_pii_run(s.p, &d, &r, ex);
    else ran = false;
    if (st) {
      lm_batch_result_free(&r);
      return st;
    }
    if (!ran) continue;
    for (size_t i = 0; i < r.n_in; i++) out->reasons[size_t(idx[i])] = r.reasons[i];
    std::vector<int64_t> nidx(r.n_out);
    for (size_t j = 0; j < r.n_out; j++) nidx[j] = idx[size_t(r.source_index[j])];
    idx = nidx;
    off.assign(r.offsets, r.offsets + r.n_out + 1);
    data.assign(reinterpret_cast<const char *>(r.data), r.data_len);
    lm_batch_result_free(&r);
  }
  out->texts.clear();
  for (size_t j = 0; j + 1 < off.size(); j++) out->texts.push_back(data.substr(size_t(off[j]), size_t(off[j + 1] - off[j])));
  out->src = idx;
  return LM_OK;
}

Out fused_run(lm_fused *f, const lm_docs &in, const lm_exec *ex) {
  lm_batch_result r;
  lm_batch_result_init(&r);
  EXPECT_EQ(lm_fused_run(f, &in, &r, ex), LM_OK);
  Out o = collect(r);
  lm_batch_result_free(&r);
  return o;
}

std::vector<lm_hash128_t> dedup_hashes(const lm_dedup *d) {
  std::vector<lm_hash128_t> v;
  lm_dedup_foreach(
      d, [](void *ctx, lm_hash128_t h) {
        static_cast<std::vector<lm_hash128_t> *>(ctx)->push_back(h);
        return 0;
      },
      &v);
  return v;
}

void expect_same_dedup(const lm_dedup *a, const lm_dedup *b) {
  uint64_t la, lb;
  lm_dedup_lsn(a, &la);
  lm_dedup_lsn(b, &lb);
  EXPECT_EQ(la, lb);
  auto ha = dedup_hashes(a), hb = dedup_hashes(b);
  ASSERT_EQ(ha.size(), hb.size());
  for (size_t i = 0; i < ha.size(); i++) EXPECT_TRUE(ha[i].lo == hb[i].lo && ha[i].hi == hb[i].hi);
}

// Fused == chain over several batches, one configuration.
// Returns the number of documents the masker refused (its max_doc_bytes).
uint64_t check_equal(bool clean, bool quality, bool dedup, bool pii, lm_pii_mode mode, int threads, size_t grain,
                     uint64_t seed, size_t n = 1500, size_t pii_max_doc_bytes = 0) {
  auto docs = make_docs(seed, n);
  Stages a(clean, quality, dedup, pii, mode, nullptr, pii_max_doc_bytes),
      b(clean, quality, dedup, pii, mode, nullptr, pii_max_doc_bytes);
  lm_fused_stages fs = a.fused();
  lm_fused *f = nullptr;
  EXPECT_EQ(lm_fused_create(&fs, &f), LM_OK);
  if (!f) return 0;
  lm_exec ex{threads, grain};
  size_t cuts[] = {0, 1, n * 2 / 5, n * 2 / 5 + 1, n * 4 / 5, n};
  size_t kept = 0;
  for (size_t k = 0; k + 1 < sizeof cuts / sizeof *cuts; k++) {
    Batch B = to_batch(docs, cuts[k], cuts[k + 1]);
    lm_docs d = B.docs();
    Out fo = fused_run(f, d, &ex);
    Out co;
    EXPECT_EQ(chain_run(b, d, &co, &ex), LM_OK);
    EXPECT_EQ(fo.reasons, co.reasons) << "batch " << k;
    EXPECT_EQ(fo.src, co.src) << "batch " << k;
    EXPECT_EQ(fo.texts, co.texts) << "batch " << k;
    kept += fo.texts.size();
  }
  if (dedup) expect_same_dedup(a.d, b.d);
  // counters agree with the stages' own counters of the chain
  lm_fused_counters fc;
  EXPECT_EQ(lm_fused_get_counters(f, &fc), LM_OK);
  EXPECT_EQ(fc.docs_in, n);
  EXPECT_EQ(fc.docs_out, kept);
  if (clean) {
    lm_clean_counters cc;
    lm_cleaner_get_counters(b.c, &cc);
    EXPECT_EQ(0, memcmp(&cc, &fc.clean, sizeof cc));
  }
  if (quality) {
    lm_quality_counters qc;
    lm_quality_get_counters(b.q, &qc);
    EXPECT_EQ(0, memcmp(&qc, &fc.quality, sizeof qc));
  }
  if (pii) {
    lm_pii_counts pc;
    lm_pii_get_counters(b.p, &pc);
    EXPECT_EQ(0, memcmp(&pc, &fc.pii, sizeof pc));
  }
  if (dedup) {
    lm_dedup_stats sa, sb;
    lm_dedup_stats_get(a.d, &sa);
    lm_dedup_stats_get(b.d, &sb);
    EXPECT_EQ(fc.dedup_inserts, sa.inserts);
    EXPECT_EQ(sa.inserts, sb.inserts);
    EXPECT_EQ(sa.duplicates, sb.duplicates);
    EXPECT_EQ(fc.dropped_duplicate, sb.duplicates);
  }
  EXPECT_EQ(fc.dropped_pii, fc.pii.docs_too_large);
  lm_fused_destroy(f);
  return fc.dropped_pii;
}

}  // namespace

// The masker's size limit drops documents (TOO_LARGE, no text) at the same
// place in the fused pipeline as in the chain: after the dedup admission.
TEST(FusedPipeline, PiiSizeLimitEqualsChain) {
  for (int threads : {1, 2}) {
    uint64_t refused = check_equal(true, false, true, true, LM_PII_MODE_STRICT, threads, 64, 11, 1500, 400);
    EXPECT_GT(refused, 0u) << "the limit must bite on this data";
    refused = check_equal(false, false, false, true, LM_PII_MODE_DATATROVE, threads, 64, 12, 1500, 400);
    EXPECT_GT(refused, 0u);
  }
}

TEST(FusedPipeline, EqualsChainAllStages) {
  for (int t : {1, 2, 4}) {
    SCOPED_TRACE(t);
    check_equal(true, true, true, true, LM_PII_MODE_STRICT, t, 8, 1);
    check_equal(true, true, true, true, LM_PII_MODE_DATATROVE, t, 8, 2);
  }
}

TEST(FusedPipeline, EqualsChainStageSubsets) {
  for (int mask = 0; mask < 16; mask++) {
    SCOPED_TRACE(mask);
    check_equal(mask & 1, mask & 2, mask & 4, mask & 8, LM_PII_MODE_DATATROVE, 3, 16, 100 + uint64_t(mask), 500);
  }
}

TEST(FusedPipeline, SomeDocumentsSurviveEachStage) {
  // guards the equality tests against a corpus where everything is dropped early
  auto docs = make_docs(5, 1500);
  Batch B = to_batch(docs, 0, docs.size());
  Stages s(true, true, true, true);
  lm_fused_stages fs = s.fused();
  lm_fused *f = nullptr;
  ASSERT_EQ(lm_fused_create(&fs, &f), LM_OK);
  lm_docs d = B.docs();
  Out o = fused_run(f, d, nullptr);
  size_t dup = 0, empty = 0, qual = 0, changed = 0;
  for (int32_t r : o.reasons) {
    dup += r == LM_REASON_DUPLICATE;
    empty += r == LM_REASON_EMPTY;
    qual += r >= LM_REASON_QUALITY_BASE;
  }
  for (const auto &t : o.texts) changed += t.find("<EMAIL>") != std::string::npos || t.find("<PHONE>") != std::string::npos;
  EXPECT_GT(o.texts.size(), 200u);
  EXPECT_GT(dup, 50u);
  EXPECT_GT(empty, 5u);
  EXPECT_GT(qual, 20u);
  EXPECT_GT(changed, 50u);
  lm_fused_destroy(f);
}

TEST(FusedPipeline, ThreadCountInvariance) {
  auto docs = make_docs(9, 1200);
  Batch B = to_batch(docs, 0, docs.size());
  lm_docs d = B.docs();
  Out ref;
  for (int t : {1, 2, 3, 8}) {
    for (size_t grain : {size_t(1), size_t(64), size_t(0)}) {
      Stages s(true, true, true, true, LM_PII_MODE_DATATROVE);
      lm_fused_stages fs = s.fused();
      lm_fused *f = nullptr;
      ASSERT_EQ(lm_fused_create(&fs, &f), LM_OK);
      lm_exec ex{t, grain};
      Out o = fused_run(f, d, &ex);
      if (t == 1 && grain == 1) ref = o;
      EXPECT_TRUE(o == ref) << "threads " << t << " grain " << grain;
      lm_fused_destroy(f);
    }
  }
}

TEST(FusedPipeline, WalStateMatchesChainAndReopens) {
  char tmpl[] = "/tmp/lm_fused_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string pa = std::string(tmpl) + "/a.wal", pb = std::string(tmpl) + "/b.wal";
  auto docs = make_docs(11, 1200);
  uint64_t lsn_a = 0;
  {
    Stages a(true, true, true, true, LM_PII_MODE_STRICT, pa.c_str()), b(true, true, true, true, LM_PII_MODE_STRICT, pb.c_str());
    lm_fused_stages fs = a.fused();
    lm_fused *f = nullptr;
    ASSERT_EQ(lm_fused_create(&fs, &f), LM_OK);
    lm_exec ex{2, 4};
    for (size_t k = 0; k < 1200; k += 400) {
      Batch B = to_batch(docs, k, k + 400);
      lm_docs d = B.docs();
      Out fo = fused_run(f, d, &ex), co;
      ASSERT_EQ(chain_run(b, d, &co, &ex), LM_OK);
      ASSERT_TRUE(fo == co);
    }
    expect_same_dedup(a.d, b.d);
    ASSERT_EQ(lm_dedup_sync(a.d, &lsn_a), LM_OK);
    EXPECT_GT(lsn_a, 100u);
    lm_fused_destroy(f);
  }
  // reopen: the same state, so the same batch is now all duplicates (or dropped earlier)
  Stages a(true, true, true, true, LM_PII_MODE_STRICT, pa.c_str());
  uint64_t lsn = 0;
  lm_dedup_lsn(a.d, &lsn);
  EXPECT_EQ(lsn, lsn_a);
  lm_fused_stages fs = a.fused();
  lm_fused *f = nullptr;
  ASSERT_EQ(lm_fused_create(&fs, &f), LM_OK);
  Batch B = to_batch(docs, 0, 1200);
  lm_docs d = B.docs();
  Out o = fused_run(f, d, nullptr);
  EXPECT_EQ(o.texts.size(), 0u);
  lm_dedup_lsn(a.d, &lsn);
  EXPECT_EQ(lsn, lsn_a);
  lm_fused_destroy(f);
  std::remove(pa.c_str());
  std::remove(pb.c_str());
  std::remove((pa + ".snap").c_str());
  std::remove((pb + ".snap").c_str());
  rmdir(tmpl);
}

TEST(FusedPipeline, NoStagesCopiesInput) {
  lm_fused *f = nullptr;
  ASSERT_EQ(lm_fused_create(nullptr, &f), LM_OK);
  Batch B;
  B.add("a");
  B.add("");
  B.add(std::string("x\0y", 3));
  lm_docs d = B.docs();
  Out o = fused_run(f, d, nullptr);
  EXPECT_EQ(o.texts, (std::vector<std::string>{"a", "", std::string("x\0y", 3)}));
  EXPECT_EQ(o.src, (std::vector<int64_t>{0, 1, 2}));
  lm_fused_destroy(f);
}

TEST(FusedPipeline, EmptyBatch) {
  Stages s(true, true, true, true);
  lm_fused_stages fs = s.fused();
  lm_fused *f = nullptr;
  ASSERT_EQ(lm_fused_create(&fs, &f), LM_OK);
  Batch B;
  lm_docs d = B.docs();
  lm_batch_result r;
  lm_batch_result_init(&r);
  EXPECT_EQ(lm_fused_run(f, &d, &r, nullptr), LM_OK);
  EXPECT_EQ(r.n_in, 0u);
  EXPECT_EQ(r.n_out, 0u);
  lm_batch_result_free(&r);
  lm_fused_destroy(f);
}

TEST(FusedPipeline, Errors) {
  lm_fused *f = nullptr;
  EXPECT_EQ(lm_fused_create(nullptr, nullptr), LM_EINVAL);
  Stages s(true, false, true, false);
  lm_fused_stages fs = s.fused();
  ASSERT_EQ(lm_fused_create(&fs, &f), LM_OK);
  lm_batch_result r;
  lm_batch_result_init(&r);
  Batch B;
  B.add("one document here");
  B.add("another document");
  lm_docs d = B.docs();
  EXPECT_EQ(lm_fused_run(nullptr, &d, &r, nullptr), LM_EINVAL);
  EXPECT_EQ(lm_fused_run(f, nullptr, &r, nullptr), LM_EINVAL);
  EXPECT_EQ(lm_fused_run(f, &d, nullptr, nullptr), LM_EINVAL);
  // decreasing offsets / past the end: rejected before any admission
  std::vector<int64_t> bad{0, 5, 3};
  lm_docs bd{bad.data(), d.data, 2, d.data_len};
  EXPECT_EQ(lm_fused_run(f, &bd, &r, nullptr), LM_EINVAL);
  std::vector<int64_t> past{0, 5, 1000};
  lm_docs pd{past.data(), d.data, 2, d.data_len};
  EXPECT_EQ(lm_fused_run(f, &pd, &r, nullptr), LM_EINVAL);
  uint64_t lsn = 9;
  lm_dedup_lsn(s.d, &lsn);
  EXPECT_EQ(lsn, 0u);
  EXPECT_EQ(lm_fused_get_counters(f, nullptr), LM_EINVAL);
  EXPECT_EQ(lm_fused_reset_counters(nullptr), LM_EINVAL);
  // a closed deduplicator
  ASSERT_EQ(lm_dedup_close(s.d), LM_OK);
  EXPECT_EQ(lm_fused_run(f, &d, &r, nullptr), LM_ESTATE);
  lm_batch_result_free(&r);
  lm_fused_destroy(f);
  lm_fused_destroy(nullptr);
}

TEST(FusedPipeline, MaxEntriesStopsLikeTheChain) {
  auto docs = make_docs(21, 400);
  Batch B = to_batch(docs, 0, docs.size());
  lm_docs d = B.docs();
  for (int which = 0; which < 2; which++) {
    lm_dedup_params dp;
    lm_dedup_params_default(&dp);
    dp.max_entries = 50;
    lm_dedup *dd = nullptr;
    ASSERT_EQ(lm_dedup_create(&dp, &dd), LM_OK);
    lm_cleaner *c = nullptr;
    ASSERT_EQ(lm_cleaner_create(nullptr, &c), LM_OK);
    lm_batch_result r;
    lm_batch_result_init(&r);
    lm_status st;
    if (which == 0) {
      lm_fused_stages fs = stages_of(c, nullptr, dd, nullptr);
      lm_fused *f = nullptr;
      ASSERT_EQ(lm_fused_create(&fs, &f), LM_OK);
      st = lm_fused_run(f, &d, &r, nullptr);
      lm_fused_destroy(f);
    } else {
      lm_batch_result r1;
      lm_batch_result_init(&r1);
      ASSERT_EQ(lm_cleaner_run(c, &d, &r1, nullptr), LM_OK);
      lm_docs d1{r1.offsets, r1.data, r1.n_out, r1.data_len};
      st = lm_dedup_run(dd, &d1, &r, nullptr);
      lm_batch_result_free(&r1);
    }
    EXPECT_EQ(st, LM_ETOOBIG);
    uint64_t lsn = 0;
    lm_dedup_lsn(dd, &lsn);
    EXPECT_EQ(lsn, 0u);  // all or nothing: the batch does not fit, none of it is admitted
    lm_batch_result_free(&r);
    lm_cleaner_destroy(c);
    lm_dedup_destroy(dd);
  }
}

TEST(FusedPipeline, ResetCountersRestartsPiiCycle) {
  // datatrove mode cycles its replacements across documents; reset starts over
  lm_pii_masker *p = nullptr;
  lm_pii_params pp;
  lm_pii_params_default(&pp, LM_PII_MODE_DATATROVE);
  ASSERT_EQ(lm_pii_create(&pp, &p), LM_OK);
  lm_fused_stages fs = stages_of(nullptr, nullptr, nullptr, p);
  lm_fused *f = nullptr;
  ASSERT_EQ(lm_fused_create(&fs, &f), LM_OK);
  Batch B;
  B.add("write to joe@example.com");
  lm_docs d = B.docs();
  Out a = fused_run(f, d, nullptr), b = fused_run(f, d, nullptr);
  EXPECT_EQ(a.texts[0], "write to email@example.com");
  EXPECT_EQ(b.texts[0], "write to firstname.lastname@example.org");
  ASSERT_EQ(lm_fused_reset_counters(f), LM_OK);
  Out c = fused_run(f, d, nullptr);
  EXPECT_EQ(c.texts[0], a.texts[0]);
  lm_fused_counters fc;
  lm_fused_get_counters(f, &fc);
  EXPECT_EQ(fc.pii.matches[LM_PII_EMAIL], 1u);
  lm_fused_destroy(f);
  lm_pii_destroy(p);
}

TEST(FusedPipeline, PiiCycleGetSetContinuesAfterRestore) {
  // a resume restores the cycle: a fresh pipeline (or masker) given the saved positions
  // continues exactly where the first one was
  lm_pii_masker *p = nullptr;
  lm_pii_params pp;
  lm_pii_params_default(&pp, LM_PII_MODE_DATATROVE);
  ASSERT_EQ(lm_pii_create(&pp, &p), LM_OK);
  lm_fused_stages fs = stages_of(nullptr, nullptr, nullptr, p);
  lm_fused *f = nullptr, *g = nullptr;
  ASSERT_EQ(lm_fused_create(&fs, &f), LM_OK);
  ASSERT_EQ(lm_fused_create(&fs, &g), LM_OK);
  Batch B;
  B.add("write to joe@example.com");
  lm_docs d = B.docs();
  Out a = fused_run(f, d, nullptr);
  uint64_t cyc[LM_PII_TYPE_COUNT];
  ASSERT_EQ(lm_fused_get_pii_cycle(f, cyc), LM_OK);
  EXPECT_EQ(cyc[LM_PII_EMAIL], 1u);
  ASSERT_EQ(lm_fused_set_pii_cycle(g, cyc), LM_OK);
  Out gb = fused_run(g, d, nullptr), fb = fused_run(f, d, nullptr);
  EXPECT_EQ(gb.texts, fb.texts);
  EXPECT_EQ(gb.texts[0], "write to firstname.lastname@example.org");  // not restarted at the first string
  EXPECT_NE(gb.texts[0], a.texts[0]);
  EXPECT_EQ(lm_fused_get_pii_cycle(nullptr, cyc), LM_EINVAL);
  EXPECT_EQ(lm_fused_set_pii_cycle(f, nullptr), LM_EINVAL);

  // the masker's own cycle (lm_pii_run)
  lm_pii_masker *q = nullptr;
  ASSERT_EQ(lm_pii_create(&pp, &q), LM_OK);
  lm_batch_result r1{}, r2{};
  ASSERT_EQ(lm_pii_run(p, &d, &r1, nullptr), LM_OK);
  uint64_t pc[LM_PII_TYPE_COUNT];
  ASSERT_EQ(lm_pii_get_cycle(p, pc), LM_OK);
  EXPECT_EQ(pc[LM_PII_EMAIL], 1u);
  ASSERT_EQ(lm_pii_set_cycle(q, pc), LM_OK);
  lm_batch_result_free(&r1);
  ASSERT_EQ(lm_pii_run(p, &d, &r1, nullptr), LM_OK);
  ASSERT_EQ(lm_pii_run(q, &d, &r2, nullptr), LM_OK);
  EXPECT_EQ(collect(r1).texts, collect(r2).texts);
  EXPECT_EQ(collect(r2).texts[0], "write to firstname.lastname@example.org");
  EXPECT_EQ(lm_pii_get_cycle(p, nullptr), LM_EINVAL);
  EXPECT_EQ(lm_pii_set_cycle(nullptr, pc), LM_EINVAL);
  lm_batch_result_free(&r1);
  lm_batch_result_free(&r2);
  lm_pii_destroy(q);
  lm_fused_destroy(f);
  lm_fused_destroy(g);
  lm_pii_destroy(p);
}

// ---- regression (review of the size limits, issue 8)
#include "address_limit.h"

// The fused pipeline's clean phase reserved 3 x len of arena for every document before the
// cleaner refused it for max_doc_bytes.  Fix: core/src/pipeline.c reads the cleaner's limit
// (lm_cleaner_get_params) and reserves nothing for a document above it.  The child process's
// address space leaves ~96 MiB beyond the input (plain build only: see address_limit.h).
TEST(FusedPipeline, RefusesOversizedDocumentWithoutReservingForIt) {
  lm_cleaner_params p;
  ASSERT_EQ(lm_cleaner_params_default(&p), LM_OK);
  p.max_doc_bytes = 1024;
  lm_cleaner *c = nullptr;
  ASSERT_EQ(lm_cleaner_create(&p, &c), LM_OK);
  lm_cleaner_params back;
  ASSERT_EQ(lm_cleaner_get_params(c, &back), LM_OK);
  EXPECT_EQ(back.max_doc_bytes, 1024u);
  lm_fused_stages st = {c, nullptr, nullptr, nullptr, nullptr};
  lm_fused *f = nullptr;
  ASSERT_EQ(lm_fused_create(&st, &f), LM_OK);
  expect_oversized_document_refused_without_reserving(
      [&](const lm_docs *in, lm_batch_result *r) { return lm_fused_run(f, in, r, nullptr); });
  lm_fused_destroy(f);
  lm_cleaner_destroy(c);
}
