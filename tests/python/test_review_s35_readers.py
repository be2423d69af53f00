"""Review s35: reading input files (sources.py, readers.py, _blocks.py, the command's input handling)
on hostile and careless input.  Each test failed before its fix; the references are json / gzip /
zstandard / pyarrow or the record-by-record path (``iter(source)``), never hard-coded records."""
import gzip
import io
import json
import os
import sys

import pytest
import torch  # noqa: F401  (loads torch's libraries before the extension)

from luminamoon.data import BadRecordError
from luminamoon.data import sources as S
from test_cli_inputs import _rows  # noqa: E402 - the part files' rows

QUIET = ["-q", "--no-report", "--no-quality", "--no-dedup", "--no-pii", "--no-clean"]


def _by_record(src):
    """(records, error text, position, skipped) of iterating ``src`` record by record."""
    out = []
    try:
        for r in src:
            out.append(r)
        err = None
    except ValueError as e:
        err = f"{type(e).__name__}: {e}"
    return out, err, src.position(), src.skipped


def _by_blocks(src, n=1):
    """The same read through ``iter_blocks(n)`` (blocks of one record: every record is delivered
    before an error, as iterating delivers it)."""
    key = getattr(src, "text_key", None) or src.text_column
    out = []
    try:
        for b in src.iter_blocks(n):
            for t, r in zip(b.texts.tolist(), b.records):
                out.append({**dict(r), key: t})
        err = None
    except ValueError as e:
        err = f"{type(e).__name__}: {e}"
    return out, err, src.position(), src.skipped


def _same_by_key(a, b):
    """Records equal as dicts (the block path puts the text field last)."""
    return [dict(sorted(r.items())) for r in a] == [dict(sorted(r.items())) for r in b]


# ---------------------------------------------------------------- JSON: an integer beyond Python's limit

def test_integer_longer_than_pythons_limit_is_a_bad_record_naming_file_and_line(tmp_path):
    """``json.loads`` raises a bare ValueError ("Exceeds the limit (4300 digits)") for such a number; it
    escaped as that ValueError: no file or line, not skipped with on_error="skip", and the block path
    lost the good records scanned with it."""
    big = "1" * (sys.get_int_max_str_digits() + 1)
    lines = [b'{"text": "first", "id": 1}', b'{"text": "big", "n": ' + big.encode() + b"}",
             b'{"text": "last", "id": 3}']
    path = tmp_path / "big.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    good = []
    for line in lines:
        try:
            good.append(json.loads(line))
        except ValueError:
            pass
    assert len(good) == 2  # json itself refuses the middle line
    for read in (_by_record, _by_blocks):
        recs, err, pos, skipped = read(S.JsonlSource(str(path), on_error="skip"))
        assert err is None and skipped == 1 and _same_by_key(recs, good), (read.__name__, err)
        recs, err, pos, _ = read(S.JsonlSource(str(path)))
        assert err is not None and err.startswith("BadRecordError: ") and f"{path}:2: malformed JSON" in err, err
        assert _same_by_key(recs, good[:1])
        assert pos["line"] == 2  # the position is past the bad line, as for any bad record
    with pytest.raises(BadRecordError, match=r"big\.jsonl:2: malformed JSON"):
        list(S.JsonlSource(str(path)))


# ---------------------------------------------------------------- Parquet: string_view text column

@pytest.mark.parametrize("typ", ["string_view", "binary_view"])
def test_view_text_column_under_a_size_limit(tmp_path, typ):
    """A string_view (or binary_view) text column with max_record_bytes set (the command's default is
    64 MiB) crashed the block path: ArrowNotImplementedError, binary_length has no kernel for
    string_view.  Now the same records, skips and errors as iterating, over several row groups."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    if not hasattr(pa, typ):
        pytest.skip(f"pyarrow without {typ}")
    texts = [None if i % 11 == 3 else f"doc {i} " + "\u00e9" * (i % 7) for i in range(40)]
    vals = texts if typ == "string_view" else [None if t is None else t.encode() for t in texts]
    path = str(tmp_path / f"{typ}.parquet")
    pq.write_table(pa.table({"text": pa.array(vals, getattr(pa, typ)()), "id": list(range(40))}), path,
                   row_group_size=9)
    assert str(pq.read_schema(path).field("text").type) == typ  # the view type comes back
    lim = 10
    want = [r for r in pq.read_table(path).to_pylist()
            if r["text"] is not None and len(r["text"] if isinstance(r["text"], bytes) else r["text"].encode()) <= lim]
    for n in (1, 4, 100):
        a = _by_record(S.ParquetSource(path, on_error="skip", max_record_bytes=lim))
        b = _by_blocks(S.ParquetSource(path, on_error="skip", max_record_bytes=lim), n)
        assert b[1] is None, b[1]
        assert [r["id"] for r in b[0]] == [r["id"] for r in want] == [r["id"] for r in a[0]]
        assert [r["text"] for r in b[0]] == [r["text"] for r in a[0]]
        assert b[3] == a[3] == 40 - len(want)
    a = _by_record(S.ParquetSource(path, max_record_bytes=lim))
    b = _by_blocks(S.ParquetSource(path, max_record_bytes=lim))
    assert b[1] == a[1] and a[1].startswith("BadRecordError") and b[2] == a[2]


def test_command_reads_a_string_view_parquet_file(tmp_path, capsys):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    if not hasattr(pa, "string_view"):
        pytest.skip("pyarrow without string_view")
    from luminamoon.cli import main

    texts = [f"document number {i} about a plain topic." for i in range(30)]
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": pa.array(texts, pa.string_view())}), str(path))
    out = tmp_path / "o"
    rc = main(["run", str(path), "-o", str(out), *QUIET])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert [r["text"] for r in _rows(out)] == texts


# ---------------------------------------------------------------- compressed data under a plain name

@pytest.mark.parametrize("comp", ["gzip", "zstd"])
@pytest.mark.parametrize("kind", ["jsonl", "text", "text_file"])
def test_compressed_data_under_a_plain_name_is_refused_by_name(tmp_path, comp, kind):
    """A ``.jsonl`` / ``.txt`` holding gzip or zstd data was read as text: "invalid UTF-8 at byte 1", or
    with on_error="skip" every line skipped and the run "succeeded" with nothing.  Now refused up front,
    saying what the file holds, on both reading paths and with on_error="skip"."""
    data = "".join(json.dumps({"text": f"doc {i}"}) + "\n" for i in range(50)).encode()
    if comp == "gzip":
        blob = gzip.compress(data)
    else:
        zstandard = pytest.importorskip("zstandard")
        blob = zstandard.ZstdCompressor().compress(data)
    path = str(tmp_path / ("in.jsonl" if kind == "jsonl" else "in.txt"))
    with open(path, "wb") as f:
        f.write(blob)

    def make():
        if kind == "jsonl":
            return S.JsonlSource(path, on_error="skip")
        return S.TextSource(path, per="file" if kind == "text_file" else "line", on_error="skip")

    reads = [_by_record] + ([] if kind == "text_file" else [_by_blocks])
    for read in reads:
        recs, err, _, skipped = read(make())
        assert recs == [] and skipped == 0
        assert err is not None and f"{comp}-compressed" in err and ("in.jsonl" in err or "in.txt" in err), err
    # the same bytes under the right name read whole
    right = path + (".gz" if comp == "gzip" else ".zst")
    os.rename(path, right)
    got = list(S.TextSource(right) if kind != "jsonl" else S.JsonlSource(right))
    assert len(got) == 50


def test_plain_text_is_still_read_under_a_plain_name(tmp_path):
    """The check looks at the magic bytes only: text (also starting with odd bytes) is read as before."""
    path = tmp_path / "odd.txt"
    raw = b"\x1f\x8bnot gzip\nplain\n"  # not a gzip header (no deflate method byte)
    path.write_bytes(raw)
    recs, err, _, skipped = _by_record(S.TextSource(str(path), on_error="skip"))
    assert err is None and [r["text"] for r in recs] == ["plain"] and skipped == 1


# ---------------------------------------------------------------- an empty gzip file with indexed_gzip

@pytest.mark.parametrize("blob", [b"", gzip.compress(b"")], ids=["zero_bytes", "empty_member"])
def test_empty_gzip_file_is_no_record_with_the_index(tmp_path, blob):
    """gzip_index=True (the default with indexed_gzip installed): reading an empty ``.gz`` record by
    record raised "not a readable gzip file: zran_build_index returned error"; the block path,
    gzip_index=False and the gzip module read no record."""
    pytest.importorskip("indexed_gzip")
    path = str(tmp_path / "e.jsonl.gz")
    with open(path, "wb") as f:
        f.write(blob)
    with gzip.open(path, "rb") as f:
        assert f.read() == b""  # the standard library: empty
    for gi in (True, False):
        for make in (lambda: S.JsonlSource(path, gzip_index=gi, index_dir=str(tmp_path / "idx")),
                     lambda: S.TextSource(path, gzip_index=gi, index_dir=str(tmp_path / "idx"))):
            for read in (_by_record, _by_blocks):
                recs, err, pos, _ = read(make())
                assert (recs, err) == ([], None), (gi, read.__name__, err)
                assert pos["shard"] == 1
        recs = list(S.TextSource(path, per="file", gzip_index=gi, index_dir=str(tmp_path / "idx")))
        assert recs == [{"text": ""}]


def test_gzip_resume_still_goes_through_the_index(tmp_path):
    """A read from the start inflates as a stream; a resume inside the file builds and uses the index
    (and gives exactly the rest: every record once)."""
    pytest.importorskip("indexed_gzip")
    lines = [json.dumps({"text": f"doc {i} " + "x" * (i % 30), "id": i}) for i in range(2000)]
    path = str(tmp_path / "r.jsonl.gz")
    with open(path, "wb") as f:
        f.write(gzip.compress(("\n".join(lines) + "\n").encode()))
    ref = [json.loads(l) for l in lines]
    idx = str(tmp_path / "idx")
    src = S.JsonlSource(path, gzip_index=True, index_dir=idx)
    positions = []
    for _ in src:
        positions.append(src.position())
    assert not os.path.exists(idx) or not os.listdir(idx)  # no index for a read from the start
    for k in (0, 777, 1998):
        again = S.JsonlSource(path, gzip_index=True, index_dir=idx, position=positions[k])
        assert list(again) == ref[k + 1:]
    assert any(f.endswith(".gzidx") for f in os.listdir(idx))


# ---------------------------------------------------------------- TextSource: a byte order mark and the limit

@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b""])
@pytest.mark.parametrize("comp", ["plain", "gz"])
def test_text_byte_order_mark_does_not_count_against_the_limit(tmp_path, ending, comp):
    """The block scan measured the first line without its byte order mark, the record path with it: a
    first line of exactly max_record_bytes was kept by one and refused by the other (and a longer one
    reported 3 bytes apart)."""
    first = "abcd\u00e9"  # 6 bytes of text
    for lim in (5, 6, 7, 8):
        for tail in (b"", b"x" * 20):
            raw = b"\xef\xbb\xbf" + first.encode() + tail + ending + b"second line" + ending
            path = str(tmp_path / ("t.txt" if comp == "plain" else "t.txt.gz"))
            with open(path, "wb") as f:
                f.write(raw if comp == "plain" else gzip.compress(raw))
            # the reference: the lines of the decoded text, the mark dropped, measured in UTF-8 bytes
            text_lines = raw[3:].decode("utf-8").replace("\r\n", "\n").split("\n")
            text_lines = text_lines[:-1] if text_lines[-1] == "" else text_lines
            want = [t for t in text_lines if len(t.encode()) <= lim]
            for on_error in ("skip", "raise"):
                a = _by_record(S.TextSource(path, on_error=on_error, max_record_bytes=lim))
                b = _by_blocks(S.TextSource(path, on_error=on_error, max_record_bytes=lim))
                assert (a[1], a[2], a[3]) == (b[1], b[2], b[3]), (lim, tail, on_error)
                assert [r["text"] for r in a[0]] == [r["text"] for r in b[0]]
                if on_error == "skip":
                    assert [r["text"] for r in a[0]] == want
                    assert a[3] == len(text_lines) - len(want)
                elif len(text_lines[0].encode()) > lim:
                    assert f"record of {len(text_lines[0].encode())} bytes" in a[1]


# ---------------------------------------------------------------- standard input: what it holds

def _stdin_run(tmp_path, monkeypatch, capsys, data):
    from luminamoon.cli import main

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    out = tmp_path / "o"
    rc = main(["run", "-", "-o", str(out), *QUIET])
    return rc, capsys.readouterr().err, out


def _empty_first_gzip(data):
    return gzip.compress(b"") + gzip.compress(data)


def _skippable_first_zstd(data):
    zstandard = pytest.importorskip("zstandard")
    c = zstandard.ZstdCompressor()
    skip = (0x184D2A50).to_bytes(4, "little") + (4).to_bytes(4, "little") + b"\0\0\0\4"  # as pzstd writes
    return skip + c.compress(b"") + skip + c.compress(data)


@pytest.mark.parametrize("wrap", [_empty_first_gzip, _skippable_first_zstd], ids=["gzip_empty_member", "zstd_skippable"])
def test_standard_input_json_lines_after_an_empty_member_or_skippable_frame(tmp_path, monkeypatch, capsys, wrap):
    """The format of standard input was told from its first gzip member / zstd frame only (and a stream
    opening with a skippable frame, as pzstd writes, was not recognised as zstd at all): JSON Lines
    after an empty member were read as text, each document the raw JSON line."""
    docs = [{"text": f"stdin document {i}: a plain sentence about item {i}."} for i in range(7)]
    data = "".join(json.dumps(d) + "\n" for d in docs).encode()
    rc, err, out = _stdin_run(tmp_path, monkeypatch, capsys, wrap(data))
    assert rc == 0, err
    assert [r["text"] for r in _rows(out)] == [d["text"] for d in docs]


def test_standard_input_that_is_not_gzip_after_the_gzip_magic_exits_2(tmp_path, monkeypatch, capsys):
    """Was a zlib.error traceback (exit 1)."""
    rc, err, out = _stdin_run(tmp_path, monkeypatch, capsys, b"\x1f\x8b\x09garbage, not a gzip stream\n")
    assert rc == 2 and "standard input" in err and "gzip" in err and "Traceback" not in err, err
    assert not out.exists() or not [f for f in os.listdir(out) if not f.startswith(".")]


# ---------------------------------------------------------------- a "\r\n" cut at the size limit

def _compress(raw: bytes, comp: str) -> bytes:
    """raw as the file of kind comp: plain, gz / zst, or *_split (two members / frames, the first
    ending just after a CR)."""
    if comp.startswith("gz"):
        return _split_after_cr(raw, gzip.compress) if comp.endswith("split") else gzip.compress(raw)
    if comp.startswith("zst"):
        c = pytest.importorskip("zstandard").ZstdCompressor()
        return _split_after_cr(raw, c.compress) if comp.endswith("split") else c.compress(raw)
    return raw


def _split_after_cr(raw, compress):
    """Two members / frames, the first ending with the "\\r" of the second line's "\\r\\n"."""
    k = raw.index(b"\r", raw.index(b"\n") + 1) + 1
    return compress(raw[:k]) + compress(raw[k:])


@pytest.mark.parametrize("comp", ["plain", "gz", "zst", "gz_split", "zst_split"])
def test_too_long_line_size_when_its_crlf_is_cut_at_the_limit(tmp_path, comp):
    """A line read up to the limit that stopped just after the "\\r" of its "\\r\\n" (plain: the limit's
    read; gzip / zstd: a member or frame ending there) was reported one byte longer (the "\\r" counted
    as text) by the record path; the block scan said the right size."""
    lim = 12
    for width in range(lim - 1, lim + 5):
        lines = [b"first", b"x" * width, b"after"]
        raw = b"\r\n".join(lines) + b"\r\n"
        path = str(tmp_path / f"c{width}.txt") + ("" if comp == "plain" else "." + comp.split("_")[0])
        with open(path, "wb") as f:
            f.write(_compress(raw, comp))
        for read in (_by_record, _by_blocks):
            recs, err, _, _ = read(S.TextSource(path, max_record_bytes=lim, gzip_index=False))
            if width > lim:
                assert err is not None and f":2: record of {width} bytes is larger" in err, (read.__name__, width, err)
                assert [r["text"] for r in recs] == ["first"]
            else:
                assert err is None and [r["text"] for r in recs] == [l.decode() for l in lines]
        jpath = path.replace(".txt", ".jsonl")
        jlines = [json.dumps({"text": l.decode()}).encode() for l in lines]
        jraw = b"\r\n".join(jlines) + b"\r\n"
        with open(jpath, "wb") as f:
            f.write(_compress(jraw, comp))
        jlim = len(jlines[1]) - (width - lim)  # the same margin on the JSON line
        for read in (_by_record, _by_blocks):
            recs, err, _, _ = read(S.JsonlSource(jpath, max_record_bytes=jlim, gzip_index=False))
            if width > lim:
                assert err is not None and f":2: record of {len(jlines[1])} bytes is larger" in err, (read.__name__, err)
            else:
                assert err is None and len(recs) == 3
