"""rlsuite: a fair benchmark suite for reinforcement-learning algorithms on LLMs.

The installed packages are ``rlsuite.suite`` (the trainer, engines, CLI), ``rlsuite.tasks``,
``rlsuite.algorithms``, ``rlsuite.sweeps`` and ``rlsuite.reports``. In the repository they are the
folders ``suite/``, ``tasks/``, ``algorithms/``, ``sweeps/`` and ``reports/`` at the root, mapped
under this namespace by ``[tool.setuptools] package-dir`` in ``pyproject.toml``; nothing installs
them as top-level names, so a user's own ``tasks.py`` or ``algorithms/`` cannot shadow them.
"""

__version__ = "0.1.0"
