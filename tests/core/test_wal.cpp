// Tests for the StreamDeduplicator's write-ahead log, truncation and snapshots
// (luminamoon/dedup.h): reopen gives the same state; a torn tail at every byte
// offset of the last record is cut; a flipped bit anywhere is either cut (last
// record) or reported (LM_ECORRUPT / LM_EVERSION), never read as data;
// truncation to an LSN equals a fresh build from the first records; snapshot +
// replay equals full replay; version mismatch; unwritable paths.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

extern "C" {
#include "luminamoon/crc32c.h"
#include "luminamoon/dedup.h"
}

namespace {

using Key = std::pair<uint64_t, uint64_t>;

struct TempDir {
  std::string path;
  TempDir() {
    const char *base = getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/lm_wal_test_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back(0);
    EXPECT_NE(mkdtemp(buf.data()), nullptr);
    path = buf.data();
  }
  ~TempDir() { EXPECT_EQ(system(("rm -rf '" + path + "'").c_str()), 0); }
  std::string file(const std::string &name) const { return path + "/" + name; }
};

std::string read_all(const std::string &p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}
void write_all(const std::string &p, const std::string &s) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(s.data(), (std::streamsize)s.size());
}
bool exists(const std::string &p) {
  struct stat sb;
  return stat(p.c_str(), &sb) == 0;
}

lm_status open_wal(const std::string &path, lm_dedup **d, size_t buf = 8, uint64_t seed = 0) {
  lm_dedup_params p;
  lm_dedup_params_default(&p);
  p.wal_path = path.c_str();
  p.wal_buffer_hashes = buf;
  p.seed = seed;
  p.initial_capacity = 16;
  return lm_dedup_create(&p, d);
}

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

std::set<Key> first_n(const std::vector<lm_hash128_t> &admitted, size_t n) {
  std::set<Key> s;
  for (size_t i = 0; i < n; i++) s.insert({admitted[i].hi, admitted[i].lo});
  return s;
}

uint64_t lsn_of(const lm_dedup *d) {
  uint64_t l = 0;
  EXPECT_EQ(lm_dedup_lsn(d, &l), LM_OK);
  return l;
}

// Feeds `n` random hashes (with duplicates) and returns the admitted ones in order.
std::vector<lm_hash128_t> feed(lm_dedup *d, size_t n, std::mt19937_64 &rng, std::vector<lm_hash128_t> *admitted,
                               int sync_every = 0) {
  std::vector<lm_hash128_t> pool;
  for (size_t i = 0; i < n; i++) {
    lm_hash128_t h = (!pool.empty() && rng() % 4 == 0) ? pool[rng() % pool.size()] : lm_hash128_t{rng(), rng()};
    pool.push_back(h);
    int nw = -1;
    EXPECT_EQ(lm_dedup_check_insert_hash(d, h, &nw), LM_OK);
    if (nw == 1) admitted->push_back(h);
    if (sync_every && i % sync_every == (size_t)sync_every - 1) {
      EXPECT_EQ(lm_dedup_sync(d, nullptr), LM_OK);
    }
  }
  return pool;
}

// Record layout (see dedup.h): 64-byte file header, then 24-byte record headers + 16 B per hash.
std::vector<std::pair<size_t, uint32_t>> records(const std::string &wal) {
  std::string s = read_all(wal);
  std::vector<std::pair<size_t, uint32_t>> r;
  size_t off = 64;
  while (off + 24 <= s.size()) {
    uint32_t c;
    memcpy(&c, s.data() + off + 4, 4);
    r.push_back({off, c});
    off += 24 + 16 * (size_t)c;
  }
  EXPECT_EQ(off, s.size());
  return r;
}

}  // namespace

TEST(Wal, ReopenAfterCloseGivesSameState) {
  TempDir td;
  std::string path = td.file("a.wal");
  std::mt19937_64 rng(1);
  std::vector<lm_hash128_t> adm;
  lm_dedup *d = nullptr;
  ASSERT_EQ(open_wal(path, &d, 64), LM_OK);
  feed(d, 5000, rng, &adm, 333);
  lm_dedup_stats st;
  lm_dedup_stats_get(d, &st);
  EXPECT_EQ(st.durable_lsn, st.written_lsn);
  EXPECT_LE(st.durable_lsn, st.lsn);
  std::set<Key> before = held(d);
  ASSERT_EQ(lm_dedup_close(d), LM_OK);  // flushes and syncs the buffered rest
  lm_dedup_destroy(d);
  ASSERT_EQ(open_wal(path, &d, 64), LM_OK);
  EXPECT_EQ(held(d), before);
  EXPECT_EQ(held(d), first_n(adm, adm.size()));
  EXPECT_EQ(lsn_of(d), adm.size());
  // and it keeps deduplicating against the recovered state
  int nw = -1;
  ASSERT_EQ(lm_dedup_check_insert_hash(d, adm[17], &nw), LM_OK);
  EXPECT_EQ(nw, 0);
  lm_dedup_destroy(d);  // destroy also closes
  ASSERT_EQ(open_wal(path, &d, 64), LM_OK);
  EXPECT_EQ(lsn_of(d), adm.size());
  lm_dedup_destroy(d);
}

TEST(Wal, SyncWritesOneRecordNotOnePerHash) {
  TempDir td;
  std::string path = td.file("s.wal");
  lm_dedup *d = nullptr;
  ASSERT_EQ(open_wal(path, &d, 1000), LM_OK);
  int nw;
  for (uint64_t i = 1; i <= 10; i++) lm_dedup_check_insert_hash(d, {i, i}, &nw);
  EXPECT_EQ(read_all(path).size(), 64u);  // still buffered
  uint64_t lsn = 0;
  ASSERT_EQ(lm_dedup_sync(d, &lsn), LM_OK);
  EXPECT_EQ(lsn, 10u);
  auto rec = records(path);
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(rec[0].second, 10u);
  lm_dedup_destroy(d);
}

TEST(Wal, TornTailAtEveryByteOfTheLastRecordIsCut) {
  TempDir td;
  std::string path = td.file("t.wal");
  std::mt19937_64 rng(2);
  std::vector<lm_hash128_t> adm;
  lm_dedup *d = nullptr;
  ASSERT_EQ(open_wal(path, &d, 5), LM_OK);
  feed(d, 40, rng, &adm, 0);
  ASSERT_EQ(lm_dedup_close(d), LM_OK);
  lm_dedup_destroy(d);
  std::string full = read_all(path);
  auto rec = records(path);
  ASSERT_GE(rec.size(), 3u);
  size_t last_off = rec.back().first;
  size_t before_last = adm.size() - rec.back().second;
  for (size_t cut = last_off; cut < full.size(); cut++) {
    std::string p = td.file("cut.wal");
    write_all(p, full.substr(0, cut));
    ASSERT_EQ(open_wal(p, &d, 5), LM_OK) << cut;
    ASSERT_EQ(lsn_of(d), before_last) << cut;
    ASSERT_EQ(held(d), first_n(adm, before_last)) << cut;
    lm_dedup_stats st;
    lm_dedup_stats_get(d, &st);
    ASSERT_EQ(st.tail_bytes_cut, cut - last_off);
    // appending after the cut works and survives a reopen
    int nw;
    ASSERT_EQ(lm_dedup_check_insert_hash(d, {999, 999}, &nw), LM_OK);
    ASSERT_EQ(nw, 1);
    lm_dedup_destroy(d);
    ASSERT_EQ(open_wal(p, &d, 5), LM_OK);
    ASSERT_EQ(lsn_of(d), before_last + 1);
    lm_dedup_destroy(d);
  }
  // garbage (zeros, as a crash on some file systems leaves) after the last record
  write_all(td.file("z.wal"), full + std::string(100, '\0'));
  ASSERT_EQ(open_wal(td.file("z.wal"), &d, 5), LM_OK);
  EXPECT_EQ(lsn_of(d), adm.size());
  lm_dedup_destroy(d);
  // a header torn while the file was being created
  write_all(td.file("h.wal"), full.substr(0, 10));
  ASSERT_EQ(open_wal(td.file("h.wal"), &d, 5), LM_OK);
  EXPECT_EQ(lsn_of(d), 0u);
  lm_dedup_destroy(d);
}

TEST(Wal, FlippedBitsAreCutOrReportedNeverRead) {
  TempDir td;
  std::string path = td.file("f.wal");
  std::mt19937_64 rng(3);
  std::vector<lm_hash128_t> adm;
  lm_dedup *d = nullptr;
  ASSERT_EQ(open_wal(path, &d, 4), LM_OK);
  feed(d, 16, rng, &adm, 0);
  ASSERT_EQ(lm_dedup_close(d), LM_OK);
  lm_dedup_destroy(d);
  std::string full = read_all(path);
  auto rec = records(path);
  ASSERT_GE(rec.size(), 3u);
  size_t last_off = rec.back().first;
  for (size_t pos = 0; pos < full.size(); pos++) {
    for (int bit : {0, 5}) {
      std::string s = full;
      s[pos] = (char)(s[pos] ^ (1 << ((pos + bit) % 8)));
      std::string p = td.file("flip.wal");
      write_all(p, s);
      lm_status st = open_wal(p, &d, 4);
      if (pos < 64) {
        EXPECT_TRUE(st == LM_ECORRUPT || st == LM_EVERSION) << pos << " " << lm_status_name(st);
      } else if (pos < last_off) {
        EXPECT_EQ(st, LM_ECORRUPT) << pos;
      } else {
        ASSERT_EQ(st, LM_OK) << pos;
        size_t n = adm.size() - rec.back().second;
        EXPECT_EQ(lsn_of(d), n) << pos;
        EXPECT_EQ(held(d), first_n(adm, n)) << pos;
      }
      if (st == LM_OK) lm_dedup_destroy(d);
      d = nullptr;
      // a refused log is left as it was
      if (st != LM_OK) {
        ASSERT_EQ(read_all(p), s);
      }
    }
  }
}

TEST(Wal, TruncateToLsnEqualsFreshBuildAndSurvivesReopen) {
  TempDir td;
  std::string path = td.file("tr.wal");
  std::mt19937_64 rng(4);
  std::vector<lm_hash128_t> adm;
  lm_dedup *d = nullptr;
  ASSERT_EQ(open_wal(path, &d, 16), LM_OK);
  feed(d, 700, rng, &adm, 37);  // records of several sizes
  ASSERT_EQ(lm_dedup_close(d), LM_OK);
  lm_dedup_destroy(d);
  std::string full = read_all(path);
  auto rec = records(path);
  std::vector<size_t> targets = {0, 1, adm.size() - 1, adm.size(), adm.size() / 2};
  size_t acc = 0;
  for (size_t k = 0; k < rec.size() && k < 4; k++) {
    targets.push_back(acc);                      // a record boundary
    targets.push_back(acc + rec[k].second / 2);  // inside a record
    acc += rec[k].second;
  }
  for (size_t L : targets) {
    std::string p = td.file("t.wal");
    write_all(p, full);
    ASSERT_EQ(open_wal(p, &d, 16), LM_OK);
    ASSERT_EQ(lm_dedup_truncate(d, L), LM_OK) << L;
    EXPECT_EQ(lsn_of(d), L);
    ASSERT_EQ(held(d), first_n(adm, L)) << L;
    // hashes admitted after L are forgotten: they are new again
    if (L < adm.size()) {
      int nw;
      ASSERT_EQ(lm_dedup_check_insert_hash(d, adm[L], &nw), LM_OK);
      EXPECT_EQ(nw, 1);
    }
    lm_dedup_destroy(d);
    ASSERT_EQ(open_wal(p, &d, 16), LM_OK);
    size_t n = L < adm.size() ? L + 1 : L;
    EXPECT_EQ(lsn_of(d), n) << L;
    EXPECT_EQ(held(d), first_n(adm, n)) << L;
    lm_dedup_destroy(d);
  }
  // truncation of hashes still in the buffer, and of buffer + written records at once
  ASSERT_EQ(open_wal(td.file("b.wal"), &d, 100), LM_OK);
  std::vector<lm_hash128_t> adm2;
  feed(d, 150, rng, &adm2, 0);  // one record of 100 written, the rest buffered
  ASSERT_EQ(lm_dedup_truncate(d, adm2.size() - 3), LM_OK);
  EXPECT_EQ(held(d), first_n(adm2, adm2.size() - 3));
  ASSERT_EQ(lm_dedup_truncate(d, 40), LM_OK);
  EXPECT_EQ(held(d), first_n(adm2, 40));
  EXPECT_EQ(lm_dedup_truncate(d, 41), LM_ERANGE);
  lm_dedup_destroy(d);
  ASSERT_EQ(open_wal(td.file("b.wal"), &d, 100), LM_OK);
  EXPECT_EQ(held(d), first_n(adm2, 40));
  lm_dedup_destroy(d);
}

TEST(Wal, SnapshotPlusReplayEqualsFullReplay) {
  TempDir td;
  std::string path = td.file("sn.wal");
  std::mt19937_64 rng(5);
  std::vector<lm_hash128_t> adm;
  lm_dedup *d = nullptr;
  ASSERT_EQ(open_wal(path, &d, 32), LM_OK);
  feed(d, 3000, rng, &adm, 100);
  size_t at_snap = adm.size();
  ASSERT_EQ(lm_dedup_snapshot(d), LM_OK);
  EXPECT_TRUE(exists(path + ".snap"));
  EXPECT_FALSE(exists(path + ".snap.tmp"));
  feed(d, 1000, rng, &adm, 100);
  ASSERT_EQ(lm_dedup_close(d), LM_OK);
  lm_dedup_destroy(d);

  ASSERT_EQ(open_wal(path, &d, 32), LM_OK);
  lm_dedup_stats st;
  lm_dedup_stats_get(d, &st);
  EXPECT_EQ(st.snapshot_loaded, 1);
  EXPECT_EQ(st.replayed_hashes, adm.size() - at_snap);  // only the log after the snapshot
  std::set<Key> with_snap = held(d);
  lm_dedup_destroy(d);

  std::string snap = read_all(path + ".snap");
  ASSERT_EQ(unlink((path + ".snap").c_str()), 0);
  ASSERT_EQ(open_wal(path, &d, 32), LM_OK);
  lm_dedup_stats_get(d, &st);
  EXPECT_EQ(st.snapshot_loaded, 0);
  EXPECT_EQ(st.replayed_hashes, adm.size());
  EXPECT_EQ(held(d), with_snap);
  EXPECT_EQ(with_snap, first_n(adm, adm.size()));
  lm_dedup_destroy(d);

  // a damaged snapshot is ignored (the log is complete), never trusted
  std::string bad = snap;
  bad[200] = (char)(bad[200] ^ 0x10);
  write_all(path + ".snap", bad);
  ASSERT_EQ(open_wal(path, &d, 32), LM_OK);
  lm_dedup_stats_get(d, &st);
  EXPECT_EQ(st.snapshot_loaded, 0);
  EXPECT_EQ(held(d), with_snap);
  lm_dedup_destroy(d);

  // truncation below the snapshot is exact and removes the snapshot
  write_all(path + ".snap", snap);
  ASSERT_EQ(open_wal(path, &d, 32), LM_OK);
  lm_dedup_stats_get(d, &st);
  ASSERT_EQ(st.snapshot_loaded, 1);
  ASSERT_EQ(lm_dedup_truncate(d, at_snap / 2), LM_OK);
  EXPECT_EQ(held(d), first_n(adm, at_snap / 2));
  EXPECT_FALSE(exists(path + ".snap"));
  lm_dedup_destroy(d);
  ASSERT_EQ(open_wal(path, &d, 32), LM_OK);
  EXPECT_EQ(held(d), first_n(adm, at_snap / 2));
  lm_dedup_destroy(d);

  // a snapshot from another log (same LSN, different records) is detected
  std::string p2 = td.file("other.wal");
  ASSERT_EQ(open_wal(p2, &d, 32), LM_OK);
  std::vector<lm_hash128_t> adm2;
  feed(d, 3000, rng, &adm2, 100);
  lm_dedup_destroy(d);
  write_all(p2 + ".snap", snap);
  ASSERT_EQ(open_wal(p2, &d, 32), LM_OK);
  lm_dedup_stats_get(d, &st);
  EXPECT_EQ(st.snapshot_loaded, 0);
  EXPECT_EQ(held(d), first_n(adm2, adm2.size()));
  lm_dedup_destroy(d);
}

TEST(Wal, TruncateAboveSnapshotKeepsIt) {
  TempDir td;
  std::string path = td.file("k.wal");
  std::mt19937_64 rng(6);
  std::vector<lm_hash128_t> adm;
  lm_dedup *d = nullptr;
  ASSERT_EQ(open_wal(path, &d, 8), LM_OK);
  feed(d, 200, rng, &adm, 50);
  size_t at = adm.size();
  ASSERT_EQ(lm_dedup_snapshot(d), LM_OK);
  feed(d, 200, rng, &adm, 50);
  ASSERT_EQ(lm_dedup_truncate(d, at + 3), LM_OK);
  EXPECT_TRUE(exists(path + ".snap"));
  lm_dedup_destroy(d);
  ASSERT_EQ(open_wal(path, &d, 8), LM_OK);
  lm_dedup_stats st;
  lm_dedup_stats_get(d, &st);
  EXPECT_EQ(st.snapshot_loaded, 1);
  EXPECT_EQ(held(d), first_n(adm, at + 3));
  lm_dedup_destroy(d);
}

TEST(Wal, VersionMismatchSeedMismatchAndGarbage) {
  TempDir td;
  std::string path = td.file("v.wal");
  lm_dedup *d = nullptr;
  ASSERT_EQ(open_wal(path, &d, 8, 7), LM_OK);
  int nw;
  lm_dedup_check_insert_hash(d, {1, 1}, &nw);
  lm_dedup_destroy(d);
  std::string s = read_all(path);
  EXPECT_EQ(open_wal(path, &d, 8, 8), LM_EINVAL);  // another seed
  std::string v2 = s;
  uint32_t ver = 2;
  memcpy(&v2[8], &ver, 4);
  write_all(path, v2);
  EXPECT_EQ(open_wal(path, &d, 8, 7), LM_EVERSION);
  EXPECT_EQ(read_all(path), v2);  // untouched
  write_all(path, std::string(500, 'x'));
  EXPECT_EQ(open_wal(path, &d, 8, 7), LM_ECORRUPT);
  write_all(path, std::string("LMDD"));  // a torn header that does not match ours... it does: a prefix
  EXPECT_EQ(open_wal(path, &d, 8, 7), LM_OK);
  lm_dedup_destroy(d);
  write_all(path, std::string("XMDD"));
  EXPECT_EQ(open_wal(path, &d, 8, 7), LM_ECORRUPT);
}

TEST(Wal, UnwritablePathIsEioWithErrno) {
  lm_dedup *d = nullptr;
  errno = 0;
  EXPECT_EQ(open_wal("/nonexistent-dir-lm/x/y.wal", &d, 8), LM_EIO);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(d, nullptr);
  TempDir td;
  errno = 0;
  EXPECT_EQ(open_wal(td.path, &d, 8), LM_EIO);  // a directory
  EXPECT_EQ(errno, EISDIR);
}

TEST(Wal, DuplicateHashInsideTheLogIsCorruption) {
  TempDir td;
  std::string path = td.file("dup.wal");
  lm_dedup *d = nullptr;
  ASSERT_EQ(open_wal(path, &d, 2), LM_OK);
  int nw;
  for (uint64_t i = 1; i <= 4; i++) lm_dedup_check_insert_hash(d, {i, i}, &nw);
  lm_dedup_destroy(d);
  // copy record 1's payload into record 2 and fix its CRCs: structurally valid, semantically not
  std::string s = read_all(path);
  auto rec = records(path);
  ASSERT_EQ(rec.size(), 2u);
  s.replace(rec[1].first + 24, 32, s.substr(rec[0].first + 24, 32));
  s.replace(rec[1].first + 16, 4, s.substr(rec[0].first + 16, 4));  // same payload -> same payload CRC
  uint32_t hcrc = lm_crc32c(s.data() + rec[1].first, 20);
  memcpy(&s[rec[1].first + 20], &hcrc, 4);
  write_all(path, s);
  EXPECT_EQ(open_wal(path, &d, 2), LM_ECORRUPT);
  lm_dedup_destroy(d);
}

TEST(Wal, MidRecordTruncationCrashWindowRecovers) {
  // The state a crash leaves between "rewrite the header" and "cut the rest"
  // of a mid-record truncation: header of R says keep < c hashes, the old
  // payload is still there.  Reopening must give exactly first + keep hashes.
  TempDir td;
  std::string path = td.file("cw.wal");
  std::mt19937_64 rng(8);
  std::vector<lm_hash128_t> adm;
  lm_dedup *d = nullptr;
  ASSERT_EQ(open_wal(path, &d, 10), LM_OK);
  feed(d, 40, rng, &adm, 0);
  ASSERT_EQ(lm_dedup_close(d), LM_OK);
  lm_dedup_destroy(d);
  auto rec = records(path);
  ASSERT_GE(rec.size(), 2u);
  size_t roff = rec[rec.size() - 2].first;  // not the last record: later records are removed first
  uint32_t c = rec[rec.size() - 2].second, keep = c / 2;
  size_t first = 0;
  for (size_t k = 0; k + 2 < rec.size(); k++) first += rec[k].second;
  std::string s = read_all(path).substr(0, roff + 24 + 16 * (size_t)c);  // step 1 done
  memcpy(&s[roff + 4], &keep, 4);                                         // step 2 done
  uint32_t pcrc = lm_crc32c(s.data() + roff + 24, 16 * (size_t)keep);
  memcpy(&s[roff + 16], &pcrc, 4);
  uint32_t hcrc = lm_crc32c(s.data() + roff, 20);
  memcpy(&s[roff + 20], &hcrc, 4);
  write_all(path, s);
  ASSERT_EQ(open_wal(path, &d, 10), LM_OK);
  EXPECT_EQ(lsn_of(d), first + keep);
  EXPECT_EQ(held(d), first_n(adm, first + keep));
  lm_dedup_stats st;
  lm_dedup_stats_get(d, &st);
  EXPECT_EQ(st.tail_bytes_cut, 16u * (c - keep));
  lm_dedup_destroy(d);
  // and the real operation, interrupted nowhere, gives the same
  ASSERT_EQ(open_wal(td.file("cw2.wal"), &d, 10), LM_OK);
  for (auto &h : adm) {
    int nw;
    ASSERT_EQ(lm_dedup_check_insert_hash(d, h, &nw), LM_OK);
  }
  ASSERT_EQ(lm_dedup_truncate(d, first + keep), LM_OK);
  lm_dedup_destroy(d);
  ASSERT_EQ(open_wal(td.file("cw2.wal"), &d, 10), LM_OK);
  EXPECT_EQ(held(d), first_n(adm, first + keep));
  lm_dedup_destroy(d);
}

TEST(Wal, SecondOpenOfTheSameLogIsRefused) {
  TempDir td;
  std::string path = td.file("lock.wal");
  lm_dedup *a = nullptr, *b = nullptr;
  ASSERT_EQ(open_wal(path, &a, 8), LM_OK);
  EXPECT_EQ(open_wal(path, &b, 8), LM_ESTATE);
  EXPECT_EQ(b, nullptr);
  lm_dedup_destroy(a);
  ASSERT_EQ(open_wal(path, &b, 8), LM_OK);  // free again once closed
  lm_dedup_destroy(b);
}

// ------------------------------------------------------------------ tag + read-only access

namespace {

lm_status open_wal_tag(const std::string &path, lm_dedup **d, const uint8_t *tag, uint64_t seed = 0) {
  lm_dedup_params p;
  lm_dedup_params_default(&p);
  p.wal_path = path.c_str();
  p.wal_buffer_hashes = 8;
  p.seed = seed;
  p.initial_capacity = 16;
  if (tag) memcpy(p.tag, tag, LM_DEDUP_TAG_SIZE);
  return lm_dedup_create(&p, d);
}

void le32(std::string &s, size_t off, uint32_t v) {
  for (int i = 0; i < 4; i++) s[off + i] = char((v >> (8 * i)) & 0xFF);
}
void le64(std::string &s, size_t off, uint64_t v) {
  for (int i = 0; i < 8; i++) s[off + i] = char((v >> (8 * i)) & 0xFF);
}

// A version-1 WAL as written before the tag existed, built byte by byte from the
// layout in dedup.h (not by the core): header with zeros at 24..59, one record.
std::string legacy_wal(uint64_t seed, const std::vector<lm_hash128_t> &hs) {
  std::string s(64, '\0');
  memcpy(&s[0], "LMDDWAL\0", 8);
  le32(s, 8, 1);
  le32(s, 12, 64);
  le64(s, 16, seed);
  le32(s, 60, lm_crc32c(s.data(), 60));
  std::string pay(16 * hs.size(), '\0');
  for (size_t i = 0; i < hs.size(); i++) {
    le64(pay, 16 * i, hs[i].lo);
    le64(pay, 16 * i + 8, hs[i].hi);
  }
  std::string rh(24, '\0');
  memcpy(&rh[0], "LMR1", 4);
  le32(rh, 4, (uint32_t)hs.size());
  le64(rh, 8, 0);
  le32(rh, 16, lm_crc32c(pay.data(), pay.size()));
  le32(rh, 20, lm_crc32c(rh.data(), 20));
  return s + rh + pay;
}

}  // namespace

TEST(Wal, TagIsStoredAndAnotherTagIsRefusedWithoutChange) {
  TempDir td;
  std::string path = td.file("t.wal");
  uint8_t t1[LM_DEDUP_TAG_SIZE], t2[LM_DEDUP_TAG_SIZE];
  for (unsigned i = 0; i < LM_DEDUP_TAG_SIZE; i++) {
    t1[i] = uint8_t(i + 1);
    t2[i] = uint8_t(i + 1);
  }
  t2[31] ^= 0x80;  // differs in the last byte only
  lm_dedup *d = nullptr;
  ASSERT_EQ(open_wal_tag(path, &d, t1, 5), LM_OK);
  std::mt19937_64 rng(3);
  std::vector<lm_hash128_t> adm;
  feed(d, 50, rng, &adm);
  ASSERT_EQ(lm_dedup_snapshot(d), LM_OK);
  feed(d, 20, rng, &adm);
  lm_dedup_destroy(d);
  std::string wal = read_all(path), snap = read_all(path + ".snap");
  EXPECT_EQ(wal.substr(24, 32), std::string((const char *)t1, 32));  // header bytes 24..55
  EXPECT_EQ(wal.substr(56, 4), std::string(4, '\0'));
  lm_dedup_wal_info info;
  ASSERT_EQ(lm_dedup_wal_inspect(path.c_str(), &info), LM_OK);
  EXPECT_EQ(memcmp(info.tag, t1, 32), 0);
  EXPECT_EQ(info.seed, 5u);
  // refused: another tag, no tag, another seed; nothing changes on disk
  d = nullptr;
  EXPECT_EQ(open_wal_tag(path, &d, t2, 5), LM_EINVAL);
  EXPECT_EQ(d, nullptr);
  EXPECT_EQ(open_wal_tag(path, &d, nullptr, 5), LM_EINVAL);
  EXPECT_EQ(open_wal_tag(path, &d, t1, 6), LM_EINVAL);
  EXPECT_EQ(read_all(path), wal);
  EXPECT_EQ(read_all(path + ".snap"), snap);
  // the right tag opens the same state
  ASSERT_EQ(open_wal_tag(path, &d, t1, 5), LM_OK);
  EXPECT_EQ(held(d), first_n(adm, adm.size()));
  lm_dedup_destroy(d);
}

TEST(Wal, WalWithoutTagStillOpensAsTagZero) {
  TempDir td;
  std::string path = td.file("old.wal");
  std::vector<lm_hash128_t> hs = {{1, 2}, {3, 4}, {0, 0}, {~0ull, 7}};
  std::string old = legacy_wal(9, hs);
  write_all(path, old);
  lm_dedup_wal_info info;
  ASSERT_EQ(lm_dedup_wal_inspect(path.c_str(), &info), LM_OK);
  EXPECT_EQ(info.seed, 9u);
  EXPECT_EQ(info.lsn_end, hs.size());
  for (unsigned i = 0; i < LM_DEDUP_TAG_SIZE; i++) EXPECT_EQ(info.tag[i], 0) << i;
  uint8_t t[LM_DEDUP_TAG_SIZE] = {1};
  lm_dedup *d = nullptr;
  EXPECT_EQ(open_wal_tag(path, &d, t, 9), LM_EINVAL);  // a tagged stage does not adopt an untagged log
  EXPECT_EQ(read_all(path), old);
  ASSERT_EQ(open_wal_tag(path, &d, nullptr, 9), LM_OK);
  EXPECT_EQ(lsn_of(d), hs.size());
  std::set<Key> want;
  for (auto &h : hs) want.insert({h.hi, h.lo});
  EXPECT_EQ(held(d), want);
  int nw = -1;
  ASSERT_EQ(lm_dedup_check_insert_hash(d, {5, 6}, &nw), LM_OK);
  EXPECT_EQ(nw, 1);
  lm_dedup_destroy(d);
  // the core's own header for seed 9 and no tag is byte for byte the old one
  EXPECT_EQ(read_all(path).substr(0, 64), old.substr(0, 64));
  // and a log the core writes is, byte for byte, the layout built here (explicit little-endian)
  std::string fresh = td.file("fresh.wal");
  lm_dedup_params p;
  lm_dedup_params_default(&p);
  p.wal_path = fresh.c_str();
  p.seed = 9;
  ASSERT_EQ(lm_dedup_create(&p, &d), LM_OK);
  for (auto &h : hs) ASSERT_EQ(lm_dedup_check_insert_hash(d, h, &nw), LM_OK);
  ASSERT_EQ(lm_dedup_sync(d, nullptr), LM_OK);
  lm_dedup_destroy(d);
  EXPECT_EQ(read_all(fresh), old);
}

TEST(Wal, InspectAndReadHashesAreReadOnlyAndChecked) {
  TempDir td;
  std::string path = td.file("r.wal");
  lm_dedup *d = nullptr;
  ASSERT_EQ(open_wal(path, &d, 8, 11), LM_OK);
  std::mt19937_64 rng(17);
  std::vector<lm_hash128_t> adm;
  feed(d, 300, rng, &adm, 7);
  ASSERT_EQ(lm_dedup_sync(d, nullptr), LM_OK);
  std::string wal = read_all(path);
  auto recs = records(path);
  // readable while the deduplicator holds its lock, and nothing changes
  lm_dedup_wal_info info;
  ASSERT_EQ(lm_dedup_wal_inspect(path.c_str(), &info), LM_OK);
  EXPECT_EQ(info.magic_ok, 1);
  EXPECT_EQ(info.version, 1u);
  EXPECT_EQ(info.header_size, 64u);
  EXPECT_EQ(info.seed, 11u);
  EXPECT_EQ(info.lsn_end, adm.size());
  EXPECT_EQ(info.records, recs.size());
  EXPECT_EQ(info.valid_bytes, wal.size());
  EXPECT_EQ(info.file_bytes, wal.size());
  EXPECT_EQ(info.lsn_kept, adm.size());
  std::vector<lm_hash128_t> out(adm.size() + 1);
  uint64_t n = 99;
  ASSERT_EQ(lm_dedup_wal_read_hashes(path.c_str(), adm.size(), out.data(), &n), LM_OK);
  ASSERT_EQ(n, adm.size());
  for (size_t i = 0; i < adm.size(); i++) {
    EXPECT_EQ(out[i].lo, adm[i].lo) << i;
    EXPECT_EQ(out[i].hi, adm[i].hi) << i;
  }
  ASSERT_EQ(lm_dedup_wal_read_hashes(path.c_str(), 13, out.data(), &n), LM_OK);  // inside a record
  EXPECT_EQ(n, 13u);
  EXPECT_EQ(lm_dedup_wal_read_hashes(path.c_str(), 0, nullptr, &n), LM_OK);
  EXPECT_EQ(n, 0u);
  EXPECT_EQ(lm_dedup_wal_read_hashes(path.c_str(), adm.size() + 1, out.data(), &n), LM_ERANGE);
  EXPECT_EQ(n, adm.size());
  lm_dedup_destroy(d);
  EXPECT_EQ(read_all(path), wal);

  // a torn last record: inspect stops before it, reading past it is LM_ERANGE
  uint32_t last = recs.back().second;
  write_all(path, wal.substr(0, wal.size() - 5));
  ASSERT_EQ(lm_dedup_wal_inspect(path.c_str(), &info), LM_OK);
  EXPECT_EQ(info.lsn_end, adm.size() - last);
  EXPECT_EQ(info.lsn_kept, adm.size() - last);
  EXPECT_EQ(info.valid_bytes, recs.back().first);
  EXPECT_EQ(info.file_bytes, wal.size() - 5);
  EXPECT_EQ(lm_dedup_wal_read_hashes(path.c_str(), adm.size(), out.data(), &n), LM_ERANGE);
  EXPECT_EQ(n, adm.size() - last);
  EXPECT_EQ(lm_dedup_wal_read_hashes(path.c_str(), adm.size() - last, out.data(), &n), LM_OK);
  // a flipped payload bit in the first record: LM_ECORRUPT when read, not when only inspected
  std::string bad = wal;
  bad[64 + 24 + 3] ^= 1;
  write_all(path, bad);
  EXPECT_EQ(lm_dedup_wal_read_hashes(path.c_str(), 1, out.data(), &n), LM_ECORRUPT);
  EXPECT_EQ(n, 0u);
  ASSERT_EQ(lm_dedup_wal_inspect(path.c_str(), &info), LM_OK);
  EXPECT_EQ(info.lsn_end, adm.size());
  EXPECT_EQ(info.lsn_kept, adm.size());  // a valid record follows: an open refuses, it cuts nothing
  // a flipped payload bit in the last record: lsn_kept stops before it (an open cuts it), and
  // inspecting changes nothing
  bad = wal;
  bad[recs.back().first + 24 + 5] ^= 4;
  write_all(path, bad);
  ASSERT_EQ(lm_dedup_wal_inspect(path.c_str(), &info), LM_OK);
  EXPECT_EQ(info.lsn_end, adm.size());
  EXPECT_EQ(info.lsn_kept, adm.size() - last);
  EXPECT_EQ(read_all(path), bad);
  d = nullptr;
  ASSERT_EQ(open_wal(path, &d, 8, 11), LM_OK);  // what the open keeps is what inspect said
  EXPECT_EQ(lsn_of(d), adm.size() - last);
  lm_dedup_destroy(d);
  // a damaged record header: the valid prefix ends there
  bad = wal;
  bad[recs[1].first + 4] ^= 1;
  write_all(path, bad);
  ASSERT_EQ(lm_dedup_wal_inspect(path.c_str(), &info), LM_OK);
  EXPECT_EQ(info.lsn_end, recs[0].second);
  EXPECT_EQ(info.records, 1u);
  EXPECT_EQ(lm_dedup_wal_read_hashes(path.c_str(), recs[0].second, out.data(), &n), LM_OK);
  EXPECT_EQ(lm_dedup_wal_read_hashes(path.c_str(), recs[0].second + 1, out.data(), &n), LM_ECORRUPT);
  EXPECT_EQ(n, recs[0].second);
  // header errors
  bad = wal;
  le32(bad, 8, 2);
  write_all(path, bad);
  EXPECT_EQ(lm_dedup_wal_inspect(path.c_str(), &info), LM_EVERSION);
  EXPECT_EQ(info.version, 2u);
  EXPECT_EQ(lm_dedup_wal_read_hashes(path.c_str(), 1, out.data(), &n), LM_EVERSION);
  bad = wal;
  bad[20] ^= 1;  // seed byte: header CRC fails
  write_all(path, bad);
  EXPECT_EQ(lm_dedup_wal_inspect(path.c_str(), &info), LM_ECORRUPT);
  EXPECT_EQ(info.magic_ok, 1);
  write_all(path, std::string(100, 'x'));
  EXPECT_EQ(lm_dedup_wal_inspect(path.c_str(), &info), LM_ECORRUPT);
  EXPECT_EQ(info.magic_ok, 0);
  write_all(path, "LMDDWAL");
  EXPECT_EQ(lm_dedup_wal_inspect(path.c_str(), &info), LM_ECORRUPT);
  errno = 0;
  EXPECT_EQ(lm_dedup_wal_inspect(td.file("missing.wal").c_str(), &info), LM_EIO);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(lm_dedup_wal_inspect(nullptr, &info), LM_EINVAL);
  EXPECT_EQ(lm_dedup_wal_inspect(path.c_str(), nullptr), LM_EINVAL);
  EXPECT_EQ(lm_dedup_wal_read_hashes(path.c_str(), 1, nullptr, &n), LM_EINVAL);
}

// ---- regressions: forged snapshots (fuzz_snapshot, CRCs recomputed)

namespace {

uint64_t snap_get64(const std::string &s, size_t at) {
  uint64_t v;
  memcpy(&v, s.data() + at, 8);
  return v;
}
void snap_put64(std::string &s, size_t at, uint64_t v) { memcpy(&s[at], &v, 8); }
void snap_put32(std::string &s, size_t at, uint32_t v) { memcpy(&s[at], &v, 4); }

using SnapKey = std::pair<uint64_t, uint64_t>;

int snap_collect(void *ctx, lm_hash128_t h) {
  static_cast<std::set<SnapKey> *>(ctx)->insert({h.lo, h.hi});
  return 0;
}

// A WAL of `n` hashes with a snapshot of all of them; returns the hashes.
std::set<SnapKey> make_wal_with_snapshot(const std::string &wal, size_t n) {
  lm_dedup_params p;
  lm_dedup_params_default(&p);
  p.wal_path = wal.c_str();
  p.wal_buffer_hashes = 4;
  p.initial_capacity = 16;
  lm_dedup *d = nullptr;
  EXPECT_EQ(lm_dedup_create(&p, &d), LM_OK);
  std::set<SnapKey> want;
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

void reopen_expect(const std::string &wal, const std::set<SnapKey> &want, int snapshot_loaded) {
  lm_dedup_params p;
  lm_dedup_params_default(&p);
  p.wal_path = wal.c_str();
  lm_dedup *d = nullptr;
  ASSERT_EQ(lm_dedup_create(&p, &d), LM_OK);
  lm_dedup_stats st;
  ASSERT_EQ(lm_dedup_stats_get(d, &st), LM_OK);
  EXPECT_EQ(st.snapshot_loaded, snapshot_loaded);
  EXPECT_EQ(st.entries, want.size());
  std::set<SnapKey> got;
  ASSERT_EQ(lm_dedup_foreach(d, snap_collect, &got), LM_OK);
  EXPECT_EQ(got, want);
  for (const SnapKey &k : want) {
    int found = 0;
    lm_hash128_t h = {k.first, k.second};
    ASSERT_EQ(lm_dedup_contains(d, h, &found), LM_OK);
    EXPECT_EQ(found, 1);
  }
  lm_dedup_destroy(d);
}

// Header CRC (bytes 92..95 over 0..91) and slot CRC (80..83) of a snapshot, recomputed.
void reseal(std::string &snap) {
  snap_put32(snap, 80, lm_crc32c(snap.data() + 96, snap.size() - 96));
  snap_put32(snap, 92, lm_crc32c(snap.data(), 92));
}

}  // namespace

// fuzz_snapshot (forged CRCs): a snapshot whose slot array was out of order (two
// slots swapped, CRCs recomputed) was loaded as the table, so lm_dedup_contains
// missed hashes that lm_dedup_foreach listed.  Fix: core/src/dedup_wal.c checks
// the loaded array's structure (lm_dt_check in dedup.c) and falls back to replay.
TEST(WalSnapshot, UnorderedSlotsAreNotTrusted) {
  TempDir t;
  std::string wal = t.path + "/wal";
  std::set<SnapKey> want = make_wal_with_snapshot(wal, 40);
  std::string snap = read_all(wal + ".snap");
  ASSERT_GT(snap.size(), 96u);
  // swap the first two occupied slots
  std::vector<size_t> occ;
  for (size_t off = 96; off + 16 <= snap.size(); off += 16)
    if (snap_get64(snap, off) | snap_get64(snap, off + 8)) occ.push_back(off);
  ASSERT_GE(occ.size(), 2u);
  std::string a = snap.substr(occ[0], 16), b = snap.substr(occ[1], 16);
  snap.replace(occ[0], 16, b);
  snap.replace(occ[1], 16, a);
  reseal(snap);
  write_all(wal + ".snap", snap);
  reopen_expect(wal, want, 0);
}

// fuzz_snapshot (forged CRCs): a header announcing a huge capacity made the
// loader allocate (cap + 64) * 16 bytes before reading anything: 8 TiB here,
// an allocation failure in a plain build and an abort under ASan.  Fix: the
// snapshot's file size must equal 96 + nslots * 16 before any allocation.
TEST(WalSnapshot, HugeCapacityIsRejectedBeforeAllocating) {
  TempDir t;
  std::string wal = t.path + "/wal";
  std::set<SnapKey> want = make_wal_with_snapshot(wal, 10);
  std::string snap = read_all(wal + ".snap");
  uint64_t cap = (uint64_t)1 << 39;
  snap_put64(snap, 32, cap);
  snap_put64(snap, 40, cap + 64);
  reseal(snap);
  write_all(wal + ".snap", snap);
  reopen_expect(wal, want, 0);
}

// A slot array longer than the header says (bytes appended, CRCs recomputed) is
// not a snapshot this code wrote: ignored, the log is replayed.
TEST(WalSnapshot, WithTrailingBytesIsNotTrusted) {
  TempDir t;
  std::string wal = t.path + "/wal";
  std::set<SnapKey> want = make_wal_with_snapshot(wal, 10);
  std::string snap = read_all(wal + ".snap");
  snap.append(16, '\0');
  reseal(snap);
  write_all(wal + ".snap", snap);
  reopen_expect(wal, want, 0);
  // and the untouched snapshot is still used
  TempDir t2;
  std::string wal2 = t2.path + "/wal";
  std::set<SnapKey> want2 = make_wal_with_snapshot(wal2, 10);
  reopen_expect(wal2, want2, 1);
}

TEST(Wal, AbandonLogClosesTheDescriptorAndWritesNothing) {
  TempDir td;
  std::string path = td.file("a.wal");
  lm_dedup *d = nullptr;
  ASSERT_EQ(open_wal(path, &d, 64, 3), LM_OK);
  std::mt19937_64 rng(5);
  std::vector<lm_hash128_t> adm;
  feed(d, 100, rng, &adm);
  ASSERT_EQ(lm_dedup_sync(d, nullptr), LM_OK);
  const size_t synced = adm.size();
  feed(d, 10, rng, &adm);  // buffered (64 per record): not in the file
  ASSERT_GT(adm.size(), synced);
  std::string before = read_all(path);
  lm_dedup *other = nullptr;
  EXPECT_EQ(open_wal(path, &other, 64, 3), LM_ESTATE);  // locked while d holds it
  ASSERT_EQ(lm_dedup_abandon_log(d), LM_OK);
  EXPECT_EQ(lm_dedup_abandon_log(d), LM_OK);  // again: nothing to do
  uint64_t lsn = 0;
  ASSERT_EQ(lm_dedup_lsn(d, &lsn), LM_OK);  // still answers
  EXPECT_EQ(lsn, adm.size());
  int nw = -1;
  EXPECT_EQ(lm_dedup_check_insert_hash(d, {1, 2}, &nw), LM_ESTATE);  // closed
  lm_dedup_destroy(d);
  EXPECT_EQ(read_all(path), before);  // the 10 buffered hashes were dropped, not written
  ASSERT_EQ(open_wal(path, &other, 64, 3), LM_OK);  // the descriptor (and its lock) is gone
  EXPECT_EQ(lsn_of(other), synced);
  lm_dedup_destroy(other);
  EXPECT_EQ(lm_dedup_abandon_log(nullptr), LM_EINVAL);
}
