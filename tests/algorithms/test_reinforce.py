"""REINFORCE: ℓ_t = −Â_i·log π with Â_i = R_i − b for both baselines (group mean, none) worked by
hand: advantages, per-token loss, token-mean value and gradient."""

from __future__ import annotations

import pytest
import torch

from rlsuite.suite.aggregation import aggregate
from tests.algorithms.hand import CTX, algo, grad_of_agg, make_batch, t


# ========================================================================================
# reinforce — ℓ_t = −Â_i·log π, Â_i = R_i − b (b = 0 or the group mean); token-mean

RF_MASK = [[0, 1, 1, 0], [0, 1, 0, 0], [0, 1, 1, 1]]
RF_LOGP = [[0, -0.5, -1.0, 0], [0, -2.0, 0, 0], [0, -0.1, -0.2, -0.3]]


@pytest.mark.parametrize("baseline, adv_seq, loss_rows, agg", [
    # R = (2, 0, 1), group mean 1 → Â = (1, −1, 0)
    # ℓ: row 0: −1·(−0.5) = 0.5, −1·(−1) = 1.0;  row 1: +1·(−2) = −2;  row 2: 0
    # token-mean over 6 tokens: (0.5 + 1 − 2)/6 = −1/12
    ("group_mean", [1.0, -1.0, 0.0], [[0, 0.5, 1.0, 0], [0, -2.0, 0, 0], [0, 0, 0, 0]], -0.5 / 6),
    # b = 0 → Â = R = (2, 0, 1)
    # ℓ: row 0: 1.0, 2.0;  row 1: 0;  row 2: 0.1, 0.2, 0.3 → sum 3.6, /6 = 0.6
    ("none", [2.0, 0.0, 1.0], [[0, 1.0, 2.0, 0], [0, 0, 0, 0], [0, 0.1, 0.2, 0.3]], 0.6),
])
def test_reinforce_both_baselines(baseline, adv_seq, loss_rows, agg):
    a = algo("reinforce", baseline=baseline)
    batch = make_batch(RF_MASK, [0, 0, 0], [2.0, 0.0, 1.0])
    adv = a.advantages(batch, CTX).adv
    torch.testing.assert_close(adv, t(adv_seq)[:, None] * t(RF_MASK))
    batch = batch.replace(adv=adv)
    loss, _, grad = grad_of_agg(a, t(RF_LOGP), batch)
    torch.testing.assert_close(loss, t(loss_rows))
    assert aggregate(loss, batch.loss_mask, a.aggregation, 3).item() == pytest.approx(agg)
    # ∂/∂logp_t of the token mean = −Â_i/6 on policy tokens, 0 elsewhere
    torch.testing.assert_close(grad, -t(adv_seq)[:, None] * t(RF_MASK) / 6)
    assert a.group_relative is (baseline == "group_mean")
