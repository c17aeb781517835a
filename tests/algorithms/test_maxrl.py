"""MaxRL: Â = (R − mean)/(mean + ε) worked by hand on the inputs of the peers' own tests — prime-rl's
``tests/unit/orchestrator/test_advantage.py::test_max_rl_mean_normalized`` ([1, 0, 0, 0] → 3, −1, −1, −1;
[0, 0] and [1, 1] → 0) and SkyRL's ``tests/backends/skyrl_train/utils/test_ppo_utils.py::
test_compute_maxrl_advantage`` (group sums 6, 3 → ±1.5/(4.5 + 1e-6); 9, 12 → ∓1.5/(10.5 + 1e-6)) — plus
the singleton and negative-mean rules, and the loss (PPO clip, token-mean, k3 KL β = 0.001)."""

from __future__ import annotations

import pytest
import torch

from rlsuite.algorithms.maxrl import mean_normalised_advantage
from rlsuite.suite.aggregation import aggregate
from rlsuite.suite.types import Forward
from tests.algorithms.hand import t
from tests.fakes import hand_batch, hook_ctx, make_entry

CTX = hook_ctx(gen_seed=0, max_new_tokens=2, group_size=4, prompts_per_step=6)

# groups: a = prime-rl's [1, 0, 0, 0]; b = SkyRL's [6, 3]; c = SkyRL's [9, 12]; d = [0, 0]; e = [1, 1];
# f = a singleton 0.7; g = [−1, 0.5] (mean −0.25 ≤ 0)
R = [1.0, 0.0, 0.0, 0.0, 6.0, 3.0, 9.0, 12.0, 0.0, 0.0, 1.0, 1.0, 0.7, -1.0, 0.5]
GID = [0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 6, 6]
E = 1e-6
HAND = [0.75 / (0.25 + E), -0.25 / (0.25 + E), -0.25 / (0.25 + E), -0.25 / (0.25 + E),  # a: mean 0.25
        1.5 / (4.5 + E), -1.5 / (4.5 + E),      # b: mean 4.5 (SkyRL's expected values)
        -1.5 / (10.5 + E), 1.5 / (10.5 + E),    # c: mean 10.5
        0.0, 0.0,                                # d: mean 0 → no signal (prime-rl; SkyRL: 0/ε = 0)
        0.0, 0.0,                                # e: all correct → R − mean = 0 exactly
        0.7,                                     # f: singleton → R − 0, no division (SkyRL)
        0.0, 0.0]                                # g: mean −0.25 ≤ 0 → 0 (prime-rl's rule)


def test_advantage_on_the_peers_inputs():
    mask = [[0, 1]] * len(R)
    out = make_entry("maxrl").advantages(hand_batch(mask, GID, R), CTX)
    torch.testing.assert_close(out.adv[:, 1], t(HAND), rtol=1e-12, atol=0)
    assert (out.adv[:, 0] == 0).all()
    assert out.metrics["algo/maxrl/zero_mean_frac"] == pytest.approx(4 / 15)  # groups d and g: 4 of 15 rows


def test_epsilon_zero_is_prime_rl_exactly():
    adv = mean_normalised_advantage(t([1.0, 0.0, 0.0, 0.0]), torch.tensor([0, 0, 0, 0]), 0.0)
    assert adv.tolist() == [3.0, -1.0, -1.0, -1.0]  # (1 − 0.25)/0.25 = 3, (0 − 0.25)/0.25 = −1


def test_hard_prompts_weigh_more_than_under_grpo():
    # one success in 4 (mean 0.25): 3 vs GRPO's (0.75)/std = 0.75/0.5 = 1.5; one failure in 4 (mean 0.75):
    # the success gets 0.25/0.75 = 1/3, the failure −0.75/0.75 = −1
    adv = mean_normalised_advantage(t([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0]),
                                    torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]), 0.0)
    torch.testing.assert_close(adv, t([3.0, -1, -1, -1, 1 / 3, 1 / 3, 1 / 3, -1.0]))


def test_loss_is_ppo_clip_with_token_mean_and_defaults():
    alg = make_entry("maxrl")
    c = alg.cfg
    assert (c.aggregation, c.kl_coef, c.kl_estimator, c.kl_where) == ("token-mean", 0.001, "k3", "loss")
    assert alg.group_relative and "old_logp" in alg.needs and not alg.old_logp_before_update
    b = hand_batch([[0, 1, 1]], [0], [0.0], old_logp=t([[0, -1.0, -1.0]]), adv=t([[0, 3.0, -1.0]]))
    x = t([[0, -0.5, -0.5]]).requires_grad_(True)  # r = e^0.5 ≈ 1.6487 on both tokens
    loss, _ = alg.loss(Forward(logp=x), b, CTX)
    # Â = 3: max(−3·1.6487, −3·1.2) = −3.6 (clipped: no gradient); Â = −1: max(1.6487, 1.2) = 1.6487
    torch.testing.assert_close(loss.detach(), t([[0, -3.6, 1.6487212707001282]]))
    aggregate(loss, b.loss_mask, alg.aggregation, 2).backward()
    # token-mean over 2 tokens: ∂/∂log π = (0, −Â·r/2) = (0, 1.6487/2)
    torch.testing.assert_close(x.grad, t([[0, 0, 1.6487212707001282 / 2]]))
