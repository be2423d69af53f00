# Generates core/src/quality_tables.c from datatrove + spaCy (en) data.
import re, sys, unicodedata
import spacy
from spacy.lang import char_classes as cc
from datatrove.utils.text import PUNCTUATION_SET, TERMINAL_PUNCTUATION
nlp = spacy.blank("en"); tok = nlp.tokenizer
sent = nlp.add_pipe("sentencizer")
assert all(len(p) == 1 for p in sent.punct_chars)
F = dict(SPACE=0, PYALPHA=1, PUNCTSET=2, TERMINAL=3, SP_ALPHA=4, SP_LOWER=5, SP_UPPER=6, ICON=7,
         ISPUNCT=8, SENT_PUNCT=9, UDIGIT=10, LINEBREAK=11, DOT_SUFFIX_LB=12, PREFIX_CHAR=13,
         SUFFIX_CHAR=14, INFIX_DOT_LB=15, INFIX_DOT_LA=16, QUOTE=17)
def unesc(s): return re.sub(r"\\(.)", r"\1", s)
prefix_single = set()
for e in ["§", "%", "=", "—", "–"] + cc.LIST_PUNCT + cc.LIST_QUOTES + cc.LIST_CURRENCY:
    u = unesc(e)
    if len(u) == 1: prefix_single.add(u)
suffix_single = set()
for e in cc.LIST_PUNCT + ["…"] + cc.LIST_QUOTES + ["—", "–"]:
    u = unesc(e)
    if len(u) == 1: suffix_single.add(u)
units = [unesc(u) for u in cc.split_chars(cc._units)]
currency = [unesc(u) for u in cc.split_chars(cc._currency)]
r_alpha = re.compile("[%s]" % cc.ALPHA); r_lower = re.compile("[%s]" % cc.ALPHA_LOWER)
r_upper = re.compile("[%s]" % cc.ALPHA_UPPER); r_icon = re.compile(cc.LIST_ICONS[0])
r_dotlb = re.compile(r"[0-9{al}{e}{p}(?:{q})]".format(al=cc.ALPHA_LOWER, e=r"%²\-\+", q=cc.CONCAT_QUOTES, p=cc.PUNCT))
r_idlb = re.compile("[{al}{q}]".format(al=cc.ALPHA_LOWER, q=cc.CONCAT_QUOTES))
r_idla = re.compile("[{au}{q}]".format(au=cc.ALPHA_UPPER, q=cc.CONCAT_QUOTES))
r_quote = re.compile("[%s]" % cc.CONCAT_QUOTES)
r_digit = re.compile(r"\d")
LB = set("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")
def flags(c):
    f = 0
    def s(n):
        nonlocal f
        f |= 1 << F[n]
    if c.isspace(): s("SPACE")
    if c.isalpha(): s("PYALPHA")
    if c in PUNCTUATION_SET: s("PUNCTSET")
    if c in TERMINAL_PUNCTUATION: s("TERMINAL")
    if r_alpha.match(c): s("SP_ALPHA")
    if r_lower.match(c): s("SP_LOWER")
    if r_upper.match(c): s("SP_UPPER")
    if r_icon.match(c): s("ICON")
    if unicodedata.category(c).startswith("P"): s("ISPUNCT")
    if c in sent.punct_chars: s("SENT_PUNCT")
    if r_digit.match(c): s("UDIGIT")
    if c in LB: s("LINEBREAK")
    if r_dotlb.match(c): s("DOT_SUFFIX_LB")
    if c in prefix_single or r_icon.match(c): s("PREFIX_CHAR")
    if c in suffix_single or r_icon.match(c): s("SUFFIX_CHAR")
    if r_idlb.match(c): s("INFIX_DOT_LB")
    if r_idla.match(c): s("INFIX_DOT_LA")
    if r_quote.match(c): s("QUOTE")
    return f
assert "+" not in prefix_single and "." not in prefix_single and "." not in suffix_single
ascii_f = [flags(chr(i)) for i in range(128)]
ranges = []
cur = None
for cp in range(128, 0x110000):
    f = flags(chr(cp))
    if cur and cur[2] == f and cur[1] == cp - 1:
        cur[1] = cp
    else:
        if cur and cur[2]: ranges.append(cur)
        cur = [cp, cp, f]
if cur and cur[2]: ranges.append(cur)
def cstr(s):
    b = s.encode("utf-8")
    return '"' + "".join(chr(x) if 32 <= x < 127 and chr(x) not in '"\\?' else "\\%03o" % x for x in b) + '"'
import importlib.metadata as md
out = []
out.append("/* quality_tables.c — GENERATED from datatrove %s and spaCy %s (blank \"en\") by the\n"
           " * script quoted in quality_internal.h.  Character classes of datatrove's text rules and\n"
           " * of spaCy's English tokenizer, its special cases (tokenizer exceptions), units and\n"
           " * currencies.  Do not edit by hand. */\n" % (md.version("datatrove"), spacy.__version__))
out.append('#include "quality_internal.h"\n\n')
out.append("const uint32_t lmq_ascii_flags[128] = {\n" + ",".join("0x%x" % f for f in ascii_f) + "};\n\n")
lines = []
for i in range(0, len(ranges), 4):
    lines.append(",".join("{0x%x,0x%x,0x%x}" % tuple(r) for r in ranges[i:i+4]))
out.append("const lmq_range lmq_ranges[] = {\n" + ",\n".join(lines) + "};\n")
out.append("const size_t lmq_n_ranges = %d;\n\n" % len(ranges))
out.append("const char *const lmq_units[] = {" + ",".join(cstr(u) for u in units) + "};\n")
out.append("const size_t lmq_n_units = %d;\n" % len(units))
out.append("const char *const lmq_currency[] = {" + ",".join(cstr(u) for u in currency) + "};\n")
out.append("const size_t lmq_n_currency = %d;\n\n" % len(currency))
rules = []
for k, v in tok.rules.items():
    toks = [d[65] for d in v]
    assert "".join(toks) == k and len(toks) <= 3
    lens = [len(t.encode()) for t in toks] + [0] * (3 - len(toks))
    rules.append("{%s,%d,%d,{%d,%d,%d}}" % (cstr(k), len(k.encode()), len(toks), *lens))
out.append("const lmq_special lmq_specials[] = {\n" + ",\n".join(rules) + "};\n")
out.append("const size_t lmq_n_specials = %d;\n" % len(rules))
open(sys.argv[1], "w").write("".join(out))
print(len(ranges), len(rules), len(units), len(currency))
