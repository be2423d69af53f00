"""Build luminamoon: the C core (core/, C11) as a static library, and two extensions linking it:
  luminamoon._ops  the operators torch.ops.luminamoon.* (torch_ops/schema.cpp, ops_cpu.cpp, minhash.cpp,
                   + ops_cuda.cu, minhash_cuda.cu and csrc/*.cu when CUDA is available), written against
                   the LibTorch stable ABI only (TORCH_TARGET_VERSION 2.10): one binary for every torch
                   >= 2.10; loaded by python/luminamoon/ops.py (torch.ops.load_library)
  luminamoon._C    the pybind11 module (every other torch_ops/*.cpp), free of libtorch: no torch
                   header, library or RUNPATH

Install with `pip install --no-build-isolation -e .` after torch is installed
(an isolated build environment would fetch a multi-gigabyte CUDA torch).

Environment:
  LM_FORCE_CPU=1          build the CPU-only extension even when CUDA is found
  TORCH_CUDA_ARCH_LIST    CUDA architectures (default "9.0+PTX": sm_90 and PTX)
  MAX_JOBS                parallel compile jobs (honoured by torch's ninja build)
  LM_DEPS_PREFIX          a folder with usr/include and usr/lib/<triplet> holding
                          xxhash.h and utf8proc (Debian's packages unpacked there
                          with dpkg -x) for machines without them installed
  LM_WHEEL=1              build for a wheel (scripts/build_wheel.sh sets it): utf8proc
                          must be linked statically, debug info is stripped at link
                          time, and the library path to torch is relative ($ORIGIN)
  LM_SHARED_UTF8PROC=1    link libutf8proc.so even where libutf8proc.a exists

xxHash is header-only (XXH_INLINE_ALL in core/src); utf8proc is linked statically from
libutf8proc.a (Debian's libutf8proc-dev ships it) whenever it is found, with its symbols
hidden, so that the extension needs no libutf8proc at run time.
"""
import glob
import os
import shutil
import sys
import sysconfig

from setuptools import Extension, find_packages, setup
from setuptools.command.build_clib import build_clib as _build_clib

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


def find_static_lib(name, lib_dirs):
    """The path of lib<name>.a in lib_dirs or the system's library folders, or None."""
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    system = [os.path.join(d, multiarch) for d in ("/usr/lib", "/usr/local/lib") if multiarch]
    for d in lib_dirs + system + ["/usr/lib", "/usr/local/lib", "/usr/lib64"]:
        path = os.path.join(d, f"lib{name}.a")
        if os.path.isfile(path):
            return path
    return None


dep_inc, dep_lib = dep_dirs()
find_header("xxhash.h", dep_inc)
find_header("utf8proc.h", dep_inc)
wheel_build = os.environ.get("LM_WHEEL") == "1"
utf8proc_static = None if os.environ.get("LM_SHARED_UTF8PROC") == "1" else find_static_lib("utf8proc", dep_lib)
if wheel_build and utf8proc_static is None:
    raise SystemExit(
        "luminamoon: LM_WHEEL=1 links utf8proc statically, but libutf8proc.a was not found "
        "(Debian: apt-get install libutf8proc-dev, or set LM_DEPS_PREFIX; LM_SHARED_UTF8PROC=1 is not allowed here)")
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
    # every object is rebuilt when a header changes (build_clib otherwise compares each .c alone)
    "obj_deps": {"": rel("core/include/luminamoon/*.h") + rel("core/src/*.h")},
})

def cxx_std():
    """torch >= 2.14 headers require C++20; older ones build with C++17."""
    major, minor = (int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
    return "c++20" if (major, minor) >= (2, 14) else "c++17"


use_cuda = want_cuda()
std = cxx_std()
cxx_flags = ["-O3", f"-std={std}", "-Wall", "-Wno-unused-parameter"]
if use_cuda:
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0+PTX")

# The operators (torch.ops.luminamoon.*): their own extension, luminamoon._ops, written against the
# LibTorch stable ABI only (torch_ops/stable/stable_common.h, docs/stable_abi.md): TORCH_TARGET_VERSION
# 2.10 makes the headers refuse anything newer, and the object needs no C++ symbol from torch, only its C
# shim (aoti_torch_*, torch_*: in libtorch_cpu, and libtorch_cuda for the CUDA stream), so the one binary
# loads under every torch >= 2.10.  python/luminamoon/ops.py loads it with torch.ops.load_library.
OPS_SOURCES = ["torch_ops/schema.cpp", "torch_ops/ops_cpu.cpp", "torch_ops/minhash.cpp"]
OPS_CUDA_SOURCES = ["torch_ops/ops_cuda.cu", "torch_ops/minhash_cuda.cu"]
TORCH_TARGET_VERSION = "0x020A000000000000"  # torch 2.10 ((2 << 56) | (10 << 48)): the oldest torch the wheel serves


def pybind11_include():
    """pybind11's headers: the pybind11 package (a build requirement), else the copy every torch wheel
    ships in its include dir (a GPU machine without network may lack the package), offered through a
    folder of its own under build/ that holds only a link to it, so that _C still sees no torch header."""
    try:
        import pybind11
        return [pybind11.get_include()]
    except ImportError:
        bundled = os.path.join(os.path.dirname(torch.__file__), "include", "pybind11")
        if not os.path.isdir(bundled):
            raise SystemExit("luminamoon: pybind11 not found (pip install pybind11)")
        folder = os.path.join(ROOT, "build", "pybind11-from-torch")
        os.makedirs(folder, exist_ok=True)
        link = os.path.join(folder, "pybind11")
        if os.path.realpath(link) != os.path.realpath(bundled):
            if os.path.lexists(link):
                os.remove(link)
            os.symlink(bundled, link)
        return [folder]


sources = rel("torch_ops/*.cpp")
c_sources = [s for s in sources if s not in OPS_SOURCES]

# The link line ends with extra_link_args, after -lluminamoon_core: the archive that needs utf8proc
# comes first, so its references pull utf8proc.o out of libutf8proc.a. --exclude-libs keeps
# utf8proc's symbols local to _C (no clash with another copy loaded in the same process).
libraries = ["luminamoon_core"]
link_args = []
if utf8proc_static:
    link_args += ["-Wl,--exclude-libs,libutf8proc.a", utf8proc_static]
else:
    libraries.append("utf8proc")
# _ops needs libtorch_cpu (the C shim); it is loaded after `import torch`, and its RUNPATH names this
# torch's lib folder for a build from source; for a wheel, torch beside the installed package
# ($ORIGIN/../torch/lib, below).
from torch.utils.cpp_extension import include_paths, library_paths  # noqa: E402
try:
    torch_lib_dirs = library_paths(device_type="cuda" if use_cuda else "cpu")
except TypeError:  # torch before 2.6: library_paths(cuda=False)
    torch_lib_dirs = library_paths(cuda=use_cuda)
wheel_link = []
if wheel_build:
    # No debug info in the wheel (the objects carry -g from Python's CFLAGS: 58 MB -> a few MB),
    # and torch's libraries are found beside the installed package, not at this machine's path.
    wheel_link = ["-Wl,--strip-debug", "-Wl,-rpath,$ORIGIN/../torch/lib"]

# _C: the pybind11 module, a plain CPython extension free of libtorch (no torch header, library or
# RUNPATH: it exchanges buffers through the buffer protocol / DLPack and imports torch lazily), so it
# needs nothing from any torch and the one binary serves every torch.
c_ext = Extension(
    name="luminamoon._C",
    sources=c_sources,
    include_dirs=[core_include, os.path.join(ROOT, "torch_ops")] + pybind11_include() + dep_inc,
    language="c++",
    library_dirs=list(dep_lib),
    libraries=libraries,
    runtime_library_dirs=[] if wheel_build else list(dep_lib),
    extra_compile_args={"cxx": cxx_flags + ["-fvisibility=hidden"]},
    extra_link_args=link_args + (["-Wl,--strip-debug"] if wheel_build else []),
)

# _ops: a plain Extension (not CppExtension, which would link libtorch/libtorch_python/libc10 and add
# their C++ include dirs): torch's include dir for the stable headers, libtorch_cpu for the C shim.
try:
    torch_include = include_paths(device_type="cpu")[0]
except TypeError:
    torch_include = include_paths()[0]
ops_defines = [("TORCH_TARGET_VERSION", TORCH_TARGET_VERSION)]
ops_libs = ["luminamoon_core", "torch_cpu"]
ops_sources = list(OPS_SOURCES)
ops_compile = {"cxx": cxx_flags + ["-fvisibility=hidden"]}
if use_cuda:
    ops_sources += OPS_CUDA_SOURCES + rel("csrc/*.cu")
    ops_defines += [("LM_WITH_CUDA", "1"), ("USE_CUDA", "1")]  # USE_CUDA: the CUDA part of the C shim
    ops_libs += ["torch_cuda", "cudart"]
    ops_compile["nvcc"] = ["-O3", f"-std={std}", "--expt-relaxed-constexpr"]  # + the define_macros
ops_inc = [core_include, os.path.join(ROOT, "torch_ops", "stable"), os.path.join(ROOT, "csrc")] + \
    pybind11_include() + [torch_include]
ops_libdirs = list(torch_lib_dirs)


def cuda_root():
    """The CUDA toolkit folder that holds libcudart: torch's CUDA_HOME is guessed from the nvcc on PATH,
    which is wrong where that nvcc is a wrapper script (e.g. /usr/local/bin/nvcc -> CUDA_HOME=/usr/local)."""
    for root in (CUDA_HOME, os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and any(glob.glob(os.path.join(root, sub, "libcudart.so*")) for sub in ("lib64", "lib")):
            return root
    return CUDA_HOME


if use_cuda:
    croot = cuda_root()
    ops_inc.append(os.path.join(croot, "include"))
    ops_libdirs += [os.path.join(croot, "lib64"), os.path.join(croot, "lib")]
ops_ext = Extension(
    name="luminamoon._ops",
    sources=ops_sources,
    include_dirs=ops_inc,
    language="c++",
    library_dirs=ops_libdirs,
    libraries=ops_libs,
    runtime_library_dirs=[] if wheel_build else torch_lib_dirs,
    define_macros=ops_defines,
    extra_compile_args=ops_compile,
    extra_link_args=wheel_link,
)
# One object folder for every kind of build: `setup.py build_ext --inplace`, `pip install -e .` (which
# would otherwise compile into a throw-away temporary folder) and `pip wheel .` (scripts/build_wheel.sh).
# The compile commands are the same in all three (LM_WHEEL=1 changes only the link), so a wheel built
# after an editable install only relinks: ninja (build_ext) and build_clib skip up-to-date objects.
SHARED_TEMP = os.path.join(ROOT, "build", f"temp.{sysconfig.get_platform()}-{sys.implementation.cache_tag}")


class BuildClib(_build_clib):
    def finalize_options(self):
        super().finalize_options()
        self.build_temp = self.build_clib = SHARED_TEMP


class BuildExt(BuildExtension.with_options(use_ninja=True)):
    """``build_ext`` also (re)builds the C core library first, so that ``setup.py build_ext --inplace``
    alone never links a stale ``libluminamoon_core.a`` (``build`` and ``pip install`` run both anyway;
    distutils runs each command once per invocation)."""

    def finalize_options(self):
        super().finalize_options()
        self.build_temp = SHARED_TEMP

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
    ext_modules=[c_ext, ops_ext],
    cmdclass={"build_clib": BuildClib, "build_ext": BuildExt},
    python_requires=">=3.10",
    install_requires=["numpy", "pyarrow>=15"],
    extras_require={"polars": ["polars"], "test": ["pytest", "pytest-xdist", "hypothesis", "polars"],
                    "ray": ["ray[data]==2.60.0"]},  # luminamoon.ray, luminamoon run --engine ray
    entry_points={"console_scripts": ["luminamoon=luminamoon.cli:entry"]},
    zip_safe=False,
)
