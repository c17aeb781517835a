"""GMPO (verl 0.9.1's geo_mean): the clipped per-token log-ratios and the geometric-mean sequence
ratio worked by hand (value, gradient, clip fractions), and verl's loss and gradient on the shared
peer batch (``hand_peers.py``)."""

from __future__ import annotations

import pytest
import torch

from tests.algorithms.hand import t
from tests.algorithms.hand_peers import algo, batch_of, peer_cases, run_loss, same_loss_and_gradient_as_the_peer


# ========================================================================================
# GMPO (verl geo_mean): δ̃ = σ·min(σδ, σ·clip(δ, −ε, ε)), s_i = exp(Σ δ̃ / (|y| + 1e-8)), ℓ_i = −Â_i s_i

def test_gmpo_by_hand():
    # row 0: Â = +1, δ = (0.1, 0.3, −0.5) → (0.1, 0.2, −0.5) (the upper clip binds) → s0 = e^{−0.2/3} = 0.935507
    # row 1: Â = −2, δ = (0.3, −0.5)      → (0.3, −0.2) (the lower clip binds)      → s1 = e^{0.05}   = 1.051271
    # seq-mean: (−0.935507 + 2·1.051271)/2 = 0.583518
    b = batch_of([[0, 1, 1, 1], [0, 1, 1, 0]], [[0] * 4] * 2)
    value, grad, m = run_loss(algo("gmpo"), b, [[0, 0.1, 0.3, -0.5], [0, 0.3, -0.5, 0]], adv=[1.0, -2.0])
    assert float(value) == pytest.approx(0.5835176035, abs=1e-8)  # verl's |y| + 1e-8 move it by 4e-9
    # d/dδ: row 0 through its unclipped tokens, −Â·s0/3 · ½ = −0.155918 (the clipped token 0);
    # row 1 through token 0 only: 2·s1/2 · ½ = 0.525636
    torch.testing.assert_close(grad, t([[0, -0.1559178309, 0, -0.1559178309], [0, 0.5256355481, 0, 0]]))
    # binding clips: high (δ > 0.2, Â > 0) row 0 token 1, low (δ < −0.2, Â < 0) row 1 token 1: 1/5 each
    assert float(m["stats/clip_frac_high"]) == pytest.approx(0.2)
    assert float(m["stats/clip_frac_low"]) == pytest.approx(0.2)
    assert float(m["stats/clip_frac"]) == pytest.approx(0.4)
    assert float(m["stats/approx_kl"]) == pytest.approx(0.06)  # −mean δ = −(−0.3)/5
    # verl 0.9.1's pg_clipfrac / _lower: every token outside (−0.2, 0.2) by Â's sign, binding or not:
    # row 0 (Â > 0) tokens 1 and 2 (0.3, −0.5), row 1 (Â < 0) tokens 0 and 1 (0.3, −0.5): 2/5 each
    assert float(m["algo/gmpo/pg_clipfrac"]) == pytest.approx(0.4)
    assert float(m["algo/gmpo/pg_clipfrac_lower"]) == pytest.approx(0.4)


@peer_cases("gmpo")
def test_same_loss_and_gradient_as_the_peer(name, cfg, on_policy, peer, call, loss, grad):
    same_loss_and_gradient_as_the_peer(name, cfg, on_policy, peer, call, loss, grad)
