"""The JSONL scanner's second key (lm_jsonl_scan2, ``_C.jsonl_scan(..., key2=)``) and the
blocks that carry it (``JsonlSource.iter_blocks(n, fields=("id",))``, what ``luminamoon run``
reads): the texts, statuses and line ends are those of the one-key scan; an OK line's second
value is given exactly when json.loads finds that key once at top level with a string value
that encodes to UTF-8 (no lone surrogate), byte for byte; ``field_strings`` of the pre-scanned
field equals the rescanning path and json.loads, record for record, also after skipped bad
lines, across read boundaries, resumed, and at the portable level (LM_NO_AVX2=1)."""
import gzip
import json
import os
import random
import subprocess
import sys

import pytest
import torch  # noqa: F401  (loads torch's libraries before the extension)

from luminamoon import _C
from luminamoon.data import _blocks
from luminamoon.data.sources import JsonlSource

_ALPHA = ["a", "Z", " ", "é", "日", "\U0001f600", "\n", '"', "\\", "/", "\x00", "\x1f"]
_LONE = ["\ud800", "\udc00"]


def _rand_str(rng, n):
    alpha = _ALPHA + _LONE if rng.random() < 0.1 else _ALPHA  # a lone surrogate in some strings only
    return "".join(rng.choice(alpha) if rng.random() < 0.3 else chr(rng.randint(0x20, 0x7e)) for _ in range(n))


def _line(rng, i):
    k = rng.randrange(14)
    text = _rand_str(rng, rng.randint(0, 90))
    idv = _rand_str(rng, rng.choice([0, 1, 5, 31, 32, 33, 63, 64, 65, rng.randint(0, 300)]))
    ea = rng.random() < 0.5
    dump = lambda o: json.dumps(o, ensure_ascii=ea)  # noqa: E731
    if k == 0:
        return dump({"id": idv, "text": text})
    if k == 1:
        return dump({"text": text, "source": "s", "id": idv})
    if k == 2:
        return dump({"text": text})  # no id
    if k == 3:
        return dump({"id": rng.choice([1, 2.5, None, True, [idv], {"id": idv}]), "text": text})
    if k == 4:  # twice
        return '{"id": %s, "text": %s, "id": %s}' % (dump(idv), dump(text), dump(idv + "x"))
    if k == 5:  # nested ids only
        return '{"m": {"id": %s}, "a": [%s, {"id": 1}], "text": %s}' % (dump(idv), dump("id"), dump(text))
    if k == 6:  # an escaped key that spells id
        return '{"\\u0069d": %s, "text": %s}' % (dump(idv), dump(text))
    if k == 7:  # a lone surrogate escape in the id
        return '{"id": "a\\udc00%s", "text": %s}' % (dump(idv)[1:-1], dump(text))
    if k == 8:  # the text is not a string / malformed line
        return rng.choice(['{"id": %s, "text": 5}' % dump(idv), '{"id": %s, "text": "x"' % dump(idv), "[1, 2]"])
    if k == 9:
        return "   "  # blank
    if k == 10:  # whitespace everywhere
        return ' { "id" :\t%s ,\r "text" : %s } ' % (dump(idv), dump(text))
    if k == 11:
        return '{"ID": %s, "text": %s}' % (dump(idv), dump(text))
    if k == 12:  # id with a bad escape: the line is not JSON
        return '{"id": "a\\q", "text": %s}' % dump(text)
    return '{"id": %s, "text": %s}' % (dump(idv), dump(text))


def _lines(seed, n=400):
    rng = random.Random(seed)
    return [_line(rng, i) for i in range(n)]


def _ref_id(line):
    """(1, utf-8 bytes) when json.loads finds "id" once at top level, a str that encodes; else (0, None)."""
    pairs = json.loads(line, object_pairs_hook=lambda p: p)
    ids = [v for k, v in pairs if k == "id"]
    if len(ids) != 1 or not isinstance(ids[0], str):
        return 0, None
    try:
        return 1, ids[0].encode("utf-8")
    except UnicodeEncodeError:
        return 0, None


def _check_scan(buf, lines_b):
    one = _C.jsonl_scan(buf, "text", -1)
    two = _C.jsonl_scan(buf, "text", -1, "id")
    assert len(two) == 7
    for a, b in zip(one, two[:4]):
        assert torch.equal(a, b)
    ends, status, koff, kdata, kok = two[0].numpy(), two[1].numpy(), two[4].numpy(), two[5].numpy(), two[6].numpy()
    assert len(koff) == len(kok) + 1 == int((status == 0).sum()) + 1 and koff[0] == 0
    r = 0
    start = 0
    seen = 0
    for i, e in enumerate(ends.tolist()):
        line = buf[start:e]
        start = e
        if status[i] != 0:
            continue
        ok, want = _ref_id(line)
        assert kok[r] == ok, line
        got = kdata[koff[r]:koff[r + 1]].tobytes()
        assert got == (want if ok else b""), line
        seen += ok
        r += 1
    return seen


@pytest.mark.parametrize("seed", range(6))
def test_second_key_matches_json_loads(seed):
    lines = _lines(seed)
    for ending in ("\n", "\r\n"):
        buf = (ending.join(lines) + ("" if seed % 2 else ending)).encode("utf-8", "surrogatepass")
        assert _check_scan(buf, lines) > 20
    # at every start alignment of the buffer (the 32-byte loads and their stores)
    buf = ("\n".join(lines[:40]) + "\n").encode("utf-8", "surrogatepass")
    for k in range(33):
        _check_scan(b" " * k + buf, None)


def test_second_key_arguments():
    with pytest.raises(ValueError, match="key2"):
        _C.jsonl_scan(b'{"text": "a"}\n', "text", -1, "")
    with pytest.raises(TypeError, match="key2"):
        _C.jsonl_scan(b'{"text": "a"}\n', "text", -1, 3)
    t = _C.jsonl_scan(b'{"text": "a", "id": "b"}\n', "text", -1, b"id")
    assert t[5].numpy().tobytes() == b"b" and t[6].tolist() == [1]
    t = _C.jsonl_scan(b"", "text", -1, "id")
    assert len(t) == 7 and t[4].tolist() == [0] and len(t[6]) == 0
    # the same key as the text: never the second value
    t = _C.jsonl_scan(b'{"text": "a"}\n', "text", -1, "text")
    assert t[6].tolist() == [0]


def _write(path, lines, gz):
    data = ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")
    if gz:
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        with open(path, "wb") as f:
            f.write(data)


def _fix(rec, text):  # lone surrogates (json.loads-parsed texts only) made U+FFFD, as the run does
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _ids(src, n, fields):
    out = []
    for blk in src.iter_blocks(n, fix_text=_fix, **({"fields": fields} if fields else {})):
        recs = blk.records
        idx = list(range(len(recs)))[::-1] + [0]
        got = recs.field_strings(idx, "id")
        few = list(range(len(recs)))[::-13]  # the run's case: a few kept records
        out.append((blk.lines.tolist(), idx, got, blk.texts.tolist(), blk.position, blk.skipped,
                    recs.field_strings(few, "id"), [got[len(recs) - 1 - i] for i in few]))
    return out


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("read", [None, 997])
def test_blocks_prescanned_ids_equal_rescanning(tmp_path, monkeypatch, gz, read):
    if read is not None:  # small reads: blocks span reads, lines cross read boundaries
        monkeypatch.setattr(_blocks, "_READ", read)
        monkeypatch.setattr(_blocks, "_READ_FIRST", read)
    lines = [ln for ln in _lines(7, 700)]
    path = str(tmp_path / ("in.jsonl.gz" if gz else "in.jsonl"))
    _write(path, lines, gz)
    for n in (1, 37, 2048):
        old = _ids(JsonlSource(path, on_error="skip"), n, None)
        new = _ids(JsonlSource(path, on_error="skip"), n, ("id",))
        assert new == old
        # with too-long lines skipped among them
        lim = {"on_error": "skip", "max_record_bytes": 120}
        assert _ids(JsonlSource(path, **lim), n, ("id",)) == _ids(JsonlSource(path, **lim), n, None)
        fast = 0
        for ln, idx, got, _t, _p, _s, few, few_all in new:
            assert few == few_all
            for i, v in zip(idx, got):
                if v is not None:
                    fast += 1
                    ok, want = _ref_id(lines[ln[i] - 1])
                    assert ok and v.encode("utf-8") == want
        assert fast > 100
    # the field given as a str, and one that is the text key (no second value: the rescanning path)
    assert _ids(JsonlSource(path, on_error="skip"), 50, "id") == _ids(JsonlSource(path, on_error="skip"), 50, None)
    a = [b[2] for b in _ids(JsonlSource(path, on_error="skip"), 50, ("text",))]
    assert a == [b[2] for b in _ids(JsonlSource(path, on_error="skip"), 50, None)]


def test_blocks_prescanned_ids_resume_and_cache(tmp_path):
    lines = [json.dumps({"id": f"doc-{i}-é" if i % 3 else i, "text": f"t{i}"}) for i in range(500)]
    path = str(tmp_path / "in.jsonl")
    _write(path, lines, False)
    src = JsonlSource(path)
    it = src.iter_blocks(64, fields=("id",))
    next(it)
    pos = src.position()
    rest = JsonlSource(path, position=pos)
    blk = next(rest.iter_blocks(64, fields=("id",)))
    got = blk.records.field_strings(range(len(blk)), "id")
    want = [f"doc-{i}-é" if i % 3 else None for i in range(64, 128)]
    assert got == want
    # a record already read is read as the record (it may have been changed)
    blk.records[1]["id"] = "changed"
    got = blk.records.field_strings([1, 2], "id")
    assert got == [None, want[2]]
    with pytest.raises(IndexError):
        blk.records.field_strings([64], "id")
    with pytest.raises(ValueError, match="fields"):
        next(JsonlSource(path).iter_blocks(8, fields=("id", "source")))


def test_second_key_portable_level_same():
    """The AVX2 and the portable (LM_NO_AVX2=1) string runs give the same second values."""
    code = (
        "import hashlib, sys, torch; sys.path.insert(0, %r); import test_jsonl_scan_fields as t;"
        "from luminamoon import _C; h = hashlib.sha256()\n"
        "for s in range(4):\n"
        "    buf = ('\\n'.join(t._lines(s)) + '\\n').encode('utf-8', 'surrogatepass')\n"
        "    for x in _C.jsonl_scan(buf, 'text', -1, 'id'): h.update(x.numpy().tobytes())\n"
        "print(h.hexdigest())" % os.path.dirname(os.path.abspath(__file__)))
    outs = []
    for env in ({}, {"LM_NO_AVX2": "1"}):
        r = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, **env), capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout.strip())
    assert outs[0] == outs[1] and len(outs[0]) == 64


@pytest.mark.parametrize("seed", range(4))
def test_scan_of_pieces_equals_scan_of_joined(seed):
    """``_C.jsonl_scan(list of pieces)`` (how a read's decompressed pieces are scanned in place) gives
    exactly what scanning their concatenation gives: cuts anywhere (inside lines, right after or
    before a newline, empty pieces, a last line without its newline), bytes / bytearray /
    memoryview pieces, with and without the second key and a line limit."""
    rng = random.Random(seed)
    lines = _lines(seed, 300)
    raw = ("\n".join(lines) + ("\n" if seed % 2 else "")).encode("utf-8", "surrogatepass")
    for it in range(60):
        cuts = sorted(rng.randint(0, len(raw)) for _ in range(rng.randint(0, 8)))
        if it % 3 == 0:  # at newlines and next to them
            nls = [i for i, b in enumerate(raw) if b == 10]
            cuts = sorted(rng.choice(nls) + d for _ in range(4) for d in (rng.choice((0, 1)),))
        parts = [raw[a:b] for a, b in zip([0] + cuts, cuts + [len(raw)])]
        kinds = [bytes, bytearray, memoryview]
        parts = [kinds[rng.randrange(3)](p) for p in parts]
        for lim, key2 in ((-1, "id"), (-1, None), (rng.randint(0, 200), "id")):
            args = (lim,) if key2 is None else (lim, key2)
            want = [x.numpy().tobytes() for x in _C.jsonl_scan(raw, "text", *args)]
            got = [x.numpy().tobytes() for x in _C.jsonl_scan(parts, "text", *args)]
            assert got == want, (it, [len(p) for p in parts], lim, key2)
    assert [x.numel() for x in _C.jsonl_scan([], "text", -1)] == [0, 0, 1, 0]
    assert [x.numel() for x in _C.jsonl_scan((b"", b""), "text", -1)] == [0, 0, 1, 0]
    with pytest.raises(TypeError, match="bytes-like"):
        _C.jsonl_scan([b'{"text": "a"}\n', "str"], "text", -1)


def test_joined_slices():
    from luminamoon.data._blocks import _Joined

    rng = random.Random(3)
    for _ in range(500):
        parts = [bytes(rng.randrange(256) for _ in range(rng.randint(0, 6))) for _ in range(rng.randint(1, 5))]
        parts = [rng.choice([bytes, bytearray, memoryview])(p) for p in parts]
        whole = b"".join(bytes(p) for p in parts)
        j = _Joined(parts)
        assert len(j) == len(whole)
        for _ in range(8):
            a, b = rng.randint(-3, len(whole) + 3), rng.randint(-3, len(whole) + 3)
            assert j[a:b] == whole[a:b]
