"""CompPO: the retention gate worked by hand (c = 0.7, τ = 0.5, κ = 10 → 0.940399), the next policy
token's values across masked tokens, the gated GAE trace by hand (Â_1 = γλ·g_2·Â_2 = 0.5), a
constant gate giving plain GAE, the shuffled and position gates, and the critic switch."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rlsuite.algorithms.comppo import next_token_values, retention_gate
from rlsuite.suite.ops import gae, masked_whiten
from tests.fakes import critic_batch, hook_ctx, make_entry


ctx, batch, make = hook_ctx, critic_batch, make_entry


def test_gate_formula_by_hand():
    # c = 0.7, τ = 0.5, κ = 10, g_min = 0.5: g = 0.5 + 0.5·σ(2) = 0.5 + 0.5·0.880797 = 0.940399
    g = retention_gate(torch.tensor([[0.7, 0.5, 0.3]]), torch.ones(1, 3), 0.5, 10.0, 0.5)
    torch.testing.assert_close(g, torch.tensor([[0.940399, 0.75, 0.559601]]), atol=1e-6, rtol=0)
    # τ = None → batch median (0.5): the same numbers
    torch.testing.assert_close(retention_gate(torch.tensor([[0.7, 0.5, 0.3]]), torch.ones(1, 3), 0.5, 10.0, None), g)


def test_next_token_values_skips_masked_tokens():
    x = torch.tensor([[9.0, 1.0, 2.0, 3.0, 4.0]])
    mask = torch.tensor([[0.0, 1.0, 0.0, 1.0, 1.0]])
    # next policy token after t=1 is t=3 (t=2 is an observation); after t=4 none → fill 1
    assert next_token_values(x, mask).tolist() == [[1.0, 3.0, 3.0, 4.0, 1.0]]


def test_constant_gate_recovers_gae_exactly():
    b = batch()
    algo = make("comppo", gate="constant", gate_constant=1.0, lam=0.9, gamma=0.95)
    out = algo.advantages(b, ctx())
    adv, ret = gae(b.token_rewards, b.values, b.loss_mask, 0.95, 0.9)
    torch.testing.assert_close(out.adv, masked_whiten(adv, b.loss_mask))
    torch.testing.assert_close(out.returns, ret)


def test_gated_trace_by_hand():
    # one sequence of 2 policy tokens, γ = λ = 1, V = 0, reward 1 at the last token, gate 0.5 on it:
    # Â_2 = 1; Â_1 = δ_1 + γλ g_2 Â_2 = 0 + 0.5·1 = 0.5
    b = batch()
    mask = torch.tensor([[0, 1, 1, 0, 0]], dtype=torch.float)
    one = dataclasses.replace(b.select(torch.tensor([1])), loss_mask=mask, values=torch.zeros(1, 5),
                              token_rewards=torch.tensor([[0, 0, 1.0, 0, 0]]))
    algo = make("comppo", gate="attention", whiten_adv=False, g_min=0.5, kappa=1e6, tau=0.5)
    attn = torch.tensor([[0, 0.9, 0.9, 0, 0]])  # c = 0.1 < τ → g = g_min = 0.5
    out = algo.advantages(dataclasses.replace(one, attn_stat=attn), ctx())
    torch.testing.assert_close(out.adv[0, 1:3], torch.tensor([0.5, 1.0]))


def test_shuffled_gate_permutes_within_each_response_and_position_matches_mean():
    b = batch()
    base = make("comppo").gates(b, ctx())
    shuf = make("comppo", gate="shuffled").gates(b, ctx())
    for r in range(4):
        sel = b.loss_mask[r] > 0
        assert sorted(shuf[r, sel].tolist()) == pytest.approx(sorted(base[r, sel].tolist()))
    assert not torch.equal(shuf, base)
    pos = make("comppo", gate="position").gates(b, ctx())
    m = b.loss_mask
    assert (pos * m).sum() / m.sum() == pytest.approx(float((base * m).sum() / m.sum()), abs=0.02)
    assert ((pos[m > 0] >= 0.5 - 1e-6) & (pos[m > 0] <= 1 + 1e-6)).all()


def test_critic_switch_selects_the_trainer_critic():
    assert make("comppo").critic == "mlp_head"
    assert make("comppo", tac_detach=True).critic == "mlp_head_detached"
    assert make("comppo", critic="standard").critic == "separate"
    assert "behav_attn_stat" in make("comppo").needs and "behav_attn_stat" not in make("comppo", gate="constant").needs
