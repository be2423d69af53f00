#!/usr/bin/env bash
# Compile every CUDA source with nvcc, without a GPU, so CUDA code never rots unseen.
#
#   csrc/*.cu      always (needs only nvcc): sm_90 SASS + compute_90 PTX, -Werror on all warnings.
#   torch_ops/*.cu against torch's LibTorch stable-ABI headers (a CPU or CUDA build of torch >= 2.10) and
#                  pybind11's, as setup.py builds them into luminamoon._ops: sm_90 + PTX, -Werror.
#                  The C++ standard follows torch (C++20 when its ATen.h requires it, else C++17).
# Environment: NVCC (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc), PYTHON (default python3),
#              LM_CUDA_GENCODE (default "arch=compute_90,code=[sm_90,compute_90]"),
#              LM_REQUIRE_TORCH_CUDA=1 to fail (not skip) when torch's headers cannot be found.
# Exit status: non-zero when any compile fails.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
NVCC="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
PYTHON="${PYTHON:-python3}"
GENCODE="${LM_CUDA_GENCODE:-arch=compute_90,code=[sm_90,compute_90]}"
if [ ! -x "$NVCC" ]; then
  echo "check_cuda_compile: nvcc not found (set NVCC)" >&2
  exit 1
fi
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
echo "check_cuda_compile: $("$NVCC" --version | tail -1)"

fail=0
count=0
for f in csrc/*.cu; do
  [ -e "$f" ] || continue
  out="$TMP/$(basename "$f" .cu).o"
  if "$NVCC" -std=c++17 -O3 -gencode "$GENCODE" -Xcompiler -Wall,-Wextra -Werror all-warnings \
      -Icsrc -Icore/include -c "$f" -o "$out"; then
    echo "  ok    $f"
    count=$((count + 1))
  else
    echo "  FAIL  $f"
    fail=1
  fi
done

# torch's include dir (no import of torch: a CUDA torch may not import on a machine without its libraries).
# torch_ops/*.cu are the CUDA half of luminamoon._ops, written against the LibTorch stable ABI only
# (torch/csrc/stable, torch/headeronly, the C shim's CUDA part under USE_CUDA; TORCH_TARGET_VERSION 2.10):
# any torch >= 2.10's headers do, a CPU build's included (the stable headers need no c10/cuda), and
# -Werror holds for ours (torch, pybind11 and Python headers as -isystem).  pybind11's header-only exceptions carry the error types (stable_common.h).
TI="$("$PYTHON" - <<'EOF' 2>/dev/null || true
import importlib.util, os
spec = importlib.util.find_spec("torch")
if spec and spec.origin:
    d = os.path.join(os.path.dirname(spec.origin), "include")
    print(d if os.path.isdir(os.path.join(d, "torch", "csrc", "stable")) else "")
EOF
)"
PBI="$("$PYTHON" -c 'import pybind11; print(pybind11.get_include())' 2>/dev/null || true)"
if [ -z "$TI" ] || [ -z "$PBI" ]; then
  msg="torch's stable-ABI headers (torch/csrc/stable) or pybind11 not found for $PYTHON"
  if [ "${LM_REQUIRE_TORCH_CUDA:-0}" = "1" ]; then echo "  FAIL  torch_ops/*.cu: $msg"; exit 1; fi
  echo "  skip  torch_ops/*.cu: $msg"
else
  STD=c++17
  if grep -q "C++20 or later" "$TI/ATen/ATen.h" 2>/dev/null; then STD=c++20; fi
  PYINC="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
  for f in torch_ops/*.cu; do
    [ -e "$f" ] || continue
    out="$TMP/torch_$(basename "$f" .cu).o"
    if "$NVCC" -std=$STD -O3 -gencode "$GENCODE" --expt-relaxed-constexpr -Xcompiler -fPIC,-Wall,-Wextra \
        -Werror all-warnings -DTORCH_TARGET_VERSION=0x020A000000000000 -DUSE_CUDA=1 -DLM_WITH_CUDA=1 \
        -isystem "$TI" -isystem "$PBI" -isystem "$PYINC" -Icsrc -Itorch_ops/stable -Icore/include -c "$f" -o "$out"; then
      echo "  ok    $f (stable ABI, -std=$STD)"
      count=$((count + 1))
    else
      echo "  FAIL  $f"
      fail=1
    fi
  done
fi
if [ "$fail" != 0 ]; then
  echo "check_cuda_compile: FAILED"
  exit 1
fi
echo "check_cuda_compile: $count file(s) compiled"
