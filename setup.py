"""Build luminamoon: the C core (core/, C11) as a static library, and the torch
extension luminamoon._C (torch_ops/ + csrc/ when CUDA is available).

Install with `pip install --no-build-isolation -e .` after torch is installed
(an isolated build environment would fetch a multi-gigabyte CUDA torch).

Environment:
  LM_FORCE_CPU=1          build the CPU-only extension even when CUDA is found
  TORCH_CUDA_ARCH_LIST    CUDA architectures (default "9.0+PTX": sm_90 and PTX)
  MAX_JOBS                parallel compile jobs (honoured by torch's ninja build)
  LM_DEPS_PREFIX          a folder with usr/include and usr/lib/<triplet> holding
                          xxhash.h and utf8proc (Debian's packages unpacked there
                          with dpkg -x) for machines without them installed
"""
import glob
import os
import shutil
import sys

from setuptools import find_packages, setup

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, ROOT)

import torch  # noqa: E402  (torch must be installed first: see the docstring)
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension, CUDA_HOME  # noqa: E402


def rel(pattern):
    return sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern)))


def dep_dirs():
    inc, lib = [], []
    prefix = os.environ.get("LM_DEPS_PREFIX")
    if prefix:
        prefix = os.path.abspath(prefix)
        inc.append(os.path.join(prefix, "usr", "include"))
        lib += glob.glob(os.path.join(prefix, "usr", "lib", "*-linux-gnu")) + [os.path.join(prefix, "usr", "lib")]
    return inc, lib


def find_header(name, inc_dirs):
    for d in inc_dirs + ["/usr/include", "/usr/local/include"]:
        if os.path.exists(os.path.join(d, name)):
            return d
    raise SystemExit(
        f"luminamoon: {name} not found. Install it (Debian: apt-get install libxxhash-dev libutf8proc-dev) "
        "or set LM_DEPS_PREFIX to a folder holding usr/include/" + name)


def want_cuda():
    if os.environ.get("LM_FORCE_CPU") == "1":
        return False
    return torch.version.cuda is not None and CUDA_HOME is not None and shutil.which("nvcc") is not None


dep_inc, dep_lib = dep_dirs()
find_header("xxhash.h", dep_inc)
find_header("utf8proc.h", dep_inc)
core_include = os.path.join(ROOT, "core", "include")
# -Werror only where the compiler is known (CI: scripts/test.sh sets LM_WERROR=1); a GPU machine's
# compiler may warn about things ours does not, and that must not stop the build.
c_flags = ["-std=c11", "-O3", "-Wall", "-Wextra", "-fPIC", "-fvisibility=hidden"]
if os.environ.get("LM_WERROR") == "1":
    c_flags.append("-Werror")
core_lib = ("luminamoon_core", {
    "sources": rel("core/src/*.c"),
    "include_dirs": [core_include] + dep_inc,
    "cflags": c_flags,
})

def cxx_std():
    """torch >= 2.14 headers require C++20; older ones build with C++17."""
    major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    return "c++20" if (major, minor) >= (2, 14) else "c++17"


use_cuda = want_cuda()
sources = rel("torch_ops/*.cpp")
std = cxx_std()
cxx_flags = ["-O3", f"-std={std}", "-Wall", "-Wno-unused-parameter"]
define_macros = []
ext_kwargs = {}
if use_cuda:
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0+PTX")
    sources += rel("torch_ops/*.cu") + rel("csrc/*.cu")
    define_macros.append(("LM_WITH_CUDA", "1"))
    ext_kwargs["extra_compile_args"] = {"cxx": cxx_flags, "nvcc": ["-O3", f"-std={std}", "--expt-relaxed-constexpr"]}
    Ext = CUDAExtension
else:
    ext_kwargs["extra_compile_args"] = {"cxx": cxx_flags}
    Ext = CppExtension

ext = Ext(
    name="luminamoon._C",
    sources=sources,
    include_dirs=[core_include, os.path.join(ROOT, "torch_ops"), os.path.join(ROOT, "csrc")] + dep_inc,
    library_dirs=dep_lib,
    libraries=["luminamoon_core", "utf8proc"],
    runtime_library_dirs=dep_lib,
    define_macros=define_macros,
    **ext_kwargs,
)

class BuildExt(BuildExtension.with_options(use_ninja=True)):
    """``build_ext`` also (re)builds the C core library first, so that ``setup.py build_ext --inplace``
    alone never links a stale ``libluminamoon_core.a`` (``build`` and ``pip install`` run both anyway;
    distutils runs each command once per invocation)."""

    def run(self):
        self.run_command("build_clib")
        super().run()


setup(
    name="luminamoon",
    version="0.1.0",
    description="The fastest, most trustworthy text-data path into PyTorch training",
    package_dir={"": "python"},
    packages=find_packages("python"),
    libraries=[core_lib],
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExt},
    python_requires=">=3.10",
    install_requires=["numpy", "pyarrow>=15"],
    extras_require={"polars": ["polars"], "test": ["pytest", "hypothesis", "polars"],
                    "ray": ["ray[data]==2.60.0"]},  # luminamoon.ray, luminamoon run --engine ray
    entry_points={"console_scripts": ["luminamoon=luminamoon.cli:main"]},
    zip_safe=False,
)
