"""luminamoon.ray (issue 16): the Ray engine equals the single-process run.

One local Ray cluster (2 CPUs, no dashboard) is shared by the module.  The
reference is always computed independently in this process: ``run_corpus``
(the local engine) for the CLI engine, ``FusedPipeline`` (one process, exact and
near dedup in the stream) for ``process``.  No skips: a missing ray fails.
"""
import gzip
import hashlib
import json
import os
import signal
import threading
import time

import pyarrow.parquet as pq
import pytest
import ray  # a missing ray must fail the run (requirements.txt: ray[data])
import ray.data

import luminamoon.ray as lr
from luminamoon.cli.config import ConfigError, default_config
from luminamoon.cli.runner import RunError, run_corpus
from luminamoon.stages import FusedPipeline

from conftest import CORPUS, corpus_texts

STATS_KEYS = ("documents", "dropped_by_reason", "dropped_by_stage", "bytes", "cleaner", "quality",
              "pii_replacements", "input_repairs", "length_histogram", "by_group", "kept_fraction")


@pytest.fixture(scope="module")
def ray_session():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="warning")
    ctx = ray.data.DataContext.get_current()
    old = ctx.execution_options.preserve_order
    ctx.execution_options.preserve_order = True
    yield ray
    ctx.execution_options.preserve_order = old
    ray.shutdown()


@pytest.fixture(scope="module")
def sample_files(tmp_path_factory):
    """The first 6,000 documents of the shared corpus in 6 JSONL files (input order = file order)."""
    if not CORPUS.exists():
        corpus_texts(1)  # skips with the corpus message (a failure in CI)
    d = tmp_path_factory.mktemp("ray-sample")
    lines = []
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        for line in f:
            lines.append(line)
            if len(lines) >= 6000:
                break
    for k in range(6):
        with open(d / f"shard-{k}.jsonl", "w", encoding="utf-8") as f:
            f.writelines(lines[k * 1000:(k + 1) * 1000])
    return d


def _cfg(**over):
    cfg = default_config()
    for key, v in over.items():
        sec, k = key.split("__")
        cfg[sec][k] = v
    return cfg


def _output(d):
    parts = sorted(f for f in os.listdir(d) if f.startswith("part-"))
    rows = []
    for p in parts:
        rows += pq.read_table(os.path.join(d, p)).to_pylist()
    digests = {p: hashlib.sha256(open(os.path.join(d, p), "rb").read()).hexdigest() for p in parts}
    with open(os.path.join(d, "stats.json"), encoding="utf-8") as f:
        stats = json.load(f)
    return parts, rows, digests, stats


def _assert_same_run(local_dir, ray_dir):
    lp, lrows, ld, ls = _output(local_dir)
    rp, rrows, rd, rs = _output(ray_dir)
    assert rp == lp
    assert [r["id"] for r in rrows] == [r["id"] for r in lrows]  # the kept set, in order
    assert rrows == lrows                                        # texts and kept fields
    assert rd == ld                                              # the same Parquet parts, byte for byte
    for k in STATS_KEYS:
        assert rs.get(k) == ls.get(k), k
    if "near_dup" in ls:
        assert rs["near_dup"]["removed"] == ls["near_dup"]["removed"]
        assert rs["near_dup"]["band_index"]["entries"] == ls["near_dup"]["band_index"]["entries"]
    assert os.path.getsize(os.path.join(ray_dir, "report.png")) > 1000
    assert rs["output"]["rows"] == ls["output"]["rows"] == len(lrows)
    return ls, rs


def test_full_corpus_equals_local_run(ray_session, tmp_path):
    """Acceptance 1 on the whole shared corpus: kept set, texts, parts and stats counts."""
    if not CORPUS.exists():
        corpus_texts(1)
    cfg = _cfg(near_dup__mode="stream", run__group_by="source")
    ls = run_corpus([str(CORPUS)], tmp_path / "local", cfg, quiet=True)
    rs = run_corpus([str(CORPUS)], tmp_path / "ray", cfg, quiet=True, engine="ray")
    assert ls["documents"]["input"] == 68330
    assert rs["documents"]["dropped"] > 0 and ls["dropped_by_reason"].get("duplicate", 0) > 0
    _assert_same_run(tmp_path / "local", tmp_path / "ray")


def test_full_corpus_no_quality_near_stream_equals_local_run(ray_session, tmp_path):
    """The whole corpus with every document reaching both dedup shuffles (6,131 exact and ~13,700
    near duplicates; both engines take the band keys before PII, on the unmasked text), in 4 files."""
    if not CORPUS.exists():
        corpus_texts(1)
    src = tmp_path / "in"
    src.mkdir()
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        lines = f.readlines()
    q = -(-len(lines) // 4)
    for k in range(4):
        (src / f"s{k}.jsonl").write_text("".join(lines[k * q:(k + 1) * q]), encoding="utf-8")
    cfg = _cfg(quality__enabled=False, near_dup__mode="stream")
    ls = run_corpus([str(src)], tmp_path / "local", cfg, quiet=True)
    run_corpus([str(src)], tmp_path / "ray", cfg, quiet=True, engine="ray")
    assert ls["dropped_by_reason"]["duplicate"] > 5000 and ls["dropped_by_reason"]["near_duplicate"] > 10000
    _assert_same_run(tmp_path / "local", tmp_path / "ray")


def test_sample_many_files_dedup_heavy(ray_session, sample_files, tmp_path):
    """Six files, small batches and parts spanning files, no quality filter (thousands of exact and
    near duplicates across files), kept fields and groups: every part and count equal."""
    cfg = _cfg(quality__enabled=False, near_dup__mode="stream", run__group_by="source", run__batch_size=300,
               output__part_docs=700, output__keep_fields=["source"])
    ls = run_corpus([str(sample_files)], tmp_path / "local", cfg, quiet=True)
    run_corpus([str(sample_files)], tmp_path / "ray", cfg, quiet=True, engine="ray")
    assert ls["dropped_by_reason"]["duplicate"] > 100 and ls["dropped_by_reason"]["near_duplicate"] > 100
    assert len(ls["output"]["parts"]) >= 4
    _assert_same_run(tmp_path / "local", tmp_path / "ray")


def test_sample_jsonl_output_exact_only_datatrove_pii(ray_session, sample_files, tmp_path):
    """JSONL output, exact dedup only, datatrove PII mode (its replacement cycle runs across files)."""
    cfg = _cfg(quality__enabled=False, pii__mode="datatrove", run__batch_size=512, output__format="jsonl",
               output__compression="none", output__part_docs=1500)
    run_corpus([str(sample_files)], tmp_path / "local", cfg, quiet=True, report=False)
    run_corpus([str(sample_files)], tmp_path / "ray", cfg, quiet=True, report=False, engine="ray")
    lp = sorted(f for f in os.listdir(tmp_path / "local") if f.startswith("part-"))
    assert lp == sorted(f for f in os.listdir(tmp_path / "ray") if f.startswith("part-")) and len(lp) >= 2
    for p in lp:
        assert (tmp_path / "ray" / p).read_bytes() == (tmp_path / "local" / p).read_bytes(), p
    a = json.loads((tmp_path / "local" / "stats.json").read_text())
    b = json.loads((tmp_path / "ray" / "stats.json").read_text())
    assert sum(a["pii_replacements"].values()) > 0
    for k in STATS_KEYS:
        assert a.get(k) == b.get(k), k


def _procs_running(name):
    """pids of Ray worker processes executing the task ``name`` now (their title is ray::<name>)."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if cmd.startswith(f"ray::{name}"):
            pids.append(int(pid))
    return pids


def test_killed_worker_is_retried_output_unchanged(ray_session, sample_files, tmp_path):
    """Acceptance 2: SIGKILL a Ray worker while it runs a file's stages; Ray retries the task and the
    output neither loses nor repeats a document (equals the single-process run)."""
    cfg = _cfg(quality__enabled=False, near_dup__mode="stream", run__batch_size=256, output__part_docs=900)
    run_corpus([str(sample_files)], tmp_path / "local", cfg, quiet=True, report=False)
    killed, errors = [], []
    for attempt in range(4):  # a fast machine may finish a run before the poller sees a task: run again
        out = tmp_path / f"ray{attempt}"

        def run(out=out):
            try:
                run_corpus([str(sample_files)], out, cfg, quiet=True, report=False, engine="ray")
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        t = threading.Thread(target=run)
        t.start()
        deadline = time.monotonic() + 60
        while not killed and t.is_alive() and time.monotonic() < deadline:
            for pid in _procs_running("_file_stage_a"):
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
                break
            time.sleep(0.002)
        t.join(120)
        assert not t.is_alive()
        assert not errors, errors
        if killed:
            break
    assert killed, "no Ray worker was seen running a file's stages"
    lp, lrows, ld, _ = _output(tmp_path / "local")
    rp, rrows, rd, _ = _output(out)
    ids = [r["id"] for r in rrows]
    assert len(ids) == len(set(ids))       # nothing repeated
    assert rrows == lrows and rd == ld     # nothing lost, same parts


def test_stopped_run_resumes_without_redoing_finished_files(ray_session, sample_files, tmp_path):
    cfg = _cfg(quality__enabled=False, run__batch_size=400, output__part_docs=800)
    run_corpus([str(sample_files)], tmp_path / "local", cfg, quiet=True, report=False)
    out = tmp_path / "ray"
    with pytest.raises(KeyboardInterrupt):  # stops after 2 input files are checkpointed
        run_corpus([str(sample_files)], out, cfg, quiet=True, report=False, engine="ray", stop_after_batches=2)
    ck = sorted(os.listdir(out / ".luminamoon" / "ray"))
    assert len(ck) >= 2
    with pytest.raises(RunError, match="--resume"):  # the folder holds a run: not silently restarted
        run_corpus([str(sample_files)], out, cfg, quiet=True, report=False, engine="ray")
    run_corpus([str(sample_files)], out, cfg, quiet=True, report=False, engine="ray", resume=True)
    assert lr.shuffle_stats()["files_reused"] == len(ck)  # read back, not processed again
    assert lr.shuffle_stats()["files"] == 6
    _, lrows, ld, ls = _output(tmp_path / "local")
    _, rrows, rd, rs = _output(out)
    assert rrows == lrows and rd == ld
    for k in STATS_KEYS:
        assert rs.get(k) == ls.get(k), k


def _reference(texts, stages, near):
    with FusedPipeline(cleaner=stages["cleaner"], quality=stages["quality"], pii=stages["pii"],
                       near_dedup=near) as p:
        r = p(texts)
    return r.texts.tolist(), r.source_index.tolist(), r.reasons.tolist()


@pytest.mark.parametrize("near", [None, {}])
def test_process_dataset_equals_one_process(ray_session, near):
    """process(ds) on Arrow batches, 5 blocks, 3 shuffle owners == FusedPipeline in one process."""
    texts = corpus_texts(4000)
    texts += texts[100:400]  # duplicates across blocks, later in the input
    stages = {"cleaner": True, "quality": False, "pii": True}
    ref_texts, ref_idx, ref_reasons = _reference(texts, stages, near)
    ds = ray.data.from_items([{"text": t, "i": i} for i, t in enumerate(texts)], override_num_blocks=5)
    rows = lr.process(ds, stages=stages, near_dedup=near, batch_size=333, num_partitions=3).take_all()
    assert [r["i"] for r in rows] == ref_idx
    assert [r["text"] for r in rows] == ref_texts
    full = lr.process(ds, stages=stages, near_dedup=near, batch_size=500, keep_dropped=True).take_all()
    assert [r["reason"] for r in full] == ref_reasons
    assert sum(1 for c in ref_reasons if c) >= 300


def test_process_bad_arguments(ray_session):
    ds = ray.data.from_items([{"text": "a"}, {"text": "b"}])
    with pytest.raises(ValueError, match="no column 'body'"):
        lr.process(ds, text_column="body")
    with pytest.raises(ValueError, match="dedup"):
        lr.process(ds, dedup="sometimes")
    with pytest.raises(TypeError, match="near_dedup"):
        lr.process(ds, near_dedup=14)
    with pytest.raises(ValueError, match="stages"):
        lr.process(ds, stages={"filter": True})
    with pytest.raises(ValueError, match="batch_size"):
        lr.process(ds, batch_size=0)
    with pytest.raises(TypeError, match="text_column"):
        lr.process(ds, text_column=3)


def test_engine_bad_arguments(ray_session, sample_files, tmp_path):
    cfg = _cfg(near_dup__mode="cluster")
    with pytest.raises(ConfigError, match="--near-dup stream"):
        run_corpus([str(sample_files)], tmp_path / "o", cfg, quiet=True, engine="ray")
    assert not (tmp_path / "o").exists()  # a refused start leaves nothing behind
    with pytest.raises(RunError, match="engine"):
        run_corpus([str(sample_files)], tmp_path / "o", default_config(), quiet=True, engine="spark")


def test_bad_record_stops_or_is_skipped_like_local(ray_session, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    good = json.dumps({"text": "a document long enough to be one " * 3})
    (src / "a.jsonl").write_text(good + "\n{bad json\n" + good.replace("one", "two") + "\n", encoding="utf-8")
    with pytest.raises(RunError, match="--skip-bad-records"):
        run_corpus([str(src)], tmp_path / "r", default_config(), quiet=True, engine="ray")
    cfg = _cfg(input__skip_bad_records=True, quality__enabled=False)
    a = run_corpus([str(src)], tmp_path / "l2", cfg, quiet=True, report=False)
    b = run_corpus([str(src)], tmp_path / "r2", cfg, quiet=True, report=False, engine="ray")
    assert a["documents"] == b["documents"] and b["documents"]["skipped_bad_records"] == 1
    assert _output(tmp_path / "r2")[2] == _output(tmp_path / "l2")[2]


def test_cli_flag(ray_session, sample_files, tmp_path, capsys):
    """``luminamoon run --engine ray`` (joins the running cluster with --address)."""
    from luminamoon.cli import main

    addr = ray.get_runtime_context().gcs_address
    rc = main(["run", str(sample_files / "shard-0.jsonl"), "-o", str(tmp_path / "r"), "-q", "--no-report",
               "--engine", "ray", "--address", addr])
    assert rc == 0
    rc = main(["run", str(sample_files / "shard-0.jsonl"), "-o", str(tmp_path / "l"), "-q", "--no-report"])
    assert rc == 0
    assert _output(tmp_path / "r")[2] == _output(tmp_path / "l")[2]
    # another driver process joins this cluster by its address (as on a multi-node cluster)
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "luminamoon", "run", str(sample_files / "shard-1.jsonl"), "-o",
                        str(tmp_path / "r3"), "-q", "--no-report", "--engine", "ray", "--address", addr],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert main(["run", str(sample_files / "shard-1.jsonl"), "-o", str(tmp_path / "l3"), "-q", "--no-report"]) == 0
    assert _output(tmp_path / "r3")[2] == _output(tmp_path / "l3")[2]
