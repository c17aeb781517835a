"""GPG: Â_i = α·(R_i − mean_G R) with α = B/#{R ≠ 0} worked by hand and equal to verl 0.9.1's
numbers, and the plain policy-gradient loss −Â·log π with token-mean (value and gradient) on the
shared input (``hand_verl.py``)."""

from __future__ import annotations

import pytest
import torch

from rlsuite.suite.aggregation import aggregate
from rlsuite.suite.types import Forward
from tests.algorithms.hand import t
from tests.algorithms.hand_verl import CTX, LOGP, MASK, close, shared_batch, with_adv
from tests.fakes import make_entry


VERL_GPG = [0.4999999701976776, -1.0, 0.4999999701976776, 0.375, -0.375, 1.0499999523162842]
VERL_GPG_LOSS = 0.10249998420476913  # compute_policy_loss_gpg, token-mean


# ========================================================================================
# GPG — Â_i = α·(R_i − mean_G R), α = B / #{R ≠ 0} = 6/4 = 1.5 (rewards 1, 1, 0.5, 0.7 are non-zero)
# a: mean 2/3 → 1.5·(1/3, −2/3, 1/3) = 0.5, −1, 0.5;  b: mean 0.25 → ±0.375;  c: mean 0 → 1.5·0.7 = 1.05
GPG_HAND = [0.5, -1.0, 0.5, 0.375, -0.375, 1.05]


def test_gpg_advantage_and_alpha():
    out = make_entry("gpg").advantages(shared_batch(), CTX)
    torch.testing.assert_close(out.adv, t(GPG_HAND)[:, None] * t(MASK))
    assert out.metrics["algo/gpg/alpha"] == 1.5
    close(out.adv[:, 1], VERL_GPG)
    # every reward 0: #{R ≠ 0} is clamped to 1 → α = B = 6 (and every advantage is 0)
    zero = make_entry("gpg").advantages(shared_batch([0.0] * 6), CTX)
    assert zero.metrics["algo/gpg/alpha"] == 6.0 and (zero.adv == 0).all()


def test_gpg_loss_is_plain_policy_gradient():
    alg = make_entry("gpg")
    assert alg.aggregation == "token-mean" and alg.cfg.kl_coef == 0 and "old_logp" not in alg.needs
    _, b = with_adv(alg, shared_batch())
    x = (t(LOGP) * t(MASK)).requires_grad_(True)
    loss, _ = alg.loss(Forward(logp=x), b, CTX)
    # −Â·log π per token (no ratio: log π_old plays no part): row 0 0.5·(0.5 + 1.0) = 0.75, row 1 −1·2 = −2,
    # row 2 0.5·0.6 = 0.3, row 3 0.375·1.5 = 0.5625, row 4 −0.375·1.0 = −0.375, row 5 1.05·1.8 = 1.89
    # Σ = 1.1275 over 11 tokens = 0.1025
    total = aggregate(loss, b.loss_mask, alg.aggregation, 4)
    assert float(total.detach()) == pytest.approx(0.1025)
    assert float(total.detach()) == pytest.approx(VERL_GPG_LOSS, abs=1e-6)
    total.backward()  # ∂/∂log π_t = −Â_i / 11
    torch.testing.assert_close(x.grad, -t(GPG_HAND)[:, None] * t(MASK) / 11)
