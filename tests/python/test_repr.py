"""__repr__ of the sources, ResumablePipeline and ShardWriter (issue 18 part 5), and the shared
reason-count helper of the run engines (cli/report.reason_counts)."""
from __future__ import annotations

import collections
import os

import numpy as np

import luminamoon.data as D
from luminamoon.cli.report import reason_counts
from luminamoon.cli.writers import ShardWriter
from luminamoon.stages import reason_name


def _jsonl(tmp_path, name, n):
    p = tmp_path / name
    D.write_jsonl(str(p), [{"text": f"document {i}"} for i in range(n)])
    return str(p)


def test_file_source_repr_names_files_settings_and_position(tmp_path):
    paths = [_jsonl(tmp_path, f"f{i}.jsonl", 3) for i in range(3)]
    src = D.JsonlSource(paths, text_key="text", on_error="skip", rank=1, world_size=2)
    r = repr(src)
    assert r.startswith("JsonlSource(") and r.endswith(")")
    assert "files=3 [" in r and repr(paths[0]) in r and repr(paths[2]) not in r and "..." in r
    assert "rank=1, world_size=2" in r and "on_error='skip'" in r
    assert f"position={src.position()!r}" in r
    next(iter(src))
    assert f"position={src.position()!r}" in repr(src)  # where it stands now


def test_iterable_and_text_source_repr(tmp_path):
    it = D.IterableSource([{"text": "a"}, {"text": "b"}])
    assert repr(it) == f"IterableSource(text_key='text', position={it.position()!r})"
    p = _jsonl(tmp_path, "t.jsonl", 2)
    ts = D.TextSource(p, per="file")
    assert repr(ts) == f"TextSource(files=1 [{p!r}], text_key='text', per='file', position={ts.position()!r})"


def test_resumable_pipeline_repr(tmp_path):
    src = D.JsonlSource(_jsonl(tmp_path, "a.jsonl", 5))
    with D.ResumablePipeline(src, pipeline=None, batch_size=2, state_dir=str(tmp_path / "s")) as rp:
        for _ in rp:
            pass
        rp.commit()
        r = repr(rp)
        assert r.startswith("ResumablePipeline(source=JsonlSource(") and "batch_size=2" in r
        assert f"state_dir={str(tmp_path / 's')!r}" in r and "commits=1" in r and "dedup=True" in r
        assert "closed" not in r
    assert repr(rp).endswith(", closed)")


def test_shard_writer_repr(tmp_path):
    w = ShardWriter(str(tmp_path / "out"), "jsonl", "none", part_docs=10)
    w.add(["a", "b"], ["x", "y"])
    assert repr(w) == (f"ShardWriter(out_dir={str(tmp_path / 'out')!r}, fmt='jsonl', compression='none', "
                       "part_docs=10, part_bytes=268435456, parts=0, pending_rows=2)")
    w.finish_part()
    assert "parts=1, pending_rows=0" in repr(w)
    assert sorted(os.listdir(tmp_path / "out")) == ["part-00000.jsonl"]


def test_reason_counts_matches_a_plain_count():
    rng = np.random.default_rng(7)
    codes = [0, 1, 2, 3, 5]
    reasons = rng.choice(codes, size=1000).astype(np.int32)
    expect = collections.Counter(reason_name(int(c)) for c in reasons.tolist() if c)
    names: dict = {}
    assert reason_counts(reasons, names) == dict(expect)
    assert names == {c: reason_name(c) for c in codes if c and c in set(reasons.tolist())}
    assert reason_counts(np.zeros(4, np.int32), names) == {}
