// hash64 on the offsets layout (ops_offsets_impl.h): one pass reads every offset once and
// checks the block (blocks of long strings then go to lm_hash64_many; blocks of short ones
// are sorted by XXH3's length class, their strings of over 16 bytes hashed in the pass, or
// go to the AVX-512 kernel); the values must be
// XXH3-64 of each string bit for bit (against libxxhash's XXH3_64bits_withSeed) for
// every length class and across block edges, and any bad offset (decreasing, negative,
// past the payload) anywhere in a block must give LM_EINVAL (int32 and int64 offsets,
// 1 and 2 threads).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

extern "C" {
#include "luminamoon/string_tensor.h"
}

namespace {

template <typename Off>
lm_status hash_checked(const std::vector<Off> &off, const std::vector<uint8_t> &data, uint64_t seed,
                       std::vector<uint64_t> &out, int threads);
template <>
lm_status hash_checked<int32_t>(const std::vector<int32_t> &off, const std::vector<uint8_t> &data, uint64_t seed,
                                std::vector<uint64_t> &out, int threads) {
  lm_exec ex{threads, 1};
  return lm_o32_hash64_checked(off.data(), off.size() - 1, data.data(), data.size(), seed, out.data(), &ex);
}
template <>
lm_status hash_checked<int64_t>(const std::vector<int64_t> &off, const std::vector<uint8_t> &data, uint64_t seed,
                                std::vector<uint64_t> &out, int threads) {
  lm_exec ex{threads, 1};
  return lm_o64_hash64_checked(off.data(), off.size() - 1, data.data(), data.size(), seed, out.data(), &ex);
}

// words = false: lines-like blocks (over 16 bytes a string on average: every class, and AVX2's
// > 240); true: words-like blocks (at most 16 on average, some strings of 17..300 among
// them), which take the other first pass (the class lists, or AVX-512's 8 at a time)
template <typename Off>
void check_type(bool words) {
  std::mt19937_64 rng(words ? 12 : 11);
  std::vector<uint8_t> data;
  std::vector<Off> off{0};
  const size_t n = 3000;  // several 256-string blocks, a partial last one
  for (size_t i = 0; i < n; i++) {
    size_t len = words ? (rng() % 40 == 0 ? 17 + rng() % 284 : rng() % 13)
                       : (rng() % 5 == 0 ? rng() % 600 : rng() % 20);
    for (size_t j = 0; j < len; j++) data.push_back(uint8_t(rng()));
    off.push_back(Off(data.size()));
  }
  for (uint64_t seed : {uint64_t(0), uint64_t(0x9E3779B97F4A7C15ull)})
    for (int threads : {1, 2}) {
      std::vector<uint64_t> out(n);
      ASSERT_EQ(hash_checked(off, data, seed, out, threads), LM_OK);
      for (size_t i = 0; i < n; i++)
        ASSERT_EQ(out[i], XXH3_64bits_withSeed(data.data() + off[i], size_t(off[i + 1] - off[i]), seed)) << i;
    }
  // bad offsets, at a block's start, inside, at its end and at the array's end
  for (size_t at : {size_t(0), size_t(1), size_t(255), size_t(256), size_t(257), size_t(1000), n - 1, n}) {
    for (int kind = 0; kind < 3; kind++) {
      std::vector<Off> bad = off;
      if (kind == 0) bad[at] = -1;
      if (kind == 1) bad[at] = Off(data.size() + 1);
      if (kind == 2 && at > 0) bad[at] = bad[at - 1] > 0 ? bad[at - 1] - 1 : -1;  // z < a of string at-1
      if (kind == 2 && at == 0) bad[0] = bad[1] + 1;
      std::vector<uint64_t> out(n);
      for (int threads : {1, 2})
        EXPECT_EQ(hash_checked(bad, data, 0, out, threads), LM_EINVAL) << at << " " << kind;
    }
  }
}

}  // namespace

TEST(HashOffsets, Int32MatchesLibxxhashAndRefusesBadOffsets) { check_type<int32_t>(false); }
TEST(HashOffsets, Int64MatchesLibxxhashAndRefusesBadOffsets) { check_type<int64_t>(false); }
TEST(HashOffsets, Int32WordsWithSomeLongStrings) { check_type<int32_t>(true); }
TEST(HashOffsets, Int64WordsWithSomeLongStrings) { check_type<int64_t>(true); }
