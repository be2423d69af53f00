"""Tests of python/luminamoon/data/sources.py: every source type resumes at many
positions to exactly the uninterrupted tail; compressed formats; bad input."""
import gzip
import importlib.util
import io
import itertools
import json
import os
import random
import sys

import pytest

try:
    from luminamoon.data import sources as S
except ImportError:  # the compiled extension is not built: sources.py stands alone
    _p = os.path.join(os.path.dirname(__file__), "..", "..", "python", "luminamoon", "data", "sources.py")
    _spec = importlib.util.spec_from_file_location("lm_sources_standalone", _p)
    S = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = S
    _spec.loader.exec_module(S)

from hypothesis import given, settings, strategies as st, HealthCheck

import indexed_gzip  # noqa: F401  (test dependencies: a missing one fails the run, never skips it)
import zstandard


def make_records(n, seed):
    rng = random.Random(seed)
    words = ["alpha", "βeta", "γάμμα", "日本語", "emoji 🎉", "tab\tsep", "quote\"d", "back\\slash", "", "x" * 50]
    out = []
    for i in range(n):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(0, 30)))
        if rng.random() < 0.1:
            text += "\nsecond line\r\n"
        out.append({"id": i, "text": text, "meta": {"k": rng.randint(0, 9)}})
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    recs = make_records(1500, 1)
    shards = [recs[0:400], recs[400:401], recs[401:900], recs[900:1500]]
    files = {}
    # plain, multi-member gzip, multi-frame zstd written by write_jsonl
    for ext in ("jsonl", "jsonl.gz", "jsonl.zst"):
        sub = d / ext.replace(".", "_")
        sub.mkdir()
        for i, sh in enumerate(shards):
            S.write_jsonl(str(sub / f"part-{i:02d}.{ext}"), sh, frame_bytes=4096)
        files[ext] = str(sub / f"part-*.{ext}")
    # single-member gzip and single-frame zstd, as gzip(1) / zstd(1) write them
    single = d / "single"
    single.mkdir()
    payload = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs).encode()
    with gzip.open(single / "all.jsonl.gz", "wb") as f:
        f.write(payload)
    files["single_gz"] = str(single / "all.jsonl.gz")
    with open(single / "all.jsonl.zst", "wb") as f:
        f.write(zstandard.ZstdCompressor().compress(payload))
    files["single_zst"] = str(single / "all.jsonl.zst")
    return {"dir": d, "records": recs, "files": files}


def take_then_resume(make, full, k, via_seek=False):
    """Consumes k records, checkpoints through JSON, resumes with a new source."""
    src = make()
    head = list(itertools.islice(iter(src), k))
    assert head == full[:k]
    pos = json.loads(json.dumps(src.position()))
    if via_seek:
        src2 = make()
        src2.seek(pos)
    else:
        src2 = make(position=pos)
    assert list(src2) == full[k:], f"resume after {k} records differs"
    # The original object also continues exactly where it stopped.
    assert list(src) == full[k:]


def check_resume_everywhere(make, full, rng, n_random=25):
    ks = {0, 1, len(full) - 1, len(full)} | {rng.randint(0, len(full)) for _ in range(n_random)}
    for i, k in enumerate(sorted(ks)):
        take_then_resume(make, full, k, via_seek=bool(i % 2))


# ---- JSONL ------------------------------------------------------------------

@pytest.mark.parametrize("ext, gzip_index", [(e, False) for e in ("jsonl", "jsonl.gz", "jsonl.zst", "single_gz",
                                                                   "single_zst")]
                         + [("jsonl.gz", True), ("single_gz", True)])  # the index only concerns gzip
def test_jsonl_resume_equals_tail(corpus, tmp_path, ext, gzip_index):
    files = corpus["files"][ext]

    def make(**kw):
        return S.JsonlSource(files, gzip_index=gzip_index, index_dir=str(tmp_path / "idx"),
                             gzip_spacing=1 << 16, **kw)

    full = list(make())
    assert full == corpus["records"]
    check_resume_everywhere(make, full, random.Random(ext))
    if gzip_index:
        assert len(os.listdir(tmp_path / "idx")) >= 1  # the index was cached


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(k1=st.integers(0, 1500), k2=st.integers(0, 1500), ext=st.sampled_from(["jsonl", "jsonl.gz", "jsonl.zst"]))
def test_jsonl_repeated_interruptions(corpus, k1, k2, ext):
    """Two successive crashes: resume from a resumed source's position."""
    files = corpus["files"][ext]
    full = corpus["records"]
    k1, k2 = sorted((k1, k2))
    a = S.JsonlSource(files, gzip_index=False)
    got = list(itertools.islice(iter(a), k1))
    b = S.JsonlSource(files, gzip_index=False, position=json.loads(json.dumps(a.position())))
    got += list(itertools.islice(iter(b), k2 - k1))
    c = S.JsonlSource(files, gzip_index=False, position=b.position())
    got += list(c)
    assert got == full


def test_framed_position_stays_within_one_member(corpus):
    """Multi-member gzip / multi-frame zstd: the resume point is the start of
    the member holding the position, so at most one member is decompressed."""
    for ext in ("jsonl.gz", "jsonl.zst"):
        if ext not in corpus["files"]:
            continue
        src = S.JsonlSource(corpus["files"][ext], gzip_index=False)
        it = iter(src)
        for _ in range(700):
            next(it)
            p = src.position()
            assert 0 <= p["offset"] - p["frame_uoff"] < 4096 + 2048, (ext, p)


def test_jsonl_text_key_blank_lines_and_crlf(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_bytes(b'{"body": "one"}\r\n\n  \n{"body": "two"}\n{"body": "three"}')  # no final newline
    src = S.JsonlSource(str(p), text_key="body")
    assert [r["body"] for r in src] == ["one", "two", "three"]
    full = [r["body"] for r in S.JsonlSource(str(p), text_key="body")]
    for k in range(4):
        s = S.JsonlSource(str(p), text_key="body")
        list(itertools.islice(iter(s), k))
        assert [r["body"] for r in S.JsonlSource(str(p), text_key="body", position=s.position())] == full[k:]


def test_explicit_list_order_and_glob_sorting(tmp_path):
    for name in ("b.jsonl", "a.jsonl", "c.jsonl"):
        (tmp_path / name).write_text(json.dumps({"text": name}) + "\n")
    assert [r["text"] for r in S.JsonlSource(str(tmp_path / "*.jsonl"))] == ["a.jsonl", "b.jsonl", "c.jsonl"]
    explicit = [str(tmp_path / "c.jsonl"), str(tmp_path / "a.jsonl")]
    assert [r["text"] for r in S.JsonlSource(explicit)] == ["c.jsonl", "a.jsonl"]
    assert [r["text"] for r in S.JsonlSource(str(tmp_path))] == ["a.jsonl", "b.jsonl", "c.jsonl"]


# ---- errors -------------------------------------------------------------------

def test_missing_file_and_empty_glob(tmp_path):
    missing = str(tmp_path / "nope.jsonl")
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        S.JsonlSource(missing)
    with pytest.raises(FileNotFoundError, match=r"zzz\*"):
        S.TextSource(str(tmp_path / "zzz*"))
    with pytest.raises(FileNotFoundError, match="nope.parquet"):
        S.ParquetSource(str(tmp_path / "nope.parquet"))


@pytest.mark.parametrize("bad,what", [
    (b'{"text": "ok"\n', "malformed JSON"),
    (b'{"other": 1}\n', "'text' is missing"),
    (b'{"text": 5}\n', "not a string"),
    (b'[1, 2]\n', "expected a JSON object"),
    (b'{"text": "caf\xe9"}\n', "invalid UTF-8"),
])
def test_jsonl_bad_line_names_file_and_line(tmp_path, bad, what):
    p = tmp_path / "bad.jsonl"
    p.write_bytes(b'{"text": "a"}\n{"text": "b"}\n' + bad + b'{"text": "c"}\n')
    with pytest.raises(ValueError) as ei:
        list(S.JsonlSource(str(p)))
    assert f"{p}:3:" in str(ei.value) and what in str(ei.value)
    src = S.JsonlSource(str(p), on_error="skip")
    assert [r["text"] for r in src] == ["a", "b", "c"]
    assert src.skipped == 1


def test_text_non_utf8(tmp_path):
    p = tmp_path / "t.txt"
    p.write_bytes(b"fine\n\xff\xfe bad\nok\n")
    with pytest.raises(ValueError, match=rf"{p}:2: invalid UTF-8"):
        list(S.TextSource(str(p)))
    src = S.TextSource(str(p), on_error="skip")
    assert [r["text"] for r in src] == ["fine", "ok"] and src.skipped == 1
    with pytest.raises(ValueError, match="invalid UTF-8"):
        list(S.TextSource(str(p), per="file"))


def test_corrupt_and_truncated_compressed(tmp_path):
    good = tmp_path / "g.jsonl.gz"
    S.write_jsonl(str(good), [{"text": "x" * 100}] * 200, frame_bytes=1 << 20)
    data = good.read_bytes()
    trunc = tmp_path / "t.jsonl.gz"
    trunc.write_bytes(data[: len(data) // 2])
    with pytest.raises((ValueError, EOFError, OSError)):
        list(S.JsonlSource(str(trunc), gzip_index=False))
    zt = tmp_path / "t.jsonl.zst"
    S.write_jsonl(str(tmp_path / "z.jsonl.zst"), [{"text": "y" * 100}] * 200)
    zt.write_bytes((tmp_path / "z.jsonl.zst").read_bytes()[:-20])
    with pytest.raises(ValueError, match="t.jsonl.zst"):
        list(S.JsonlSource(str(zt)))



@pytest.fixture(scope="module")
def damaged_gzips(tmp_path_factory):
    """One 20,000-record single-member gzip (as gzip(1) writes it), cut at 2/3,
    and the whole file followed by trailing garbage (plain, and gzip-magic-like)."""
    d = tmp_path_factory.mktemp("damaged_gz")
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as f:
        for i in range(20000):
            f.write(json.dumps({"text": f"record {i} " + "y" * (i % 50)}).encode() + b"\n")
    data = buf.getvalue()
    files = {"cut": data[: len(data) * 2 // 3], "garbage": data + b"trailing garbage, not gzip",
             "magic_garbage": data + b"\x1f\x8bgarbage", "cut_trailer": data[:-4]}
    out = {}
    for name, blob in files.items():
        (d / f"{name}.jsonl.gz").write_bytes(blob)
        out[name] = str(d / f"{name}.jsonl.gz")
    return out


@pytest.mark.parametrize("gzip_index", [False, True])
@pytest.mark.parametrize("name, what", [("cut", "truncated gzip"), ("cut_trailer", "truncated gzip"),
                                        ("garbage", "gzip"), ("magic_garbage", "gzip")])
def test_damaged_gzip_reported_by_both_readers(damaged_gzips, tmp_path, gzip_index, name, what):
    """Issue 19 item 4: through the gzip index a file cut at 2/3 was read as 13,298
    complete records (with on_error="skip") and trailing garbage was accepted.
    Both readers must say the compressed file is damaged, also with on_error="skip",
    and a second open (index cached) must say it again."""
    path = damaged_gzips[name]
    for _ in range(2):
        src = S.JsonlSource(path, gzip_index=gzip_index, index_dir=str(tmp_path / "idx"), on_error="skip")
        with pytest.raises(ValueError) as ei:
            list(src)
        assert not isinstance(ei.value, S.BadRecordError)  # not a skippable record: the file is damaged
        msg = str(ei.value)
        assert path in msg and what in msg, msg


@pytest.mark.parametrize("ext", ["jsonl", "jsonl.gz"])
def test_deeply_nested_json_is_a_bad_record(tmp_path, ext):
    """Issue 19 item 9: 100,000 nested '[' raised RecursionError with no file:line,
    not skipped by on_error="skip"."""
    lines = [b'{"text": "a"}', b'{"text": "x", "meta": ' + b"[" * 100000, b'{"text": "c"}']
    p = tmp_path / f"deep.{ext}"
    blob = b"\n".join(lines) + b"\n"
    p.write_bytes(gzip.compress(blob) if ext.endswith(".gz") else blob)
    with pytest.raises(S.BadRecordError, match=rf"{p}:2: .*nested too deeply"):
        list(S.JsonlSource(str(p), gzip_index=False))
    src = S.JsonlSource(str(p), gzip_index=False, on_error="skip")
    assert [r["text"] for r in src] == ["a", "c"] and src.skipped == 1

def test_bad_positions(corpus, tmp_path):
    src = S.JsonlSource(corpus["files"]["jsonl"])
    with pytest.raises(ValueError):
        src.seek({"kind": "parquet"})
    p = src.position()
    p["nfiles"] = 99
    with pytest.raises(ValueError, match="99 files"):
        src.seek(p)
    with pytest.raises(ValueError):
        S.IterableSource([1]).seek({"kind": "iterable", "consumed": -1})
    with pytest.raises(ValueError):
        S.JsonlSource(corpus["files"]["jsonl"], on_error="ignore")


# ---- IterableSource -----------------------------------------------------------

def test_iterable_source_list_factory_and_one_shot():
    texts = [f"doc {i}" for i in range(200)]
    full = [{"text": t} for t in texts]

    check_resume_everywhere(lambda **kw: S.IterableSource(texts, **kw), full, random.Random(1))
    check_resume_everywhere(lambda **kw: S.IterableSource(lambda: (t for t in texts), **kw), full, random.Random(2))

    gen = (t for t in texts)
    src = S.IterableSource(gen)
    head = list(itertools.islice(iter(src), 10))
    assert head == full[:10]
    assert list(src) == full[10:]  # the same object continues its live iterator
    with pytest.raises(ValueError, match="one-shot"):
        S.IterableSource((t for t in texts), position={"kind": "iterable", "consumed": 5})
    with pytest.raises(ValueError, match="one-shot"):
        list(src)  # exhausted one-shot: cannot replay


def test_iterable_source_counts_replayed_records_and_bad_items():
    items = ["a", {"text": "b", "x": 1}, 3, {"no": "text"}, "e"]
    with pytest.raises(ValueError, match="item 2"):
        list(S.IterableSource(items))
    src = S.IterableSource(items, on_error="skip")
    assert [r["text"] for r in src] == ["a", "b", "e"] and src.skipped == 2
    # resume after "b": the bad items are replayed and skipped again
    s1 = S.IterableSource(items, on_error="skip")
    list(itertools.islice(iter(s1), 2))
    s2 = S.IterableSource(items, on_error="skip", position=s1.position())
    assert [r["text"] for r in s2] == ["e"]


# ---- TextSource ---------------------------------------------------------------

@pytest.mark.parametrize("ext", ["txt", "txt.gz", "txt.zst"])
def test_text_source_lines_and_files(tmp_path, ext):
    rng = random.Random(ext)
    docs = [[f"line {f}.{i} {'ü' * rng.randint(0, 5)}" for i in range(rng.randint(0, 60))] for f in range(5)]
    docs[2].insert(3, "")  # empty lines are records
    for f, lines in enumerate(docs):
        S.write_jsonl(str(tmp_path / f"d{f}.{ext}"), lines, frame_bytes=256)
    glob = str(tmp_path / f"d*.{ext}")
    full = [{"text": l} for lines in docs for l in lines]

    def make(**kw):
        return S.TextSource(glob, gzip_index=False, **kw)

    assert list(make()) == full
    check_resume_everywhere(make, full, rng)
    per_file = [{"text": "".join(l + "\n" for l in lines)} for lines in docs]

    def make_files(**kw):
        return S.TextSource(glob, per="file", gzip_index=False, **kw)

    assert list(make_files()) == per_file
    for k in range(len(per_file) + 1):
        take_then_resume(make_files, per_file, k)


# ---- Parquet ------------------------------------------------------------------

def test_parquet_resume(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    recs = make_records(900, 5)
    bounds = [0, 250, 250, 700, 900]  # includes an empty file
    for i in range(4):
        part = recs[bounds[i]:bounds[i + 1]]
        table = pa.table({"id": [r["id"] for r in part], "text": pa.array([r["text"] for r in part], pa.string()),
                          "k": [r["meta"]["k"] for r in part]})
        pq.write_table(table, str(tmp_path / f"p{i}.parquet"), row_group_size=37)
    full = [{"id": r["id"], "text": r["text"], "k": r["meta"]["k"]} for r in recs]

    def make(**kw):
        return S.ParquetSource(str(tmp_path / "p*.parquet"), **kw)

    assert list(make()) == full
    check_resume_everywhere(make, full, random.Random(5), n_random=40)
    only = list(S.ParquetSource(str(tmp_path / "p*.parquet"), columns=["id"]))
    assert only == [{"text": r["text"], "id": r["id"]} for r in recs]


def test_parquet_errors(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"body": ["a"]}), str(tmp_path / "x.parquet"))
    with pytest.raises(ValueError, match="no column 'text'"):
        list(S.ParquetSource(str(tmp_path / "x.parquet")))
    pq.write_table(pa.table({"text": ["a", None, "c"]}), str(tmp_path / "n.parquet"))
    with pytest.raises(ValueError, match="row group 0, row 1"):
        list(S.ParquetSource(str(tmp_path / "n.parquet")))
    src = S.ParquetSource(str(tmp_path / "n.parquet"), on_error="skip")
    assert [r["text"] for r in src] == ["a", "c"] and src.skipped == 1
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    with pytest.raises(ValueError, match="junk.parquet"):
        list(S.ParquetSource(str(tmp_path / "junk.parquet")))


# ---- sharding -------------------------------------------------------------------

@pytest.mark.parametrize("world", [2, 3, 4, 7])
def test_rank_split_is_a_partition_and_resumable(corpus, world):
    files = corpus["files"]["jsonl.gz"]  # 4 files: file split for world <= 4, record split above
    full_ids = [r["id"] for r in corpus["records"]]
    seen = []
    for rank in range(world):
        def make(**kw):
            return S.JsonlSource(files, rank=rank, world_size=world, gzip_index=False, **kw)
        mine = list(make())
        seen += [r["id"] for r in mine]
        take_then_resume(make, mine, len(mine) // 3)
    assert sorted(seen) == sorted(full_ids) and len(seen) == len(full_ids)
    with pytest.raises(ValueError):
        S.JsonlSource(files, rank=world, world_size=world)


def test_iterable_rank_split():
    texts = [str(i) for i in range(50)]
    parts = [[r["text"] for r in S.IterableSource(texts, rank=r, world_size=3)] for r in range(3)]
    assert sorted(sum(parts, []), key=int) == texts
    assert parts[1] == [str(i) for i in range(1, 50, 3)]


# ---- HuggingFace datasets ---------------------------------------------------------

def test_hf_iterable_source():
    datasets = pytest.importorskip("datasets", reason="HuggingFace datasets is not installed")
    texts = [f"hf doc {i}" for i in range(120)]
    ds_map = datasets.Dataset.from_dict({"text": texts, "i": list(range(120))})

    def make(**kw):
        return S.HFIterableSource(ds_map.to_iterable_dataset(num_shards=4), **kw)

    full = list(make())
    assert [r["text"] for r in full] == texts
    check_resume_everywhere(make, full, random.Random(7), n_random=10)
    with pytest.raises(TypeError):
        S.HFIterableSource(texts)


def test_hf_absent_gives_clear_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ImportError, match="pip install datasets"):
        S.HFIterableSource(object())
