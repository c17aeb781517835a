"""The adaptive KL coefficient (``algo.kl_target``, verl's ``kl_ctrl.type=adaptive``): after each
step β ← β·(1 + clip(KL/target − 1, ±0.2)·B/horizon), applied from the next step, kept across a
resume; at the default (None) β stays ``kl_coef`` and the run id is unchanged."""

from __future__ import annotations

import pytest

from tests import fakes  # noqa: F401  (the _parity_test task)
from tests.integration.test_checkpoints import _crash_and_resume, _spec


def test_the_controller_moves_beta_by_the_clipped_error(tmp_path, monkeypatch):
    from rlsuite.suite.checkpoint import unpack
    from rlsuite.suite.runfolder import read_jsonl

    spec = _spec(("algo.kl_coef", 0.1), ("algo.kl_target", 1e-9), ("algo.kl_horizon", 64),
                 ("train.checkpoint_every", 2), updates=4)
    assert spec.run_id != _spec(("algo.kl_coef", 0.1), ("train.checkpoint_every", 2), updates=4).run_id
    _, last, _ = _crash_and_resume(spec, tmp_path, monkeypatch, crash_at=3)  # metrics replay exactly
    rows = read_jsonl(tmp_path / "ref" / spec.run_id / "metrics.jsonl")
    B = rows[0]["budget/samples"]
    beta = [r["stats/kl_coef"] for r in rows]
    # step 1: π_old = π_ref, KL = 0 → error −1 clipped to −0.2; later KL ≫ 1e-9 → +0.2
    assert beta[0] == pytest.approx(0.1)
    assert beta[1] == pytest.approx(0.1 * (1 - 0.2 * B / 64))
    assert beta[2] == pytest.approx(beta[1] * (1 + 0.2 * B / 64))
    assert unpack(last)["kl_coef"] == pytest.approx(beta[3] * (1 + 0.2 * B / 64))


def test_a_fixed_beta_without_a_target(tmp_path):
    from rlsuite.suite.runfolder import read_jsonl
    from rlsuite.suite.runner import execute

    code, run = execute(_spec(("algo.kl_coef", 0.1), updates=3), tmp_path)
    assert code == 0
    assert [r["stats/kl_coef"] for r in read_jsonl(run / "metrics.jsonl")] == [0.1, 0.1, 0.1]
