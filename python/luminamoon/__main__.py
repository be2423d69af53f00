"""``python -m luminamoon``: the same as the ``luminamoon`` command."""
import sys

from .cli import entry

sys.exit(entry())
