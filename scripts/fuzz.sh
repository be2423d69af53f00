#!/usr/bin/env bash
# Build and run the libFuzzer targets of the C core (fuzz/fuzz_*.c).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET=60] [TARGET...]
#
# TARGET is a name like `wal` or `fuzz_wal` (default: every fuzz/fuzz_*.c).
# Each target runs for SECONDS on a working corpus in $BUILD/corpus/<target>
# (kept between runs, git-ignored) seeded from fuzz/corpus/<target>/ (committed,
# never written).  Crash / leak / timeout inputs go to fuzz/findings/ (git-ignored).
# Prints the executions of each target (libFuzzer's final stats) and exits
# non-zero if any target found anything.
# Environment: LM_FUZZ_BUILD (build dir, default build-fuzz), CC (default clang),
# JOBS (build jobs, default 2), LM_FUZZ_ARGS (extra libFuzzer flags).
# Reproduce a finding:  build-fuzz/fuzz_<target> fuzz/findings/<file>
set -euo pipefail
cd "$(dirname "$0")/.."

SECS=${1:-60}
shift || true
BUILD=${LM_FUZZ_BUILD:-build-fuzz}
JOBS=${JOBS:-2}
FINDINGS=fuzz/findings

if ! [[ "$SECS" =~ ^[0-9]+$ ]]; then
  echo "usage: scripts/fuzz.sh [SECONDS_PER_TARGET=60] [TARGET...]" >&2
  exit 2
fi

targets=()
if [ $# -eq 0 ]; then
  for f in fuzz/fuzz_*.c; do targets+=("$(basename "$f" .c)"); done
else
  for t in "$@"; do
    t=${t#fuzz_}
    [ -f "fuzz/fuzz_$t.c" ] || { echo "no such target: $t (fuzz/fuzz_$t.c)" >&2; exit 2; }
    targets+=("fuzz_$t")
  done
fi

echo "== fuzz: building ${#targets[@]} targets in $BUILD (clang, -fsanitize=fuzzer,address,undefined)"
CC=${CC:-clang} cmake -S fuzz -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j"$JOBS" --target "${targets[@]}" >/dev/null

mkdir -p "$FINDINGS" "$BUILD/logs"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# Extra flags from the environment (word-split on purpose).
read -r -a extra <<<"${LM_FUZZ_ARGS:-}"

# Targets run PARALLEL at a time (default: the number of CPUs, at most 2), each
# for SECS seconds; results are printed in target order once all have finished.
PARALLEL=${LM_FUZZ_PARALLEL:-$(( $(nproc) < 2 ? 1 : 2 ))}

run_target() {  # $1 = fuzz_<name>; writes $BUILD/logs/<name>.result
  local t=$1 short=${1#fuzz_}
  local work="$BUILD/corpus/$short" seeds="fuzz/corpus/$short" log="$BUILD/logs/$short.log"
  mkdir -p "$work"
  local before start rc=0 secs execs rate after result
  before=$(find "$FINDINGS" -maxdepth 1 -name "$short-*" | wc -l)
  start=$(date +%s)
  local dirs=("$work")
  [ -d "$seeds" ] && dirs+=("$seeds")
  timeout $((SECS + 120)) "$BUILD/$t" -max_total_time="$SECS" -print_final_stats=1 -timeout=30 \
    -rss_limit_mb=2560 -malloc_limit_mb=2048 -artifact_prefix="$FINDINGS/$short-" \
    "${extra[@]}" "${dirs[@]}" >"$log" 2>&1 || rc=$?
  secs=$(( $(date +%s) - start ))
  # CPU seconds of the target (children's user+system time of this subshell).
  local st cpu
  read -r -a st </proc/$BASHPID/stat
  cpu=$(( (st[15] + st[16]) / $(getconf CLK_TCK) ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  after=$(find "$FINDINGS" -maxdepth 1 -name "$short-*" | wc -l)
  result=ok
  if [ "$rc" -ne 0 ] || [ "$after" -gt "$before" ]; then
    result="FINDING (rc=$rc, log $log)"
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$short" "${execs:-0}" "${rate:-?}" "$secs" "$cpu" "$result" >"$BUILD/logs/$short.result"
}

for t in "${targets[@]}"; do
  rm -f "$BUILD/logs/${t#fuzz_}.result"
  while [ "$(jobs -rp | wc -l)" -ge "$PARALLEL" ]; do wait -n || true; done
  run_target "$t" &
done
wait

failed=0
total_execs=0
printf '%-22s %12s %10s %8s %8s  %s\n' target executions exec/s seconds cpu_s result
for t in "${targets[@]}"; do
  short=${t#fuzz_}
  if [ ! -f "$BUILD/logs/$short.result" ]; then
    printf '%-22s %12s %10s %8s %8s  %s\n' "$short" "?" "?" "?" "?" "NO RESULT"
    failed=1
    continue
  fi
  IFS=$'\t' read -r _ execs rate secs cpu result <"$BUILD/logs/$short.result"
  printf '%-22s %12s %10s %8s %8s  %s\n' "$short" "$execs" "$rate" "$secs" "$cpu" "$result"
  total_execs=$((total_execs + execs))
  if [ "$result" != ok ]; then
    failed=1
    grep -E 'INVARIANT FAILED|ERROR: |runtime error|SUMMARY|Test unit written' "$BUILD/logs/$short.log" | head -n 8 | sed 's/^/    /'
  fi
done
echo "total executions: $total_execs"
if [ "$failed" -ne 0 ]; then
  echo "fuzz: findings kept in $FINDINGS/ (reproduce: $BUILD/fuzz_<target> $FINDINGS/<file>)" >&2
  exit 1
fi
echo "fuzz: no findings"
