"""Child of test_review_run_kill_points.py: ``luminamoon run ARGS`` whose process dies by
os._exit(137) (as kill -9) right before or right after its LM_DIE_AT-th durable rename
(os.replace; LM_DIE_WHEN=before|after; LM_DIE_AT=0: never), and which writes
``REVIEW_RENAMES <count>`` to stderr when the run returns.  Started from tests/python/forkserver.py."""
import os
import sys

import matplotlib

matplotlib.use("Agg", force=True)  # report.png's renderer, as render_report uses it

from luminamoon.cli import main  # noqa: E402

N = int(os.environ.get("LM_DIE_AT", "0"))
WHEN = os.environ.get("LM_DIE_WHEN", "before")
count = [0]
_real = os.replace


def replace(src, dst, *a, **k):
    count[0] += 1
    if count[0] == N and WHEN == "before":
        os._exit(137)
    r = _real(src, dst, *a, **k)
    if count[0] == N and WHEN == "after":
        os._exit(137)
    return r


os.replace = replace
try:
    rc = main(sys.argv[1:])
except SystemExit as e:
    rc = e.code if isinstance(e.code, int) else 1
sys.stderr.write(f"REVIEW_RENAMES {count[0]}\n")
sys.stderr.flush()
sys.exit(rc if isinstance(rc, int) else 1)
