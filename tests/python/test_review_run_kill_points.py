"""Review of `luminamoon run`'s manifest change (068cb13: stats.json and report.png recorded in
run.json's manifest with the last part, in the same run.json write): the process dies (os._exit,
as kill -9) right before and right after EVERY durable rename of a run (parts, run.json,
commits, stats.json, the completion mark), then ``--resume`` must give byte-identical part
files and the same statistics as an uninterrupted run, leave no temporary file, and a second
``--resume`` must change nothing.  Also a run folder in the format of before that change
(the manifest without stats.json / report.png while the run's last commit is done: the old
runner added them one at a time after it) still resumes."""
import glob
import json
import os

import pytest

from forkserver import ForkServer
from luminamoon.cli.demo_corpus import generate

# Every run is a child forked by one server process that imported luminamoon (and torch) and
# matplotlib once (tests/python/forkserver.py): a run then costs its own work, not ~2-4 s of imports
# (torch; matplotlib for report.png): the ~40 runs of this file took ~150 s of CI.  A child is a fresh
# process for the run (its own os.replace hook, threads, files: kill_points_child.py); it dies by
# os._exit(137) as a kill -9 would, and the server reports its exit status.
CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kill_points_child.py")


class _Result:
    def __init__(self, returncode, stderr):
        self.returncode, self.stderr = returncode, stderr


_forks = []
ARGS = ["-q", "--batch-size", "32", "--part-docs", "40", "-j", "1"]


@pytest.fixture(scope="module", autouse=True)
def _stop_server():
    yield
    for fs in _forks:
        fs.close()
    _forks.clear()


def _go(paths, out, die_at=0, when="before", *extra):
    if not _forks:
        _forks.append(ForkServer(preload=("luminamoon.cli", "matplotlib.pyplot", "matplotlib.ticker")))
    env = {**os.environ, "LM_DIE_AT": str(die_at), "LM_DIE_WHEN": when}
    r = _forks[0].run([CHILD, "run", *paths, "-o", out, *ARGS, *extra], env=env, timeout=600)
    return _Result(r.returncode, r.stdout + r.stderr)  # (a hung run fails the test: TimeoutExpired)


def _parts(out):
    return {os.path.basename(p): open(p, "rb").read() for p in sorted(glob.glob(os.path.join(out, "part-*")))}


def _stats(out):
    with open(os.path.join(out, "stats.json")) as f:
        st = json.load(f)
    for k in ("throughput", "output", "inputs", "config", "threads"):
        st.pop(k, None)
    return st


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    paths = generate(str(d), size_mb=0.3, seed=42, shard_mb=0.1)["paths"]
    ref = str(tmp_path_factory.mktemp("ref") / "out")
    r = _go(paths, ref)
    assert r.returncode == 0, r.stderr
    renames = int(r.stderr.split("REVIEW_RENAMES ")[-1].split()[0])
    assert len(_parts(ref)) >= 2 and renames >= 8
    assert os.path.exists(os.path.join(ref, "report.png"))
    return paths, ref, renames


def _resume_and_compare(paths, out, ref, again=True):
    r = _go(paths, out, 0, "before", "--resume")
    assert r.returncode == 0, r.stderr[-3000:]
    assert _parts(out) == _parts(ref)
    assert _stats(out) == _stats(ref)
    assert os.path.exists(os.path.join(out, "report.png"))
    assert not [f for f in os.listdir(out) if f.startswith(".tmp")]
    with open(os.path.join(out, ".luminamoon", "run.json")) as f:
        man = set(json.load(f)["manifest"])
    assert set(_parts(out)) | {"stats.json", "report.png"} <= man
    if not again:
        return
    before = _parts(out), _stats(out)
    r = _go(paths, out, 0, "before", "--resume")
    assert r.returncode == 0, r.stderr[-3000:]
    assert (_parts(out), _stats(out)) == before


def test_kill_at_every_durable_write_then_resume(setup, tmp_path):
    paths, ref, renames = setup
    n = listed_missing = 0
    # one kill a rename, right before it for odd k and right after it for even k (the state after
    # rename k is the state before rename k + 1 but for the work between them): every rename's
    # before or after, at half the ~60 runs of both (the CI budget); the last two renames get both
    for k in range(1, renames + 1):
        for when in ("before", "after") if k > renames - 2 else (("before", "after")[k % 2 == 0],):
            out = str(tmp_path / f"o-{k}-{when}")
            r = _go(paths, out, k, when)
            assert r.returncode == 137, (k, when, r.returncode, r.stderr[-2000:])
            if not os.path.exists(os.path.join(out, ".luminamoon", "run.json")):
                continue  # died before the run recorded itself: a fresh start
            with open(os.path.join(out, ".luminamoon", "run.json")) as f:
                man = json.load(f).get("manifest", [])
            # run.json records the open part and stats.json before they exist (209040e, 068cb13)
            listed_missing += any(not os.path.exists(os.path.join(out, m)) for m in man)
            _resume_and_compare(paths, out, ref, again=k > renames - 4)  # the end: resumed twice
            n += 1
    assert n >= renames - 2
    assert listed_missing >= 3  # the window of files listed before they exist was hit


def test_run_folder_of_the_old_manifest_format_resumes(setup, tmp_path):
    """The old runner added stats.json to the manifest only right before writing it: a run that
    died after its last commit had a manifest without stats.json / report.png."""
    paths, ref, renames = setup
    done = 0
    for k in range(renames, 0, -1):  # the last renames: stats.json, report's neighbours, the completion mark
        out = str(tmp_path / f"o-{k}")
        r = _go(paths, out, k, "before")
        assert r.returncode == 137
        run_file = os.path.join(out, ".luminamoon", "run.json")
        with open(run_file) as f:
            ident = json.load(f)
        if "stats.json" not in ident["manifest"]:
            break  # before the last part: the same in both formats
        if os.path.exists(os.path.join(out, "stats.json")):
            continue  # the old runner recorded stats.json before writing it
        ident["manifest"] = [m for m in ident["manifest"] if m not in ("stats.json", "report.png")]
        ident.pop("completed", None)
        with open(run_file, "w") as f:
            json.dump(ident, f)
        _resume_and_compare(paths, out, ref)
        done += 1
    assert done >= 1
