// Tests for the StateTracker (luminamoon/state.h): slot codec against a byte
// layout built here from the documented table, slot alternation, torn writes,
// bit flips, both-corrupt vs never-committed, version, sizes, I/O errors, and
// kill -9 during a stream of commits.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include "../../core/src/durable_internal.h" /* the shared durable I/O and LE codec */
#include "luminamoon/crc32c.h"
#include "luminamoon/state.h"
}

namespace {

class TempDir {
 public:
  TempDir() {
    const char *base = getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/lm_state_test_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    char *d = mkdtemp(buf.data());
    if (d != nullptr) path_ = d;
  }
  ~TempDir() {
    if (!path_.empty()) {
      std::string cmd = "rm -rf '" + path_ + "'";
      int rc = system(cmd.c_str());
      (void)rc;
    }
  }
  const std::string &path() const { return path_; }
  std::string file(const std::string &name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

std::vector<unsigned char> read_all(const std::string &path) {
  std::vector<unsigned char> out;
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return out;
  unsigned char buf[4096];
  ssize_t r;
  while ((r = read(fd, buf, sizeof buf)) > 0) out.insert(out.end(), buf, buf + r);
  close(fd);
  return out;
}

void write_at(const std::string &path, size_t off, const void *data, size_t n) {
  int fd = open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, data, n, (off_t)off), (ssize_t)n);
  close(fd);
}

void write_file(const std::string &path, const std::vector<unsigned char> &bytes) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  if (!bytes.empty()) {
    ASSERT_EQ(write(fd, bytes.data(), bytes.size()), (ssize_t)bytes.size());
  }
  close(fd);
}

lm_state_coord make_coord(uint64_t k) {
  lm_state_coord c;
  c.epoch = (uint32_t)(k % 7);
  c.shard = (uint32_t)(k * 3 + 1);
  c.batch_index = k * 10 + 1;
  c.sample_index = k * 1000 + 17;
  c.source_pos = 0x0102030405060708ull ^ (k * 0x9E3779B97F4A7C15ull);
  c.source_pos2 = ~k;
  c.wal_lsn = k * 5 + 3;
  return c;
}

bool coord_eq(const lm_state_coord &a, const lm_state_coord &b) {
  return a.epoch == b.epoch && a.shard == b.shard && a.batch_index == b.batch_index &&
         a.sample_index == b.sample_index && a.source_pos == b.source_pos &&
         a.source_pos2 == b.source_pos2 && a.wal_lsn == b.wal_lsn;
}

// The slot built byte by byte from the table in state.h, independently of the
// library's encoder.
std::vector<unsigned char> reference_slot(uint64_t seq, const lm_state_coord &c, uint16_t version = 1) {
  std::vector<unsigned char> s;
  auto le = [&s](uint64_t v, int n) {
    for (int i = 0; i < n; i++) s.push_back((unsigned char)(v >> (8 * i)));
  };
  s.push_back('L');
  s.push_back('S');
  le(version, 2);
  le(c.epoch, 4);
  le(seq, 8);
  le(c.batch_index, 8);
  le(c.sample_index, 8);
  le(c.source_pos, 8);
  le(c.source_pos2, 8);
  le(c.wal_lsn, 8);
  le(c.shard, 4);
  le(lm_crc32c(s.data(), s.size()), 4);
  return s;
}

lm_state *open_ok(const std::string &path) {
  lm_state *st = nullptr;
  EXPECT_EQ(lm_state_open(path.c_str(), &st), LM_OK);
  return st;
}

}  // namespace

// ---- slot codec -------------------------------------------------------------

TEST(StateSlot, EncodeMatchesDocumentedLayout) {
  std::mt19937_64 rng(1);
  for (int t = 0; t < 100; t++) {
    lm_state_coord c;
    c.epoch = (uint32_t)rng();
    c.shard = (uint32_t)rng();
    c.batch_index = rng();
    c.sample_index = rng();
    c.source_pos = rng();
    c.source_pos2 = rng();
    c.wal_lsn = rng();
    uint64_t seq = rng() | 1;
    unsigned char out[64];
    ASSERT_EQ(lm_state_slot_encode(seq, &c, out), LM_OK);
    std::vector<unsigned char> want = reference_slot(seq, c);
    ASSERT_EQ(want.size(), 64u);
    ASSERT_EQ(0, memcmp(out, want.data(), 64));
    uint64_t seq2 = 0;
    lm_state_coord d;
    memset(&d, 0, sizeof d);
    ASSERT_EQ(lm_state_slot_decode(out, &seq2, &d), LM_OK);
    EXPECT_EQ(seq2, seq);
    EXPECT_TRUE(coord_eq(c, d));
  }
}

TEST(StateSlot, InvalidArguments) {
  lm_state_coord c = make_coord(1);
  unsigned char out[64];
  EXPECT_EQ(lm_state_slot_encode(0, &c, out), LM_EINVAL);
  EXPECT_EQ(lm_state_slot_encode(1, nullptr, out), LM_EINVAL);
  EXPECT_EQ(lm_state_slot_encode(1, &c, nullptr), LM_EINVAL);
  EXPECT_EQ(lm_state_slot_decode(nullptr, nullptr, nullptr), LM_EINVAL);
}

TEST(StateSlot, ClassifiesEmptyCorruptVersion) {
  unsigned char z[64];
  memset(z, 0, sizeof z);
  EXPECT_EQ(lm_state_slot_decode(z, nullptr, nullptr), LM_ENOTFOUND);
  // A single non-zero byte anywhere makes it non-empty (and corrupt).
  for (int i = 0; i < 64; i++) {
    z[i] = 0x40;
    EXPECT_EQ(lm_state_slot_decode(z, nullptr, nullptr), LM_ECORRUPT) << i;
    z[i] = 0;
  }
  lm_state_coord c = make_coord(5);
  std::vector<unsigned char> v2 = reference_slot(9, c, 2);
  EXPECT_EQ(lm_state_slot_decode(v2.data(), nullptr, nullptr), LM_EVERSION);
  std::vector<unsigned char> v2bad = v2;
  v2bad[40] ^= 1;  // a damaged slot of another version is just corrupt
  EXPECT_EQ(lm_state_slot_decode(v2bad.data(), nullptr, nullptr), LM_ECORRUPT);
  std::vector<unsigned char> seq0 = reference_slot(0, c);  // valid CRC, reserved sequence
  EXPECT_EQ(lm_state_slot_decode(seq0.data(), nullptr, nullptr), LM_ECORRUPT);
  // Outputs untouched on failure.
  uint64_t seq = 77;
  lm_state_coord d = make_coord(3);
  EXPECT_EQ(lm_state_slot_decode(v2.data(), &seq, &d), LM_EVERSION);
  EXPECT_EQ(seq, 77u);
  EXPECT_TRUE(coord_eq(d, make_coord(3)));
}

TEST(StateSlot, EverySingleBitFlipIsRejected) {
  lm_state_coord c = make_coord(42);
  unsigned char s[64];
  ASSERT_EQ(lm_state_slot_encode(123, &c, s), LM_OK);
  for (int bit = 0; bit < 64 * 8; bit++) {
    s[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    lm_status got = lm_state_slot_decode(s, nullptr, nullptr);
    EXPECT_EQ(got, LM_ECORRUPT) << "bit " << bit;  // version bits too: the CRC covers them
    s[bit / 8] ^= (unsigned char)(1u << (bit % 8));
  }
  EXPECT_EQ(lm_state_slot_decode(s, nullptr, nullptr), LM_OK);
}

// ---- tracker ----------------------------------------------------------------

TEST(StateTracker, FreshFileIsCreatedEmpty) {
  TempDir td;
  ASSERT_FALSE(td.path().empty());
  std::string p = td.file("state");
  lm_state *st = open_ok(p);
  ASSERT_NE(st, nullptr);
  std::vector<unsigned char> bytes = read_all(p);
  ASSERT_EQ(bytes.size(), 128u);
  for (unsigned char b : bytes) ASSERT_EQ(b, 0);
  struct stat sb;
  EXPECT_NE(stat((p + ".tmp").c_str(), &sb), 0) << "temporary file left behind";
  lm_state_coord c = make_coord(9);
  lm_state_coord before = c;
  EXPECT_EQ(lm_state_load(st, &c, nullptr), LM_ENOTFOUND);
  EXPECT_TRUE(coord_eq(c, before)) << "output written on failure";
  lm_status ss[2];
  uint64_t sq[2];
  ASSERT_EQ(lm_state_inspect(st, ss, sq), LM_OK);
  EXPECT_EQ(ss[0], LM_ENOTFOUND);
  EXPECT_EQ(ss[1], LM_ENOTFOUND);
  lm_state_close(st);
  // Reopening an existing fresh file does not change it.
  st = open_ok(p);
  EXPECT_EQ(lm_state_load(st, &c, nullptr), LM_ENOTFOUND);
  lm_state_close(st);
}

TEST(StateTracker, CommitsAlternateSlotsAndNeverTouchTheOther) {
  TempDir td;
  std::string p = td.file("state");
  lm_state *st = open_ok(p);
  ASSERT_NE(st, nullptr);
  std::vector<unsigned char> prev = read_all(p);
  for (uint64_t k = 1; k <= 9; k++) {
    lm_state_coord c = make_coord(k);
    ASSERT_EQ(lm_state_commit(st, &c), LM_OK);
    std::vector<unsigned char> now = read_all(p);
    ASSERT_EQ(now.size(), 128u);
    size_t written = (k % 2 == 1) ? 0 : 64;  // A, B, A, B, ...
    size_t other = 64 - written;
    EXPECT_EQ(0, memcmp(now.data() + other, prev.data() + other, 64)) << "commit " << k;
    std::vector<unsigned char> want = reference_slot(k, c);
    EXPECT_EQ(0, memcmp(now.data() + written, want.data(), 64)) << "commit " << k;
    lm_state_coord got;
    uint64_t seq = 0;
    ASSERT_EQ(lm_state_load(st, &got, &seq), LM_OK);
    EXPECT_EQ(seq, k);
    EXPECT_TRUE(coord_eq(got, c));
    prev = now;
  }
  lm_state_close(st);
  // A new handle sees the last commit and continues the sequence.
  st = open_ok(p);
  lm_state_coord got;
  uint64_t seq = 0;
  ASSERT_EQ(lm_state_load(st, &got, &seq), LM_OK);
  EXPECT_EQ(seq, 9u);
  EXPECT_TRUE(coord_eq(got, make_coord(9)));
  lm_state_coord c10 = make_coord(10);
  ASSERT_EQ(lm_state_commit(st, &c10), LM_OK);
  std::vector<unsigned char> now = read_all(p);
  EXPECT_EQ(0, memcmp(now.data() + 64, reference_slot(10, c10).data(), 64));
  lm_state_close(st);
}

TEST(StateTracker, HigherSequenceWinsRegardlessOfSlot) {
  TempDir td;
  std::string p = td.file("state");
  std::vector<unsigned char> file = reference_slot(5, make_coord(5));
  std::vector<unsigned char> b = reference_slot(4, make_coord(4));
  file.insert(file.end(), b.begin(), b.end());
  write_file(p, file);
  lm_state *st = open_ok(p);
  lm_state_coord got;
  uint64_t seq;
  ASSERT_EQ(lm_state_load(st, &got, &seq), LM_OK);
  EXPECT_EQ(seq, 5u);
  EXPECT_TRUE(coord_eq(got, make_coord(5)));
  // The next commit overwrites B (the older one), with sequence 6.
  lm_state_coord c6 = make_coord(6);
  ASSERT_EQ(lm_state_commit(st, &c6), LM_OK);
  std::vector<unsigned char> now = read_all(p);
  EXPECT_EQ(0, memcmp(now.data(), reference_slot(5, make_coord(5)).data(), 64));
  EXPECT_EQ(0, memcmp(now.data() + 64, reference_slot(6, c6).data(), 64));
  lm_state_close(st);
}

TEST(StateTracker, TornWriteFallsBackToPreviousCommit) {
  TempDir td;
  std::string p = td.file("state");
  {
    lm_state *st = open_ok(p);
    for (uint64_t k = 1; k <= 3; k++) {
      lm_state_coord c = make_coord(k);
      ASSERT_EQ(lm_state_commit(st, &c), LM_OK);
    }
    lm_state_close(st);  // A = seq 3, B = seq 2
  }
  const std::vector<unsigned char> committed = read_all(p);
  std::vector<unsigned char> next = reference_slot(4, make_coord(4));  // would go to B
  std::mt19937_64 rng(3);
  for (size_t prefix = 1; prefix < 64; prefix++) {
    for (int garbage = 0; garbage < 2; garbage++) {
      write_file(p, committed);
      std::vector<unsigned char> torn(committed.begin() + 64, committed.end());
      for (size_t i = 0; i < prefix; i++) torn[i] = garbage ? (unsigned char)rng() : next[i];
      write_at(p, 64, torn.data(), 64);
      lm_state *st = open_ok(p);
      lm_state_coord got;
      uint64_t seq = 0;
      lm_status s = lm_state_load(st, &got, &seq);
      ASSERT_EQ(s, LM_OK) << "prefix " << prefix;
      // The torn slot might by chance still decode as the old seq-2 slot (the
      // prefix rewrote identical bytes), but the answer is always seq 3.
      EXPECT_EQ(seq, 3u);
      EXPECT_TRUE(coord_eq(got, make_coord(3)));
      // The retried commit goes to the torn slot, never to the valid one.
      lm_state_coord c4 = make_coord(4);
      ASSERT_EQ(lm_state_commit(st, &c4), LM_OK);
      std::vector<unsigned char> now = read_all(p);
      EXPECT_EQ(0, memcmp(now.data(), committed.data(), 64));
      EXPECT_EQ(0, memcmp(now.data() + 64, next.data(), 64));
      lm_state_close(st);
    }
  }
}

TEST(StateTracker, BitFlipAnywhereInTheFile) {
  TempDir td;
  std::string p = td.file("state");
  {
    lm_state *st = open_ok(p);
    for (uint64_t k = 1; k <= 4; k++) {
      lm_state_coord c = make_coord(k);
      ASSERT_EQ(lm_state_commit(st, &c), LM_OK);
    }
    lm_state_close(st);  // A = seq 3, B = seq 4
  }
  const std::vector<unsigned char> good = read_all(p);
  for (int bit = 0; bit < 128 * 8; bit++) {
    std::vector<unsigned char> bad = good;
    bad[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    write_file(p, bad);
    lm_state *st = open_ok(p);
    lm_state_coord got;
    uint64_t seq = 0;
    lm_status s = lm_state_load(st, &got, &seq);
    bool in_b = bit / 8 >= 64;
    if (in_b) {  // newest damaged: fall back to A (seq 3)
      ASSERT_EQ(s, LM_OK) << "bit " << bit;
      EXPECT_EQ(seq, 3u);
      EXPECT_TRUE(coord_eq(got, make_coord(3)));
    } else {  // older damaged: newest still wins
      ASSERT_EQ(s, LM_OK) << "bit " << bit;
      EXPECT_EQ(seq, 4u);
      EXPECT_TRUE(coord_eq(got, make_coord(4)));
    }
    lm_state_close(st);
  }
}

TEST(StateTracker, BothCorruptIsAnErrorNotAFreshStart) {
  TempDir td;
  std::string p = td.file("state");
  {
    lm_state *st = open_ok(p);
    for (uint64_t k = 1; k <= 2; k++) {
      lm_state_coord c = make_coord(k);
      ASSERT_EQ(lm_state_commit(st, &c), LM_OK);
    }
    lm_state_close(st);
  }
  std::vector<unsigned char> bytes = read_all(p);
  bytes[20] ^= 0x01;
  bytes[64 + 50] ^= 0x80;
  write_file(p, bytes);
  lm_state *st = open_ok(p);
  ASSERT_NE(st, nullptr);
  lm_state_coord got;
  EXPECT_EQ(lm_state_load(st, &got, nullptr), LM_ECORRUPT);
  lm_status ss[2];
  uint64_t sq[2];
  ASSERT_EQ(lm_state_inspect(st, ss, sq), LM_OK);
  EXPECT_EQ(ss[0], LM_ECORRUPT);
  EXPECT_EQ(ss[1], LM_ECORRUPT);
  // A commit refuses to paper over the loss, and leaves the file alone.
  lm_state_coord c = make_coord(3);
  EXPECT_EQ(lm_state_commit(st, &c), LM_ECORRUPT);
  EXPECT_EQ(read_all(p), bytes);
  // An explicit reset is the only way to start over.
  ASSERT_EQ(lm_state_reset(st), LM_OK);
  EXPECT_EQ(lm_state_load(st, &got, nullptr), LM_ENOTFOUND);
  std::vector<unsigned char> zeros(128, 0);
  EXPECT_EQ(read_all(p), zeros);
  ASSERT_EQ(lm_state_commit(st, &c), LM_OK);
  uint64_t seq = 0;
  ASSERT_EQ(lm_state_load(st, &got, &seq), LM_OK);
  EXPECT_EQ(seq, 1u);
  EXPECT_TRUE(coord_eq(got, c));
  lm_state_close(st);
}

TEST(StateTracker, OneCorruptOneEmptyIsCorrupt) {
  TempDir td;
  std::string p = td.file("state");
  std::vector<unsigned char> file = reference_slot(1, make_coord(1));
  file[30] ^= 0x10;
  file.resize(128, 0);
  write_file(p, file);
  lm_state *st = open_ok(p);
  lm_state_coord got;
  EXPECT_EQ(lm_state_load(st, &got, nullptr), LM_ECORRUPT);
  lm_state_close(st);
  // Same with the damaged slot in B.
  std::vector<unsigned char> f2(64, 0);
  std::vector<unsigned char> b = reference_slot(1, make_coord(1));
  b[0] ^= 0xFF;
  f2.insert(f2.end(), b.begin(), b.end());
  write_file(p, f2);
  st = open_ok(p);
  EXPECT_EQ(lm_state_load(st, &got, nullptr), LM_ECORRUPT);
  lm_state_close(st);
}

TEST(StateTracker, WrongVersion) {
  TempDir td;
  std::string p = td.file("state");
  // A valid v1 slot next to a (well-formed) v2 slot: never silently use the v1 one.
  std::vector<unsigned char> file = reference_slot(7, make_coord(7));
  std::vector<unsigned char> v2 = reference_slot(8, make_coord(8), 2);
  file.insert(file.end(), v2.begin(), v2.end());
  write_file(p, file);
  lm_state *st = open_ok(p);
  lm_state_coord got;
  EXPECT_EQ(lm_state_load(st, &got, nullptr), LM_EVERSION);
  lm_state_coord c = make_coord(9);
  EXPECT_EQ(lm_state_commit(st, &c), LM_EVERSION);
  EXPECT_EQ(read_all(p), file);
  lm_state_close(st);
}

TEST(StateTracker, WrongFileSize) {
  TempDir td;
  std::string p = td.file("state");
  for (size_t n : {0u, 1u, 63u, 64u, 127u, 129u, 256u}) {
    std::vector<unsigned char> bytes(n, 0);
    if (n >= 64) {
      std::vector<unsigned char> a = reference_slot(1, make_coord(1));
      std::copy(a.begin(), a.end(), bytes.begin());
    }
    write_file(p, bytes);
    lm_state *st = reinterpret_cast<lm_state *>(0x1);
    EXPECT_EQ(lm_state_open(p.c_str(), &st), LM_ECORRUPT) << "size " << n;
    EXPECT_EQ(st, nullptr);
    EXPECT_EQ(read_all(p).size(), n) << "the file must not be repaired silently";
  }
}

TEST(StateTracker, UnwritableLocationIsEIO) {
  TempDir td;
  lm_state *st = nullptr;
  // Missing directory.
  EXPECT_EQ(lm_state_open(td.file("no/such/dir/state").c_str(), &st), LM_EIO);
  EXPECT_EQ(st, nullptr);
  // A path "under" a regular file (ENOTDIR).
  std::string f = td.file("plain");
  write_file(f, {1, 2, 3});
  EXPECT_EQ(lm_state_open((f + "/state").c_str(), &st), LM_EIO);
  EXPECT_EQ(errno, ENOTDIR);
  // A path that is a directory: exists, but is not a regular 128-byte file.
  EXPECT_NE(lm_state_open(td.path().c_str(), &st), LM_OK);
  // A read-only directory (only effective when not running as root).
  std::string ro = td.file("ro");
  ASSERT_EQ(mkdir(ro.c_str(), 0500), 0);
  if (geteuid() != 0) {
    EXPECT_EQ(lm_state_open((ro + "/state").c_str(), &st), LM_EIO);
    EXPECT_EQ(errno, EACCES);
  }
  chmod(ro.c_str(), 0700);
}

TEST(StateTracker, InvalidArguments) {
  lm_state *st = nullptr;
  EXPECT_EQ(lm_state_open(nullptr, &st), LM_EINVAL);
  EXPECT_EQ(lm_state_open("", &st), LM_EINVAL);
  EXPECT_EQ(lm_state_open("x", nullptr), LM_EINVAL);
  lm_state_coord c = make_coord(1);
  EXPECT_EQ(lm_state_load(nullptr, &c, nullptr), LM_EINVAL);
  EXPECT_EQ(lm_state_commit(nullptr, &c), LM_EINVAL);
  EXPECT_EQ(lm_state_reset(nullptr), LM_EINVAL);
  lm_status ss[2];
  uint64_t sq[2];
  EXPECT_EQ(lm_state_inspect(nullptr, ss, sq), LM_EINVAL);
  lm_state_close(nullptr);
  TempDir td;
  st = open_ok(td.file("s"));
  EXPECT_EQ(lm_state_load(st, nullptr, nullptr), LM_EINVAL);
  EXPECT_EQ(lm_state_commit(st, nullptr), LM_EINVAL);
  lm_state_close(st);
}

TEST(StateTracker, SequenceNearTheTopOfU64) {
  TempDir td;
  std::string p = td.file("state");
  std::vector<unsigned char> file = reference_slot(UINT64_MAX - 2, make_coord(1));
  std::vector<unsigned char> b = reference_slot(UINT64_MAX - 1, make_coord(2));
  file.insert(file.end(), b.begin(), b.end());
  write_file(p, file);
  lm_state *st = open_ok(p);
  lm_state_coord c = make_coord(3);
  ASSERT_EQ(lm_state_commit(st, &c), LM_OK);  // A gets UINT64_MAX
  lm_state_coord got;
  uint64_t seq = 0;
  ASSERT_EQ(lm_state_load(st, &got, &seq), LM_OK);
  EXPECT_EQ(seq, UINT64_MAX);
  EXPECT_TRUE(coord_eq(got, c));
  lm_state_coord d = make_coord(4);
  EXPECT_EQ(lm_state_commit(st, &d), LM_EOVERFLOW);  // never wraps to a smaller number
  ASSERT_EQ(lm_state_load(st, &got, &seq), LM_OK);
  EXPECT_EQ(seq, UINT64_MAX);
  lm_state_close(st);
}

// A child commits coordinates derived from the sequence number as fast as it
// can; the parent kills it with SIGKILL at random moments.  After every kill the
// file must load, the coordinate must be the one belonging to its sequence, and
// the sequence must never go backwards across kills.
TEST(StateTracker, KillNineDuringCommitsLeavesAValidState) {
  TempDir td;
  std::string p = td.file("state");
  std::mt19937_64 rng(99);
  uint64_t last_seq = 0;
  for (int round = 0; round < 20; round++) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      lm_state *st = nullptr;
      if (lm_state_open(p.c_str(), &st) != LM_OK) _exit(2);
      lm_state_coord c;
      uint64_t seq = 0;
      lm_status s = lm_state_load(st, &c, &seq);
      if (s != LM_OK && s != LM_ENOTFOUND) _exit(3);
      for (;;) {
        seq++;
        lm_state_coord n = make_coord(seq);
        if (lm_state_commit(st, &n) != LM_OK) _exit(4);
      }
    }
    usleep((useconds_t)(1000 + rng() % 20000));
    kill(pid, SIGKILL);
    int wst = 0;
    ASSERT_EQ(waitpid(pid, &wst, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(wst)) << "child exited with " << WEXITSTATUS(wst);
    lm_state *st = open_ok(p);
    ASSERT_NE(st, nullptr);
    lm_state_coord got;
    uint64_t seq = 0;
    lm_status s = lm_state_load(st, &got, &seq);
    if (s == LM_ENOTFOUND) {
      EXPECT_EQ(last_seq, 0u);
    } else {
      ASSERT_EQ(s, LM_OK);
      EXPECT_GE(seq, last_seq);
      EXPECT_TRUE(coord_eq(got, make_coord(seq)));
      last_seq = seq;
    }
    lm_state_close(st);
  }
  EXPECT_GT(last_seq, 0u);
}

// ------------------------------------------------ durable I/O (core/src/durable.c)

TEST(StateDurable, LittleEndianCodecIsExplicit) {
  uint8_t b[8];
  lm_le_put16(b, 0x0102);
  EXPECT_EQ(b[0], 0x02);
  EXPECT_EQ(b[1], 0x01);
  lm_le_put32(b, 0x01020304u);
  EXPECT_EQ(std::string((char *)b, 4), std::string("\x04\x03\x02\x01", 4));
  lm_le_put64(b, 0x0102030405060708ull);
  EXPECT_EQ(std::string((char *)b, 8), std::string("\x08\x07\x06\x05\x04\x03\x02\x01", 8));
  EXPECT_EQ(lm_le_get64(b), 0x0102030405060708ull);
  EXPECT_EQ(lm_le_get32(b), 0x05060708u);
  EXPECT_EQ(lm_le_get16(b), 0x0708u);
  // a hash array in file order is (lo, hi) little-endian: swapping twice is the identity
  lm_hash128_t h[2] = {{0x0102030405060708ull, 0x1112131415161718ull}, {1, 2}};
  lm_le_hashes_swap(h, 2);
  uint8_t raw[32];
  memcpy(raw, h, 32);
  EXPECT_EQ(lm_le_get64(raw), 0x0102030405060708ull);
  EXPECT_EQ(lm_le_get64(raw + 8), 0x1112131415161718ull);
  EXPECT_EQ(lm_le_get64(raw + 16), 1u);
  lm_le_hashes_swap(h, 2);
  EXPECT_EQ(h[0].lo, 0x0102030405060708ull);
  EXPECT_EQ(h[1].hi, 2u);
}

TEST(StateDurable, ReplaceFileIsAllOrNothing) {
  TempDir td;
  ASSERT_FALSE(td.path().empty());
  std::string path = td.path() + "/f", tmp = td.path() + "/f.tmp";
  const char a[] = "hello ", b[] = "world";
  struct iovec parts[2] = {{(void *)a, 6}, {(void *)b, 5}};
  int fd = -7;
  ASSERT_EQ(lm_io_replace_file(tmp.c_str(), path.c_str(), nullptr, parts, 2, &fd), 0);
  ASSERT_GE(fd, 0);
  char got[16] = {0};
  EXPECT_EQ(lm_io_pread_full(fd, got, sizeof got, 0), 11);  // short only at the end of the file
  EXPECT_EQ(std::string(got), "hello world");
  EXPECT_EQ(lm_io_pread_full(fd, got, 4, 6), 4);
  EXPECT_EQ(lm_io_pwrite_full(fd, "W", 1, 6), 0);
  EXPECT_EQ(lm_io_fdatasync(fd), 0);
  close(fd);
  struct stat sb;
  EXPECT_NE(stat(tmp.c_str(), &sb), 0);  // renamed away
  // replace again without keeping the descriptor: the new content, no tmp left
  ASSERT_EQ(lm_io_replace_file(tmp.c_str(), path.c_str(), td.path().c_str(), parts + 1, 1, nullptr), 0);
  fd = open(path.c_str(), O_RDONLY);
  memset(got, 0, sizeof got);
  EXPECT_EQ(lm_io_pread_full(fd, got, sizeof got, 0), 5);
  EXPECT_EQ(std::string(got), "world");
  close(fd);
  // a failure (tmp in a missing folder) leaves the target as it was, errno kept
  errno = 0;
  fd = -7;
  std::string bad_tmp = td.path() + "/missing/f.tmp";
  EXPECT_EQ(lm_io_replace_file(bad_tmp.c_str(), path.c_str(), nullptr, parts, 2, &fd), -1);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(fd, -1);
  fd = open(path.c_str(), O_RDONLY);
  memset(got, 0, sizeof got);
  EXPECT_EQ(lm_io_pread_full(fd, got, sizeof got, 0), 5);
  close(fd);
  errno = 0;
  EXPECT_EQ(lm_io_fsync_dir((td.path() + "/missing").c_str()), -1);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(lm_io_pwrite_full(-1, "x", 1, 0), -1);
  EXPECT_EQ(errno, EBADF);
}

TEST(StateDurable, Dirname) {
  const char *cases[][2] = {{"a/b/c", "a/b"}, {"c", "."}, {"/c", "/"}, {"/a/c", "/a"}, {"./c", "."}};
  for (auto &c : cases) {
    char *d = lm_io_dirname(c[0]);
    ASSERT_NE(d, nullptr);
    EXPECT_STREQ(d, c[1]) << c[0];
    free(d);
  }
}
