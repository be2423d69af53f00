#!/usr/bin/env bash
# Compile every CUDA source with nvcc, without a GPU, so CUDA code never rots unseen.
#
#   csrc/*.cu      always (needs only nvcc): sm_90 SASS + compute_90 PTX, -Werror on all warnings.
#   torch_ops/*.cu against torch's headers, when they can be found:
#                  - a CUDA build of torch (its include dir has c10/cuda/impl/cuda_cmake_macros.h), or
#                  - the CPU wheel, whose include dir ships the c10/cuda and ATen/cuda headers but not
#                    the generated c10/cuda/impl/cuda_cmake_macros.h: a one-line stand-in
#                    (#define C10_CUDA_BUILD_SHARED_LIBS, what CUDA builds of torch ship) is written
#                    to a temp dir.  Without -Werror there: torch's own headers warn under nvcc.
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

# torch's include dir (no import of torch: a CUDA torch may not import on a machine without its libraries)
TI="$("$PYTHON" - <<'EOF' 2>/dev/null || true
import importlib.util, os
spec = importlib.util.find_spec("torch")
if spec and spec.origin:
    d = os.path.join(os.path.dirname(spec.origin), "include")
    print(d if os.path.isdir(os.path.join(d, "c10", "cuda")) else "")
EOF
)"
if [ -z "$TI" ]; then
  msg="torch headers with c10/cuda not found for $PYTHON"
  if [ "${LM_REQUIRE_TORCH_CUDA:-0}" = "1" ]; then echo "  FAIL  torch_ops/*.cu: $msg"; exit 1; fi
  echo "  skip  torch_ops/*.cu: $msg"
else
  SHIM=()
  if [ ! -e "$TI/c10/cuda/impl/cuda_cmake_macros.h" ]; then
    mkdir -p "$TMP/shim/c10/cuda/impl"
    printf '#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n' > "$TMP/shim/c10/cuda/impl/cuda_cmake_macros.h"
    SHIM=(-I"$TMP/shim")
    echo "  note  torch at $TI is a CPU build: compiling torch_ops/*.cu with a stand-in cuda_cmake_macros.h"
  fi
  STD=c++17
  if grep -q "C++20 or later" "$TI/ATen/ATen.h" 2>/dev/null; then STD=c++20; fi
  PYINC="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
  for f in torch_ops/*.cu; do
    [ -e "$f" ] || continue
    out="$TMP/torch_$(basename "$f" .cu).o"
    if "$NVCC" -std=$STD -O3 -gencode "$GENCODE" --expt-relaxed-constexpr -Xcompiler -fPIC -w \
        -DTORCH_EXTENSION_NAME=_C -DTORCH_API_INCLUDE_EXTENSION_H -DLM_WITH_CUDA=1 \
        "${SHIM[@]}" -I"$TI" -I"$TI/torch/csrc/api/include" -I"$PYINC" \
        -Icsrc -Itorch_ops -Icore/include -c "$f" -o "$out"; then
      echo "  ok    $f (-std=$STD)"
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
