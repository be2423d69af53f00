#!/usr/bin/env bash
# Build the self-contained luminamoon wheel into dist/ (or $LM_WHEEL_DIR) and print its path.
#
# The wheel's two shared objects (luminamoon._C, the pybind11 module; luminamoon._ops, the operators)
# need nothing beyond the C/C++ runtime and torch: xxHash is compiled in header-only (XXH_INLINE_ALL),
# utf8proc is linked statically from libutf8proc.a with its symbols hidden (setup.py, LM_WHEEL=1). Both are still taken from their Debian packages at build time
# (libxxhash-dev, libutf8proc-dev: scripts/setup.sh installs them; LM_DEPS_PREFIX points at an
# unpacked copy on a machine without root).
#
# The build runs against the torch installed in $PYTHON's environment (no build isolation: an isolated
# build would fetch a multi-gigabyte CUDA torch) and reuses build/ (objects compiled by an earlier
# `setup.py build_ext --inplace` or `pip install -e .` with the same flags are only relinked).
# _ops uses only the LibTorch stable ABI (TORCH_TARGET_VERSION 2.10): it loads under every torch >= 2.10;
# _C still uses torch's regular C++ ABI until it is made free of libtorch (docs/stable_abi.md).
#
# Environment: PYTHON (default python3), MAX_JOBS (default 1), LM_WHEEL_DIR (default dist),
# LM_FORCE_CPU / TORCH_CUDA_ARCH_LIST as for setup.py.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
out=${LM_WHEEL_DIR:-dist}
mkdir -p "$out"
out=$(cd "$out" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
log="$tmp/build.log"
if ! LM_WHEEL=1 MAX_JOBS=${MAX_JOBS:-1} "$PY" -m pip wheel --no-build-isolation --no-deps \
      --disable-pip-version-check -w "$tmp" . >"$log" 2>&1; then
  tail -n 60 "$log" >&2
  echo "build_wheel: pip wheel failed (log above)" >&2
  exit 1
fi
whl=$(ls "$tmp"/luminamoon-*.whl)
rm -f "$out"/luminamoon-*.whl
mv "$whl" "$out/"
echo "$out/$(basename "$whl")"
