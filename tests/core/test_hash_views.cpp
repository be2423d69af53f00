// hash64 on the views layout: lm_views_hash64 (and, where the CPU has AVX-512, the
// vector kernel lm_hash64_views_avx512 that it uses for inline views) must give
// XXH3_64bits_withSeed of every string bit for bit: every length 0..300 (each XXH3
// class, inline and payload views), random seeds (incl. 0 and 2^64-1), every count
// 1..40 (the tail of a group of 8), views that end right before an unmapped page
// (masked loads must not read past view n-1), padding bytes of inline views at every
// position (LM_ECORRUPT), and block edges with 1 and 2 threads; and hash64 on the offsets
// layout (which uses the same kernel) on payloads ending at an unmapped page.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

extern "C" {
#include "luminamoon/string_tensor.h"
#include "../../core/src/hash_internal.h"
}

namespace {

// One readable page followed by a PROT_NONE page: `end` is the first byte a read must not reach.
struct PageBeforeHole {
  size_t page = size_t(sysconf(_SC_PAGESIZE));
  uint8_t *m = static_cast<uint8_t *>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  bool ok = m != MAP_FAILED && mprotect(m + page, page, PROT_NONE) == 0;
  uint8_t *end() const { return m + page; }
  ~PageBeforeHole() {
    if (m != MAP_FAILED) munmap(m, 2 * page);
  }
};

// views of `items` over one payload buffer holding every string (inline ones too)
struct Views {
  std::vector<uint8_t> payload;
  std::vector<lm_string_view> v;
  const uint8_t *data[1];
  size_t size[1];
  lm_payloads p;
  explicit Views(const std::vector<std::string> &items) {
    for (const auto &s : items) payload.insert(payload.end(), s.begin(), s.end());
    payload.push_back(0);  // never empty
    v.resize(items.size());
    size_t off = 0;
    for (size_t i = 0; i < items.size(); i++) {
      EXPECT_EQ(lm_sv_make(&v[i], payload.data() + off, uint32_t(items[i].size()), 0, uint32_t(off)), 0);
      off += items[i].size();
    }
    data[0] = payload.data();
    size[0] = payload.size();
    p = {data, size, 1};
  }
};

std::string random_string(std::mt19937_64 &rng, size_t len) {
  std::string s(len, '\0');
  for (auto &c : s) c = char(rng() % 4 == 0 ? 0 : rng());  // zero bytes too
  return s;
}

uint64_t want(const std::string &s, uint64_t seed) { return XXH3_64bits_withSeed(s.data(), s.size(), seed); }

TEST(HashViews, EveryLength0To300RandomSeedsAgainstLibxxhash) {
  std::mt19937_64 rng(5);
  std::vector<std::string> items;
  for (int rep = 0; rep < 8; rep++)
    for (size_t len = 0; len <= 300; len++) items.push_back(random_string(rng, len));
  std::shuffle(items.begin(), items.end(), rng);
  Views w(items);
  for (uint64_t seed : {uint64_t(0), ~uint64_t(0), uint64_t(1) << 63, uint64_t(rng()), uint64_t(rng())}) {
    for (int threads : {1, 2}) {
      std::vector<uint64_t> h(items.size(), 0);
      lm_exec ex{threads, 1};
      ASSERT_EQ(lm_views_hash64(w.v.data(), items.size(), &w.p, seed, h.data(), &ex), LM_OK);
      for (size_t i = 0; i < items.size(); i++)
        ASSERT_EQ(h[i], want(items[i], seed)) << "len " << items[i].size() << " seed " << seed;
    }
  }
}

TEST(HashViews, ShortWordsEveryCountAndBlockEdge) {
  std::mt19937_64 rng(6);
  for (size_t n : {size_t(1), size_t(2), size_t(7), size_t(8), size_t(9), size_t(15), size_t(17), size_t(40),
                   size_t(255), size_t(256), size_t(257), size_t(1000), size_t(5000)}) {
    std::vector<std::string> items;
    for (size_t i = 0; i < n; i++) items.push_back(random_string(rng, rng() % 4 ? rng() % 13 : rng() % 40));
    Views w(items);
    const uint64_t seed = rng();
    std::vector<uint64_t> h(n, 0);
    ASSERT_EQ(lm_views_hash64(w.v.data(), n, &w.p, seed, h.data(), nullptr), LM_OK);
    for (size_t i = 0; i < n; i++) ASSERT_EQ(h[i], want(items[i], seed)) << "n " << n << " i " << i;
  }
}

// Views placed so that the last one ends right before an unmapped page, counts 1..40,
// every length 0..16 in every lane position: lm_views_hash64 and (where the CPU has
// AVX-512) the kernel itself, which must list exactly the views of more than 12 bytes.
TEST(HashViews, ViewsEndingAtAnUnmappedPage) {
  PageBeforeHole g;
  ASSERT_TRUE(g.ok);
  std::mt19937_64 rng(7);
  for (size_t n = 1; n <= 40; n++) {
    for (int rep = 0; rep < 20; rep++) {
      std::vector<std::string> items(n);
      for (size_t i = 0; i < n; i++) items[i] = random_string(rng, (i + size_t(rep)) % 17);
      Views w(items);
      lm_string_view *v = reinterpret_cast<lm_string_view *>(g.end() - 16 * n);
      std::memcpy(static_cast<void *>(v), w.v.data(), 16 * n);
      const uint64_t seed = rep == 0 ? 0 : rng();
      std::vector<uint64_t> h(n, 0);
      ASSERT_EQ(lm_views_hash64(v, n, &w.p, seed, h.data(), nullptr), LM_OK);
      for (size_t i = 0; i < n; i++) ASSERT_EQ(h[i], want(items[i], seed)) << "n " << n << " i " << i;
#if LM_HASH_HAVE_AVX512
      if (lm_hash_uses_avx512()) {
        std::vector<uint64_t> out(n, 0x5555);
        std::vector<uint8_t> rest(n + 8);
        uint64_t pad = 0;
        const size_t nr = lm_hash64_views_avx512(v, n, seed, out.data(), rest.data(), &pad, nullptr);
        EXPECT_EQ(pad, 0u);
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
          if (items[i].size() <= 12) {
            ASSERT_EQ(out[i], want(items[i], seed)) << "n " << n << " i " << i << " len " << items[i].size();
          } else {
            ASSERT_LT(k, nr);
            ASSERT_EQ(rest[k++], i);
          }
        }
        ASSERT_EQ(k, nr);
        // the listed long strings passed back as `pending`: hashed during the next call
        lm_hash_longs l;
        l.n = 0;
        l.out = out.data();
        for (size_t j = 0; j < nr; j++) {
          l.p[l.n] = w.payload.data() + lm_sv_offset(&w.v[rest[j]]);
          l.len[l.n] = uint32_t(items[rest[j]].size());
          l.i[l.n++] = rest[j];
        }
        std::vector<uint64_t> out2(n, 0);
        ASSERT_EQ(lm_hash64_views_avx512(v, n, seed, out2.data(), rest.data(), &pad, &l), nr);
        EXPECT_EQ(l.n, 0u);
        EXPECT_EQ(pad, 0u);
        for (size_t i = 0; i < n; i++) {
          ASSERT_EQ(out[i], want(items[i], seed)) << "pending n " << n << " i " << i << " len " << items[i].size();
          if (items[i].size() <= 12) {
            ASSERT_EQ(out2[i], out[i]);
          }
        }
      }
#endif
    }
  }
}

TEST(HashViews, NonZeroPaddingAtEveryPositionIsRefused) {
  std::mt19937_64 rng(8);
  for (size_t len = 0; len <= 12; len++) {
    for (size_t pos = len; pos < 12; pos++) {
      for (size_t at : {size_t(0), size_t(5), size_t(8), size_t(19)}) {
        std::vector<std::string> items;
        for (size_t i = 0; i < 20; i++) items.push_back(random_string(rng, i == at ? len : rng() % 30));
        Views w(items);
        std::vector<uint64_t> h(items.size());
        ASSERT_EQ(lm_views_hash64(w.v.data(), items.size(), &w.p, 3, h.data(), nullptr), LM_OK);
        reinterpret_cast<uint8_t *>(&w.v[at])[4 + pos] = uint8_t(1 + rng() % 255);  // inline byte pos
        EXPECT_EQ(lm_views_hash64(w.v.data(), items.size(), &w.p, 3, h.data(), nullptr), LM_ECORRUPT)
            << "len " << len << " pos " << pos << " at " << at;
      }
    }
  }
}

// The offsets layout (hash64 on int32 / int64 offsets, which reads each short string's
// first 8 bytes in one load where they lie inside the payload): payloads of short strings
// that end right before an unmapped page, every count 1..40, every length 0..17.
TEST(HashViews, OffsetsPayloadEndingAtAnUnmappedPage) {
  PageBeforeHole g;
  ASSERT_TRUE(g.ok);
  std::mt19937_64 rng(9);
  for (size_t n = 1; n <= 40; n++) {
    for (int rep = 0; rep < 18; rep++) {
      std::vector<std::string> items(n);
      size_t total = 0;
      for (size_t i = 0; i < n; i++) {
        items[i] = random_string(rng, (i + size_t(rep)) % 18);
        total += items[i].size();
      }
      uint8_t *data = g.end() - total;
      std::vector<int32_t> o32(n + 1, 0);
      std::vector<int64_t> o64(n + 1, 0);
      for (size_t i = 0; i < n; i++) {
        std::memcpy(data + o32[i], items[i].data(), items[i].size());
        o32[i + 1] = o32[i] + int32_t(items[i].size());
        o64[i + 1] = o32[i + 1];
      }
      const uint64_t seed = rep == 0 ? 0 : rng();
      std::vector<uint64_t> h(n, 0), g(n, 0);
      ASSERT_EQ(lm_o32_hash64_checked(o32.data(), n, data, total, seed, h.data(), nullptr), LM_OK);
      ASSERT_EQ(lm_o64_hash64_checked(o64.data(), n, data, total, seed, g.data(), nullptr), LM_OK);
      for (size_t i = 0; i < n; i++) {
        ASSERT_EQ(h[i], want(items[i], seed)) << "n " << n << " i " << i << " len " << items[i].size();
        ASSERT_EQ(g[i], h[i]);
      }
    }
  }
}

}  // namespace
