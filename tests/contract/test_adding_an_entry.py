"""Adding an algorithm the documented way works: one new module in ``algorithms/``, nothing else
edited, and every contract test runs on it.

The test builds a copy of the package namespace in a temporary folder (the other packages linked,
``algorithms/`` a folder of links to this checkout's modules plus one new module written as the
README's recipe says), then runs ``tests/contract`` against that namespace in a subprocess,
selected by the new entry's name. The new entry must be discovered without editing
``algorithms/__init__.py`` and pass every contract; an entry that breaks a contract must fail them
(the same run with a broken variant of the file), so this test can fail.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.contract import added_package


ENTRY = textwrap.dedent('''
    """Throwaway GRPO — GRPO with the group advantage shrunk towards 0 (a test entry).

    Objective: GRPO's (``algorithms/grpo.py``) with ``Â_i = (1 − s)·(R_i − mean_G R)/(std_G R + 1e-6)``.
    Differs from GRPO by: the shrinkage ``s`` (switch ``shrink``; 0 gives GRPO).
    Citation: none (written by ``tests/contract/test_adding_an_entry.py``). Fidelity: ``description``.
    [ASSUMPTION] the shrinkage multiplies the z-scored advantage, after the std division.
    """

    from __future__ import annotations

    from dataclasses import dataclass

    from rlsuite.algorithms.base import AdvOut, Context, register
    from rlsuite.algorithms.grpo import GRPO, GRPOConfig
    from rlsuite.suite.ops import broadcast_to_tokens, group_normalised_advantage
    from rlsuite.suite.types import Batch


    @dataclass(frozen=True, kw_only=True)
    class ThrowawayConfig(GRPOConfig):
        ranges = {"shrink": "[0, 1)"}
        """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
        shrink: float = 0.5
        """s: the share of the group advantage taken away."""


    @register
    class Throwaway(GRPO):
        name = "throwaway_grpo"
        summary = "GRPO with the group advantage shrunk towards 0 (a test entry)."
        citation = "none: a test entry"
        fidelity = "description"
        assumptions = ("[ASSUMPTION] the shrinkage multiplies the z-scored advantage, after the std division",)
        switches = ("shrink",)
        Config = ThrowawayConfig
        cfg: ThrowawayConfig

        def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
            adv = group_normalised_advantage(batch.rewards, batch.group_id, self.cfg.scale_by_std)  # [B]
            return AdvOut(adv=broadcast_to_tokens(SCALE * adv, batch.loss_mask))  # [B, T]
''')


def namespace(tmp: Path, entry_source: str) -> Path:
    """A folder whose ``rlsuite`` is this checkout with ``algorithms/throwaway_grpo.py`` added."""
    return added_package.namespace(tmp, "algorithms", {"throwaway_grpo.py": entry_source})


def contract_run(ns: Path):
    return added_package.contract_run(ns, "throwaway_grpo")


@pytest.mark.slow
def test_an_entry_added_as_one_file_is_discovered_and_passes_the_contracts(tmp_path):
    ok = contract_run(namespace(tmp_path / "ok", ENTRY.replace("SCALE", "(1 - self.cfg.shrink)")))
    tail = (ok.stdout + ok.stderr)[-3000:]
    assert ok.returncode == 0, tail
    passed = int(ok.stdout.strip().splitlines()[-1].split(" passed")[0].split()[-1])
    assert passed >= 10, tail  # the entry was discovered and the per-entry contracts ran on it
    # the same entry with a dead switch (`shrink` changes nothing) breaks the live-knobs contract
    bad = contract_run(namespace(tmp_path / "bad", ENTRY.replace("SCALE", "1.0")))
    failed = [ln for ln in bad.stdout.splitlines() if ln.startswith("FAILED ")]
    assert bad.returncode == 1 and failed, (bad.stdout + bad.stderr)[-3000:]
    assert all("test_every_config_field_is_live[throwaway_grpo]" in ln for ln in failed), failed
