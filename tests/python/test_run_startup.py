"""What a `luminamoon run` pays before and beside its batches, in a process of its own.

* pyarrow's ``pa.array`` imports pandas on its first call in a process (0.2-0.4 s); the run's writer
  and the Parquet reader build their arrays without it (``luminamoon.arrow.string_array`` /
  ``int64_array``), equal to what ``pa.array`` gives;
* ``indexed_gzip`` is looked up, not imported, when a JsonlSource starts (~90 ms); the first reader
  that seeks into a gzip file imports it and builds its index as before;
* the console script (``luminamoon.cli.entry``, ``python -m luminamoon``) freezes the import-time
  objects out of the garbage collector (its first full collection walked them: 80-120 ms); ``main``
  called from Python leaves the caller's collector alone.
"""
from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from luminamoon.arrow import int64_array, int_values, null_mask, string_array
from luminamoon.data.sources import JsonlSource

_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONSTARTUP"}


def _py(code: str, cwd: str) -> str:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=cwd, env=_ENV)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def _random_strings(rng: random.Random, n: int) -> list:
    alphabet = "abc xyz\u00e9\u00df\u4e2d\u6587\U0001F600\n\t\"\\"
    return ["".join(rng.choice(alphabet) for _ in range(rng.choice([0, 1, 3, 12, 13, 40, 300])))
            for _ in range(n)]


@pytest.mark.parametrize("n", [0, 1, 7, 2048])
def test_string_array_equals_pa_array(n):
    vals = _random_strings(random.Random(n), n)
    got = string_array(vals)
    want = pa.array(vals, type=pa.string())
    assert got.type == pa.string()
    got.validate(full=True)
    assert got.equals(want)
    assert got.to_pylist() == vals


@pytest.mark.parametrize("vals", [[None, "a"], ["a", None], [b"x", "y"]])
def test_string_array_falls_back_to_pa_array(vals):
    got = string_array(vals)
    assert got.equals(pa.array(vals, type=pa.string()))


@pytest.mark.parametrize("vals", [["a\ud800"], ["a", 3]])
def test_string_array_raises_what_pa_array_raises(vals):
    with pytest.raises(Exception) as want:
        pa.array(vals, type=pa.string())
    with pytest.raises(want.type):
        string_array(vals)


def test_string_array_outlives_its_source_list():
    vals = _random_strings(random.Random(5), 500)
    arr = string_array(list(vals))
    import gc

    gc.collect()
    assert arr.to_pylist() == vals


@pytest.mark.parametrize("vals", [[], [0], [3, -1, 2**40], np.arange(1000, dtype=np.int64)[::3],
                                  np.array([1, 2, 3], dtype=np.int32)])
def test_int64_array_equals_pa_array(vals):
    got = int64_array(vals)
    assert got.type == pa.int64()
    assert got.equals(pa.array(np.asarray(vals, dtype=np.int64), type=pa.int64()))


@pytest.mark.parametrize("vals", [np.array([2**63], dtype=np.uint64), [2**63], ["a"], [True, False],
                                  [1.5, 2.0], [1, None], np.array([1.0, 2.0])])
def test_int64_array_gives_what_pa_array_gives_or_raises_it(vals):
    # the fast path took np.ascontiguousarray(dtype=int64), which wrapped uint64 past 2**63 to
    # negative numbers and cast floats without pyarrow's checks
    try:
        want = pa.array(vals, type=pa.int64())
    except Exception as e:  # noqa: BLE001 - the same exception type is the contract
        with pytest.raises(type(e)):
            int64_array(vals)
        return
    got = int64_array(vals)
    assert got.type == pa.int64() and got.equals(want)


@pytest.mark.parametrize("typ", [pa.int32(), pa.int64()])
@pytest.mark.parametrize("seed", range(6))
def test_null_mask_and_int_values_equal_pyarrow_s(typ, seed):
    """Chunked, sliced at odd offsets (the validity bitmap read from a bit inside a byte), with and
    without nulls, empty chunks."""
    rng = np.random.default_rng(seed)
    chunks = []
    for _ in range(rng.integers(0, 5)):
        m = int(rng.integers(0, 70))
        vals = rng.integers(-2**31, 2**31 - 1, size=m)
        nulls = rng.random(m) < (0.3 if seed % 2 else 0.0)
        arr = pa.array(vals, type=typ, mask=nulls)
        a = int(rng.integers(0, m + 1))
        chunks.append(arr.slice(a, int(rng.integers(0, m - a + 1))))
    col = pa.chunked_array(chunks, type=typ)
    want_null = np.array(col.is_null().to_pylist(), dtype=bool)
    want_vals = np.array([0 if v is None else v for v in col.to_pylist()], dtype=np.int64)
    assert np.array_equal(null_mask(col), want_null)
    assert np.array_equal(int_values(col), want_vals)
    for c in chunks:  # a plain Array too
        assert np.array_equal(null_mask(c), np.array(c.is_null().to_pylist(), dtype=bool))


def _inputs(tmp_path) -> "tuple[str, str]":
    from luminamoon.cli.demo_corpus import iter_documents

    def utf8(t: str) -> bool:  # the demo corpus holds a few texts with lone surrogates on purpose
        try:
            t.encode("utf-8")
            return True
        except UnicodeEncodeError:
            return False

    texts = [r["text"] for r in iter_documents(400_000, seed=11) if utf8(r["text"])]
    recs = [{"id": f"d{i}", "text": t} for i, t in enumerate(texts)]
    assert len(recs) > 100
    gz = str(tmp_path / "in.jsonl.gz")
    with gzip.open(gz, "wt", encoding="utf-8") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
    pqf = str(tmp_path / "in.parquet")
    pq.write_table(pa.table({"id": [r["id"] for r in recs], "text": [r["text"] for r in recs]}), pqf,
                   row_group_size=128)
    return gz, pqf, len(recs)


def test_a_run_imports_neither_pandas_nor_indexed_gzip(tmp_path):
    gz, pqf, n = _inputs(tmp_path)
    out = _py(
        "import sys, json\n"
        "from luminamoon.cli import main\n"
        f"assert main(['run', {gz!r}, '-o', {str(tmp_path / 'o1')!r}, '-q', '--no-report', '--batch-size', '64']) == 0\n"
        f"assert main(['run', {pqf!r}, '-o', {str(tmp_path / 'o2')!r}, '-q', '--no-report', '--batch-size', '64']) == 0\n"
        "print(json.dumps({m: m in sys.modules for m in ('pandas', 'indexed_gzip')}))\n",
        str(tmp_path))
    assert json.loads(out.strip().splitlines()[-1]) == {"pandas": False, "indexed_gzip": False}
    # both runs wrote every kept document (the arrays built without pa.array hold the same rows)
    for o, src in (("o1", gz), ("o2", pqf)):
        stats = json.load(open(tmp_path / o / "stats.json"))
        assert stats["documents"]["input"] == n
        rows = sum(pq.read_table(tmp_path / o / p).num_rows for p in stats["output"]["parts"])
        assert rows == stats["output"]["rows"] == stats["documents"]["kept"] > 0
        ids = pq.read_table(tmp_path / o / stats["output"]["parts"][0]).column("id").to_pylist()
        assert all(isinstance(i, str) and i.startswith("d") for i in ids)


def test_a_resumed_gzip_read_still_builds_and_uses_the_index(tmp_path):
    gz, _, n = _inputs(tmp_path)
    idx = tmp_path / "idx"
    src = JsonlSource(gz, index_dir=str(idx))
    assert src.gzip_index  # indexed_gzip is installed (a test dependency): "auto" finds it
    it = iter(src)
    first = [next(it) for _ in range(n // 2)]
    pos = src.position()
    rest = list(JsonlSource(gz, position=pos, index_dir=str(idx)))
    assert [r["id"] for r in first + rest] == [f"d{i}" for i in range(n)]
    assert any(f.endswith(".gzidx") for f in os.listdir(idx))  # the seek went through indexed_gzip


def test_the_console_entry_freezes_the_imports_and_main_does_not(tmp_path):
    out = _py(
        "import gc, sys, io, contextlib\n"
        "import luminamoon.cli as c\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    sys.argv = ['luminamoon', 'config']\n"
        "    assert c.main(['config']) == 0\n"
        "a = gc.get_freeze_count()\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert c.entry() == 0\n"
        "print(a, gc.get_freeze_count())\n",
        str(tmp_path))
    before, after = map(int, out.split())
    assert before == 0
    assert after > 10000  # torch's import alone leaves far more objects than that
