"""Exceptions with fixed meanings at the CLI boundary (exit codes in :mod:`rlsuite.suite.cli`)."""


class BadInput(ValueError):
    """Invalid user input (unknown name, malformed spec, wrong type, out of range).

    The message names the problem and the valid options; the CLI exits 2 and writes nothing.
    """

    def __init__(self, problems: str | list[str]) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("; ".join(self.problems) if len(self.problems) == 1 else
                         "\n".join(f"  - {p}" for p in self.problems))


class Diverged(RuntimeError):
    """Training produced a non-finite loss or gradient (state ``diverged``, exit 3)."""


class Interrupted(RuntimeError):
    """A signal asked the run to stop at the next step boundary."""

    def __init__(self, state: str, code: int) -> None:
        super().__init__(state)
        self.state = state
        self.code = code
