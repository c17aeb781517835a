"""RLOO: the leave-one-out advantage R_i − mean_{j≠i} R_j worked by hand, and both loss modes: verl's
PPO clip with token-mean and the paper's sequence REINFORCE (value and gradient)."""

from __future__ import annotations

import pytest
import torch

from rlsuite.suite.aggregation import aggregate
from rlsuite.suite.types import Forward
from tests.algorithms.hand import CTX, algo, grad_of_agg, make_batch, t


# ========================================================================================
# rloo — Â_i = G/(G−1)·(R_i − mean) = R_i − mean_{j≠i} R_j

def test_rloo_leave_one_out_advantage():
    a = algo("rloo")
    # prompt 0: R = (1, 0, 0): 1 − (0+0)/2 = 1;  0 − (1+0)/2 = −0.5 (×2)  [= 1.5·(2/3, −1/3, −1/3)]
    # prompt 1: R = (1, 1, 0): 1 − 0.5 = 0.5 (×2);  0 − 1 = −1
    mask = [[0, 1, 1], [0, 1, 0], [0, 1, 1], [0, 1, 1], [0, 1, 0], [0, 1, 1]]
    batch = make_batch(mask, [0, 0, 0, 1, 1, 1], [1.0, 0.0, 0.0, 1.0, 1.0, 0.0])
    adv = a.advantages(batch, CTX).adv
    torch.testing.assert_close(adv, t([1.0, -0.5, -0.5, 0.5, 0.5, -1.0])[:, None] * t(mask))


RLOO_MASK = [[0, 1, 1], [0, 1, 1], [0, 1, 1]]
RLOO_REWARDS = [1.0, 0.0, 0.0]                        # → Â = (1, −0.5, −0.5)


def test_rloo_verl_mode_is_ppo_clip_token_mean():
    a = algo("rloo")                                    # mode verl, ε = 0.2
    assert a.aggregation == "token-mean"
    assert a.needs == {"old_logp", "ref_logp"}          # β = 0.001 > 0
    # ratios: row 0 (1.5, 1.0), row 1 (0.5, 1.0), row 2 (2.0, 1.0)
    # row 0 (Â = 1):    r 1.5 → max(−1.5, −1.2) = −1.2;  r 1 → −1
    # row 1 (Â = −.5):  r 0.5 → max(0.25, 0.4) = 0.4;  r 1 → 0.5
    # row 2 (Â = −.5):  r 2 → max(1.0, 0.6) = 1.0 (no dual clip);  r 1 → 0.5
    # token-mean: (−1.2 − 1 + 0.4 + 0.5 + 1 + 0.5)/6 = 0.2/6 = 1/30
    batch = make_batch(RLOO_MASK, [0, 0, 0], RLOO_REWARDS)
    old = t([[0, -1.0, -2.0], [0, -0.3, -0.4], [0, -2.5, -0.6]])
    logp = old + torch.log(t([[1, 1.5, 1.0], [1, 0.5, 1.0], [1, 2.0, 1.0]]))
    batch = batch.replace(adv=a.advantages(batch, CTX).adv, old_logp=old)
    loss, metrics = a.loss(Forward(logp=logp), batch, CTX)
    torch.testing.assert_close(loss, t([[0, -1.2, -1.0], [0, 0.4, 0.5], [0, 1.0, 0.5]]))
    assert aggregate(loss, batch.loss_mask, a.aggregation, 3).item() == pytest.approx(1 / 30)
    assert metrics["stats/clip_frac"].item() == pytest.approx(2 / 6)   # the r = 1.5 and r = 0.5 tokens


def test_rloo_paper_mode_is_sequence_reinforce():
    a = algo("rloo", mode="paper")
    assert a.aggregation == "seq-mean-token-sum"        # via the property, whatever cfg.aggregation says
    assert algo("rloo", mode="paper", aggregation="seq-mean-token-mean").aggregation == "seq-mean-token-sum"
    assert "old_logp" not in a.needs
    # log π(y_i|x) = token sums: row 0: −0.5 − 1 = −1.5;  row 1: −0.2 − 0.3 = −0.5;  row 2: −1 − 2 = −3
    # loss = −(1/G) Σ_i Â_i log π(y_i|x) = −(1/3)(1·(−1.5) − 0.5·(−0.5) − 0.5·(−3))
    #      = −(1/3)(−1.5 + 0.25 + 1.5) = −0.25/3 = −1/12
    logp = t([[0, -0.5, -1.0], [0, -0.2, -0.3], [0, -1.0, -2.0]])
    batch = make_batch(RLOO_MASK, [0, 0, 0], RLOO_REWARDS)
    batch = batch.replace(adv=a.advantages(batch, CTX).adv)          # no old_logp: no ratio is used
    loss, _, grad = grad_of_agg(a, logp, batch)
    torch.testing.assert_close(loss, t([[0, 0.5, 1.0], [0, -0.1, -0.15], [0, -0.5, -1.0]]))
    assert aggregate(loss, batch.loss_mask, a.aggregation, 3).item() == pytest.approx(-1 / 12)
    # gradient −Â_i/G on every token of y_i: −1/3, +1/6, +1/6
    torch.testing.assert_close(grad, t([-1 / 3, 1 / 6, 1 / 6])[:, None] * t(RLOO_MASK))
