#!/usr/bin/env bash
# Stable-ABI pilot (issue 15 part 2): compile torch_ops/stable/pilot_attention_mask.cpp ONCE, against
# this environment's torch headers with TORCH_TARGET_VERSION = 2.10, into a .so that uses only the C
# shim of the LibTorch stable ABI, then load that same file under each Python given and check it there:
# the result against a Python reference, opcheck (schema, autograd registration), the error type.
#
#   scripts/stable_abi_pilot.sh [PYTHON ...]     (default: python3; e.g. a venv with torch 2.14.1)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
work=$(mktemp -d /tmp/lm-stable-pilot.XXXXXX)
trap 'rm -rf "$work"' EXIT
T=$("$PY" -c "import os, torch; print(os.path.dirname(torch.__file__))")
g++ -O2 -std=c++17 -fPIC -shared -Wall -I"$T/include" \
  -DTORCH_TARGET_VERSION=0x020A000000000000 \
  -o "$work/pilot.so" torch_ops/stable/pilot_attention_mask.cpp -L"$T/lib" -ltorch_cpu
echo "built against $("$PY" -c 'import torch; print(torch.__version__)'); C++ symbols it needs from torch:"
nm -u -C "$work/pilot.so" | grep -E "c10::|at::|torch::" || echo "  none (only the C shim: aoti_torch_*, torch_*)"
cat > "$work/check.py" <<'PYEOF'
import sys, torch
torch.ops.load_library(sys.argv[1])
op = torch.ops.luminamoon_stable.attention_mask
lengths = torch.tensor([0, 3, 9, -2])
want = [[int(j < max(0, min(n, 4))) for j in range(4)] for n in (0, 3, 9, -2)]
assert op(lengths, 4).tolist() == want
torch.library.opcheck(op.default, (lengths, 4), test_utils=("test_schema", "test_autograd_registration"))
try:
    op(lengths.int(), 4)
    raise AssertionError("int32 lengths were accepted")
except RuntimeError as e:  # the stable ABI raises RuntimeError only (no TypeError/ValueError)
    assert "lengths must be int64" in str(e)
print(f"stable pilot: ok under torch {torch.__version__}")
PYEOF
rc=0
for p in "${@:-$PY}"; do
  "$p" "$work/check.py" "$work/pilot.so" || { echo "stable pilot: FAILED under $p"; rc=1; }
done
exit $rc
