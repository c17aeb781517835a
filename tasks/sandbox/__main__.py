"""``python -m tasks.sandbox [--python PATH]``: print which sandbox layers work here."""

from tasks.sandbox import main

main()
