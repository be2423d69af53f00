"""Review of the string ids `luminamoon run` takes from the lines with the C scanner
(209040e, LazyRecords.field_strings), beyond test_run_ids.py: an "id" key inside nested
objects / arrays / string values (the top-level one must be taken, or none), ids longer than
the scanner's 32-byte AVX2 loads with an escape or a non-ASCII character straddling them,
\\u0000 inside an id, a differently-cased key, no spaces around the colon.  Each id the scanner
gives must be json.loads's top-level string id of that line, byte for byte; at the portable
level too (LM_NO_AVX2=1, a child process)."""
import json
import os
import random
import subprocess
import sys

import torch  # noqa: F401  (loads torch's libraries before the extension)

from luminamoon.data.sources import JsonlSource


def _lines():
    rng = random.Random(1)
    lines = []
    for i in range(600):
        k = i % 8
        long = "L" * rng.randint(25, 80)
        esc = "p" * rng.randint(28, 36) + rng.choice(["\\n", "\\u00e9", "\\\"", "é", "\\ud83d\\ude00", "\\\\"]) \
            + "q" * rng.randint(0, 40)
        if k == 0:
            line = '{"meta": {"id": "nested-%d"}, "text": "t%d"}' % (i, i)
        elif k == 1:
            line = '{"meta": {"id": "nested-%d"}, "id": "%s-%d", "text": "t"}' % (i, long, i)
        elif k == 2:
            line = '{"text": "\\"id\\": \\"fake\\"", "id": "%s"}' % esc
        elif k == 3:
            line = '{"a": [{"id": "x"}, "id"], "id": "%s", "text": "y"}' % esc
        elif k == 4:
            line = '{"id": "%s", "text": "x", "meta": {"id": "inner"}}' % esc
        elif k == 5:
            line = '{"id":"%s"  ,"text":"x"}' % long
        elif k == 6:
            line = '{"id": "%s\\u0000z", "text": "x"}' % long
        else:
            line = '{"ID": "upper", "text": "x"}'
        json.loads(line)
        lines.append(line)
    return lines


def check(path):
    lines = _lines()
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    checked = fast = 0
    for blk in JsonlSource(path).iter_blocks(37):
        recs = blk.records
        idx = list(range(len(recs)))[::-1]
        for i, v in zip(idx, recs.field_strings(idx, "id")):
            obj = json.loads(lines[int(blk.lines[i]) - 1])
            if v is not None:
                fast += 1
                assert isinstance(obj.get("id"), str) and v == obj["id"], lines[int(blk.lines[i]) - 1]
            checked += 1
    assert checked == len(lines)
    return fast


def test_scanner_ids_are_the_top_level_json_loads_ids(tmp_path):
    assert check(str(tmp_path / "ids.jsonl")) >= 300


def test_scanner_ids_at_the_portable_level(tmp_path):
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import test_review_run_ids as T; "
            "print('FAST', T.check(sys.argv[2]))")
    env = dict(os.environ, LM_NO_AVX2="1")
    p = subprocess.run([sys.executable, "-c", code, os.path.dirname(__file__), str(tmp_path / "ids.jsonl")],
                       env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert int(p.stdout.split("FAST ")[1]) >= 300
