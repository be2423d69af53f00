"""``luminamoon run --near-dup cluster|stream`` (issue 12): the removed set against
datatrove's four MinHash stages, counts in stats.json, resume after an interruption in
every step (pass 1, clustering, pass 2), configuration checks."""
import glob
import gzip
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from conftest import CORPUS  # noqa: E402
from reference_datatrove_minhash import run_datatrove_minhash  # noqa: E402

from luminamoon.cli import runner  # noqa: E402
from luminamoon.cli import main  # noqa: E402

SAMPLE = 3000
RAW = ["--no-clean", "--no-quality", "--no-dedup", "--no-pii"]  # near-dup sees the corpus as it is


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    if not CORPUS.exists():
        pytest.skip(f"shared corpus not found at {CORPUS}")
    d = tmp_path_factory.mktemp("near")
    recs = []
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            r["id"] = f"{len(recs)}:{r['id']}"  # the corpus repeats a few ids: make them unique
            recs.append(r)
            if len(recs) >= SAMPLE:
                break
    path = str(d / "sample.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
    return path, recs


@pytest.fixture(scope="module")
def datatrove_removed(sample, tmp_path_factory):
    _, recs = sample
    ref = run_datatrove_minhash([r["text"] for r in recs], str(tmp_path_factory.mktemp("dt")))
    return {recs[i]["id"] for i in ref["removed"]}


def _ids(out):
    ids = []
    for p in sorted(glob.glob(os.path.join(out, "part-*.jsonl"))):
        with open(p, encoding="utf-8") as f:
            ids += [json.loads(line)["id"] for line in f]
    return ids


def _parts(out):
    return {os.path.basename(p): open(p, "rb").read() for p in sorted(glob.glob(os.path.join(out, "part-*")))}


def _stats(out):
    with open(os.path.join(out, "stats.json")) as f:
        return json.load(f)


def _run(*args):
    return main(["run", *args])


def test_cluster_removes_what_datatrove_removes(sample, datatrove_removed, tmp_path):
    path, recs = sample
    out = str(tmp_path / "o")
    assert _run(path, "-o", out, "--format", "jsonl", "--near-dup", "cluster", "--part-docs", "500", "-q",
                "--no-report", *RAW) == 0
    kept = _ids(out)
    assert len(kept) == len(set(kept))
    removed = {r["id"] for r in recs} - set(kept)
    diff = removed ^ datatrove_removed
    print(f"\n[--near-dup cluster] {len(recs)} docs: removed {len(removed)}, datatrove {len(datatrove_removed)}, "
          f"differ on {len(diff)}")
    assert len(datatrove_removed) > SAMPLE // 20
    assert 1 - len(diff) / len(recs) >= 0.999
    st = _stats(out)
    assert st["dropped_by_reason"]["near_duplicate"] == len(removed)
    assert st["dropped_by_stage"]["near_dup"] == len(removed)
    assert st["documents"]["kept"] == len(kept) == len(recs) - len(removed)
    nd = st["near_dup"]
    assert nd["mode"] == "cluster" and nd["signatures"] == len(recs)
    assert nd["removed"] == nd["removed_in_output"] == len(removed)
    assert nd["peak_bytes"] > 0 and nd["clusters"] > 0


def test_cluster_with_the_default_stages(sample, tmp_path):
    """With cleaning, quality, exact dedup and PII on, the clustering sees the kept, cleaned
    documents: the output is the plain run's output minus near-duplicates."""
    path, _ = sample
    plain, near = str(tmp_path / "plain"), str(tmp_path / "near")
    assert _run(path, "-o", plain, "--format", "jsonl", "-q", "--no-report") == 0
    assert _run(path, "-o", near, "--format", "jsonl", "-q", "--no-report", "--near-dup", "cluster") == 0
    a, b = _ids(plain), _ids(near)
    st = _stats(near)
    assert set(b) <= set(a) and [x for x in a if x in set(b)] == b
    assert st["near_dup"]["signatures"] == len(a)
    assert len(a) - len(b) == st["dropped_by_reason"].get("near_duplicate", 0) == st["near_dup"]["removed"]
    assert "near_dup" not in _stats(plain)["dropped_by_stage"]


@pytest.fixture(scope="module")
def reference_out(sample, tmp_path_factory):
    path, _ = sample
    out = str(tmp_path_factory.mktemp("ref") / "o")
    assert _run(path, "-o", out, "--format", "jsonl", "--near-dup", "cluster", "--part-docs", "300", "-q",
                "--no-report", "--batch-size", "256", *RAW) == 0
    return out


def _comparable(st):
    st = dict(st)
    for k in ("throughput", "inputs"):
        st.pop(k, None)
    st["output"] = {k: v for k, v in st["output"].items() if k != "folder"}
    nd = dict(st.get("near_dup", {}))
    for k in ("seconds", "pass1_seconds", "peak_bytes", "bytes_per_doc", "reused_bands", "reused_result"):
        nd.pop(k, None)
    st["near_dup"] = nd
    return st


ARGS = ["--format", "jsonl", "--near-dup", "cluster", "--part-docs", "300", "-q", "--no-report",
        "--batch-size", "256", *RAW]


def test_interrupt_in_pass_1_then_resume(sample, reference_out, tmp_path, monkeypatch):
    path, _ = sample
    out = str(tmp_path / "o")
    import luminamoon

    real = luminamoon.MinHash.signatures
    calls = [0]

    def flaky(self, texts, *a, **k):
        calls[0] += 1
        if calls[0] == 5:
            raise KeyboardInterrupt
        return real(self, texts, *a, **k)

    monkeypatch.setattr(luminamoon.MinHash, "signatures", flaky)
    monkeypatch.setattr(runner, "_NEAR_COMMIT_S", 0.0)  # commit after every batch
    assert _run(path, "-o", out, *ARGS) == 130
    assert not _parts(out)
    committed = json.load(open(os.path.join(out, ".luminamoon", "run.json")))
    assert committed["config"]["near_dup"]["mode"] == "cluster"
    # without --resume the folder is refused; with it, pass 1 continues from its commit
    assert _run(path, "-o", out, *ARGS) == 2
    monkeypatch.setattr(luminamoon.MinHash, "signatures", real)
    assert _run(path, "-o", out, *ARGS, "--resume") == 0
    assert _parts(out) == _parts(reference_out)
    assert _comparable(_stats(out)) == _comparable(_stats(reference_out))


def test_interrupt_in_clustering_and_pass_2_then_resume(sample, reference_out, tmp_path, monkeypatch):
    path, _ = sample
    out = str(tmp_path / "o")
    from luminamoon import near_dup

    real = near_dup.union_pairs

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(near_dup, "union_pairs", boom)  # after every band's pairs are on disk
    assert _run(path, "-o", out, *ARGS) == 130
    assert len(glob.glob(os.path.join(out, ".luminamoon", "near_dup", "cluster", "band_*.npz"))) == 14
    monkeypatch.setattr(near_dup, "union_pairs", real)
    assert _run(path, "-o", out, *ARGS, "--resume", "--stop-after-batches", "5") == 130
    assert 0 < len(_parts(out)) < len(_parts(reference_out))
    assert _run(path, "-o", out, *ARGS, "--resume") == 0
    assert _parts(out) == _parts(reference_out)
    st = _stats(out)
    assert _comparable(st) == _comparable(_stats(reference_out))
    assert st["near_dup"]["reused_bands"] == 14


def test_resume_with_another_mode_is_refused(sample, tmp_path, capsys):
    path, _ = sample
    out = str(tmp_path / "o")
    assert _run(path, "-o", out, *ARGS, "--stop-after-batches", "2") == 130
    capsys.readouterr()
    args = [a if a != "cluster" else "off" for a in ARGS]
    assert _run(path, "-o", out, *args, "--resume") == 2
    assert "near_dup.mode" in capsys.readouterr().err


def test_mode_off_keeps_the_identity_of_earlier_runs(sample, tmp_path):
    path, _ = sample
    out = str(tmp_path / "o")
    assert _run(path, "-o", out, "--format", "jsonl", "-q", "--no-report", "--stop-after-batches", "2", "--part-docs", "10", *RAW,
                "--batch-size", "256") == 130
    run = json.load(open(os.path.join(out, ".luminamoon", "run.json")))
    assert "near_dup" not in run["config"]  # as written before the near_dup section existed


@pytest.mark.parametrize("args,needle", [
    (["--set", "near_dup.mode=fuzzy"], "near_dup.mode must be off, cluster or stream"),
    (["--set", "near_dup.num_buckets=0"], "near_dup.num_buckets"),
    (["--set", "near_dup.hashes_per_bucket=-3"], "near_dup.hashes_per_bucket"),
    (["--set", "near_dup.precision=48"], "near_dup.precision must be 32 or 64"),
    (["--near-dup", "cluster", "--set", "near_dup.max_entries=10"], "cluster mode has no index"),
    (["--set", "near_dup.bands=3"], "unknown key near_dup.bands"),
])
def test_bad_near_dup_settings(tmp_path, capsys, args, needle):
    p = tmp_path / "in.jsonl"
    p.write_text('{"text": "hello world"}\n')
    out = tmp_path / "o"
    assert _run(str(p), "-o", str(out), "-q", *args) == 2
    assert needle in capsys.readouterr().err
    assert not out.exists()


def test_bad_near_dup_flag(capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", "x.jsonl", "-o", "o", "--near-dup", "fuzzy"])
    assert e.value.code == 2
    assert "--near-dup" in capsys.readouterr().err


def test_stream_mode(sample, tmp_path):
    """--near-dup stream: the NearDeduplicator inside the run drops a document when one of
    its bands was seen earlier, so no two documents it keeps share a band."""
    path, recs = sample
    out = str(tmp_path / "o")
    assert _run(path, "-o", out, "--format", "jsonl", "--near-dup", "stream", "-q", "--no-report", *RAW) == 0
    st = _stats(out)
    kept = _ids(out)
    n_rm = st["dropped_by_reason"].get("near_duplicate", 0)
    assert n_rm > SAMPLE // 20 and len(kept) == len(recs) - n_rm
    assert st["near_dup"]["mode"] == "stream" and st["near_dup"]["removed"] == n_rm
    # no two kept documents share a band: cluster mode over the kept ones removes nothing
    from luminamoon.near_dup import cluster_texts

    text = {r["id"]: r["text"] for r in recs}
    assert cluster_texts([text[i] for i in kept]).removed.size == 0


def test_sigkill_anywhere_then_resume(sample, reference_out, tmp_path):
    """kill -9 at several moments of a --near-dup cluster run (pass 1, clustering, pass 2:
    wherever the delays land), each time continued with --resume: the output equals an
    uninterrupted run's."""
    import signal
    import subprocess
    import time

    path, _ = sample
    out = str(tmp_path / "o")
    cmd = [sys.executable, "-m", "luminamoon", "run", path, "-o", out, *ARGS, "--resume"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    kills = []
    nd = os.path.join(out, ".luminamoon", "near_dup")
    for delay in (1.5, 3.0, 4.5, 6.0, 8.0):
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            kills.append("pass 2" if os.path.exists(os.path.join(nd, "near_dup.json")) else
                         "clustering" if os.path.exists(os.path.join(nd, "pass1.json")) else "pass 1")
        p.wait()
    print(f"\nkills landed in: {kills}")
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert kills
    assert _parts(out) == _parts(reference_out)
    assert _comparable(_stats(out)) == _comparable(_stats(reference_out))
