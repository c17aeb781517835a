"""VESPO (TRL 1.16.0): the detached weight φ = exp(λ + k·log w − λ·w) worked by hand (value, gradient;
φ = 1 on policy), and TRL's loss and gradient on the shared peer batch (``hand_peers.py``)."""

from __future__ import annotations

import math

import pytest
import torch

from tests.algorithms.hand import t
from tests.algorithms.hand_peers import algo, batch_of, peer_cases, run_loss, same_loss_and_gradient_as_the_peer


def test_vespo_by_hand():
    # row 0: Â = +1 (k 2, λ 3), δ = (0.1, 0.2): log w = 0.3, w = 1.349859, log φ = 3 + 0.6 − 4.049576 → φ = 0.637898
    # row 1: Â = −1 (k 3, λ 2), δ = (−0.2):    log w = −0.2, w = 0.818731, log φ = 2 − 0.6 − 1.637462 → φ = 0.788627
    # ℓ = −φ·Â·log π with log π = (−0.5, −1 | −2): (0.318949, 0.637898 | −1.577254) → token-mean −0.206802
    b = batch_of([[0, 1, 1], [0, 1, 0]], [[0, -0.6, -1.2], [0, -1.8, 0]])
    value, grad, m = run_loss(algo("vespo"), b, [[0, -0.5, -1.0], [0, -2.0, 0]], adv=[1.0, -1.0])
    p0 = math.exp(3 + 2 * 0.3 - 3 * math.exp(0.3))
    p1 = math.exp(2 + 3 * -0.2 - 2 * math.exp(-0.2))
    assert float(value) == pytest.approx((1.5 * p0 - 2 * p1) / 3) and float(value) == pytest.approx(-0.2068023516)
    # φ is detached: the gradient is −φ·Â/3
    torch.testing.assert_close(grad, t([[0, -p0 / 3, -p0 / 3], [0, p1 / 3, 0]]))
    assert float(m["algo/vespo/phi_seq_mean"]) == pytest.approx((p0 + p1) / 2)
    # at π_θ = π_old: w = 1, φ = e^λ·e^−λ = 1
    value, grad, _ = run_loss(algo("vespo"), b, [[0, -0.6, -1.2], [0, -1.8, 0]], adv=[1.0, -1.0])
    torch.testing.assert_close(grad, t([[0, -1 / 3, -1 / 3], [0, 1 / 3, 0]]))


@peer_cases("vespo")
def test_same_loss_and_gradient_as_the_peer(name, cfg, on_policy, peer, call, loss, grad):
    same_loss_and_gradient_as_the_peer(name, cfg, on_policy, peer, call, loss, grad)
