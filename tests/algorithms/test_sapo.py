"""SAPO: the soft gate f_τ(r) = σ(τ(r − 1))·4/τ, τ by the advantage's sign, worked by hand (value,
gradient, gate mean, on policy), verl's loss and gradient on the shared peer batch
(``hand_peers.py``), and TRL's float32 τ."""

from __future__ import annotations

import math

import pytest
import torch

from tests.algorithms.hand import t
from tests.algorithms.hand_peers import (PEER_DELTA, PEER_OLD, algo, batch_of, peer_batch, peer_cases, run_loss,
                                         same_loss_and_gradient_as_the_peer)


sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731


# ========================================================================================
# SAPO: ℓ = −f_τ(r)·Â, f_τ(r) = σ(τ(r − 1))·4/τ, τ = τ_pos (1.0) if Â > 0 else τ_neg (1.05)

def test_sapo_by_hand():
    # row 0: Â = +1, r = 1.2: f = 4σ(0.2) = 2.199336;  row 1: Â = −1, r = 0.8: f = σ(−0.21)·4/1.05 = 1.705494
    # seq-mean of one-token rows: (−2.199336 + 1.705494)/2 = −0.246921
    b = batch_of([[0, 1], [0, 1]], [[0, 0], [0, 0]])
    value, grad, m = run_loss(algo("sapo"), b, [[0, math.log(1.2)], [0, math.log(0.8)]], adv=[1.0, -1.0])
    assert float(value) == pytest.approx((-4 * sig(0.2) + sig(-0.21) * 4 / 1.05) / 2)
    assert float(value) == pytest.approx(-0.2469211557)
    # gradient −Â·4σ'(τ(r−1))·r, /2: row 0 −4·σ(0.2)σ(−0.2)·1.2/2 = −0.594040; row 1 +4·σ(−0.21)σ(0.21)·0.8/2 = 0.395622
    torch.testing.assert_close(grad, t([[0, -0.5940397745], [0, 0.3956222122]]))
    assert float(m["algo/sapo/gate_mean"]) == pytest.approx((4 * sig(0.2) + sig(-0.21) * 4 / 1.05) / 2)
    # on-policy f(1) = 2/τ and the gradient is the plain −Â∇log π
    value, grad, _ = run_loss(algo("sapo"), b, [[0, 0], [0, 0]], adv=[1.0, -1.0])
    assert float(value) == pytest.approx((-2.0 + 2 / 1.05) / 2)
    torch.testing.assert_close(grad, t([[0, -0.5], [0, 0.5]]))


@peer_cases("sapo")
def test_same_loss_and_gradient_as_the_peer(name, cfg, on_policy, peer, call, loss, grad):
    same_loss_and_gradient_as_the_peer(name, cfg, on_policy, peer, call, loss, grad)


def test_sapo_equals_trl_sapo_too():
    # TRL 1.16.0 (loss_type sapo, the same verl advantages) on the shared batch: loss −0.041932914592374027.
    # It differs from verl's −0.04193294931102248 by 3.5e-8 because TRL builds τ with torch.where on Python
    # floats, i.e. in float32 (1.05 → 1.0499999523); with τ_neg rounded so, the suite gives TRL's number.
    b = peer_batch()
    logp = t(PEER_OLD) + t(PEER_DELTA)
    value, _, _ = run_loss(algo("sapo"), b, logp)
    assert float(value) == pytest.approx(-0.041932914592374027, abs=1e-7)
    tau32 = float(torch.tensor(1.05, dtype=torch.float32))
    value, g, _ = run_loss(algo("sapo", tau_neg=tau32), b, logp)
    assert float(value) == pytest.approx(-0.041932914592374027, rel=1e-10)
    torch.testing.assert_close(g[0, 1:], t([-0.0852543887763, -0.101286998655, -0.059513080978, -0.0812675212201]),
                               rtol=1e-9, atol=1e-12)
