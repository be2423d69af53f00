"""Review of the JSON Lines block reader's read sizes (data/_blocks.py: the file read in pieces
-- 1 MiB, or a first piece of 2 MiB then 4 MiB -- and the lines cut across them): a 15 MB file
(plain and .gz) whose lines of 10 B .. 5 MB, with non-ASCII characters and escapes, fall across
every read boundary gives, in blocks of 1, 37 and 2048 records, exactly the texts and ids of
``json.loads`` of each line; and resuming from the position after any block continues with
exactly the remaining records."""
import gzip
import json
import random

import pytest
import torch  # noqa: F401  (loads torch's libraries before the extension)

from luminamoon.data.sources import JsonlSource


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("blocks")
    rng = random.Random(4)
    pieces = ["a", "é", "€", "😀", "\\n", "\\u00e9", "\\\"", " "]
    lines, size, i = [], 0, 0
    while size < (15 << 20):
        n = 5_000_000 if i == 100 else rng.choice([10, 100, 1000, 30000, 200000])
        body = "".join(rng.choice(pieces) if rng.random() < 0.05 else "x" for _ in range(min(n, 2000)))
        body = (body * (n // max(len(body), 1) + 1))[:n]
        line = '{"id": "r%d", "text": "%s"}' % (i, body)
        try:
            json.loads(line)
        except ValueError:  # an escape cut at the end: a plain line of the same length
            line = '{"id": "r%d", "text": "%s"}' % (i, "y" * n)
        lines.append(line)
        size += len(line.encode()) + 1
        i += 1
    data = ("\n".join(lines) + "\n").encode()
    plain, gz = d / "big.jsonl", d / "big.jsonl.gz"
    plain.write_bytes(data)
    with gzip.open(gz, "wb") as f:
        f.write(data)
    return [str(plain), str(gz)], [json.loads(x) for x in lines]


@pytest.mark.parametrize("read", [None, 65537], ids=["default-reads", "small-reads"])
@pytest.mark.parametrize("n", [1, 37, 2048])
def test_blocks_across_read_boundaries_are_the_json_loads_records(files, n, read, monkeypatch):
    from luminamoon.data import _blocks

    if read is not None:  # many more boundaries (odd size: every alignment of a line's bytes)
        monkeypatch.setattr(_blocks, "_READ", read)
        if hasattr(_blocks, "_READ_FIRST"):
            monkeypatch.setattr(_blocks, "_READ_FIRST", read // 2)
    paths, want = files
    for path in paths:
        texts, ids, positions = [], [], []
        for blk in JsonlSource(path).iter_blocks(n):
            texts += blk.texts.tolist()
            ids += [r.get("id") for r in blk.records]
            positions.append((len(ids), blk.position))
        assert len(texts) == len(want)
        assert texts == [w["text"] for w in want]
        assert ids == [w["id"] for w in want]
        if n == 37:  # resume after a few blocks (a position inside / after the long line)
            for done, pos in positions[1::max(1, len(positions) // 4)]:
                rest = []
                for blk in JsonlSource(path, position=pos).iter_blocks(64):
                    rest += [r.get("id") for r in blk.records]
                assert rest == [w["id"] for w in want[done:]], (path, done)
