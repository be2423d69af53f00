"""examples/train_byte_model.py, shortened: trains under torch.compile(fullgraph=True)
on the output of `luminamoon run`, checkpoints mid-epoch, and a resumed run sees
exactly the batches (and losses) of the uninterrupted run."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

from forkserver import ForkServer

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "train_byte_model.py"


@pytest.fixture(scope="module")
def forks():
    """The runs after a module's first fresh interpreter are forks of a process that imported torch,
    torch._dynamo (the optimizer imports it) and luminamoon once: ~3.5 s of CPU a run less
    (forkserver.py).  Each test's first run (_run / _run_rc without forks) stays a new interpreter."""
    with ForkServer(preload=("torch", "torch._dynamo", "luminamoon.data", "pyarrow.parquet")) as fs:
        yield fs


def _run(args, timeout=600, env=None, forks=None):
    argv = [str(SCRIPT), "--quick", *args]
    if forks is not None:
        r = forks.run(argv, env=env, cwd=str(ROOT), timeout=timeout)
    else:
        r = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=timeout, cwd=str(ROOT),
                           env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def _log(path):
    with open(path) as f:
        return [json.loads(l) for l in f]


@pytest.mark.parametrize("loader", ["stateful", "fallback"])
def test_train_checkpoint_resume(tmp_path, loader, forks):
    env = dict(os.environ, LM_EXAMPLE_NO_TORCHDATA="1" if loader == "fallback" else "0")
    if loader == "stateful":
        pytest.importorskip("torchdata.stateful_dataloader")
    work_a, work_b = tmp_path / "a", tmp_path / "b"
    # the same data folder for both runs (made once, by the first run)
    out = _run(["--work", str(work_a), "--log", str(tmp_path / "full.jsonl")], env=env)
    assert "done: 24 steps" in out
    assert ("StatefulDataLoader" in out) == (loader == "stateful")
    data = str(work_a / "data" / "out")
    full = _log(tmp_path / "full.jsonl")
    assert [r["step"] for r in full] == list(range(1, 25))
    assert full[-1]["loss"] < full[0]["loss"]  # it learns something
    # stop mid-epoch at step 13 (a checkpoint), then resume to 24
    _run(["--work", str(work_b), "--data", data, "--stop-at", "13", "--log", str(tmp_path / "part1.jsonl")], env=env,
         forks=forks)
    out = _run(["--work", str(work_b), "--data", data, "--resume", "--log", str(tmp_path / "part2.jsonl")], env=env,
               forks=forks)
    assert "resumed at step 13" in out
    part = _log(tmp_path / "part1.jsonl") + _log(tmp_path / "part2.jsonl")
    assert [r["step"] for r in part] == list(range(1, 25))
    assert [r["digest"] for r in part] == [r["digest"] for r in full]  # the same batches, in order
    for a, b in zip(part, full):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-3, abs=1e-4)


def test_model_compiles_without_graph_breaks():
    import torch

    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import train_byte_model as ex
    finally:
        sys.path.pop(0)
    from luminamoon import StringTensor

    st = StringTensor.from_list(["hello world", "", "a longer document " * 20, "ünïcödé"])
    model = ex.ByteLM(max_len=64, dim=32, layers=1)
    off, data = st.to_gpu_buffers()
    eager = model(off, data)
    explain = torch._dynamo.explain(model)(off, data)
    assert explain.graph_break_count == 0
    compiled = torch.compile(model, fullgraph=True, dynamic=True, backend="aot_eager")
    assert torch.allclose(compiled(off, data), eager, rtol=1e-4, atol=1e-5)


def _tiny_data(folder, n):
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(folder, exist_ok=True)
    pq.write_table(pa.table({"id": [f"d{i}" for i in range(n)], "text": [f"document number {i} " * 3 for i in range(n)]}),
                   os.path.join(folder, "part-00000.parquet"))
    return str(folder)


def _run_rc(args, timeout=300, forks=None):
    argv = [str(SCRIPT), "--quick", "--no-compile", *args]
    if forks is not None:
        r = forks.run(argv, cwd=str(ROOT), timeout=timeout)
    else:
        r = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=timeout, cwd=str(ROOT))
    return r.returncode, r.stdout + r.stderr


def test_fewer_documents_than_batch_size_refused(tmp_path):
    """drop_last=True gave no batch per epoch, and the epoch loop spun forever (issue 20 item 7)."""
    data = _tiny_data(tmp_path / "data", 3)
    rc, out = _run_rc(["--work", str(tmp_path / "w"), "--data", data, "--batch-size", "16"])
    assert rc != 0
    assert "3 document(s), fewer than --batch-size 16" in out and "Traceback" not in out


def test_zero_steps_and_resume_after_the_end(tmp_path, forks):
    """--steps 0, and --resume after a finished run, crashed with UnboundLocalError (issue 20 item 7)."""
    data = _tiny_data(tmp_path / "data", 6)
    work = str(tmp_path / "w")
    rc, out = _run_rc(["--work", work, "--data", data, "--batch-size", "2", "--steps", "0"])
    assert rc == 0 and "done: 0 steps" in out, out
    rc, out = _run_rc(["--work", work, "--data", data, "--batch-size", "2", "--steps", "4"], forks=forks)
    assert rc == 0 and "done: 4 steps" in out, out
    rc, out = _run_rc(["--work", work, "--data", data, "--batch-size", "2", "--steps", "4", "--resume"], forks=forks)
    assert rc == 0 and "resumed at step 4" in out and "done: 4 steps" in out, out
    rc, out = _run_rc(["--work", work, "--data", data, "--batch-size", "2", "--steps", "-1"], forks=forks)
    assert rc == 2 and "--steps must be >= 0" in out
