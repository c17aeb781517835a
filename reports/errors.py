"""The error type for bad report input; the CLI prints it and exits 2."""

from __future__ import annotations


class ReportError(ValueError):
    """Bad input to a report (no run folders, unknown column, ...).

    The message names the problem and the valid options.
    """
