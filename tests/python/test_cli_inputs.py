"""The luminamoon command on inputs as they come (issue 20 items 1-5 and its
"clear messages" on folders, globs, odd names and standard input; issue 19
item 3's command-line half): what a run reads, which ids it gives, what
--overwrite / --resume may delete, and when a resume is refused."""
import gzip
import hashlib
import json
import os
import subprocess
import sys

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from luminamoon.cli import main  # noqa: E402

QUIET = ["-q", "--no-report", "--no-quality", "--no-dedup", "--no-pii", "--no-clean"]


def _docs(prefix, n, start=0):
    return [{"text": f"{prefix} document {i}: a plain sentence about item {i * 7}."} for i in range(start, start + n)]


def _jsonl(path, recs, gz=False):
    path = str(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = "".join(json.dumps(r) + "\n" for r in recs).encode()
    with (gzip.open(path, "wb") if gz else open(path, "wb")) as f:
        f.write(data)


def _run(capsys, *args):
    rc = main(["run", *map(str, args)])
    cap = capsys.readouterr()
    return rc, cap.err


def _rows(out):
    """Every output row (id, text, kept fields) of the part files in ``out``."""
    rows = []
    for f in sorted(os.listdir(out)):
        p = os.path.join(out, f)
        if not f.startswith("part-"):
            continue
        if f.endswith(".parquet"):
            rows += pq.read_table(p).to_pylist()
        else:
            with open(p, "rb") as fh:
                rows += [json.loads(line) for line in fh if line.strip()]
    return rows


def _stats(out):
    with open(os.path.join(out, "stats.json")) as f:
        return json.load(f)


def _snapshot(folder):
    """{relative path: sha256} of every file under ``folder`` outside the run's state."""
    out = {}
    for dirpath, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d != ".luminamoon"]
        for f in files:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, folder)] = hashlib.sha256(fh.read()).hexdigest()
    return out


# --------------------------------------------------------- item 1: --overwrite
def test_output_folder_holding_the_inputs_is_refused_and_overwrite_deletes_nothing(tmp_path, capsys):
    shards = tmp_path / "shards"
    for k in range(3):
        _jsonl(shards / f"part-0000{k}.jsonl.gz", _docs(f"s{k}", 5), gz=True)
    before = _snapshot(shards)
    glob_ = str(shards / "part-*.jsonl.gz")
    for extra in ([], ["--overwrite"], ["--resume"]):
        rc, err = _run(capsys, glob_, "-o", shards, *QUIET, *extra)
        assert rc == 2, err
        assert "holds input file" in err and "--overwrite" not in err, err
        assert _snapshot(shards) == before
        assert not os.path.exists(shards / ".luminamoon")


def test_resume_and_overwrite_together_are_refused(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    _jsonl(src, _docs("a", 10))
    out = tmp_path / "o"
    assert _run(capsys, src, "-o", out, *QUIET)[0] == 0
    before = _snapshot(out)
    rc, err = _run(capsys, src, "-o", out, *QUIET, "--resume", "--overwrite")
    assert rc == 2 and "--resume" in err and "--overwrite" in err and "together" in err, err
    assert _snapshot(out) == before


def _setup_inputs(tmp_path, out):
    """The inputs live in ``out``."""
    _jsonl(out / "data.jsonl", _docs("in", 12))
    return [str(out / "data.jsonl")]


def _setup_foreign(tmp_path, out):
    """``out`` holds files of someone else, one named like a part file."""
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    (out / "part-00000.parquet").write_bytes(b"not ours")
    (out / "stats.json").write_text("{}")
    _jsonl(tmp_path / "in.jsonl", _docs("in", 12))
    return [str(tmp_path / "in.jsonl")]


def _setup_other_run(tmp_path, out, capsys=None):
    """``out`` holds another run's output, and a foreign file added afterwards."""
    _jsonl(tmp_path / "other.jsonl", _docs("other", 7))
    assert main(["run", str(tmp_path / "other.jsonl"), "-o", str(out), *QUIET, "--part-docs", "3"]) == 0
    (out / "notes.txt").write_text("mine\n")
    (out / "keep").mkdir()
    (out / "keep" / "part-00009.jsonl").write_text("{}\n")
    _jsonl(tmp_path / "in.jsonl", _docs("in", 12))
    return [str(tmp_path / "in.jsonl")]


@pytest.mark.parametrize("setup", [_setup_inputs, _setup_foreign, _setup_other_run])
@pytest.mark.parametrize("flags", [[], ["--overwrite"], ["--resume"], ["--overwrite", "--resume"]])
def test_no_command_deletes_or_overwrites_a_file_it_did_not_create(tmp_path, capsys, setup, flags):
    """Acceptance 2: --overwrite / --resume over output folders that hold inputs, foreign
    files and other runs never delete or change a file the run did not write."""
    out = tmp_path / "o"
    inputs = setup(tmp_path, out)
    other_run = {f for f in os.listdir(out) if f.startswith("part-")} if setup is _setup_other_run else set()
    before = {k: v for k, v in _snapshot(out).items() if k not in other_run and k != "stats.json"
              or setup is not _setup_other_run}
    rc, err = _run(capsys, *inputs, "-o", out, *QUIET, "--part-docs", "5", *flags)
    after = _snapshot(out)
    for name, digest in before.items():
        assert after.get(name) == digest, f"{name} deleted or changed (rc {rc}): {err}"
    if rc == 0:
        assert sorted(r["text"] for r in _rows(out)) == sorted(d["text"] for d in _docs("in", 12))
    else:
        assert rc == 2 and err, err


def test_overwrite_replaces_only_the_files_of_the_earlier_run(tmp_path, capsys):
    out = tmp_path / "o"
    inputs = _setup_other_run(tmp_path, out)
    rc, err = _run(capsys, *inputs, "-o", out, *QUIET, "--part-docs", "100", "--overwrite")
    assert rc == 0, err
    names = sorted(os.listdir(out))
    # the earlier run's three parts are gone (this run writes one); the foreign files stay
    assert names == [".luminamoon", "keep", "notes.txt", "part-00000.parquet",
                     "stats.json"], names
    assert len(_rows(out)) == 12


def test_a_part_file_dropped_into_a_run_folder_is_not_deleted_by_resume(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    _jsonl(src, _docs("a", 40))
    out = tmp_path / "o"
    rc, err = _run(capsys, src, "-o", out, *QUIET, "--batch-size", "5", "--part-docs", "5", "--stop-after-batches", "2")
    assert rc == 130, err
    (out / "part-00007.parquet").write_bytes(b"someone else's")
    rc, err = _run(capsys, src, "-o", out, *QUIET, "--batch-size", "5", "--part-docs", "5", "--resume")
    assert rc == 2 and "part-00007.parquet" in err and "not written by" in err, err
    assert (out / "part-00007.parquet").read_bytes() == b"someone else's"


# ------------------------------------------------- item 2: --keep-fields text
@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_keep_fields_with_the_text_field_keeps_the_cleaned_text(tmp_path, capsys, fmt):
    src = tmp_path / "in.jsonl"
    _jsonl(src, [dict(d, url=f"u{i}") for i, d in enumerate(_docs("k", 6))])
    out = tmp_path / "o"
    rc, err = _run(capsys, src, "-o", out, *QUIET, "--format", fmt, "--keep-fields", "text,url")
    assert rc == 0, err
    rows = _rows(out)
    assert [r["text"] for r in rows] == [d["text"] for d in _docs("k", 6)]
    assert [r["url"] for r in rows] == [f"u{i}" for i in range(6)]


def test_group_by_the_text_field_is_refused(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    _jsonl(src, _docs("g", 6))
    rc, err = _run(capsys, src, "-o", tmp_path / "o", *QUIET, "--group-by", "text")
    assert rc == 2 and "--group-by" in err and "text field" in err, err
    assert not os.path.exists(tmp_path / "o" / ".luminamoon")


# ---------------------------------------------------- item 3: --text-per-file
def test_text_per_file_ids_name_their_own_file(tmp_path, capsys):
    d = tmp_path / "txt"
    d.mkdir()
    for name in ("alpha", "beta", "gamma"):
        (d / f"{name}.txt").write_text(f"The text of {name}.\nSecond line of {name}.\n")
    out = tmp_path / "o"
    rc, err = _run(capsys, d, "-o", out, *QUIET, "--text-per-file")
    assert rc == 0, err
    rows = _rows(out)
    assert {r["id"]: r["text"].split("\n")[0] for r in rows} == {
        "alpha.txt:0": "The text of alpha.", "beta.txt:0": "The text of beta.", "gamma.txt:0": "The text of gamma."}


# ------------------------------------------------------ item 4: unique ids
def test_ids_are_unique_across_folders_with_equal_file_names(tmp_path, capsys):
    """Acceptance 3: ids are the path relative to the inputs' root + ':' + row."""
    data = tmp_path / "data"
    _jsonl(data / "en" / "train.jsonl", _docs("en", 3))
    _jsonl(data / "de" / "train.jsonl", _docs("de", 3))
    want = {f"{lang}/train.jsonl:{i}" for lang in ("de", "en") for i in (1, 2, 3)}
    for k, inputs in enumerate([[data], [data / "en", data / "de"], [str(data / "*" / "train.jsonl")],
                                [data / "en" / "train.jsonl", data / "de" / "train.jsonl"]]):
        out = tmp_path / f"o{k}"
        rc, err = _run(capsys, *inputs, "-o", out, *QUIET)
        assert rc == 0, err
        ids = [r["id"] for r in _rows(out)]
        assert len(ids) == 6 and set(ids) == want, (inputs, ids)


def test_hive_partitioned_parquet_folder(tmp_path, capsys):
    ds = tmp_path / "ds"
    for year in (2020, 2021):
        (ds / f"year={year}").mkdir(parents=True)
        pq.write_table(pa.table({"text": [d["text"] for d in _docs(str(year), 4)]}),
                       ds / f"year={year}" / "part-0.parquet")
    (ds / "_SUCCESS").write_bytes(b"")
    out = tmp_path / "o"
    rc, err = _run(capsys, ds, "-o", out, *QUIET)
    assert rc == 0, err
    ids = sorted(r["id"] for r in _rows(out))
    assert ids == sorted(f"year={y}/part-0.parquet:{i}" for y in (2020, 2021) for i in range(4))


# ----------------------------------------- item 5: folders read recursively
def test_folder_is_read_recursively_and_skipped_files_are_reported(tmp_path, capsys):
    nest = tmp_path / "nest"
    _jsonl(nest / "top.jsonl", _docs("top", 3))
    _jsonl(nest / "2024" / "rest.jsonl", _docs("rest", 4))
    (nest / "_SUCCESS").write_bytes(b"")
    (nest / ".DS_Store").write_bytes(b"\0\0\1")
    (nest / "README").write_text("about this data\n")
    os.symlink(nest / "gone.jsonl", nest / "link.jsonl")
    out = tmp_path / "o"
    rc, err = _run(capsys, nest, "-o", out, *QUIET)
    assert rc == 0, err
    assert len(_rows(out)) == 7
    assert "README" in err and "_SUCCESS" in err and ".DS_Store" in err and "link.jsonl" in err, err
    skipped = _stats(out)["input_files"]["skipped"]
    assert skipped["not_data"] == 3 and skipped["dangling_symlinks"] == 1, skipped
    assert _stats(out)["input_files"]["read"] == 2


def test_a_failed_start_leaves_nothing_behind(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    _jsonl(src, _docs("a", 5))
    with open(src, "ab") as f:
        f.write(b"{broken\n")
    out = tmp_path / "o"
    rc, err = _run(capsys, src, "-o", out, *QUIET)
    assert rc == 2 and "malformed JSON" in err, err
    assert not os.path.exists(out), os.listdir(out)
    rc, err = _run(capsys, src, "-o", out, *QUIET, "--skip-bad-records")  # no --overwrite needed
    assert rc == 0, err
    # a folder that existed stays, empty
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "t.parquet")
    (tmp_path / "o2").mkdir()
    rc, err = _run(capsys, tmp_path / "t.parquet", "-o", tmp_path / "o2", *QUIET)
    assert rc == 2 and "no column 'text'" in err, err
    assert os.listdir(tmp_path / "o2") == []


# ------------------------------------------------ odd names, standard input
def test_file_names_with_brackets_are_read_literally(tmp_path, capsys):
    src = tmp_path / "data[1].jsonl"
    _jsonl(src, _docs("b", 4))
    out = tmp_path / "o"
    rc, err = _run(capsys, src, "-o", out, *QUIET)
    assert rc == 0, err
    assert sorted(r["id"] for r in _rows(out)) == [f"data[1].jsonl:{i}" for i in (1, 2, 3, 4)]


@pytest.mark.parametrize("name", ["-", "/dev/stdin"])
def test_standard_input(tmp_path, name):
    out = tmp_path / "o"
    data = "".join(json.dumps(d) + "\n" for d in _docs("stdin", 9)).encode()
    cmd = [sys.executable, "-m", "luminamoon", "run", name, "-o", str(out), *QUIET]
    r = subprocess.run(cmd, input=gzip.compress(data) if name == "-" else data, capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    rows = _rows(out)
    assert [x["text"] for x in rows] == [d["text"] for d in _docs("stdin", 9)]
    assert [x["id"] for x in rows] == [f"stdin:{i}" for i in range(1, 10)]
    # a resume reads the copy kept in the state, not standard input again
    r = subprocess.run(cmd + ["--resume"], input=b"", capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    assert len(_rows(out)) == 9


def test_output_folder_inside_the_input_glob(tmp_path, capsys):
    d = tmp_path / "d"
    _jsonl(d / "a.jsonl", _docs("a", 5))
    _jsonl(d / "sub" / "b.jsonl", _docs("b", 5))
    out = d / "out"
    args = [str(d / "**" / "*.jsonl"), "-o", out, *QUIET, "--format", "jsonl"]
    assert _run(capsys, *args)[0] == 0
    assert len(_rows(out)) == 10
    for extra in (["--resume"], ["--overwrite"]):
        rc, err = _run(capsys, *args, *extra)
        assert rc == 0, err
        assert "own output" in err, err
        assert _stats(out)["documents"]["input"] == 10
        assert len(_rows(out)) == 10


# ------------------------------------ issue 19 item 3: resume by content
def test_resume_refuses_an_input_changed_in_place_with_the_same_size(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    recs = [{"text": f"Line {i:03d} of the input, all of one length."} for i in range(60)]
    _jsonl(src, recs)
    out = tmp_path / "o"
    args = [src, "-o", out, *QUIET, "--batch-size", "10", "--part-docs", "10"]
    rc, err = _run(capsys, *args, "--stop-after-batches", "2")
    assert rc == 130, err
    size = os.path.getsize(src)
    _jsonl(src, recs[30:] + recs[:30])  # shuffled: same size, equal-length lines (the old check resumed silently)
    assert os.path.getsize(src) == size
    rc, err = _run(capsys, *args, "--resume")
    assert rc == 2 and "in.jsonl" in err and "changed" in err, err
    # restored bytes, but touched: refused too (the modification time is part of the identity)
    _jsonl(src, recs)
    rc, err = _run(capsys, *args, "--resume")
    assert rc == 2 and "modification time" in err, err


def test_resume_refuses_settings_that_change_the_output(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    _jsonl(src, _docs("x", 60))
    out = tmp_path / "o"
    args = [src, "-o", out, "-q", "--no-report", "--no-quality", "--part-docs", "10"]
    rc, err = _run(capsys, *args, "--batch-size", "10", "--stop-after-batches", "2")
    assert rc == 130, err
    assert os.path.exists(out / "part-00001.parquet")
    for change, key in ((["--batch-size", "20"], "run.batch_size"), (["--no-dedup"], "dedup.enabled"),
                        (["--no-pii"], "pii.enabled"), (["--format", "jsonl"], "output.format")):
        rc, err = _run(capsys, *args, "--batch-size", "10", *change, "--resume")
        assert rc == 2 and key in err, (change, err)
    rc, err = _run(capsys, *args, "--batch-size", "10", "-j", "2", "--skip-bad-records", "--resume")
    assert rc == 0, err
    assert _stats(out)["documents"]["input"] == 60


def test_standard_input_into_the_folder_of_another_run_leaves_that_run_alone(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    _jsonl(src, _docs("a", 8))
    out = tmp_path / "o"
    assert _run(capsys, src, "-o", out, *QUIET)[0] == 0
    before = _snapshot(out), sorted(os.listdir(out / ".luminamoon"))
    data = "".join(json.dumps(d) + "\n" for d in _docs("stdin", 3)).encode()
    r = subprocess.run([sys.executable, "-m", "luminamoon", "run", "-", "-o", str(out), *QUIET], input=data,
                       capture_output=True, timeout=120)
    assert r.returncode == 2 and b"another run" in r.stderr, r.stderr
    assert (_snapshot(out), sorted(os.listdir(out / ".luminamoon"))) == before
    assert _run(capsys, src, "-o", out, *QUIET, "--resume")[0] == 0
