// QualityFilter tests: every rule positive and negative, the English word tokenizer against
// outputs of spaCy's tokenizer (the reference), C4's line removal, batch thread invariance.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

extern "C" {
#include "luminamoon/quality.h"
#include "../../core/src/quality_internal.h"  // lmq_debug_unit_scans (a work counter)
}

namespace {

struct Q {
  lm_quality *q = nullptr;
  lm_quality_scratch *s = nullptr;
  explicit Q(int only_rule, void (*tweak)(lm_quality_params *) = nullptr) {
    lm_quality_params p;
    lm_quality_params_default(&p);
    if (only_rule >= 0) {
      p.enabled = 0;
      lm_quality_params_set_rule(&p, only_rule, 1);
    }
    if (tweak) tweak(&p);
    EXPECT_EQ(lm_quality_create(&p, &q), LM_OK);
    EXPECT_EQ(lm_quality_scratch_create(&s), LM_OK);
  }
  explicit Q(const lm_quality_params &p) {
    EXPECT_EQ(lm_quality_create(&p, &q), LM_OK);
    EXPECT_EQ(lm_quality_scratch_create(&s), LM_OK);
  }
  ~Q() {
    lm_quality_scratch_destroy(s);
    lm_quality_destroy(q);
  }
  int32_t reason(const std::string &t, std::string *out = nullptr) {
    lm_quality_doc_result r;
    EXPECT_EQ(lm_quality_check(q, s, (const uint8_t *)t.data(), t.size(), &r, nullptr), LM_OK);
    if (out && r.reason == LM_REASON_KEPT) out->assign((const char *)r.text, r.len);
    return r.reason;
  }
  std::vector<std::string> words(const std::string &t) {
    std::vector<size_t> spans(2 * (t.size() + 1));
    size_t n = 0;
    EXPECT_EQ(lm_quality_words(q, s, (const uint8_t *)t.data(), t.size(), spans.data(), t.size() + 1, &n), LM_OK);
    std::vector<std::string> w;
    for (size_t i = 0; i < n; i++) w.push_back(t.substr(spans[2 * i], spans[2 * i + 1]));
    return w;
  }
};

const int32_t KEPT = LM_REASON_KEPT;
int32_t R(int rule) { return LM_REASON_QUALITY_BASE + rule; }

std::string repeat(const std::string &s, int n) {
  std::string o;
  for (int i = 0; i < n; i++) o += s;
  return o;
}

// n distinct lowercase words of length 5 ("aaaaa", "aaaab", ...), separated by spaces.
std::string distinct_words(int n, int offset = 0) {
  std::string o;
  for (int i = 0; i < n; i++) {
    int v = i + offset;
    std::string w(5, 'a');
    for (int k = 4; k >= 0; k--) { w[k] = (char)('a' + v % 26); v /= 26; }
    o += (i ? " " : "") + w;
  }
  return o;
}

// A normal English paragraph that passes all rules.
const std::string GOOD =
    "The quick brown fox jumps over the lazy dog near the river bank.\n"
    "It was a bright cold day in April, and the clocks were striking thirteen.\n"
    "All happy families are alike; each unhappy family is unhappy in its own way.\n"
    "Call me Ishmael, some years ago I had little money in my purse to spend.\n"
    "It is a truth universally acknowledged that a single man must be in want of a wife.\n"
    "The sky above the port was the color of television, tuned to a dead channel.\n";

}  // namespace

TEST(Quality, RuleNamesAndIds) {
  EXPECT_EQ(lm_quality_rule_count(), LM_Q_RULE_COUNT);
  for (int i = 0; i < lm_quality_rule_count(); i++) {
    const char *n = lm_quality_rule_name(i);
    ASSERT_NE(n, nullptr);
    int id = -1;
    EXPECT_EQ(lm_quality_rule_find(n, &id), LM_OK);
    EXPECT_EQ(id, i);
  }
  EXPECT_EQ(lm_quality_rule_name(-1), nullptr);
  EXPECT_EQ(lm_quality_rule_name(LM_Q_RULE_COUNT), nullptr);
  int id;
  EXPECT_EQ(lm_quality_rule_find("nope", &id), LM_ENOTFOUND);
  EXPECT_STREQ(lm_quality_rule_name(LM_Q_C4_LOREM_IPSUM), "c4.lorem_ipsum");
  EXPECT_STREQ(lm_quality_rule_name(LM_Q_FW_LINE_PUNCT_RATIO), "fineweb.line_punct_ratio");
  EXPECT_STREQ(lm_quality_rule_name(LM_Q_GQ_MIN_DOC_WORDS), "gopher_quality.min_doc_words");
  EXPECT_EQ(lm_quality_rule_set_of(LM_Q_GR_DUP_10_GRAMS), LM_QSET_GOPHER_REPETITION);
  EXPECT_EQ(lm_quality_rule_set_of(LM_Q_C4_POLICY), LM_QSET_C4);
}

TEST(Quality, GoodTextPassesEverything) {
  Q q(-1);
  std::string out;
  EXPECT_EQ(q.reason(GOOD, &out), KEPT);
}

TEST(QualityWords, MatchesSpacyEnglishTokenizer) {
  // Expected tokens are spaCy 3.8 blank("en") outputs (whitespace tokens dropped, as datatrove does).
  Q q(-1);
  using V = std::vector<std::string>;
  EXPECT_EQ(q.words(" Hello  world.\n\nFoo"), (V{"Hello", "world", ".", "Foo"}));
  EXPECT_EQ(q.words("don't U.S. e.g. etc. A. (hello) well-known 3.5km http://x.org/a. foo@bar.com"),
            (V{"do", "n't", "U.S.", "e.g.", "etc", ".", "A.", "(", "hello", ")", "well", "-", "known", "3.5", "km",
               "http://x.org/a", ".", "foo@bar.com"}));
  EXPECT_EQ(q.words("'quoted' \"hi\""), (V{"'", "quoted", "'", "\"", "hi", "\""}));
  EXPECT_EQ(q.words("a.b.c Foo.Bar ... hi... :) <3 1-2 ab/cd x==y"),
            (V{"a.b.c", "Foo", ".", "Bar", "...", "hi", "...", ":)", "<3", "1", "-", "2", "ab", "/", "cd", "x==y"}));
  EXPECT_EQ(q.words("Mr. Smith U.S.A. Hello!! end... x\xE2\x80\xA6\xE2\x80\xA6 5km. A.B. www.foo.com/a-b"),
            (V{"Mr.", "Smith", "U.S.A.", "Hello", "!", "!", "end", "...", "x", "\xE2\x80\xA6\xE2\x80\xA6", "5", "km",
               ".", "A.B.", "www.foo.com/a-b"}));
  EXPECT_EQ(q.words("foo.Bar a-b a--b x:y a,b \"Hello,\""),
            (V{"foo", ".", "Bar", "a", "-", "b", "a", "--", "b", "x", ":", "y", "a", ",", "b", "\"", "Hello", ",",
               "\""}));
  EXPECT_EQ(q.words(""), V{});
  EXPECT_EQ(q.words(" \n\t "), V{});
}

TEST(QualityGopherRepetition, EmptyAndParagraphs) {
  EXPECT_EQ(Q(LM_Q_GR_EMPTY).reason(""), R(LM_Q_GR_EMPTY));
  EXPECT_EQ(Q(LM_Q_GR_EMPTY).reason("x"), KEPT);
  Q p(LM_Q_GR_DUP_PARA_FRAC);
  EXPECT_EQ(p.reason("alpha one\n\nalpha one\n\nbeta two"), R(LM_Q_GR_DUP_PARA_FRAC));  // 1/3 > 0.3
  EXPECT_EQ(p.reason("alpha one\n\nbeta two\n\ngamma three\n\nalpha one"), KEPT);      // 1/4 <= 0.3
  Q pc(LM_Q_GR_DUP_PARA_CHAR_FRAC);
  std::string para = repeat("x", 40);
  EXPECT_EQ(pc.reason(para + "\n\n" + para + "\n\n" + repeat("y", 100)), R(LM_Q_GR_DUP_PARA_CHAR_FRAC));  // 40/184
  EXPECT_EQ(pc.reason(para + "\n\n" + para + "\n\n" + repeat("y", 200)), KEPT);                           // 40/284
}

TEST(QualityGopherRepetition, Lines) {
  Q l(LM_Q_GR_DUP_LINE_FRAC);
  EXPECT_EQ(l.reason("a\nb\na\na"), R(LM_Q_GR_DUP_LINE_FRAC));  // 2/4
  EXPECT_EQ(l.reason("a\nb\nc\nd\na"), KEPT);                    // 1/5
  Q lc(LM_Q_GR_DUP_LINE_CHAR_FRAC);
  std::string line = repeat("z", 30);
  EXPECT_EQ(lc.reason(line + "\n" + line + "\n" + repeat("w", 60)), R(LM_Q_GR_DUP_LINE_CHAR_FRAC));  // 30/122
  EXPECT_EQ(lc.reason(line + "\n" + line + "\n" + repeat("w", 200)), KEPT);                          // 30/262
  // "\n+" splitting: a blank line does not make a duplicate empty line
  EXPECT_EQ(Q(LM_Q_GR_DUP_LINE_FRAC).reason("a\n\n\nb\n\nc"), KEPT);
}

TEST(QualityGopherRepetition, TopNGrams) {
  for (int k = 0; k < 3; k++) {
    int n = k + 2;
    Q q(LM_Q_GR_TOP_2_GRAM + k);
    std::string gram = distinct_words(n);  // n words, 5 chars each
    std::string text = repeat(gram + " ", 8) + distinct_words(40, 100);
    // top n-gram: (6n - 1) chars x 8 occurrences; the text has (8n + 40) words of 5 chars + spaces:
    // n = 2: 88 / 335 > 0.20, n = 3: 136 / 383 > 0.18, n = 4: 184 / 431 > 0.16
    EXPECT_EQ(q.reason(text), R(LM_Q_GR_TOP_2_GRAM + k)) << n;
    EXPECT_EQ(q.reason(distinct_words(60)), KEPT) << n;
  }
}

TEST(QualityGopherRepetition, DuplicatedNGrams) {
  for (int k = 0; k < 6; k++) {
    int n = k + 5;
    Q q(LM_Q_GR_DUP_5_GRAMS + k);
    std::string gram = distinct_words(n);
    // duplicated chars: 10n of 6(3n + 20) - 1 chars: n = 5: 50 / 209 > 0.15 ... n = 10: 100 / 299 > 0.10
    EXPECT_EQ(q.reason(repeat(gram + " ", 3) + distinct_words(20, 500)), R(LM_Q_GR_DUP_5_GRAMS + k)) << n;
    // twice only: n = 5: 25 / 179 <= 0.15 (datatrove keeps it)
    if (n == 5) {
      EXPECT_EQ(q.reason(gram + " " + gram + " " + distinct_words(20, 500)), KEPT);
    }
    EXPECT_EQ(q.reason(distinct_words(80)), KEPT) << n;
  }
}

TEST(QualityGopherQuality, WordCountsAndLengths) {
  EXPECT_EQ(Q(LM_Q_GQ_MIN_DOC_WORDS).reason(distinct_words(49)), R(LM_Q_GQ_MIN_DOC_WORDS));
  EXPECT_EQ(Q(LM_Q_GQ_MIN_DOC_WORDS).reason(distinct_words(50)), KEPT);
  // symbols are not words: 49 words + punctuation stays short
  EXPECT_EQ(Q(LM_Q_GQ_MIN_DOC_WORDS).reason(distinct_words(49) + " ! ? ... ;"), R(LM_Q_GQ_MIN_DOC_WORDS));
  auto small_max = [](lm_quality_params *p) { p->gq_max_doc_words = 10; };
  EXPECT_EQ(Q(LM_Q_GQ_MAX_DOC_WORDS, small_max).reason(distinct_words(11)), R(LM_Q_GQ_MAX_DOC_WORDS));
  EXPECT_EQ(Q(LM_Q_GQ_MAX_DOC_WORDS, small_max).reason(distinct_words(10)), KEPT);
  EXPECT_EQ(Q(LM_Q_GQ_MIN_AVG_WORD_LENGTH).reason(repeat("ab ", 60)), R(LM_Q_GQ_MIN_AVG_WORD_LENGTH));
  EXPECT_EQ(Q(LM_Q_GQ_MIN_AVG_WORD_LENGTH).reason(repeat("abc ", 60)), KEPT);
  EXPECT_EQ(Q(LM_Q_GQ_MAX_AVG_WORD_LENGTH).reason(repeat("abcdefghijk ", 60)), R(LM_Q_GQ_MAX_AVG_WORD_LENGTH));
  EXPECT_EQ(Q(LM_Q_GQ_MAX_AVG_WORD_LENGTH).reason(repeat("abcdefghij ", 60)), KEPT);
  // lengths are code points: 4 two-byte letters make a 4-character word
  EXPECT_EQ(Q(LM_Q_GQ_MAX_AVG_WORD_LENGTH).reason(repeat("\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9 ", 60)),
            KEPT);
}

TEST(QualityGopherQuality, SymbolsBulletsEllipses) {
  std::string base = distinct_words(60);
  EXPECT_EQ(Q(LM_Q_GQ_HASH_RATIO).reason(base + " " + repeat("#", 10)), R(LM_Q_GQ_HASH_RATIO));  // 10/70
  EXPECT_EQ(Q(LM_Q_GQ_HASH_RATIO).reason(base + " #"), KEPT);
  EXPECT_EQ(Q(LM_Q_GQ_ELLIPSIS_RATIO).reason(base + repeat(" ok...", 10)), R(LM_Q_GQ_ELLIPSIS_RATIO));
  EXPECT_EQ(Q(LM_Q_GQ_ELLIPSIS_RATIO).reason(base + " ok\xE2\x80\xA6"), KEPT);
  std::string bullets, some;
  for (int i = 0; i < 10; i++) bullets += (i % 2 ? "  - " : "\xE2\x80\xA2 ") + distinct_words(6, i * 10) + "\n";
  for (int i = 0; i < 10; i++) some += (i < 9 ? "- " : "") + distinct_words(6, i * 10) + "\n";
  EXPECT_EQ(Q(LM_Q_GQ_BULLET_LINES).reason(bullets), R(LM_Q_GQ_BULLET_LINES));
  EXPECT_EQ(Q(LM_Q_GQ_BULLET_LINES).reason(some), KEPT);  // 9/10 is not > 0.9
  std::string ell;
  for (int i = 0; i < 10; i++) ell += distinct_words(6, i * 10) + (i < 4 ? "...  \n" : ".\n");
  EXPECT_EQ(Q(LM_Q_GQ_ELLIPSIS_LINES).reason(ell), R(LM_Q_GQ_ELLIPSIS_LINES));  // 4/10 (rstrip first)
  std::string ell3;
  for (int i = 0; i < 10; i++) ell3 += distinct_words(6, i * 10) + (i < 3 ? "\xE2\x80\xA6\n" : ".\n");
  EXPECT_EQ(Q(LM_Q_GQ_ELLIPSIS_LINES).reason(ell3), KEPT);  // 3/10
}

TEST(QualityGopherQuality, AlphaAndStopWords) {
  std::string nums;
  for (int i = 0; i < 60; i++) nums += std::to_string(1000 + i) + " ";
  EXPECT_EQ(Q(LM_Q_GQ_ALPHA_WORDS).reason(nums), R(LM_Q_GQ_ALPHA_WORDS));
  EXPECT_EQ(Q(LM_Q_GQ_ALPHA_WORDS).reason(distinct_words(60) + " 1 2 3"), KEPT);
  Q sw(LM_Q_GQ_STOP_WORDS);
  EXPECT_EQ(sw.reason(distinct_words(60)), R(LM_Q_GQ_STOP_WORDS));
  EXPECT_EQ(sw.reason(distinct_words(60) + " the"), R(LM_Q_GQ_STOP_WORDS));        // one distinct stop word
  EXPECT_EQ(sw.reason(distinct_words(60) + " the the"), R(LM_Q_GQ_STOP_WORDS));    // still one
  EXPECT_EQ(sw.reason(distinct_words(60) + " The Of"), R(LM_Q_GQ_STOP_WORDS));     // case-sensitive
  EXPECT_EQ(sw.reason(distinct_words(60) + " the of"), KEPT);
  EXPECT_EQ(sw.reason(distinct_words(60) + " with (that)"), KEPT);  // tokens, not whitespace words
}

TEST(QualityC4, DocumentRules) {
  std::string five = "One two three four.\nFive six seven eight.\nNine ten eleven twelve.\n"
                     "Aa bb cc dd.\nEe ff gg hh.\n";
  Q lorem(LM_Q_C4_LOREM_IPSUM);
  EXPECT_EQ(lorem.reason(five + "Lorem Ipsum dolor sit amet.\n"), R(LM_Q_C4_LOREM_IPSUM));
  EXPECT_EQ(lorem.reason(five + "lorem ipsums are here\n"), R(LM_Q_C4_LOREM_IPSUM));  // line rules off here
  EXPECT_EQ(lorem.reason(five), KEPT);
  // with the line rules on, a line without terminal punctuation is removed before the check
  lm_quality_params p;
  lm_quality_params_default(&p);
  p.enabled = 0;
  lm_quality_params_set_rule_set(&p, LM_QSET_C4, 1);
  Q c4(p);
  EXPECT_EQ(c4.reason(five + "lorem ipsum without an end\n"), KEPT);
  EXPECT_EQ(c4.reason(five + "has a { brace in it.\n"), R(LM_Q_C4_CURLY_BRACKET));
  EXPECT_EQ(c4.reason(five + "has a { brace\n"), KEPT);
  EXPECT_EQ(Q(LM_Q_C4_CURLY_BRACKET).reason(five), KEPT);
  Q sent(LM_Q_C4_TOO_FEW_SENTENCES);
  EXPECT_EQ(sent.reason("One two. Three four. Five six. Seven eight."), R(LM_Q_C4_TOO_FEW_SENTENCES));
  EXPECT_EQ(sent.reason("One two. Three four. Five six. Seven eight. Nine ten."), KEPT);
  // abbreviations do not end sentences (spaCy tokenizer exceptions): "Mr." is one token
  EXPECT_EQ(sent.reason("Mr. Smith. Mr. Jones. Mr. Brown. Mr. White."), R(LM_Q_C4_TOO_FEW_SENTENCES));
  // runs of punctuation end one sentence; "f." is a tokenizer exception (no sentence end)
  EXPECT_EQ(sent.reason("A b!! C d?! Ee ff. Gg hh. Ii jj."), KEPT);
  EXPECT_EQ(sent.reason("A b!! C d?! E f. G h. I j."), R(LM_Q_C4_TOO_FEW_SENTENCES));
}

TEST(QualityC4, LineRulesRewriteText) {
  lm_quality_params p;
  lm_quality_params_default(&p);
  p.enabled = 0;
  lm_quality_params_set_rule_set(&p, LM_QSET_C4, 1);
  Q c4(p);
  std::string keep = "One two three four.\nFive six seven eight!\nNine ten eleven twelve?\n"
                     "Aa bb \"cc\" dd.\nEe ff gg 'hh'\n";
  std::string doc = "  Title without punctuation\n" + keep.substr(0, 20) +
                    "Enable JavaScript to view this page.\n" + "Too few.\n" + keep.substr(20) +
                    "We use cookies on this site.\nBad ending...\nCited fact here.[12]\n" +
                    "Long " + repeat("w", 1001) + " word line.\nCheck [edit] the edit link here.\n";
  std::string out;
  ASSERT_EQ(c4.reason(doc, &out), KEPT);
  std::string want = keep.substr(0, keep.size() - 1) + "\nCited fact here.\nCheck  the edit link here.";
  EXPECT_EQ(out, want);
  lm_quality_params p2 = p;
  p2.c4_modify_text = 0;
  Q c4n(p2);
  std::string out2;
  ASSERT_EQ(c4n.reason(doc, &out2), KEPT);
  EXPECT_EQ(out2, doc);
  // each line rule switched off keeps its lines
  lm_quality_params p3 = p;
  lm_quality_params_set_rule(&p3, LM_Q_C4_JAVASCRIPT, 0);
  lm_quality_params_set_rule(&p3, LM_Q_C4_POLICY, 0);
  Q c4j(p3);
  std::string out3;
  ASSERT_EQ(c4j.reason(doc, &out3), KEPT);
  EXPECT_NE(out3.find("JavaScript"), std::string::npos);
  EXPECT_NE(out3.find("cookies"), std::string::npos);
}

TEST(QualityFineWeb, Rules) {
  EXPECT_EQ(Q(LM_Q_FW_EMPTY).reason("\n  \n\t"), R(LM_Q_FW_EMPTY));
  EXPECT_EQ(Q(LM_Q_FW_EMPTY).reason("x"), KEPT);
  std::string nopunct, punct;
  for (int i = 0; i < 10; i++) nopunct += distinct_words(8, i * 10) + (i == 0 ? ".\n" : "\n");  // 1/10 < 0.12
  for (int i = 0; i < 10; i++) punct += distinct_words(8, i * 10) + (i < 2 ? ".\n" : "\n");     // 2/10
  EXPECT_EQ(Q(LM_Q_FW_LINE_PUNCT_RATIO).reason(nopunct), R(LM_Q_FW_LINE_PUNCT_RATIO));
  EXPECT_EQ(Q(LM_Q_FW_LINE_PUNCT_RATIO).reason(punct), KEPT);
  // a trailing space means the line does not end with punctuation
  EXPECT_EQ(Q(LM_Q_FW_LINE_PUNCT_RATIO).reason("Line one. \nLine two \n"), R(LM_Q_FW_LINE_PUNCT_RATIO));
  std::string shortl, longl;
  for (int i = 0; i < 10; i++) shortl += (i < 7 ? distinct_words(2, i * 3) : distinct_words(8, i * 10)) + ".\n";
  for (int i = 0; i < 10; i++) longl += (i < 6 ? distinct_words(2, i * 3) : distinct_words(8, i * 10)) + ".\n";
  EXPECT_EQ(Q(LM_Q_FW_SHORT_LINE_RATIO).reason(shortl), R(LM_Q_FW_SHORT_LINE_RATIO));  // 7/10 > 0.67
  EXPECT_EQ(Q(LM_Q_FW_SHORT_LINE_RATIO).reason(longl), KEPT);                          // 6/10
  std::string body = distinct_words(400) + ".\n";
  EXPECT_EQ(Q(LM_Q_FW_CHAR_DUP_RATIO).reason(body + "dup line.\ndup line.\n"), KEPT);  // 9 / ~2420
  EXPECT_EQ(Q(LM_Q_FW_CHAR_DUP_RATIO).reason(body + repeat("a duplicated line, long.\n", 3)),
            R(LM_Q_FW_CHAR_DUP_RATIO));
  EXPECT_EQ(Q(LM_Q_FW_LIST_RATIO).reason("a\nb\nc\nd"), R(LM_Q_FW_LIST_RATIO));  // 3 newlines / 4 words
  EXPECT_EQ(Q(LM_Q_FW_LIST_RATIO).reason("a b c d e f g h i j\nk"), KEPT);      // 1 / 11
}

TEST(Quality, FirstFailingRuleIsTheReason) {
  Q q(-1);
  // empty: Gopher repetition is evaluated first
  EXPECT_EQ(q.reason(""), R(LM_Q_GR_EMPTY));
  EXPECT_EQ(q.reason("short text."), R(LM_Q_GR_TOP_2_GRAM));  // "short text" is 10 of 11 chars
  lm_quality_params p;
  lm_quality_params_default(&p);
  lm_quality_params_set_rule_set(&p, LM_QSET_GOPHER_REPETITION, 0);
  EXPECT_EQ(Q(p).reason("short text."), R(LM_Q_GQ_MIN_DOC_WORDS));
}

TEST(Quality, MaxDocBytesAndBadArguments) {
  Q q(-1, [](lm_quality_params *p) { p->max_doc_bytes = 10; });
  EXPECT_EQ(q.reason(GOOD), LM_REASON_TOO_LARGE);
  lm_quality_doc_result r;
  EXPECT_EQ(lm_quality_check(nullptr, q.s, nullptr, 0, &r, nullptr), LM_EINVAL);
  EXPECT_EQ(lm_quality_check(q.q, q.s, nullptr, 5, &r, nullptr), LM_EINVAL);
  EXPECT_EQ(lm_quality_create(nullptr, nullptr), LM_EINVAL);
  EXPECT_EQ(lm_quality_params_set_rule(nullptr, 0, 1), LM_EINVAL);
  lm_quality_params p;
  lm_quality_params_default(&p);
  EXPECT_EQ(lm_quality_params_set_rule(&p, LM_Q_RULE_COUNT, 1), LM_EINVAL);
  lm_batch_result br;
  lm_batch_result_init(&br);
  EXPECT_EQ(lm_quality_run(q.q, nullptr, &br, nullptr), LM_EINVAL);
  lm_batch_result_free(&br);
}

TEST(Quality, InvalidUtf8AndNulAreDefined) {
  Q q(-1);
  std::string junk("\xFF\xFE\x00\x80 abc \xC3", 10);
  int32_t r = q.reason(junk);
  EXPECT_GE(r, LM_REASON_QUALITY_BASE);
  // NUL bytes are symbols (in datatrove's PUNCTUATION): no words
  EXPECT_EQ(Q(LM_Q_GQ_MIN_DOC_WORDS).reason(repeat(std::string("\0 ", 2), 1000)), R(LM_Q_GQ_MIN_DOC_WORDS));
}

TEST(Quality, LargeDocument) {
  Q q(-1);
  std::string big;
  while (big.size() < (20u << 20)) big += GOOD;
  // every line repeats: Gopher repetition's duplicate paragraph/line rules fire
  int32_t r = q.reason(big);
  EXPECT_GE(r, LM_REASON_QUALITY_BASE);
  EXPECT_LE(r, R(LM_Q_GR_DUP_10_GRAMS));
}

// Issue 21.2: "(" * n + "1" splits off n prefixes in front of one token end; the 146
// currency/unit suffix literals are matched against that end once, not once per prefix
// (the old tokenizer did n scans: 24x the time per byte of "(" * n + "a").
TEST(Quality, UnitSuffixesMatchedOncePerTokenEnd) {
  Q q(-1);
  const size_t n = 100000;
  std::string t(n, '(');
  t += "1";
  std::vector<size_t> spans(2 * (n + 8));
  size_t nw = 0;
  uint64_t before = lmq_debug_unit_scans();
  ASSERT_EQ(lm_quality_words(q.q, q.s, (const uint8_t *)t.data(), t.size(), spans.data(), n + 8, &nw), LM_OK);
  uint64_t scans = lmq_debug_unit_scans() - before;
  EXPECT_EQ(nw, n + 1);  // every "(" is a prefix token, then "1"
  EXPECT_LE(scans, 2u);
  // the same words whatever precedes: "x 5km" -> x, 5, km (the literal still matches)
  std::string u = "((((5km";
  ASSERT_EQ(lm_quality_words(q.q, q.s, (const uint8_t *)u.data(), u.size(), spans.data(), n, &nw), LM_OK);
  ASSERT_EQ(nw, 6u);
  EXPECT_EQ(u.substr(spans[8], spans[9]), "5");
  EXPECT_EQ(u.substr(spans[10], spans[11]), "km");
}

// Issue 21.3: documents where almost every byte is a token.  The scratch held 65-83 bytes
// per input byte (hash set of 2n slots, 16-byte tokens, 12 B per code point of span arrays,
// affix stacks, word-joined copies); now at most 16.
TEST(Quality, ScratchMemoryPerInputByteIsBounded) {
  const size_t n = 1u << 20;
  std::string close(n, ')');
  std::string open(n - 1, '(');
  open += "1";
  std::string mixed;
  while (mixed.size() < n) mixed += ")(,;!?.\"-:'";
  std::string spaced;
  while (spaced.size() < n) spaced += ") ";
  std::string marks = "a";  // one whitespace-free non-ASCII span: decoded per code point
  while (marks.size() < n) marks += "\xCC\x81\xCC\x96";
  for (const std::string *t : {&close, &open, &mixed, &spaced, &marks}) {
    Q q(-1);
    lm_quality_doc_result r;
    ASSERT_EQ(lm_quality_check(q.q, q.s, (const uint8_t *)t->data(), t->size(), &r, nullptr), LM_OK);
    // and with every rule that reads words on at once (drops end a check early)
    lm_quality_params p;
    lm_quality_params_default(&p);
    p.gr_top_ngram_frac[0] = p.gr_top_ngram_frac[1] = p.gr_top_ngram_frac[2] = 2;
    for (double &f : p.gr_dup_ngram_frac) f = 2;
    p.gr_dup_para_frac = p.gr_dup_line_frac = p.gr_dup_para_char_frac = p.gr_dup_line_char_frac = 2;
    p.enabled = ((uint64_t)1 << LM_Q_RULE_COUNT) - 1;
    p.enabled &= ~((uint64_t)0x3FF << LM_Q_GQ_MIN_DOC_WORDS);  // Gopher quality would drop it
    Q all(p);
    ASSERT_EQ(lm_quality_check(all.q, all.s, (const uint8_t *)t->data(), t->size(), &r, nullptr), LM_OK);
    EXPECT_LE(lm_quality_scratch_bytes(q.s), 16 * t->size()) << t->substr(0, 8);
    EXPECT_LE(lm_quality_scratch_bytes(all.s), 16 * t->size()) << t->substr(0, 8);
  }
  EXPECT_EQ(lm_quality_scratch_bytes(nullptr), 0u);
}

static std::string run_batch(lm_quality *q, const std::vector<std::string> &docs, int threads,
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
  EXPECT_EQ(lm_quality_run(q, &in, &r, &ex), LM_OK);
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

TEST(Quality, BatchThreadInvarianceAndCounters) {
  std::vector<std::string> docs;
  for (int i = 0; i < 2000; i++) {
    switch (i % 4) {
      case 0: docs.push_back(GOOD + "Extra line number " + std::to_string(i) + " without end\n"); break;
      case 1: docs.push_back("tiny"); break;
      case 2: docs.push_back(""); break;
      default: docs.push_back(distinct_words(100, i) + " the of."); break;
    }
  }
  Q q(-1);
  std::vector<int32_t> r1, r3;
  std::string a = run_batch(q.q, docs, 1, &r1);
  std::string b = run_batch(q.q, docs, 3, &r3);
  EXPECT_EQ(a, b);
  EXPECT_EQ(r1, r3);
  Q single(-1);
  for (size_t i = 0; i < docs.size(); i++) EXPECT_EQ(single.reason(docs[i]), r1[i]) << i;
  lm_quality_counters c;
  lm_quality_get_counters(q.q, &c);
  EXPECT_EQ(c.docs_in, 2 * docs.size());
  EXPECT_EQ(c.docs_kept + c.docs_dropped, c.docs_in);
  uint64_t dropped = 0;
  for (int i = 0; i < LM_Q_RULE_COUNT; i++)
    if (i < LM_Q_C4_TOO_LONG_WORD || i > LM_Q_C4_POLICY || i == LM_Q_C4_LOREM_IPSUM || i == LM_Q_C4_CURLY_BRACKET)
      dropped += c.rule[i];
  EXPECT_EQ(dropped, c.docs_dropped);
  EXPECT_EQ(c.rule[LM_Q_GR_EMPTY], 2u * 500);
  // GOOD docs: C4 removes the unterminated last line
  EXPECT_EQ(c.rule[LM_Q_C4_NO_TERMINAL_PUNCT], 2u * 500);
  lm_quality_reset_counters(q.q);
  lm_quality_get_counters(q.q, &c);
  EXPECT_EQ(c.docs_in, 0u);
}

// ---- regressions (fuzz_quality, review of the size limits)

// fuzz_quality: a range of documents that kept only empty texts left the
// range's output buffer NULL, and lm_quality_run computed NULL + 0 (undefined
// behaviour, reported by UBSan).  Input: all rule sets off, one empty document.
// Fix: core/src/quality.c passes NULL for an empty text instead of data + pos.
TEST(Quality, RunKeptEmptyTextOnly) {
  lm_quality_params p;
  ASSERT_EQ(lm_quality_params_default(&p), LM_OK);
  for (int s = 0; s < LM_QSET_COUNT; s++)
    ASSERT_EQ(lm_quality_params_set_rule_set(&p, (lm_quality_rule_set)s, 0), LM_OK);
  p.c4_modify_text = 0;
  lm_quality *q = nullptr;
  ASSERT_EQ(lm_quality_create(&p, &q), LM_OK);
  const int64_t offs[3] = {0, 0, 0};
  lm_docs docs = {offs, nullptr, 2, 0};
  lm_batch_result r;
  lm_batch_result_init(&r);
  ASSERT_EQ(lm_quality_run(q, &docs, &r, nullptr), LM_OK);
  ASSERT_EQ(r.n_out, 2u);
  EXPECT_EQ(r.reasons[0], LM_REASON_KEPT);
  EXPECT_EQ(r.reasons[1], LM_REASON_KEPT);
  EXPECT_EQ(r.offsets[2], 0);
  lm_batch_result_free(&r);
  lm_quality_destroy(q);
}

// Review of the size limits (issue 8, resource limits): lm_quality_check tested
// its 32-bit token-offset bound (4 GiB) before the configured max_doc_bytes, so
// a document above both failed the whole batch with LM_ETOOBIG instead of being
// refused with LM_REASON_TOO_LARGE.  The text is never read on that path, so a
// 1-byte buffer with a 5 GiB length reproduces it.  Fix: core/src/quality_rules.c
// checks the configured limit first.
TEST(Quality, LimitBeatsTheFourGigabyteBound) {
  lm_quality_params p;
  ASSERT_EQ(lm_quality_params_default(&p), LM_OK);
  p.max_doc_bytes = 1000;
  lm_quality *q = nullptr;
  ASSERT_EQ(lm_quality_create(&p, &q), LM_OK);
  lm_quality_scratch *s = nullptr;
  ASSERT_EQ(lm_quality_scratch_create(&s), LM_OK);
  static const uint8_t byte = 'x';
  lm_quality_doc_result r;
  const size_t huge = (size_t)5 << 30;
  ASSERT_EQ(lm_quality_check(q, s, &byte, huge, &r, nullptr), LM_OK);
  EXPECT_EQ(r.reason, LM_REASON_TOO_LARGE);
  // without a configured limit the bound is still a clear error, not a crash
  lm_quality *q0 = nullptr;
  ASSERT_EQ(lm_quality_create(nullptr, &q0), LM_OK);
  EXPECT_EQ(lm_quality_check(q0, s, &byte, huge, &r, nullptr), LM_ETOOBIG);
  lm_quality_destroy(q0);
  lm_quality_scratch_destroy(s);
  lm_quality_destroy(q);
}

// Issue 14 part 3: the duplicated n-grams are "".join of n words (datatrove's find_all_duplicate), so n-grams
// split differently into words ("ab cde f gh ij" / "abc de fg h ij") are equal.  The n-gram hash is computed
// from per-word prefix values; this pins the greedy count against a plain std::set reference on documents of
// a few short words, where such splits are everywhere: the rule drops exactly when rep / chars > the limit.
TEST(QualityGopherRepetition, DuplicatedNGramsJoinWithoutSpacesMatchesReference) {
  const char *pieces[] = {"a", "b", "ab", "ba", "aa", "bab"};
  uint64_t rnd = 12345;
  auto next = [&rnd]() { rnd = rnd * 6364136223846793005ull + 1442695040888963407ull; return rnd >> 33; };
  Q words(-1);
  int drops = 0;
  for (int doc = 0; doc < 300; doc++) {
    std::string text;
    size_t nw = 5 + next() % 60;
    for (size_t i = 0; i < nw; i++) text += std::string(pieces[next() % 6]) + " ";
    std::vector<size_t> sp(2 * (text.size() + 1));
    size_t got = 0;
    ASSERT_EQ(lm_quality_words(words.q, words.s, (const uint8_t *)text.data(), text.size(), sp.data(),
                               text.size() + 1, &got), LM_OK);
    std::vector<std::string> w;
    for (size_t i = 0; i < got; i++) w.push_back(text.substr(sp[2 * i], sp[2 * i + 1]));
    for (int n = 5; n <= 10; n++) {
      size_t rep = 0, idx = 0;  // find_all_duplicate
      std::set<std::string> seen;
      while (w.size() >= (size_t)n && idx < w.size() - n + 1) {
        std::string g;
        for (int k = 0; k < n; k++) g += w[idx + k];
        if (seen.count(g)) {
          rep += g.size();
          idx += n;
        } else {
          seen.insert(g);
          idx++;
        }
      }
      double ratio = (double)rep / (double)text.size();  // ASCII: chars == bytes
      for (int side = 0; side < 2; side++) {
        lm_quality_params p;
        lm_quality_params_default(&p);
        p.enabled = 0;
        lm_quality_params_set_rule(&p, LM_Q_GR_DUP_5_GRAMS + (n - 5), 1);
        // just below the reference ratio: dropped iff rep > 0; at it: kept
        p.gr_dup_ngram_frac[n - 5] = side == 0 && rep > 0 ? ratio * (1 - 1e-9) : ratio;
        Q q(p);
        int32_t want = side == 0 && rep > 0 ? R(LM_Q_GR_DUP_5_GRAMS + (n - 5)) : KEPT;
        EXPECT_EQ(q.reason(text), want) << "n=" << n << " rep=" << rep << " text=" << text;
        drops += want != KEPT;
      }
    }
  }
  EXPECT_GT(drops, 100);  // the documents do repeat
}

// Issue 14 (this session): the n-gram passes visit only the word positions that can repeat (an n-gram that
// occurs twice has its (n-1)-gram prefix occur twice; two equal "".join n-grams of n >= 5 share the 16
// bytes at their starts, or are shorter than 16 bytes), when words average 4 bytes or more, and every
// position otherwise.  Both paths against plain references, on documents of words of 2..8 letters from a
// small alphabet (splits like "abcd ab" / "ab cdab" everywhere; 5-grams on both sides of 16 bytes), and of
// 1..3-letter words (the path over every position): the top n-gram rules (Counter.most_common of
// " ".join n-grams) and the duplicated n-gram rules drop exactly when value / chars > the limit.
TEST(QualityGopherRepetition, NGramRulesMatchReferenceOnBothPaths) {
  const std::vector<std::vector<std::string>> sets = {
      {"abcd", "bcda", "abcdab", "cdab", "ab", "abcdabcd", "dabc", "abcda", "a", "b", "ba"},  // indexed
      {"abababab", "ab", "abab", "a", "b", "ba", "bababa"},  // indexed, equal n-grams of unequal 5-grams
      {},                                                    // random 4..7-letter words: little repeats
      {"a", "b", "ab", "ba", "aa", "bab"}};                  // short words: every position
  uint64_t rnd = 987654321;
  auto next = [&rnd]() { rnd = rnd * 6364136223846793005ull + 1442695040888963407ull; return rnd >> 33; };
  Q words(-1);
  int drops[4] = {0, 0, 0, 0};
  for (size_t set = 0; set < sets.size(); set++) {
    const auto &pieces = sets[set];
    for (int doc = 0; doc < 200; doc++) {
      std::string text;
      size_t nw = 2 + next() % 90;
      for (size_t i = 0; i < nw; i++) {
        // now and then repeat a stretch of the text so far (long repeated n-grams)
        if (i > 12 && next() % 8 == 0) {
          size_t from = next() % text.size();
          while (from > 0 && text[from - 1] != ' ') from--;
          text += text.substr(from, 4 + next() % 40);
          if (text.back() != ' ') text += ' ';
        }
        if (pieces.empty())
          for (size_t k = 0, len = 4 + next() % 4; k < len; k++) text += (char)('a' + next() % 26);
        else
          text += pieces[next() % pieces.size()];
        text += " ";
      }
      std::vector<size_t> sp(2 * (text.size() + 1));
      size_t got = 0;
      ASSERT_EQ(lm_quality_words(words.q, words.s, (const uint8_t *)text.data(), text.size(), sp.data(),
                                 text.size() + 1, &got), LM_OK);
      std::vector<std::string> w;
      for (size_t i = 0; i < got; i++) w.push_back(text.substr(sp[2 * i], sp[2 * i + 1]));
      for (int n = 2; n <= 10; n++) {
        size_t value = 0;  // top (2..4): len * count of the most common; dup (5..10): find_all_duplicate
        if (n <= 4) {
          std::vector<std::string> order;
          std::map<std::string, size_t> cnt;
          for (size_t i = 0; i + n <= w.size(); i++) {
            std::string g = w[i];
            for (int k = 1; k < n; k++) g += " " + w[i + k];
            if (cnt[g]++ == 0) order.push_back(g);
          }
          size_t best = 0;
          for (const auto &g : order)
            if (cnt[g] > best) best = cnt[g], value = g.size() * cnt[g];
        } else {
          std::set<std::string> seen;
          for (size_t idx = 0; w.size() >= (size_t)n && idx < w.size() - n + 1;) {
            std::string g;
            for (int k = 0; k < n; k++) g += w[idx + k];
            if (seen.count(g)) {
              value += g.size();
              idx += n;
            } else {
              seen.insert(g);
              idx++;
            }
          }
        }
        int rule = n <= 4 ? LM_Q_GR_TOP_2_GRAM + (n - 2) : LM_Q_GR_DUP_5_GRAMS + (n - 5);
        double ratio = (double)value / (double)text.size();  // ASCII: chars == bytes
        for (int side = 0; side < 2; side++) {
          lm_quality_params p;
          lm_quality_params_default(&p);
          p.enabled = 0;
          // the n-gram rules before this one run too (never dropping): a pass reads the positions the
          // earlier passes found
          for (int r = LM_Q_GR_TOP_2_GRAM; r <= rule; r++) lm_quality_params_set_rule(&p, r, 1);
          for (double &f : p.gr_top_ngram_frac) f = 1e9;
          for (double &f : p.gr_dup_ngram_frac) f = 1e9;
          // just below the reference ratio: dropped iff value > 0; at it: kept
          double lim = side == 0 && value > 0 ? ratio * (1 - 1e-9) : ratio;
          if (n <= 4) p.gr_top_ngram_frac[n - 2] = lim;
          else p.gr_dup_ngram_frac[n - 5] = lim;
          Q q(p);
          int32_t want = side == 0 && value > 0 ? R(rule) : KEPT;
          EXPECT_EQ(q.reason(text), want) << "set=" << set << " n=" << n << " value=" << value << " text=" << text;
          drops[set] += want != KEPT;
        }
      }
    }
  }
  for (int d : drops) EXPECT_GT(d, 300);  // every set has documents each rule drops
}

// Issue 14 (2 threads): the n-gram sets of a document of megabytes are a mapping of their own (2 MiB
// aligned, huge pages asked for, populated writable instead of cleared by a memset: lmq_debug_set_maps
// counts them).  A document of ~160k words from a vocabulary of 3,000 (every pass's set is megabytes) against
// the plain references (top 2-gram, duplicated 5-grams, as in NGramRulesMatchReferenceOnBothPaths), each
// with a fresh scratch and with one scratch reused across a small document and the big one twice (new
// generations over a mapped array, its growth through the kept copy buffer).
TEST(QualityGopherRepetition, HugeDocumentSetsMatchReference) {
  uint64_t rnd = 4242;
  auto next = [&rnd]() { rnd = rnd * 6364136223846793005ull + 1442695040888963407ull; return rnd >> 33; };
  std::vector<std::string> vocab;
  for (int i = 0; i < 3000; i++) {
    std::string v;
    for (size_t k = 0, len = 4 + next() % 4; k < len; k++) v += (char)('a' + next() % 26);
    vocab.push_back(v);
  }
  std::string text;
  std::vector<std::string> w;
  while (w.size() < 160000) {
    if (w.size() > 50 && next() % 64 == 0) {  // now and then repeat a stretch (long duplicated n-grams)
      size_t from = next() % (w.size() - 40), len = 5 + next() % 30;
      for (size_t k = 0; k < len; k++) w.push_back(w[from + k]);
    } else {
      w.push_back(vocab[next() % vocab.size()]);
    }
  }
  for (const auto &x : w) text += x + " ";
  // references: top 2-gram (len * count of the most common, first seen on ties), duplicated 5-grams
  size_t top2 = 0, dup5 = 0;
  {
    std::map<std::string, size_t> cnt;
    std::vector<std::string> order;
    for (size_t i = 0; i + 2 <= w.size(); i++) {
      std::string g = w[i] + " " + w[i + 1];
      if (cnt[g]++ == 0) order.push_back(g);
    }
    size_t best = 0;
    for (const auto &g : order)
      if (cnt[g] > best) best = cnt[g], top2 = g.size() * cnt[g];
    std::set<std::string> seen;
    for (size_t idx = 0; idx + 5 <= w.size();) {
      std::string g = w[idx] + w[idx + 1] + w[idx + 2] + w[idx + 3] + w[idx + 4];
      if (seen.count(g)) {
        dup5 += g.size();
        idx += 5;
      } else {
        seen.insert(g);
        idx++;
      }
    }
  }
  ASSERT_GT(dup5, 0u);
  auto params = [](int rule, double lim) {
    lm_quality_params p;
    lm_quality_params_default(&p);
    p.enabled = 0;
    for (int r = LM_Q_GR_TOP_2_GRAM; r <= rule; r++) lm_quality_params_set_rule(&p, r, 1);
    for (double &f : p.gr_top_ngram_frac) f = 1e9;
    for (double &f : p.gr_dup_ngram_frac) f = 1e9;
    if (rule == LM_Q_GR_TOP_2_GRAM) p.gr_top_ngram_frac[0] = lim;
    else p.gr_dup_ngram_frac[0] = lim;
    return p;
  };
  const uint64_t maps0 = lmq_debug_set_maps();
  for (int rule : {LM_Q_GR_TOP_2_GRAM, LM_Q_GR_DUP_5_GRAMS}) {
    double ratio = (double)(rule == LM_Q_GR_TOP_2_GRAM ? top2 : dup5) / (double)text.size();  // ASCII
    // just below the reference ratio: dropped; at it: kept (each on a fresh scratch)
    Q below(params(rule, ratio * (1 - 1e-9))), at(params(rule, ratio));
    EXPECT_EQ(below.reason(text), R(rule)) << rule;
    EXPECT_EQ(at.reason(text), KEPT) << rule;
    // one scratch: the big document, a small one, the big one again
    Q fresh(params(rule, ratio * (1 - 1e-9)));
    EXPECT_EQ(below.reason(GOOD), fresh.reason(GOOD)) << rule;
    EXPECT_EQ(below.reason(text), R(rule)) << rule;
    EXPECT_EQ(at.reason(text), KEPT) << rule;
  }
#ifdef __linux__
  if (lmq_set_maps_built())
    EXPECT_GT(lmq_debug_set_maps(), maps0);  // the mapped path ran
  else
    EXPECT_EQ(lmq_debug_set_maps(), maps0);  // sanitized build: malloc, watched by ASan
#else
  (void)maps0;
#endif
}

// The tokenizer's and C4's byte runs 8 bytes at a time (lmq_letters_end, lmq_graphic_end) against
// the plain byte loops: every start and length 0..300 over random bytes biased to letters, other
// ASCII and UTF-8 lead/continuation bytes, the text ending right before a PROT_NONE page (a read
// at or past the end faults; ASan sees the same through the mapping).
#include <sys/mman.h>
#include <unistd.h>
#include <random>
TEST(QualitySwarRuns, EqualByteLoopsAtEveryStartLengthAndPageEnd) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uint8_t *m = static_cast<uint8_t *>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(m, MAP_FAILED);
  ASSERT_EQ(mprotect(m + page, page, PROT_NONE), 0);
  std::mt19937 rng(1234);
  const uint8_t pick[] = {'a', 'z', 'A', 'Z', 'm', 'Q', '@', '[', '`', '{', ' ', '!', '~', 0x7F, 0x20, 0x21,
                          0x00, 0x09, 0x0A, 0x80, 0xBF, 0xC3, 0xE2, 0xFF, 0xC1, 0xDA, 0xE0, 0xFA, 0xFB, 0x5A};
  size_t checked = 0;
  for (int rep = 0; rep < 16; rep++) {
    for (size_t n = 0; n <= 300; n++) {
      uint8_t *s = m + page - n; /* s[n - 1] is the last readable byte */
      int mode = rep % 4;         /* long letter runs, long graphic runs, mixed, any byte */
      for (size_t k = 0; k < n; k++) {
        uint32_t r = rng();
        if (mode == 0) s[k] = (r % 29) ? (uint8_t)('a' + (r >> 8) % 26 - ((r >> 16) & 1) * 32) : pick[(r >> 8) % sizeof pick];
        else if (mode == 1) s[k] = (r % 31) ? (uint8_t)(0x21 + (r >> 8) % 95) : pick[(r >> 8) % sizeof pick];
        else if (mode == 2) s[k] = pick[r % sizeof pick];
        else s[k] = (uint8_t)(r >> 8);
      }
      for (size_t i = 0; i <= n; i++) {
        size_t a = i, b = i;
        while (a < n && (uint8_t)((s[a] | 32) - 'a') < 26) a++;
        while (b < n && s[b] > 0x20 && s[b] < 0x80) b++;
        ASSERT_EQ(lmq_letters_end(s, i, n), a) << "n=" << n << " i=" << i << " mode=" << mode;
        ASSERT_EQ(lmq_graphic_end(s, i, n), b) << "n=" << n << " i=" << i << " mode=" << mode;
        checked++;
      }
    }
  }
  /* every byte value alone, then followed by a full 8-byte run of letters / graphic bytes */
  for (int v = 0; v < 256; v++) {
    for (size_t pos = 0; pos < 16; pos++) {
      uint8_t *s = m + page - 16;
      for (size_t k = 0; k < 16; k++) s[k] = k < pos ? 'k' : (uint8_t)v;
      size_t a = 0, b = 0;
      while (a < 16 && (uint8_t)((s[a] | 32) - 'a') < 26) a++;
      while (b < 16 && s[b] > 0x20 && s[b] < 0x80) b++;
      ASSERT_EQ(lmq_letters_end(s, 0, 16), a) << v;
      ASSERT_EQ(lmq_graphic_end(s, 0, 16), b) << v;
    }
  }
  EXPECT_GT(checked, 700000u);
  munmap(m, 2 * page);
}
