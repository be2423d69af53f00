#!/usr/bin/env bash
# Set up everything, then run every test: the C core's GoogleTest suite (plain and
# under AddressSanitizer + UndefinedBehaviorSanitizer), every libFuzzer target
# (LM_FUZZ_SECONDS each, default 10: a smoke run that keeps CI under its 30 minutes on the 2-core
# machine; scripts/fuzz.sh 600 for a real session), the multi-threaded tests under
# ThreadSanitizer, the nvcc compile check of all CUDA sources, and the pytest suite.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
JOBS=${JOBS:-2}
export LM_WERROR=1  # CI: warnings are errors in setup.py's core build (CMake has LM_WERROR ON by default)

scripts/setup.sh --system
# The Python side of the set-up (pip, ~2 minutes of mostly one core, then the extension's build)
# runs beside the C core's builds and tests, which need only the system packages.
setup_log=$(mktemp)
scripts/setup.sh >"$setup_log" 2>&1 &
setup_pid=$!
finish_setup() {  # waits for the set-up, prints its output, stops the run if it failed
  local rc=0
  wait "$setup_pid" || rc=$?
  echo "== set-up (pip, extension) [$(date +%T)]"
  grep -v "^WARNING: Location .* is ignored" "$setup_log" || true
  rm -f "$setup_log"
  if [ "$rc" -ne 0 ]; then echo "setup failed (exit $rc)" >&2; exit "$rc"; fi
}
trap '[ -n "${setup_pid:-}" ] && kill "$setup_pid" 2>/dev/null || true' EXIT

echo "== core: GoogleTest [$(date +%T)]"
cmake -S . -B build-cmake -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLM_BUILD_BENCH=ON >/dev/null
cmake --build build-cmake -j"$JOBS" >/dev/null
ctest --test-dir build-cmake --output-on-failure -j"$JOBS" | tail -n 4

echo "== core: GoogleTest under ASan + UBSan [$(date +%T)]"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DLM_SANITIZE=ON -DLM_BUILD_BENCH=OFF >/dev/null
cmake --build build-asan -j"$JOBS" >/dev/null
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j"$JOBS" | tail -n 4

echo "== core: libFuzzer targets (ASan + UBSan), ${LM_FUZZ_SECONDS:-10} s each [$(date +%T)]"
scripts/fuzz.sh "${LM_FUZZ_SECONDS:-10}"

echo "== core: ThreadSanitizer on the multi-threaded tests [$(date +%T)]"
scripts/tsan.sh

finish_setup  # (nvcc's torch_ops half needs torch's headers, pytest everything)
setup_pid=

echo "== CUDA sources compile with nvcc [$(date +%T)]"
if command -v nvcc >/dev/null 2>&1 && [ -x scripts/check_cuda_compile.sh ]; then
  scripts/check_cuda_compile.sh
else
  echo "nvcc not found: CUDA compile check skipped"
fi

echo "== pytest (a skip fails the run unless it is a GPU test's, or a shared-corpus test's outside CI: tests/python/conftest.py) [$(date +%T)]"
log=$(mktemp)
rc=0
# two worker processes (pytest-xdist): most tests wait on subprocesses, fsync and process start-up
# (import torch), so two at a time cut the suite from ~15 to ~11 minutes on the 2-core CI machine
# (1,700 tests then; 2,148 took 19.6 min on the slower Xeon VM, Dec 2; three workers were slower there);
# PYTEST_WORKERS=0 runs them one at a time in this process
$PY -m pytest -q -p no:cacheprovider -rs --durations=30 -n "${PYTEST_WORKERS:-2}" tests/python "$@" 2>&1 | tee "$log" || rc=$?
skipped=$(grep -Eo '[0-9]+ skipped' "$log" | tail -n 1 | cut -d' ' -f1 || true)
rm -f "$log"
echo "pytest: ${skipped:-0} skipped (listed above with their reasons)"
exit "$rc"
