"""Review (session 27): ``_C.jsonl_scan`` over a list of pieces read as their concatenation (the
decompressed pieces of one read, scanned in place; a line across pieces copied into a scratch
buffer) must give exactly the outputs of scanning the joined bytes -- line ends, statuses, texts,
second values and their ok flags -- for any cut: empty and 1-byte pieces, cuts inside ``\\r\\n``,
inside multi-byte UTF-8, inside escapes and keys, a line across many pieces, no final newline,
mixed buffer types, with and without ``key2`` and ``max_line_bytes``; and each piece may end
at an unmapped page (nothing read past a piece).  The joined scan itself is checked against
``json.loads`` by test_review_s27_jsonl_scan2.py."""
import ctypes
import mmap
import random

import numpy as np
import torch  # noqa: F401  (loads torch's libraries before the extension)

from luminamoon import _C

import test_review_s27_jsonl_scan2 as gen


def _cuts(rng, n):
    """Random cut points in [0, n] (repeats give empty pieces)."""
    k = rng.choice([0, 1, 2, 3, 5, 9, 30, rng.randint(0, 200)])
    pts = sorted(rng.randint(0, n) for _ in range(k))
    if rng.random() < 0.3:
        pts += [pts[-1]] * 2 if pts else [0, 0]
        pts.sort()
    return pts


def _pieces(rng, buf, pts):
    out, a = [], 0
    for b in pts + [len(buf)]:
        p = buf[a:b]
        kind = rng.randrange(4)
        out.append(p if kind == 0 else bytearray(p) if kind == 1 else memoryview(p) if kind == 2 else
                   np.frombuffer(p, dtype=np.uint8) if p else p)
        a = b
    return out


def _same(a, b, what):
    assert len(a) == len(b), what
    for x, y in zip(a, b):
        assert torch.equal(x, y), what


def test_pieces_scan_equals_joined_scan_for_any_cut():
    rng = random.Random(2701)
    lines, _e = gen._corpus(31, 700)
    bufs = [b"\n".join(lines) + b"\n", b"\r\n".join(lines), b"\n".join(lines[:50]), b"", b"\n", b"\n\n\n",
            b'{"text": "x"}', b'{"text": "a\xc3\xa9b", "id": "\xe2\x82\xac"}\r\n' * 40]
    n_multi = 0
    for buf in bufs:
        for rep in range(25 if len(buf) > 1000 else 60):
            pts = _cuts(rng, len(buf))
            if rep < 3 and len(buf) > 1000:  # many tiny pieces: lines across 3+ pieces
                pts = sorted(rng.sample(range(len(buf)), min(len(buf) - 1, 3000)))
            pieces = _pieces(rng, buf, pts)
            n_multi += len(pieces) > 2
            for key2, lim in ((None, -1), ("id", -1), ("id", rng.choice([0, 5, 40, 200])), ("text", -1)):
                args = () if key2 is None else (key2,)
                want = _C.jsonl_scan(buf, "text", lim, *args)
                got = _C.jsonl_scan(pieces, "text", lim, *args)
                _same(got, want, f"key2={key2} lim={lim} cuts={pts[:20]}")
                got_t = _C.jsonl_scan(tuple(pieces), "text", lim, *args)
                _same(got_t, want, "tuple")
    assert n_multi > 100


def test_pieces_each_ending_at_an_unmapped_page():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    page = mmap.PAGESIZE
    rng = random.Random(2702)
    lines, _e = gen._corpus(32, 120)
    buf = b"\n".join(lines)
    maps, views = [], []
    try:
        for rep in range(12):
            pts = _cuts(rng, len(buf))[:40]
            pieces = []
            a = 0
            for b in pts + [len(buf)]:
                p = buf[a:b]
                a = b
                size = max(page, (len(p) + page - 1) // page * page)
                m = mmap.mmap(-1, size + page)
                addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
                assert libc.mprotect(addr + size, page, 0) == 0
                m[size - len(p):size] = p
                maps.append((m, addr, size))
                pieces.append(memoryview(m)[size - len(p):size])
                views.append(pieces[-1])
            for key2 in (None, "id"):
                args = () if key2 is None else (key2,)
                _same(_C.jsonl_scan(pieces, "text", -1, *args), _C.jsonl_scan(buf, "text", -1, *args), f"cuts {pts}")
    finally:
        for v in views:
            v.release()
        for m, addr, size in maps:
            libc.mprotect(addr + size, page, 3)
            m.close()
