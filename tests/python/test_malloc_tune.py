"""glibc malloc tuning for the `luminamoon run` / `demo` process (issue 14; torch_ops/module.cpp
tune_malloc_once, cli._tune_process).

Importing luminamoon must leave malloc alone; `_C.tune_malloc()` (what the run and demo commands
call) applies it on glibc and skips it whenever the user chose malloc settings through the
environment or set LM_NO_MALLOC_TUNE=1.  Each case runs in a fresh child.
"""
from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

_CHILD = "import luminamoon._C as c; print(c.tune_malloc() == c.malloc_tuned() == c.tune_malloc())"
_CHILD_VALUE = "import luminamoon._C as c; c.tune_malloc(); print(c.malloc_tuned())"
_GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


def _tuned(**env_over) -> bool:
    env = {k: v for k, v in os.environ.items()
           if k not in ("LM_NO_MALLOC_TUNE", "GLIBC_TUNABLES", "MALLOC_MMAP_THRESHOLD_",
                        "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")}
    env.update(env_over)
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True", out.stdout  # one answer, however often it is asked
    out = subprocess.run([sys.executable, "-c", _CHILD_VALUE], env=env, capture_output=True, text=True,
                         check=True)
    return {"True": True, "False": False}[out.stdout.strip()]


def test_import_leaves_malloc_alone():
    # neither importing the package nor building a pipeline tunes malloc: only the run/demo commands do
    code = ("import luminamoon, luminamoon._C as c; from luminamoon import stages; "
            "stages.FusedPipeline(); print(c.malloc_tuned())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.skipif(not _GLIBC, reason="glibc malloc only")
def test_run_command_tunes_its_process(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": 1, "text": "A sentence long enough to be a document of its own here."}\n')
    code = ("import sys, luminamoon._C as c; from luminamoon.cli import main; "
            f"rc = main(['run', {str(src)!r}, '-o', {str(tmp_path / 'out')!r}, '--quiet', '--no-report']); "
            "print(rc, c.malloc_tuned())")
    env = {k: v for k, v in os.environ.items() if k != "LM_NO_MALLOC_TUNE"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip().splitlines()[-1] == "0 True", (out.stdout, out.stderr)


def test_default_is_tuned_on_glibc():
    assert _tuned() is _GLIBC


@pytest.mark.parametrize("env", [
    {"LM_NO_MALLOC_TUNE": "1"},
    {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1048576"},
    {"GLIBC_TUNABLES": "glibc.cpu.hwcaps=-AVX512F:glibc.malloc.arena_max=2"},
    {"MALLOC_MMAP_THRESHOLD_": "1048576"},
    {"MALLOC_TRIM_THRESHOLD_": "1048576"},
    {"MALLOC_TOP_PAD_": "0"},
])
def test_user_settings_win(env):
    assert _tuned(**env) is False


@pytest.mark.parametrize("env", [{"LM_NO_MALLOC_TUNE": "0"}, {"LM_NO_MALLOC_TUNE": ""},
                                 {"GLIBC_TUNABLES": "glibc.cpu.x86_rep_movsb_threshold=4096"}])
def test_unrelated_settings_keep_tuning(env):
    assert _tuned(**env) is _GLIBC



_REUSE = r"""
import ctypes, resource, threading
import luminamoon._C
luminamoon._C.tune_malloc()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
def once(n):
    p = libc.malloc(n)
    assert p
    libc.memset(p, 1, n)
    libc.free(p)
res = []
def work():  # in a thread: its own malloc arena, like a stage thread
    for n in (1 << 20, 4 << 20, 8 << 20):
        once(n)
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(4):
        for n in (1 << 20, 4 << 20, 8 << 20):
            once(n)
    res.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
t = threading.Thread(target=work)
t.start()
t.join()
print(res[0])
"""


@pytest.mark.skipif(not _GLIBC, reason="glibc malloc only")
def test_freed_big_buffers_are_reused_without_faults():
    # 4 rounds of malloc(1, 4, 8 MB) + write + free in a thread, after one warm-up round: tuned, the
    # freed pages stay in the thread's heap (~0 faults); glibc's defaults map and fault the 8 MB
    # buffer afresh (2048 pages)
    def faults(**env_over):
        env = {k: v for k, v in os.environ.items() if k != "LM_NO_MALLOC_TUNE"}
        env.update(env_over)
        out = subprocess.run([sys.executable, "-c", _REUSE], env=env, capture_output=True, text=True, check=True)
        return int(out.stdout.strip())
    assert faults() < 256
    assert faults(LM_NO_MALLOC_TUNE="1") >= 1024
