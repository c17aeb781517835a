"""The old import path of :mod:`suite.engines.speculative`: this name is that module (kept so existing
imports, and patches of its globals, keep working; new code imports the package)."""

import sys

from suite.engines import speculative as _module

sys.modules[__name__] = _module
