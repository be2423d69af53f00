"""JsonlSource.iter_blocks (the columnar reading path, C scanner + exact fallback) gives
exactly what iterating the source record by record gives: texts, other fields, positions,
skips and errors, over random and hand-made awkward JSON lines (plain, gzip, zstd).
The reference is the record-by-record path (json.loads per line), computed independently."""
import gzip
import json
import random

import pytest
import torch  # noqa: F401  (loads torch's libraries before the extension)

from luminamoon import _C
from luminamoon.data import sources as S

AWKWARD = [
    b'{"text": "plain", "id": 1}', b'', b'   ', b'\t\r', b'\x0b{"text": "vt"}', b'{"text": 5}', b'{"id": 2}',
    b'[1, 2]', b'{"text": "a\\ud800b"}', b'{"text": "\\ud83d\\ude00 pair"}', b'{"text": "x", "text": "dup"}',
    b'{"t\\u0065xt": "escaped key"}', b'{"text": "nan", "v": NaN}', b'{"text": "ctl\x01"}', b'{"text": "bad \xff"}',
    b'{"text": "trail"} x', b'{"text": "ws"}   ', b'{"text": "num", "n": -0.5e-3, "m": 01}',
    b'{"text": "deep", "d": ' + b'[' * 80 + b']' * 80 + b'}', b'{"text": "' + b'long ' * 40 + b'"}',
    b'{"text": "esc \\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\u20ac", "meta": {"a": [true, false, null]}}',
    b'  {"text" : "spaced" , "id" : "x"}  ', b'{"text": ""}', b'{}', b'{"text": "caf\xc3\xa9"}',
]


def _lines(rng, n):
    out = []
    for _ in range(n):
        if rng.random() < 0.3:
            out.append(rng.choice(AWKWARD))
        else:
            text = "".join(rng.choice("ab \n\"\\é€😀\t\x00") for _ in range(rng.randint(0, 30)))
            rec = {"id": rng.randint(0, 99), "text": text} if rng.random() < 0.7 else {"text": text}
            out.append(json.dumps(rec, ensure_ascii=rng.random() < 0.5).encode())
    return out


def _write(path, lines, comp, crlf=False):
    blob = b"".join(l + (b"\r\n" if crlf else b"\n") for l in lines)
    if comp == "gz":
        blob = gzip.compress(blob)
    elif comp == "zst":
        import zstandard
        blob = zstandard.ZstdCompressor().compress(blob)
    path.write_bytes(blob)


def _by_record(src, n):
    """Blocks of n records made by iterating the source record by record."""
    out, cur = [], []
    it = iter(src)
    while True:
        try:
            rec = next(it)
        except StopIteration:
            break
        cur.append((_fix(None, rec[src.text_key]), {k: v for k, v in rec.items() if k != src.text_key}))
        if len(cur) == n:
            out.append((cur, src.position(), src.skipped))
            cur = []
    if cur:
        out.append((cur, src.position(), src.skipped))
    return out


def _fix(rec, text):
    """Lone surrogates (a StringTensor holds UTF-8) as U+FFFD, in both paths alike."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace") if not text.isascii() else text


def _norm(pos):
    return {k: v for k, v in pos.items() if k not in ("frame", "frame_uoff")}


def _blocks(src, n):
    out = []
    for b in src.iter_blocks(n):
        texts = b.texts.tolist()
        out.append((list(zip(texts, list(b.records))), b.position, b.skipped))
    return out


def _compare(make, n):
    try:
        want = _by_record(make(), n)
        want_err = None
    except ValueError as e:
        want, want_err = None, str(e)
    got_blocks = []
    try:
        src = make()
        for b in src.iter_blocks(n, fix_text=_fix):
            got_blocks.append((list(zip(b.texts.tolist(), list(b.records))), b.position, b.skipped))
        got_err = None
    except ValueError as e:
        got_err = str(e)
    assert got_err == want_err
    if want is not None:
        assert [(r, _norm(p), s) for r, p, s in got_blocks] == [(r, _norm(p), s) for r, p, s in want]


@pytest.mark.parametrize("comp", ["plain", "gz", "zst"])
@pytest.mark.parametrize("seed", range(6))
def test_blocks_equal_records(tmp_path, comp, seed):
    rng = random.Random(seed)
    lines = _lines(rng, rng.randint(50, 400))
    path = tmp_path / f"d.jsonl{'' if comp == 'plain' else '.' + comp}"
    _write(path, lines, comp, crlf=seed % 3 == 0)
    lim = rng.choice([None, 40, 200])
    n = rng.choice([1, 7, 64, 1000])
    for on_error in ("skip", "raise"):
        _compare(lambda: S.JsonlSource(str(path), on_error=on_error, max_record_bytes=lim, gzip_index=False), n)


def test_blocks_sharding_resume_and_many_files(tmp_path):
    rng = random.Random(7)
    paths = []
    for i in range(3):
        p = tmp_path / f"f{i}.jsonl"
        _write(p, _lines(rng, 120), "plain")
        paths.append(str(p))
    for ws, rank in ((1, 0), (2, 1), (5, 3)):  # record split (2 ranks... 3 files: file split), record split
        _compare(lambda: S.JsonlSource(paths, on_error="skip", world_size=ws, rank=rank), 13)
    # resuming at a block's position gives the rest
    src = S.JsonlSource(paths, on_error="skip")
    blocks = list(src.iter_blocks(17, fix_text=_fix))
    for k in (0, 3, len(blocks) - 2):
        again = S.JsonlSource(paths, on_error="skip", position=blocks[k].position)
        rest = [t for b in again.iter_blocks(17, fix_text=_fix) for t in b.texts.tolist()]
        assert rest == [t for b in blocks[k + 1:] for t in b.texts.tolist()]


def test_huge_line_streamed_past_and_bom(tmp_path):
    p = tmp_path / "big.jsonl.gz"
    big = b'{"text": "' + b"z" * (3 << 20) + b'"}'
    _write(p, [b'\xef\xbb\xbf{"text": "bom"}', big, b'{"text": "after"}'], "gz")
    _compare(lambda: S.JsonlSource(str(p), on_error="skip", max_record_bytes=1000, gzip_index=False), 2)
    _compare(lambda: S.JsonlSource(str(p), max_record_bytes=1000, gzip_index=False), 2)
    _compare(lambda: S.JsonlSource(str(p), gzip_index=False), 2)


def test_scanner_never_accepts_what_json_loads_refuses():
    """Every line the C scanner decodes, json.loads decodes to the same text."""
    rng = random.Random(3)
    pieces = [b'{', b'}', b'"text"', b':', b'"a"', b',', b'"id"', b'1', b'[', b']', b' ', b'\\', b'"', b'\\u00e9',
              b'\\ud800', b'\xc3\xa9', b'\xff', b'-', b'0', b'.', b'e', b'null', b'\x0b', b'\t', b'"\\n"']
    lines = [b"".join(rng.choice(pieces) for _ in range(rng.randint(1, 14))) for _ in range(20000)]
    inner = [b'a', b' ', b'\\n', b'\\u00e9', b'\\ud800', b'\\udc00', b'\\ud83d\\ude00', b'\\ud83d', b'\xc3\xa9',
             b'\xed\xa0\x80', b'\x01', b'\\', b'"', b'\\x', b'\xf4\x90\x80\x80', b'\xe0\x80\x80', b'\xf0\x9f\x98\x80',
             b'\x7f', b'\\/', b'\\u12', b'\\uZZZZ']
    tails = [b'}', b', "id": 1}', b', "id": [}', b' }', b'}x', b', "text": "b"}', b', "n": 1e5}', b', "n": -}']
    for _ in range(20000):
        body = b"".join(rng.choice(inner) for _ in range(rng.randint(0, 6)))
        lines.append(b'{"text": "' + body + b'"' + rng.choice(tails))
    lines += [l for l in AWKWARD]
    blob = b"\n".join(lines)
    ends, status, offs, data = _C.jsonl_scan(blob, "text", -1)
    status = status.tolist()
    offs = offs.tolist()
    data = bytes(data.numpy())
    k = 0
    n_ok = 0
    for line, st in zip(lines, status):
        if st != 0:
            continue
        n_ok += 1
        obj = json.loads(line.decode("utf-8"))
        assert isinstance(obj, dict) and isinstance(obj.get("text"), str)
        assert data[offs[k]:offs[k + 1]] == obj["text"].encode("utf-8"), line
        k += 1
    assert n_ok > 100


@pytest.mark.parametrize("comp", ["plain", "gz"])
def test_resumable_pipeline_on_blocks_resumes_exactly(tmp_path, comp):
    """ResumablePipeline over a plain JsonlSource reads blocks (reader thread ahead of the
    stages); stopping after a commit and resuming gives what one uninterrupted pass gives."""
    from luminamoon.data import ResumablePipeline

    rng = random.Random(11)
    lines = _lines(rng, 900)
    lines = [l for l in lines if b"\\ud800" not in l]  # a lone surrogate cannot enter a StringTensor
    path = tmp_path / f"r.jsonl{'' if comp == 'plain' else '.' + comp}"
    _write(path, lines, comp)

    def collect(state, stop_after=None):
        out = []
        with ResumablePipeline(S.JsonlSource(str(path), on_error="skip"), batch_size=37, state_dir=str(state),
                               dedup=True, stages={"quality": False}) as pipe:
            assert pipe._producer.source._columnar
            for b in pipe:
                assert b.block is not None  # the columnar path
                recs = b.records
                out += [(recs[i].get("id"), t) for i, t in zip(b.source_index.tolist(), b.texts.tolist())]
                if (b.index + 1) % 3 == 0:
                    pipe.commit()
                    if stop_after is not None and b.index + 1 >= stop_after:
                        return out, False
        return out, True

    ref, done = collect(tmp_path / "ref")
    assert done and len(ref) > 100
    got = []
    for stop in (6, 12, None):
        part, done = collect(tmp_path / "st", stop)
        got += part
    assert done and got == ref
