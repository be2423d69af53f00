"""Review (session 27) of lm_jsonl_scan2 / ``_C.jsonl_scan(..., key2=)`` (817e0c8, 7222969) and the
blocks that carry the second field (``JsonlSource.iter_blocks(n, fields=("id",))``).

Adversarial lines: every escape (one-letter, ``\\uXXXX``, surrogate pairs, reversed / lone
surrogates, ``\\u0000``), raw control bytes, invalid UTF-8 (overlongs, encoded surrogates,
> U+10FFFF, truncated sequences, stray continuation bytes) placed at every offset around the
32-byte loads of the AVX2 string loop, duplicated text / id keys, ids nested in objects / arrays
or spelled inside strings, non-string ids, escaped keys, CRLF, a BOM, long lines, and buffers
whose last byte is the last byte before an unmapped page (lines cut anywhere, with and without
a final newline).  Each line is checked against the standard library, computed here:

* status OK  =>  the line is strict UTF-8, ``json.loads`` gives an object with the text key once
  whose value encodes to UTF-8, and the decoded text is exactly those bytes;
* status SLOW => the line is not such a simple line (json error, text missing / twice / not a
  string / lone surrogate, or an escaped top-level key, which the generator records);
* for OK lines ``key2_ok`` is 1 exactly when the id key is at top level once with a string
  value that encodes, and the bytes are ``value.encode("utf-8")`` (json.loads keeps the last of
  duplicated keys: the scanner must then not vouch for either);
* line ends / blank lines as ``bytes.split`` / ``bytes.strip`` give them.

The same cases run at the AVX2 level here and at the portable level (``LM_NO_AVX2=1``, read
once: one child process) and must give byte-identical outputs.  Then ``iter_blocks(n,
fields=("id",))``'s ``field_strings`` is compared with the plain (rescanning) path and
``json.loads`` for every record, over several block sizes and resumed from block positions."""
import ctypes
import gzip
import json
import mmap
import os
import pickle
import random
import subprocess
import sys

import numpy as np
import pytest
import torch  # noqa: F401  (loads torch's libraries before the extension)

from luminamoon import _C
from luminamoon.data import _blocks
from luminamoon.data._blocks import LazyRecords
from luminamoon.data.sources import JsonlSource

# pieces of a JSON string's raw contents: plain, escapes, valid and invalid UTF-8
_GOOD = [b"a", b"Z", b" ", b"~", b"id", b"\\n", b'\\"', b"\\\\", b"\\/", b"\\b", b"\\f", b"\\r", b"\\t",
         b"\\u0000", b"\\u00e9", b"\\u00E9", b"\\u20ac", b"\\uffff", b"\\ud83d\\ude00", b"\\uD83D\\uDE00",
         b"\\udbff\\udfff", b"\xc3\xa9", b"\xe2\x82\xac", b"\xef\xbf\xbf", b"\xf0\x9f\x98\x80",
         b"\xf4\x8f\xbf\xbf", b"\x7f", b'\\"id\\": \\"x\\"']
_LONE = [b"\\ud800", b"\\udc00", b"\\ude00\\ud83d", b"\\ud800\\ud800", b"\\ud800x", b"\\udbff\\u0041"]
_BAD = [b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xe0\x9f\xbf", b"\xed\xa0\x80", b"\xed\xbf\xbf",
        b"\xf0\x80\x80\x80", b"\xf0\x8f\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xff", b"\xfe",
        b"\x80", b"\xbf", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98", b"\xc3\x41", b"\xe2\x28\xa1", b"\x00", b"\x01",
        b"\x1f", b"\t", b"\n"[:0] + b"\x0b", b"\\x", b"\\u12", b"\\u12g4", b"\\U0041", b"\\'"]


def _contents(rng, kind):
    """Raw contents of a JSON string: 'good' (valid, decodable), 'lone' (valid JSON with a lone
    surrogate escape), 'bad' (invalid JSON or UTF-8); the special piece lands at a random offset
    near the 32-byte load edges."""
    n = rng.choice([0, 1, 7, 8, 15, 16, 28, 29, 30, 31, 32, 33, 34, 35, 60, 63, 64, 65, 95, 96, 97, rng.randint(0, 400)])
    out = bytearray()
    while len(out) < n:
        if rng.random() < 0.75:
            out += bytes(rng.choice(b"abcxyz ABC0123.,:{}[]") for _ in range(rng.randint(1, 40)))
        else:
            out += rng.choice(_GOOD)
    out = bytes(out[:n]) if not out.endswith(b"\\") else bytes(out)
    while out.endswith(b"\\") and not out.endswith(b"\\\\"):
        out = out[:-1]  # never end on half an escape
    if kind == "good":
        return out
    at = rng.randint(max(0, len(out) - 40), len(out))
    while at > 0 and out[at - 1:at] == b"\\":  # not inside an escape
        at -= 1
    piece = rng.choice(_LONE if kind == "lone" else _BAD)
    return out[:at] + piece + out[at:]


def _val(rng):
    """(raw JSON value, kind) for an id or a text."""
    r = rng.random()
    if r < 0.6:
        return b'"' + _contents(rng, "good") + b'"', "str"
    if r < 0.7:
        return b'"' + _contents(rng, "lone") + b'"', "lone"
    if r < 0.8:
        return b'"' + _contents(rng, "bad") + b'"', "bad"
    return rng.choice([b"1", b"-0.5e3", b"null", b"true", b"[]", b'["id"]', b'{"id": "x"}', b'{}', b"[1, {\"id\": 2}]",
                       b'"id"']), "other"


def _line(rng):
    """(raw line without newline, escaped_top_level_key)."""
    r = rng.random()
    if r < 0.03:
        return rng.choice([b"", b"   ", b"\t\r", b"\x0b\x0c "]), False
    if r < 0.05:
        return rng.choice([b"[1, 2]", b'"text"', b"{", b'{"text": "a"', b'{"text": "a"}}', b'{"text": "a",}',
                           b'\xef\xbb\xbf{"text": "a", "id": "b"}', b'{"text": "a"} x', b"{}"]), False
    members = []
    esc = False
    ntext = rng.choice([1, 1, 1, 1, 1, 1, 0, 2])
    nid = rng.choice([1, 1, 1, 1, 0, 2, 3])
    for _ in range(ntext):
        t, _k = _val(rng) if rng.random() < 0.35 else (b'"' + _contents(rng, "good") + b'"', "str")
        members.append((b'"text"', t))
    for _ in range(nid):
        members.append((b'"id"', _val(rng)[0]))
    for _ in range(rng.choice([0, 0, 1, 3])):
        k = rng.choice([b'"meta"', b'"ID"', b'"i"', b'"idx"', b'"texts"', b'"\\u0069d"', b'"t\\u0065xt"', b'"m\\n"',
                        b'"\xc3\xa9"', b'"id "', b'"x"'])
        esc |= b"\\" in k
        v = rng.choice([b"1", b'{"id": "nested", "text": "n"}', b'[{"id": "a"}, "id", ["text"]]', b'"id"',
                        b'"\\"id\\": \\"y\\""', b"null", b'{"a": {"b": [{"id": "deep"}]}}'])
        members.append((k, v))
    rng.shuffle(members)
    ws = [b"", b" ", b"\t", b"  ", b"\r"]
    body = b",".join(rng.choice(ws) + k + rng.choice(ws) + b":" + rng.choice(ws) + v + rng.choice(ws)
                     for k, v in members)
    return rng.choice([b"", b" "]) + b"{" + body + b"}" + rng.choice([b"", b" ", b"\t"]), esc


def _corpus(seed, n):
    rng = random.Random(seed)
    lines, escs = [], []
    for _ in range(n):
        ln, e = _line(rng)
        lines.append(ln)
        escs.append(e)
    return lines, escs


class _Pairs(list):
    """An object's (key, value) pairs in order (json.loads' object_pairs_hook)."""


def _ref(line, key2="id"):
    """(simple, text_bytes, id_ok, id_bytes) from the standard library for one line (no newline)."""
    try:
        s = line.decode("utf-8")  # strict: what the scanner vouches for
        pairs = json.loads(s, object_pairs_hook=_Pairs)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False, None, 0, None
    if not isinstance(pairs, _Pairs):
        return False, None, 0, None
    texts = [v for k, v in pairs if k == "text"]
    if len(texts) != 1 or not isinstance(texts[0], str):
        return False, None, 0, None
    try:
        tb = texts[0].encode("utf-8")
    except UnicodeEncodeError:
        return False, None, 0, None
    ids = [v for k, v in pairs if k == key2]
    if len(ids) == 1 and isinstance(ids[0], str) and key2 != "text":
        try:
            return True, tb, 1, ids[0].encode("utf-8")
        except UnicodeEncodeError:
            pass
    return True, tb, 0, None


def _check(buf, res, escs=None, key2="id"):
    """res = _C.jsonl_scan(buf, "text", -1, "id") as numpy arrays; checks every line."""
    ends, status, toff, tdata, koff, kdata, kok = res
    raw = buf.split(b"\n")
    if raw and raw[-1] == b"":
        raw.pop()
    assert len(ends) == len(status) == len(raw)
    pos, r, n_ok, n_id = 0, 0, 0, 0
    for i, ln in enumerate(raw):
        pos += len(ln) + (1 if pos + len(ln) < len(buf) else 0)
        assert ends[i] == pos
        body = ln[:-1] if ln.endswith(b"\r") else ln
        st = int(status[i])
        if ln.strip() == b"":
            assert st == 1, ln
            continue
        simple, tb, iok, ib = _ref(ln, key2)
        if st == 0:
            assert simple, ln
            assert tdata[toff[r]:toff[r + 1]].tobytes() == tb, ln
            assert int(kok[r]) == iok, ln
            assert kdata[koff[r]:koff[r + 1]].tobytes() == (ib if iok else b""), ln
            r += 1
            n_ok += 1
            n_id += iok
        else:
            assert st == 2, (st, ln)
            # SLOW only for lines the scanner may refuse: not simple, or an escaped top-level key
            # (the generator's record), or a leading \v / \f the JSON grammar refuses
            assert not simple or (escs is not None and escs[i]) or body[:1] in (b"\x0b", b"\x0c"), ln
    assert r == len(kok) == len(toff) - 1 == len(koff) - 1
    return n_ok, n_id


def _np(res):
    return tuple(t.numpy() for t in res)


def _cases():
    """(buf, escs) cases: whole corpora (LF / CRLF, with and without a last newline), every start
    offset 0..40 of a smaller one, and one very long line."""
    out = []
    for seed in range(3):
        lines, escs = _corpus(seed, 1500)
        for nl in (b"\n", b"\r\n"):
            buf = nl.join(lines) + (nl if seed % 2 == 0 else b"")
            out.append((buf, escs))
    lines, escs = _corpus(7, 60)
    buf = b"\n".join(lines) + b"\n"
    for k in range(41):
        out.append((b" " * k + buf, escs))
    long_text = ("x" * 1000 + "\u00e9\U0001f600\\\"\n") * 700
    long_line = json.dumps({"id": "L" * 70001 + "\u20ac", "text": long_text, "meta": ["id"] * 1000}).encode()
    out.append((long_line + b"\n" + long_line, None))
    return out


def _edge_cases(seed):
    """Buffers that end exactly at the end of their mapping (the next page unmapped): a line
    cut at every length, the id last, in a string or not, with and without a final newline."""
    rng = random.Random(seed)
    out = []
    for _ in range(60):
        ln, _e = _line(rng)
        tail = b'{"text": "' + _contents(rng, "good") + b'", "id": "' + _contents(rng, rng.choice(["good", "bad"])) + b'"}'
        for cut in sorted({len(tail), len(tail) - 1, len(tail) - 2, rng.randint(0, len(tail)), rng.randint(0, len(tail))}):
            out.append(ln + b"\n" + tail[:cut])
        out.append(ln + b"\n" + tail + b"\n")
    return out


_CHILD = r"""
import pickle, sys
import torch
from luminamoon import _C
sys.path.insert(0, sys.argv[3])
import test_review_s27_jsonl_scan2 as t
bufs, edges = pickle.load(open(sys.argv[1], "rb"))
out = [t._scan_bytes(b) for b in bufs]
out_e = [t._at_page_end(b, t._scan_bytes) for b in edges]
pickle.dump((out, out_e), open(sys.argv[2], "wb"))
"""


def _scan_bytes(buf):
    """_C.jsonl_scan(buf, "text", -1, "id") as bytes (comparable across processes)."""
    return tuple(t.numpy().tobytes() for t in _C.jsonl_scan(buf, "text", -1, "id"))


def _at_page_end(buf, fn):
    """fn(view): view holds buf's bytes, its last byte the last before an unmapped (PROT_NONE) page."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    page = mmap.PAGESIZE
    n = (len(buf) + page - 1) // page * page or page
    m = mmap.mmap(-1, n + page)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    assert libc.mprotect(addr + n, page, 0) == 0
    m[n - len(buf):n] = buf
    view = memoryview(m)[n - len(buf):n]
    try:
        return fn(view)
    finally:
        view.release()
        assert libc.mprotect(addr + n, page, 3) == 0
        m.close()


def _scan_all(bufs, edges, env_extra, tmp_path, tag):
    cases = tmp_path / f"cases-{tag}.pkl"
    res = tmp_path / f"res-{tag}.pkl"
    with open(cases, "wb") as f:
        pickle.dump((bufs, edges), f)
    env = dict(os.environ, **env_extra)
    subprocess.run([sys.executable, "-c", _CHILD, str(cases), str(res), os.path.dirname(os.path.abspath(__file__))],
                   check=True, env=env, timeout=300)
    with open(res, "rb") as f:
        return pickle.load(f)


def test_scan2_matches_json_loads_and_levels_agree_and_no_read_past_the_end(tmp_path):
    cases = _cases()
    edges = _edge_cases(11)
    here = []
    n_ok = n_id = 0
    for buf, escs in cases:
        res = _C.jsonl_scan(buf, "text", -1, "id")
        one = _C.jsonl_scan(buf, "text", -1)  # the one-key scan: same ends, statuses, texts
        for a, b in zip(one, res[:4]):
            assert torch.equal(a, b)
        a, b = _check(buf, _np(res), escs)
        n_ok, n_id = n_ok + a, n_id + b
        here.append(tuple(t.numpy().tobytes() for t in res))
    # the generator reaches every outcome often enough to mean something
    assert n_ok > 1500 and n_id > 400 and n_ok - n_id > 400
    for buf in edges:
        _check(buf, _np(_C.jsonl_scan(buf, "text", -1, "id")))
    # max_line_bytes: TOO_LONG (3) exactly for the lines whose body (without \n / \r\n) is longer;
    # the other lines as without a limit, their texts and second values too
    for buf, _escs in cases[:2]:
        full = _np(_C.jsonl_scan(buf, "text", -1, "id"))
        for lim in (0, 1, 37, 100, 300):
            got = _np(_C.jsonl_scan(buf, "text", lim, "id"))
            assert (got[0] == full[0]).all()
            raw = buf.split(b"\n")
            if raw[-1] == b"":
                raw.pop()
            # a line followed by \n loses a \r before it (CRLF); the last line without \n keeps all
            ended = [i < len(raw) - 1 or buf.endswith(b"\n") for i in range(len(raw))]
            bodies = [ln[:-1] if e and ln.endswith(b"\r") else ln for ln, e in zip(raw, ended)]
            long_ = np.array([len(b) > lim for b in bodies])
            assert ((got[1] == 3) == long_).all()
            assert (got[1][~long_] == full[1][~long_]).all()
            okf = np.flatnonzero(full[1] == 0)
            keep = np.flatnonzero(~long_[okf])  # OK lines that stay OK under the limit
            for r_new, r_old in enumerate(keep):
                assert got[3][got[2][r_new]:got[2][r_new + 1]].tobytes() == full[3][full[2][r_old]:full[2][r_old + 1]].tobytes()
                assert got[6][r_new] == full[6][r_old]
                assert got[5][got[4][r_new]:got[4][r_new + 1]].tobytes() == full[5][full[4][r_old]:full[4][r_old + 1]].tobytes()
    # other second keys: a non-ASCII one, a prefix of others ("i"), one holding objects, the text key itself
    buf, escs = cases[0]
    for key2 in ("\u00e9", "i", "meta", "ID", "text", b"id"):
        k2 = key2.decode() if isinstance(key2, bytes) else key2
        _check(buf, _np(_C.jsonl_scan(buf, "text", -1, key2)), escs, k2)
    # the portable level (child, LM_NO_AVX2=1) gives the same bytes, also at a page's end
    bufs = [b for b, _ in cases]
    port, port_e = _scan_all(bufs, edges, {"LM_NO_AVX2": "1"}, tmp_path, "port")
    assert port == here
    # and at the default level the edge buffers read nothing past their end (else SIGSEGV)
    edge_here = [_scan_bytes(b) for b in edges]
    assert port_e == edge_here
    for buf, want in zip(edges, edge_here):
        assert _at_page_end(buf, _scan_bytes) == want


def _write(path, lines, nl=b"\n"):
    with open(path, "wb") as f:
        f.write(nl.join(lines) + nl)


def _ref_records(lines):
    """json.loads of each kept line (not blank), in order; None for a malformed line."""
    out = []
    for ln in lines:
        if ln.strip() == b"":
            continue
        try:
            out.append(json.loads(ln))
        except ValueError:
            out.append(None)
    return out


@pytest.mark.parametrize("n,comp,read", [(1, None, None), (7, "gz", None), (64, "gz2", 65537), (4096, None, 65537),
                                         (33, "gz", 4097)])
def test_iter_blocks_ids_equal_plain_path_and_json_loads_across_blocks_and_resume(tmp_path, monkeypatch, n, comp,
                                                                                  read):
    """field_strings of the pre-scanned id == the plain path == json.loads for every record;
    a record's id is vouched (not None) exactly when the line is one the scanner decodes and
    json.loads finds one str id that encodes; malformed lines skipped between the records."""
    rng = random.Random(n)
    lines, vouch_l, want = [], [], []
    while len(lines) < 1500:
        ln, esc = _line(rng)
        if ln.startswith(b"\xef\xbb\xbf"):
            continue  # a BOM is accepted on line 1 only (tested elsewhere)
        try:
            obj = json.loads(ln.decode("utf-8"))  # as the source parses a line (strict UTF-8)
        except (UnicodeDecodeError, ValueError, RecursionError):
            obj = None
        if obj is None:
            good = False
            if rng.random() < 0.9:
                continue  # a few malformed lines (skipped by the source)
        else:
            if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                continue
            try:
                obj["text"].encode("utf-8")
            except UnicodeEncodeError:
                continue  # texts with lone surrogates: the source's repair is tested elsewhere
            good = True
        if ln.strip() == b"" or ln[:1] in (b"\x0b", b"\x0c"):
            continue
        lines.append(ln)
        if good:
            simple, _tb, iok, _ib = _ref(ln)
            want.append(obj)
            vouch_l.append(bool(simple and iok and not esc))
    raw = (b"\r\n" if n == 7 else b"\n").join(lines) + b"\n"
    if comp is None:
        path = tmp_path / "a.jsonl"
        path.write_bytes(raw)
    else:  # gzip: the decompressed pieces of a read scanned in place; "gz2": two members
        path = tmp_path / "a.jsonl.gz"
        cut = len(raw) // 3 if comp == "gz2" else len(raw)
        path.write_bytes(gzip.compress(raw[:cut]) + (gzip.compress(raw[cut:]) if cut < len(raw) else b""))
    if read is not None:  # small reads: many reads, lines carried across them
        monkeypatch.setattr(_blocks, "_READ", read)
        monkeypatch.setattr(_blocks, "_READ_FIRST", read // 2 + 1)

    def run(src, k0):
        got, blocks = [], []
        for blk in src.iter_blocks(n, fields=("id",)):
            recs = blk.records
            m = len(recs)
            idx = list(range(m))
            pre = recs.field_strings(idx, "id")
            assert recs.field_strings(idx[::9], "id") == pre[::9]  # the "few" branch
            if m:
                assert recs.field_strings([-1], "id") == pre[-1:]
            plain = LazyRecords.field_strings(_Plain(recs), idx, "id")
            assert plain == pre
            for j in range(m):
                w = want[k0 + len(got) + j]
                assert vouch_l[k0 + len(got) + j] == (pre[j] is not None), (w, pre[j])
                if pre[j] is not None:
                    assert pre[j] == w["id"]
                assert dict(recs[j], text=w["text"]) == w
            assert blk.texts.tolist() == [w["text"] for w in want[k0 + len(got):k0 + len(got) + m]]
            got += pre
            blocks.append((len(got), blk.position))
        return got, blocks

    got, blocks = run(JsonlSource(str(path), on_error="skip"), 0)
    assert len(got) == len(want)
    assert sum(v for v in vouch_l) > 300 and sum(not v for v in vouch_l) > 200
    # resumed from block positions: the same ids from there on
    for done, pos in blocks[:: max(1, len(blocks) // 4)][:4]:
        rest, _ = run(JsonlSource(str(path), on_error="skip", position=pos), done)
        assert rest == got[done:]


class _Plain(LazyRecords):
    """A LazyRecords seen without its prescanned field (the plain rescanning path)."""

    def __init__(self, recs):
        self.__dict__.update(recs.__dict__)
        self._field = None
