"""DistributedPipeline over a generator factory that yields a different number of records on each
rank.  Every rank reads the whole stream and takes its share of each step, so the ranks' streams
must be the same; a list is compared at start (review s34), but a factory has no length to compare
before the stream.  Under global dedup (or global near dedup) each step is a collective: the rank
whose stream ended (or whose last step was shorter) went on while the other waited in an exchange it
never entered, until the group timeout (90 s here).  The exchange's first message now carries each
rank's step size, and a rank whose stream ended says so in one last exchange: every rank raises
ValueError at the first step where the streams differ.
"""
import textwrap

import pytest

from test_review_s34_scaleout import _PREAMBLE, _run_ranks

_RANK = _PREAMBLE + textwrap.dedent("""
    sd, out, how, mode = ARGS
    from luminamoon.data import DistributedPipeline
    import random
    WORDS = "the data pipeline reads many documents and cleans them before training a model on text".split()
    data = [{"text": " ".join(random.Random(i).choices(WORDS, k=60)) + f" Doc {i}."} for i in range(60)]
    n = {"short": 40, "partial": 42, "same": 60}[how] if rank == 0 else 60
    kw = {"dedup": "global"} if mode == "exact" else {"dedup": "local", "near_dedup": "global"}
    t0 = time.monotonic()
    res = {"kept": []}
    try:
        with DistributedPipeline(lambda: iter(data[:n]), batch_size=4, state_dir=sd,
                                 stages={"quality": False}, num_threads=1, **kw) as p:
            for b in p:
                res["kept"] += b.texts.tolist()
            if how != "same":
                time.sleep(40)  # training goes on in this rank (the other one must not wait for it)
    except Exception as e:
        res["error"] = [type(e).__name__, str(e)]
    res["seconds"] = time.monotonic() - t0
    with open(out + "-" + str(rank) + ".json", "w") as f:
        json.dump(res, f)
""")


@pytest.mark.parametrize("mode", ["exact", "near"])
@pytest.mark.parametrize("how", ["short", "partial", "same"])
def test_ranks_reading_streams_of_different_lengths_stop_together(tmp_path, how, mode):
    script = tmp_path / "rank.py"
    script.write_text(_RANK)
    out = str(tmp_path / "res")
    res = _run_ranks(script, out, lambda r: [str(r), "2", str(tmp_path / "store"), str(tmp_path / "state"), out,
                                             how, mode])
    if how == "same":  # the same stream on both ranks: every document once, over both ranks
        assert all("error" not in x for x in res), res
        kept = res[0]["kept"] + res[1]["kept"]
        assert len(kept) == len(set(kept)) == 60
        return
    for r in range(2):  # was: one rank waiting in an exchange until the 90 s group timeout
        assert res[r].get("error", [None])[0] == "ValueError", res
        assert "same stream" in res[r]["error"][1], res
        assert res[r]["seconds"] < 30, res
    # what was delivered before the streams differed: the same on both runs of the test, and no
    # document twice
    kept = res[0]["kept"] + res[1]["kept"]
    assert len(kept) == len(set(kept))
