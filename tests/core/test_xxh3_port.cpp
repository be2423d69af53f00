// The host build of csrc/xxh3.h (the XXH3-64 that the CUDA kernels use) against libxxhash's
// XXH3_64bits_withSeed, bit for bit: every length 0..2048 (all length classes, every
// block/stripe boundary), several seeds, random and megabyte-long inputs, every alignment,
// and the pieces the GPU kernels assemble by themselves (block contributions + scramble chain).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "luminamoon/hash.h"
#include "xxh3.h"

namespace {

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto &b : v) b = static_cast<uint8_t>(rng());
  return v;
}

const uint64_t kSeeds[] = {0ull, 1ull, 42ull, 0x9E3779B97F4A7C15ull, ~0ull, 0x8000000000000000ull};

TEST(Xxh3Port, DefaultSecretIsLibxxhashs) {
  ASSERT_EQ(sizeof(XXH3_kSecret), static_cast<size_t>(LM_XXH3_SECRET_SIZE));
  EXPECT_EQ(0, std::memcmp(XXH3_kSecret, lm_xxh3_default_secret, LM_XXH3_SECRET_SIZE));
}

TEST(Xxh3Port, DerivedSecretMatchesLibxxhash) {
  for (uint64_t seed : kSeeds) {
    uint8_t ours[LM_XXH3_SECRET_SIZE];
    alignas(64) uint8_t theirs[XXH_SECRET_DEFAULT_SIZE];
    lm_xxh3_derive_secret(seed, ours);
    XXH3_initCustomSecret(theirs, seed);  // libxxhash's own derivation
    EXPECT_EQ(0, std::memcmp(ours, theirs, LM_XXH3_SECRET_SIZE)) << "seed " << seed;
  }
}

TEST(Xxh3Port, EveryLength0To2048SeveralSeeds) {
  const auto buf = random_bytes(2048, 7);
  for (uint64_t seed : kSeeds) {
    for (size_t len = 0; len <= 2048; ++len) {
      const uint64_t want = XXH3_64bits_withSeed(buf.data(), len, seed);
      ASSERT_EQ(want, lm_xxh3_64(buf.data(), len, seed)) << "len " << len << " seed " << seed;
    }
  }
}

TEST(Xxh3Port, AgreesWithCoreLmHash64) {
  const auto buf = random_bytes(4096, 8);
  for (size_t len : {0u, 1u, 3u, 4u, 8u, 9u, 16u, 17u, 128u, 129u, 240u, 241u, 1024u, 1025u, 4096u}) {
    EXPECT_EQ(lm_hash64(buf.data(), len, 5), lm_xxh3_64(buf.data(), len, 5)) << len;
  }
}

TEST(Xxh3Port, EveryAlignment) {
  const auto buf = random_bytes(3000, 9);
  for (size_t off = 0; off < 16; ++off) {
    for (size_t len : {1u, 5u, 13u, 33u, 200u, 241u, 1100u, 2900u}) {
      ASSERT_EQ(XXH3_64bits_withSeed(buf.data() + off, len, 3), lm_xxh3_64(buf.data() + off, len, 3))
          << "off " << off << " len " << len;
    }
  }
}

TEST(Xxh3Port, RandomLengthsAndContents) {
  std::mt19937_64 rng(11);
  const auto buf = random_bytes(1 << 16, 10);
  for (int it = 0; it < 3000; ++it) {
    const size_t len = rng() % 20000 % (buf.size());
    const size_t off = rng() % (buf.size() - len + 1);
    const uint64_t seed = rng();
    ASSERT_EQ(XXH3_64bits_withSeed(buf.data() + off, len, seed), lm_xxh3_64(buf.data() + off, len, seed))
        << "len " << len;
  }
}

TEST(Xxh3Port, OneMegabyteInputs) {
  const auto buf = random_bytes((1 << 20) + 77, 12);
  for (size_t len : {size_t{1} << 20, (size_t{1} << 20) + 1, (size_t{1} << 20) + 77, (size_t{1} << 20) - 1}) {
    for (uint64_t seed : kSeeds) {
      ASSERT_EQ(XXH3_64bits_withSeed(buf.data(), len, seed), lm_xxh3_64(buf.data(), len, seed)) << len;
    }
  }
  // Low-entropy content too (all zero, all 0xff): exercises carries in the lane products.
  std::vector<uint8_t> zeros(1 << 20, 0), ones(1 << 20, 0xff);
  EXPECT_EQ(XXH3_64bits_withSeed(zeros.data(), zeros.size(), 0), lm_xxh3_64(zeros.data(), zeros.size(), 0));
  EXPECT_EQ(XXH3_64bits_withSeed(ones.data(), ones.size(), 99), lm_xxh3_64(ones.data(), ones.size(), 99));
}

// The GPU splits a long input: each full 1024-byte block's contribution to the 8 lanes is
// computed independently (in parallel), then a serial chain adds it and scrambles.  Rebuild the
// hash that way on the host, word by word in the order the kernels use, to prove the
// decomposition is exact.
TEST(Xxh3Port, BlockDecompositionUsedByKernels) {
  const auto buf = random_bytes(70000, 13);
  for (uint64_t seed : {0ull, 12345ull}) {
    uint8_t sec[LM_XXH3_SECRET_SIZE];
    lm_xxh3_derive_secret(seed, sec);
    for (size_t len : {241u, 1024u, 1025u, 2048u, 2049u, 5000u, 70000u}) {
      const uint8_t *in = buf.data();
      const size_t nblocks = (len - 1) / LM_XXH3_BLOCK_LEN;
      uint64_t acc[8];
      for (int i = 0; i < 8; ++i) acc[i] = lm_xxh3_init_acc(i);
      for (size_t b = 0; b < nblocks; ++b) {
        uint64_t contrib[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int w = 0; w < 128; ++w) {  // 128 words of the block, in any order
          const int stripe = w / 8, lane = w % 8;
          const uint64_t d = lm_xxh3_rd64(in + b * LM_XXH3_BLOCK_LEN + 8 * w);
          contrib[lane ^ 1] += d;
          contrib[lane] += lm_xxh3_lane_product(d, lm_xxh3_sec64(sec + 8 * stripe + 8 * lane));
        }
        for (int i = 0; i < 8; ++i)
          acc[i] = lm_xxh3_scramble_lane(acc[i] + contrib[i],
                                         lm_xxh3_sec64(sec + LM_XXH3_SCRAMBLE_SECRET_OFFSET + 8 * i));
      }
      const size_t nstripes = ((len - 1) - nblocks * LM_XXH3_BLOCK_LEN) / LM_XXH3_STRIPE_LEN;
      for (size_t s = 0; s < nstripes; ++s)
        lm_xxh3_accumulate_512(acc, in + nblocks * LM_XXH3_BLOCK_LEN + s * 64, sec + 8 * s);
      lm_xxh3_accumulate_512(acc, in + len - 64, sec + LM_XXH3_LASTSTRIPE_SECRET_OFFSET);
      const uint64_t got = lm_xxh3_merge_accs(acc, sec, len);
      ASSERT_EQ(XXH3_64bits_withSeed(in, len, seed), got) << "len " << len << " seed " << seed;
    }
  }
}

}  // namespace
