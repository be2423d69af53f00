"""Build csrc/*.cu as host C++ under the launch-layout emulation (include/lm_emu.h).

    python tests/emu/build.py OUT_DIR [--plant FILE:OLD:NEW]

`build(out_dir, plant=None)` returns the path of a shared library exporting the lm_cuda_* C ABI
of csrc/luminamoon_cuda.h, whose "device pointers" are host pointers.  The only change made to
the sources is the launch syntax: `k<<<grid, block, smem, stream>>>(args)` becomes
`lmemu::launch(grid, block, smem, stream, k, args)`.  `plant=(file, old, new)` replaces one
occurrence of `old` in that file first (to check that a planted bug is caught) and fails when
`old` is not found exactly once.
"""
import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
EMU = ROOT / "tests" / "emu"
CSRC = ROOT / "csrc"
LAUNCH = re.compile(r"([A-Za-z_]\w*(?:<[\w:, ]*>)?)\s*<<<(.*?)>>>\s*\(", re.S)
CXX = os.environ.get("CXX", "g++")
FLAGS = ["-std=c++17", "-O1", "-g0", "-fPIC", "-Wall", "-Wextra", "-Wno-unknown-pragmas", "-Wno-unused-parameter",
         "-Wno-unused-function"]


def rewrite(text):
    out, n = LAUNCH.subn(lambda m: f"lmemu::launch({m.group(2)}, {m.group(1)}, ", text)
    if "<<<" in out:
        raise RuntimeError("a kernel launch was not rewritten")
    return out, n


def build(out_dir, plant=None):
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sources = sorted(CSRC.glob("*.cu"))
    objs = []
    for src in sources:
        text = src.read_text()
        if plant and plant[0] == src.name:
            if text.count(plant[1]) != 1:
                raise ValueError(f"plant: {plant[1]!r} occurs {text.count(plant[1])} times in {src.name}")
            text = text.replace(plant[1], plant[2])
        text, _ = rewrite(text)
        cpp = out_dir / (src.stem + "_emu.cpp")
        cpp.write_text(f'#line 1 "{src}"\n' + text)
        # objects are cached by content (headers included): a planted build recompiles one file
        deps = "".join(p.read_text() for p in sorted([*CSRC.glob("*.h"), *CSRC.glob("*.cuh"),
                                                          *(EMU / "include").rglob("*.h")]))
        key = hashlib.sha256((text + deps + " ".join(FLAGS)).encode()).hexdigest()[:16]
        obj = out_dir / f"{src.stem}_{key}.o"
        if not obj.exists():
            cmd = [CXX, *FLAGS, f"-I{EMU / 'include'}", f"-I{CSRC}", f"-I{ROOT / 'core' / 'include'}", "-c", str(cpp),
                   "-o", str(obj) + ".tmp"]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode:
                raise RuntimeError(f"emulation build of {src.name} failed:\n{' '.join(cmd)}\n{r.stderr[-6000:]}")
            os.replace(str(obj) + ".tmp", obj)
        objs.append(obj)
    rt = out_dir / "lm_emu_runtime.o"
    if not rt.exists():
        subprocess.run([CXX, *FLAGS, f"-I{EMU / 'include'}", "-c", str(EMU / "lm_emu_runtime.cpp"), "-o", str(rt)],
                       check=True)
    tag = hashlib.sha256("".join(o.name for o in objs).encode()).hexdigest()[:12]
    lib = out_dir / f"liblm_emu_{tag}.so"
    if not lib.exists():
        subprocess.run([CXX, "-shared", "-o", str(lib) + ".tmp", *map(str, objs), str(rt)], check=True)
        os.replace(str(lib) + ".tmp", lib)
    return lib


if __name__ == "__main__":
    plant = None
    if len(sys.argv) > 3 and sys.argv[2] == "--plant":
        plant = tuple(sys.argv[3].split(":", 2))
    print(build(sys.argv[1], plant))
