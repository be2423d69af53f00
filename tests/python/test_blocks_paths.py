"""The columnar reading path beyond ResumablePipeline-over-JSONL (issue 14 parts 1 and 4):
ParquetSource.iter_blocks, the distributed global stream in steps (stream_steps, used by
DistributedPipeline) and the collate fed with blocks.  Each is compared with the record path
(iterating the source; GlobalStream take + parse; the collate over a list of dicts), which
is computed independently."""
import json
import os
import random
import sys

import pytest
import torch  # noqa: F401  (loads torch's libraries before the extension)

sys.path.insert(0, os.path.dirname(__file__))
from test_sources_blocks import _lines, _norm, _write  # noqa: E402

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from luminamoon.data import sources as S  # noqa: E402
from luminamoon.data._blocks import ArrowRecords, TextRecords, stream_steps  # noqa: E402
from luminamoon.data.dist_stream import GlobalStream  # noqa: E402


# ------------------------------------------------------------------ Parquet

def _pq_files(tmp_path, rng, nfiles=3):
    for i in range(nfiles):
        n = rng.randint(40, 200)
        texts = []
        for _ in range(n):
            r = rng.random()
            texts.append(None if r < 0.05 else "".join(rng.choice("ab é€😀\n\"") for _ in range(rng.randint(0, 60))))
        t = pa.table({"id": list(range(n)), "text": texts, "meta": [{"k": j % 3} for j in range(n)]})
        pq.write_table(t, str(tmp_path / f"p{i}.parquet"), row_group_size=rng.choice([7, 37, 1000]))
    return str(tmp_path / "p*.parquet")


def _pq_by_record(src, n):
    out, cur = [], []
    for rec in src:
        cur.append((rec[src.text_column], {k: v for k, v in rec.items() if k != src.text_column}))
        if len(cur) == n:
            out.append((cur, src.position(), src.skipped))
            cur = []
    if cur:
        out.append((cur, src.position(), src.skipped))
    return out


def _pq_compare(make, n):
    try:
        want, want_err = _pq_by_record(make(), n), None
    except ValueError as e:
        want, want_err = None, str(e)
    src = make()
    got, got_err = [], None
    try:
        for b in src.iter_blocks(n):
            assert isinstance(b.records, ArrowRecords)
            got.append((list(zip(b.texts.tolist(), list(b.records))), b.position, b.skipped))
    except ValueError as e:
        got_err = str(e)
    assert got_err == want_err
    if want is not None:
        assert got == want
    else:  # the blocks before the bad record hold the records before it; the position is the same
        ref = make()
        flat = []
        try:
            for rec in ref:
                flat.append(rec[ref.text_column])
        except ValueError:
            pass
        got_texts = [t for blk, _, _ in got for t, _ in blk]
        assert got_texts == flat[:len(got_texts)] and len(flat) - len(got_texts) < n
        assert src.position() == ref.position()


@pytest.mark.parametrize("seed", range(4))
def test_parquet_blocks_equal_records(tmp_path, seed):
    rng = random.Random(seed)
    glob_ = _pq_files(tmp_path, rng)
    for ws, rank in ((1, 0), (2, 1), (5, 3)):  # record split, file split (3 files >= 2), record split
        for lim in (None, 30, 90):
            for n in (1, 7, 64, 1000):
                for on_error in ("skip", "raise"):
                    _pq_compare(lambda: S.ParquetSource(glob_, on_error=on_error, max_record_bytes=lim,
                                                        world_size=ws, rank=rank), n)


def test_parquet_blocks_odd_text_columns(tmp_path):
    """binary (valid and not UTF-8), large_string, dictionary, a non-string type, all null:
    the same records, skips and errors (file, row group, row) as iterating."""
    cols = {
        "bin": pa.array([b"ok", b"bad \xff x", None, "caf\u00e9".encode()], pa.binary()),
        "binok": pa.array([b"x", b"yy", "\u20ac".encode()], pa.large_binary()),
        "large": pa.array(["x", "yy", None, "zzz"], pa.large_string()),
        "dict": pa.array(["a", "b", "a", None]).dictionary_encode(),
        "int": pa.array([1, 2, None]),
        "null": pa.array([None, None], pa.string()),
    }
    for name, arr in cols.items():
        p = str(tmp_path / f"{name}.parquet")
        pq.write_table(pa.table({"text": arr, "id": list(range(len(arr)))}), p, row_group_size=2)
        for on_error in ("skip", "raise"):
            for n in (1, 2, 10):
                for lim in (None, 2):
                    _pq_compare(lambda: S.ParquetSource(p, on_error=on_error, max_record_bytes=lim), n)


def test_parquet_blocks_resume_columns_and_arrow(tmp_path):
    n = 500
    pq.write_table(pa.table({"text": [f"doc {i} " + "w" * (i % 7) for i in range(n)], "id": list(range(n)),
                             "wide": ["x" * 50] * n}), str(tmp_path / "r.parquet"), row_group_size=60)
    path = str(tmp_path / "r.parquet")
    blocks = list(S.ParquetSource(path).iter_blocks(23))
    assert [t for b in blocks for t in b.texts.tolist()] == [f"doc {i} " + "w" * (i % 7) for i in range(n)]
    for k in (0, 4, 10, len(blocks) - 2):  # resuming at a block's position gives the rest, both paths
        rest = [t for b in S.ParquetSource(path, position=blocks[k].position).iter_blocks(23) for t in b.texts.tolist()]
        assert rest == [t for b in blocks[k + 1:] for t in b.texts.tolist()]
        assert rest == [r["text"] for r in S.ParquetSource(path, position=blocks[k].position)]
    # the other columns stay Arrow (only the selected ones are read); records read as dicts
    b = next(iter(S.ParquetSource(path, columns=["id"]).iter_blocks(10)))
    assert b.records.table.column_names == ["id"] and b.records.table.column("id").to_pylist() == list(range(10))
    assert b.records == [{"id": i} for i in range(10)] and b.records[-1] == {"id": 9}
    assert b.lines.tolist() == list(range(10)) and b.shards.tolist() == [0] * 10


def test_resumable_pipeline_reads_parquet_in_blocks(tmp_path):
    from luminamoon.data import ResumablePipeline

    rng = random.Random(5)
    glob_ = _pq_files(tmp_path, rng)

    def collect(columnar):
        src = S.ParquetSource(glob_, on_error="skip")
        if not columnar:
            src.iter_blocks = None  # the record path
        out = []
        with ResumablePipeline(src, batch_size=29, dedup=True, stages={"quality": False}) as pipe:
            for b in pipe:
                assert (b.block is not None) == columnar
                out += [(b.records[i]["id"], t) for i, t in zip(b.source_index.tolist(), b.texts.tolist())]
                out.append(("reasons", b.reasons.tolist(), b.coord["source"]))
        return out

    assert collect(True) == collect(False)


# ------------------------------------------------------ the distributed stream

def _gs_steps(make, G, W, r, text=False):
    """Rank r of W's records per step of G items through GlobalStream take + parse: (records, item
    count, position) per step, then the error (or, with text=True, the source's skip count)."""
    src = make()
    gs = GlobalStream(src)
    if text:
        assert gs.mode == "text"
    out = []
    try:
        while True:
            items = gs.take(G)
            if not items:
                break
            pos = gs.position()
            got = []
            for j in range(r, len(items), W):
                rec = gs.parse(items[j])
                if rec is not None:
                    got.append((rec["text"], {k: v for k, v in rec.items() if k != "text"}, len(out) * G + j))
            out.append((got, len(items), _norm(pos)))
    except ValueError as e:
        return out, str(e)
    return out, src.skipped if text else None


def _block_steps(make, G, W, r, text=False, positions=None):
    """The same through _blocks.stream_steps (text=True: a TextSource's lines, TextRecords); the
    position after each step is appended to `positions` when given."""
    src = make()
    out = []
    try:
        for st in stream_steps(src, G, W, r, **({"text": True} if text else {})):
            if text:
                assert isinstance(st.records, TextRecords)
            got = [(t, rec, g) for t, rec, g in zip(st.texts.tolist(), list(st.records), st.gidx.tolist())]
            out.append((got, st.n_items, _norm(st.position)))
            assert _norm(src.position()) == _norm(st.position)
            if positions is not None:
                positions.append(json.loads(json.dumps(st.position)))
    except ValueError as e:
        return out, str(e)
    # text: this rank's skips (a block is judged ahead of its step: compared at the end)
    return out, src.skipped if text else None


@pytest.mark.parametrize("seed", range(6))
def test_stream_steps_equal_the_global_stream(tmp_path, seed):
    """Per rank and step: the records, their global indices, the step's item count and the
    position after it, and the first bad record's error, as GlobalStream take + parse."""
    rng = random.Random(seed)
    comp = ["plain", "gz", "zst"][seed % 3]
    lines = [l for l in _lines(rng, rng.randint(60, 300)) if b"\\ud8" not in l]  # no lone surrogates
    paths = []
    for i in range(1 + seed % 2 * 2):
        p = tmp_path / f"s{i}.jsonl{'' if comp == 'plain' else '.' + comp}"
        _write(p, lines[i::2] if i else lines, comp, crlf=seed % 2 == 0)
        paths.append(str(p))
    for W in (1, 2, 3, 4):
        for bs in (1, 5, 64):
            for on_error in ("skip", "raise"):
                make = lambda: S.JsonlSource(paths, on_error=on_error, gzip_index=False)  # noqa: E731
                for r in range(W):
                    assert _block_steps(make, W * bs, W, r) == _gs_steps(make, W * bs, W, r), (W, bs, on_error, r)


def test_distributed_pipeline_blocks_equal_record_path(tmp_path, monkeypatch):
    """One rank: DistributedPipeline over a JsonlSource read in blocks (stream_steps) and read
    line by line (GlobalStream take + parse, the path before) deliver the same batches,
    reasons, global indices, records and positions."""
    rng = random.Random(2)
    lines = [l for l in _lines(rng, 700) if b"\\ud8" not in l]
    p = tmp_path / "d.jsonl"
    _write(p, lines, "plain")

    a, b = _distributed_both_paths(S.JsonlSource, lambda: S.JsonlSource(str(p), on_error="skip"), monkeypatch)
    assert a == b and sum(len(x[0]) for x in a) > 200


def _distributed_both_paths(cls, make, monkeypatch):
    """One-rank DistributedPipeline batches (texts, reasons, global indices, records, position) over
    make()'s source (a `cls`) read in blocks, then with cls's columnar path turned off."""
    from luminamoon.data import DistributedPipeline

    def collect(columnar):
        out = []
        with DistributedPipeline(make(), batch_size=33, stages={"quality": False}, near_dedup="local") as pipe:
            for b in pipe:
                assert (pipe._steps is not None) == columnar
                out.append((b.texts.tolist(), b.reasons.tolist(), b.global_index.tolist(), list(b.records),
                            _norm(b.coord["source"])))
        return out

    a = collect(True)
    with monkeypatch.context() as m:
        m.setattr(cls, "_columnar", property(lambda self: False))
        b = collect(False)
    return a, b


# ----------------------------------------------------------------- collate

def test_collate_on_blocks_equals_collate_on_dicts(tmp_path):
    from torch.utils.data import DataLoader

    from luminamoon.data import create_resumable_collate

    rng = random.Random(4)
    recs = [{"id": i, "text": rng.choice(["same text here", "other words", ""]) + " " * rng.randint(0, 2)
             + "".join(rng.choice("abc é\n") for _ in range(rng.randint(0, 40)))} for i in range(400)]
    p = tmp_path / "c.jsonl"
    S.write_jsonl(str(p), recs)
    pqp = str(tmp_path / "c.parquet")
    pq.write_table(pa.Table.from_pylist(recs), pqp, row_group_size=50)

    def run(loader):
        return [(x["input_ids"].tolist(), x["lengths"].tolist()) for x in loader]

    kw = dict(max_length=64, stages={"quality": False}, near_dedup=True)
    want = run(DataLoader(recs, batch_size=32, collate_fn=create_resumable_collate(**kw)))
    for src in (S.JsonlSource(str(p)), S.ParquetSource(pqp)):
        c = create_resumable_collate(**kw)
        got = run(DataLoader(c.blocks(src, 32), batch_size=None, collate_fn=c))
        assert got == want
        again = run(DataLoader(c.blocks(src, 32), batch_size=None, collate_fn=c))  # a second pass: anew
        assert again == want
    # two workers: each reads its share, together every document once
    c = create_resumable_collate(return_string_tensor=True, pipeline=None)
    got = [t for st in DataLoader(c.blocks(S.JsonlSource(str(p)), 16), batch_size=None, collate_fn=c,
                                  num_workers=2) for t in st.tolist()]
    assert sorted(got) == sorted(r["text"] for r in recs)


# ------------------------------------------------------------------ text files

def _text_by_record(src, n):
    out, cur = [], []
    for r in src:
        cur.append(r["text"])
        if len(cur) == n:
            out.append((cur, _norm(src.position()), src.skipped))
            cur = []
    if cur:
        out.append((cur, _norm(src.position()), src.skipped))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_text_blocks_equal_records(tmp_path, seed):
    """TextSource(per="line").iter_blocks: lines with \\n or \\r\\n, empty lines, a last line
    without an ending, invalid UTF-8 (also a sequence cut by a line ending), max_record_bytes,
    record sharding; plain, gzip, zstd: the texts, positions, skips and errors of iterating."""
    import gzip

    rng = random.Random(seed)
    lines = []
    for _ in range(rng.randint(1, 300)):
        r = rng.random()
        if r < 0.05:
            lines.append(b"bad \xff\xfe")
        elif r < 0.08:
            lines.append(b"\xc3")  # the first byte of a two-byte sequence, cut by the line ending
        elif r < 0.1:
            lines.append(b"")
        else:
            lines.append("".join(rng.choice("ab é€😀\t\r") for _ in range(rng.randint(0, 50))).encode())
    blob = (b"\r\n" if seed % 2 else b"\n").join(lines) + (b"\n" if seed % 3 else b"")
    comp = ["", ".gz", ".zst"][seed % 3]
    p = tmp_path / f"t.txt{comp}"
    if comp == ".gz":
        blob = gzip.compress(blob)
    elif comp == ".zst":
        import zstandard
        blob = zstandard.ZstdCompressor().compress(blob)
    p.write_bytes(blob)
    for lim in (None, 10, 40):
        for n in (1, 7, 1000):
            for on_error in ("skip", "raise"):
                for ws, rank in ((1, 0), (3, 1)):
                    def make():
                        return S.TextSource(str(p), on_error=on_error, max_record_bytes=lim, gzip_index=False,
                                            world_size=ws, rank=rank)
                    try:
                        want, want_err = _text_by_record(make(), n), None
                    except ValueError as e:
                        want, want_err = None, str(e)
                    src = make()
                    got, got_err = [], None
                    try:
                        for b in src.iter_blocks(n):
                            assert list(b.records) == [{}] * len(b.texts)
                            got.append((b.texts.tolist(), _norm(b.position), b.skipped))
                    except ValueError as e:
                        got_err = str(e)
                    assert got_err == want_err
                    if want is not None:
                        assert got == want
                    else:
                        ref = make()
                        with pytest.raises(ValueError):
                            for _ in ref:
                                pass
                        assert _norm(src.position()) == _norm(ref.position())


def test_resumable_pipeline_reads_text_in_blocks_and_resumes(tmp_path):
    from luminamoon.data import ResumablePipeline

    rng = random.Random(8)
    p = tmp_path / "t.txt"
    p.write_text("".join(rng.choice(["dup line here", "another", ""]) + "".join(rng.choice("xyz é")
                         for _ in range(rng.randint(0, 12))) + "\n" for _ in range(900)), encoding="utf-8")

    def collect(state, columnar, stop_after=None):
        out = []
        src = S.TextSource(str(p))
        if not columnar:
            src.iter_blocks = None
        with ResumablePipeline(src, batch_size=37, state_dir=str(state), stages={"quality": False}) as pipe:
            for b in pipe:
                assert (b.block is not None) == columnar
                out += b.texts.tolist()
                if (b.index + 1) % 3 == 0:
                    pipe.commit()
                    if stop_after is not None and b.index + 1 >= stop_after:
                        return out
        return out

    want = collect(tmp_path / "ref", False)
    first = collect(tmp_path / "s", True, stop_after=9)
    assert first + collect(tmp_path / "s", True) == want


@pytest.mark.parametrize("lim", [None, 40, 200])
def test_global_stream_with_max_record_bytes_and_bom(tmp_path, lim):
    """GlobalStream (the line-by-line path) raised AttributeError ('TooLong' has no isspace) on a
    line over max_record_bytes and refused a first line with a UTF-8 BOM that JsonlSource reads;
    now both paths give what JsonlSource gives, and equal each other."""
    rng = random.Random(9)
    lines = [l for l in _lines(rng, 250) if b"\\ud8" not in l]
    lines[0] = b'\xef\xbb\xbf{"text": "bom"}'
    lines.insert(5, b'{"text": "' + b"z" * 5000 + b'"}')
    p = tmp_path / "m.jsonl"
    _write(p, lines, "plain")
    for on_error in ("skip", "raise"):
        make = lambda: S.JsonlSource(str(p), on_error=on_error, max_record_bytes=lim)  # noqa: E731
        gs, gs_err = _gs_steps(make, 10 ** 6, 1, 0)
        try:
            want, want_err = [r["text"] for r in make()], None
        except ValueError as e:
            want, want_err = None, str(e)
        assert gs_err == want_err
        if want is not None:
            assert [t for t, _, _ in gs[0][0]] == want
        for W in (1, 3):
            for r in range(W):
                assert _block_steps(make, 6 * W, W, r) == _gs_steps(make, 6 * W, W, r)
