"""DC-GRPO: the shaping Â_t = Â_i − λ·δ_t with δ_t = |π_old − μ| and the dual step
λ ← clip(λ + η(mean δ − c), 0, λ_max) worked by hand for each switch (order, hinge, η, λ_0, c);
λ committed once per step and capped; equality with GRPO when π_old = μ."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from tests.algorithms.hand import t
from tests.algorithms.hand_full_batch import CTX, algo, make_batch


R3 = math.sqrt(3.0)


# ========================================================================================
# DC-GRPO — δ_t = |π_old − μ|; λ ← clip(λ + η(mean δ − c), 0, λ_max); Â_t = Â_i − λ·δ_t

# R = (1, 0, 0) → GRPO Â = 2/√3 = 1.154701, −1/√3 = −0.577350 (×2)
# (π_old, μ): row 0 (0.5, 0.4), (0.3, 0.3); row 1 (0.25, 0.2), (0.6, 0.62); row 2 (0.1, 0.13)
# δ = (0.1, 0), (0.05, 0.02), (0.03) → mean δ = 0.2/5 = 0.04
DC_MASK = [[0, 1, 1], [0, 1, 1], [0, 1, 0]]
DC_OLD = [[1, 0.5, 0.3], [1, 0.25, 0.6], [1, 0.1, 1]]
DC_MU = [[1, 0.4, 0.3], [1, 0.2, 0.62], [1, 0.13, 1]]
DC_DELTA = [[0, 0.1, 0], [0, 0.05, 0.02], [0, 0.03, 0]]
DC_BATCH = make_batch(DC_MASK, [0, 0, 0], [1.0, 0.0, 0.0], old_logp=t(DC_OLD).log(), behav_logp=t(DC_MU).log())
DC_CFG = {"eta": 2.0, "lambda_init": 0.1, "delta_budget": 0.01, "lambda_max": 0.2}
A_GRPO = t([2 / R3, -1 / R3, -1 / R3])[:, None] * t(DC_MASK)


@pytest.mark.parametrize("cfg, lam, penalty", [
    # dual step first: λ = 0.1 + 2·(0.04 − 0.01) = 0.16, penalty δ
    ({}, 0.16, DC_DELTA),
    # shape with the λ the step started from (0.1)
    ({"dual_order": "shape_then_update"}, 0.1, DC_DELTA),
    # hinge: max(0, δ − 0.01) = (0.09, 0), (0.04, 0.01), (0.02)
    ({"hinge": True}, 0.16, [[0, 0.09, 0], [0, 0.04, 0.01], [0, 0.02, 0]]),
    # η = 0.5: λ = 0.1 + 0.5·0.03 = 0.115;  λ0 = 0: λ = 0.06;  c = 0.1: λ = clip(0.1 − 0.12) = 0
    ({"eta": 0.5}, 0.115, DC_DELTA), ({"lambda_init": 0.0}, 0.06, DC_DELTA),
    ({"delta_budget": 0.1}, 0.0, DC_DELTA)])
def test_dc_grpo_shaping_and_dual_step(cfg, lam, penalty):
    a = algo("dc_grpo", **{**DC_CFG, **cfg})
    out = a.advantages(DC_BATCH, CTX)
    torch.testing.assert_close(out.adv, A_GRPO - lam * t(penalty), atol=1e-5, rtol=0)
    assert out.metrics["algo/dc_grpo/lambda"] == pytest.approx(lam)
    assert float(out.metrics["algo/dc_grpo/delta_mean"]) == pytest.approx(0.04)
    # tokens with δ > c = 0.01: 0.1, 0.05, 0.02, 0.03 → 4/5 (unless c is raised)
    assert float(out.metrics["algo/dc_grpo/delta_above_c_frac"]) == pytest.approx(0.8 if lam else 0.0)


def test_dc_grpo_lambda_is_state_committed_once_per_step_and_capped():
    a = algo("dc_grpo", **DC_CFG)
    assert a.advantages(DC_BATCH, CTX).metrics["algo/dc_grpo/lambda"] == pytest.approx(0.16)
    assert a.advantages(DC_BATCH, CTX).metrics["algo/dc_grpo/lambda"] == pytest.approx(0.16)  # pure until committed
    a.after_update(CTX), a.after_update(CTX)  # two updates in one step: one dual step
    assert a.state_dict()["lambda"] == pytest.approx(0.16)
    # next step: 0.16 + 0.06 = 0.22 → capped at λ_max = 0.2
    assert a.advantages(DC_BATCH, CTX).metrics["algo/dc_grpo/lambda"] == pytest.approx(0.2)
    b = algo("dc_grpo", **DC_CFG)
    b.load_state_dict(a.state_dict())
    assert b.state_dict() == a.state_dict()


def test_dc_grpo_no_gap_is_grpo():
    b = dataclasses.replace(DC_BATCH, behav_logp=DC_BATCH.old_logp)
    torch.testing.assert_close(algo("dc_grpo").advantages(b, CTX).adv, algo("grpo").advantages(b, CTX).adv)
