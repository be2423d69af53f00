// lm_bytebuf / lm_grow_array: growth, overflow checks, errors leave the buffer unchanged.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

extern "C" {
#include "luminamoon/bytebuf.h"
}

TEST(ByteBuf, AppendGrowsAndKeepsBytes) {
  lm_bytebuf b;
  lm_bytebuf_init(&b);
  EXPECT_EQ(b.data, nullptr);
  std::string want;
  for (int i = 0; i < 1000; i++) {
    std::string piece = std::to_string(i) + ",";
    ASSERT_EQ(lm_bytebuf_append(&b, piece.data(), piece.size(), 16), LM_OK);
    want += piece;
  }
  ASSERT_EQ(b.len, want.size());
  EXPECT_GE(b.cap, b.len);
  EXPECT_EQ(std::string(reinterpret_cast<const char *>(b.data), b.len), want);
  lm_bytebuf_free(&b);
  EXPECT_EQ(b.data, nullptr);
  EXPECT_EQ(b.len, 0u);
  EXPECT_EQ(b.cap, 0u);
  lm_bytebuf_free(nullptr);
  lm_bytebuf_init(nullptr);
}

TEST(ByteBuf, FirstCapAndEmptyAppend) {
  lm_bytebuf b = {};
  ASSERT_EQ(lm_bytebuf_append(&b, nullptr, 0, 4096), LM_OK);  // nothing to add: no allocation
  EXPECT_EQ(b.data, nullptr);
  ASSERT_EQ(lm_bytebuf_reserve(&b, 1, 4096), LM_OK);
  EXPECT_EQ(b.cap, 4096u);
  EXPECT_EQ(b.len, 0u);
  ASSERT_EQ(lm_bytebuf_reserve(&b, 5000, 4096), LM_OK);
  EXPECT_EQ(b.cap, 8192u);
  lm_bytebuf_free(&b);
}

TEST(ByteBuf, BadArgumentsAndOverflowLeaveBufferUnchanged) {
  lm_bytebuf b = {};
  ASSERT_EQ(lm_bytebuf_append(&b, "abc", 3, 8), LM_OK);
  EXPECT_EQ(lm_bytebuf_append(nullptr, "x", 1, 8), LM_EINVAL);
  EXPECT_EQ(lm_bytebuf_append(&b, nullptr, 1, 8), LM_EINVAL);
  EXPECT_EQ(lm_bytebuf_reserve(&b, SIZE_MAX, 8), LM_EOVERFLOW);
  EXPECT_EQ(lm_bytebuf_reserve(&b, SIZE_MAX - 4, 8), LM_EOVERFLOW);  // len + extra fits, the doubling does not
  EXPECT_EQ(b.len, 3u);
  EXPECT_EQ(b.cap, 8u);
  EXPECT_EQ(std::memcmp(b.data, "abc", 3), 0);
  lm_bytebuf_free(&b);
}

TEST(GrowArray, ElementOverflowAndErrors) {
  uint64_t *p = nullptr;
  size_t cap = 0;
  ASSERT_EQ(lm_grow_array(reinterpret_cast<void **>(&p), &cap, 10, sizeof *p, 4), LM_OK);
  EXPECT_EQ(cap, 16u);  // 4 -> 8 -> 16
  p[15] = 7;
  ASSERT_EQ(lm_grow_array(reinterpret_cast<void **>(&p), &cap, 3, sizeof *p, 4), LM_OK);  // already room
  EXPECT_EQ(cap, 16u);
  // room for SIZE_MAX / 4 elements of 8 bytes cannot be counted in bytes
  EXPECT_EQ(lm_grow_array(reinterpret_cast<void **>(&p), &cap, SIZE_MAX / 4, sizeof *p, 4), LM_EOVERFLOW);
  EXPECT_EQ(lm_grow_array(reinterpret_cast<void **>(&p), &cap, SIZE_MAX, 1, 4), LM_EOVERFLOW);
  EXPECT_EQ(cap, 16u);
  EXPECT_EQ(p[15], 7u);
  EXPECT_EQ(lm_grow_array(nullptr, &cap, 1, 1, 4), LM_EINVAL);
  EXPECT_EQ(lm_grow_array(reinterpret_cast<void **>(&p), nullptr, 1, 1, 4), LM_EINVAL);
  EXPECT_EQ(lm_grow_array(reinterpret_cast<void **>(&p), &cap, 100, 0, 4), LM_EINVAL);
  std::free(p);
}
