#!/usr/bin/env bash
# Set up everything luminamoon needs on a fresh Debian/Ubuntu machine, idempotently:
# system packages (apt), torch, the Python packages, and the extension (editable).
#   scripts/setup.sh            everything
#   scripts/setup.sh --system   the system packages only (what the C core's builds and tests need)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
case "${1:-}" in
  ""|--system) ;;
  *) echo "usage: scripts/setup.sh [--system]" >&2; exit 2 ;;
esac

apt_pkgs=(build-essential cmake ninja-build pkg-config libxxhash-dev libgtest-dev libutf8proc-dev clang libclang-rt-14-dev)
missing=()
for p in "${apt_pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  echo "setup: installing system packages: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

[ "${1:-}" = --system ] && exit 0

# torch first, so that nothing later pulls a multi-gigabyte CUDA build in its place.
if ! $PY -c "import torch" 2>/dev/null; then
  echo "setup: installing torch==2.13.0"
  $PY -m pip install -q --disable-pip-version-check "torch==2.13.0"
fi
$PY -m pip install -q --disable-pip-version-check -r requirements.txt
# spaCy's English tokenizer rules ship inside spacy itself (spacy.blank("en")): no model download.

# The extension: --no-build-isolation so that it builds against the torch installed above.
echo "setup: building luminamoon (C core + torch extension)"
MAX_JOBS=${MAX_JOBS:-2} $PY -m pip install -q --disable-pip-version-check --no-build-isolation -e . \
  > build-setup.log 2>&1 || { tail -50 build-setup.log; echo "setup: build failed (full log: build-setup.log)"; exit 1; }
# pyenv installs console scripts behind shims: make sure `luminamoon` is on PATH.
if command -v pyenv >/dev/null 2>&1; then pyenv rehash >/dev/null 2>&1 || true; fi
$PY -c "import luminamoon, torch; print('setup: luminamoon', luminamoon.__version__, 'with torch', torch.__version__)"
command -v luminamoon >/dev/null 2>&1 || echo "setup: note: the luminamoon command is in $($PY -c 'import sysconfig; print(sysconfig.get_path("scripts"))'), which is not on PATH"
