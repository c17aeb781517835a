"""KL-Cov (verl 0.9.1): the penalty coef·|δ| on the k tokens of largest covariance worked by hand
(call and batch scopes, k), verl's loss and gradient on the shared peer batch (``hand_peers.py``),
and where the batch scope departs from verl."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from rlsuite.suite.aggregation import aggregate
from rlsuite.suite.types import Forward
from tests.algorithms.hand import t
from tests.algorithms.hand_peers import (CC_ADV, CC_MASK, CTX, PEER_DELTA, PEER_OLD, algo, batch_of, peer_batch,
                                         peer_cases, run_loss, same_loss_and_gradient_as_the_peer)


def test_kl_cov_by_hand():
    # log π = (−0.5, −1.5 | −0.5, −1.3), δ = (0.2, 0 | 0, 0.1), Â = (1, 1 | −1, −1): mean log π = −0.95,
    # Cov = Â·(log π + 0.95) = (0.45, −0.55 | −0.45, 0.35)
    logp = [[0, -0.5, -1.5], [0, -0.5, -1.3]]
    old = [[0, -0.7, -1.5], [0, -0.5, -1.4]]
    # call, ratio 0.25 → k = 1: (0, 0) gets 0.1·|0.2| = 0.02: ℓ = (−e^0.2 + 0.02, −1 | 1, e^0.1)
    #   = (−1.201403, −1 | 1, 1.105171) → token-mean −0.024058
    call = algo("kl_cov", kl_cov_ratio=0.25, cov_scope="call")
    value, grad, m = run_loss(call, batch_of(CC_MASK, old), logp, adv=CC_ADV)
    assert float(value) == pytest.approx((-math.exp(0.2) + 0.02 - 1 + 1 + math.exp(0.1)) / 4)
    assert float(value) == pytest.approx(-0.0240579600)
    # gradient: −Â·r/4, plus 0.1·sign(δ)/4 on (0, 0): (−(1.221403 − 0.1)/4, −1/4 | 1/4, 1.105171/4)
    torch.testing.assert_close(grad, t([[0, -(math.exp(0.2) - 0.1) / 4, -0.25], [0, 0.25, math.exp(0.1) / 4]]))
    assert float(m["algo/kl_cov/penalised_frac"]) == pytest.approx(0.25)
    assert float(m["algo/kl_cov/ppo_kl_abs"]) == pytest.approx(0.3 / 4)  # verl's ppo_kl: mean |δ|
    # k = 2 (ratio 0.5): (1, 1) too, + 0.1·0.1 → −0.021558
    value, _, _ = run_loss(algo("kl_cov", kl_cov_ratio=0.5, cov_scope="call"), batch_of(CC_MASK, old), logp,
                           adv=CC_ADV)
    assert float(value) == pytest.approx(-0.0215579600)
    # batch (default): Cov on π_old with Â = ±0.707107, mean −1.025: ∝ (0.325, −0.475 | −0.525, 0.375) →
    # k = 1 picks (1, 1): ℓ = (−1.221403, −1 | 1, 1.115171) → −0.026558
    a = algo("kl_cov", kl_cov_ratio=0.25)
    b = batch_of(CC_MASK, old, rewards=[1.0, 0.0])
    pick = a.advantages(b, CTX).extras["kl_cov_pick"]
    assert pick.tolist() == [[0, 0, 0], [0, 0, 1]]
    b = dataclasses.replace(b, adv=t([[0, 1, 1], [0, -1, -1]]), extras={"kl_cov_pick": pick})
    loss, _ = a.loss(Forward(logp=t(logp)), b, CTX)
    assert float(aggregate(loss, b.loss_mask, "token-mean", 2)) == pytest.approx(-0.0265579600)


@peer_cases("kl_cov")
def test_same_loss_and_gradient_as_the_peer(name, cfg, on_policy, peer, call, loss, grad):
    same_loss_and_gradient_as_the_peer(name, cfg, on_policy, peer, call, loss, grad)


def test_kl_cov_batch_scope_departs_from_verl_off_policy_only_when_the_top_tokens_differ():
    # k = 3 off-policy (row, column): π_old's top-Cov tokens are (0, 2), (3, 3), (1, 2); π_θ's (verl's) are
    # (0, 2), (3, 3), (0, 4)
    b = peer_batch()
    a = algo("kl_cov", kl_cov_ratio=0.3)
    pick = a.advantages(b, CTX).extras["kl_cov_pick"]
    assert pick.nonzero().tolist() == [[0, 2], [1, 2], [3, 3]]
    value, _, _ = run_loss(a, b, t(PEER_OLD) + t(PEER_DELTA))
    assert float(value) != pytest.approx(-0.014944466397136062, rel=1e-6)  # verl's (cov_scope = call) value
