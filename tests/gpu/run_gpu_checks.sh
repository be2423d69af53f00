#!/usr/bin/env bash
# Every GPU check in one go, on a fresh GPU machine with torch + nvcc and no network:
#   1. build in place, as setup.py always does: luminamoon._ops (the operators, LibTorch stable ABI only,
#      with csrc/*.cu + torch_ops/*.cu, sm_90 only) and luminamoon._C (the pybind11 module);
#   2. pytest tests/gpu (CUDA vs CPU on every op, opcheck, torch.compile, bad input);
#   3. the GPU benchmark (bench/bench_gpu.py, 1 GB payload).
# Budget: under 6 minutes on an H200 (MAX_JOBS=16).  Run from anywhere:
#   bash tests/gpu/run_gpu_checks.sh                 # results under $OUT (or ./gpu-results)
#   bash tests/gpu/run_gpu_checks.sh --prepare-deps  # on a Debian machine with apt: fill .deps/
#                                                    # (xxhash.h, utf8proc) for a GPU machine without them
# Environment: OUT (results folder), PYTHON (default python3), MAX_JOBS (default 16),
#   TORCH_CUDA_ARCH_LIST (default 9.0), LM_BENCH_GB (default 1.0), LM_SKIP_BENCH=1.
# When .deps/ exists (Debian's libxxhash-dev, libutf8proc-dev and libutf8proc2 unpacked there with
# dpkg -x) it is used through LM_DEPS_PREFIX / LM_XXHASH_INCLUDE (setup.py's variables).
# Exit status: 0 when the build and every test passed (the benchmark reports, it does not gate).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"

if [ "${1:-}" = "--prepare-deps" ]; then
  set -e
  tmp="$(mktemp -d)"
  (cd "$tmp" && apt-get download libxxhash-dev libutf8proc-dev libutf8proc2)
  mkdir -p .deps
  for deb in "$tmp"/*.deb; do dpkg -x "$deb" .deps; done
  rm -rf "$tmp"
  echo "prepared $ROOT/.deps:"; find .deps -name 'xxhash.h' -o -name 'utf8proc.h' -o -name 'libutf8proc.so*'
  exit 0
fi

START=$(date +%s)
OUTDIR="${OUT:-$ROOT/gpu-results}"
mkdir -p "$OUTDIR"
LOG="$OUTDIR/run_gpu_checks.log"
exec > >(tee -a "$LOG") 2>&1
stamp() { echo "== [$(( $(date +%s) - START ))s] $*"; }

export MAX_JOBS="${MAX_JOBS:-16}"
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1

stamp "machine"
nvidia-smi -L 2>/dev/null || echo "nvidia-smi: not available"
command -v nvcc >/dev/null || { [ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"; }
nvcc --version 2>/dev/null | tail -1 || echo "nvcc: not found (the build will be CPU-only and the GPU tests fail)"
"$PYTHON" -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available())"

if [ -d "$ROOT/.deps" ]; then
  export LM_DEPS_PREFIX="$ROOT/.deps"
  export LM_XXHASH_INCLUDE="$ROOT/.deps/usr/include"
  for d in "$ROOT"/.deps/usr/lib/*-linux-gnu "$ROOT/.deps/usr/lib"; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  done
  echo "using dependencies from .deps/"
elif [ ! -e /usr/include/xxhash.h ] && [ ! -e /usr/local/include/xxhash.h ]; then
  echo "warning: xxhash.h not found and no .deps/: prepare one with '$0 --prepare-deps' on a Debian machine"
fi

stamp "build (MAX_JOBS=$MAX_JOBS, TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST)"
# build_clib first: setup.py's core library (core/*.c) is a setuptools "library", which
# build_ext alone does not build.  The extension lands in python/luminamoon/ (on PYTHONPATH).
if ! timeout 180 "$PYTHON" setup.py -q build_clib build_ext --inplace > "$OUTDIR/build.log" 2>&1; then
  tail -60 "$OUTDIR/build.log"
  stamp "BUILD FAILED (full log: $OUTDIR/build.log)"
  exit 1
fi
tail -3 "$OUTDIR/build.log"
"$PYTHON" - <<'EOF' || { stamp "IMPORT FAILED"; exit 1; }
import torch, luminamoon
x = torch.ops.luminamoon.hash64(torch.tensor([0, 1], dtype=torch.int32, device="cuda"),
                                torch.tensor([97], dtype=torch.uint8, device="cuda"), 0)
print("operators loaded from", luminamoon.ops.OPS_LIBRARY, "(stable ABI); CUDA kernels registered: hash64('a') =",
      x.item())
EOF

stamp "pytest tests/gpu"
timeout 130 "$PYTHON" -m pytest tests/gpu -q -p no:cacheprovider --junitxml="$OUTDIR/gpu-tests.xml" -rs
TEST_RC=$?

if [ "${LM_SKIP_BENCH:-0}" != "1" ]; then
  stamp "benchmark"
  timeout 50 "$PYTHON" bench/bench_gpu.py --gb "${LM_BENCH_GB:-1.0}" --json "$OUTDIR/bench_gpu.json" \
    || echo "benchmark: exit $?"
fi

stamp "done: tests exit $TEST_RC"
exit $TEST_RC
