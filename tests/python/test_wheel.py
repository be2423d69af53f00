"""The self-contained wheel (issue 15): its shared objects need only the C/C++ runtime and torch, and it
installs and runs every operator in a fresh venv that has only torch.  It holds two: luminamoon._C (the
pybind11 module) and luminamoon._ops (the operators, LibTorch stable ABI only: no C++ symbol from torch,
only its C shim, so that one binary serves every torch >= 2.10; scripts/check_wheel.sh runs it under
several).

The wheel is $LM_WHEEL_PATH when set (scripts/check_wheel.sh sets it), else built once here by
scripts/build_wheel.sh (after an in-place or editable build it only relinks: setup.py shares build/temp.*).
"""
import glob
import os
import pathlib
import re
import shutil
import subprocess
import sys
import zipfile

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
TORCH_LIB = pathlib.Path(torch.__file__).parent / "lib"
# The C/C++ runtime (glibc's libraries, libstdc++, libgcc_s) and torch's own libraries (loaded by
# `import torch` before the extension; CUDA builds add torch's CUDA runtime).
RUNTIME = re.compile(r"^(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux-x86-64|ld-linux-aarch64"
                     r"|linux-vdso|libmvec)\.so(\.\d+)*$")
TORCH = re.compile(r"^(libc10|libc10_cuda|libtorch|libtorch_cpu|libtorch_cuda|libtorch_python|libcudart)\.so(\.\d+)*$")
FORBIDDEN = re.compile(r"utf8proc|xxhash", re.I)


def dependency_problems(so_path):
    """What is wrong with one shared object's dynamic dependencies, as a list of strings (empty: none)."""
    out = subprocess.run(["readelf", "-d", str(so_path)], capture_output=True, text=True, check=True).stdout
    problems = []
    for lib in re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out):
        if FORBIDDEN.search(lib) or not (RUNTIME.match(lib) or TORCH.match(lib)):
            problems.append(f"needs {lib}")
    for path in re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[([^\]]+)\]", out):
        for entry in path.split(":"):
            if not entry.startswith("$ORIGIN"):
                problems.append(f"searches the build machine's {entry}")
    syms = subprocess.run(["nm", "-D", "--defined-only", str(so_path)], capture_output=True, text=True,
                          check=True).stdout
    exported = [s for s in syms.split() if s.startswith(("utf8proc_", "XXH"))]
    if exported:
        problems.append(f"exports {exported[:3]} (a bundled library's symbols must stay hidden)")
    return problems


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    given = os.environ.get("LM_WHEEL_PATH")
    if given:
        return pathlib.Path(given)
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run(["bash", str(ROOT / "scripts" / "build_wheel.sh")], capture_output=True, text=True,
                       env={**os.environ, "LM_WHEEL_DIR": str(out), "PYTHON": sys.executable}, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    return pathlib.Path(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def unpacked(wheel, tmp_path_factory):
    d = tmp_path_factory.mktemp("unpacked")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(d)
    return d


def test_wheel_holds_the_package_and_the_extension(wheel, unpacked):
    names = zipfile.ZipFile(wheel).namelist()
    src = sorted(p.relative_to(ROOT / "python").as_posix() for p in (ROOT / "python" / "luminamoon").rglob("*.py"))
    assert set(src) <= set(names), sorted(set(src) - set(names))
    sos = list(unpacked.rglob("*.so"))
    assert sorted(p.name.split(".")[0] for p in sos) == ["_C", "_ops"], sos


# What a stable-ABI object may leave undefined: torch's C shim (aoti_torch_*, torch_*), the C/C++ runtime
# (versioned glibc / libstdc++ / libgcc symbols), CPython's C API (pybind11's typed errors raise through
# it: torch_ops/stable/stable_common.h) and the CUDA runtime (cuda*, __cuda*) in a CUDA build.
STABLE_OK = re.compile(r"^(aoti_torch_\w+|torch_\w+|Py\w+|_Py\w+|cuda\w+|__cuda\w+|\S+@(GLIBC|GLIBCXX|CXXABI|GCC)_[\d.]+)$")


def non_stable_symbols(so_path):
    """The undefined dynamic symbols of so_path outside STABLE_OK (weak ones aside), demangled."""
    out = subprocess.run(["nm", "-D", "--undefined-only", str(so_path)], capture_output=True, text=True,
                         check=True).stdout
    bad = [ln.split()[-1] for ln in out.splitlines() if ln.split() and ln.split()[0] == "U"]
    bad = [s for s in bad if not STABLE_OK.match(s)]
    if not bad:
        return []
    return subprocess.run(["c++filt"], input="\n".join(bad), capture_output=True, text=True,
                          check=True).stdout.split("\n")


def test_ops_library_uses_only_the_stable_c_shim_of_torch(unpacked):
    """luminamoon._ops needs no C++ symbol from torch (c10::, at::, torch::): only the C shim, so the
    one binary loads under every torch >= 2.10 (the wheel's copy and this checkout's in-place build)."""
    import luminamoon.ops
    for so in [*unpacked.rglob("_ops*.so"), pathlib.Path(luminamoon.ops.OPS_LIBRARY)]:
        assert non_stable_symbols(so) == [], so


def test_stable_symbol_check_catches_a_cpp_symbol(tmp_path):
    """The check above can fail: an object calling a c10:: function (as the operators did through
    TORCH_LIBRARY before the port) is reported, while one using only a C shim function and libstdc++ is not."""
    src = tmp_path / "t.cpp"
    src.write_text('#include <string>\nnamespace c10 { void warn(const std::string &); }\n'
                   'extern "C" int aoti_torch_get_num_threads(void);\n'
                   'int f(const std::string &s) { c10::warn(s); return aoti_torch_get_num_threads(); }\n'
                   'int g(void) { return aoti_torch_get_num_threads() + int(std::string("x").size()); }\n')
    bad_so = tmp_path / "bad.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(bad_so), str(src)], check=True)
    bad = non_stable_symbols(bad_so)
    assert any("c10::warn" in s for s in bad), bad
    assert not any("aoti_torch" in s for s in bad), bad


def test_shared_objects_need_only_the_runtime_and_torch(unpacked):
    sos = list(unpacked.rglob("*.so"))
    assert sos
    for so in sos:
        assert dependency_problems(so) == [], so


def test_ldd_resolves_everything_to_torch_or_the_runtime(unpacked):
    """ldd (with torch's lib folder on the path, as `import torch` provides) finds every library, each
    inside torch's installation or one of the C/C++ runtime's, and never libutf8proc/libxxhash."""
    site = TORCH_LIB.parent.parent
    env = {**os.environ, "LD_LIBRARY_PATH": str(TORCH_LIB)}
    for so in unpacked.rglob("*.so"):
        out = subprocess.run(["ldd", str(so)], capture_output=True, text=True, env=env, check=True).stdout
        assert "not found" not in out, out
        for line in out.splitlines():
            name = line.split()[0]
            path = line.split("=>")[1].split("(")[0].strip() if "=>" in line else ""
            assert not FORBIDDEN.search(line), line
            inside_torch = path.startswith(str(site))  # torch/lib, and nvidia/* for a CUDA torch
            assert RUNTIME.match(name) or inside_torch or name.startswith("/lib") or name.startswith(
                "linux-vdso"), line


def test_checker_catches_a_system_library(tmp_path):
    """The checks above can fail: a library linked against libutf8proc.so (as the extension was before
    issue 15) and one with an absolute RUNPATH are both reported."""
    lib_so = "/usr/lib/x86_64-linux-gnu/libutf8proc.so"
    src = tmp_path / "t.c"
    src.write_text('#include <utf8proc.h>\nconst char *f(void) { return utf8proc_version(); }\n')
    bad = tmp_path / "bad.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(bad), str(src), "-lutf8proc", f"-Wl,-rpath,{tmp_path}"],
                   check=True)
    problems = dependency_problems(bad)
    assert any("libutf8proc" in p for p in problems), (problems, lib_so)
    assert any(str(tmp_path) in p for p in problems), problems
    static = tmp_path / "static.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(static), str(src),
                    "/usr/lib/x86_64-linux-gnu/libutf8proc.a"], check=True)
    assert any("exports" in p for p in dependency_problems(static))


def local_torch_wheel():
    """A wheel of this process's torch on the disk (/opt/wheels, pip's find-links, $LM_TORCH_WHEEL), or the
    requirement string for pip to fetch."""
    if os.environ.get("LM_TORCH_WHEEL"):
        return os.environ["LM_TORCH_WHEEL"]
    v = torch.__version__
    for d in ("/opt/wheels", "/opt/pypi-more/files", str(ROOT / ".whl")):
        hits = glob.glob(os.path.join(d, f"torch-{v}-cp{sys.version_info[0]}{sys.version_info[1]}-*.whl"))
        if hits:
            return hits[0]
    return f"torch=={v}"


def test_wheel_installs_and_runs_every_operator_in_a_fresh_venv(wheel, tmp_path):
    """A venv without system site-packages, holding only torch (the same version as here), numpy/pyarrow
    (the wheel's dependencies) and xxhash (the reference of hash64): pip installs the wheel and
    tests/python/wheel_smoke.py runs every operator against plain-Python references."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    # --no-compile: pip byte-compiles every module it installs, ~25 s of CPU for torch's 3,000 files on
    # the CI machine (35 s -> 9 s); only the modules the smoke test imports get compiled, on import
    pip = [py, "-m", "pip", "install", "-q", "--no-compile", "--disable-pip-version-check"]
    r = subprocess.run(pip + [local_torch_wheel()], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run(pip + [str(wheel), "xxhash>=3,<4"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    smoke = shutil.copy(ROOT / "tests" / "python" / "wheel_smoke.py", tmp_path / "wheel_smoke.py")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    r = subprocess.run([py, smoke], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert str(venv) in r.stdout.splitlines()[0], r.stdout  # the installed wheel, not this checkout
    assert r.stdout.strip().splitlines()[-1].startswith("wheel smoke: ")
