"""Review s34 of the command line as a user and an adversary: standard input that starts with a
UTF-8 byte order mark, empty field names, --address without --engine ray, SIGTERM while standard
input is being copied.  Each test fails on the defect it names."""
import io
import json
import os
import signal
import subprocess
import sys
import time

import pytest

pq = pytest.importorskip("pyarrow.parquet")

from luminamoon.cli import main  # noqa: E402

QUIET = ["-q", "--no-report", "--no-quality", "--no-dedup", "--no-pii", "--no-clean"]
RECS = [{"id": "a", "text": "hello there"}, {"id": "b", "text": "a second document"}]


def _rows(out):
    rows = []
    for f in sorted(os.listdir(out)):
        p = os.path.join(out, f)
        if f.startswith("part-") and f.endswith(".jsonl"):
            with open(p, "rb") as fh:
                rows += [json.loads(line) for line in fh if line.strip()]
        elif f.startswith("part-") and f.endswith(".parquet"):
            rows += pq.read_table(p).to_pylist()
    return rows


class _Stdin:
    def __init__(self, data: bytes):
        self.buffer = io.BytesIO(data)


@pytest.mark.parametrize("compress", ["none", "gzip"])
def test_standard_input_jsonl_with_a_byte_order_mark_is_read_as_jsonl(tmp_path, capsys, monkeypatch, compress):
    # the JSONL reader ignores a BOM before the first record; the detection of standard input's
    # format did not: it saw no '{' first and read the JSON Lines as text, one raw JSON line per document
    data = b"\xef\xbb\xbf" + "".join(json.dumps(r) + "\n" for r in RECS).encode()
    if compress == "gzip":
        import gzip

        data = gzip.compress(data)
    monkeypatch.setattr(sys, "stdin", _Stdin(data))
    out = tmp_path / "o"
    rc = main(["run", "-", "-o", str(out), *QUIET, "--format", "jsonl"])
    assert rc == 0, capsys.readouterr().err
    rows = _rows(out)
    assert [(r["id"], r["text"]) for r in rows] == [(r["id"], r["text"]) for r in RECS]


@pytest.mark.parametrize("args, key", [
    (["--text-field", ""], "input.text_field"),
    (["--id-field", ""], "input.id_field"),
    (["--set", "input.text_field="], "input.text_field"),
    (["--set", "input.id_field="], "input.id_field"),
])
def test_an_empty_field_name_is_refused_naming_it(tmp_path, capsys, args, key):
    # --text-field '' / --id-field '' were silently the defaults; --set input.text_field= was refused
    # with a message about --group-by (not given), input.id_field= with an internal `fields` message
    src = tmp_path / "d.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in RECS))
    out = tmp_path / "o"
    rc = main(["run", str(src), "-o", str(out), *QUIET, *args])
    err = capsys.readouterr().err
    assert rc == 2
    assert key in err and "--group-by" not in err and "fields must hold" not in err, err
    assert not out.exists()


def test_address_without_the_ray_engine_is_refused(tmp_path, capsys):
    # --address only means something with --engine ray; it was ignored and the run went local
    src = tmp_path / "d.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in RECS))
    out = tmp_path / "o"
    rc = main(["run", str(src), "-o", str(out), *QUIET, "--address", "auto"])
    err = capsys.readouterr().err
    assert rc == 2 and "--engine ray" in err, err
    assert not out.exists()


def test_sigterm_while_standard_input_is_copied_ends_like_ctrl_c(tmp_path):
    # SIGTERM behaved like Ctrl-C only inside the main loop: during the copy of standard input the
    # process died of the signal (-15) and left the partial copy in the output folder
    out = tmp_path / "o"
    p = subprocess.Popen([sys.executable, "-m", "luminamoon", "run", "-", "-o", str(out), *QUIET],
                         stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        p.stdin.write(b"".join(json.dumps({"text": f"document {i}"}).encode() + b"\n" for i in range(2000)))
        p.stdin.flush()
        spool = out / ".luminamoon-stdin.tmp"
        deadline = time.time() + 60
        while not spool.exists() and time.time() < deadline:  # created before the first read
            time.sleep(0.05)
        assert spool.exists(), "the copy of standard input never started"
        time.sleep(0.2)
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdin.close()
    err = p.stderr.read().decode()
    p.stderr.close()
    assert rc == 130, (rc, err)
    assert "interrupted" in err
    assert not out.exists() or not any(f.startswith(".luminamoon-stdin") for f in os.listdir(out)), os.listdir(out)


@pytest.mark.parametrize("as_glob", [False, True])
def test_an_earlier_runs_output_folder_is_read_for_its_parts(tmp_path, capsys, as_glob):
    """Chaining runs: the output folder of one run as the input of the next.  Its stats.json (and
    report.png) beside .luminamoon/run.json are that run's files, not data: stats.json was read as
    JSON Lines and the second run stopped with "malformed JSON"."""
    src = tmp_path / "in.jsonl"
    recs = [{"id": f"d{i}", "text": f"document {i} " + "word " * (i % 7 + 1)} for i in range(40)]
    src.write_text("".join(json.dumps(r) + "\n" for r in recs))
    first, second = tmp_path / "first", tmp_path / "second"
    assert main(["run", str(src), "-o", str(first), "-q", "--no-quality", "--no-pii", "--no-dedup"]) == 0
    assert (first / "stats.json").is_file() and (first / "report.png").is_file()
    arg = str(tmp_path / "fi*" / "*") if as_glob else str(first)
    assert main(["run", arg, "-o", str(second)] + QUIET) == 0
    err = capsys.readouterr().err
    assert "statistics / report file(s) of an earlier run" in err and "stats.json" in err
    want = _rows(str(first))
    got = _rows(str(second))
    assert [r["text"] for r in got] == [r["text"] for r in want] and len(got) == len(recs)
    with open(second / "stats.json") as f:
        assert json.load(f)["documents"]["input"] == len(recs)
    # named as a file, stats.json is still read (and refused as what it is)
    assert main(["run", str(first / "stats.json"), "-o", str(tmp_path / "third")] + QUIET) == 2


def test_a_byte_order_mark_before_a_text_files_first_line_is_not_text(tmp_path, capsys):
    """A .txt input written by a Windows tool starts with a UTF-8 byte order mark: it stayed in the
    first document ("\\ufeffbom line") in every text reader, where JSONL readers drop it.  Checked on
    each path: record by record, the block scan, per="file", the distributed stream, and the command."""
    from luminamoon.data import TextSource
    from luminamoon.data.dist_stream import GlobalStream

    lines = ["bom line one", "second line", "", "third \u00e9"]
    raw = "\ufeff" + "\n".join(lines[:2]) + "\r\n" + "\n".join(lines[2:]) + "\n"
    p = tmp_path / "bom.txt"
    p.write_bytes(raw.encode("utf-8"))
    assert [r["text"] for r in TextSource(str(p))] == lines
    for n in (1, 3, 10):
        assert [t for b in TextSource(str(p)).iter_blocks(n) for t in b.texts.tolist()] == lines
    assert [r["text"] for r in TextSource(str(p), per="file")] == [raw[1:]]
    g = GlobalStream(TextSource(str(p)))
    assert [g.parse(x)["text"] for x in g.take(10)] == lines
    # only the first line of a file: a mark later on is text (U+FEFF inside a line is a character)
    q = tmp_path / "later.txt"
    q.write_bytes(("first\n\ufeffsecond\n").encode("utf-8"))
    assert [t for b in TextSource(str(q)).iter_blocks(4) for t in b.texts.tolist()] == ["first", "\ufeffsecond"]
    assert [r["text"] for r in TextSource(str(q))] == ["first", "\ufeffsecond"]
    out = tmp_path / "out"
    assert main(["run", str(p), "-o", str(out), "--format", "jsonl"] + QUIET) == 0
    assert [r["text"] for r in _rows(str(out))] == lines
