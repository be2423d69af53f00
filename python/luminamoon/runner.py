"""Old path of luminamoon.cli.runner (issue 18): the same module object."""
import importlib, sys
sys.modules[__name__] = importlib.import_module("luminamoon.cli.runner")
