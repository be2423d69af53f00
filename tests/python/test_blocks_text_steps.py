"""DistributedPipeline over a TextSource (per="line") on the columnar path (issue 14 part 4):
``stream_steps(..., text=True)`` gives, per rank and step, the records, global indices, item
counts, positions, skips and first error (file:line) that the line-by-line path (GlobalStream
``take`` + ``parse``, computed independently) gives; resuming at each step's position gives the
tail; and a one-rank DistributedPipeline delivers the same batches on both paths."""
import gzip
import os
import random
import sys

import pytest
import torch  # noqa: F401  (loads torch's libraries before the extension)

sys.path.insert(0, os.path.dirname(__file__))
from test_blocks_paths import _block_steps as _paths_block_steps  # noqa: E402
from test_blocks_paths import _distributed_both_paths as _paths_distributed_both_paths  # noqa: E402
from test_blocks_paths import _gs_steps as _paths_gs_steps  # noqa: E402
from test_sources_blocks import _norm  # noqa: E402

from luminamoon.data import sources as S  # noqa: E402


def _text_lines(rng, n, bad_utf8):
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.08:
            out.append(b"")  # a blank line is a record of a text file
        elif r < 0.12:
            out.append(b"x" * rng.randint(90, 300))  # over max_record_bytes in some runs
        elif r < 0.15 and bad_utf8:
            out.append(b"bad \xff\xfe utf-8 " + bytes([rng.randint(0x80, 0xBF)]))
        else:
            out.append("".join(rng.choice("ab \"\\é€😀\t\r\x00") for _ in range(rng.randint(0, 60))).encode())
    return out


def _write(path, lines, comp, crlf, tail_newline=True):
    blob = (b"\r\n" if crlf else b"\n").join(lines) + ((b"\r\n" if crlf else b"\n") if tail_newline else b"")
    if comp == "gz":
        blob = gzip.compress(blob)
    elif comp == "zst":
        import zstandard
        c = zstandard.ZstdCompressor()
        half = len(blob) // 2
        cut = blob.find(b"\n", half) + 1 or len(blob)
        blob = c.compress(blob[:cut]) + c.compress(blob[cut:])  # two frames
    path.write_bytes(blob)


def _gs_steps(make, G, W, r):
    return _paths_gs_steps(make, G, W, r, text=True)


def _block_steps(make, G, W, r, positions=None):
    return _paths_block_steps(make, G, W, r, text=True, positions=positions)


@pytest.mark.parametrize("seed", range(6))
def test_text_stream_steps_equal_the_global_stream(tmp_path, seed):
    rng = random.Random(seed)
    comp = ["plain", "gz", "zst"][seed % 3]
    lines = _text_lines(rng, rng.randint(60, 300), bad_utf8=seed >= 2)
    paths = []
    for i in range(1 + seed % 2 * 2):
        p = tmp_path / f"t{i}.txt{'' if comp == 'plain' else '.' + comp}"
        _write(p, lines[i::2] if i else lines, comp, crlf=seed % 2 == 0, tail_newline=i != 1)
        paths.append(str(p))
    n_checked = 0
    for lim in (None, 120):
        for W in (1, 2, 3):
            for bs in (1, 7, 64):
                for on_error in ("skip", "raise"):
                    def make(pos=None):
                        return S.TextSource(paths, on_error=on_error, gzip_index=False, max_record_bytes=lim,
                                            position=pos)
                    for r in range(W):
                        want = _gs_steps(make, W * bs, W, r)
                        positions = []
                        got = _block_steps(make, W * bs, W, r, positions)
                        assert got == want, (lim, W, bs, on_error, r)
                        n_checked += sum(len(s[0]) for s in got[0])
                    if W == 2 and bs == 7:  # resume at each step's position: the tail of the stream
                        for k, pos in enumerate(positions[:-1]):
                            tail = _block_steps(lambda: make(pos), W * bs, W, W - 1)
                            full = _block_steps(make, W * bs, W, W - 1)
                            shift = (k + 1) * W * bs
                            assert [[(t, rec, g + shift) for t, rec, g in s[0]] for s in tail[0]] == \
                                [s[0] for s in full[0][k + 1:]]
                            if isinstance(full[1], str):  # the same error (a skip count restarts at 0)
                                assert tail[1] == full[1]
    assert n_checked > 500


def test_distributed_pipeline_text_blocks_equal_line_path(tmp_path, monkeypatch):
    """One rank: DistributedPipeline over a TextSource reads in blocks (the columnar path) and
    line by line (before): the same batches, reasons, global indices, records and positions."""
    rng = random.Random(3)
    lines = _text_lines(rng, 900, bad_utf8=True)
    p = tmp_path / "d.txt.gz"
    _write(p, lines, "gz", crlf=False)

    a, b = _paths_distributed_both_paths(
        S.TextSource, lambda: S.TextSource(str(p), on_error="skip", gzip_index=False), monkeypatch)
    assert a == b and sum(len(x[0]) for x in a) > 300
