"""DRO (verl 0.9.1): ℓ = −(log π·Â − ½β(log π − log π_old)²) with token-mean, worked by hand (value,
gradient, penalty), and verl's loss and gradient on the shared peer batch (``hand_peers.py``)."""

from __future__ import annotations

import pytest
import torch

from tests.algorithms.hand import t
from tests.algorithms.hand_peers import algo, batch_of, peer_cases, run_loss, same_loss_and_gradient_as_the_peer


# ========================================================================================
# DRO: ℓ = −(log π·Â − ½β(log π − log π_old)²), token-mean

def test_dro_by_hand():
    # token 1: Â = 1, log π = −0.5, δ = 0.2:  ℓ = 0.5 + ½·0.05·0.04 = 0.501, dℓ/dlog π = −(1 − 0.05·0.2) = −0.99
    # token 2: Â = −1, log π = −1, δ = −0.4:  ℓ = −1 + ½·0.05·0.16 = −0.996, dℓ/dlog π = −(−1 + 0.02) = 0.98
    b = batch_of([[0, 1], [0, 1]], [[0, -0.7], [0, -0.6]])
    value, grad, m = run_loss(algo("dro"), b, [[0, -0.5], [0, -1.0]], adv=[1.0, -1.0])
    assert float(value) == pytest.approx((0.501 - 0.996) / 2)
    torch.testing.assert_close(grad, t([[0, -0.495], [0, 0.49]]))
    assert float(m["algo/dro/penalty"]) == pytest.approx((0.001 + 0.004) / 2)


@peer_cases("dro")
def test_same_loss_and_gradient_as_the_peer(name, cfg, on_policy, peer, call, loss, grad):
    same_loss_and_gradient_as_the_peer(name, cfg, on_policy, peer, call, loss, grad)
