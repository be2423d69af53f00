"""A bad record with on_error="raise" inside a block: iter_blocks hands out the good records
before it (the block cut short, ``error_follows``) and then raises, so a caller that catches the
error and reads on from the source's position gets every good record, exactly what iterating the
source record by record (catching the error the same way) gives.  Before, the unfinished block's
good records were dropped while the position moved past them: silently lost.  The pipelines keep
their whole batches (the short block is not a batch; nothing is committed past the last whole one)."""
import gzip
import json
import random

import pytest
import torch  # noqa: F401  (loads torch's libraries before the extension)

import pyarrow as pa
import pyarrow.parquet as pq

from luminamoon.data import ResumablePipeline
from luminamoon.data import sources as S
from luminamoon.data.errors import BadRecordError


def _jsonl(tmp_path, rng, nfiles=2, n=90):
    bad = []
    for f in range(nfiles):
        lines = []
        for i in range(n):
            if rng.random() < 0.06:
                lines.append(b'{"text": "broken' if rng.random() < 0.5 else b'{"id": 1}')
                bad.append((f, i))
            else:
                t = "".join(rng.choice("ab \u00e9\u20ac\U0001F600") for _ in range(rng.randint(0, 30)))
                lines.append(json.dumps({"text": f"{f}:{i}:{t}", "id": i}).encode())
        data = b"\n".join(lines) + b"\n"
        name = tmp_path / (f"f{f}.jsonl.gz" if f % 2 else f"f{f}.jsonl")
        name.write_bytes(gzip.compress(data) if f % 2 else data)
    return str(tmp_path / "f*.jsonl*"), bad


def _text(tmp_path, rng, n=120):
    lines = []
    for i in range(n):
        lines.append(b"\xff\xfe bad" if rng.random() < 0.06 else f"line {i} \u00e9".encode())
    (tmp_path / "t.txt").write_bytes(b"\n".join(lines) + b"\n")
    return str(tmp_path / "t.txt")


def _parquet(tmp_path, rng, n=150):
    """Two files; a null text is a bad record."""
    nulls = 0
    for name in ("a", "b"):
        texts = []
        for i in range(n):
            if rng.random() < 0.05:
                texts.append(None)
                nulls += 1
            else:
                texts.append(f"{name} row {i}")
        pq.write_table(pa.table({"text": texts}), str(tmp_path / f"{name}.parquet"),
                       row_group_size=rng.choice([7, 40]))
    return str(tmp_path / "*.parquet"), nulls


def _by_record(make, key):
    """Every text iterating gives, the errors caught and the reading continued from the position."""
    out, errors, pos = [], 0, None
    for _ in range(10_000):
        src = make(pos)
        try:
            for rec in src:
                out.append(rec[key])
            return out, errors
        except ValueError:
            errors += 1
            pos = src.position()
    raise AssertionError("iteration did not end")


def _by_block(make, n):
    out, errors, pos, short = [], 0, None, 0
    for _ in range(10_000):
        src = make(pos)
        try:
            for b in src.iter_blocks(n):
                out.extend(b.texts.tolist())
                if b.error_follows:
                    short += 1
                    assert b.position == src.position()
            return out, errors, short
        except ValueError:
            errors += 1
            pos = src.position()
    raise AssertionError("iteration did not end")


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("n", [1, 7, 64])
def test_jsonl_blocks_lose_nothing_before_an_error(tmp_path, seed, n):
    glob, bad = _jsonl(tmp_path, random.Random(seed))
    make = lambda pos: S.JsonlSource(glob, position=pos, on_error="raise")  # noqa: E731
    want, want_err = _by_record(make, "text")
    got, got_err, short = _by_block(make, n)
    assert got == want and got_err == want_err == len(bad)
    assert len(want) == 180 - len(bad)
    if n > 1 and bad:
        assert short >= 1  # some block was cut short (a bad line is rarely at a block's start)


@pytest.mark.parametrize("seed", range(3))
def test_text_blocks_lose_nothing_before_an_error(tmp_path, seed):
    path = _text(tmp_path, random.Random(seed))
    make = lambda pos: S.TextSource(path, position=pos, on_error="raise")  # noqa: E731
    want, want_err = _by_record(make, "text")
    got, got_err, _ = _by_block(make, 16)
    assert got == want and got_err == want_err >= 1


@pytest.mark.parametrize("seed", range(3))
def test_parquet_blocks_lose_nothing_before_an_error(tmp_path, seed):
    glob, nulls = _parquet(tmp_path, random.Random(seed))
    make = lambda pos: S.ParquetSource(glob, position=pos, on_error="raise")  # noqa: E731
    want, want_err = _by_record(make, "text")
    got, got_err, _ = _by_block(make, 64)
    assert got == want and got_err == want_err == nulls >= 1
    assert len(want) == 300 - nulls


def test_pipeline_keeps_whole_batches_and_a_resume_reads_the_cut_records(tmp_path):
    """ResumablePipeline over blocks: the short block is not delivered; the last commit is
    before it, so resuming (skipping the bad line now) delivers its records: none lost."""
    lines = [json.dumps({"text": f"document number {i} " + "word " * 20, "id": i}) for i in range(100)]
    lines[70] = '{"text": "broken'
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(lines) + "\n")
    state = str(tmp_path / "state")
    got = []
    with pytest.raises(BadRecordError):
        with ResumablePipeline(S.JsonlSource(str(path)), state_dir=state, batch_size=32, dedup=False) as p:
            for b in p:
                assert b.n_in == 32
                got.extend(r["id"] for r in b.records)
                p.commit()
    assert len(got) == 64
    with ResumablePipeline(S.JsonlSource(str(path), on_error="skip"), state_dir=state, batch_size=32, dedup=False) as p:
        for b in p:
            got.extend(r["id"] for r in b.records)
            p.commit()
    assert got == [i for i in range(100) if i != 70]
