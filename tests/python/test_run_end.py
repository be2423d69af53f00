"""`luminamoon run`'s statistics counted at commits and its end (stats.json written beside the
last part, before the final commit).

* The dropped documents by reason and the stages' counters are added to the statistics at
  each commit (``_ReasonTally``, ``_MeasuredPipeline.counters``), not once a batch: the
  totals are checked against FusedPipeline run here batch by batch (its own counters, the
  reasons counted with ``collections.Counter``), and against runs that commit at other
  intervals.
* stats.json is written on a thread of its own while the last part is written, before the
  final commit: a run killed right after stats.json is durable, or after the last part's
  rename, resumes to the output of an uninterrupted run.
"""
import collections
import glob
import json
import os
import re
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch  # noqa: F401  (loads torch's libraries before the extension)

from luminamoon import StringTensor, stages
from luminamoon.cli import runner
from luminamoon.cli.config import default_config, stage_kwargs
from luminamoon.cli.demo_corpus import generate
from luminamoon.cli.report import reason_counts
from luminamoon.cli.runner import run_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    return generate(str(d), size_mb=0.4, seed=5, shard_mb=0.15)["paths"]


def _cfg(batch=64, part_docs=50000, threads=2):
    cfg = default_config()
    cfg["run"]["batch_size"] = batch
    cfg["run"]["threads"] = threads
    cfg["output"]["part_docs"] = part_docs
    return cfg


def _parts(out):
    return {os.path.basename(p): open(p, "rb").read() for p in sorted(glob.glob(os.path.join(out, "part-*")))}


def _rows(out):
    rows = []
    for p in sorted(glob.glob(os.path.join(out, "part-*"))):
        rows += pq.read_table(p).to_pylist()
    return rows


def _stats(out):
    with open(os.path.join(out, "stats.json")) as f:
        st = json.load(f)
    for k in ("throughput", "output", "inputs", "config", "threads"):
        st.pop(k, None)
    return st


# ------------------------------------------------------------------ tally
def test_reason_tally_equals_reason_counts():
    rng = np.random.default_rng(3)
    cases = [rng.choice([0, 1, 2, 3, 7], size=500).astype(np.int32) for _ in range(4)]
    cases.append(np.zeros(9, np.int32))
    cases.append(np.zeros(0, np.int32))
    cases.append(np.array([0, 70000, 5, -3, 70000], np.int32))  # outside 0..65535: the slow path
    cases.append(rng.choice([0, 9, 12], size=300).astype(np.int64))
    t = runner._ReasonTally()
    for c in cases:
        t.add(c)
    names: dict = {}
    got = t.flush(names)
    expect = reason_counts(np.concatenate([c.astype(np.int64) for c in cases]), {})
    assert got == expect
    assert list(got) == [names[c] for c in sorted(names)]  # ascending codes
    assert t.flush(names) == {}  # flushed: starts again from nothing
    t.add(np.array([2, 0, 2], np.int32))
    assert t.flush(names) == reason_counts(np.array([2, 0, 2]), {})


def _by_batch(paths, batch):
    """FusedPipeline over the corpus's texts in batches of ``batch`` (the run's default stages):
    the dropped documents by reason name (collections.Counter) and its counters at the end."""
    texts = []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            # a lone surrogate (how JSON carries undecodable bytes) is one U+FFFD, as the run reads it
            texts += [re.sub("[\ud800-\udfff]", "\ufffd", json.loads(line)["text"]) for line in f if line.strip()]
    pipe = stages.FusedPipeline(dedup=True, num_threads=1, **stage_kwargs(default_config()))
    dropped = collections.Counter()
    for i in range(0, len(texts), batch):
        r = pipe(StringTensor.from_list(texts[i:i + batch]))
        dropped.update(stages.reason_name(int(c)) for c in r.reasons.tolist() if c)
    return len(texts), dict(dropped), pipe.counters


def test_stats_counted_at_commits_equal_the_stages_batch_by_batch(corpus, tmp_path):
    n, dropped, c = _by_batch(corpus, 64)
    outs = {}
    for part_docs in (7, 50000):  # a commit every part of 7 kept documents / one commit at the end
        out = str(tmp_path / f"o{part_docs}")
        st = run_corpus(corpus, out, _cfg(64, part_docs), quiet=True, report=False)
        outs[part_docs] = out
        assert st["documents"]["input"] == n
        assert st["dropped_by_reason"] == dropped
        ints = lambda d: {k: v for k, v in d.items() if isinstance(v, int) and not isinstance(v, bool)}  # noqa: E731
        assert st["cleaner"] == ints(c["clean"])
        q = ints(c["quality"])
        q.update({f"lines_removed.{r}": v for r, v in c["quality"]["rules"].items() if r.startswith("c4.line_") and v})
        assert st["quality"] == q
        pii = c["pii"].get("matches", c["pii"].get("by_type"))
        assert st["pii_replacements"] == {k: int(v) for k, v in pii.items()}
        assert sum(st["pii_replacements"].values()) > 0 and len(dropped) >= 3  # the corpus exercises them
    assert len(_parts(outs[7])) > 3
    assert _stats(outs[7]) == _stats(outs[50000])
    assert _rows(outs[7]) == _rows(outs[50000])


# ------------------------------------------------------------------ the end
_CHILD = r"""
import os, sys
from luminamoon.cli import runner, writers
WHERE = os.environ["H1_DIE"]
if WHERE == "after_stats":  # stats.json durable (renamed, folder synced), the final commit not made
    real = runner._end_writes
    def end_writes(*a):
        real(*a)
        os._exit(137)
    runner._end_writes = end_writes
elif WHERE == "after_part":  # the last part renamed and synced, stats.json written, no final commit
    state = {}
    class Side(runner._Side):
        def __init__(self, *a):
            super().__init__(*a)
            state["side"] = self  # the end's writes started: the next finished part is the last
    runner._Side = Side
    real_fp = writers.ShardWriter.finish_part
    def finish_part(self):
        r = real_fp(self)
        if "side" in state:
            state["side"]._thread.join()
            os._exit(137)
        return r
    writers.ShardWriter.finish_part = finish_part
from luminamoon.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _child(paths, out, die, *extra):
    env = dict(os.environ, H1_DIE=die)
    return subprocess.run([sys.executable, "-c", _CHILD, "run", *paths, "-o", out, "-q", "--batch-size", "64",
                           "--part-docs", "40", "-j", "2", "--no-report", *extra], env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.parametrize("die", ["after_stats", "after_part"])
def test_killed_at_the_end_resumes_to_the_uninterrupted_output(corpus, tmp_path, die):
    ref = str(tmp_path / "ref")
    r = _child(corpus, ref, "none")
    assert r.returncode == 0, r.stderr[-2000:]
    out = str(tmp_path / "out")
    r = _child(corpus, out, die)
    assert r.returncode == 137, r.stderr[-2000:]
    with open(os.path.join(out, ".luminamoon", "run.json")) as f:
        ident = json.load(f)
    assert "completed" not in ident  # died before the final commit
    assert "stats.json" in ident["manifest"] and os.path.exists(os.path.join(out, "stats.json"))
    if die == "after_part":
        assert _parts(out) == _parts(ref)  # every part written, the last one not committed
    r = _child(corpus, out, "none", "--resume")
    assert r.returncode == 0, r.stderr[-2000:]
    assert _parts(out) == _parts(ref)
    assert _stats(out) == _stats(ref)
    assert not [f for f in os.listdir(out) if f.startswith(".tmp")]
    with open(os.path.join(out, ".luminamoon", "run.json")) as f:
        assert "completed" in json.load(f)


def test_a_failing_stats_write_fails_the_run_before_its_final_commit(corpus, tmp_path, monkeypatch):
    def boom(*a):
        raise OSError(28, "No space left on device (test)")

    monkeypatch.setattr(runner, "_end_writes", boom)
    out = str(tmp_path / "o")
    with pytest.raises(OSError, match="No space left"):
        run_corpus(corpus, out, _cfg(64), quiet=True, report=False)
    # nothing was committed: the run forgot itself (its part and state removed)
    assert not os.path.exists(out) or not os.listdir(out)
