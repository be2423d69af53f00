"""A DistributedPipeline's state_dir must be one folder shared by every rank (each rank writes its
dedup log and sidecars there, rank 0 the commit naming them all).  A node-local folder -- here:
another path on each rank -- was accepted; runs and same-size resumes worked, and the first resume
on another number of ranks failed with "the committed dedup log ... is missing", naming no cause.
Now every rank raises ValueError at start, saying the folder must be shared."""
import json
import textwrap

from test_review_s34_scaleout import _PREAMBLE, _run_ranks

_RANK = _PREAMBLE + textwrap.dedent("""
    sd, out, shared = ARGS
    from luminamoon.data import DistributedPipeline
    data = [{"text": f"document {i} with a few words"} for i in range(40)]
    mine = sd if shared == "yes" else sd + "-node" + str(rank)
    t0 = time.monotonic()
    res = {"kept": 0}
    try:
        with DistributedPipeline(data, batch_size=4, state_dir=mine, stages={"quality": False},
                                 num_threads=1) as p:
            res["kept"] = sum(len(b.texts) for b in p)
            p.commit()
        res["files"] = sorted(os.listdir(mine))
    except Exception as e:
        res["error"] = [type(e).__name__, str(e)]
    res["seconds"] = time.monotonic() - t0
    with open(out + "-" + str(rank) + ".json", "w") as f:
        json.dump(res, f)
""")


def _ranks(tmp_path, shared: str) -> list:
    script = tmp_path / "rank.py"
    script.write_text(_RANK)
    out = str(tmp_path / "res")
    return _run_ranks(script, out, lambda r: [str(r), "2", str(tmp_path / "store"), str(tmp_path / "state"), out,
                                              shared])


def test_node_local_state_dirs_are_refused_on_every_rank(tmp_path):
    res = _ranks(tmp_path, "no")
    for r in range(2):  # was: both ran and committed, each into its own folder
        assert res[r].get("error", [None])[0] == "ValueError", res
        assert "shared" in res[r]["error"][1] and "rank(s) [1]" in res[r]["error"][1], res
        assert res[r]["seconds"] < 30


def test_a_shared_state_dir_runs_and_leaves_no_check_file(tmp_path):
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / ".shared-check-99-dead").write_bytes(b"")  # a killed run's: removed too
    res = _ranks(tmp_path, "yes")
    assert all("error" not in x for x in res), res
    assert res[0]["kept"] + res[1]["kept"] == 40
    assert not [f for f in res[0]["files"] + res[1]["files"] if f.startswith(".shared-check")], res
