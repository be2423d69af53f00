"""Review s34 (scale-out): luminamoon.ray's process() / run_corpus_ray and DistributedPipeline,
broken as a user would.  Each test fails without its fix:

* process() over an empty Dataset (or one whose filter emptied blocks) raised KeyError
  '__lm_reason' from inside a Ray task; a Dataset without schema raised AttributeError;
* process() bad arguments (num_partitions, dedup['seed'], dedup's keys, keep_dropped, a bad stage
  setting, a non-string text column) failed inside Ray tasks with messages naming no argument,
  or were silently accepted (1.7 -> seed 1, {'sed': 3} -> seed 0, keep_dropped='no' -> True);
* ``run_corpus_ray`` was named in ``luminamoon.ray.__all__`` but missing (``import *`` failed);
* DistributedPipeline: ``near_dedup_config`` without ``near_dedup`` was ignored; a state_dir
  that is not a path raised a TypeError naming nothing; a bytes state_dir failed after making the
  folder; a state_dir that one rank cannot use stopped the other ranks only through gloo's
  "Connection closed by peer" (or the group timeout), naming nothing.
"""
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
import ray
import ray.data

import luminamoon.ray as lr
from luminamoon.data import DistributedPipeline, write_jsonl
from luminamoon.stages import FusedPipeline

WORDS = ("the data pipeline reads many documents and cleans them before training a model on the text because "
         "quality matters for every language model we build with care").split()


def _doc(i: int) -> str:
    import random

    r = random.Random(i)
    return " ".join(" ".join(r.choices(WORDS, k=12)).capitalize() + "." for _ in range(6)) + f" Doc {i}."


@pytest.fixture(scope="module")
def ray_session():
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="warning")
    yield ray
    if started:
        ray.shutdown()


STAGES = {"cleaner": True, "quality": False, "pii": False}


def test_process_empty_and_emptied_blocks(ray_session):
    ds = ray.data.from_items([{"text": _doc(i), "i": i} for i in range(40)], override_num_blocks=8)
    empty = ds.filter(lambda r: False)
    assert lr.process(empty, stages=STAGES).take_all() == []          # was KeyError '__lm_reason'
    assert lr.process(empty, stages=STAGES, keep_dropped=True, near_dedup={}).take_all() == []
    assert lr.process(ray.data.from_items([])).take_all() == []       # was AttributeError (no schema)
    # blocks 2..5 emptied by a filter, a duplicate of an earlier row after them
    texts = [_doc(i) for i in range(40)]
    texts[35] = texts[3]
    ds = ray.data.from_items([{"text": t, "i": i} for i, t in enumerate(texts)], override_num_blocks=8)
    part = ds.filter(lambda r: r["i"] < 10 or r["i"] >= 30)
    got = [r["i"] for r in lr.process(part, stages=STAGES, num_partitions=2).take_all()]
    idx = [i for i in range(40) if i < 10 or i >= 30]
    with FusedPipeline(cleaner=True, quality=False, pii=False) as p:
        want = [idx[j] for j in p([texts[i] for i in idx]).source_index.tolist()]
    assert got == want and 35 not in got


@pytest.mark.parametrize("kw, exc, name", [
    ({"num_partitions": -1}, ValueError, "num_partitions"),
    ({"num_partitions": "2"}, TypeError, "num_partitions"),
    ({"num_partitions": 2.5}, TypeError, "num_partitions"),
    ({"dedup": {"seed": "x"}}, TypeError, r"dedup\['seed'\]"),
    ({"dedup": {"seed": 1.7}}, TypeError, r"dedup\['seed'\]"),
    ({"dedup": {"seed": 2 ** 64}}, ValueError, r"dedup\['seed'\]"),
    ({"dedup": {"sed": 3}}, ValueError, "dedup"),
    ({"keep_dropped": "no"}, TypeError, "keep_dropped"),
    ({"stages": {"cleaner": True, "pii": 3}}, TypeError, "stages: pii"),
])
def test_process_bad_arguments_are_named(ray_session, kw, exc, name):
    ds = ray.data.from_items([{"text": _doc(i)} for i in range(4)])
    with pytest.raises(exc, match=name):
        lr.process(ds, **kw).take_all()


def test_process_non_string_text_column_is_named(ray_session):
    with pytest.raises(TypeError, match="column 'text' must hold strings"):
        lr.process(ray.data.from_items([{"text": 1}, {"text": 2}])).take_all()


def test_run_corpus_ray_exists_and_equals_a_local_run(ray_session, tmp_path):
    ns: dict = {}
    exec("from luminamoon.ray import *", ns)  # __all__ named a function that did not exist
    assert ns["run_corpus_ray"] is lr.run_corpus_ray
    from luminamoon.cli.config import default_config
    from luminamoon.cli.runner import run_corpus

    src = tmp_path / "in"
    src.mkdir()
    docs = [_doc(i) for i in range(120)]
    write_jsonl(str(src / "a.jsonl"), ({"id": f"a{i}", "text": docs[i]} for i in range(80)))
    (src / "b.jsonl").write_text("")                                        # an empty file among others
    for k in range(4):                                                      # tiny files, copies of a.jsonl's
        write_jsonl(str(src / f"c{k}.jsonl"), ({"id": f"c{k}-{j}", "text": docs[(k * 17 + j * 29) % 120]}
                                               for j in range(k)))
    write_jsonl(str(src / "d.jsonl"), ({"id": f"d{i}", "text": docs[i]} for i in range(60, 120)))
    cfg = default_config()
    cfg["run"]["batch_size"] = 16
    cfg["output"]["part_docs"] = 40
    a = run_corpus([str(src)], str(tmp_path / "local"), cfg, quiet=True, report=False)
    b = lr.run_corpus_ray([str(src)], str(tmp_path / "ray"), cfg, quiet=True, report=False)
    parts = sorted(f for f in os.listdir(tmp_path / "local") if f.startswith("part-"))
    assert parts == sorted(f for f in os.listdir(tmp_path / "ray") if f.startswith("part-"))
    for p in parts:
        assert (tmp_path / "local" / p).read_bytes() == (tmp_path / "ray" / p).read_bytes()
    assert a["documents"] == b["documents"] and a["dropped_by_reason"] == b["dropped_by_reason"]
    assert b["dropped_by_reason"].get("duplicate", 0) >= 20


# ------------------------------------------------------------------ DistributedPipeline
def test_near_dedup_config_without_near_dedup_is_refused(tmp_path):
    with pytest.raises(ValueError, match="near_dedup_config"):
        DistributedPipeline(["a b c"], near_dedup_config={"num_buckets": 4}, state_dir=str(tmp_path / "s"))
    with DistributedPipeline(["a b c"], near_dedup_config={}, state_dir=str(tmp_path / "s2")):
        pass  # an empty dict sets nothing: accepted


def test_state_dir_types(tmp_path):
    with pytest.raises(TypeError, match="state_dir"):
        DistributedPipeline(["a b c"], state_dir=123)
    f = tmp_path / "a-file"
    f.write_text("x")
    with pytest.raises(OSError, match="state_dir"):
        DistributedPipeline(["a b c"], state_dir=str(f))
    sd = os.fsencode(str(tmp_path / "bytes-dir"))   # was OSError "Can't mix strings and bytes"
    docs = [_doc(i) for i in range(20)] * 2
    with DistributedPipeline(docs, state_dir=sd, batch_size=8, stages={"quality": False}) as p:
        kept = sum(len(b.texts) for b in p)
        p.commit()
    assert kept == 20
    with DistributedPipeline(docs, state_dir=sd, batch_size=8, stages={"quality": False}) as p:
        assert p.resumed_from["sample_index"] == 40 and sum(len(b.texts) for b in p) == 0


# a rank process: argv rank, world, store, then the script's own arguments (ARGS)
_PREAMBLE = textwrap.dedent("""
    import json, os, sys, time
    from datetime import timedelta
    import torch, torch.distributed as dist
    rank, world, store = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    ARGS = sys.argv[4:]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=world,
                            timeout=timedelta(seconds=90))
""")

_RANK = _PREAMBLE + textwrap.dedent("""
    corpus, sd, out = ARGS
    from luminamoon.data import DistributedPipeline, JsonlSource
    t0 = time.monotonic()
    res = {}
    try:
        with DistributedPipeline(JsonlSource(corpus), batch_size=4, state_dir=sd + "-" + str(rank),
                                 stages={"quality": False}, num_threads=1) as p:
            res["kept"] = sum(len(b.texts) for b in p)
    except Exception as e:
        res["error"] = [type(e).__name__, str(e)]
    res["seconds"] = time.monotonic() - t0
    with open(out + "-" + str(rank) + ".json", "w") as f:
        json.dump(res, f)
""")


def test_state_dir_unusable_on_one_rank_stops_every_rank_at_once(tmp_path):
    """Rank 1's state_dir is a file: rank 1 raised before the start-up collective, and rank 0
    learnt nothing but gloo's "Connection closed by peer" once rank 1's process was gone (or
    waited for the group timeout while it lived on).  Now both raise OSError naming it, at once."""
    corpus = str(tmp_path / "c.jsonl")
    write_jsonl(corpus, ({"text": _doc(i)} for i in range(20)))
    sd = str(tmp_path / "state")
    open(sd + "-1", "w").close()
    script = tmp_path / "rank.py"
    script.write_text(_RANK)
    store = str(tmp_path / "store")
    out = str(tmp_path / "res")
    res = _run_ranks(script, out, lambda r: [str(r), "2", store, corpus, sd, out])
    for r in range(2):
        assert res[r].get("error", [None])[0] == "OSError", res
        assert "state_dir" in res[r]["error"][1] and "st" in res[r]["error"][1]
        assert res[r]["seconds"] < 30, res  # not the 90 s group timeout


def _run_ranks(script, out: str, argv) -> list:
    """Two rank processes of ``script`` (``argv(rank)``: its arguments), 60 s for both; each writes
    ``{out}-{rank}.json``, returned in rank order (a rank's output is in ``{out}-{rank}.log``)."""
    procs = []
    for r in range(2):
        with open(f"{out}-{r}.log", "wb") as log:
            procs.append(subprocess.Popen([sys.executable, str(script)] + argv(r), stdout=log,
                                          stderr=subprocess.STDOUT))
    t0 = time.monotonic()
    try:
        for p in procs:
            p.wait(timeout=max(1.0, 60 - (time.monotonic() - t0)))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    res = []
    for r in range(2):
        if not os.path.exists(f"{out}-{r}.json"):
            with open(f"{out}-{r}.log", "rb") as f:
                pytest.fail(f"rank {r} wrote no result: {f.read()[-2000:].decode(errors='replace')}")
        with open(f"{out}-{r}.json") as f:
            res.append(json.load(f))
    return res


_LIST_RANK = _PREAMBLE + textwrap.dedent("""
    sd, out, how = ARGS
    from luminamoon.data import DistributedPipeline
    data = [{"text": f"document {i} " + "words of a longer text " * (i % 7 + 1)} for i in range(60)]
    mine = data[rank::world] if how == "preshard" else data[:40] if (how == "short" and rank == 0) else data
    t0 = time.monotonic()
    res = {"kept": []}
    try:
        with DistributedPipeline(mine, batch_size=4, state_dir=sd, stages={"quality": False},
                                 num_threads=1) as p:
            for b in p:
                res["kept"] += b.texts.tolist()
    except Exception as e:
        res["error"] = [type(e).__name__, str(e)]
    res["seconds"] = time.monotonic() - t0
    with open(out + "-" + str(rank) + ".json", "w") as f:
        json.dump(res, f)
""")


@pytest.mark.parametrize("how", ["preshard", "short", "same"])
def test_ranks_passing_different_lists_are_refused(tmp_path, how):
    """Each rank passing its own shard of a list (data[rank::W]) was accepted: the records were
    sharded again and half of them never delivered, silently; lists of different lengths left
    the ranks in different collectives until the group timeout.  Now both raise ValueError."""
    script = tmp_path / "rank.py"
    script.write_text(_LIST_RANK)
    out = str(tmp_path / "res")
    res = _run_ranks(script, out, lambda r: [str(r), "2", str(tmp_path / "store"), str(tmp_path / "state"), out, how])
    if how == "same":  # the same whole list on every rank: every document once, over both ranks
        assert all("error" not in x for x in res), res
        kept = res[0]["kept"] + res[1]["kept"]
        assert len(kept) == len(set(kept)) == 60
        return
    for r in range(2):
        assert res[r].get("error", [None])[0] == "ValueError", res
        assert "same source" in res[r]["error"][1] and "in_memory_items" in res[r]["error"][1]
        assert res[r]["seconds"] < 30
