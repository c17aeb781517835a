"""Clip-Cov (verl 0.9.1): the tokens whose covariance Cov = (Â − mean Â)(log π − mean log π) lies in
(lb, ub) dropped from the gradient, worked by hand on policy and off policy (k of the candidates by
the seeded draw, the call and batch scopes), and verl's loss and gradient on the shared peer batch
(``hand_peers.py``)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rlsuite.suite.aggregation import aggregate
from rlsuite.suite.types import Forward
from tests.algorithms.hand import t
from tests.algorithms.hand_peers import (CC_ADV, CC_LOGP, CC_MASK, CTX, algo, batch_of, peer_cases, run_loss,
                                         same_loss_and_gradient_as_the_peer)


def test_clip_cov_by_hand_on_policy():
    # with the entry's own Â = ±0.707107 (R = (1, 0)): Cov = (0.353553, −0.353553 | −0.353553, 0.353553);
    # lb 0.3 < Cov < 1: tokens (0, 0) and (1, 1); ratio 0.5 → k = 2 → both dropped
    # then with Â = ±1 and r = 1, ℓ = −Â·r on the others: (0, −1 | +1, 0) → token-mean 0; gradient −Â/4 on the kept
    b = batch_of(CC_MASK, CC_LOGP, rewards=[1.0, 0.0])
    a = algo("clip_cov", clip_cov_lb=0.3, clip_cov_ub=1.0, clip_cov_ratio=0.5)
    drop = a.advantages(b, CTX).extras["clip_cov_drop"]
    assert drop.tolist() == [[0, 1, 0], [0, 0, 1]]
    capped = algo("clip_cov", clip_cov_lb=0.3, clip_cov_ub=0.35, clip_cov_ratio=0.5)  # ub below 0.353553: no candidate
    assert capped.advantages(b, CTX).extras["clip_cov_drop"].sum() == 0
    b = dataclasses.replace(b, adv=t([[0, 1, 1], [0, -1, -1]]), extras={"clip_cov_drop": drop})
    lp = t(CC_LOGP).requires_grad_(True)
    loss, m = a.loss(Forward(logp=lp), b, CTX)
    aggregate(loss, b.loss_mask, a.aggregation, 2).backward()
    torch.testing.assert_close(loss, t([[0, 0, -1], [0, 1, 0]]))
    torch.testing.assert_close(lp.grad, t([[0, 0, -0.25], [0, 0.25, 0]]))
    assert float(m["algo/clip_cov/cov_clip_frac"]) == pytest.approx(0.5)


def test_clip_cov_random_draw_and_scopes():
    # ratio 0.25 → k = 1 of the two candidates, the one ctx.generator("clip_cov")'s permutation puts first
    a = algo("clip_cov", clip_cov_lb=0.3, clip_cov_ub=1.0, clip_cov_ratio=0.25)
    drop = a.advantages(batch_of(CC_MASK, CC_LOGP, rewards=[1.0, 0.0]), CTX).extras["clip_cov_drop"]
    first = torch.randperm(2, generator=torch.Generator().manual_seed(0))[0]
    assert drop.sum() == 1 and drop[[0, 1][first], [1, 2][first]] == 1
    # off-policy, cov_scope = call: old = log π − δ with δ = 0.5 on token (0, 0): r = e^0.5 = 1.648721 > 1.2 with
    # Â > 0 → PPO-clipped, so not a candidate; Cov (current log π) as above → only (1, 1), dropped (k = 2).
    # ℓ = (max(−1.648721, −1.2) = −1.2, −1 | +1, 0) → token-mean −0.3
    old = [[0, -1.0, -1.5], [0, -0.5, -1.5]]
    call = algo("clip_cov", clip_cov_lb=0.4, clip_cov_ub=1.0, clip_cov_ratio=0.5, cov_scope="call")
    value, grad, m = run_loss(call, batch_of(CC_MASK, old), CC_LOGP, adv=CC_ADV)
    assert float(value) == pytest.approx(-0.3)
    torch.testing.assert_close(grad, t([[0, 0, -0.25], [0, 0.25, 0]]))
    assert float(m["algo/clip_cov/cov_clip_frac"]) == pytest.approx(0.25) and float(m["stats/clip_frac_high"]) == 0.25
    # cov_scope = batch selects on π_old: mean log π_old = −1.125, Cov = 0.707107·(0.125, −0.375 | −0.625, 0.375):
    # no candidate in (0.4, 1) → nothing dropped: ℓ = (−1.2, −1 | 1, 1) → −0.05
    batch = algo("clip_cov", clip_cov_lb=0.4, clip_cov_ub=1.0, clip_cov_ratio=0.5)
    b = batch_of(CC_MASK, old, rewards=[1.0, 0.0])
    drop = batch.advantages(b, CTX).extras["clip_cov_drop"]
    assert drop.sum() == 0
    b = dataclasses.replace(b, adv=t([[0, 1, 1], [0, -1, -1]]), extras={"clip_cov_drop": drop})
    loss, _ = batch.loss(Forward(logp=t(CC_LOGP)), b, CTX)
    assert float(aggregate(loss, b.loss_mask, "token-mean", 2)) == pytest.approx(-0.05)


@peer_cases("clip_cov")
def test_same_loss_and_gradient_as_the_peer(name, cfg, on_policy, peer, call, loss, grad):
    same_loss_and_gradient_as_the_peer(name, cfg, on_policy, peer, call, loss, grad)
