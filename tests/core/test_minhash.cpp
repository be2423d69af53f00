// GoogleTest for core/src/minhash.c (issue 12).  Expected values are derived independently:
// MT19937 from the C++ standard library's std::mt19937, numpy's masked rejection sampling
// re-implemented here on top of it, the Mersenne modulus with the % operator, shingle hashes
// with XXH64/XXH32 of strings built here, signatures with a naive loop.  (Equality with numpy
// and datatrove themselves is tested in tests/python/test_minhash.py.)
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

extern "C" {
#include "luminamoon/minhash.h"
}

namespace {

const uint64_t P61 = (uint64_t(1) << 61) - 1;

struct MH {
  lm_minhash *m = nullptr;
  lm_minhash_scratch *s = nullptr;
  explicit MH(lm_minhash_params p) {
    EXPECT_EQ(lm_minhash_create(&p, &m), LM_OK);
    EXPECT_EQ(lm_minhash_scratch_create(&s), LM_OK);
  }
  MH() : MH(defaults()) {}
  ~MH() {
    lm_minhash_scratch_destroy(s);
    lm_minhash_destroy(m);
  }
  static lm_minhash_params defaults() {
    lm_minhash_params p;
    lm_minhash_params_default(&p);
    return p;
  }
  std::vector<uint64_t> sig(const std::string &t, size_t *ns = nullptr, lm_status *st = nullptr) {
    std::vector<uint64_t> out(lm_minhash_num_hashes(m));
    lm_status r = lm_minhash_doc(m, s, reinterpret_cast<const uint8_t *>(t.data()), t.size(), out.data(), ns);
    if (st) *st = r;
    else EXPECT_EQ(r, LM_OK);
    return out;
  }
  std::string simplify(const std::string &t) {
    const uint8_t *o;
    size_t ol;
    EXPECT_EQ(lm_minhash_simplify(s, reinterpret_cast<const uint8_t *>(t.data()), t.size(), &o, &ol), LM_OK);
    return std::string(reinterpret_cast<const char *>(o), ol);
  }
};

// numpy's legacy masked bounded draw, re-derived on std::mt19937.
struct NumpyLike {
  std::mt19937 g;
  explicit NumpyLike(uint32_t seed) : g(seed) {}
  uint64_t next64() {
    uint64_t hi = g();
    return (hi << 32) | uint64_t(g());
  }
  uint64_t randint(uint64_t low, uint64_t high) {  // [low, high)
    uint64_t rng = high - 1 - low;
    uint64_t mask = 1;
    while (mask < rng) mask = (mask << 1) | 1;
    if (rng <= 0xFFFFFFFFu) {
      uint32_t v;
      do v = uint32_t(g()) & uint32_t(mask); while (v > rng);
      return low + v;
    }
    uint64_t v;
    do v = next64() & mask; while (v > rng);
    return low + v;
  }
};

std::vector<uint64_t> naive_sig(const std::vector<uint64_t> &a, const std::vector<uint64_t> &b,
                                const std::vector<uint64_t> &h, int precision) {
  std::vector<uint64_t> sig(a.size(), UINT64_MAX);
  for (uint64_t x : h)
    for (size_t j = 0; j < a.size(); j++) {
      uint64_t v = uint64_t(x * a[j] + b[j]) % P61;
      if (precision == 32) v &= 0xFFFFFFFFu;
      if (v < sig[j]) sig[j] = v;
    }
  return sig;
}

std::vector<uint64_t> params_a(const MH &mh) {
  const uint64_t *a = lm_minhash_a(mh.m);
  return std::vector<uint64_t>(a, a + lm_minhash_num_hashes(mh.m));
}
std::vector<uint64_t> params_b(const MH &mh) {
  const uint64_t *b = lm_minhash_b(mh.m);
  return std::vector<uint64_t>(b, b + lm_minhash_num_hashes(mh.m));
}

}  // namespace

TEST(MinHash, Mt19937MatchesStdMt19937) {
  for (uint32_t seed : {0u, 1u, 42u, 5489u, 0xFFFFFFFFu}) {
    std::vector<uint32_t> got(2000);
    ASSERT_EQ(lm_mt19937_outputs(seed, got.size(), got.data()), LM_OK);
    std::mt19937 ref(seed);
    for (size_t i = 0; i < got.size(); i++) ASSERT_EQ(got[i], uint32_t(ref())) << "seed " << seed << " i " << i;
  }
  // the standard's own check value: the 10000th output of the default-seeded engine
  std::vector<uint32_t> v(10000);
  ASSERT_EQ(lm_mt19937_outputs(5489u, v.size(), v.data()), LM_OK);
  EXPECT_EQ(v[9999], 4123659995u);
}

TEST(MinHash, RandintMatchesMaskedRejectionOnStdMt19937) {
  struct Case {
    uint64_t lo, hi;
  } cases[] = {{1, P61}, {0, P61}, {0, 10}, {5, 6}, {0, uint64_t(1) << 32}, {3, 1000000007},
               {0, UINT64_MAX}, {0, (uint64_t(1) << 33) + 5}};
  for (const Case &c : cases)
    for (uint32_t seed : {1u, 7u, 123456u}) {
      std::vector<uint64_t> got(300);
      ASSERT_EQ(lm_randint_uint64_legacy(seed, c.lo, c.hi, got.size(), got.data()), LM_OK);
      NumpyLike ref(seed);
      for (size_t i = 0; i < got.size(); i++) {
        ASSERT_EQ(got[i], ref.randint(c.lo, c.hi)) << c.lo << ".." << c.hi << " seed " << seed << " i " << i;
        ASSERT_GE(got[i], c.lo);
        ASSERT_LT(got[i], c.hi);
      }
    }
  uint64_t x;
  EXPECT_EQ(lm_randint_uint64_legacy(1, 5, 5, 1, &x), LM_EINVAL);
  EXPECT_EQ(lm_randint_uint64_legacy(1, 0, 5, 1, nullptr), LM_EINVAL);
}

TEST(MinHash, ParamsAreTwoConsecutiveDraws) {
  for (uint64_t seed : {uint64_t(0), uint64_t(1), uint64_t(99), uint64_t(0xFFFFFFFFu)}) {
    lm_minhash_params p = MH::defaults();
    p.seed = seed;
    MH mh(p);
    NumpyLike ref{uint32_t(seed)};
    std::vector<uint64_t> a = params_a(mh), b = params_b(mh);
    ASSERT_EQ(a.size(), 112u);
    for (size_t j = 0; j < a.size(); j++) ASSERT_EQ(a[j], ref.randint(1, P61));
    for (size_t j = 0; j < b.size(); j++) ASSERT_EQ(b[j], ref.randint(0, P61));
  }
  lm_minhash_params p = MH::defaults();
  p.seed = uint64_t(1) << 32;
  lm_minhash *m = reinterpret_cast<lm_minhash *>(1);
  EXPECT_EQ(lm_minhash_create(&p, &m), LM_EINVAL);
  EXPECT_EQ(m, nullptr);
}

TEST(MinHash, MersenneModulusWithoutDivision) {
  std::vector<uint64_t> xs = {0, 1, P61 - 1, P61, P61 + 1, 2 * P61 - 1, 2 * P61, 2 * P61 + 1, uint64_t(1) << 61,
                              (uint64_t(1) << 62) - 1, UINT64_MAX, UINT64_MAX - 1, 7 * P61, 7 * P61 + 6,
                              8 * P61 - 1};
  std::mt19937_64 g(3);
  for (int i = 0; i < 200000; i++) xs.push_back(g());
  for (uint64_t x : xs) ASSERT_EQ(lm_mod_mersenne61(x), x % P61) << x;
}

TEST(MinHash, FromHashesEqualsNaiveLoop) {
  std::mt19937_64 g(11);
  for (size_t H : {size_t(1), size_t(15), size_t(16), size_t(17), size_t(112), size_t(200)}) {
    std::vector<uint64_t> a(H), b(H);
    for (size_t j = 0; j < H; j++) {
      a[j] = 1 + g() % (P61 - 1);
      b[j] = g() % P61;
    }
    for (size_t n : {size_t(0), size_t(1), size_t(2), size_t(57)}) {
      std::vector<uint64_t> h(n);
      for (auto &x : h) x = g();
      if (n) h[0] = UINT64_MAX;  // wrap-around of h * a + b
      for (int prec : {64, 32}) {
        std::vector<uint64_t> got(H);
        ASSERT_EQ(lm_minhash_from_hashes(a.data(), b.data(), H, uint32_t(prec), h.data(), n, got.data()), LM_OK);
        EXPECT_EQ(got, naive_sig(a, b, h, prec)) << "H " << H << " n " << n << " prec " << prec;
        if (n == 0) {
          for (uint64_t v : got) EXPECT_EQ(v, LM_MINHASH_EMPTY);
        }
      }
    }
  }
  uint64_t s;
  EXPECT_EQ(lm_minhash_from_hashes(nullptr, nullptr, 1, 64, nullptr, 0, &s), LM_EINVAL);
  uint64_t a = 1, b = 0;
  EXPECT_EQ(lm_minhash_from_hashes(&a, &b, 1, 48, nullptr, 0, &s), LM_EINVAL);
}

TEST(MinHash, ShortDocumentsHaveNoShingles) {
  MH mh;
  for (const char *t : {"", " ", "one", "one two three four", "  ,;  one. two! three? four ", "\n\t"}) {
    size_t ns = 99;
    std::vector<uint64_t> sig = mh.sig(t, &ns);
    EXPECT_EQ(ns, 0u) << t;
    for (uint64_t v : sig) ASSERT_EQ(v, LM_MINHASH_EMPTY) << t;
  }
  // exactly n_grams words: one shingle, the XXH64 of the words joined by one space
  size_t ns = 0;
  std::vector<uint64_t> sig = mh.sig("One,  two; THREE four five", &ns);
  ASSERT_EQ(ns, 1u);
  const std::string sh = "one two three four five";
  EXPECT_EQ(sig, naive_sig(params_a(mh), params_b(mh), {XXH64(sh.data(), sh.size(), 0)}, 64));
}

TEST(MinHash, ShinglesAreHashedNGrams) {
  MH mh;
  const std::string text = "a b c d e f g";
  size_t ns = 0;
  std::vector<uint64_t> sig = mh.sig(text, &ns);
  ASSERT_EQ(ns, 3u);
  std::vector<uint64_t> h;
  for (const char *s : {"a b c d e", "b c d e f", "c d e f g"}) h.push_back(XXH64(s, strlen(s), 0));
  EXPECT_EQ(sig, naive_sig(params_a(mh), params_b(mh), h, 64));

  // precision 32: XXH32 shingles, values masked before the minimum
  lm_minhash_params p = MH::defaults();
  p.precision = 32;
  p.n_grams = 2;
  p.num_buckets = 3;
  p.hashes_per_bucket = 5;
  MH m32(p);
  std::vector<uint64_t> s32 = m32.sig("x y z", &ns);
  ASSERT_EQ(ns, 2u);
  std::vector<uint64_t> h32 = {XXH32("x y", 3, 0), XXH32("y z", 3, 0)};
  EXPECT_EQ(s32, naive_sig(params_a(m32), params_b(m32), h32, 32));
  for (uint64_t v : s32) EXPECT_LE(v, 0xFFFFFFFFu);
}

TEST(MinHash, SimplifyText) {
  MH mh;
  EXPECT_EQ(mh.simplify("  Hello,   World!  "), "hello world");
  // numbers: \p{Nd}+([.,]\p{Nd}+)? -> 0, then punctuation -> space
  EXPECT_EQ(mh.simplify("1,234.5 apples"), "0 0 apples");
  EXPECT_EQ(mh.simplify("v12.3.4-rc1"), "v0 0 rc0");
  EXPECT_EQ(mh.simplify("\xd9\xa3\xd9\xa4"), "0");  // Arabic-Indic digits
  // diacritics removed after NFD; Final_Sigma lowercasing
  EXPECT_EQ(mh.simplify("Caf\xc3\xa9 na\xc3\xafve"), "cafe naive");
  EXPECT_EQ(mh.simplify("\xce\x9f\xce\x94\xce\x9f\xce\xa3 \xce\xa3"), "\xce\xbf\xce\xb4\xce\xbf\xcf\x82 \xcf\x83");
  // U+0130 lowercases to i + U+0307 (Mn, removed)
  EXPECT_EQ(mh.simplify("\xc4\xb0stanbul"), "istanbul");
  // Hangul syllable -> conjoining jamo (U+D55C -> U+1112 U+1161 U+11AB)
  EXPECT_EQ(mh.simplify("\xed\x95\x9c"), "\xe1\x84\x92\xe1\x85\xa1\xe1\x86\xab");
  // a combining mark alone between spaces leaves two spaces (datatrove collapses before NFD)
  EXPECT_EQ(mh.simplify("a \xcc\x81 b"), "a  b");
  // control characters of PUNCTUATION and Unicode whitespace
  EXPECT_EQ(mh.simplify("a\x01" "b\xe2\x80\x83" "c\xc2\x85" "d"), "a b c d");
  EXPECT_EQ(mh.simplify(""), "");
}

TEST(MinHash, InvalidUtf8ReadsAsReplacementCharacters) {
  MH mh;
  const std::string bad = "alpha \xff beta \x80\x80 gamma delta epsilon zeta";
  const std::string rep = "alpha \xef\xbf\xbd beta \xef\xbf\xbd\xef\xbf\xbd gamma delta epsilon zeta";
  size_t n1 = 0, n2 = 0;
  EXPECT_EQ(mh.sig(bad, &n1), mh.sig(rep, &n2));
  EXPECT_EQ(n1, n2);
  EXPECT_GT(n1, 0u);
  // truncated sequences at the end and lone surrogates: defined, no error
  for (const char *t : {"word \xe2\x82", "\xed\xa0\x80 one two three four five", "\xf4\x90\x80\x80", "\xc0\xaf"}) {
    lm_status st;
    mh.sig(t, nullptr, &st);
    EXPECT_EQ(st, LM_OK) << t;
  }
}

TEST(MinHash, BadArguments) {
  MH mh;
  uint64_t sig[112];
  size_t ns;
  EXPECT_EQ(lm_minhash_doc(mh.m, mh.s, nullptr, 0, sig, &ns), LM_OK);
  EXPECT_EQ(ns, 0u);
  EXPECT_EQ(lm_minhash_doc(mh.m, mh.s, nullptr, 3, sig, &ns), LM_EINVAL);
  EXPECT_EQ(lm_minhash_doc(nullptr, mh.s, nullptr, 0, sig, &ns), LM_EINVAL);
  EXPECT_EQ(lm_minhash_doc(mh.m, nullptr, nullptr, 0, sig, &ns), LM_EINVAL);
  EXPECT_EQ(lm_minhash_doc(mh.m, mh.s, nullptr, 0, nullptr, &ns), LM_EINVAL);
  // over the size limit: refused before any byte is read
  const uint8_t one = 'x';
  EXPECT_EQ(lm_minhash_doc(mh.m, mh.s, &one, size_t(LM_MINHASH_MAX_DOC_BYTES) + 1, sig, &ns), LM_ETOOBIG);
  lm_minhash_params p = MH::defaults();
  lm_minhash *m = nullptr;
  for (int k = 0; k < 5; k++) {
    lm_minhash_params q = p;
    if (k == 0) q.n_grams = 0;
    if (k == 1) q.num_buckets = 0;
    if (k == 2) q.hashes_per_bucket = 0;
    if (k == 3) q.precision = 16;
    if (k == 4) q.num_buckets = 70000;
    EXPECT_EQ(lm_minhash_create(&q, &m), LM_EINVAL) << k;
  }
  EXPECT_EQ(lm_minhash_create(nullptr, &m), LM_EINVAL);
  EXPECT_EQ(lm_minhash_create(&p, nullptr), LM_EINVAL);
  EXPECT_EQ(lm_minhash_params_default(nullptr), LM_EINVAL);
  EXPECT_EQ(lm_minhash_num_hashes(nullptr), 0u);
  lm_minhash_destroy(nullptr);
  lm_minhash_scratch_destroy(nullptr);
}

TEST(MinHash, BatchEqualsPerDocumentAndIgnoresThreadCount) {
  MH mh;
  std::string data;
  std::vector<int64_t> off = {0};
  std::mt19937 g(5);
  const char *words[] = {"the", "cat", "sat", "on", "a", "mat", "Über", "naïve", "42", "x.y", "don't", "!"};
  for (int i = 0; i < 300; i++) {
    int nw = int(g() % 30);
    for (int k = 0; k < nw; k++) {
      data += words[g() % 12];
      data += (g() % 5) ? " " : "\n";
    }
    off.push_back(int64_t(data.size()));
  }
  lm_docs docs = {off.data(), reinterpret_cast<const uint8_t *>(data.data()), off.size() - 1, data.size()};
  const size_t H = 112, n = docs.n;
  std::vector<uint64_t> one(n * H), four(n * H);
  std::vector<uint8_t> has(n);
  lm_exec e1 = {1, 0}, e4 = {4, 1};
  ASSERT_EQ(lm_minhash_signatures(mh.m, &docs, one.data(), has.data(), &e1), LM_OK);
  ASSERT_EQ(lm_minhash_signatures(mh.m, &docs, four.data(), nullptr, &e4), LM_OK);
  EXPECT_EQ(one, four);
  for (size_t i = 0; i < n; i++) {
    size_t ns;
    std::vector<uint64_t> s = mh.sig(data.substr(size_t(off[i]), size_t(off[i + 1] - off[i])), &ns);
    ASSERT_TRUE(std::equal(s.begin(), s.end(), one.begin() + long(i * H))) << i;
    ASSERT_EQ(has[i], ns > 0 ? 1 : 0);
  }
  off[3] = off[4] + 1;  // decreasing offsets
  EXPECT_EQ(lm_minhash_signatures(mh.m, &docs, one.data(), nullptr, &e1), LM_EINVAL);
}

extern "C" {
#include "../../core/src/minhash_internal.h"
}

TEST(MinHash, SimdAndPortableImplementationsAgree) {
  std::mt19937_64 g(21);
  for (size_t H : {size_t(8), size_t(13), size_t(32), size_t(112), size_t(120)}) {
    std::vector<uint64_t> a(H), b(H);
    for (size_t j = 0; j < H; j++) {
      a[j] = 1 + g() % (P61 - 1);
      b[j] = g() % P61;
    }
    std::vector<uint64_t> h(333);
    for (auto &x : h) x = g();
    h[5] = 0;
    h[6] = UINT64_MAX;
    for (uint32_t prec : {64u, 32u}) {
      std::vector<uint64_t> s0(H), s1(H);
      ASSERT_EQ(lmh_from_hashes_impl(a.data(), b.data(), H, prec, h.data(), h.size(), s0.data(), 0), LM_OK);
      ASSERT_EQ(lmh_from_hashes_impl(a.data(), b.data(), H, prec, h.data(), h.size(), s1.data(), 1), LM_OK);
      EXPECT_EQ(s0, s1) << "H " << H << " simd " << lmh_have_simd();
      EXPECT_EQ(s0, naive_sig(a, b, h, int(prec)));
    }
  }
}

// LM_NO_AVX512=1 (and LM_NO_AVX2=1, as for the hash and equality kernels) turns the AVX-512
// loop off; the switch is read once per process, so each check runs in a fresh process (a
// death-test child re-executed by gtest) that sets it before the first call.
TEST(MinHashDispatch, NoAvx512SwitchTurnsTheVectorLoopOff) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (const char *var : {"LM_NO_AVX512", "LM_NO_AVX2"}) {
    EXPECT_EXIT(
        {
          setenv(var, "1", 1);
          std::exit(lmh_have_simd() == 0 ? 0 : 3);
        },
        ::testing::ExitedWithCode(0), "")
        << var << "=1 left the AVX-512 loop on";
  }
}
