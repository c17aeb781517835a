"""BNPO (TRL 1.16.0): the TRL entries' group advantage (R − mean)/(std + 1e-4), the clipped
surrogate with token-mean worked by hand (value, gradient, clip fractions), and TRL's own loss and
gradient on the shared peer batch (``hand_peers.py``)."""

from __future__ import annotations

import math

import pytest
import torch

from tests.algorithms.hand import t
from tests.algorithms.hand_peers import CTX, algo, batch_of, peer_cases, run_loss, same_loss_and_gradient_as_the_peer


# ========================================================================================
# TRL entries: the group advantage (R − mean)/(std + 1e-4)

def test_trl_entries_use_trls_group_advantage():
    # R = (1, 0): mean 0.5, unbiased std √0.5 = 0.707107 → ±0.5/(0.707107 + 1e-4) = ±0.707007 (GRPO: ±0.707106)
    b = batch_of([[0, 1], [0, 1]], [[0, 0], [0, 0]], rewards=[1.0, 0.0])
    for name in ("bnpo", "luspo", "vespo"):
        torch.testing.assert_close(algo(name).advantages(b, CTX).adv, t([[0, 0.7070067953], [0, -0.7070067953]]))
    torch.testing.assert_close(algo("sapo").advantages(b, CTX).adv, t([[0, 0.7071057812], [0, -0.7071057812]]))


def test_bnpo_by_hand():
    # Â = (+1 | −1), r = (1.3, 1.0 | 0.7), ε 0.2: ℓ = (−min(1.3, 1.2), −1 | max(0.7, 0.8)) = (−1.2, −1 | 0.8)
    # token-mean (−1.2 − 1 + 0.8)/3 = −0.466667; gradient −Â·r/3 on unclipped tokens: (0, −1/3 | 0 (clipped))
    b = batch_of([[0, 1, 1], [0, 1, 0]], [[0, 0, 0], [0, 0, 0]])
    value, grad, m = run_loss(algo("bnpo"), b, [[0, math.log(1.3), 0], [0, math.log(0.7), 0]], adv=[1.0, -1.0])
    assert float(value) == pytest.approx(-1.4 / 3)
    torch.testing.assert_close(grad, t([[0, 0, -1 / 3], [0, 0, 0]]))
    assert float(m["stats/clip_frac_high"]) == pytest.approx(1 / 3)
    assert float(m["stats/clip_frac_low"]) == pytest.approx(1 / 3)


@peer_cases("bnpo")
def test_same_loss_and_gradient_as_the_peer(name, cfg, on_policy, peer, call, loss, grad):
    same_loss_and_gradient_as_the_peer(name, cfg, on_policy, peer, call, loss, grad)
