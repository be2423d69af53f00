// lm_o32/o64_equal_checked (ops_offsets_impl.h): both modes (short strings: offsets
// copied and checked, every pair's first 16 bytes compared without a branch; longer:
// one checked pass in order, only equal lengths read) against std::string ==, with
// each payload ending right before an unmapped page (a read past a payload faults);
// one payload shared by both sides; invalid offsets anywhere in a block; and the
// first pass's SIMD copies (AVX2, AVX-512) against a plain reference.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#define restrict __restrict__ /* ops_internal.h is C */
extern "C" {
#include "luminamoon/hash.h"
#include "luminamoon/string_tensor.h"
#include "../../core/src/ops_internal.h"
}
#undef restrict

namespace {

// A payload whose last byte sits right before a PROT_NONE page.
struct GuardedPayload {
  uint8_t *map = nullptr;
  size_t map_len = 0;
  uint8_t *data = nullptr;
  size_t len = 0;
  explicit GuardedPayload(const std::string &bytes) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    const size_t body = (bytes.size() + page - 1) / page * page + page;  // >= one readable page
    map_len = body + page;
    map = static_cast<uint8_t *>(mmap(nullptr, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (map == MAP_FAILED) throw std::runtime_error("mmap");
    if (mprotect(map + body, page, PROT_NONE) != 0) throw std::runtime_error("mprotect");
    data = map + body - bytes.size();
    len = bytes.size();
    if (len) std::memcpy(data, bytes.data(), len);
  }
  ~GuardedPayload() { munmap(map, map_len); }
  GuardedPayload(const GuardedPayload &) = delete;
  GuardedPayload &operator=(const GuardedPayload &) = delete;
};

template <typename OFF>
std::string pack(const std::vector<std::string> &v, std::vector<OFF> &off) {
  off.assign(1, 0);
  std::string all;
  for (auto &x : v) {
    all += x;
    off.push_back(OFF(all.size()));
  }
  return all;
}

lm_status equal_checked(const std::vector<int32_t> &oa, const uint8_t *da, size_t la, const std::vector<int32_t> &ob,
                        const uint8_t *db, size_t lb, size_t n, uint8_t *out, const lm_exec *e) {
  return lm_o32_equal_checked(oa.data(), da, la, ob.data(), db, lb, n, out, e);
}
lm_status equal_checked(const std::vector<int64_t> &oa, const uint8_t *da, size_t la, const std::vector<int64_t> &ob,
                        const uint8_t *db, size_t lb, size_t n, uint8_t *out, const lm_exec *e) {
  return lm_o64_equal_checked(oa.data(), da, la, ob.data(), db, lb, n, out, e);
}

std::string random_bytes(std::mt19937_64 &rng, size_t len, unsigned alphabet) {
  std::string s(len, '\0');
  for (auto &c : s) c = char('a' + rng() % alphabet);
  return s;
}

// b[i] from a[i]: equal, one byte changed (anywhere, often past byte 16 or the last),
// the same length at random (alphabet 2: many near misses), or another length.
std::string partner(std::mt19937_64 &rng, const std::string &a, size_t max_len) {
  std::string b = a;
  switch (rng() % 5) {
    case 0:
    case 1: return b;
    case 2:
      if (!b.empty()) {
        const size_t at = rng() % 3 == 0 ? b.size() - 1 : rng() % b.size();
        b[at] = char(b[at] ^ (1 + rng() % 255));
      }
      return b;
    case 3: return random_bytes(rng, a.size(), 2);
    default: return random_bytes(rng, rng() % (max_len + 1), 2);
  }
}

template <typename OFF>
void check_against_strings(uint64_t seed, size_t n, size_t max_len, bool shared) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> a(n), b(n);
  for (size_t i = 0; i < n; i++) {
    // mostly short with some long ones (both modes, and the short mode's long pairs)
    const size_t len = rng() % 8 == 0 ? rng() % (max_len + 1) : rng() % (max_len < 24 ? max_len + 1 : 25);
    a[i] = random_bytes(rng, len, 2);
    b[i] = partner(rng, a[i], max_len);
  }
  std::vector<OFF> oa, ob;
  const std::string pa = pack(a, oa), pb = pack(b, ob);
  if (shared) {  // one payload: b's strings are a's, at the same or other offsets
    std::vector<std::string> both(a);
    both.insert(both.end(), b.begin(), b.end());
    std::vector<OFF> all;
    const std::string p = pack(both, all);
    GuardedPayload g(p);
    const std::vector<OFF> o1(all.begin(), all.begin() + std::ptrdiff_t(n) + 1);
    const std::vector<OFF> o2(all.begin() + std::ptrdiff_t(n), all.end());
    for (int threads : {1, 2}) {
      lm_exec e{threads, 64};
      std::vector<uint8_t> out(n, 7);
      // a against itself through one payload: every pair at one offset
      ASSERT_EQ(equal_checked(o1, g.data, g.len, o1, g.data, g.len, n, out.data(), &e), LM_OK);
      for (size_t i = 0; i < n; i++) ASSERT_EQ(out[i], 1) << i;
      // a against b, both inside one payload
      std::fill(out.begin(), out.end(), 7);
      ASSERT_EQ(equal_checked(o1, g.data, g.len, o2, g.data, g.len, n, out.data(), &e), LM_OK);
      for (size_t i = 0; i < n; i++) ASSERT_EQ(out[i], a[i] == b[i] ? 1 : 0) << i;
    }
    return;
  }
  GuardedPayload ga(pa), gb(pb);
  for (int threads : {1, 2}) {
    lm_exec e{threads, 64};
    std::vector<uint8_t> out(n, 7);
    ASSERT_EQ(equal_checked(oa, ga.data, ga.len, ob, gb.data, gb.len, n, out.data(), &e), LM_OK);
    for (size_t i = 0; i < n; i++)
      ASSERT_EQ(out[i], a[i] == b[i] ? 1 : 0) << "n " << n << " i " << i << " len " << a[i].size() << "/"
                                              << b[i].size();
  }
}

}  // namespace

TEST(OpsEqual, MatchesStdStringAtPayloadEnds) {
  uint64_t seed = 1;
  for (size_t n : {size_t(1), size_t(2), size_t(7), size_t(17), size_t(1023), size_t(1024), size_t(1025),
                   size_t(3001)}) {
    for (size_t max_len : {size_t(0), size_t(3), size_t(16), size_t(17), size_t(40), size_t(300)}) {
      check_against_strings<int32_t>(seed++, n, max_len, false);
      check_against_strings<int64_t>(seed++, n, max_len, false);
    }
  }
}

TEST(OpsEqual, OnePayloadForBothSides) {
  uint64_t seed = 100;
  for (size_t n : {size_t(1), size_t(9), size_t(1025), size_t(2500)})
    for (size_t max_len : {size_t(12), size_t(300)}) {
      check_against_strings<int32_t>(seed++, n, max_len, true);
      check_against_strings<int64_t>(seed++, n, max_len, true);
    }
}

// Every length 0..300 against a partner of the same length differing in its last byte,
// in its first, or not at all, each string ending at the payload's end once.
TEST(OpsEqual, EveryLengthAndDifferingByte) {
  for (size_t len = 0; len <= 300; len++) {
    std::mt19937_64 rng(len);
    std::vector<std::string> a, b;
    for (int kind = 0; kind < 3; kind++) {
      std::string x = random_bytes(rng, len, 26), y = x;
      if (len && kind == 1) y[len - 1] = char(y[len - 1] ^ 1);
      if (len && kind == 2) y[0] = char(y[0] ^ 0x80);
      a.push_back(x);
      b.push_back(y);
    }
    // padding strings around them (short or long, so both modes see them)
    for (int pad = 0; pad < 2; pad++) {
      std::vector<std::string> aa, bb;
      for (size_t k = 0; k < 3; k++) {
        aa.push_back(std::string(pad ? 200 : 1, 'p'));
        bb.push_back(std::string(pad ? 200 : 1, 'p'));
        aa.push_back(a[k]);
        bb.push_back(b[k]);
      }
      std::vector<int32_t> oa, ob;
      GuardedPayload ga(pack(aa, oa)), gb(pack(bb, ob));
      std::vector<uint8_t> out(aa.size(), 7);
      lm_exec e{1, 0};
      ASSERT_EQ(lm_o32_equal_checked(oa.data(), ga.data, ga.len, ob.data(), gb.data, gb.len, aa.size(), out.data(), &e),
                LM_OK);
      for (size_t i = 0; i < aa.size(); i++) ASSERT_EQ(out[i], aa[i] == bb[i] ? 1 : 0) << "len " << len << " i " << i;
    }
  }
}

// A decreasing pair, one past the payload or a negative offset anywhere (first,
// middle, last pair of a block; short and long strings) is LM_EINVAL.
TEST(OpsEqual, InvalidOffsetsAreRejectedInBothModes) {
  for (size_t len : {size_t(3), size_t(100)}) {
    const size_t n = 2100;
    std::vector<std::string> a(n, std::string(len, 'x'));
    std::vector<int32_t> oa;
    const std::string p = pack(a, oa);
    GuardedPayload g(p);
    for (size_t at : {size_t(1), size_t(500), size_t(1023), size_t(1024), size_t(1025), n - 1, n}) {
      for (int kind = 0; kind < 3; kind++) {
        std::vector<int32_t> bad = oa;
        if (kind == 0) bad[at] = bad[at - 1] - 1;                   // decreasing
        if (kind == 1) bad[at] = int32_t(g.len + 1);                // past the payload
        if (kind == 2) bad[at] = -1;                                // negative
        for (int side = 0; side < 2; side++) {
          std::vector<uint8_t> out(n);
          lm_exec e{1, 0};
          const int32_t *x = side ? oa.data() : bad.data(), *y = side ? bad.data() : oa.data();
          EXPECT_EQ(lm_o32_equal_checked(x, g.data, g.len, y, g.data, g.len, n, out.data(), &e), LM_EINVAL)
              << "len " << len << " at " << at << " kind " << kind << " side " << side;
        }
      }
    }
  }
}

#if LM_HASH_HAVE_AVX2
// The first pass's SIMD copies against a plain reference of its contract.
template <typename U>
void prep_reference(const U *ca, const U *cb, size_t m, uint32_t *w, uint8_t *lg, int *down) {
  *down = 0;
  for (size_t k = 0; k < m; k++) {
    const U la = U(ca[k + 1] - ca[k]), lb = U(cb[k + 1] - cb[k]);
    *down |= ca[k + 1] < ca[k] || cb[k + 1] < cb[k];
    const uint32_t lm = la >= 16 ? 0xFFFFu : (1u << la) - 1u;
    w[k] = la == lb ? lm : 0xFFFFFFFFu;
    lg[k] = uint8_t((la == lb ? 1 : 0) | (la == lb && la > 16 ? 2 : 0));
  }
}

template <typename U>
void check_prep(int (*fn)(const U *, const U *, size_t, uint32_t *, uint8_t *), const char *name) {
  std::mt19937_64 rng(5);
  for (size_t m : {size_t(1), size_t(15), size_t(16), size_t(17), size_t(63), size_t(64), size_t(65), size_t(1024)}) {
    for (int rep = 0; rep < 20; rep++) {
      std::vector<U> ca(m + 1), cb(m + 1);
      ca[0] = U(rng() % 100);
      cb[0] = U(rng() % 100);
      for (size_t k = 0; k < m; k++) {
        const U l = U(rng() % 40);
        ca[k + 1] = U(ca[k] + l);
        cb[k + 1] = U(cb[k] + (rng() % 2 ? l : U(rng() % 40)));
      }
      if (rep % 4 == 3) ca[rng() % (m + 1)] = U(rng());  // sometimes decreasing somewhere
      std::vector<uint32_t> w(m), ww(m);
      std::vector<uint8_t> lg(m), wl(m);
      int down = 0;
      prep_reference(ca.data(), cb.data(), m, ww.data(), wl.data(), &down);
      const int got = fn(ca.data(), cb.data(), m, w.data(), lg.data());
      ASSERT_EQ(got != 0, down != 0) << name << " m " << m;
      for (size_t k = 0; k < m; k++) {
        ASSERT_EQ(w[k], ww[k]) << name << " m " << m << " k " << k;
        ASSERT_EQ(lg[k], wl[k]) << name << " m " << m << " k " << k;
      }
    }
  }
}

TEST(OpsEqual, FirstPassSimdCopiesMatchTheContract) {
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "no AVX2: the portable pass is tested through the op";
  check_prep<uint32_t>(lm_o32_eq_prep_avx2, "o32 avx2");
  check_prep<uint64_t>(lm_o64_eq_prep_avx2, "o64 avx2");
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq")) {
    check_prep<uint32_t>(lm_o32_eq_prep_avx512, "o32 avx512");
    check_prep<uint64_t>(lm_o64_eq_prep_avx512, "o64 avx512");
  }
}
#endif

// Threads get ranges of about equal bytes (ops_internal.h lm_cut_*): equal and hash64
// (offsets and views) on skewed lengths (many tiny strings, then a few huge ones) give
// the one-thread answers with 2, 3 and 7 threads and small grains.
TEST(OpsEqual, ByteWeightedSplitsGiveTheOneThreadAnswers) {
  std::mt19937_64 rng(21);
  const size_t n = 5000;
  std::vector<std::string> a(n), b(n);
  for (size_t i = 0; i < n; i++) {
    const size_t len = i < n - 40 ? rng() % 6 : 2000 + rng() % 20000;
    a[i] = random_bytes(rng, len, 3);
    b[i] = rng() % 2 ? a[i] : partner(rng, a[i], 30);
  }
  std::vector<int32_t> oa, ob;
  GuardedPayload ga(pack(a, oa)), gb(pack(b, ob));
  std::vector<lm_string_view> views(n);
  ASSERT_EQ(lm_views_from_offsets32(oa.data(), n, ga.data, ga.len, 0, views.data(), nullptr), LM_OK);
  const uint8_t *bufs[1] = {ga.data};
  const size_t sizes[1] = {ga.len};
  const lm_payloads pl = {bufs, sizes, 1};
  std::vector<uint64_t> h1(n), hv1(n);
  lm_exec one{1, 0};
  ASSERT_EQ(lm_o32_hash64(oa.data(), n, ga.data, 7, h1.data(), &one), LM_OK);
  ASSERT_EQ(lm_views_hash64(views.data(), n, &pl, 7, hv1.data(), &one), LM_OK);
  for (size_t i = 0; i < n; i++) ASSERT_EQ(h1[i], hv1[i]) << i;
  for (int threads : {2, 3, 7}) {
    for (size_t grain : {size_t(1), size_t(100)}) {
      lm_exec e{threads, grain};
      std::vector<uint8_t> out(n, 7);
      ASSERT_EQ(lm_o32_equal_checked(oa.data(), ga.data, ga.len, ob.data(), gb.data, gb.len, n, out.data(), &e), LM_OK);
      for (size_t i = 0; i < n; i++) ASSERT_EQ(out[i], a[i] == b[i] ? 1 : 0) << threads << " " << i;
      std::vector<uint64_t> h(n, 0), hv(n, 0);
      ASSERT_EQ(lm_o32_hash64(oa.data(), n, ga.data, 7, h.data(), &e), LM_OK);
      ASSERT_EQ(lm_views_hash64(views.data(), n, &pl, 7, hv.data(), &e), LM_OK);
      for (size_t i = 0; i < n; i++) ASSERT_EQ(h[i], h1[i]) << threads << " " << i;
      for (size_t i = 0; i < n; i++) ASSERT_EQ(hv[i], h1[i]) << threads << " " << i;
    }
  }
}

// The per-string ops split by count into tasks taken dynamically: prefix_match and
// equal_scalar (offsets and views), equal (views) with 2, 3 and 7 threads and small
// grains give the one-thread answers.
TEST(OpsEqual, TaskSplitsOfPerStringOpsGiveTheOneThreadAnswers) {
  std::mt19937_64 rng(22);
  for (size_t n : {size_t(1), size_t(5), size_t(999), size_t(4097)}) {
    std::vector<std::string> a(n), b(n);
    for (size_t i = 0; i < n; i++) {
      a[i] = random_bytes(rng, rng() % 30, 2);
      b[i] = partner(rng, a[i], 30);
    }
    std::vector<int32_t> oa, ob;
    GuardedPayload ga(pack(a, oa)), gb(pack(b, ob));
    std::vector<lm_string_view> va(n), vb(n);
    ASSERT_EQ(lm_views_from_offsets32(oa.data(), n, ga.data, ga.len, 0, va.data(), nullptr), LM_OK);
    ASSERT_EQ(lm_views_from_offsets32(ob.data(), n, gb.data, gb.len, 0, vb.data(), nullptr), LM_OK);
    const uint8_t *ba[1] = {ga.data}, *bb[1] = {gb.data};
    const size_t sa[1] = {ga.len}, sb[1] = {gb.len};
    const lm_payloads pa = {ba, sa, 1}, pb = {bb, sb, 1};
    const std::string probe = a[n / 2], prefix = a[n / 2].substr(0, 2);
    for (int threads : {1, 2, 3, 7}) {
      for (size_t grain : {size_t(1), size_t(100)}) {
        lm_exec e{threads, grain};
        std::vector<uint8_t> o1(n, 7), o2(n, 7), o3(n, 7), o4(n, 7), o5(n, 7);
        const uint8_t *pp = reinterpret_cast<const uint8_t *>(prefix.data());
        const uint8_t *sp = reinterpret_cast<const uint8_t *>(probe.data());
        ASSERT_EQ(lm_o32_prefix_match_checked(oa.data(), n, ga.data, ga.len, pp, prefix.size(), o1.data(), &e), LM_OK);
        ASSERT_EQ(lm_views_prefix_match(va.data(), n, &pa, pp, prefix.size(), o2.data(), &e), LM_OK);
        ASSERT_EQ(lm_o32_equal_scalar_checked(oa.data(), n, ga.data, ga.len, sp, probe.size(), o3.data(), &e), LM_OK);
        ASSERT_EQ(lm_views_equal_scalar(va.data(), n, &pa, sp, probe.size(), o4.data(), &e), LM_OK);
        ASSERT_EQ(lm_views_equal(va.data(), &pa, vb.data(), &pb, n, o5.data(), &e), LM_OK);
        for (size_t i = 0; i < n; i++) {
          const bool pre = a[i].compare(0, prefix.size(), prefix) == 0 && a[i].size() >= prefix.size();
          ASSERT_EQ(o1[i], pre ? 1 : 0) << threads << " " << i;
          ASSERT_EQ(o2[i], pre ? 1 : 0) << threads << " " << i;
          ASSERT_EQ(o3[i], a[i] == probe ? 1 : 0) << threads << " " << i;
          ASSERT_EQ(o4[i], a[i] == probe ? 1 : 0) << threads << " " << i;
          ASSERT_EQ(o5[i], a[i] == b[i] ? 1 : 0) << threads << " " << i;
        }
      }
    }
  }
}
