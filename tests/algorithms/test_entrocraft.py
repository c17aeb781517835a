"""Entrocraft: the entropy band's schedules and the acceptance rule, the advantages of each regime
(RAFT++ above the band, NSR below) worked by hand, and a softmax-bandit control test: the
controller holds a constant entropy target and follows a linear schedule, which GRPO alone does
not."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from rlsuite.algorithms.base import Context
from rlsuite.algorithms.entrocraft import Entrocraft, EntrocraftConfig, acceptance, band
from rlsuite.suite.aggregation import aggregate
from rlsuite.suite.types import Batch, Forward
from tests.algorithms.hand import t
from tests.algorithms.hand_no_prompt import ctx, make_batch


# ======================================================================================
# Entrocraft

def test_entrocraft_band_schedules_and_acceptance():
    c = EntrocraftConfig()
    assert band(0.5, c) == pytest.approx((0.5, 0.6))  # linear: 0.6 − 0.2·½, 0.7 − 0.2·½
    assert band(0.5, dataclasses.replace(c, schedule="constant")) == pytest.approx((0.6, 0.7))
    # cosine at s = ¼: f = ½(1 − cos π/4) = 0.146447 → L = 0.6 − 0.2·0.146447 = 0.570711
    assert band(0.25, dataclasses.replace(c, schedule="cosine"))[0] == pytest.approx(0.570711, abs=1e-6)
    cu = dataclasses.replace(c, schedule="custom", custom_lower=(1.0, 0.5, 0.8), custom_upper=(1.2, 1.2, 1.2))
    assert band(0.25, cu) == pytest.approx((0.75, 1.2)) and band(0.75, cu) == pytest.approx((0.65, 1.2))
    with pytest.raises(ValueError):
        EntrocraftConfig(schedule="custom")
    assert acceptance(0.9, 0.5, 0.6, "band", 5) == (1.0, 0.0)  # H > U: RAFT++
    assert acceptance(0.3, 0.5, 0.6, "band", 5) == (0.0, 1.0)  # H < L: NSR
    assert acceptance(0.55, 0.5, 0.6, "band", 5) == (1.0, 1.0) == acceptance(None, 0.5, 0.6, "band", 5)
    assert acceptance(0.65, 0.5, 0.6, "proportional", 5) == pytest.approx((1.0, 0.5))  # e = 0.1 → 1 − 0.5
    assert acceptance(0.9, 0.5, 0.6, "off", 5) == (1.0, 1.0)


def test_entrocraft_advantages_mechanisms_and_branches():
    # rewards (1, 0, 0, 1): unbiased std 1/√3·… = 0.57735 → z = ±0.866024
    b = make_batch([[1]] * 4, [0] * 4, [1.0, 0.0, 0.0, 1.0])
    hi = ctx(entropy=0.9, progress=0.5)  # band (0.5, 0.6): H > U → RAFT++
    lo = ctx(entropy=0.1, progress=0.5)  # H < L → NSR
    z = 0.866024
    out = Entrocraft(EntrocraftConfig()).advantages(b, hi)
    torch.testing.assert_close(out.adv[:, 0], t([z, 0, 0, z]), rtol=1e-5, atol=1e-6)
    assert out.metrics["algo/entrocraft/regime"] == 1.0 and out.metrics["algo/entrocraft/rejected_frac"] == 0.5
    torch.testing.assert_close(Entrocraft(EntrocraftConfig()).advantages(b, lo).adv[:, 0], t([0, -z, -z, 0]),
                               rtol=1e-5, atol=1e-6)
    off = Entrocraft(EntrocraftConfig(controller="off")).advantages(b, hi).adv[:, 0]
    torch.testing.assert_close(off, t([z, -z, -z, z]), rtol=1e-5, atol=1e-6)
    raw = Entrocraft(EntrocraftConfig(branch_adv="raw")).advantages(b, hi).adv[:, 0]  # R − 0.5 → (0.5, 0, 0, 0.5)
    torch.testing.assert_close(raw, t([0.5, 0, 0, 0.5]))
    algo = Entrocraft(EntrocraftConfig(mechanism="reject"))
    out = algo.advantages(b, hi)
    keep = algo.filter(dataclasses.replace(b, adv=out.adv, extras=dict(out.extras)), hi)
    assert keep.tolist() == [True, False, False, True]
    assert Entrocraft(EntrocraftConfig()).filter(dataclasses.replace(b, extras=dict(out.extras)), hi) is None
    assert Entrocraft(EntrocraftConfig()).group_relative and \
        not Entrocraft(EntrocraftConfig(branch_adv="raw")).group_relative


def bandit(cfg: EntrocraftConfig, steps=200, arms=20, P=16, G=8, lr=1.0, seed=0) -> list[tuple[float, float]]:
    """A single softmax policy over ``arms`` arms, plain SGD on the logits, driven by the entry's
    advantages → filter → loss hooks. Rewards are random with zero mean for every arm and an
    arm-dependent spread σ_a (log-spaced 0.1 … 2): no arm is better, so the only thing the
    advantage signs can steer is the entropy. (With arm-dependent *means*, E[A⁺|a] and E[A⁻|a]
    both increase with arm quality, so RAFT++ and NSR move H the same way in expectation and no
    sign-rejection controller can hold a target.) Returns (H, H*) per step, H measured exactly."""
    g = torch.Generator().manual_seed(seed)
    sig = torch.exp(torch.linspace(math.log(0.1), math.log(2.0), arms))
    theta, algo, B, hist = torch.zeros(arms), Entrocraft(cfg), P * G, []
    ones, z = torch.ones(B, 1), torch.zeros(B, dtype=torch.long)
    for step in range(steps):
        logp_all = torch.log_softmax(theta, -1)
        H = float(-(logp_all.exp() * logp_all).sum())
        c = Context(step=step + 1, progress=step / steps, entropy=H, max_new_tokens=1, group_size=G,
                    prompts_per_step=P, n_train=P, seed=seed, policy=None,
                    generator=lambda s, k=step: torch.Generator().manual_seed(k), charge=lambda *a: None)
        hist.append((H, sum(band(c.progress, cfg)) / 2))
        a = torch.multinomial(logp_all.exp(), B, replacement=True, generator=g)
        r = sig[a] * torch.randn(B, generator=g)
        lp = logp_all[a][:, None]
        batch = Batch(tokens=a[:, None], attn_mask=ones.long(), loss_mask=ones, behav_logp=lp, turn_id=z[:, None],
                      policy_version=z, behaviour_id=z, group_id=torch.arange(B) // G, example_idx=torch.arange(B) // G,
                      scores=r, rewards=r, truncated=z.bool(), prompt_width=0, old_logp=lp)
        out = algo.advantages(batch, c)
        batch = dataclasses.replace(batch, adv=out.adv, extras=dict(out.extras))
        keep = algo.filter(batch, c)
        if keep is not None:
            batch = batch.select(keep.nonzero().flatten())
        th = theta.clone().requires_grad_(True)
        loss, _ = algo.loss(Forward(logp=torch.log_softmax(th, -1)[batch.tokens]), batch, c)
        aggregate(loss, batch.loss_mask, algo.aggregation, 1).backward()
        theta = theta - lr * th.grad
    return hist


def second_half_error(hist) -> float:
    h = hist[len(hist) // 2:]
    return sum(abs(x - y) for x, y in h) / len(h)


def test_entrocraft_bandit_holds_a_constant_target():
    cfg = EntrocraftConfig(schedule="constant", lower_start=2.45, upper_start=2.55, kl_coef=0.0)
    assert second_half_error(bandit(cfg)) < 0.05  # H* = 2.5 nats, from ln 20 = 3.0
    off = bandit(dataclasses.replace(cfg, controller="off"))  # GRPO alone does not track it
    assert second_half_error(off) > 0.2


def test_entrocraft_bandit_follows_a_linear_schedule():
    cfg = EntrocraftConfig(schedule="linear", lower_start=2.75, lower_end=1.95, upper_start=2.85, upper_end=2.05,
                           kl_coef=0.0)  # H* from 2.8 to 2.0
    assert second_half_error(bandit(cfg)) < 0.05
    assert second_half_error(bandit(dataclasses.replace(cfg, mechanism="reject"))) < 0.05
