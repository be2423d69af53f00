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
#include <type_traits>
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

// lm_oXX_eq_copy_prep_avx512 (the copy of a block's offsets and its first pass in one) against
// a plain copy and prep_reference: block sizes around the 16-pair step (0, 1, 15, 16, 17, 31, 32,
// 255, 256), offsets that decrease somewhere (also at the last one), the offsets ending right
// before a guard page (the loads stop at oa[m] / ob[m]) and guard values after ca[m], w[m - 1]
// and lg[m - 1] in the outputs (nothing written past them).
template <typename O, typename U>
void check_copy_prep(int (*fn)(const O *, const O *, size_t, U *, U *, uint32_t *, uint8_t *), const char *name) {
  std::mt19937_64 rng(39);
  for (size_t m : {size_t(0), size_t(1), size_t(15), size_t(16), size_t(17), size_t(31), size_t(32), size_t(255),
                   size_t(256)}) {
    for (int rep = 0; rep < 16; rep++) {
      std::vector<O> src(m + 1);
      std::vector<O> srb(m + 1);
      src[0] = O(rng() % 100);
      srb[0] = O(rng() % 100);
      for (size_t k = 0; k < m; k++) {
        const O l = O(rng() % 40);
        src[k + 1] = O(src[k] + l);
        srb[k + 1] = O(srb[k] + (rng() % 2 ? l : O(rng() % 40)));
      }
      if (rep % 4 == 3) src[rng() % (m + 1)] = O(rng() % 5000);  // sometimes decreasing somewhere
      if (rep % 8 == 5 && m) srb[m] = O(srb[m - 1] - 1);         // the last one decreasing
      // both offset arrays end at a guard page
      std::string ba(reinterpret_cast<const char *>(src.data()), src.size() * sizeof(O));
      std::string bb(reinterpret_cast<const char *>(srb.data()), srb.size() * sizeof(O));
      GuardedPayload ga(ba), gb(bb);
      std::vector<U> ca(m + 2, U(0xA5A5)), cb(m + 2, U(0x5A5A)), ua(m + 1), ub(m + 1);
      std::vector<uint32_t> w(m + 1, 0xDEADBEEFu), ww(m + 1);
      std::vector<uint8_t> lg(m + 1, 0xEE), wl(m + 1);
      for (size_t k = 0; k <= m; k++) {
        ua[k] = U(src[k]);
        ub[k] = U(srb[k]);
      }
      int down = 0;
      prep_reference(ua.data(), ub.data(), m, ww.data(), wl.data(), &down);
      const int got = fn(reinterpret_cast<const O *>(ga.data), reinterpret_cast<const O *>(gb.data), m, ca.data(),
                         cb.data(), w.data(), lg.data());
      ASSERT_EQ(got != 0, down != 0) << name << " m " << m << " rep " << rep;
      for (size_t k = 0; k <= m; k++) {
        ASSERT_EQ(ca[k], ua[k]) << name << " m " << m << " k " << k;
        ASSERT_EQ(cb[k], ub[k]) << name << " m " << m << " k " << k;
      }
      ASSERT_EQ(ca[m + 1], U(0xA5A5)) << name << " m " << m;
      ASSERT_EQ(cb[m + 1], U(0x5A5A)) << name << " m " << m;
      for (size_t k = 0; k < m; k++) {
        ASSERT_EQ(w[k], ww[k]) << name << " m " << m << " k " << k;
        ASSERT_EQ(lg[k], wl[k]) << name << " m " << m << " k " << k;
      }
      ASSERT_EQ(w[m], 0xDEADBEEFu) << name << " m " << m;
      ASSERT_EQ(lg[m], 0xEE) << name << " m " << m;
    }
  }
}

// lm_oXX_eq_stream_avx512 (equal for long strings: lengths first, then the equal-length pairs by masked
// 64-byte compares) against
// std::string comparison: lengths 0..300 (0, 1, 63, 64, 65, 127, 128, 129 and others), about half
// the pairs equal and the rest differing at one byte chosen among 0, 63, 64, 127, 128 and the last,
// or in length; both payloads ending at a guard page (the last string's last byte is the page's
// last readable byte: a masked load must not touch the page after), one payload against itself
// (same = 1), and an invalid offset (decreasing, past the payload) anywhere: a non-zero return.
template <typename O>
void check_stream512(int (*fn)(const O *, const O *, const uint8_t *, const uint8_t *, typename std::make_unsigned<O>::type,
                               typename std::make_unsigned<O>::type, int, uint8_t *, size_t, size_t),
                     const char *name) {
  using U = typename std::make_unsigned<O>::type;
  std::mt19937_64 rng(139);
  const size_t lens[] = {0, 1, 63, 64, 65, 127, 128, 129, 200, 300};
  for (int rep = 0; rep < 40; rep++) {
    const size_t n = rep == 0 ? 2500 : 1 + rng() % 200;  // 2500: chunks of 1024 pairs and a tail
    std::vector<std::string> a(n), b(n);
    for (size_t i = 0; i < n; i++) {
      const size_t len = rng() % 3 ? lens[rng() % 10] : size_t(rng() % 301);
      for (size_t k = 0; k < len; k++) a[i] += char('a' + rng() % 3);
      b[i] = a[i];
      const int kind = int(rng() % 4);
      if (kind == 1 && len) {  // one byte differs
        const size_t at[] = {0, 63, 64, 127, 128, len - 1};
        size_t j = at[rng() % 6];
        if (j >= len) j = len - 1;
        b[i][j] = char(b[i][j] ^ 1);
      } else if (kind == 2) {
        b[i] += 'x';
      }
    }
    std::vector<O> oa, ob;
    const std::string pa = pack(a, oa), pb = pack(b, ob);
    GuardedPayload ga(pa), gb(pb);
    std::vector<uint8_t> out(n + 1, 7);
    ASSERT_EQ(fn(oa.data(), ob.data(), ga.data, gb.data, U(ga.len), U(gb.len), 0, out.data(), 0, n), 0) << name;
    for (size_t i = 0; i < n; i++) ASSERT_EQ(out[i], a[i] == b[i] ? 1 : 0) << name << " rep " << rep << " i " << i;
    ASSERT_EQ(out[n], 7) << name;
    // a sub-range, and one payload against itself
    const size_t lo = rng() % n, hi = lo + rng() % (n - lo + 1);
    std::vector<uint8_t> o2(n, 7);
    ASSERT_EQ(fn(oa.data(), oa.data(), ga.data, ga.data, U(ga.len), U(ga.len), 1, o2.data(), lo, hi), 0) << name;
    for (size_t i = 0; i < n; i++) ASSERT_EQ(o2[i], i >= lo && i < hi ? 1 : 7) << name << " same, i " << i;
    // an invalid offset on either side
    const size_t at = 1 + rng() % n;
    std::vector<O> bad = rng() % 2 ? oa : ob;
    bad[at] = rng() % 2 ? O(bad[at - 1] - 1) : O((rng() % 2 ? ga.len : gb.len) + 1000);
    const bool left = rng() % 2;
    const std::vector<O> &x = left ? bad : oa, &y = left ? ob : bad;
    ASSERT_NE(fn(x.data(), y.data(), ga.data, gb.data, U(ga.len), U(gb.len), 0, out.data(), 0, n), 0)
        << name << " bad offset at " << at;
  }
}

TEST(OpsEqual, StreamLoopInAvx512MatchesStringComparison) {
  if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")))
    GTEST_SKIP() << "no AVX-512: the loop with memcmp runs instead (tested through the op)";
  check_stream512<int32_t>(lm_o32_eq_stream_avx512, "o32");
  check_stream512<int64_t>(lm_o64_eq_stream_avx512, "o64");
}

TEST(OpsEqual, CopyAndFirstPassInOneMatchTheContract) {
  if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")))
    GTEST_SKIP() << "no AVX-512: the block copies its offsets, then runs the AVX2 or portable first pass";
  check_copy_prep<int32_t, uint32_t>(lm_o32_eq_copy_prep_avx512, "o32");
  check_copy_prep<int64_t, uint64_t>(lm_o64_eq_copy_prep_avx512, "o64");
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

// The length pass of equal_scalar (lm_oXX_len_eq_avx2 / _cand_avx512) against its contract written
// out here: out[i] = 0 <= off[i] <= off[i + 1] <= lim (unsigned) and off[i + 1] - off[i] == plen,
// -1 when some pair of [b0, b1) is not valid, else the number of 1s.  Ranges that start off a
// step (b0 = 0, 1, 17) and end in a tail, lengths drawn so that about half the pairs match, an
// invalid pair (decreasing, past lim, negative) at the first, a middle and the last pair of the
// range, and one just outside it (which must not count).
// The _cand forms also list the marked pairs' positions (i - b0), in order, in cand.
template <typename O, typename U>
void check_len_eq(int (*fn)(const O *, uint8_t *, size_t, size_t, U, U), const char *name,
                  int (*cand_fn)(const O *, uint8_t *, size_t, size_t, U, U, uint16_t *) = nullptr) {
  std::mt19937_64 rng(39);
  for (size_t b0 : {size_t(0), size_t(1), size_t(17)}) {
    for (size_t len : {size_t(0), size_t(1), size_t(63), size_t(64), size_t(65), size_t(130), size_t(1024)}) {
      const size_t b1 = b0 + len;
      for (int rep = 0; rep < 12; rep++) {
        std::vector<O> off(b1 + 2);
        off[0] = O(rng() % 5);
        for (size_t i = 0; i + 1 < off.size(); i++) off[i + 1] = O(off[i] + O(rng() % 2 ? 3 : rng() % 6));
        const U lim = U(off[b1]) + U(rng() % 3);
        if (rep % 3 == 1 && len) {  // one invalid pair inside the range
          const size_t at = b0 + 1 + (rep % 4 == 1 ? 0 : rep % 4 == 2 ? len / 2 : len - 1);
          const int kind = int(rng() % 3);
          off[at] = kind == 0 ? O(off[at - 1] - 1) : kind == 1 ? O(lim + 1) : O(-1);
        }
        if (rep % 3 == 2) off[b1 + 1] = O(-1);  // outside the range: not looked at
        std::vector<uint8_t> out(b1 + 8, 7), want(b1 + 8, 7);
        bool bad = false;
        int hits = 0;
        for (size_t i = b0; i < b1; i++) {
          const U a = U(off[i]), z = U(off[i + 1]);
          const bool ok = a <= z && z <= lim;
          bad |= !ok;
          want[i] = uint8_t(ok && U(z - a) == U(3));
          hits += want[i];
        }
        std::vector<uint16_t> cand(len + 16, 0xFFFF);
        const int got = cand_fn ? cand_fn(off.data(), out.data(), b0, b1, lim, U(3), cand.data())
                                : fn(off.data(), out.data(), b0, b1, lim, U(3));
        ASSERT_EQ(got, bad ? -1 : hits) << name << " b0 " << b0 << " len " << len << " rep " << rep;
        for (size_t i = 0; i < out.size(); i++)
          ASSERT_EQ(out[i], want[i]) << name << " b0 " << b0 << " len " << len << " rep " << rep << " i " << i;
        if (cand_fn && !bad) {
          size_t k = 0;
          for (size_t i = b0; i < b1; i++) {
            if (!want[i]) continue;
            ASSERT_EQ(cand[k++], uint16_t(i - b0)) << name << " b0 " << b0 << " len " << len << " i " << i;
          }
          ASSERT_EQ(k, size_t(hits));
        }
      }
    }
  }
}

TEST(Ops, EqualScalarLengthPassSimdCopiesMatchTheContract) {
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "no AVX2: the portable pass is tested through the op";
  check_len_eq<int32_t, uint32_t>(lm_o32_len_eq_avx2, "o32 avx2");
  check_len_eq<int64_t, uint64_t>(lm_o64_len_eq_avx2, "o64 avx2");
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq")) {
    check_len_eq<int32_t, uint32_t>(nullptr, "o32 cand avx512", lm_o32_len_eq_cand_avx512);
    check_len_eq<int64_t, uint64_t>(nullptr, "o64 cand avx512", lm_o64_len_eq_cand_avx512);
  }
}

// lm_views_eq_pass1_avx512 (the first pass of lm_views_equal, 16 pairs a step) against the
// contract written out here: per pair 0 (length or prefix differ), 1 / 0 for an inline pair as
// its other 8 bytes agree, 2 for a long pair with length and prefix equal; the number of 2s; and
// *pad non-zero exactly when an inline view (either side) has a non-zero byte at or past its
// length.  Random pairs of every length class, pairs differing in one chosen byte, long pairs
// whose views are identical (their payloads decide later), garbage in one padding byte.
TEST(OpsViewsEqual, Avx512FirstPassMatchesTheContract) {
  if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")))
    GTEST_SKIP() << "no AVX-512: the portable pass is tested through lm_views_equal";
  std::mt19937_64 rng(77);
  const uint32_t lens[] = {0, 1, 3, 4, 5, 8, 9, 11, 12, 13, 16, 40, 300};
  for (int round = 0; round < 400; round++) {
    const size_t n = size_t(rng() % 70);
    std::vector<lm_string_view> a(n), b(n);
    std::vector<uint8_t> want(n), out(n + 1, 0xEE);
    size_t want_longs = 0;
    bool want_pad = false;
    for (size_t i = 0; i < n; i++) {
      const uint32_t la = lens[rng() % 13];
      uint8_t bytes[300];
      for (auto &c : bytes) c = uint8_t('a' + rng() % 3);
      lm_sv_make(&a[i], bytes, la, uint32_t(rng() % 3), uint32_t(rng() % 5000));
      b[i] = a[i];
      switch (rng() % 5) {
        case 0: break;                                                          // identical views
        case 1: lm_sv_make(&b[i], bytes, lens[rng() % 13], uint32_t(rng() % 3), 7); break;  // any other
        case 2: reinterpret_cast<uint8_t *>(&b[i])[4 + rng() % 12] ^= 1; break;  // one byte of 4..15
        case 3: reinterpret_cast<uint8_t *>(&b[i])[rng() % 4] ^= uint8_t(1 + rng() % 255); break;  // length
        default: {                                                              // the same bytes elsewhere
          lm_sv_make(&b[i], bytes, la, uint32_t(rng() % 3), uint32_t(rng() % 5000));
        }
      }
      if (rng() % 23 == 0) {  // garbage in a padding byte (or none to put it in)
        lm_string_view &v = rng() % 2 ? a[i] : b[i];
        if (v.len < LM_INLINE_MAX) reinterpret_cast<uint8_t *>(&v)[4 + v.len + rng() % (LM_INLINE_MAX - v.len)] = 0x5A;
      }
      const uint8_t *pa = reinterpret_cast<const uint8_t *>(&a[i]), *pb = reinterpret_cast<const uint8_t *>(&b[i]);
      const bool head = std::memcmp(pa, pb, 8) == 0, tail = std::memcmp(pa + 8, pb + 8, 8) == 0;
      const bool lng = a[i].len > LM_INLINE_MAX;
      want[i] = uint8_t(!head ? 0 : lng ? 2 : tail ? 1 : 0);
      for (const lm_string_view *v : {&a[i], &b[i]})
        if (v->len < LM_INLINE_MAX)
          for (uint32_t j = v->len; j < LM_INLINE_MAX; j++)
            if (reinterpret_cast<const uint8_t *>(v)[4 + j]) want_pad |= i < n - n % 16;
      if (i < n - n % 16) want_longs += want[i] == 2;
    }
    size_t longs = 5;
    uint64_t pad = 0;
    const size_t done = lm_views_eq_pass1_avx512(a.data(), b.data(), out.data(), n, &longs, &pad);
    ASSERT_EQ(done, n - n % 16) << round;
    ASSERT_EQ(longs, 5 + want_longs) << round;
    ASSERT_EQ(pad != 0, want_pad) << round;
    for (size_t i = 0; i < done; i++) ASSERT_EQ(out[i], want[i]) << "round " << round << " pair " << i;
    for (size_t i = done; i <= n; i++) ASSERT_EQ(out[i], 0xEE) << "written past the pass: " << i;
  }
}
#endif

// lm_views_equal through whichever first pass this CPU runs (and its remainder, n % 16 pairs, in
// portable code) against std::string ==: random strings of every length class, a's in buffer 0
// and b's in buffer 1 of the same payload list, some long pairs of b pointing at a's bytes (one
// buffer, one offset: equal unread); long pairs whose views are identical but whose payloads
// differ; and a non-zero padding byte at every position of 40 pairs (LM_ECORRUPT wherever it is).
TEST(OpsViewsEqual, MatchesStringsAndRejectsPaddingAnywhere) {
  std::mt19937_64 rng(78);
  for (int round = 0; round < 60; round++) {
    const size_t n = 1 + size_t(rng() % 300);
    std::vector<std::string> sa(n), sb(n);
    for (size_t i = 0; i < n; i++) {
      const size_t len = rng() % 4 == 0 ? 13 + rng() % 60 : rng() % 16;
      for (size_t k = 0; k < len; k++) sa[i] += char('a' + rng() % 2);
      sb[i] = sa[i];
      if (rng() % 3 == 0 && len) sb[i][rng() % len] ^= 1;
      if (rng() % 7 == 0) sb[i] = sa[(i + 1) % n];
    }
    std::string pa_bytes, pb_bytes;
    for (size_t i = 0; i < n; i++) {
      pa_bytes += sa[i];
      pb_bytes += sb[i];
    }
    std::vector<lm_string_view> va(n), vb(n);
    size_t oa = 0, ob = 0;
    for (size_t i = 0; i < n; i++) {
      lm_sv_make(&va[i], reinterpret_cast<const uint8_t *>(pa_bytes.data()) + oa, uint32_t(sa[i].size()), 0,
                 uint32_t(oa));
      lm_sv_make(&vb[i], reinterpret_cast<const uint8_t *>(pb_bytes.data()) + ob, uint32_t(sb[i].size()), 1,
                 uint32_t(ob));
      if (sa[i] == sb[i] && sa[i].size() > LM_INLINE_MAX && rng() % 2) vb[i] = va[i];  // a's bytes
      oa += sa[i].size();
      ob += sb[i].size();
    }
    const uint8_t *d[2] = {reinterpret_cast<const uint8_t *>(pa_bytes.data()),
                           reinterpret_cast<const uint8_t *>(pb_bytes.data())};
    const size_t z[2] = {pa_bytes.size(), pb_bytes.size()};
    const lm_payloads p = {d, z, 2};
    std::vector<uint8_t> out(n);
    ASSERT_EQ(lm_views_equal(va.data(), &p, vb.data(), &p, n, out.data(), nullptr), LM_OK) << round;
    for (size_t i = 0; i < n; i++) ASSERT_EQ(out[i], sa[i] == sb[i] ? 1 : 0) << "round " << round << " pair " << i;
  }
  // identical long views, two payloads with different bytes: the payloads decide
  const std::string x = "abcdefghijklmnopqrstuvwxyz", y = "abcdEFGHIJKLMNOPQRSTUVWXYZ";
  std::vector<lm_string_view> v(40);
  for (auto &e : v) lm_sv_make(&e, reinterpret_cast<const uint8_t *>(x.data()), uint32_t(x.size()), 0, 0);
  const uint8_t *dx[1] = {reinterpret_cast<const uint8_t *>(x.data())}, *dy[1] = {reinterpret_cast<const uint8_t *>(y.data())};
  const size_t zx[1] = {x.size()};
  const lm_payloads px = {dx, zx, 1}, py = {dy, zx, 1};
  std::vector<uint8_t> out(40);
  ASSERT_EQ(lm_views_equal(v.data(), &px, v.data(), &py, 40, out.data(), nullptr), LM_OK);
  for (size_t i = 0; i < 40; i++) ASSERT_EQ(out[i], 0) << i;
  ASSERT_EQ(lm_views_equal(v.data(), &px, v.data(), &px, 40, out.data(), nullptr), LM_OK);
  for (size_t i = 0; i < 40; i++) ASSERT_EQ(out[i], 1) << i;
  // a non-zero padding byte in any pair, any position, either side: LM_ECORRUPT
  std::vector<lm_string_view> w(40);
  for (size_t i = 0; i < 40; i++) lm_sv_make(&w[i], reinterpret_cast<const uint8_t *>("abcdefgh"), uint32_t(i % 9), 0, 0);
  for (size_t i = 0; i < 40; i++)
    for (uint32_t j = w[i].len; j < LM_INLINE_MAX; j++)
      for (int side = 0; side < 2; side++) {
        std::vector<lm_string_view> a = w, b = w;
        reinterpret_cast<uint8_t *>(side ? &b[i] : &a[i])[4 + j] = 1;
        ASSERT_EQ(lm_views_equal(a.data(), &px, b.data(), &px, 40, out.data(), nullptr), LM_ECORRUPT)
            << "pair " << i << " byte " << j << " side " << side;
      }
}

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

// hash64 on views of short strings (a sampled mean length of at most 32 bytes) cuts the
// work by count instead of reading every view's length first: words with a few long
// strings among them (payload views, some in a cluster the sample may miss), with 2, 3
// and 7 threads and small grains, give the one-thread answers; a bad padding byte in any
// one inline view, wherever the tasks fall, is still LM_ECORRUPT.
TEST(OpsEqual, ShortStringsHashCutByCountGiveTheOneThreadAnswers) {
  std::mt19937_64 rng(29);
  const size_t n = 20000;
  std::vector<std::string> a(n);
  for (size_t i = 0; i < n; i++) {
    const bool cluster = i >= 12000 && i < 12030;  // 30 long ones side by side
    const size_t len = cluster ? 3000 + rng() % 3000 : rng() % 50 == 0 ? 13 + rng() % 300 : rng() % 13;
    a[i] = random_bytes(rng, len, 5);
  }
  std::vector<int32_t> oa;
  GuardedPayload ga(pack(a, oa));
  uint64_t bytes = 0;
  for (const auto &s : a) bytes += s.size();
  ASSERT_LE(bytes, 32 * n);  // the sample's mean: short strings (the count cut)
  std::vector<lm_string_view> views(n);
  ASSERT_EQ(lm_views_from_offsets32(oa.data(), n, ga.data, ga.len, 0, views.data(), nullptr), LM_OK);
  const uint8_t *bufs[1] = {ga.data};
  const size_t sizes[1] = {ga.len};
  const lm_payloads pl = {bufs, sizes, 1};
  std::vector<uint64_t> h1(n);
  lm_exec one{1, 0};
  ASSERT_EQ(lm_o32_hash64(oa.data(), n, ga.data, 11, h1.data(), &one), LM_OK);
  for (int threads : {2, 3, 7}) {
    for (size_t grain : {size_t(1), size_t(100), size_t(0)}) {
      lm_exec e{threads, grain};
      std::vector<uint64_t> hv(n, 0);
      ASSERT_EQ(lm_views_hash64(views.data(), n, &pl, 11, hv.data(), &e), LM_OK);
      for (size_t i = 0; i < n; i++) ASSERT_EQ(hv[i], h1[i]) << threads << " " << grain << " " << i;
    }
  }
  // a non-zero padding byte of one inline view (length < 12) at spread positions
  for (size_t at : {size_t(0), size_t(4999), size_t(10000), size_t(12015), n - 1}) {
    size_t i = at;
    while (a[i].size() >= 12) i = (i + 1) % n;
    std::vector<lm_string_view> bad(views);
    reinterpret_cast<uint8_t *>(&bad[i])[4 + 11] = 0x5a;  // the last inline byte: padding
    for (int threads : {1, 2, 7}) {
      lm_exec e{threads, 1};
      std::vector<uint64_t> hv(n, 0);
      EXPECT_EQ(lm_views_hash64(bad.data(), n, &pl, 11, hv.data(), &e), LM_ECORRUPT) << i << " " << threads;
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

// Documents (128 B - 3 KB): the pairs of different lengths have their bytes touched where
// lm_eq_touch_on (AMD CPUs; forced here both ways with lm_eq_set_touch: ops_internal.h lm_eq_touch /
// lm_eq_touch_read, prefetches in the offsets kernel, loads in the views kernel) or are skipped unread;
// no read may leave a string: payloads end right before an unmapped page (an over-read faults, and
// AddressSanitizer sees the loads), the last string of each is long and of another length than its
// partner.  Answers against std::string ==, every other pair of another length, the others equal or
// one byte apart; a run of short strings in the middle; int32 and int64 offsets; views; 1 and 2 threads.
// A long view pointing outside its buffer in a pair whose lengths differ is decided by the views, not
// read (no error).
// lm_views_equal where long pairs are many (pass 2 in order: with AVX-512 the bytes after the
// prefix compared by masked 64-byte loads, memcmp past 128 of them; blocks of LM_VEQ_BLOCK pairs)
// against std::string comparison: 2500 pairs (blocks of 1024 and a tail), lengths around the
// masked loads' edges (4 + 64, 4 + 128) and random ones up to 400, a tenth inline, pairs equal or
// differing at byte 4, 67, 68, 131, 132 or the last, in length or in the prefix; both payloads
// ending at a guard page; one tensor against itself (the same bytes: 1 unread); a pair whose
// lengths and prefixes agree pointing past its buffer: LM_ERANGE; with the touch on and off.
TEST(OpsViewsEqual, DenseLongPairsMatchStringsAtEveryEdge) {
  std::mt19937_64 rng(2026);
  const size_t n = 2500;
  const size_t lens[] = {13, 14, 67, 68, 69, 131, 132, 133, 200, 300};
  std::vector<std::string> sa(n), sb(n);
  for (size_t i = 0; i < n; i++) {
    const size_t len = rng() % 10 == 0 ? rng() % 13 : rng() % 2 ? lens[rng() % 10] : 13 + rng() % 388;
    for (size_t k = 0; k < len; k++) sa[i] += char('a' + rng() % 3);
    sb[i] = sa[i];
    const int kind = int(rng() % 5);
    if (kind == 1 && len > 4) {
      const size_t at[] = {4, 67, 68, 131, 132, len - 1};
      size_t j = at[rng() % 6];
      if (j >= len) j = len - 1;
      sb[i][j] = char(sb[i][j] ^ 1);
    } else if (kind == 2) {
      sb[i] += 'x';
    } else if (kind == 3 && len) {
      sb[i][0] = char(sb[i][0] ^ 2);
    }
  }
  std::vector<int32_t> oa, ob;
  GuardedPayload ga(pack(sa, oa)), gb(pack(sb, ob));
  std::vector<lm_string_view> va(n), vb(n);
  for (size_t i = 0; i < n; i++) {
    lm_sv_make(&va[i], ga.data + oa[i], uint32_t(sa[i].size()), 0, uint32_t(oa[i]));
    lm_sv_make(&vb[i], gb.data + ob[i], uint32_t(sb[i].size()), 1, uint32_t(ob[i]));
  }
  const uint8_t *d[2] = {ga.data, gb.data};
  const size_t z[2] = {ga.len, gb.len};
  const lm_payloads p = {d, z, 2};
  struct Reset {
    ~Reset() { lm_eq_set_touch(-1); }
  } reset;
  for (int touch : {0, 1}) {
    lm_eq_set_touch(touch);
    for (int threads : {1, 2}) {
      lm_exec e = {threads, 64};
      std::vector<uint8_t> out(n + 1, 9);
      ASSERT_EQ(lm_views_equal(va.data(), &p, vb.data(), &p, n, out.data(), &e), LM_OK);
      size_t equal = 0;
      for (size_t i = 0; i < n; i++) {
        equal += sa[i] == sb[i];
        ASSERT_EQ(out[i], sa[i] == sb[i] ? 1 : 0) << "pair " << i << " lengths " << sa[i].size() << "/"
                                                  << sb[i].size() << " threads " << threads << " touch " << touch;
      }
      ASSERT_EQ(out[n], 9);
      ASSERT_GT(equal, n / 4);
      std::fill(out.begin(), out.end(), 9);
      ASSERT_EQ(lm_views_equal(va.data(), &p, va.data(), &p, n, out.data(), &e), LM_OK);
      for (size_t i = 0; i < n; i++) ASSERT_EQ(out[i], 1) << "itself, pair " << i;
    }
    // an equal long pair (lengths and prefixes agree) whose right view points past its buffer
    size_t k = n / 2;
    while (!(sa[k] == sb[k] && sa[k].size() > 12)) k++;
    std::vector<lm_string_view> bad = vb;
    lm_sv_make(&bad[k], gb.data + ob[k], uint32_t(sb[k].size()), 1, uint32_t(gb.len - sb[k].size() + 1));
    std::vector<uint8_t> out(n, 9);
    lm_exec one = {1, 0};
    ASSERT_EQ(lm_views_equal(va.data(), &p, bad.data(), &p, n, out.data(), &one), LM_ERANGE) << "pair " << k;
  }
}

TEST(OpsEqual, DocumentsTouchedOrSkippedPairsStayInsideTheirStrings) {
  std::mt19937_64 rng(91);
  const size_t n = 700;
  std::vector<std::string> sa(n), sb(n);
  for (size_t i = 0; i < n; i++) {
    const bool short_run = i >= 300 && i < 400;
    const size_t len = short_run ? rng() % 40 : 128 + rng() % 2900;
    for (size_t k = 0; k < len; k++) sa[i] += char('a' + rng() % 26);
    if (i % 2 || i == n - 1) {
      sb[i] = sa[i] + std::string(1 + rng() % 300, 'q');
      if (rng() % 2) sb[i].resize(sa[i].size() > 1 ? sa[i].size() - 1 : 0);
    } else {
      sb[i] = sa[i];
      if (rng() % 3 == 0 && len) sb[i][rng() % len] ^= 1;
    }
  }
  std::vector<int32_t> oa32, ob32;
  std::vector<int64_t> oa64, ob64;
  GuardedPayload ga(pack(sa, oa32)), gb(pack(sb, ob32));
  pack(sa, oa64);
  pack(sb, ob64);
  struct Reset {
    ~Reset() { lm_eq_set_touch(-1); }
  } reset;
  for (int touch : {0, 1})
  for (int threads : {1, 2}) {
    lm_eq_set_touch(touch);
    ASSERT_EQ(lm_eq_touch_on(), touch);
    lm_exec e = {threads, 16};
    std::vector<uint8_t> o32(n, 9), o64(n, 9), ov(n, 9);
    ASSERT_EQ(lm_o32_equal_checked(oa32.data(), ga.data, ga.len, ob32.data(), gb.data, gb.len, n, o32.data(), &e), LM_OK);
    ASSERT_EQ(lm_o64_equal_checked(oa64.data(), ga.data, ga.len, ob64.data(), gb.data, gb.len, n, o64.data(), &e), LM_OK);
    std::vector<lm_string_view> va(n), vb(n);
    for (size_t i = 0; i < n; i++) {
      lm_sv_make(&va[i], ga.data + oa32[i], uint32_t(sa[i].size()), 0, uint32_t(oa32[i]));
      lm_sv_make(&vb[i], gb.data + ob32[i], uint32_t(sb[i].size()), 1, uint32_t(ob32[i]));
    }
    const uint8_t *d[2] = {ga.data, gb.data};
    const size_t z[2] = {ga.len, gb.len};
    const lm_payloads p = {d, z, 2};
    ASSERT_EQ(lm_views_equal(va.data(), &p, vb.data(), &p, n, ov.data(), &e), LM_OK);
    size_t equal = 0;
    for (size_t i = 0; i < n; i++) {
      const uint8_t want = sa[i] == sb[i];
      equal += want;
      ASSERT_EQ(o32[i], want) << "int32, pair " << i << ", threads " << threads << ", touch " << touch;
      ASSERT_EQ(o64[i], want) << "int64, pair " << i << ", threads " << threads << ", touch " << touch;
      ASSERT_EQ(ov[i], want) << "views, pair " << i << ", threads " << threads << ", touch " << touch;
    }
    ASSERT_GT(equal, 100u);
    // pair 1 (lengths differ, after a long equal pair: touched when touching) pointing past its buffer: decided unread
    std::vector<lm_string_view> bad = vb;
    lm_sv_make(&bad[1], gb.data + ob32[1], uint32_t(sb[1].size()), 1, uint32_t(gb.len));
    std::vector<uint8_t> ob(n, 9);
    ASSERT_EQ(lm_views_equal(va.data(), &p, bad.data(), &p, n, ob.data(), &e), LM_OK);
    ASSERT_EQ(ob[1], 0);
  }
}
