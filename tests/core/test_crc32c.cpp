// Tests for luminamoon/crc32c.h against published check values (the CRC
// catalogue's "123456789" check and the RFC 3720 iSCSI vectors) and a naive
// bit-at-a-time reference written here from the polynomial definition.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

extern "C" {
#include "luminamoon/crc32c.h"
}

namespace {

uint32_t naive_crc32c(const unsigned char *p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int b = 0; b < 8; b++) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : (c >> 1);
  }
  return c ^ 0xFFFFFFFFu;
}

}  // namespace

TEST(Crc32c, CatalogueCheckValue) {
  const char *s = "123456789";
  EXPECT_EQ(lm_crc32c(s, 9), 0xE3069283u);
  EXPECT_EQ(lm_crc32c_extend_portable(0, s, 9), 0xE3069283u);
}

TEST(Crc32c, Rfc3720Vectors) {
  unsigned char buf[32];
  memset(buf, 0, sizeof buf);
  EXPECT_EQ(lm_crc32c(buf, 32), 0x8A9136AAu);
  memset(buf, 0xFF, sizeof buf);
  EXPECT_EQ(lm_crc32c(buf, 32), 0x62A8AB43u);
  for (int i = 0; i < 32; i++) buf[i] = (unsigned char)i;
  EXPECT_EQ(lm_crc32c(buf, 32), 0x46DD794Eu);
  for (int i = 0; i < 32; i++) buf[i] = (unsigned char)(31 - i);
  EXPECT_EQ(lm_crc32c(buf, 32), 0x113FDB5Cu);
  EXPECT_EQ(lm_crc32c_extend_portable(0, buf, 32), 0x113FDB5Cu);
}

TEST(Crc32c, EmptyAndNull) {
  EXPECT_EQ(lm_crc32c(nullptr, 0), 0u);
  EXPECT_EQ(lm_crc32c("", 0), 0u);
  EXPECT_EQ(lm_crc32c_extend(0x12345678u, nullptr, 0), 0x12345678u);
}

TEST(Crc32c, MatchesNaiveReferenceAllLengthsAndAlignments) {
  std::mt19937_64 rng(12345);
  std::vector<unsigned char> buf(1100);
  for (auto &b : buf) b = (unsigned char)rng();
  for (size_t off = 0; off < 9; off++) {
    for (size_t len = 0; len + off <= buf.size(); len += (len < 80 ? 1 : 37)) {
      uint32_t want = naive_crc32c(buf.data() + off, len);
      ASSERT_EQ(lm_crc32c(buf.data() + off, len), want) << "off=" << off << " len=" << len;
      ASSERT_EQ(lm_crc32c_extend_portable(0, buf.data() + off, len), want)
          << "off=" << off << " len=" << len;
    }
  }
}

TEST(Crc32c, ExtendEqualsWhole) {
  std::mt19937_64 rng(7);
  std::vector<unsigned char> buf(4096);
  for (auto &b : buf) b = (unsigned char)rng();
  uint32_t whole = naive_crc32c(buf.data(), buf.size());
  for (int trial = 0; trial < 200; trial++) {
    size_t a = rng() % (buf.size() + 1);
    size_t b = a + rng() % (buf.size() - a + 1);
    uint32_t c = lm_crc32c_extend(0, buf.data(), a);
    c = lm_crc32c_extend(c, buf.data() + a, b - a);
    c = lm_crc32c_extend(c, buf.data() + b, buf.size() - b);
    ASSERT_EQ(c, whole);
    uint32_t d = lm_crc32c_extend_portable(0, buf.data(), a);
    d = lm_crc32c_extend(d, buf.data() + a, buf.size() - a);
    ASSERT_EQ(d, whole);
  }
}

TEST(Crc32c, DetectsEverySingleBitFlip) {
  unsigned char buf[64];
  for (int i = 0; i < 64; i++) buf[i] = (unsigned char)(i * 7 + 3);
  uint32_t base = lm_crc32c(buf, sizeof buf);
  for (size_t bit = 0; bit < sizeof buf * 8; bit++) {
    buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    EXPECT_NE(lm_crc32c(buf, sizeof buf), base) << "bit " << bit;
    buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
  }
}
