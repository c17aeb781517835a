"""The asynchronous-correction entries M2PO and A-3PO, and A*-PO, through the unchanged trainer on the
tiny model with a behaviour policy held two updates back (``rollout.sync=lag``, ``rollout.staleness=2``):
staleness 0, 1, 2, 2 over four updates. A-3PO's interpolation weight follows the staleness
(α = (s − 1)/s); its π_prox is μ itself while α = 0; M2PO masks nothing on policy and keeps the kept
tokens' second moment below τ once μ is stale; A*-PO generates and charges its reference samples."""

from __future__ import annotations

import math

import pytest

from rlsuite.suite.cli import main
from rlsuite.suite.runfolder import read_jsonl
from tests import fakes  # noqa: F401  (fake tasks)


def _rows(tmp_path, capsys, algo: str) -> list[dict]:
    code = main(["run", "--task", "_parity_test", "--algo", algo, "--budget", "updates=4",
                 "--set", "model.warm_start=none", "--set", "rollout.sync=lag", "--set", "rollout.staleness=2",
                 "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = read_jsonl(out.strip().splitlines()[-1].split("run_dir: ")[1] + "/metrics.jsonl")
    assert [r["offpolicy/staleness_max"] for r in rows] == [0, 1, 2, 2]
    assert all(math.isfinite(r["loss/total"]) for r in rows)
    return rows


def test_a3po_interpolates_by_staleness_under_lag(tmp_path, capsys):
    rows = _rows(tmp_path, capsys, "a3po")
    assert [r["algo/a3po/staleness_mean"] for r in rows] == [0, 1, 2, 2]
    assert [r["algo/a3po/alpha_mean"] for r in rows] == [0, 0, 0.5, 0.5]  # (s − 1)/s, 0 at s = 0
    for r in rows[:2]:  # α = 0: π_prox = μ, so |π_prox − π_old| is the engine's |μ − π_old|
        assert r["algo/a3po/prox_abs_err"] == pytest.approx(r["mismatch/logp_abs_diff_mean"], rel=1e-5)
        assert r["algo/a3po/weight_mean"] == pytest.approx(1.0)
    assert rows[1]["mismatch/logp_abs_diff_mean"] > 1e-3  # μ really is stale


def test_m2po_masks_only_stale_tokens_under_lag(tmp_path, capsys):
    rows = _rows(tmp_path, capsys, "m2po")
    assert rows[0]["algo/m2po/m2"] < 1e-9 and rows[0]["algo/m2po/masked_frac"] == 0.0  # on policy
    for r in rows[1:]:
        assert r["algo/m2po/m2"] > 0
        assert r["algo/m2po/m2_kept"] < 0.04  # the kept tokens' second moment is below τ_M2
        assert (r["algo/m2po/masked_frac"] > 0) == (r["algo/m2po/m2"] >= 0.04)


def test_a_star_po_samples_and_charges_its_reference_under_lag(tmp_path, capsys):
    rows = _rows(tmp_path, capsys, "a_star_po")
    assert rows[0]["budget/flops_anchor"] > 0  # stage 1: N reference samples per new prompt, charged
    for r in rows:
        assert r["algo/a_star_po/anchorless_groups"] == 0.0
        assert 0.0 <= r["algo/a_star_po/v_star_mean"] <= 1.0  # binary rewards: V* ∈ [0, 1]
        assert r["algo/a_star_po/sq_err_mean"] >= 0.0
