// Regression tests for the findings of the fuzz targets (fuzz/, scripts/fuzz.sh).
// Each test reproduces the input that exposed the bug, in plain C API calls, and
// fails (or, for undefined behaviour, trips UBSan in the LM_SANITIZE build)
// without the fix named in its comment.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

extern "C" {
#include "luminamoon/clean.h"
#include "luminamoon/crc32c.h"
#include "luminamoon/dedup.h"
#include "luminamoon/pipeline.h"
#include "luminamoon/quality.h"
}

namespace {

struct RegTempDir {
  std::string path;
  RegTempDir() {
    const char *base = getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/lm_regress_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back(0);
    EXPECT_NE(mkdtemp(buf.data()), nullptr);
    path = buf.data();
  }
  ~RegTempDir() { EXPECT_EQ(system(("rm -rf '" + path + "'").c_str()), 0); }
};

std::string slurp(const std::string &p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
void spit(const std::string &p, const std::string &s) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(s.data(), (std::streamsize)s.size());
}
uint64_t get64(const std::string &s, size_t at) {
  uint64_t v;
  memcpy(&v, s.data() + at, 8);
  return v;
}
void put64(std::string &s, size_t at, uint64_t v) { memcpy(&s[at], &v, 8); }
void put32(std::string &s, size_t at, uint32_t v) { memcpy(&s[at], &v, 4); }

using Key = std::pair<uint64_t, uint64_t>;

int collect(void *ctx, lm_hash128_t h) {
  static_cast<std::set<Key> *>(ctx)->insert({h.lo, h.hi});
  return 0;
}

// A WAL of `n` hashes with a snapshot of all of them; returns the hashes.
std::set<Key> make_wal_with_snapshot(const std::string &wal, size_t n) {
  lm_dedup_params p;
  lm_dedup_params_default(&p);
  p.wal_path = wal.c_str();
  p.wal_buffer_hashes = 4;
  p.initial_capacity = 16;
  lm_dedup *d = nullptr;
  EXPECT_EQ(lm_dedup_create(&p, &d), LM_OK);
  std::set<Key> want;
  for (size_t k = 0; k < n; k++) {
    lm_hash128_t h = {0x9e3779b97f4a7c15ull * (k + 1), (k * 0x5851f42d4c957f2dull) | 1};
    int is_new = 0;
    EXPECT_EQ(lm_dedup_check_insert_hash(d, h, &is_new), LM_OK);
    EXPECT_EQ(is_new, 1);
    want.insert({h.lo, h.hi});
  }
  EXPECT_EQ(lm_dedup_snapshot(d), LM_OK);
  EXPECT_EQ(lm_dedup_close(d), LM_OK);
  lm_dedup_destroy(d);
  return want;
}

void reopen_expect(const std::string &wal, const std::set<Key> &want, int snapshot_loaded) {
  lm_dedup_params p;
  lm_dedup_params_default(&p);
  p.wal_path = wal.c_str();
  lm_dedup *d = nullptr;
  ASSERT_EQ(lm_dedup_create(&p, &d), LM_OK);
  lm_dedup_stats st;
  ASSERT_EQ(lm_dedup_stats_get(d, &st), LM_OK);
  EXPECT_EQ(st.snapshot_loaded, snapshot_loaded);
  EXPECT_EQ(st.entries, want.size());
  std::set<Key> got;
  ASSERT_EQ(lm_dedup_foreach(d, collect, &got), LM_OK);
  EXPECT_EQ(got, want);
  for (const Key &k : want) {
    int found = 0;
    lm_hash128_t h = {k.first, k.second};
    ASSERT_EQ(lm_dedup_contains(d, h, &found), LM_OK);
    EXPECT_EQ(found, 1);
  }
  lm_dedup_destroy(d);
}

// Header CRC (bytes 92..95 over 0..91) and slot CRC (80..83) of a snapshot, recomputed.
void reseal(std::string &snap) {
  put32(snap, 80, lm_crc32c(snap.data() + 96, snap.size() - 96));
  put32(snap, 92, lm_crc32c(snap.data(), 92));
}

}  // namespace

// fuzz_quality: a range of documents that kept only empty texts left the
// range's output buffer NULL, and lm_quality_run computed NULL + 0 (undefined
// behaviour, reported by UBSan).  Input: all rule sets off, one empty document.
// Fix: core/src/quality.c passes NULL for an empty text instead of data + pos.
TEST(Regression, QualityRunKeptEmptyTextOnly) {
  lm_quality_params p;
  ASSERT_EQ(lm_quality_params_default(&p), LM_OK);
  for (int s = 0; s < LM_QSET_COUNT; s++)
    ASSERT_EQ(lm_quality_params_set_rule_set(&p, (lm_quality_rule_set)s, 0), LM_OK);
  p.c4_modify_text = 0;
  lm_quality *q = nullptr;
  ASSERT_EQ(lm_quality_create(&p, &q), LM_OK);
  const int64_t offs[3] = {0, 0, 0};
  lm_docs docs = {offs, nullptr, 2, 0};
  lm_batch_result r;
  lm_batch_result_init(&r);
  ASSERT_EQ(lm_quality_run(q, &docs, &r, nullptr), LM_OK);
  ASSERT_EQ(r.n_out, 2u);
  EXPECT_EQ(r.reasons[0], LM_REASON_KEPT);
  EXPECT_EQ(r.reasons[1], LM_REASON_KEPT);
  EXPECT_EQ(r.offsets[2], 0);
  lm_batch_result_free(&r);
  lm_quality_destroy(q);
}

// fuzz_snapshot (forged CRCs): a snapshot whose slot array was out of order (two
// slots swapped, CRCs recomputed) was loaded as the table, so lm_dedup_contains
// missed hashes that lm_dedup_foreach listed.  Fix: core/src/dedup_wal.c checks
// the loaded array's structure (lm_dt_check in dedup.c) and falls back to replay.
TEST(Regression, SnapshotWithUnorderedSlotsIsNotTrusted) {
  RegTempDir t;
  std::string wal = t.path + "/wal";
  std::set<Key> want = make_wal_with_snapshot(wal, 40);
  std::string snap = slurp(wal + ".snap");
  ASSERT_GT(snap.size(), 96u);
  // swap the first two occupied slots
  std::vector<size_t> occ;
  for (size_t off = 96; off + 16 <= snap.size(); off += 16)
    if (get64(snap, off) | get64(snap, off + 8)) occ.push_back(off);
  ASSERT_GE(occ.size(), 2u);
  std::string a = snap.substr(occ[0], 16), b = snap.substr(occ[1], 16);
  snap.replace(occ[0], 16, b);
  snap.replace(occ[1], 16, a);
  reseal(snap);
  spit(wal + ".snap", snap);
  reopen_expect(wal, want, 0);
}

// fuzz_snapshot (forged CRCs): a header announcing a huge capacity made the
// loader allocate (cap + 64) * 16 bytes before reading anything: 8 TiB here,
// an allocation failure in a plain build and an abort under ASan.  Fix: the
// snapshot's file size must equal 96 + nslots * 16 before any allocation.
TEST(Regression, SnapshotHugeCapacityIsRejectedBeforeAllocating) {
  RegTempDir t;
  std::string wal = t.path + "/wal";
  std::set<Key> want = make_wal_with_snapshot(wal, 10);
  std::string snap = slurp(wal + ".snap");
  uint64_t cap = (uint64_t)1 << 39;
  put64(snap, 32, cap);
  put64(snap, 40, cap + 64);
  reseal(snap);
  spit(wal + ".snap", snap);
  reopen_expect(wal, want, 0);
}

// A slot array longer than the header says (bytes appended, CRCs recomputed) is
// not a snapshot this code wrote: ignored, the log is replayed.
TEST(Regression, SnapshotWithTrailingBytesIsNotTrusted) {
  RegTempDir t;
  std::string wal = t.path + "/wal";
  std::set<Key> want = make_wal_with_snapshot(wal, 10);
  std::string snap = slurp(wal + ".snap");
  snap.append(16, '\0');
  reseal(snap);
  spit(wal + ".snap", snap);
  reopen_expect(wal, want, 0);
  // and the untouched snapshot is still used
  RegTempDir t2;
  std::string wal2 = t2.path + "/wal";
  std::set<Key> want2 = make_wal_with_snapshot(wal2, 10);
  reopen_expect(wal2, want2, 1);
}

// Review of the snapshot path: lm_dt_init computed (cap + 64) * 16 without an
// overflow check, so initial_capacity near SIZE_MAX wrapped to a tiny array
// that claimed a huge capacity.  Fixed in commit 5189252 (lm_dt_init refuses
// capacities above 2^40: LM_ENOMEM); kept here with the other dedup findings.
TEST(Regression, DedupHugeInitialCapacityFailsCleanly) {
  lm_dedup_params p;
  lm_dedup_params_default(&p);
  p.initial_capacity = SIZE_MAX - 8;
  lm_dedup *d = nullptr;
  EXPECT_EQ(lm_dedup_create(&p, &d), LM_ENOMEM);
  EXPECT_EQ(d, nullptr);
  p.initial_capacity = SIZE_MAX / 16 - 10;
  EXPECT_EQ(lm_dedup_create(&p, &d), LM_ENOMEM);
  EXPECT_EQ(d, nullptr);
}

// Review of the size limits (issue 8, resource limits): lm_quality_check tested
// its 32-bit token-offset bound (4 GiB) before the configured max_doc_bytes, so
// a document above both failed the whole batch with LM_ETOOBIG instead of being
// refused with LM_REASON_TOO_LARGE.  The text is never read on that path, so a
// 1-byte buffer with a 5 GiB length reproduces it.  Fix: core/src/quality_rules.c
// checks the configured limit first.
TEST(Regression, QualityLimitBeatsTheFourGigabyteBound) {
  lm_quality_params p;
  ASSERT_EQ(lm_quality_params_default(&p), LM_OK);
  p.max_doc_bytes = 1000;
  lm_quality *q = nullptr;
  ASSERT_EQ(lm_quality_create(&p, &q), LM_OK);
  lm_quality_scratch *s = nullptr;
  ASSERT_EQ(lm_quality_scratch_create(&s), LM_OK);
  static const uint8_t byte = 'x';
  lm_quality_doc_result r;
  const size_t huge = (size_t)5 << 30;
  ASSERT_EQ(lm_quality_check(q, s, &byte, huge, &r, nullptr), LM_OK);
  EXPECT_EQ(r.reason, LM_REASON_TOO_LARGE);
  // without a configured limit the bound is still a clear error, not a crash
  lm_quality *q0 = nullptr;
  ASSERT_EQ(lm_quality_create(nullptr, &q0), LM_OK);
  EXPECT_EQ(lm_quality_check(q0, s, &byte, huge, &r, nullptr), LM_ETOOBIG);
  lm_quality_destroy(q0);
  lm_quality_scratch_destroy(s);
  lm_quality_destroy(q);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LM_REGRESS_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define LM_REGRESS_SANITIZED 1
#endif
#endif

// Review of the size limits: lm_cleaner_run reserved lm_clean_bound(len) = 3 x
// len bytes of output for every document BEFORE lm_clean_text refused it for
// max_doc_bytes, so a 64 MiB document "refused" at 1 KiB still cost 192 MiB.
// Reproduced in a child process whose address space leaves ~96 MiB of room
// beyond the input and the result (the sanitizers reserve huge address ranges,
// so this one runs in the plain build only).  Fix: core/src/clean.c reserves
// nothing for a document above the limit.
TEST(Regression, CleanerRefusesOversizedDocumentWithoutReservingForIt) {
#ifdef LM_REGRESS_SANITIZED
  GTEST_SKIP() << "RLIMIT_AS cannot be used under a sanitizer";
#else
  const size_t big = (size_t)64 << 20;
  std::string doc(big, 'a');
  std::vector<int64_t> offs{0, 5, (int64_t)(5 + big)};
  std::string data = "small" + doc;
  doc.clear();
  doc.shrink_to_fit();
  lm_cleaner_params p;
  ASSERT_EQ(lm_cleaner_params_default(&p), LM_OK);
  p.max_doc_bytes = 1024;
  lm_cleaner *c = nullptr;
  ASSERT_EQ(lm_cleaner_create(&p, &c), LM_OK);
  lm_batch_result r;
  lm_batch_result_init(&r);
  lm_docs in{offs.data(), (const uint8_t *)data.data(), 2, data.size()};
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // the result reserves about data_len up front; leave ~96 MiB beyond that
    long pages = 0, page = sysconf(_SC_PAGESIZE);
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%ld", &pages) != 1) _exit(3);
    fclose(f);
    rlim_t lim = (rlim_t)pages * (rlim_t)page + (rlim_t)data.size() + ((rlim_t)96 << 20);
    struct rlimit rl = {lim, lim};
    if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(4);
    lm_status s = lm_cleaner_run(c, &in, &r, nullptr);
    if (s != LM_OK) _exit(10 + (int)s);
    if (r.n_out != 1 || r.reasons[0] != LM_REASON_KEPT || r.reasons[1] != LM_REASON_TOO_LARGE) _exit(5);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "child exit code (10 + lm_status on an error; 12 = LM_ENOMEM)";
  // and in this process, without a limit on memory: the same answer
  ASSERT_EQ(lm_cleaner_run(c, &in, &r, nullptr), LM_OK);
  EXPECT_EQ(r.reasons[1], LM_REASON_TOO_LARGE);
  lm_batch_result_free(&r);
  lm_cleaner_destroy(c);
#endif
}

// The same review for the fused pipeline: its clean phase reserved 3 x len of
// arena for every document before the cleaner refused it for max_doc_bytes.
// Fix: core/src/pipeline.c reads the cleaner's limit (lm_cleaner_get_params)
// and reserves nothing for a document above it.
TEST(Regression, FusedPipelineRefusesOversizedDocumentWithoutReservingForIt) {
#ifdef LM_REGRESS_SANITIZED
  GTEST_SKIP() << "RLIMIT_AS cannot be used under a sanitizer";
#else
  const size_t big = (size_t)64 << 20;
  std::vector<int64_t> offs{0, 5, (int64_t)(5 + big)};
  std::string data = "small" + std::string(big, 'a');
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
  lm_batch_result r;
  lm_batch_result_init(&r);
  lm_docs in{offs.data(), (const uint8_t *)data.data(), 2, data.size()};
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    long pages = 0, page = sysconf(_SC_PAGESIZE);
    FILE *fp = fopen("/proc/self/statm", "r");
    if (!fp || fscanf(fp, "%ld", &pages) != 1) _exit(3);
    fclose(fp);
    rlim_t lim = (rlim_t)pages * (rlim_t)page + (rlim_t)data.size() + ((rlim_t)96 << 20);
    struct rlimit rl = {lim, lim};
    if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(4);
    lm_status s = lm_fused_run(f, &in, &r, nullptr);
    if (s != LM_OK) _exit(10 + (int)s);
    if (r.n_out != 1 || r.reasons[0] != LM_REASON_KEPT || r.reasons[1] != LM_REASON_TOO_LARGE) _exit(5);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "child exit code (10 + lm_status on an error; 12 = LM_ENOMEM)";
  ASSERT_EQ(lm_fused_run(f, &in, &r, nullptr), LM_OK);
  EXPECT_EQ(r.reasons[1], LM_REASON_TOO_LARGE);
  lm_batch_result_free(&r);
  lm_fused_destroy(f);
  lm_cleaner_destroy(c);
#endif
}
