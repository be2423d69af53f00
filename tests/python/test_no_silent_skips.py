"""Issue 17 part 3: a test whose dependency is missing fails the run instead of
skipping silently; only GPU tests may skip (and shared-corpus tests outside CI).
Runs pytest on a scratch folder holding this suite's conftest.py."""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

SCRATCH_TESTS = '''
import pytest

def test_missing_dependency():
    pytest.importorskip("luminamoon_no_such_module_for_the_skip_test")

@pytest.mark.skipif(True, reason="some environment reason")
def test_skipif():
    pass

def test_gpu_skip():
    pytest.skip("CUDA not available")

def test_corpus_skip():
    pytest.skip("shared corpus not found at /nowhere")

@pytest.mark.xfail(strict=True, reason="a known bug")
def test_xfail():
    assert False

def test_ok():
    pass
'''


def run_scratch(tmp_path, env_extra, module_level=False):
    shutil.copy(os.path.join(HERE, "conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_scratch.py").write_text(SCRATCH_TESTS)
    if module_level:
        (tmp_path / "test_module_skip.py").write_text(
            "import pytest\npytest.importorskip('luminamoon_no_such_module_either')\n\ndef test_x():\n    pass\n")
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "LM_ALLOW_SKIPS")}
    env.update(env_extra)
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", str(tmp_path)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr


def test_missing_dependency_and_other_skips_fail(tmp_path):
    rc, out = run_scratch(tmp_path, {})
    assert rc == 1, out
    assert "FAILED test_scratch.py::test_missing_dependency" in out
    assert "luminamoon_no_such_module_for_the_skip_test" in out and "only GPU tests may skip" in out
    assert "ERROR test_scratch.py::test_skipif" in out and "some environment reason" in out  # a setup error
    assert "SKIPPED" in out and "CUDA not available" in out and "shared corpus not found" in out
    assert "XFAIL test_scratch.py::test_xfail" in out and "PASSED test_scratch.py::test_ok" in out
    assert "1 failed, 1 passed, 2 skipped, 1 xfailed, 1 error" in out, out


def test_corpus_skip_fails_in_ci_and_module_level_skip_fails(tmp_path):
    rc, out = run_scratch(tmp_path, {"CI": "1"}, module_level=True)
    assert rc != 0, out
    assert "luminamoon_no_such_module_either" in out and "only GPU tests may skip" in out
    assert "ERROR" in out  # a collection error


def test_lm_allow_skips_turns_it_off(tmp_path):
    rc, out = run_scratch(tmp_path, {"LM_ALLOW_SKIPS": "1"})
    assert rc == 0 and "1 passed, 4 skipped, 1 xfailed" in out, out
