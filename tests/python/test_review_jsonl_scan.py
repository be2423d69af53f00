"""Review of the AVX2 runs of jsonl_scan (d5fc0c6), beyond test_jsonl_scan_levels.py: the bytes
that end a run placed so that they straddle a 32-byte load (a multi-byte UTF-8 character, an
escape, a surrogate pair cut by the load's boundary), bad UTF-8 (truncated, overlong, raw
surrogates, 0xF5..0xFF, a continuation byte alone), \\u0000 / raw NUL / DEL, a text key given twice
(with the second after a long run), keys with long plain runs, and the text field as the last
bytes of a buffer before an unmapped page: AVX2 and SWAR (LM_NO_AVX2=1, child processes, the
harness of test_jsonl_scan_levels.py) give the same line ends / statuses / texts, and every
OK line is one that ``json.loads`` accepts with the same text (an independent decoder)."""
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(__file__))
import test_jsonl_scan_levels as L  # noqa: E402

_BAD = [b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xed\xbf\xbf",
        b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xff", b"\x80", b"\xbf", b"\x00", b"\x7f", b"\\u0000",
        b"\\ud83d", b"\\ude00", b"\\ud83d\\u0041", b"\\U0041", b"\\u00g1", b"\t", b"\x1f"]
_GOOD = [b"\xc3\xa9", b"\xe2\x82\xac", b"\xf0\x9f\x98\x80", b"\xef\xbf\xbf", b"\xf4\x8f\xbf\xbf", b"\\n", b"\\\"",
         b"\\\\", b"\\/", b"\\b", b"\\u00e9", b"\\ud83d\\ude00", b"\\uFFFF", b"\\u0020"]


def _cases():
    rng = random.Random(99)
    cases = []
    # each piece straddling the 32-byte loads: k plain bytes before it, k = 0..70
    for piece in _BAD + _GOOD:
        for k in range(0, 70):
            for pad in (0, 1, 7):
                line = b"{" + b" " * pad + b'"text": "' + b"p" * k + piece + b"q" * (k % 33) + b'"}'
                cases.append((line + b"\n", "text", k % 5 == 0))
    # keys and other strings with long runs, the text key twice, nested values before the text
    for k in range(0, 100, 3):
        run = b"r" * k
        cases.append((b'{"' + run + b'": "' + run + b'", "text": "' + run + b'"}\n', "text", False))
        cases.append((b'{"text": "' + run + b'", "text": "' + run + b'x"}\n', "text", k % 2 == 0))
        cases.append((b'{"a": ["' + run + b'", {"b": "' + run + b'\\u00e9"}], "text": "' + run + b'"}', "text", True))
    # random mixtures, several lines a buffer, some at a page's end
    for i in range(400):
        lines = []
        for _ in range(rng.randint(1, 6)):
            t = bytearray()
            while len(t) < rng.randint(0, 200):
                t += rng.choice([b"a" * rng.randint(1, 40), rng.choice(_GOOD), rng.choice(_GOOD),
                                 rng.choice(_BAD) if rng.random() < 0.15 else b" "])
            lines.append(b'{"id": ' + str(i).encode() + b', "text": "' + bytes(t) + b'"}')
        cases.append((b"\n".join(lines), "text", i % 2 == 0))
    return cases


def test_avx2_and_swar_agree_and_ok_lines_are_json(tmp_path):
    cases = _cases()
    fast = L._run(cases, {}, tmp_path, "default")
    slow = L._run(cases, {"LM_NO_AVX2": "1"}, tmp_path, "swar")
    n_ok = n_refused = 0
    for (buf, key, _), a, b in zip(cases, fast, slow):
        assert a == b, f"AVX2 and SWAR scans differ on {buf[:160]!r}"
        ends = memoryview(a[0]).cast("q").tolist()
        offs = memoryview(a[2]).cast("q").tolist()
        k = start = 0
        for end, st in zip(ends, list(a[1])):
            line, start = buf[start:end], end
            if st != 0:
                n_refused += 1
                continue
            # an OK line: strict JSON (json.loads on the UTF-8 text), its text the value's UTF-8
            obj = json.loads(line.decode("utf-8"))
            assert a[3][offs[k]:offs[k + 1]] == obj[key].encode("utf-8"), line[:160]
            k += 1
            n_ok += 1
    assert n_ok > 2000 and n_refused > 1000
