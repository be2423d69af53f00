#!/usr/bin/env bash
# Build the wheel once, then for each torch given install it into a fresh venv (no system site-packages)
# holding only that torch, the wheel's dependencies and the test tools, and run there, from a copy of
# the tests outside the checkout: wheel_smoke.py (every operator) and the operator, StringTensor and
# stage tests (test_ops.py, test_string_tensor.py, test_stages.py). A summary line per torch at the end;
# the exit status is non-zero when any torch failed.
#
#   scripts/check_wheel.sh [TORCH ...]
#     TORCH: a torch wheel file, or a pip requirement (torch==2.14.1). Default: this machine's torch
#     2.13.0 CPU wheel and torch 2.14.1 (CUDA build, runs on the CPU), from the local wheel folders.
# Environment: LM_WHEEL_PATH (use this wheel instead of building one), LM_CHECK_DIR (work folder,
# default a temporary one, removed at the end unless LM_KEEP=1), PYTHON, MAX_JOBS.
#
# The operators (luminamoon/_ops*.so) use only the LibTorch stable ABI: printed first, the C++ symbols it
# needs from torch (none: only the C shim). Example, the three torches of issue 15's proof:
#   scripts/check_wheel.sh /opt/wheels/torch-2.13.0+cpu-*.whl torch==2.14.1 torch==2.10.0
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3}
work=${LM_CHECK_DIR:-$(mktemp -d /tmp/lm-check-wheel.XXXXXX)}
mkdir -p "$work"
[ "${LM_KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT

if [ $# -eq 0 ]; then
  set -- "$(ls /opt/wheels/torch-2.13.0*-cp311-*.whl 2>/dev/null | head -n 1)" "torch==2.14.1"
  [ -n "$1" ] || { shift; set -- "torch==2.13.0" "$@"; }
fi

whl=${LM_WHEEL_PATH:-}
if [ -z "$whl" ]; then
  echo "== building the wheel (scripts/build_wheel.sh)"
  whl=$(LM_WHEEL_DIR="$work/dist" PYTHON="$PY" scripts/build_wheel.sh) || exit 1
fi
echo "wheel: $whl ($(du -h "$whl" | cut -f1))"
mkdir -p "$work/unpacked" && (cd "$work/unpacked" && "$PY" -m zipfile -e "$whl" .)
for so in "$work"/unpacked/luminamoon/_ops*.so; do
  cxx=$(nm -D --undefined-only "$so" | c++filt | grep -v '^ *U aoti\|torch_' | grep -cE 'c10::|at::|torch::' || true)
  echo "$(basename "$so"): C++ symbols needed from torch: $cxx (the rest: its C shim aoti_torch_*/torch_*)"
  [ "$cxx" = 0 ] || rc_stable=1
done

cp -r tests/python "$work/tests"
summary=()
rc=${rc_stable:-0}
i=0
for t in "$@"; do
  i=$((i + 1))
  venv="$work/venv$i"
  echo "== torch $t: fresh venv $venv"
  "$PY" -m venv "$venv"
  vpy="$venv/bin/python"
  # /etc/xdg/pip/constraints.txt caps torch at the releases on this disk; PIP_CONSTRAINT= lifts it
  # for an explicitly requested older/newer one.
  if ! PIP_CONSTRAINT= "$vpy" -m pip install -q --disable-pip-version-check "$t" >"$venv.pip.log" 2>&1 ||
     ! "$vpy" -m pip install -q --disable-pip-version-check "$whl" "xxhash>=3,<4" pytest hypothesis \
       >>"$venv.pip.log" 2>&1; then
    tail -n 20 "$venv.pip.log"
    summary+=("torch $t: INSTALL FAILED")
    rc=1
    continue
  fi
  tv=$("$vpy" -c "import torch; print(torch.__version__)")
  (cd "$work" && env -u PYTHONPATH "$vpy" tests/wheel_smoke.py) >"$venv.smoke.log" 2>&1
  s=$?
  tail -n 1 "$venv.smoke.log"
  (cd "$work" && env -u PYTHONPATH "$vpy" -m pytest -q -p no:cacheprovider tests/test_ops.py \
     tests/test_string_tensor.py tests/test_stages.py) >"$venv.pytest.log" 2>&1
  p=$?
  grep -E "^(FAILED|ERROR)" "$venv.pytest.log" | cut -c1-200
  line=$(tail -n 1 "$venv.pytest.log")
  summary+=("torch $tv: smoke $([ $s -eq 0 ] && echo ok || echo FAILED); pytest: $line")
  [ $s -eq 0 ] && [ $p -eq 0 ] || rc=1
done
echo "== summary ($(basename "$whl"))"
printf '%s\n' "${summary[@]}"
exit $rc
