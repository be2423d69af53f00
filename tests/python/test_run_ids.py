"""The ids `luminamoon run` writes on the columnar JSONL path: string ids are taken from the
lines by the C scanner (``LazyRecords.field_strings``) instead of ``json.loads`` of each kept
record; every other id (a number, null, missing, a lone surrogate, a key written twice or
escaped) goes through the decoded record.  The expected ids are computed here from
``json.loads`` of each line, independently of the run's code."""
import json
import random

import pyarrow.parquet as pq
import pytest
import torch  # noqa: F401  (loads torch's libraries before the extension)

from luminamoon.cli.config import default_config
from luminamoon.cli.runner import run_corpus
from luminamoon.data.sources import JsonlSource


def _lines(rng, n):
    out = []
    for i in range(n):
        t = f"document {i} " + "".join(rng.choice("ab \n\"\\é€😀\t") for _ in range(rng.randint(0, 60)))
        k = i % 13
        if k == 0:
            rec = {"id": i, "text": t}
        elif k == 1:
            rec = {"text": t}
        elif k == 2:
            rec = {"id": None, "text": t}
        elif k == 3:
            rec = {"id": f"caf\u00e9-{i}-\U0001F600", "text": t}
        elif k == 4:
            rec = {"id": 2.5 + i, "text": t, "source": "x"}
        elif k == 5:
            rec = {"id": {"b": [1, 2], "a": "z"}, "text": t}
        elif k == 6:
            rec = {"text": t, "id": f"esc\"\\/\n\t-{i}"}
        elif k == 7:
            rec = {"id": i % 2 == 0, "text": t}
        else:
            rec = {"source": "s", "id": f"doc-{i}", "text": t, "meta": {"n": [i, None]}}
        line = json.dumps(rec, ensure_ascii=rng.random() < 0.5)
        if k == 8:
            line = '{"id": "a\\ud800b-%d", "text": %s}' % (i, json.dumps(t))  # a lone surrogate in the id
        elif k == 9:
            line = '{"id": "first", "id": "dup-%d", "text": %s}' % (i, json.dumps(t))  # the key twice
        elif k == 10:
            line = '  {"i\\u0064": "escaped-key-%d", "text": %s}  ' % (i, json.dumps(t))
        elif k == 11:
            line = '{"id": "\\u00e9\\u20ac\\ud83d\\ude00-%d", "text": %s}\r' % (i, json.dumps(t))
        out.append(line)
    return out


def _expected_id(obj, name, lineno):
    v = obj.get("id")
    if v is None:
        return f"{name}:{lineno}"
    if isinstance(v, str):
        return v.encode("utf-8", "surrogatepass").decode("utf-8", "replace").replace("\ufffd" * 3, "\ufffd") \
            if any(0xD800 <= ord(c) <= 0xDFFF for c in v) else v
    return json.dumps(v, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


@pytest.mark.parametrize("threads", [1, 2])
def test_run_writes_the_ids_json_loads_gives(tmp_path, threads):
    rng = random.Random(7 + threads)
    lines = _lines(rng, 700)
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8")  # the last line without its newline
    cfg = default_config()
    cfg["quality"]["enabled"] = False
    cfg["dedup"]["enabled"] = False
    cfg["run"]["threads"] = threads
    cfg["run"]["batch_size"] = 64
    out = tmp_path / "out"
    stats = run_corpus([str(path)], str(out), cfg, quiet=True, report=False)
    assert stats["documents"]["kept"] == len(lines)
    got = []
    for p in sorted(out.glob("part-*.parquet")):
        got += pq.read_table(p).column("id").to_pylist()
    want = []
    for n, line in enumerate(lines, 1):
        want.append(_expected_id(json.loads(line), "in.jsonl", n))
    assert got == want


def test_field_strings_are_the_json_loads_strings(tmp_path):
    rng = random.Random(3)
    lines = _lines(rng, 400)
    path = tmp_path / "f.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    checked = fast = 0
    for blk in JsonlSource(str(path)).iter_blocks(37):
        recs = blk.records
        idx = list(range(len(recs)))[::-1]  # any order
        vals = recs.field_strings(idx, "id")
        for i, v in zip(idx, vals):
            obj = json.loads(lines[int(blk.lines[i]) - 1])
            if v is not None:
                fast += 1
                assert v == obj["id"] and isinstance(obj["id"], str)
            assert recs[i].get("id") == obj.get("id")  # the records themselves unchanged
            checked += 1
    assert checked == len(lines)
    # every plain string id came from the scanner (the kinds 3, 6, 11 and 12 of _lines); the
    # others (not a string, a lone surrogate, the key twice or escaped) from json.loads
    assert fast == sum(1 for i in range(len(lines)) if i % 13 in (3, 6, 11, 12))
