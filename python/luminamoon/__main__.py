"""``python -m luminamoon``: the same as the ``luminamoon`` command."""
import sys

from .cli import main

sys.exit(main())
