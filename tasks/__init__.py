"""Task entries. Importing this package registers every built-in task.

Add a task: one module here with a :class:`rlsuite.tasks.base.Task` subclass decorated with
``@register``, imported below; outside packages use the ``rlsuite.tasks`` entry-point group.
"""

from rlsuite.tasks.base import TASKS, Environment, Grade, Task, TaskConfig, register
from rlsuite.tasks import arith, chain, code, code_toy, gsm8k, math, search, search_toy  # noqa: F401  (registration)

__all__ = ["TASKS", "Environment", "Grade", "Task", "TaskConfig", "register"]
from rlsuite.tasks import unlearn_toy  # noqa: E402,F401  (unlearning, issue 20 §3)
from rlsuite.tasks import reasoning_gym  # noqa: E402,F401  (reasoning-gym battery, issue 34 §1)
from rlsuite.tasks import hops_toy  # noqa: E402,F401  (long-horizon credit, issue 42)
