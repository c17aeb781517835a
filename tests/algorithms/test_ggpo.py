"""GGPO: U_i = R_i − β·Σ_t(log π_old − log π_ref), Φ = β·log mean exp(U/β), Â_i = U_i − Φ worked by
hand (with AGRO's mean contrast), β in U and in the temperature, the three loss types, and the
reference refresh every T updates with its state."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from rlsuite.suite.types import Forward
from tests.algorithms.hand import t
from tests.algorithms.hand_full_batch import CTX, GG_BATCH, GG_MASK, GG_R, algo, with_adv


# β = 0.5.  Group 0: U = 1 − 0.5·0.4 = 0.8;  0 − 0.5·(−0.4) = 0.2;  0 − 0.5·0.4 = −0.2
#   Φ = 0.5·ln((e^1.6 + e^0.4 + e^−0.4)/3) = 0.5·ln((4.953032 + 1.491825 + 0.670320)/3) = 0.5·ln 2.371726
#     = 0.431809;  gaps 0.368191, −0.231809, −0.631809;  Ū = 0.8/3 = 0.266667, Φ − Ū = 0.165142
#   mean contrast (AGRO): 0.8 − 0.266667 = 0.533333, −0.066667, −0.466667
# Group 1: U = (1, 1) → Φ = Ū = 1, zero gap (generation consistency holds)
PHI = 0.4318089216031399


@pytest.mark.parametrize("contrast, gaps", [
    ("log_mean_exp", [0.8 - PHI, 0.2 - PHI, -0.2 - PHI, 0.0, 0.0]),
    ("mean", [0.8 - 0.8 / 3, 0.2 - 0.8 / 3, -0.2 - 0.8 / 3, 0.0, 0.0])])
def test_ggpo_gibbs_gap_and_agro_mean_contrast(contrast, gaps):
    out = algo("ggpo", beta=0.5, contrast=contrast).advantages(GG_BATCH, CTX)
    torch.testing.assert_close(out.adv, t(gaps)[:, None] * t(GG_MASK))
    m = out.metrics
    # Φ − Ū per sample: group 0 (3 samples) 0.165142, group 1 0 → mean 3·0.165142/5 = 0.099085
    assert float(m["algo/ggpo/phi_minus_ubar"]) == pytest.approx(0.0990853530, abs=1e-7)
    # sequence k1 KL to π_ref: (0.4 − 0.4 + 0.4 + 0 + 0)/5 = 0.08
    assert float(m["algo/ggpo/kl_ref"]) == pytest.approx(0.08)
    assert float(m["algo/ggpo/gibbs_gap_mean"]) == pytest.approx(sum(gaps) / 5)


def test_ggpo_beta_enters_u_and_the_temperature():
    # β = 1: U = 1 − 0.4 = 0.6, 0 + 0.4 = 0.4, −0.4;  Φ = ln((e^0.6 + e^0.4 + e^−0.4)/3)
    #   = ln((1.822119 + 1.491825 + 0.670320)/3) = ln 1.328088 = 0.283740
    out = algo("ggpo", beta=1.0).advantages(GG_BATCH, CTX)
    phi = math.log((math.exp(0.6) + math.exp(0.4) + math.exp(-0.4)) / 3)
    torch.testing.assert_close(out.adv[:3, 1], t([0.6 - phi, 0.4 - phi, -0.4 - phi]))


def test_ggpo_loss_types():
    a = algo("ggpo", beta=0.5)
    _, b = with_adv(a, GG_BATCH)
    logp = t([[0, 0.1, 0.1], [0, -0.6, 0], [0, -2.0, -1.0], [0, -0.5, 0], [0, -0.5, 0]])  # π_θ ≠ π_old (= 0)
    # reinforce: ℓ = −sg(Â)·log π → row 0: −0.368191·0.1 = −0.0368191 per token
    loss, _ = a.loss(Forward(logp=logp), b, CTX)
    assert float(loss[0, 1]) == pytest.approx(-(0.8 - PHI) * 0.1)
    # squared_gap: live gap with π_θ: row 0 U(θ) = 1 − 0.5·(0.3 + 0.3) = 0.7 → 0.7 − Φ = 0.268191
    # (the gradient of ½(U(θ) − Φ)²/β w.r.t. log π_t is −(U(θ) − Φ)); row 1 (ref 0.4): U(θ) = 0 − 0.5·(−0.6 − 0.4)
    # = 0.5 → 0.5 − Φ = 0.068191
    sq = algo("ggpo", beta=0.5, loss_type="squared_gap")
    x = logp.clone().requires_grad_(True)
    loss, _ = sq.loss(Forward(logp=x), b, CTX)
    loss.sum().backward()
    assert float(x.grad[0, 1]) == pytest.approx(-(0.7 - PHI)) and float(x.grad[1, 1]) == pytest.approx(-(0.5 - PHI))
    y = logp.clone().requires_grad_(True)  # the same gradient from the squared gap written out
    u = t(GG_R) - 0.5 * ((y - b.ref_logp) * b.loss_mask).sum(-1)
    (0.5 * (u - b.extras["ggpo_baseline"]).square() / 0.5).sum().backward()
    torch.testing.assert_close(x.grad * b.loss_mask, y.grad * b.loss_mask)
    # ppo_clip: ratio e^0.1 = 1.105171 inside 1 ± 0.2 → ℓ = −Â·r = −0.368191·1.105171
    loss, _ = algo("ggpo", beta=0.5, loss_type="ppo_clip").loss(Forward(logp=logp), b, CTX)
    assert float(loss[0, 1]) == pytest.approx(-(0.8 - PHI) * math.exp(0.1))


def test_ggpo_reference_refresh_every_t_updates_and_logging():
    a, calls = algo("ggpo", refresh_every=2), []
    ctx = SimpleNamespace(refresh_reference=lambda: calls.append(1))
    assert a.advantages(GG_BATCH, CTX).metrics["algo/ggpo/refreshed"] == 0
    a.after_update(ctx), a.after_update(ctx)  # update 2 → refresh
    m = a.advantages(GG_BATCH, CTX).metrics  # this batch is scored with the fresh π_ref
    assert len(calls) == 1 and m["algo/ggpo/refreshed"] == 1 and m["algo/ggpo/refreshes"] == 1
    a.after_update(ctx)  # update 3: no refresh; the logged event is committed
    assert a.advantages(GG_BATCH, CTX).metrics["algo/ggpo/refreshed"] == 0
    for _ in range(5):  # updates 4..8 → refreshes at 4, 6, 8
        a.after_update(ctx)
    assert len(calls) == 4 and a.state_dict()["updates"] == 8
    b = algo("ggpo", refresh_every=2)
    b.load_state_dict(a.state_dict())
    assert b.state_dict() == a.state_dict()
    never = algo("ggpo", refresh_every=None)
    for _ in range(10):
        never.after_update(ctx)
    assert len(calls) == 4
    for _ in range(2):
        algo("ggpo", refresh_every=1).after_update(SimpleNamespace())  # no refresh offered: no error
