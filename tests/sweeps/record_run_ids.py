"""Record the run ids of every bundled sweep spec (``sweeps/*.yaml``) into ``run_ids.json``.

``python -m tests.sweeps.record_run_ids`` rewrites the fixture; ``test_run_ids.py`` compares
the current expansion with it. Rerun only for a deliberate identity change, and list that
change in ``INTENDED_CHANGES`` of the test.
"""

from __future__ import annotations

import json
from pathlib import Path

FIXTURE = Path(__file__).with_name("run_ids.json")
SPECS = Path(__file__).resolve().parents[2] / "sweeps"


def current_run_ids() -> dict[str, list[str]]:
    """Spec name → the run ids of its expansion, in expansion order."""
    from rlsuite.sweeps.spec import expand, load

    return {p.stem: [r.run_id for r in expand(load(str(p)))] for p in sorted(SPECS.glob("*.yaml"))}


CLIP_EPS_ENTRIES = ("3po", "ggpo", "reinforce_pp", "reinforce_pp_baseline", "rloo")
"""Entries whose clip knob was ``algo.clip_eps`` (now the alias of clip_eps_low/clip_eps_high)."""


def entry_run_ids() -> dict[str, str]:
    """``<algo>`` → the run id of (arith, tiny, seed 0) at the entry's defaults, for every
    registered entry; ``<algo>|clip_eps=0.1`` → with the old clip key set, for the entries above."""
    from rlsuite import algorithms  # noqa: F401
    from rlsuite.algorithms.base import ALGORITHMS
    from rlsuite.suite.spec import resolve

    out = {name: resolve("arith", name, "tiny", 0).run_id for name, _ in sorted(ALGORITHMS.items())
           if not name.startswith("_")}  # (tests register private entries)
    for name in CLIP_EPS_ENTRIES:
        out[f"{name}|clip_eps=0.1"] = resolve("arith", name, "tiny", 0, sets=[("algo.clip_eps", 0.1)]).run_id
    return out


if __name__ == "__main__":
    FIXTURE.write_text(json.dumps(current_run_ids() | {"_entries": entry_run_ids()}, indent=1) + "\n")
    print(f"wrote {FIXTURE}")
