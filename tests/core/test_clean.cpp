// TextCleaner tests: UTF-8 repair (maximal subparts), controls, spaces, blank lines, NFC/NFKC,
// empty and huge documents, batch thread-count invariance.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include <utf8proc.h>

extern "C" {
#include "luminamoon/clean.h"
}

namespace {

const std::string FFFD = "\xEF\xBF\xBD";

std::string clean(const std::string &in, const lm_cleaner_params *p = nullptr, int32_t *reason = nullptr,
                  lm_clean_counters *cnt = nullptr) {
  lm_cleaner *c = nullptr;
  EXPECT_EQ(lm_cleaner_create(p, &c), LM_OK);
  std::vector<uint8_t> out(lm_clean_bound(in.size()) + 1);
  size_t n = 0;
  int32_t r = -1;
  lm_status st = lm_clean_text(c, (const uint8_t *)in.data(), in.size(), out.data(), out.size(), &n, &r, cnt);
  if (st == LM_ERANGE) {
    out.resize(n);
    st = lm_clean_text(c, (const uint8_t *)in.data(), in.size(), out.data(), out.size(), &n, &r, cnt);
  }
  EXPECT_EQ(st, LM_OK);
  lm_cleaner_destroy(c);
  if (reason) *reason = r;
  return std::string((const char *)out.data(), n);
}

lm_cleaner_params raw_params() {  // only UTF-8 repair
  lm_cleaner_params p;
  lm_cleaner_params_default(&p);
  p.remove_control = p.fold_spaces = p.collapse_spaces = p.trim_trailing = p.normalize_newlines = 0;
  p.max_blank_lines = -1;
  p.drop_empty = 0;
  return p;
}

}  // namespace

TEST(Clean, ValidUtf8Unchanged) {
  lm_cleaner_params p = raw_params();
  std::string s = "plain ascii, \xC3\xA9t\xC3\xA9, \xE2\x82\xAC, \xF0\x9F\x98\x80 done";
  EXPECT_EQ(clean(s, &p), s);
}

TEST(Clean, UnicodeStandardMaximalSubpartExample) {
  // The Unicode Standard, ch. 3 ("U+FFFD substitution of maximal subparts"):
  // 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 -> a FFFD FFFD FFFD b FFFD c FFFD FFFD d
  lm_cleaner_params p = raw_params();
  lm_clean_counters cnt{};
  std::string in = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  EXPECT_EQ(clean(in, &p, nullptr, &cnt), "a" + FFFD + FFFD + FFFD + "b" + FFFD + "c" + FFFD + FFFD + "d");
  EXPECT_EQ(cnt.invalid_sequences, 6u);
}

TEST(Clean, OverlongSurrogatesAndOutOfRange) {
  lm_cleaner_params p = raw_params();
  // overlong '/' (C0 AF): C0 and AF are each ill-formed
  EXPECT_EQ(clean("\xC0\xAF", &p), FFFD + FFFD);
  // overlong 3-byte (E0 80 AF): E0 cannot be followed by 80 -> three replacements
  EXPECT_EQ(clean("\xE0\x80\xAF", &p), FFFD + FFFD + FFFD);
  // surrogate U+D800 (ED A0 80): ED may not be followed by A0
  EXPECT_EQ(clean("\xED\xA0\x80", &p), FFFD + FFFD + FFFD);
  // above U+10FFFF (F4 90 80 80) and F5..FF lead bytes
  EXPECT_EQ(clean("\xF4\x90\x80\x80", &p), FFFD + FFFD + FFFD + FFFD);
  EXPECT_EQ(clean("\xF5\xFF", &p), FFFD + FFFD);
  // truncated sequences at the end: one replacement for the maximal subpart
  EXPECT_EQ(clean("x\xF0\x9F\x98", &p), "x" + FFFD);
  EXPECT_EQ(clean("x\xE2\x82", &p), "x" + FFFD);
  // lone continuation bytes
  EXPECT_EQ(clean("\x80\x80", &p), FFFD + FFFD);
  // highest valid code points stay
  EXPECT_EQ(clean("\xF4\x8F\xBF\xBF\xED\x9F\xBF", &p), "\xF4\x8F\xBF\xBF\xED\x9F\xBF");
}

TEST(Clean, ControlCharactersAndNul) {
  lm_clean_counters cnt{};
  static const char raw[] = "a\0b\x01" "c\td\x7F" "e\xC2\x80" "f\xC2\x9F" "g";
  std::string in(raw, sizeof raw - 1);
  EXPECT_EQ(clean(in, nullptr, nullptr, &cnt), "abc\tdefg");
  EXPECT_EQ(cnt.control_removed, 5u);
  lm_cleaner_params p;
  lm_cleaner_params_default(&p);
  p.remove_control = 0;
  EXPECT_EQ(clean(std::string("a\0b", 3), &p), std::string("a\0b", 3));
}

TEST(Clean, Newlines) {
  EXPECT_EQ(clean("a\r\nb\rc\xC2\x85" "d\xE2\x80\xA8" "e"), "a\nb\nc\nd\ne");
}

TEST(Clean, UnicodeSpacesFoldedAndCollapsed) {
  lm_clean_counters cnt{};
  // NBSP, EN SPACE, IDEOGRAPHIC SPACE, NARROW NBSP
  EXPECT_EQ(clean("a\xC2\xA0" "b\xE2\x80\x82\xE3\x80\x80" "c\xE2\x80\xAF" "d", nullptr, nullptr, &cnt), "a b c d");
  EXPECT_EQ(cnt.spaces_folded, 4u);
  EXPECT_EQ(clean("a    b  c"), "a b c");
  EXPECT_EQ(clean("  lead"), " lead");
  // zero-width space is not a space (Cf): kept
  EXPECT_EQ(clean("a\xE2\x80\x8B" "b"), "a\xE2\x80\x8B" "b");
  lm_cleaner_params p;
  lm_cleaner_params_default(&p);
  p.collapse_spaces = 0;
  EXPECT_EQ(clean("a    b", &p), "a    b");
}

TEST(Clean, TrailingSpacesTrimmedPerLine) {
  EXPECT_EQ(clean("one  \t \ntwo\t\nthree   "), "one\ntwo\nthree");
  EXPECT_EQ(clean("x \xC2\xA0\n"), "x\n");
}

TEST(Clean, BlankLineRunsCollapsed) {
  EXPECT_EQ(clean("a\n\nb"), "a\n\nb");
  EXPECT_EQ(clean("a\n\n\nb"), "a\n\n\nb");           // two blank lines: kept
  EXPECT_EQ(clean("a\n\n\n\n\n\nb"), "a\n\n\nb");     // five blank lines -> two
  EXPECT_EQ(clean("a\n  \n \t\n\n\n b"), "a\n\n\n b");  // whitespace-only lines are blank
  lm_cleaner_params p;
  lm_cleaner_params_default(&p);
  p.max_blank_lines = 0;
  EXPECT_EQ(clean("a\n\n\nb\nc", &p), "a\nb\nc");
}

TEST(Clean, Normalization) {
  lm_cleaner_params p;
  lm_cleaner_params_default(&p);
  std::string decomposed = "e\xCC\x81";  // e + COMBINING ACUTE
  EXPECT_EQ(clean(decomposed), decomposed);
  p.normalize = LM_NORM_NFC;
  EXPECT_EQ(clean(decomposed, &p), "\xC3\xA9");
  EXPECT_EQ(clean("\xEF\xAC\x81", &p), "\xEF\xAC\x81");  // NFC keeps the fi ligature
  p.normalize = LM_NORM_NFKC;
  EXPECT_EQ(clean("\xEF\xAC\x81", &p), "fi");                // NFKC expands it
  EXPECT_EQ(clean("\xEF\xBC\xA1\xEF\xBC\xA2", &p), "AB");    // fullwidth -> ASCII
  // invalid input is repaired before normalization
  EXPECT_EQ(clean("\xFF" "e\xCC\x81", &p), FFFD + "\xC3\xA9");
}

TEST(Clean, EmptyDocuments) {
  int32_t r = -1;
  EXPECT_EQ(clean("", nullptr, &r), "");
  EXPECT_EQ(r, LM_REASON_EMPTY);
  clean(" \n\t\x01\n  \xC2\xA0", nullptr, &r);
  EXPECT_EQ(r, LM_REASON_EMPTY);
  clean("x", nullptr, &r);
  EXPECT_EQ(r, LM_REASON_KEPT);
  lm_cleaner_params p;
  lm_cleaner_params_default(&p);
  p.drop_empty = 0;
  clean("", &p, &r);
  EXPECT_EQ(r, LM_REASON_KEPT);
}

TEST(Clean, BadArguments) {
  lm_cleaner *c = nullptr;
  EXPECT_EQ(lm_cleaner_create(nullptr, nullptr), LM_EINVAL);
  lm_cleaner_params p;
  lm_cleaner_params_default(&p);
  p.normalize = (lm_normalization)7;
  EXPECT_EQ(lm_cleaner_create(&p, &c), LM_EINVAL);
  ASSERT_EQ(lm_cleaner_create(nullptr, &c), LM_OK);
  size_t n = 0;
  uint8_t buf[4];
  EXPECT_EQ(lm_clean_text(c, nullptr, 3, buf, 4, &n, nullptr, nullptr), LM_EINVAL);
  EXPECT_EQ(lm_clean_text(c, (const uint8_t *)"abcdef", 6, buf, 4, &n, nullptr, nullptr), LM_ERANGE);
  EXPECT_GE(n, 6u);
  EXPECT_EQ(lm_cleaner_run(c, nullptr, nullptr, nullptr), LM_EINVAL);
  lm_cleaner_destroy(c);
  lm_cleaner_destroy(nullptr);
}

TEST(Clean, TooLarge) {
  lm_cleaner_params p;
  lm_cleaner_params_default(&p);
  p.max_doc_bytes = 4;
  int32_t r = -1;
  clean("12345", &p, &r);
  EXPECT_EQ(r, LM_REASON_TOO_LARGE);
  clean("1234", &p, &r);
  EXPECT_EQ(r, LM_REASON_KEPT);
}

TEST(Clean, HundredMegabyteDocument) {
  const size_t n = 100u << 20;
  std::string big;
  big.reserve(n);
  const std::string unit = "word  \xC2\xA0 \xFF text\r\n";  // 17 bytes
  while (big.size() + unit.size() <= n) big += unit;
  size_t units = big.size() / unit.size();
  lm_clean_counters cnt{};
  int32_t r = -1;
  std::string out = clean(big, nullptr, &r, &cnt);
  EXPECT_EQ(r, LM_REASON_KEPT);
  std::string cu = "word " + FFFD + " text\n";
  ASSERT_EQ(out.size(), units * cu.size());
  EXPECT_EQ(out.substr(0, cu.size()), cu);
  EXPECT_EQ(cnt.invalid_sequences, units);
}

static std::string batch_run(lm_cleaner *c, const std::vector<std::string> &docs, int threads,
                             std::vector<int32_t> *reasons) {
  std::vector<int64_t> offs{0};
  std::string data;
  for (auto &d : docs) {
    data += d;
    offs.push_back((int64_t)data.size());
  }
  lm_docs in{offs.data(), (const uint8_t *)data.data(), docs.size(), data.size()};
  lm_batch_result r;
  lm_batch_result_init(&r);
  lm_exec ex{threads, 1};
  EXPECT_EQ(lm_cleaner_run(c, &in, &r, &ex), LM_OK);
  std::string flat;
  for (size_t i = 0; i < r.n_out; i++) {
    flat += std::to_string(r.source_index[i]) + ":";
    flat.append((const char *)r.data + r.offsets[i], (size_t)(r.offsets[i + 1] - r.offsets[i]));
    flat += "|";
  }
  reasons->assign(r.reasons, r.reasons + r.n_in);
  lm_batch_result_free(&r);
  return flat;
}

TEST(Clean, BatchMatchesPerDocumentAndThreadInvariant) {
  std::vector<std::string> docs;
  for (int i = 0; i < 3000; i++) {
    switch (i % 5) {
      case 0: docs.push_back("doc " + std::to_string(i) + "  \xC2\xA0 x\n\n\n\n\ny"); break;
      case 1: docs.push_back(""); break;
      case 2: docs.push_back(std::string("bad\xC3(\x00", 6) + std::to_string(i)); break;
      case 3: docs.push_back(" \n "); break;
      default: docs.push_back(std::string(i % 700, 'a') + "\r\n"); break;
    }
  }
  lm_cleaner *c = nullptr;
  ASSERT_EQ(lm_cleaner_create(nullptr, &c), LM_OK);
  std::vector<int32_t> r1, r4;
  std::string one = batch_run(c, docs, 1, &r1);
  std::string four = batch_run(c, docs, 4, &r4);
  EXPECT_EQ(one, four);
  EXPECT_EQ(r1, r4);
  // batch == per-document
  std::string ref;
  for (size_t i = 0; i < docs.size(); i++) {
    int32_t r;
    std::string o = clean(docs[i], nullptr, &r);
    EXPECT_EQ(r, r1[i]);
    if (r == LM_REASON_KEPT) ref += std::to_string(i) + ":" + o + "|";
  }
  EXPECT_EQ(one, ref);
  lm_clean_counters cnt;
  lm_cleaner_get_counters(c, &cnt);
  EXPECT_EQ(cnt.docs_in, 2 * docs.size());
  EXPECT_EQ(cnt.docs_empty, 2u * 2 * 600);
  lm_cleaner_destroy(c);
}

// Issue 21.1: NFC / NFKC no longer go through utf8proc_map (its canonical reordering swaps
// neighbours: quadratic in a run of combining marks); the output must stay utf8proc_map's,
// byte for byte.  Random strings of starters, marks of many classes (runs up to 300 long,
// out of order), Hangul jamo, compatibility characters and ill-formed bytes.
TEST(Clean, NormalizationEqualsUtf8procMap) {
  static const char *const pieces[] = {
      "a", "e", "A", " ", "\n", "\xCC\x81", "\xCC\x96", "\xCC\x88", "\xCC\xA3", "\xCD\x85", "\xD6\xB0",
      "\xD9\x8B", "\xE0\xA4\xBC", "\xE0\xBD\xB1", "\xE0\xBD\xB2", "\xE3\x82\x99", "\xE1\xB7\x8E",
      "\xF0\x9D\x85\xA5", "\xC3\xA9", "\xC3\x85", "\xE2\x84\xAB", "\xE1\xBA\x9B", "\xEA\xB0\x80",
      "\xE1\x84\x80", "\xE1\x85\xA1", "\xE1\x86\xA8", "\xEF\xAC\x81", "\xEF\xB7\xBA", "\xE2\x91\xA0",
      "\xC2\xBD", "\xEF\xBC\xA1", "\xE3\x8C\x80", "\xCD\x84", "\xE0\xBD\xB3", "\xE3\x81\x8B",
      "\xFF", "\xC0\xAF", "\xED\xA0\x80", "\xE2\x82"};
  const size_t np = sizeof pieces / sizeof *pieces;
  std::mt19937 rng(21);
  lm_cleaner_params p = raw_params();
  for (int form = 1; form <= 2; form++) {
    p.normalize = (lm_normalization)form;
    for (int it = 0; it < 3000; it++) {
      std::string in;
      size_t len = 1 + rng() % (it % 10 == 0 ? 300 : 30);
      for (size_t k = 0; k < len; k++) in += pieces[rng() % (it % 3 == 0 ? 12 : np)];
      std::string repaired = clean(in, [] {
        static lm_cleaner_params r = raw_params();
        return &r;
      }());
      utf8proc_uint8_t *want = nullptr;
      int opts = UTF8PROC_STABLE | UTF8PROC_COMPOSE | (form == 2 ? UTF8PROC_COMPAT : 0);
      utf8proc_ssize_t wl = utf8proc_map((const utf8proc_uint8_t *)repaired.data(), (utf8proc_ssize_t)repaired.size(),
                                         &want, (utf8proc_option_t)opts);
      ASSERT_GE(wl, 0);
      lm_clean_counters cnt{};
      std::string got = clean(in, &p, nullptr, &cnt);
      std::string w((const char *)want, (size_t)wl);
      free(want);
      ASSERT_EQ(got, w) << "form " << form << " iteration " << it;
      EXPECT_EQ(cnt.docs_normalized, w != repaired ? 1u : 0u);
    }
  }
}

// A run of 400,000 marks out of canonical order (a + (U+0301 U+0316) * 200000): sorted per
// run (linear) rather than by neighbour swaps (4e10 swaps).  The expected text is built here.
TEST(Clean, LongRunOfCombiningMarksIsSortedNotSwapped) {
  const size_t k = 200000;
  std::string in = "a";
  for (size_t i = 0; i < k; i++) in += "\xCC\x81\xCC\x96";
  lm_cleaner_params p = raw_params();
  p.normalize = LM_NORM_NFC;
  // NFC: the first U+0301 (class 230) composes with a (U+00E1) once the k U+0316 (class
  // 220) come first; the other k-1 U+0301 follow.
  std::string want = "\xC3\xA1";
  for (size_t i = 0; i < k; i++) want += "\xCC\x96";
  for (size_t i = 1; i < k; i++) want += "\xCC\x81";
  EXPECT_EQ(clean(in, &p), want);
  p.normalize = LM_NORM_NFKC;
  EXPECT_EQ(clean(in, &p), want);
}

// ---- regression (review of the size limits, issue 8)
#include "address_limit.h"

// lm_cleaner_run reserved lm_clean_bound(len) = 3 x len bytes of output for every document
// BEFORE lm_clean_text refused it for max_doc_bytes, so a 64 MiB document "refused" at 1 KiB
// still cost 192 MiB.  Reproduced in a child process whose address space leaves ~96 MiB of room
// beyond the input and the result (plain build only: see address_limit.h).  Fix:
// core/src/clean.c reserves nothing for a document above the limit.
TEST(Clean, RefusesOversizedDocumentWithoutReservingForIt) {
  lm_cleaner_params p;
  ASSERT_EQ(lm_cleaner_params_default(&p), LM_OK);
  p.max_doc_bytes = 1024;
  lm_cleaner *c = nullptr;
  ASSERT_EQ(lm_cleaner_create(&p, &c), LM_OK);
  expect_oversized_document_refused_without_reserving(
      [&](const lm_docs *in, lm_batch_result *r) { return lm_cleaner_run(c, in, r, nullptr); });
  lm_cleaner_destroy(c);
}
