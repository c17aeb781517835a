"""``python -m rlsuite.tasks.sandbox [--python PATH]``: print which sandbox layers work here."""

from rlsuite.tasks.sandbox import main

main()
