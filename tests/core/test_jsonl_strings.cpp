// lm_jsonl_scan's string runs (jl_string reads 8 bytes at a time while none ends the plain
// ASCII run): strings of 0..300 bytes built from tokens whose decoding is known (plain ASCII,
// escapes, 2-4 byte UTF-8, DEL; and bytes that must send the line to the exact parser: raw
// control characters, invalid UTF-8), with the special token at every position, the line
// at every alignment and ending exactly at a page whose successor is unmapped (a read past
// the buffer faults here, and ASan catches it in the sanitizer build); also lines cut inside
// the string at every length (never OK, never read past the end).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include "luminamoon/jsonl.h"
}

namespace {

struct Token {
  std::string json, decoded;
  bool ok;  // false: the scanner must give the line to the exact parser
};

const std::vector<Token> &tokens() {
  static const std::vector<Token> t = {
      {"a", "a", true},           {"Z", "Z", true},           {" ", " ", true},
      {"~", "~", true},           {"\x7f", "\x7f", true},     {"\\\"", "\"", true},
      {"\\\\", "\\", true},       {"\\n", "\n", true},        {"\\/", "/", true},
      {"\\u00e9", "\xc3\xa9", true}, {"\xc3\xa9", "\xc3\xa9", true}, {"\xe2\x82\xac", "\xe2\x82\xac", true},
      {"\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80", true},
      {"\x01", "", false},        {"\x1f", "", false},        {"\t", "", false},
      {"\xff", "", false},        {"\x80", "", false},        {"\xc3" "a", "", false},
      {"\xed\xa0\x80", "", false},
  };
  return t;
}

// A buffer of `len` bytes ending exactly at the end of a mapped page followed by an unmapped one.
struct Guarded {
  uint8_t *base = nullptr;
  size_t map = 0;
  uint8_t *at(size_t len) {
    size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    size_t need = (len + page - 1) / page * page + page;
    if (need > map) {
      if (base) munmap(base, map);
      void *p = mmap(nullptr, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      EXPECT_NE(p, MAP_FAILED);
      base = static_cast<uint8_t *>(p);
      map = need;
      EXPECT_EQ(mprotect(base + map - page, page, PROT_NONE), 0);
    }
    return base + (map - static_cast<size_t>(sysconf(_SC_PAGESIZE))) - len;
  }
  ~Guarded() {
    if (base) munmap(base, map);
  }
};

// Scans `line` placed at the very end of the guarded buffer; returns the status and the text.
int8_t scan_at_end(Guarded &g, const std::string &line, std::string *text) {
  uint8_t *b = g.at(line.size());
  memcpy(b, line.data(), line.size());
  size_t n = 0;
  EXPECT_EQ(lm_jsonl_count_lines(b, line.size(), &n), LM_OK);
  EXPECT_EQ(n, 1u);
  std::vector<uint8_t> out(line.size() + 1);
  std::vector<int64_t> offs(2), ends(1);
  std::vector<int8_t> st(1);
  size_t ok = 0;
  EXPECT_EQ(lm_jsonl_scan(b, line.size(), reinterpret_cast<const uint8_t *>("text"), 4, -1, out.data(), offs.data(),
                          ends.data(), st.data(), 1, &ok),
            LM_OK);
  EXPECT_EQ(ends[0], static_cast<int64_t>(line.size()));
  if (ok == 1) text->assign(reinterpret_cast<const char *>(out.data()), static_cast<size_t>(offs[1]));
  return st[0];
}

}  // namespace

TEST(JsonlStrings, EveryLengthPositionAndAlignmentAtAPageEnd) {
  Guarded g;
  std::mt19937 rng(7);
  const auto &tk = tokens();
  size_t plain = 0;
  while (tk[plain].json.size() == 1 && tk[plain].ok) plain++;  // the single-byte plain ASCII tokens
  for (size_t len = 0; len <= 300; len++) {
    for (size_t special = 0; special < tk.size(); special++) {
      // `len` plain bytes with the special token before byte len % 37
      std::string json, want;
      bool ok = tk[special].ok;
      for (size_t i = 0; i <= len; i++) {
        if (i == len % 37) {
          json += tk[special].json;
          want += tk[special].decoded;
        }
        if (i == len) break;
        const Token &p = tk[rng() % plain];
        json += p.json;
        want += p.decoded;
      }
      for (size_t align = 0; align < 8; align++) {
        std::string pad(align, ' ');
        for (const char *tail : {"\"}", "\", \"id\": 1}", "\"}\n", "\"}\r\n"}) {
          std::string line = "{" + pad + "\"text\": \"" + json + tail;
          std::string got;
          int8_t st = scan_at_end(g, line, &got);
          ASSERT_EQ(st, ok ? LM_JSONL_OK : LM_JSONL_SLOW) << "len " << len << " special " << special;
          if (ok) {
            ASSERT_EQ(got, want) << "len " << len << " special " << special << " align " << align;
          }
        }
      }
      // the line cut inside the string, at every length: never OK, never a read past the end
      std::string line = "{\"text\": \"" + json;
      for (size_t cut = 10; cut <= line.size(); cut += 1 + (line.size() > 100 ? 3 : 0)) {
        std::string got;
        EXPECT_EQ(scan_at_end(g, line.substr(0, cut), &got), LM_JSONL_SLOW);
      }
    }
  }
}

TEST(JsonlStrings, RandomTokenStrings) {
  Guarded g;
  std::mt19937 rng(11);
  const auto &tk = tokens();
  for (int round = 0; round < 20000; round++) {
    size_t n = rng() % 120;
    std::string json, want;
    bool ok = true;
    for (size_t i = 0; i < n; i++) {
      // mostly plain text (long runs), sometimes any token
      const Token &t = (rng() % 8) ? tk[rng() % 4] : tk[rng() % tk.size()];
      json += t.json;
      want += t.decoded;
      ok = ok && t.ok;
    }
    std::string line = "{\"id\": \"" + json.substr(0, rng() % 3 ? 0 : json.size()) + "x\", \"text\": \"" + json + "\"}";
    std::string got;
    int8_t st = scan_at_end(g, line, &got);
    ASSERT_EQ(st, ok ? LM_JSONL_OK : LM_JSONL_SLOW) << line;
    if (ok) {
      ASSERT_EQ(got, want) << line;
    }
  }
}
