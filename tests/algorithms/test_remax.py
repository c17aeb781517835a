"""ReMax: the greedy decode's grade as the baseline in the reward, and the returns-to-go of the
KL-shaped token rewards worked by hand (with and without KL), equal to verl 0.9.1's numbers
(``hand_verl.py``)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rlsuite.algorithms.base import Group
from tests.algorithms.hand import D, t
from tests.algorithms.hand_verl import CTX, close
from tests.fakes import hand_batch, make_entry


# ========================================================================================
# ReMax — 2 prompts × 2 samples; row 1 has a tool observation at column 2 (mask 0 inside the response)
RM_MASK = [[0, 1, 1, 0, 0], [0, 1, 0, 1, 1], [0, 1, 1, 1, 0], [0, 1, 0, 0, 0]]
RM_SCORES = [1.0, 0.0, 1.0, 1.0]
RM_BASE = [1.0, 0.0]  # the grades of the two prompts' greedy decodes
RM_KL = [[0, 0.2, 0.4, 0, 0], [0, 0.1, 0, -0.3, 0.5], [0, 0.0, 0.2, 0.6, 0], [0, 1.0, 0, 0, 0]]  # k1 at π_old
VERL_REMAX_KL = [[-0.06000000238418579, -0.04000002145767212, 0.0, 0.0],
                 [-1.0299999713897705, -0.0, -1.0199999809265137, -1.0499999523162842],
                 [0.9200000166893005, 0.9200000166893005, 0.9399999976158142, 0.0], [0.8999999761581421, 0.0, 0.0, 0.0]]
VERL_REMAX_NOKL = [[0.0, 0.0, 0.0, 0.0], [-1.0, 0.0, -1.0, -1.0], [1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]]


def remax_rewards(alg):
    out = []
    for g, base in enumerate(RM_BASE):
        sl = slice(2 * g, 2 * g + 2)
        grp = Group(prompt="p", example=None, completions=("y",) * 2, parsed=(None,) * 2,
                    scores=torch.tensor(RM_SCORES[sl]), grade=lambda text, b=base: b if text == "greedy" else -9.0,
                    anchors=("greedy",))
        out.append(torch.as_tensor(alg.rewards(grp, CTX)))
    return torch.cat(out).to(D)


def trainer_token_rewards(rewards, beta):
    """What the trainer builds (suite/trainer.py ``_score``): −β·k on policy tokens, the reward on the last."""
    mask = t(RM_MASK)
    tr = -beta * t(RM_KL) * mask
    last = (mask * torch.arange(mask.shape[1])).argmax(-1)
    tr[torch.arange(4), last] += rewards
    return tr * mask, rewards - beta * (t(RM_KL) * mask).sum(-1)


def test_remax_defaults_and_greedy_baseline_in_the_reward():
    alg = make_entry("remax")
    assert {"anchor", "old_logp", "ref_logp"} <= alg.needs
    assert (alg.cfg.kl_coef, alg.cfg.kl_estimator, alg.cfg.kl_where) == (0.001, "k1", "reward")
    assert alg.aggregation == "token-mean" and alg.cfg.dual_clip == 3.0
    # R − b: prompt 0 (greedy graded 1): 1 − 1 = 0, 0 − 1 = −1; prompt 1 (greedy graded 0): 1, 1
    torch.testing.assert_close(remax_rewards(alg), t([0.0, -1.0, 1.0, 1.0]))
    # no anchor or no grader (hooks outside the trainer): baseline 0
    bare = Group(prompt="p", example=None, completions=("y",), parsed=(None,), scores=torch.tensor([0.4]))
    assert float(alg.rewards(bare, CTX)[0]) == pytest.approx(0.4)


def test_remax_returns_to_go_of_the_kl_shaped_reward():
    alg = make_entry("remax", kl_coef=0.1)
    tr, shaped = trainer_token_rewards(remax_rewards(alg), 0.1)
    b = hand_batch(RM_MASK, [0, 0, 1, 1], shaped, token_rewards=tr, scores=t(RM_SCORES))
    adv = alg.advantages(b, CTX).adv
    # Â_t = Σ_{s≥t} r_s over policy tokens (β = 0.1):
    # row 0 (R − b = 0): r = −0.02, −0.04 → −0.06, −0.04
    # row 1 (R − b = −1): r = −0.01 | obs | +0.03, −0.05 − 1 = −1.05 → −1.03, 0, −1.02, −1.05
    # row 2 (R − b = 1): r = 0, −0.02, −0.06 + 1 = 0.94 → 0.92, 0.92, 0.94
    # row 3 (R − b = 1): r = −0.1 + 1 = 0.9 → 0.9
    want = [[0, -0.06, -0.04, 0, 0], [0, -1.03, 0, -1.02, -1.05], [0, 0.92, 0.92, 0.94, 0], [0, 0.9, 0, 0, 0]]
    torch.testing.assert_close(adv, t(want))
    close(adv[:, 1:], VERL_REMAX_KL)


def test_remax_without_kl_is_reward_minus_greedy_reward():
    alg = make_entry("remax", kl_coef=0.0)
    rewards = remax_rewards(alg)
    tr, shaped = trainer_token_rewards(rewards, 0.0)
    b = hand_batch(RM_MASK, [0, 0, 1, 1], rewards, token_rewards=tr, scores=t(RM_SCORES))
    want = t([0.0, -1.0, 1.0, 1.0])[:, None] * t(RM_MASK)  # R − b on every policy token
    torch.testing.assert_close(alg.advantages(b, CTX).adv, want)
    close(alg.advantages(b, CTX).adv[:, 1:], VERL_REMAX_NOKL)
    # a batch without token rewards: the sequence reward broadcast (the same numbers)
    torch.testing.assert_close(alg.advantages(dataclasses.replace(b, token_rewards=None), CTX).adv, want)
