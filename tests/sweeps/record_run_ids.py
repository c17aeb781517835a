"""Record the run ids of every bundled sweep spec (``sweeps/*.yaml``) into ``run_ids.json``.

``python -m tests.sweeps.record_run_ids`` rewrites the fixture; ``test_run_ids.py`` compares
the current expansion with it. A new algorithm entry needs no re-recording: its runs are left out
of the comparison until the next recording (every recorded id must still be there, unchanged).
Recorded at the run-id reset of issue 32 (``spec.json`` schema 2); rerun for a deliberate identity
change or a new bundled spec, and say which ids changed or were added, and why, in the commit.
"""

from __future__ import annotations

import json
from pathlib import Path

FIXTURE = Path(__file__).with_name("run_ids.json")
SPECS = Path(__file__).resolve().parents[2] / "sweeps"


def current_run_ids(leave_out: frozenset[str] = frozenset()) -> dict[str, list[str]]:
    """Spec name → the run ids of its expansion, in expansion order, without the runs of the
    entries in ``leave_out`` (entries added since the recording: an ``algorithms: all`` spec gains
    their runs, and no recorded id changes)."""
    from rlsuite.sweeps.spec import expand, load

    return {p.stem: [r.run_id for r in expand(load(str(p))) if r.algo.name not in leave_out]
            for p in sorted(SPECS.glob("*.yaml"))}


def entry_run_ids() -> dict[str, str]:
    """``<algo>`` → the run id of (arith, tiny, seed 0) at the entry's defaults, for every
    registered entry."""
    from rlsuite import algorithms  # noqa: F401
    from rlsuite.algorithms.base import ALGORITHMS
    from rlsuite.suite.spec import resolve

    return {name: resolve("arith", name, "tiny", 0).run_id for name, _ in sorted(ALGORITHMS.items())
            if not name.startswith("_")}  # (tests register private entries)


if __name__ == "__main__":
    FIXTURE.write_text(json.dumps(current_run_ids() | {"_entries": entry_run_ids()}, indent=1) + "\n")
    print(f"wrote {FIXTURE}")
