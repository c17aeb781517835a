"""LUSPO (TRL 1.16.0): the clipped sequence ratio with length-weighted aggregation worked by hand
(value, gradient, clip fraction; GSPO's value on the same batch), and TRL's loss and gradient on the
shared peer batch (``hand_peers.py``)."""

from __future__ import annotations

import math

import pytest
import torch

from tests.algorithms.hand import t
from tests.algorithms.hand_peers import algo, batch_of, peer_cases, run_loss, same_loss_and_gradient_as_the_peer


def test_luspo_by_hand():
    # row 0: Â = +1, δ = (0.1, 0.2, 0.3) → s = e^0.2 = 1.221403 > 1.2 → ℓ0 = −1.2 (clipped: no gradient)
    # row 1: Â = −1, δ = (−0.1, 0)       → s = e^−0.05 = 0.951229  → ℓ1 = +0.951229
    # L = (|y0|ℓ0 + |y1|ℓ1)/N = (3·(−1.2) + 2·0.951229)/2 = −0.848771
    # d/dlog π on row 1: (2/2)·s/|y1| = 0.475615 per token
    b = batch_of([[0, 1, 1, 1], [0, 1, 1, 0]], [[0] * 4] * 2)
    value, grad, m = run_loss(algo("luspo"), b, [[0, 0.1, 0.2, 0.3], [0, -0.1, 0, 0]], adv=[1.0, -1.0])
    assert float(value) == pytest.approx((-3.6 + 2 * math.exp(-0.05)) / 2)
    torch.testing.assert_close(grad, t([[0, 0, 0, 0], [0, 0.4756147123, 0.4756147123, 0]]))
    assert float(m["stats/clip_frac_high"]) == pytest.approx(3 / 5)  # the 3 tokens of the clipped sequence
    # GSPO differs only by the length weights: its seq-mean-token-mean value is (−1.2 + 0.951229)/2
    gspo = algo("gspo", clip_eps_low=0.2, clip_eps_high=0.2)
    value, _, _ = run_loss(gspo, b, [[0, 0.1, 0.2, 0.3], [0, -0.1, 0, 0]], adv=[1.0, -1.0])
    assert float(value) == pytest.approx((-1.2 + math.exp(-0.05)) / 2)


@peer_cases("luspo")
def test_same_loss_and_gradient_as_the_peer(name, cfg, on_policy, peer, call, loss, grad):
    same_loss_and_gradient_as_the_peer(name, cfg, on_policy, peer, call, loss, grad)
