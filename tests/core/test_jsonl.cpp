// lm_jsonl_scan: decoded values, statuses (ok / blank / slow / too long), bad arguments.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

extern "C" {
#include "luminamoon/jsonl.h"
}

namespace {

struct Scan {
  std::vector<int8_t> status;
  std::vector<int64_t> ends;
  std::vector<std::string> texts;
};

Scan scan(const std::string &in, int64_t lim = -1, const std::string &key = "text") {
  size_t n = 0;
  const uint8_t *b = reinterpret_cast<const uint8_t *>(in.data());
  EXPECT_EQ(lm_jsonl_count_lines(b, in.size(), &n), LM_OK);
  std::vector<uint8_t> out(in.size() + 1);
  std::vector<int64_t> offs(n + 1), ends(n + 1);
  std::vector<int8_t> st(n + 1);
  size_t ok = 0;
  EXPECT_EQ(lm_jsonl_scan(b, in.size(), reinterpret_cast<const uint8_t *>(key.data()), key.size(), lim, out.data(),
                          offs.data(), ends.data(), st.data(), n, &ok),
            LM_OK);
  Scan s;
  s.status.assign(st.begin(), st.begin() + n);
  s.ends.assign(ends.begin(), ends.begin() + n);
  for (size_t i = 0; i < ok; i++)
    s.texts.emplace_back(reinterpret_cast<const char *>(out.data()) + offs[i], size_t(offs[i + 1] - offs[i]));
  return s;
}

}  // namespace

TEST(Jsonl, DecodesTheKeyAndSkipsOtherValues) {
  Scan s = scan("{\"id\": [1, -2.5e3, {\"a\": null}], \"text\": \"a\\nb\\u00e9\\ud83d\\ude00\\\"\", \"x\": true}\n"
                "{\"text\": \"plain\"}");
  ASSERT_EQ(s.status, (std::vector<int8_t>{LM_JSONL_OK, LM_JSONL_OK}));
  ASSERT_EQ(s.texts.size(), 2u);
  EXPECT_EQ(s.texts[0], "a\nb\xc3\xa9\xf0\x9f\x98\x80\"");
  EXPECT_EQ(s.texts[1], "plain");
  EXPECT_EQ(s.ends[1], 0 + static_cast<int64_t>(
                               std::string("{\"id\": [1, -2.5e3, {\"a\": null}], \"text\": \"a\\nb\\u00e9\\ud83d\\ude00"
                                           "\\\"\", \"x\": true}\n{\"text\": \"plain\"}")
                                   .size()));
}

TEST(Jsonl, HandsUnusualLinesToTheExactParser) {
  const char *slow[] = {"{\"text\": 1}", "{\"id\": 1}", "[1]", "{\"text\": \"a\",}", "{\"text\": \"\\ud800\"}",
                        "{\"text\": \"a\", \"text\": \"b\"}", "{\"t\\u0065xt\": \"a\"}", "{\"text\": \"a\"} x",
                        "{\"text\": \"a\", \"n\": NaN}", "{\"text\": \"a\x01\"}", "{\"text\": \"\xff\"}",
                        "{\"text\": \"\xed\xa0\x80\"}", "\xef\xbb\xbf{\"text\": \"a\"}", "{\"text\": \"a\", \"n\": 01}",
                        "{\"text\": \"a\", \"n\": 1.}", "{\"text\": \"a\\x\"}", "{\"text\": \"a"};
  for (const char *line : slow) {
    Scan s = scan(std::string(line) + "\n");
    ASSERT_EQ(s.status.size(), 1u) << line;
    EXPECT_EQ(s.status[0], LM_JSONL_SLOW) << line;
    EXPECT_TRUE(s.texts.empty()) << line;
  }
  std::string deep = "{\"text\": \"a\", \"d\": " + std::string(100, '[') + std::string(100, ']') + "}";
  EXPECT_EQ(scan(deep).status[0], LM_JSONL_SLOW);
}

TEST(Jsonl, BlankAndTooLongLines) {
  Scan s = scan("  \t\r\n\n{\"text\": \"abcdef\"}\r\n{\"text\": \"ab\"}\n", 15);
  ASSERT_EQ(s.status, (std::vector<int8_t>{LM_JSONL_BLANK, LM_JSONL_BLANK, LM_JSONL_TOO_LONG, LM_JSONL_OK}));
  ASSERT_EQ(s.texts, (std::vector<std::string>{"ab"}));
  // the limit counts the line without its ending: 16 bytes fit a limit of 16
  EXPECT_EQ(scan("{\"text\": \"abcd\"}\r\n", 16).status[0], LM_JSONL_OK);
  EXPECT_EQ(scan("{\"text\": \"abcd\"}\r\n", 15).status[0], LM_JSONL_TOO_LONG);
}

TEST(Jsonl, BadArguments) {
  size_t n = 0, ok = 0;
  uint8_t out[8];
  int64_t offs[4], ends[4];
  int8_t st[4];
  const uint8_t *k = reinterpret_cast<const uint8_t *>("text");
  EXPECT_EQ(lm_jsonl_count_lines(nullptr, 3, &n), LM_EINVAL);
  EXPECT_EQ(lm_jsonl_count_lines(nullptr, 0, &n), LM_OK);
  EXPECT_EQ(n, 0u);
  const uint8_t *b = reinterpret_cast<const uint8_t *>("a\nb\n");
  EXPECT_EQ(lm_jsonl_scan(b, 4, k, 4, -1, out, offs, ends, st, 1, &ok), LM_EINVAL);  // two lines, room for one
  EXPECT_EQ(lm_jsonl_scan(b, 4, k, 0, -1, out, offs, ends, st, 4, &ok), LM_EINVAL);
  EXPECT_EQ(lm_jsonl_scan(b, 4, nullptr, 4, -1, out, offs, ends, st, 4, &ok), LM_EINVAL);
  EXPECT_EQ(lm_jsonl_scan(b, 4, k, 4, -1, nullptr, offs, ends, st, 4, &ok), LM_EINVAL);
  EXPECT_EQ(lm_jsonl_scan(b, 4, k, 4, -1, out, offs, ends, st, 4, &ok), LM_OK);
  EXPECT_EQ(ok, 0u);
}

TEST(Jsonl, OnlyJsonWhitespaceBeforeTheObject) {
  // found by fuzz_jsonl: a line "\v{...}" was decoded, but json.loads refuses a leading \v or \f
  EXPECT_EQ(scan("\x0b{\"text\": \"a\"}\n").status[0], LM_JSONL_SLOW);
  EXPECT_EQ(scan("\x0c{\"text\": \"a\"}\n").status[0], LM_JSONL_SLOW);
  EXPECT_EQ(scan(" \t{\"text\": \"a\"}\n").status[0], LM_JSONL_OK);
}

namespace {

struct Scan2 {
  Scan one;                         // what lm_jsonl_scan2 gives for the text key
  std::vector<int> ok2;             // per OK line
  std::vector<std::string> values;  // per OK line (empty where ok2 is 0)
};

// lm_jsonl_scan2 with outputs sized exactly (ASan sees any write past them)
Scan2 scan2(const std::string &in, const std::string &key2, const std::string &key = "text") {
  size_t n = 0;
  const uint8_t *b = reinterpret_cast<const uint8_t *>(in.data());
  EXPECT_EQ(lm_jsonl_count_lines(b, in.size(), &n), LM_OK);
  std::vector<uint8_t> out(in.size() ? in.size() : 1), out2(in.size() ? in.size() : 1);
  std::vector<int64_t> offs(n + 1), offs2(n + 1), ends(n ? n : 1);
  std::vector<int8_t> st(n ? n : 1), ok2(n ? n : 1);
  size_t ok = 0;
  EXPECT_EQ(lm_jsonl_scan2(b, in.size(), reinterpret_cast<const uint8_t *>(key.data()), key.size(),
                           reinterpret_cast<const uint8_t *>(key2.data()), key2.size(), -1, out.data(), offs.data(),
                           out2.data(), offs2.data(), ok2.data(), ends.data(), st.data(), n, &ok),
            LM_OK);
  Scan2 s;
  s.one.status.assign(st.begin(), st.begin() + n);
  s.one.ends.assign(ends.begin(), ends.begin() + n);
  for (size_t i = 0; i < ok; i++) {
    s.one.texts.emplace_back(reinterpret_cast<const char *>(out.data()) + offs[i], size_t(offs[i + 1] - offs[i]));
    s.ok2.push_back(ok2[i]);
    if (!ok2[i]) {
      EXPECT_EQ(offs2[i + 1], offs2[i]);
    }
    s.values.emplace_back(reinterpret_cast<const char *>(out2.data()) + offs2[i], size_t(offs2[i + 1] - offs2[i]));
  }
  return s;
}

}  // namespace

TEST(Jsonl, SecondKeyDecodedInTheSamePass) {
  const std::string in =
      "{\"id\": \"a\\u00e9\\\"b\", \"text\": \"t1\"}\n"                   // escapes
      "{\"text\": \"t2\"}\n"                                                // no id
      "{\"id\": 7, \"text\": \"t3\"}\n"                                     // not a string
      "{\"id\": \"x\", \"text\": \"t4\", \"id\": \"y\"}\n"                  // twice
      "{\"id\": \"\\ud800\", \"text\": \"t5\"}\n"                           // lone surrogate: valid JSON
      "{\"m\": {\"id\": \"n\"}, \"text\": \"t6\", \"id\": \"\xc3\xa9z\"}\n"  // nested id is not the id
      "{\"id\": \"q\", \"text\": 1}\n"                                      // text not a string: SLOW
      "{\"id\": \"\\q\", \"text\": \"t8\"}\n"                               // bad escape in id: SLOW
      "\n"
      "{\"id\": \"0123456789012345678901234567890123456789\", \"text\": \"t10\"}";
  Scan2 s = scan2(in, "id");
  Scan plain = scan(in);
  EXPECT_EQ(s.one.status, plain.status);
  EXPECT_EQ(s.one.ends, plain.ends);
  EXPECT_EQ(s.one.texts, plain.texts);
  ASSERT_EQ(s.ok2, (std::vector<int>{1, 0, 0, 0, 0, 1, 1}));
  EXPECT_EQ(s.values[0], "a\xc3\xa9\"b");
  EXPECT_EQ(s.values[5], "\xc3\xa9z");
  EXPECT_EQ(s.values[6], "0123456789012345678901234567890123456789");
  EXPECT_EQ(s.one.status[6], LM_JSONL_SLOW);
  EXPECT_EQ(s.one.status[7], LM_JSONL_SLOW);
  // the same key twice over: never decoded as the second key
  Scan2 same = scan2(in, "text");
  EXPECT_EQ(same.one.texts, plain.texts);
  for (int v : same.ok2) EXPECT_EQ(v, 0);
}

TEST(Jsonl, SecondKeyLongValuesAtEveryLength) {
  // values of 0..80 bytes (the 32-byte AVX2 loads and their stores at every offset) in lines
  // of several shapes, outputs sized exactly
  for (int len = 0; len <= 80; len++) {
    std::string v, t;
    for (int i = 0; i < len; i++) v += char('a' + i % 26);
    for (int i = 0; i < 80 - len; i++) t += char('A' + i % 26);
    const std::string in = "{\"id\":\"" + v + "\",\"text\":\"" + t + "\"}\n{\"text\":\"" + t + "\",\"id\":\"" + v +
                           "\"}\n{\"id\":\"" + v + "\",\"text\":\"\"}";
    Scan2 s = scan2(in, "id");
    ASSERT_EQ(s.ok2, (std::vector<int>{1, 1, 1})) << len;
    for (int k = 0; k < 3; k++) EXPECT_EQ(s.values[k], v) << len;
    EXPECT_EQ(s.one.texts, scan(in).texts) << len;
  }
}

TEST(Jsonl, SecondKeyBadArguments) {
  const std::string in = "{\"text\": \"a\"}";
  const uint8_t *b = reinterpret_cast<const uint8_t *>(in.data());
  std::vector<uint8_t> out(in.size()), out2(in.size());
  std::vector<int64_t> offs(2), offs2(2), ends(1);
  std::vector<int8_t> st(1), ok2(1);
  size_t ok = 0;
  const uint8_t *k = reinterpret_cast<const uint8_t *>("text"), *k2 = reinterpret_cast<const uint8_t *>("id");
  EXPECT_EQ(lm_jsonl_scan2(b, in.size(), k, 4, k2, 0, -1, out.data(), offs.data(), out2.data(), offs2.data(),
                           ok2.data(), ends.data(), st.data(), 1, &ok),
            LM_EINVAL);
  EXPECT_EQ(lm_jsonl_scan2(b, in.size(), k, 4, k2, 2, -1, out.data(), offs.data(), nullptr, offs2.data(), ok2.data(),
                           ends.data(), st.data(), 1, &ok),
            LM_EINVAL);
  EXPECT_EQ(lm_jsonl_scan2(b, in.size(), k, 4, k2, 2, -1, out.data(), offs.data(), out2.data(), nullptr, ok2.data(),
                           ends.data(), st.data(), 1, &ok),
            LM_EINVAL);
  EXPECT_EQ(lm_jsonl_scan2(b, in.size(), k, 4, k2, 2, -1, out.data(), offs.data(), out2.data(), offs2.data(), nullptr,
                           ends.data(), st.data(), 1, &ok),
            LM_EINVAL);
  EXPECT_EQ(lm_jsonl_scan2(b, in.size(), k, 4, nullptr, 0, -1, out.data(), offs.data(), nullptr, nullptr, nullptr,
                           ends.data(), st.data(), 1, &ok),
            LM_OK);
  EXPECT_EQ(ok, 1u);
}
