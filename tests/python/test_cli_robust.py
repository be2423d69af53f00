"""The command line on awkward real-world input (issue 20 items 6-10 and its
"clear messages" bullets): high-cardinality --group-by, lone surrogates in any
field, --keep-fields with Arrow types, numeric settings, Parquet inputs with
binary / corrupt / wide columns, the demo's size, internal markers, BOMs, odd
id types, ``bench NAME`` and ``-q``."""
import base64
import datetime
import decimal
import glob
import json
import os
import subprocess
import sys

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from luminamoon.cli import main  # noqa: E402
from luminamoon.cli.config import ConfigError, apply_override, default_config, load_config  # noqa: E402
from luminamoon.cli.report import RunStats, format_summary, render_report  # noqa: E402

TEXT = "The quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat. "


def _jsonl(path, lines):
    """Writes raw JSON lines (str, written as UTF-8 bytes exactly as given)."""
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")
    return str(path)


def _rec(i, **kw):
    return dict({"id": f"d{i}", "text": f"{TEXT} number {i}."}, **kw)


def _cli(args, capsys):
    rc = main(args)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _out_rows(out, fmt="parquet"):
    rows = []
    for p in sorted(glob.glob(os.path.join(out, "part-*"))):
        if fmt == "parquet":
            rows += pq.read_table(p).to_pylist()
        else:
            with open(p, encoding="utf-8") as f:
                rows += [json.loads(line) for line in f]
    return rows


def _stats(out):
    with open(os.path.join(out, "stats.json"), encoding="utf-8") as f:
        return json.load(f)


FAST = ["--no-quality", "--no-dedup", "--no-pii", "-q", "--no-report"]


# ------------------------------------------------------------- item 10: numbers
@pytest.mark.parametrize("assignment,key", [
    ("output.part_mb=inf", "output.part_mb"),
    ("input.max_record_mb=inf", "input.max_record_mb"),
    ("run.prefetch_mb=inf", "run.prefetch_mb"),
    ("output.part_mb=nan", "output.part_mb"),
    ("run.prefetch_mb=-inf", "run.prefetch_mb"),
    ("input.max_record_mb=1e300", "input.max_record_mb"),
    ("quality.gq_max_ellipsis_lines_ratio=nan", "quality.gq_max_ellipsis_lines_ratio"),
])
def test_numeric_settings_finite_in_range_named(tmp_path, capsys, assignment, key):
    inp = _jsonl(tmp_path / "in.jsonl", [json.dumps(_rec(i)) for i in range(3)])
    rc, _, err = _cli(["run", inp, "-o", str(tmp_path / "out"), "--set", assignment, *FAST], capsys)
    assert rc == 2
    assert key in err and "Traceback" not in err
    assert not os.path.exists(tmp_path / "out" / "stats.json")


def test_numeric_settings_in_toml_named(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text("[output]\npart_mb = inf\n")
    with pytest.raises(ConfigError, match=r"output\.part_mb.*finite"):
        load_config(str(p))
    with pytest.raises(ConfigError, match=r"run\.batch_size"):
        apply_override(default_config(), "run.batch_size=0")
    cfg = apply_override(default_config(), "output.part_mb=0.5")  # in range: accepted
    assert cfg["output"]["part_mb"] == 0.5


# ------------------------------------------------------ item 9: --keep-fields
@pytest.mark.parametrize("value,msg", [
    ("[1, 2]", r"output\.keep_fields.*string"),
    ('["source", "source"]', r"output\.keep_fields.*'source'.*more than once"),
    ('[""]', r"output\.keep_fields.*empty"),
])
def test_keep_fields_list_validated(tmp_path, value, msg):
    p = tmp_path / "c.toml"
    p.write_text(f"[output]\nkeep_fields = {value}\n")
    with pytest.raises(ConfigError, match=msg):
        load_config(str(p))


def test_keep_fields_repeated_on_command_line(tmp_path, capsys):
    inp = _jsonl(tmp_path / "in.jsonl", [json.dumps(_rec(i, source="web")) for i in range(3)])
    rc, _, err = _cli(["run", inp, "-o", str(tmp_path / "out"), "--keep-fields", "source,source", *FAST], capsys)
    assert rc == 2 and "'source'" in err and "more than once" in err


def _typed_parquet(path, n=4):
    t = pa.table({
        "id": [f"r{i}" for i in range(n)],
        "text": [f"{TEXT} row {i}" for i in range(n)],
        "ts": pa.array([datetime.datetime(2024, 1, 2, 3, 4, 5, i) for i in range(n)], type=pa.timestamp("us")),
        "tsz": pa.array([datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.timezone.utc)] * n,
                        type=pa.timestamp("ms", tz="UTC")),
        "day": pa.array([datetime.date(2020, 2, 29)] * n, type=pa.date32()),
        "price": pa.array([decimal.Decimal("12.50"), None, decimal.Decimal("-0.01"), decimal.Decimal("1")][:n],
                          type=pa.decimal128(10, 2)),
        "blob": pa.array([b"\x00\xffab", b"", None, b"xyz"][:n], type=pa.binary()),
        "n": pa.array(list(range(n)), type=pa.int16()),
    })
    pq.write_table(t, path)
    return t


def test_keep_fields_arrow_types_parquet_output(tmp_path, capsys):
    src = _typed_parquet(str(tmp_path / "in.parquet"))
    out = str(tmp_path / "out")
    rc, _, err = _cli(["run", str(tmp_path / "in.parquet"), "-o", out, "--keep-fields", "ts,tsz,day,price,blob,n",
                       *FAST], capsys)
    assert rc == 0, err
    got = pa.concat_tables([pq.read_table(p) for p in sorted(glob.glob(os.path.join(out, "part-*")))])
    for k in ("ts", "tsz", "day", "price", "blob", "n"):
        assert got.schema.field(k).type == src.schema.field(k).type, k
        assert got.column(k).to_pylist() == src.column(k).to_pylist(), k


def test_keep_fields_arrow_types_jsonl_output(tmp_path, capsys):
    _typed_parquet(str(tmp_path / "in.parquet"))
    out = str(tmp_path / "out")
    rc, _, err = _cli(["run", str(tmp_path / "in.parquet"), "-o", out, "--format", "jsonl",
                       "--keep-fields", "ts,tsz,day,price,blob,n", *FAST], capsys)
    assert rc == 0, err
    rows = _out_rows(out, "jsonl")
    assert rows[0]["ts"] == "2024-01-02T03:04:05" and rows[1]["ts"] == "2024-01-02T03:04:05.000001"
    assert rows[0]["tsz"] == "2024-05-06T07:08:09+00:00"
    assert rows[0]["day"] == "2020-02-29"
    assert [r["price"] for r in rows] == ["12.50", None, "-0.01", "1.00"]
    assert [r["blob"] for r in rows] == [base64.b64encode(b"\x00\xffab").decode(), "", None,
                                         base64.b64encode(b"xyz").decode()]
    assert [r["n"] for r in rows] == [0, 1, 2, 3]


# ------------------------------------------------- item 8: lone surrogates
@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_lone_surrogates_in_any_field_repaired(tmp_path, capsys, fmt):
    lines = [json.dumps(_rec(0, src="web")),
             '{"id": "a\\ud800", "text": "' + TEXT + ' x\\udc80y", "src": "b\\udfff", "meta": {"k": ["\\ud801"]}}',
             json.dumps(_rec(2, src="web"))]
    inp = _jsonl(tmp_path / "in.jsonl", lines)
    out = str(tmp_path / "out")
    args = ["run", inp, "-o", out, "--format", fmt, "--keep-fields", "src,meta", "--group-by", "src", *FAST]
    rc, _, err = _cli(args, capsys)
    assert rc == 0, err
    rows = _out_rows(out, fmt)
    assert [r["id"] for r in rows] == ["d0", "a\ufffd", "d2"]
    assert rows[1]["text"].endswith(" x\ufffdy")  # ONE replacement character per lone surrogate
    assert rows[1]["src"] == "b\ufffd"
    assert "\ufffd" in json.dumps(rows[1]["meta"], ensure_ascii=False)
    st = _stats(out)
    assert st["by_group"]["groups"]["b\ufffd"]["kept"] == 1
    # the final commit holds nothing that cannot be written again: --resume finishes cleanly
    rc, _, err = _cli(args + ["--resume"], capsys)
    assert rc == 0, err


# --------------------------------------- bullets: markers, BOM, id types
def test_input_fields_named_like_internal_markers_are_data(tmp_path, capsys):
    lines = [json.dumps(_rec(0, __lm_skipped=1000, __lm_surrogates=7)), json.dumps(_rec(1))]
    inp = _jsonl(tmp_path / "in.jsonl", lines)
    out = str(tmp_path / "out")
    rc, _, err = _cli(["run", inp, "-o", out, "--keep-fields", "__lm_skipped", *FAST], capsys)
    assert rc == 0, err
    st = _stats(out)
    assert st["documents"]["skipped_bad_records"] == 0
    assert "docs_with_lone_surrogates" not in st["input_repairs"]
    assert [r["__lm_skipped"] for r in _out_rows(out)] == ["1000", None]


def test_utf8_bom_on_first_record(tmp_path, capsys):
    p = tmp_path / "bom.jsonl"
    p.write_bytes(b"\xef\xbb\xbf" + (json.dumps(_rec(0)) + "\n" + json.dumps(_rec(1)) + "\n").encode())
    out = str(tmp_path / "out")
    rc, _, err = _cli(["run", str(p), "-o", out, *FAST], capsys)
    assert rc == 0, err
    assert [r["id"] for r in _out_rows(out)] == ["d0", "d1"]


def test_odd_id_types_written_as_json_not_python_repr(tmp_path, capsys):
    ids = [1, 2.5, True, None, {"a": 1, "b": "é"}, [1, "x"], "plain"]
    lines = [json.dumps({"id": v, "text": f"{TEXT} {i}"}, ensure_ascii=False) for i, v in enumerate(ids)]
    inp = _jsonl(tmp_path / "in.jsonl", lines)
    out = str(tmp_path / "out")
    rc, _, err = _cli(["run", inp, "-o", out, *FAST], capsys)
    assert rc == 0, err
    got = [r["id"] for r in _out_rows(out)]
    assert got == ["1", "2.5", "true", "in.jsonl:4", '{"a":1,"b":"é"}', '[1,"x"]', "plain"]


# ------------------------------------------------------------ Parquet bullets
def test_parquet_binary_text_column_decoded(tmp_path, capsys):
    p = str(tmp_path / "bin.parquet")
    pq.write_table(pa.table({"id": ["a", "b", "c"],
                             "text": pa.array([f"{TEXT} é".encode(), b"\xff\xfe not utf-8", None], pa.binary())}), p)
    out = str(tmp_path / "out")
    rc, _, err = _cli(["run", p, "-o", out, *FAST], capsys)
    assert rc == 2
    assert "row group 0, row 1" in err and "binary" in err and "not valid UTF-8" in err
    rc, _, err = _cli(["run", p, "-o", out, "--skip-bad-records", *FAST], capsys)
    assert rc == 0, err
    rows = _out_rows(out)
    assert [r["id"] for r in rows] == ["a"] and rows[0]["text"].endswith("mat. é")
    assert _stats(out)["documents"]["skipped_bad_records"] == 2


def test_parquet_corrupt_page_names_file_and_row_group(tmp_path, capsys):
    p = tmp_path / "bad.parquet"
    texts = [f"{TEXT} {i} " + os.urandom(8).hex() for i in range(2000)]
    pq.write_table(pa.table({"text": texts}), str(p), compression="snappy", row_group_size=1000,
                   use_dictionary=False)
    data = bytearray(p.read_bytes())
    md = pq.ParquetFile(str(p)).metadata.row_group(1).column(0)
    start = md.data_page_offset
    mid = start + md.total_compressed_size // 2
    data[mid:mid + 64] = b"\x00" * 64  # inside row group 1's compressed data page
    p.write_bytes(bytes(data))
    rc, _, err = _cli(["run", str(p), "-o", str(tmp_path / "out"), *FAST], capsys)
    assert rc == 2
    assert "bad.parquet" in err and "row group 1" in err


def test_parquet_reads_only_needed_columns_in_bounded_batches(tmp_path):
    """An unused 192 MB binary column of a Parquet input is never decoded by `run`
    (peak RSS measured in a child; it grew by about 400 MB before)."""
    p = str(tmp_path / "wide.parquet")
    n = 48
    blob = pa.array([b"\x01" * (4 << 20)] * n, pa.binary())  # compresses to almost nothing on disk
    pq.write_table(pa.table({"id": [f"r{i}" for i in range(n)], "text": [f"{TEXT} {i}" for i in range(n)],
                             "blob": blob}), p, compression="zstd", row_group_size=n)
    del blob
    code = (
        "import sys\n"
        "from luminamoon.data.sources import ParquetSource\n"
        "def kb(key):\n"
        "    with open('/proc/self/status') as f:\n"
        "        return next(int(l.split()[1]) for l in f if l.startswith(key))\n"
        "src = ParquetSource([sys.argv[1]], text_column='text', columns=['id'])\n"
        "assert sorted(next(iter(src))) == ['id', 'text']\n"
        "from luminamoon.cli import main\n"
        "import luminamoon.cli.runner, torch, polars\n"
        "with open('/proc/self/clear_refs', 'w') as f:\n"
        "    f.write('5')  # resets the peak (VmHWM) to the current RSS\n"
        "before = kb('VmRSS')\n"
        "rc = main(['run', sys.argv[1], '-o', sys.argv[2], '-q', '--no-report', '-j', '1', '--no-quality'])\n"
        "peak = kb('VmHWM')\n"
        "assert rc == 0\n"
        "print((peak - before) // 1024)\n")
    r = subprocess.run([sys.executable, "-c", code, p, str(tmp_path / "out")], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert pq.read_table(glob.glob(str(tmp_path / "out" / "part-*"))[0]).num_rows == n
    assert int(r.stdout.strip()) < 96, f"peak RSS grew by {r.stdout.strip()} MB"


# ------------------------------------------------------- item 6: many groups
def test_group_by_high_cardinality_bounded(tmp_path, capsys):
    n = 3000
    inp = _jsonl(tmp_path / "in.jsonl", [json.dumps(_rec(i, user=f"u{i}" if i % 3 else "big")) for i in range(n)])
    out = str(tmp_path / "out")
    rc, stdout, err = _cli(["run", inp, "-o", out, "--group-by", "user", "--no-quality", "--no-dedup", "--no-pii",
                            "--batch-size", "256"], capsys)
    assert rc == 0, err
    st = _stats(out)
    groups = st["by_group"]["groups"]
    assert len(groups) <= RunStats.MAX_GROUPS + 1
    assert groups["big"]["kept"] == 1000
    assert sum(sum(o.values()) for o in groups.values()) == n  # nothing lost: the rest is in "(other)"
    assert st["by_group"]["groups_folded_into_other"] > 0 and "(other)" in groups
    lines = format_summary(st).splitlines()
    assert len(lines) < 60
    assert any(l.strip().startswith("(other") for l in lines)
    assert os.path.exists(os.path.join(out, "report.png"))


def test_report_of_a_huge_group_table_is_bounded(tmp_path):
    """A stats dict with 20,000 groups (an older stats.json): the picture draws the top ones."""
    s = RunStats()
    s.meta["group_by"] = "user"
    st = s.to_json()
    st["by_group"] = {"field": "user", "groups": {f"g{i}": {"kept": i % 7 + 1} for i in range(20000)}}
    assert len(format_summary(st).splitlines()) < 60
    import matplotlib.axes

    calls = []
    orig = matplotlib.axes.Axes.barh

    def spy(self, y, *a, **k):
        calls.append(len(y))
        return orig(self, y, *a, **k)

    matplotlib.axes.Axes.barh = spy
    try:
        render_report(st, str(tmp_path / "r.png"))
    finally:
        matplotlib.axes.Axes.barh = orig
    assert max(calls) <= 40


# ------------------------------------------------------- demo, bench and -q
@pytest.mark.parametrize("size,msg", [("1e-7", "smaller than one document"), ("1e9", "free")])
def test_demo_size_checked_first(tmp_path, capsys, size, msg):
    rc, _, err = _cli(["demo", "--size-mb", size, "-o", str(tmp_path / "demo")], capsys)
    assert rc == 2 and msg in err, err
    left = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path) for f in fs]
    assert not left, left


def test_bench_unknown_name_fails(capsys):
    rc, out, err = _cli(["bench", "no_such_benchmark"], capsys)
    assert rc == 2
    assert "no_such_benchmark" in err and "strings" in err  # names the known ones


def test_quiet_demo_prints_nothing(tmp_path):
    # an unwritable matplotlib cache folder made matplotlib warn on stderr
    env = dict(os.environ, MPLCONFIGDIR=str(tmp_path / "not-a-folder" / "x"))
    (tmp_path / "not-a-folder").write_text("")
    r = subprocess.run([sys.executable, "-m", "luminamoon", "demo", "--size-mb", "0.3", "-q", "-o",
                        str(tmp_path / "demo")], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and r.stderr == "", (r.stdout, r.stderr)
    assert os.path.exists(tmp_path / "demo" / "out" / "report.png")
