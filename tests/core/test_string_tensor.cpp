// GoogleTest suite for the StringTensor core: views, builder, layouts, ops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

extern "C" {
#include "luminamoon/hash.h"
#include "luminamoon/string_tensor.h"
#include "../../core/src/hash_internal.h" /* the generic and AVX2 copies of the hash */
}

namespace {

struct StDeleter {
  void operator()(lm_string_tensor *st) const { lm_st_destroy(st); }
};
using StPtr = std::unique_ptr<lm_string_tensor, StDeleter>;

StPtr build(const std::vector<std::string> &items, size_t block = 0) {
  lm_builder *b = nullptr;
  EXPECT_EQ(lm_builder_create(block, 0, &b), LM_OK);
  for (const auto &s : items)
    EXPECT_EQ(lm_builder_append(b, reinterpret_cast<const uint8_t *>(s.data()), s.size()), LM_OK);
  lm_string_tensor *st = nullptr;
  EXPECT_EQ(lm_builder_finish(b, &st), LM_OK);
  lm_builder_destroy(b);
  return StPtr(st);
}

std::string get(const lm_string_tensor *st, size_t i) {
  const uint8_t *d = nullptr;
  uint32_t len = 0;
  EXPECT_EQ(lm_st_get(st, i, &d, &len), LM_OK);
  return std::string(reinterpret_cast<const char *>(d), len);
}

std::vector<std::string> to_vec(const lm_string_tensor *st) {
  std::vector<std::string> out;
  for (size_t i = 0; i < st->n; i++) out.push_back(get(st, i));
  return out;
}

// Random strings of every length class, with duplicates and shared prefixes.
std::vector<std::string> random_strings(std::mt19937_64 &rng, size_t n) {
  static const char *pool[] = {"", "a", "ab", "abcd", "abcdefghijkl", "abcdefghijklm", "prefix-", "é", "日本語"};
  std::vector<std::string> out;
  std::uniform_int_distribution<int> kind(0, 5), len_short(0, 12), len_long(13, 300), byte(0, 255);
  for (size_t i = 0; i < n; i++) {
    std::string s;
    switch (kind(rng)) {
      case 0: s = pool[rng() % (sizeof pool / sizeof *pool)]; break;
      case 1: for (int k = len_short(rng); k > 0; k--) s.push_back(char('a' + rng() % 3)); break;
      case 2: for (int k = len_long(rng); k > 0; k--) s.push_back(char('a' + rng() % 3)); break;
      case 3: s = std::string("prefix-") + std::to_string(rng() % 50); break;
      case 4: for (int k = len_long(rng); k > 0; k--) s.push_back(char(byte(rng))); break;
      default: s = out.empty() ? std::string("x") : out[rng() % out.size()]; break;
    }
    out.push_back(s);
  }
  return out;
}

std::vector<int32_t> offsets32_of(const std::vector<std::string> &v, std::string &data) {
  std::vector<int32_t> off{0};
  data.clear();
  for (const auto &s : v) {
    data += s;
    off.push_back(int32_t(data.size()));
  }
  return off;
}

const uint8_t *u8(const std::string &s) { return reinterpret_cast<const uint8_t *>(s.data()); }

// The payload description of a tensor's buffers (sizes kept alive by the struct).
struct Payloads {
  std::vector<size_t> sizes;
  lm_payloads p;
  explicit Payloads(const lm_string_tensor *st) {
    for (uint32_t b = 0; b < st->nbuffers; b++) sizes.push_back(lm_buffer_size(st->buffers[b]));
    p = {st->buffer_data, sizes.data(), st->nbuffers};
  }
  const lm_payloads *get() const { return &p; }
};

}  // namespace

TEST(StringView, IsSixteenBytesAndInlinesUpToTwelve) {
  static_assert(sizeof(lm_string_view) == 16, "size");
  for (uint32_t len = 0; len <= 12; len++) {
    std::string s(len, 'z');
    for (uint32_t k = 0; k < len; k++) s[k] = char('a' + k);
    lm_string_view v;
    ASSERT_EQ(lm_sv_make(&v, u8(s), len, 7, 9), 0);
    EXPECT_EQ(v.len, len);
    EXPECT_TRUE(lm_sv_is_inline(&v));
    uint8_t raw[16];
    std::memcpy(raw, &v, 16);
    EXPECT_EQ(std::memcmp(raw + 4, s.data(), len), 0);
    for (uint32_t k = 4 + len; k < 16; k++) EXPECT_EQ(raw[k], 0) << "padding byte " << k;
    EXPECT_EQ(std::string(reinterpret_cast<const char *>(lm_sv_data(&v, nullptr)), len), s);
  }
}

TEST(StringView, LongStringsKeepPrefixBufferAndOffset) {
  std::string s = "0123456789abcdefXYZ";  // 19 bytes
  for (uint32_t len = 13; len <= s.size(); len++) {
    lm_string_view v;
    ASSERT_EQ(lm_sv_make(&v, u8(s), len, 3, 1234567), 0);
    EXPECT_FALSE(lm_sv_is_inline(&v));
    EXPECT_EQ(std::memcmp(v.prefix_or_inline, "0123", 4), 0);
    EXPECT_EQ(lm_sv_buffer_index(&v), 3u);
    EXPECT_EQ(lm_sv_offset(&v), 1234567u);
    uint8_t raw[16];
    std::memcpy(raw, &v, 16);
    uint32_t b, o;  // Arrow layout: bytes 8..11 buffer index, 12..15 offset, little-endian
    std::memcpy(&b, raw + 8, 4);
    std::memcpy(&o, raw + 12, 4);
    EXPECT_EQ(b, 3u);
    EXPECT_EQ(o, 1234567u);
  }
}

TEST(Builder, RoundTripsEveryLengthClassAndEmpty) {
  std::vector<std::string> items;
  for (int len = 0; len <= 40; len++) items.push_back(std::string(len, char('a' + len % 26)));
  items.push_back("");
  auto st = build(items);
  ASSERT_EQ(st->n, items.size());
  EXPECT_EQ(to_vec(st.get()), items);
  for (size_t i = 0; i < items.size(); i++) EXPECT_EQ(lm_sv_is_inline(&st->views[i]), items[i].size() <= 12);
}

TEST(Builder, EmptyTensor) {
  auto st = build({});
  ASSERT_NE(st, nullptr);
  EXPECT_EQ(st->n, 0u);
  EXPECT_EQ(st->nbuffers, 0u);
  uint64_t total = 1;
  EXPECT_EQ(lm_views_total_bytes(st->views, 0, &total), LM_OK);
  EXPECT_EQ(total, 0u);
  int32_t off[1] = {-1};
  EXPECT_EQ(lm_views_to_offsets32(st->views, 0, st->buffer_data, off, nullptr, nullptr), LM_OK);
  EXPECT_EQ(off[0], 0);
}

TEST(Builder, MultiByteCharacterStraddlingThePrefix) {
  // "abc" + "é" (2 bytes) puts the 4-byte prefix boundary inside the character;
  // "ab" + "日" (3 bytes) likewise; both long enough not to be inlined.
  std::vector<std::string> items = {"abc\xc3\xa9-long-enough-string", "ab\xe6\x97\xa5-long-enough-string",
                                    "a\xf0\x9f\x98\x80 emoji straddles prefix"};
  auto st = build(items);
  EXPECT_EQ(to_vec(st.get()), items);
  for (size_t i = 0; i < items.size(); i++) EXPECT_EQ(std::memcmp(st->views[i].prefix_or_inline, items[i].data(), 4), 0);
  uint8_t out[3];
  std::string p = "abc\xc3";  // a prefix ending mid-character still matches bytewise
  Payloads pl(st.get());
  ASSERT_EQ(lm_views_prefix_match(st->views, 3, pl.get(), u8(p), p.size(), out, nullptr), LM_OK);
  EXPECT_EQ(out[0], 1);
  EXPECT_EQ(out[1], 0);
  EXPECT_EQ(out[2], 0);
}

TEST(Builder, SeveralPayloadBlocks) {
  std::vector<std::string> items;
  for (int i = 0; i < 100; i++) items.push_back(std::string(50 + i, char('A' + i % 26)) + std::to_string(i));
  auto st = build(items, 256);  // 256-byte blocks force many blocks
  EXPECT_GT(st->nbuffers, 10u);
  EXPECT_EQ(to_vec(st.get()), items);
  // A string larger than the block size gets a block of its own.
  std::string big(10000, 'q');
  auto st2 = build({"short", big, "another-long-string-here"}, 256);
  EXPECT_EQ(get(st2.get(), 1), big);
  EXPECT_EQ(get(st2.get(), 2), "another-long-string-here");
  std::vector<size_t> sizes;
  for (uint32_t b = 0; b < st->nbuffers; b++) sizes.push_back(lm_buffer_size(st->buffers[b]));
  EXPECT_EQ(lm_views_validate(st->views, st->n, st->buffer_data, sizes.data(), st->nbuffers), LM_OK);
}

TEST(Builder, RejectsBadInput) {
  lm_builder *b = nullptr;
  EXPECT_EQ(lm_builder_create(0, 0x80, &b), LM_EINVAL);
  EXPECT_EQ(lm_builder_create(0, LM_BUILDER_VALIDATE_UTF8, nullptr), LM_EINVAL);
  ASSERT_EQ(lm_builder_create(0, LM_BUILDER_VALIDATE_UTF8, &b), LM_OK);
  EXPECT_EQ(lm_builder_append(b, nullptr, 3), LM_EINVAL);
  EXPECT_EQ(lm_builder_append(b, u8(std::string("\xff")), 1), LM_EUTF8);
  EXPECT_EQ(lm_builder_append(b, u8(std::string("ok")), (size_t)LM_MAX_STRING_LEN + 1), LM_EOVERFLOW);
  EXPECT_EQ(lm_builder_append(b, u8(std::string("ok")), 2), LM_OK);
  lm_string_tensor *st = nullptr;
  ASSERT_EQ(lm_builder_finish(b, &st), LM_OK);
  EXPECT_EQ(st->n, 1u);  // the rejected appends left nothing behind
  lm_st_destroy(st);
  lm_builder_destroy(b);
}

TEST(Utf8, ValidatesLikeTheStandard) {
  struct Case { std::string s; bool ok; size_t pos; };
  std::vector<Case> cases = {
      {"", true, 0}, {"plain ascii text", true, 0}, {"\xc3\xa9", true, 0}, {"\xe6\x97\xa5", true, 0},
      {"\xf0\x9f\x98\x80", true, 0}, {"\xf4\x8f\xbf\xbf", true, 0},
      {"ab\xc0\xaf", false, 2},        // overlong
      {"\xe0\x80\xaf", false, 0},      // overlong 3-byte
      {"\xed\xa0\x80", false, 0},      // surrogate
      {"\xf4\x90\x80\x80", false, 0},  // > U+10FFFF
      {"abc\xe6\x97", false, 3},       // truncated at end
      {"\x80", false, 0}, {"\xff", false, 0}, {"abcdefgh\xc3(", false, 8},
  };
  for (const auto &c : cases) {
    size_t pos = 99;
    lm_status s = lm_utf8_validate(u8(c.s), c.s.size(), &pos);
    EXPECT_EQ(s == LM_OK, c.ok) << c.s;
    if (!c.ok) {
      EXPECT_EQ(pos, c.pos) << c.s;
    }
  }
}

TEST(Layout, OffsetsRoundTripOnRandomInput) {
  std::mt19937_64 rng(1);
  for (int round = 0; round < 20; round++) {
    auto items = random_strings(rng, 1 + rng() % 500);
    auto st = build(items, 1024);
    uint64_t total = 0;
    ASSERT_EQ(lm_views_total_bytes(st->views, st->n, &total), LM_OK);
    std::vector<int32_t> off(st->n + 1);
    std::vector<uint8_t> data(total + 1);
    lm_exec ex = {2, 16};
    ASSERT_EQ(lm_views_to_offsets32(st->views, st->n, st->buffer_data, off.data(), data.data(), &ex), LM_OK);
    std::string ref;
    auto ref_off = offsets32_of(items, ref);
    EXPECT_EQ(off, ref_off);
    EXPECT_EQ(std::memcmp(data.data(), ref.data(), ref.size()), 0);
    std::vector<int64_t> off64(st->n + 1);
    ASSERT_EQ(lm_views_to_offsets64(st->views, st->n, st->buffer_data, off64.data(), data.data(), nullptr), LM_OK);
    for (size_t i = 0; i <= st->n; i++) EXPECT_EQ(off64[i], off[i]);
    // offsets -> views: zero copy (long views point into `data` as buffer 5)
    std::vector<lm_string_view> views(st->n);
    ASSERT_EQ(lm_views_from_offsets32(off.data(), st->n, data.data(), total, 5, views.data(), &ex), LM_OK);
    const uint8_t *bufs[6] = {nullptr, nullptr, nullptr, nullptr, nullptr, data.data()};
    for (size_t i = 0; i < st->n; i++) {
      EXPECT_EQ(std::string(reinterpret_cast<const char *>(lm_sv_data(&views[i], bufs)), views[i].len), items[i]);
      if (views[i].len > 12) {
        EXPECT_EQ(lm_sv_buffer_index(&views[i]), 5u);
        EXPECT_EQ(lm_sv_data(&views[i], bufs), data.data() + off[i]);  // points into data: no copy
      }
    }
  }
}

TEST(Layout, RejectsBadOffsets) {
  std::string data = "abcdef";
  std::vector<lm_string_view> views(3);
  int32_t non_monotone[] = {0, 4, 2, 6};
  EXPECT_EQ(lm_views_from_offsets32(non_monotone, 3, u8(data), 6, 0, views.data(), nullptr), LM_EINVAL);
  int32_t past_end[] = {0, 2, 4, 7};
  EXPECT_EQ(lm_views_from_offsets32(past_end, 3, u8(data), 6, 0, views.data(), nullptr), LM_ERANGE);
  int32_t negative[] = {-1, 2, 4, 6};
  EXPECT_EQ(lm_views_from_offsets32(negative, 3, u8(data), 6, 0, views.data(), nullptr), LM_EINVAL);
  int64_t ok[] = {0, 2, 4, 6};
  EXPECT_EQ(lm_views_from_offsets64(ok, 3, u8(data), 6, 0, views.data(), nullptr), LM_OK);
  EXPECT_EQ(lm_views_from_offsets64(ok, 3, nullptr, 6, 0, views.data(), nullptr), LM_EINVAL);
}

TEST(Layout, ValidateViewsCatchesCorruption) {
  auto st = build({"short", "a string longer than twelve", "another long string!"});
  std::vector<size_t> sizes = {lm_buffer_size(st->buffers[0])};
  ASSERT_EQ(lm_views_validate(st->views, 3, st->buffer_data, sizes.data(), 1), LM_OK);
  std::vector<lm_string_view> v(st->views, st->views + 3);
  v[0].suffix_or_offset[7] = 1;  // non-zero inline padding
  EXPECT_EQ(lm_views_validate(v.data(), 3, st->buffer_data, sizes.data(), 1), LM_ECORRUPT);
  v.assign(st->views, st->views + 3);
  v[1].suffix_or_offset[0] = 9;  // buffer index out of range
  EXPECT_EQ(lm_views_validate(v.data(), 3, st->buffer_data, sizes.data(), 1), LM_ECORRUPT);
  v.assign(st->views, st->views + 3);
  uint32_t off = 0xFFFFFF00u;  // offset past the buffer
  std::memcpy(v[2].suffix_or_offset + 4, &off, 4);
  EXPECT_EQ(lm_views_validate(v.data(), 3, st->buffer_data, sizes.data(), 1), LM_ECORRUPT);
  v.assign(st->views, st->views + 3);
  v[1].prefix_or_inline[0] ^= 1;  // prefix disagrees with the payload
  EXPECT_EQ(lm_views_validate(v.data(), 3, st->buffer_data, sizes.data(), 1), LM_ECORRUPT);
  v.assign(st->views, st->views + 3);
  v[1].len = 0x80000000u;
  EXPECT_EQ(lm_views_validate(v.data(), 3, st->buffer_data, sizes.data(), 1), LM_ECORRUPT);
}

TEST(Layout, CheckPaddingLooksAtInlineViewsOnly) {
  auto st = build({"short", "a string longer than twelve", "", "twelve bytes"});
  size_t bad = 99;
  ASSERT_EQ(lm_views_check_padding(st->views, 4, &bad), LM_OK);
  EXPECT_EQ(bad, 99u);
  std::vector<lm_string_view> v(st->views, st->views + 4);
  v[2].prefix_or_inline[0] = 'x';  // the empty string with a byte in its padding
  EXPECT_EQ(lm_views_check_padding(v.data(), 4, &bad), LM_ECORRUPT);
  EXPECT_EQ(bad, 2u);
  v.assign(st->views, st->views + 4);
  v[0].suffix_or_offset[7] = 1;  // "short": the last inline byte
  EXPECT_EQ(lm_views_check_padding(v.data(), 4, nullptr), LM_ECORRUPT);
  v.assign(st->views, st->views + 4);
  v[1].suffix_or_offset[7] = 0x7F;  // a long view's offset is not padding
  v[3].suffix_or_offset[7] ^= 1;    // a full 12-byte inline string has no padding
  EXPECT_EQ(lm_views_check_padding(v.data(), 4, nullptr), LM_OK);
  EXPECT_EQ(lm_views_check_padding(nullptr, 1, nullptr), LM_EINVAL);
  EXPECT_EQ(lm_views_check_padding(nullptr, 0, nullptr), LM_OK);
}

TEST(Layout, BeyondTwoGibSwitchesToInt64) {
  // 40 views of one 64 MiB string: 2.5 GiB of strings without 2.5 GiB of memory.
  const size_t len = size_t(64) << 20, n = 40;
  std::vector<uint8_t> big(len, 'x');
  std::memcpy(big.data(), "head", 4);
  std::vector<lm_string_view> views(n);
  for (auto &v : views) lm_sv_make(&v, big.data(), uint32_t(len), 0, 0);
  const uint8_t *bufs[1] = {big.data()};
  uint64_t total = 0;
  ASSERT_EQ(lm_views_total_bytes(views.data(), n, &total), LM_OK);
  EXPECT_EQ(total, uint64_t(len) * n);
  std::vector<int32_t> off32(n + 1);
  EXPECT_EQ(lm_views_to_offsets32(views.data(), n, bufs, off32.data(), nullptr, nullptr), LM_EOVERFLOW);
  // int64 offsets describe it (data pointer only needed for the copy: check the offsets pass).
  std::vector<int64_t> off64(n + 1);
  std::vector<uint8_t> out(total);
  ASSERT_EQ(lm_views_to_offsets64(views.data(), n, bufs, off64.data(), out.data(), nullptr), LM_OK);
  EXPECT_EQ(off64[n], int64_t(total));
  EXPECT_EQ(std::memcmp(out.data() + (total - len), "head", 4), 0);
  // offsets64 -> views over > 2 GiB uses overlapping 2 GiB windows.
  std::vector<lm_string_view> back(n);
  ASSERT_EQ(lm_views_from_offsets64(off64.data(), n, out.data(), total, 0, back.data(), nullptr), LM_OK);
  uint32_t windows = lm_window_count(total);
  EXPECT_EQ(windows, uint32_t((total >> 31) + 1));
  std::vector<const uint8_t *> wb(windows);
  for (uint32_t w = 0; w < windows; w++) wb[w] = out.data() + (uint64_t(w) << 31);
  for (size_t i = 0; i < n; i++) {
    EXPECT_EQ(lm_sv_data(&back[i], wb.data()), out.data() + off64[i]) << i;
    EXPECT_LE(lm_sv_offset(&back[i]), 0x7fffffffu);
  }
  // gather into int32 offsets refuses instead of overflowing
  std::vector<int64_t> idx(n);
  for (size_t i = 0; i < n; i++) idx[i] = int64_t(i);
  std::vector<int32_t> small_off{0, int32_t(len)};
  std::vector<int32_t> gout(n + 1);
  EXPECT_EQ(lm_o32_gather_offsets(small_off.data(), 1, std::vector<int64_t>(n, 0).data(), n, gout.data()), LM_EOVERFLOW);
}

TEST(Container, SliceTakeCompactShareThePayload) {
  std::mt19937_64 rng(7);
  auto items = random_strings(rng, 300);
  auto st = build(items, 512);
  lm_string_tensor *sl = nullptr, *tk = nullptr, *cp = nullptr;
  ASSERT_EQ(lm_st_slice(st.get(), 10, 110, &sl), LM_OK);
  StPtr slp(sl);
  EXPECT_EQ(to_vec(sl), std::vector<std::string>(items.begin() + 10, items.begin() + 110));
  std::vector<int64_t> idx;
  for (int i = 0; i < 500; i++) idx.push_back(int64_t(rng() % items.size()));
  ASSERT_EQ(lm_st_take(st.get(), idx.data(), idx.size(), &tk), LM_OK);
  StPtr tkp(tk);
  for (size_t k = 0; k < idx.size(); k++) EXPECT_EQ(get(tk, k), items[idx[k]]);
  std::vector<uint8_t> mask(items.size());
  std::vector<std::string> kept;
  for (size_t i = 0; i < items.size(); i++) {
    mask[i] = uint8_t(rng() % 2);
    if (mask[i]) kept.push_back(items[i]);
  }
  ASSERT_EQ(lm_st_compact(st.get(), mask.data(), &cp), LM_OK);
  StPtr cpp(cp);
  EXPECT_EQ(to_vec(cp), kept);
  // No payload copy: long strings point at the very same bytes.
  for (size_t k = 0; k < idx.size(); k++) {
    const uint8_t *a, *b;
    uint32_t la, lb;
    lm_st_get(tk, k, &a, &la);
    lm_st_get(st.get(), size_t(idx[k]), &b, &lb);
    if (la > 12) {
      EXPECT_EQ(a, b);
    }
  }
  // The derived tensors outlive the original (reference-counted buffers).
  st.reset();
  EXPECT_EQ(to_vec(cp), kept);
  EXPECT_EQ(to_vec(sl), std::vector<std::string>(items.begin() + 10, items.begin() + 110));
}

TEST(Container, RejectsOutOfRange) {
  auto st = build({"a", "b"});
  lm_string_tensor *out = nullptr;
  EXPECT_EQ(lm_st_slice(st.get(), 2, 1, &out), LM_ERANGE);
  EXPECT_EQ(lm_st_slice(st.get(), 0, 3, &out), LM_ERANGE);
  int64_t bad[] = {0, 2};
  EXPECT_EQ(lm_st_take(st.get(), bad, 2, &out), LM_ERANGE);
  int64_t neg[] = {-1};
  EXPECT_EQ(lm_st_take(st.get(), neg, 1, &out), LM_ERANGE);
  EXPECT_EQ(out, nullptr);
  const uint8_t *d;
  uint32_t len;
  EXPECT_EQ(lm_st_get(st.get(), 2, &d, &len), LM_ERANGE);
}

TEST(Buffer, WrapCallsReleaseOnce) {
  static int released = 0;
  released = 0;
  uint8_t mem[4] = {1, 2, 3, 4};
  lm_buffer *b = nullptr;
  ASSERT_EQ(lm_buffer_wrap(mem, 4, [](void *) { released++; }, nullptr, &b), LM_OK);
  lm_buffer_retain(b);
  lm_buffer_release(b);
  EXPECT_EQ(released, 0);
  EXPECT_EQ(lm_buffer_data(b), mem);
  lm_buffer_release(b);
  EXPECT_EQ(released, 1);
  EXPECT_EQ(lm_buffer_wrap(nullptr, 4, nullptr, nullptr, &b), LM_EINVAL);
}

// ---- every op against a naive reference, on random input, both layouts, 1 and 2 threads

class OpsRandom : public ::testing::TestWithParam<int> {};

TEST_P(OpsRandom, MatchNaiveReference) {
  std::mt19937_64 rng(uint64_t(GetParam()) * 7919 + 1);
  lm_exec ex = {GetParam() % 2 ? 2 : 1, 8};
  auto items = random_strings(rng, 1 + rng() % 400);
  auto others = random_strings(rng, items.size());
  for (size_t i = 0; i < items.size(); i++)
    if (rng() % 3 == 0) others[i] = items[i];
  auto st = build(items, 700), so = build(others, 300);
  const size_t n = items.size();
  Payloads ps(st.get()), po(so.get());
  std::string data, odata;
  auto off = offsets32_of(items, data);
  auto ooff = offsets32_of(others, odata);
  std::vector<int64_t> off64(off.begin(), off.end()), ooff64(ooff.begin(), ooff.end());

  std::vector<std::string> probes = {"", "p", "pre", "pref", "prefix", "prefix-1", "abcdefghijkl", "abcdefghijklm"};
  probes.push_back(items[rng() % n]);
  probes.push_back(items[rng() % n].substr(0, 5));
  std::vector<uint8_t> a(n), b(n), c(n);
  for (const auto &p : probes) {
    ASSERT_EQ(lm_views_prefix_match(st->views, n, ps.get(), u8(p), p.size(), a.data(), &ex), LM_OK);
    ASSERT_EQ(lm_o32_prefix_match(off.data(), n, u8(data), u8(p), p.size(), b.data(), &ex), LM_OK);
    ASSERT_EQ(lm_o64_prefix_match(off64.data(), n, u8(data), u8(p), p.size(), c.data(), &ex), LM_OK);
    std::vector<lm_string_view> kept_views(n);  // exactly n: ASan sees a store past them
    size_t kept = size_t(-1);
    ASSERT_EQ(lm_views_filter_prefix(st->views, n, ps.get(), u8(p), p.size(), kept_views.data(), &kept, &ex), LM_OK);
    std::vector<std::string> want_kept;
    for (size_t i = 0; i < n; i++) {
      bool want = items[i].compare(0, p.size(), p) == 0 && items[i].size() >= p.size();
      ASSERT_EQ(a[i], want) << "views prefix '" << p << "' item " << i;
      ASSERT_EQ(b[i], want);
      ASSERT_EQ(c[i], want);
      if (want) want_kept.push_back(items[i]);
    }
    // filter_prefix: the kept strings' views, in order, byte for byte those of the input
    ASSERT_EQ(kept, want_kept.size()) << "filter prefix '" << p << "'";
    for (size_t j = 0, i = 0; j < kept; j++, i++) {
      while (!a[i]) i++;
      ASSERT_EQ(std::memcmp(&kept_views[j], &st->views[i], sizeof(lm_string_view)), 0) << "filter prefix '" << p << "' kept " << j;
    }
    ASSERT_EQ(lm_views_equal_scalar(st->views, n, ps.get(), u8(p), p.size(), a.data(), &ex), LM_OK);
    ASSERT_EQ(lm_o32_equal_scalar(off.data(), n, u8(data), u8(p), p.size(), b.data(), &ex), LM_OK);
    ASSERT_EQ(lm_o64_equal_scalar(off64.data(), n, u8(data), u8(p), p.size(), c.data(), &ex), LM_OK);
    for (size_t i = 0; i < n; i++) {
      ASSERT_EQ(a[i], items[i] == p);
      ASSERT_EQ(b[i], items[i] == p);
      ASSERT_EQ(c[i], items[i] == p);
    }
  }
  ASSERT_EQ(lm_views_equal(st->views, ps.get(), so->views, po.get(), n, a.data(), &ex), LM_OK);
  ASSERT_EQ(lm_o32_equal(off.data(), u8(data), ooff.data(), u8(odata), n, b.data(), &ex), LM_OK);
  ASSERT_EQ(lm_o64_equal(off64.data(), u8(data), ooff64.data(), u8(odata), n, c.data(), &ex), LM_OK);
  for (size_t i = 0; i < n; i++) {
    ASSERT_EQ(a[i], items[i] == others[i]);
    ASSERT_EQ(b[i], items[i] == others[i]);
    ASSERT_EQ(c[i], items[i] == others[i]);
  }
  std::vector<uint64_t> h1(n), h2(n), h3(n);
  uint64_t seed = rng();
  ASSERT_EQ(lm_views_hash64(st->views, n, ps.get(), seed, h1.data(), &ex), LM_OK);
  ASSERT_EQ(lm_o32_hash64(off.data(), n, u8(data), seed, h2.data(), &ex), LM_OK);
  ASSERT_EQ(lm_o64_hash64(off64.data(), n, u8(data), seed, h3.data(), &ex), LM_OK);
  for (size_t i = 0; i < n; i++) {
    uint64_t want = XXH3_64bits_withSeed(items[i].data(), items[i].size(), seed);
    ASSERT_EQ(h1[i], want);
    ASSERT_EQ(h2[i], want);
    ASSERT_EQ(h3[i], want);
  }
  // pad_bytes
  for (int64_t bos : {-1, 1}) {
    for (int64_t eos : {-1, 2}) {
      size_t max_len = 1 + rng() % 40;
      std::vector<int64_t> tok(n * max_len), len(n);
      ASSERT_EQ(lm_o32_pad_bytes(off.data(), n, u8(data), max_len, 0, bos, eos, tok.data(), len.data(), &ex), LM_OK);
      for (size_t i = 0; i < n; i++) {
        std::vector<int64_t> want;
        if (bos >= 0) want.push_back(bos);
        size_t room = max_len - std::min(max_len, size_t(bos >= 0) + size_t(eos >= 0));
        for (size_t k = 0; k < std::min(room, items[i].size()); k++) want.push_back(uint8_t(items[i][k]));
        if (eos >= 0) want.push_back(eos);
        want.resize(std::min(want.size(), max_len));
        ASSERT_EQ(len[i], int64_t(want.size()));
        want.resize(max_len, 0);
        ASSERT_EQ(std::vector<int64_t>(tok.begin() + i * max_len, tok.begin() + (i + 1) * max_len), want);
      }
    }
  }
  // gather
  std::vector<int64_t> idx;
  for (size_t k = 0, m = rng() % (2 * n); k < m; k++) idx.push_back(int64_t(rng() % n));
  std::vector<int32_t> goff(idx.size() + 1);
  ASSERT_EQ(lm_o32_gather_offsets(off.data(), n, idx.data(), idx.size(), goff.data()), LM_OK);
  std::vector<uint8_t> gdata(size_t(goff.back()) + 1);
  ASSERT_EQ(lm_o32_gather_data(off.data(), u8(data), idx.data(), idx.size(), goff.data(), gdata.data(), &ex), LM_OK);
  std::string gref;
  for (size_t k = 0; k < idx.size(); k++) {
    gref += items[size_t(idx[k])];
    ASSERT_EQ(goff[k + 1], int32_t(gref.size()));
  }
  ASSERT_EQ(std::memcmp(gdata.data(), gref.data(), gref.size()), 0);
  // compact
  std::vector<uint8_t> mask(n);
  std::string cref;
  std::vector<int64_t> cref_off{0};
  for (size_t i = 0; i < n; i++) {
    mask[i] = rng() % 2;
    if (mask[i]) {
      cref += items[i];
      cref_off.push_back(int64_t(cref.size()));
    }
  }
  size_t kn = 0;
  uint64_t kb = 0;
  ASSERT_EQ(lm_o64_compact_count(off64.data(), n, mask.data(), &kn, &kb), LM_OK);
  ASSERT_EQ(kn, cref_off.size() - 1);
  ASSERT_EQ(kb, cref.size());
  std::vector<int64_t> coff(kn + 1);
  std::vector<uint8_t> cdata(kb + 1);
  ASSERT_EQ(lm_o64_compact(off64.data(), n, u8(data), mask.data(), coff.data(), cdata.data()), LM_OK);
  ASSERT_EQ(coff, cref_off);
  ASSERT_EQ(std::memcmp(cdata.data(), cref.data(), cref.size()), 0);
}

INSTANTIATE_TEST_SUITE_P(Seeds, OpsRandom, ::testing::Range(0, 24));

TEST(Ops, ViewsOpsCheckBoundsBeforeReadingPayload) {
  auto st = build({"a string longer than twelve", "short", "another long string, longer"});
  Payloads ps(st.get());
  std::vector<lm_string_view> v(st->views, st->views + 3);
  uint32_t off = 0xFFFF0000u;  // view 0 points far past its buffer
  std::memcpy(v[0].suffix_or_offset + 4, &off, 4);
  uint8_t out[3];
  uint64_t h[3];
  std::string probe = "a string longer than twelve";
  EXPECT_EQ(lm_views_equal_scalar(v.data(), 3, ps.get(), u8(probe), probe.size(), out, nullptr), LM_ERANGE);
  EXPECT_EQ(lm_views_prefix_match(v.data(), 3, ps.get(), u8(probe), 10, out, nullptr), LM_ERANGE);
  EXPECT_EQ(lm_views_hash64(v.data(), 3, ps.get(), 0, h, nullptr), LM_ERANGE);
  EXPECT_EQ(lm_views_hash64(v.data(), 3, nullptr, 0, h, nullptr), LM_ERANGE);
  // A corrupt view that is never dereferenced does not matter: decided on its head.
  std::string other = "zzzzzzzzzzzzzzzzzzzzzz";
  ASSERT_EQ(lm_views_equal_scalar(v.data(), 3, ps.get(), u8(other), other.size(), out, nullptr), LM_OK);
  EXPECT_EQ(out[0] + out[1] + out[2], 0);
  v[0].suffix_or_offset[0] = 7;  // buffer index out of range
  EXPECT_EQ(lm_views_prefix_match(v.data(), 3, ps.get(), u8(probe), 6, out, nullptr), LM_ERANGE);
  // filter_prefix reads a candidate's payload only for a prefix over 4 bytes: the same refusal
  lm_string_view kept_views[3];
  size_t kept = 9;
  EXPECT_EQ(lm_views_filter_prefix(v.data(), 3, ps.get(), u8(probe), 6, kept_views, &kept, nullptr), LM_ERANGE);
  EXPECT_EQ(kept, 0u);
  ASSERT_EQ(lm_views_filter_prefix(v.data(), 3, ps.get(), u8(probe), 4, kept_views, &kept, nullptr), LM_OK);
  EXPECT_EQ(kept, 1u);  // decided on the views alone: the corrupt long view "a st..." is kept
  EXPECT_EQ(std::memcmp(&kept_views[0], &v[0], sizeof(lm_string_view)), 0);
  EXPECT_EQ(lm_views_filter_prefix(v.data(), 3, ps.get(), u8(probe), 4, nullptr, &kept, nullptr), LM_EINVAL);
  EXPECT_EQ(lm_views_filter_prefix(v.data(), 3, ps.get(), u8(probe), 4, kept_views, nullptr, nullptr), LM_EINVAL);
  EXPECT_EQ(lm_views_filter_prefix(v.data(), 3, ps.get(), nullptr, 4, kept_views, &kept, nullptr), LM_EINVAL);
  ASSERT_EQ(lm_views_filter_prefix(nullptr, 0, nullptr, nullptr, 0, nullptr, &kept, nullptr), LM_OK);
  EXPECT_EQ(kept, 0u);
}

TEST(Ops, ViewsEqualityAndHashRefuseInlineViewsWithNonZeroPadding) {
  auto st = build({"ab", "a string longer than twelve", "abc"});
  Payloads ps(st.get());
  std::vector<lm_string_view> v(st->views, st->views + 3);
  uint8_t out[3];
  uint64_t h[3];
  ASSERT_EQ(lm_views_equal_scalar(v.data(), 3, ps.get(), u8("ab"), 2, out, nullptr), LM_OK);
  EXPECT_EQ(out[0], 1);
  v[0].prefix_or_inline[2] = 'z';  // "ab" followed by a non-zero padding byte
  EXPECT_EQ(lm_views_equal_scalar(v.data(), 3, ps.get(), u8("ab"), 2, out, nullptr), LM_ECORRUPT);
  // prefix_match reads no padding byte: the same answers as for the clean views
  ASSERT_EQ(lm_views_prefix_match(v.data(), 3, ps.get(), u8("ab"), 2, out, nullptr), LM_OK);
  EXPECT_EQ(out[0] + 2 * out[1] + 4 * out[2], 1 + 4);
  EXPECT_EQ(lm_views_hash64(v.data(), 3, ps.get(), 0, h, nullptr), LM_ECORRUPT);
  EXPECT_EQ(lm_views_equal(v.data(), ps.get(), st->views, ps.get(), 3, out, nullptr), LM_ECORRUPT);
  EXPECT_EQ(lm_views_equal(st->views, ps.get(), v.data(), ps.get(), 3, out, nullptr), LM_ECORRUPT);
}

TEST(Ops, GatherRejectsOutOfRangeIndex) {
  int32_t off[] = {0, 1, 2};
  int64_t idx[] = {0, 2};
  int32_t out[3];
  EXPECT_EQ(lm_o32_gather_offsets(off, 2, idx, 2, out), LM_ERANGE);
  int64_t neg[] = {-1};
  EXPECT_EQ(lm_o32_gather_offsets(off, 2, neg, 1, out), LM_ERANGE);
}

TEST(Hash, MatchesLibxxhash) {
  std::string s(1000, 'a');
  for (size_t len : {0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1000}) {
    EXPECT_EQ(lm_hash64(s.data(), len, 42), XXH3_64bits_withSeed(s.data(), len, 42));
    XXH128_hash_t h = XXH3_128bits_withSeed(s.data(), len, 42);
    lm_hash128_t m = lm_hash128(s.data(), len, 42);
    EXPECT_EQ(m.lo, h.low64);
    EXPECT_EQ(m.hi, h.high64);
  }
  EXPECT_EQ(lm_hash64(nullptr, 0, 0), XXH3_64bits_withSeed("", 0, 0));
}

TEST(Parallel, CoversTheRangeExactlyOnce) {
  std::vector<int> hits(100000, 0);
  lm_exec ex = {4, 1000};
  auto fn = [](void *ctx, size_t b, size_t e) -> lm_status {
    auto *h = static_cast<std::vector<int> *>(ctx);
    for (size_t i = b; i < e; i++) (*h)[i]++;
    return LM_OK;
  };
  ASSERT_EQ(lm_parallel_for(&ex, hits.size(), fn, &hits), LM_OK);
  for (int h : hits) ASSERT_EQ(h, 1);
  EXPECT_EQ(lm_parallel_for(&ex, 10, nullptr, nullptr), LM_EINVAL);
  auto fail = [](void *, size_t b, size_t) -> lm_status { return b == 0 ? LM_EIO : LM_OK; };
  EXPECT_EQ(lm_parallel_for(&ex, 100000, fail, nullptr), LM_EIO);
}

TEST(Status, EveryCodeHasANameAndText) {
  for (int s = 0; s < LM_STATUS_COUNT_; s++) {
    EXPECT_STRNE(lm_status_name(lm_status(s)), "LM_UNKNOWN");
    EXPECT_STRNE(lm_status_str(lm_status(s)), "unknown status");
  }
}

// lm_hash64_many groups short strings by XXH3's length class: the same bits as one
// XXH3_64bits_withSeed per string, for every length 0..300 in a shuffled order and
// blocks of every size around the 256 of a block.
TEST(Hash, ManyMatchesOneAtATime) {
  std::mt19937_64 rng(11);
  std::vector<uint8_t> bytes(400);
  for (auto &b : bytes) b = uint8_t(rng());
  std::vector<const uint8_t *> ptrs;
  std::vector<size_t> lens;
  for (int rep = 0; rep < 3; rep++)
    for (size_t len = 0; len <= 300; len++) {
      size_t at = size_t(rng() % 100);
      ptrs.push_back(len ? bytes.data() + at : nullptr);
      lens.push_back(len);
    }
  for (uint64_t seed : {uint64_t(0), uint64_t(1), ~uint64_t(0)}) {
    for (size_t n : {size_t(0), size_t(1), size_t(255), size_t(256), size_t(257), ptrs.size()}) {
      std::vector<uint64_t> out(n + 1, 0xdead);
      lm_hash64_many(ptrs.data(), lens.data(), n, seed, out.data());
      for (size_t i = 0; i < n; i++)
        ASSERT_EQ(out[i], XXH3_64bits_withSeed(lens[i] ? (const void *)ptrs[i] : (const void *)"", lens[i], seed)) << i << " len " << lens[i];
      ASSERT_EQ(out[n], 0xdeadu);
    }
  }
}

// The checked offsets ops refuse bad pairs (LM_EINVAL) wherever they are, and
// compare strings that end exactly at the end of data (no slack to read words past).
TEST(Ops, CheckedOffsetsOpsRefuseBadPairsAndReadNoFurther) {
  const std::string s = "abcdefghij0123456789abcdefghij";
  std::vector<int32_t> off = {0, 3, 10, 10, 30};
  // data exactly 30 bytes, on the heap so ASan sees a read past it
  std::unique_ptr<uint8_t[]> d(new uint8_t[30]);
  std::memcpy(d.get(), s.data(), 30);
  uint8_t out[4];
  uint64_t h[4];
  lm_exec e{1, 0};
  ASSERT_EQ(lm_o32_prefix_match_checked(off.data(), 4, d.get(), 30, (const uint8_t *)"0123456789ab", 12, out, &e), LM_OK);
  EXPECT_EQ(out[0] + 2 * out[1] + 4 * out[2] + 8 * out[3], 8);
  ASSERT_EQ(lm_o32_equal_scalar_checked(off.data(), 4, d.get(), 30, (const uint8_t *)"0123456789abcdefghij", 20, out,
                                        &e), LM_OK);
  EXPECT_EQ(out[0] + 2 * out[1] + 4 * out[2] + 8 * out[3], 8);
  ASSERT_EQ(lm_o32_equal_checked(off.data(), d.get(), 30, off.data(), d.get(), 30, 4, out, &e), LM_OK);
  EXPECT_EQ(out[0] + out[1] + out[2] + out[3], 4);
  ASSERT_EQ(lm_o32_hash64_checked(off.data(), 4, d.get(), 30, 5, h, &e), LM_OK);
  EXPECT_EQ(h[3], XXH3_64bits_withSeed(s.data() + 10, 20, 5));
  for (auto bad : {std::vector<int32_t>{0, 3, 2, 10, 30}, std::vector<int32_t>{-1, 3, 10, 10, 30},
                   std::vector<int32_t>{0, 3, 10, 10, 31}}) {
    EXPECT_EQ(lm_o32_prefix_match_checked(bad.data(), 4, d.get(), 30, (const uint8_t *)"a", 1, out, &e), LM_EINVAL);
    EXPECT_EQ(lm_o32_equal_scalar_checked(bad.data(), 4, d.get(), 30, (const uint8_t *)"a", 1, out, &e), LM_EINVAL);
    EXPECT_EQ(lm_o32_equal_checked(bad.data(), d.get(), 30, off.data(), d.get(), 30, 4, out, &e), LM_EINVAL);
    EXPECT_EQ(lm_o32_hash64_checked(bad.data(), 4, d.get(), 30, 0, h, &e), LM_EINVAL);
  }
  int32_t past[1] = {31};
  EXPECT_EQ(lm_o32_hash64_checked(past, 0, d.get(), 30, 0, h, &e), LM_EINVAL);
}

// hash64 on blocks of long strings on average (over 16 bytes a string: lines, documents),
// which hash each string in order as its pair is checked: the answers of XXH3 for every
// string (short ones among them, one ending exactly at the end of data, over 240 bytes), and
// a bad pair anywhere -- decreasing, a negative start, past the end, the last one -- is
// LM_EINVAL with nothing read outside data (a heap buffer of exactly its size: ASan).
TEST(Ops, HashOfLongStringBlocksChecksEachPairBeforeReadingIt) {
  std::mt19937_64 rng(31);
  const size_t n = 300;
  std::vector<int64_t> off64(n + 1, 0);
  for (size_t i = 0; i < n; i++) off64[i + 1] = off64[i] + int64_t(i % 7 == 0 ? rng() % 17 : 17 + rng() % 400);
  const size_t len = size_t(off64[n]);
  std::unique_ptr<uint8_t[]> d(new uint8_t[len]);
  for (size_t i = 0; i < len; i++) d[i] = uint8_t(rng());
  std::vector<int32_t> off32(off64.begin(), off64.end());
  std::vector<uint64_t> h(n, 0);
  lm_exec e{1, 0};
  ASSERT_EQ(lm_o64_hash64_checked(off64.data(), n, d.get(), len, 9, h.data(), &e), LM_OK);
  for (size_t i = 0; i < n; i++)
    ASSERT_EQ(h[i], XXH3_64bits_withSeed(d.get() + off64[i], size_t(off64[i + 1] - off64[i]), 9)) << i;
  std::vector<uint64_t> h32(n, 0);
  ASSERT_EQ(lm_o32_hash64_checked(off32.data(), n, d.get(), len, 9, h32.data(), &e), LM_OK);
  ASSERT_EQ(h32, h);
  for (size_t at : {size_t(0), size_t(1), size_t(150), size_t(257), n - 1, n}) {
    for (int kind = 0; kind < 3; kind++) {
      std::vector<int64_t> bad(off64);
      if (kind == 0) bad[at] = at ? bad[at - 1] - 1 : -1;  // decreasing (or a negative start)
      if (kind == 1) bad[at] = -int64_t(at) - 5;             // negative
      if (kind == 2) bad[at] = int64_t(len) + 1 + int64_t(at);  // past the end of data
      std::vector<int32_t> bad32(bad.begin(), bad.end());
      EXPECT_EQ(lm_o64_hash64_checked(bad.data(), n, d.get(), len, 0, h.data(), &e), LM_EINVAL) << at << " " << kind;
      EXPECT_EQ(lm_o32_hash64_checked(bad32.data(), n, d.get(), len, 0, h.data(), &e), LM_EINVAL) << at << " " << kind;
    }
  }
}

// lm_hash64_many, its generic copy and the AVX2 and AVX-512 copies of XXH3-64 (where the CPU
// has them: XXH3's long-input loop on 256- / 512-bit vectors; lm_hash64_any at levels 0 and 2)
// give XXH3_64bits_withSeed bit for bit, on lengths up to several of XXH3's 1 KB blocks and at
// every class edge.
TEST(Hash, BothCopiesMatchXXH3OnLongStrings) {
  std::mt19937_64 rng(12);
  std::vector<uint8_t> bytes(6000);
  for (auto &b : bytes) b = uint8_t(rng());
  std::vector<const uint8_t *> ptrs;
  std::vector<size_t> lens;
  for (size_t len : {0, 1, 3, 4, 8, 9, 16, 17, 128, 129, 240, 241, 1023, 1024, 1025, 2048, 4095, 5000}) {
    ptrs.push_back(len ? bytes.data() + rng() % 900 : nullptr);
    lens.push_back(len);
  }
  for (int i = 0; i < 600; i++) {
    size_t len = size_t(rng() % 5000);
    ptrs.push_back(len ? bytes.data() + rng() % 900 : nullptr);
    lens.push_back(len);
  }
  const size_t n = ptrs.size();
  for (uint64_t seed : {uint64_t(0), uint64_t(7), ~uint64_t(0)}) {
    std::vector<uint64_t> want(n), got(n);
    for (size_t i = 0; i < n; i++)
      want[i] = XXH3_64bits_withSeed(lens[i] ? (const void *)ptrs[i] : (const void *)"", lens[i], seed);
    lm_hash64_many_generic(ptrs.data(), lens.data(), n, seed, got.data());
    for (size_t i = 0; i < n; i++) ASSERT_EQ(got[i], want[i]) << "generic, len " << lens[i];
#if LM_HASH_HAVE_AVX2
    if (__builtin_cpu_supports("avx2")) {
      for (size_t i = 0; i < n; i++) {
        ASSERT_EQ(lm_hash64_avx2(ptrs[i], lens[i], seed), want[i]) << "avx2, len " << lens[i];
      }
    }
    if (__builtin_cpu_supports("avx512f")) {
      for (size_t i = 0; i < n; i++) {
        ASSERT_EQ(lm_hash64_avx512(ptrs[i], lens[i], seed), want[i]) << "avx512, len " << lens[i];
        ASSERT_EQ(lm_hash64_any(ptrs[i], lens[i], seed, 2), want[i]) << "level 2, len " << lens[i];
      }
    }
    for (size_t i = 0; i < n; i++) {
      ASSERT_EQ(lm_hash64_any(ptrs[i], lens[i], seed, 0), want[i]) << "level 0, len " << lens[i];
    }
#endif
    lm_hash64_many(ptrs.data(), lens.data(), n, seed, got.data());
    for (size_t i = 0; i < n; i++) ASSERT_EQ(got[i], want[i]) << "dispatched, len " << lens[i];
  }
}

// equal / equal_scalar on the offsets layout against std::string comparison: every
// length 0..40 over a two-letter alphabet (many near misses), strings ending exactly at
// the end of a heap payload (ASan sees any read past it: the word compares must fall
// back to memcmp there), counts that are not a multiple of 8 or of a 1024 block (the
// candidate gather's tails), one thread and two.
TEST(Ops, OffsetsEqualityMatchesStdStringOnShortStrings) {
  std::mt19937_64 rng(13);
  for (size_t n : {size_t(1), size_t(7), size_t(8), size_t(9), size_t(1023), size_t(1025), size_t(3001)}) {
    std::vector<std::string> a(n), b(n);
    for (size_t i = 0; i < n; i++) {
      const size_t len = size_t(rng() % 41);
      for (size_t k = 0; k < len; k++) a[i] += char('a' + rng() % 2);
      switch (rng() % 3) {
        case 0: b[i] = a[i]; break;  // equal
        case 1: b[i] = a[i]; if (len) b[i][rng() % len] ^= 3; break;  // one byte differs
        default: for (size_t k = 0; k < len; k++) b[i] += char('a' + rng() % 2);  // same length
      }
    }
    auto pack = [](const std::vector<std::string> &v, std::vector<int32_t> &off) {
      off.assign(1, 0);
      std::string all;
      for (auto &x : v) { all += x; off.push_back(int32_t(all.size())); }
      std::unique_ptr<uint8_t[]> d(new uint8_t[all.size() + 1]);  // +1: never 0 bytes
      std::memcpy(d.get(), all.data(), all.size());
      return std::make_pair(std::move(d), all.size());
    };
    std::vector<int32_t> oa, ob;
    auto [da, la] = pack(a, oa);
    auto [db, lb] = pack(b, ob);
    for (int threads : {1, 2}) {
      lm_exec e{threads, 64};
      std::vector<uint8_t> out(n, 7);
      ASSERT_EQ(lm_o32_equal_checked(oa.data(), da.get(), la, ob.data(), db.get(), lb, n, out.data(), &e), LM_OK);
      for (size_t i = 0; i < n; i++) ASSERT_EQ(out[i], a[i] == b[i] ? 1 : 0) << n << " " << i << " " << a[i];
      for (size_t probe : {size_t(0), n / 2, n - 1}) {
        const std::string &p = a[probe];
        std::fill(out.begin(), out.end(), 7);
        ASSERT_EQ(lm_o32_equal_scalar_checked(oa.data(), n, da.get(), la, (const uint8_t *)p.data(), p.size(),
                                              out.data(), &e), LM_OK);
        for (size_t i = 0; i < n; i++) ASSERT_EQ(out[i], a[i] == p ? 1 : 0) << n << " " << i << " probe " << p;
      }
    }
  }
}

// equal_scalar on the offsets layout where few strings have the scalar's length (documents,
// lines): a block of 1024 with fewer than 64 of them finds its candidates eight marks at a time
// and stops at the last one, a block with none is final after the length pass.  Lengths spread
// over 0..2999 (a few of each), a probe length with 0, 1, a few or many (a dense block: the table
// gather) strings, a candidate as the very last string and in a tail of fewer than 8, counts that
// are no multiple of 8 or of a block, int32 and int64 offsets, 1 and 2 threads, against
// std::string comparison.
TEST(Ops, OffsetsEqualScalarFindsSparseCandidates) {
  std::mt19937_64 rng(38);
  for (size_t n : {size_t(5), size_t(1021), size_t(1030), size_t(4099)}) {
    std::vector<std::string> a(n);
    for (size_t i = 0; i < n; i++) {
      const size_t len = i % 97 == 0 ? 777 : size_t(rng() % 3000);  // 777: one string in 97, or more
      for (size_t k = 0; k < len; k++) a[i] += char('a' + rng() % 2);
    }
    a[n - 1] = a[0];                              // the probe's twin is the last string
    if (n > 3) a[n - 2] = std::string(4000, 'x');  // a long one in the tail
    std::vector<int32_t> off32(1, 0);
    std::vector<int64_t> off64(1, 0);
    std::string all;
    for (auto &x : a) {
      all += x;
      off32.push_back(int32_t(all.size()));
      off64.push_back(int64_t(all.size()));
    }
    std::unique_ptr<uint8_t[]> d(new uint8_t[all.size()]);
    std::memcpy(d.get(), all.data(), all.size());
    std::vector<std::string> probes = {a[0], a[n / 2], std::string(777, 'a'), std::string(4000, 'x'),
                                       std::string(3500, 'b'), a[n - 1].substr(0, a[n - 1].size() / 2)};
    for (const auto &p : probes) {
      for (int threads : {1, 2}) {
        lm_exec e{threads, 64};
        std::vector<uint8_t> o1(n, 7), o2(n, 7);
        ASSERT_EQ(lm_o32_equal_scalar_checked(off32.data(), n, d.get(), all.size(), (const uint8_t *)p.data(),
                                              p.size(), o1.data(), &e), LM_OK);
        ASSERT_EQ(lm_o64_equal_scalar_checked(off64.data(), n, d.get(), all.size(), (const uint8_t *)p.data(),
                                              p.size(), o2.data(), &e), LM_OK);
        for (size_t i = 0; i < n; i++) {
          ASSERT_EQ(o1[i], a[i] == p ? 1 : 0) << n << " " << i << " probe of " << p.size() << " bytes";
          ASSERT_EQ(o2[i], a[i] == p ? 1 : 0) << n << " " << i << " probe of " << p.size() << " bytes";
        }
      }
    }
  }
}

// lm_views_compact skips the views of an all-zero 8-byte run of the mask and copies the
// others through a table: random masks (sparse, half, dense) whose non-zero bytes are
// not only 1, counts around multiples of 8, against a plain loop; a cap one short of
// the kept count gives LM_ERANGE with the slots before the last filled in order.
TEST(Ops, ViewsCompactMatchesAPlainLoopOnRandomMasks) {
  std::mt19937_64 rng(14);
  for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(9), size_t(63), size_t(1001)}) {
    std::vector<lm_string_view> v(n);
    for (size_t i = 0; i < n; i++) {
      std::memset(&v[i], 0, sizeof v[i]);
      v[i].len = uint32_t(i);  // a distinct view each
    }
    for (unsigned pct : {2u, 50u, 100u}) {
      std::vector<uint8_t> mask(n + 1);
      std::vector<uint32_t> want;
      for (size_t i = 0; i < n; i++) {
        mask[i] = rng() % 100 < pct ? uint8_t(1u << (rng() % 8)) : 0;
        if (mask[i]) want.push_back(uint32_t(i));
      }
      ASSERT_EQ(lm_mask_count(mask.data(), n), want.size());
      std::vector<lm_string_view> out(want.size() + 1);
      size_t w = 0;
      ASSERT_EQ(lm_views_compact(v.data(), n, mask.data(), out.data(), out.size(), &w), LM_OK);
      ASSERT_EQ(w, want.size());
      for (size_t k = 0; k < w; k++) ASSERT_EQ(out[k].len, want[k]) << n << " " << pct << " " << k;
      if (!want.empty()) {
        std::vector<lm_string_view> small(want.size());  // room for want.size() - 1
        ASSERT_EQ(lm_views_compact(v.data(), n, mask.data(), small.data(), small.size(), &w), LM_ERANGE);
        for (size_t k = 0; k + 1 < small.size(); k++) ASSERT_EQ(small[k].len, want[k]);
      }
    }
  }
}

TEST(Ops, ViewsCompactKeepsMaskedViewsInOrder) {
  std::vector<lm_string_view> v(10);
  for (uint32_t i = 0; i < 10; i++) lm_sv_make(&v[i], (const uint8_t *)"0123456789" + i, 1, 0, 0);
  const uint8_t mask[10] = {1, 0, 0, 1, 1, 0, 0, 0, 0, 1};
  ASSERT_EQ(lm_mask_count(mask, 10), 4u);
  std::vector<lm_string_view> out(5);
  size_t w = 0;
  ASSERT_EQ(lm_views_compact(v.data(), 10, mask, out.data(), 5, &w), LM_OK);
  ASSERT_EQ(w, 4u);
  EXPECT_EQ(out[0].prefix_or_inline[0], '0');
  EXPECT_EQ(out[1].prefix_or_inline[0], '3');
  EXPECT_EQ(out[2].prefix_or_inline[0], '4');
  EXPECT_EQ(out[3].prefix_or_inline[0], '9');
  EXPECT_EQ(lm_views_compact(v.data(), 10, mask, out.data(), 4, &w), LM_ERANGE);  // room for 3 only
}
