"""IS-GRPO: the importance weights w = 1/(N·P) from the σ̂ table worked by hand and each switch (no
weight, no renormalisation, z-score, α, floor, prior), the σ̂ update (last, EMA) and its state, the
sampler's frequencies, the feature-orthogonality statistic, the weighted group advantage, and the
response reading that re-uses last step's groups with truncated ρ."""

from __future__ import annotations

import math

import pytest
import torch

from rlsuite.algorithms.is_grpo import ISGRPO, ISGRPOConfig, feature_orthogonality, weighted_group_advantage
from tests.algorithms.hand import t
from tests.algorithms.hand_no_prompt import close, ctx, make_batch


# ======================================================================================
# IS-GRPO. σ̂ table [0.4, 0.1, 0.0, unseen]; prior 0.5, floor 0.05, α = 1:
#   σ̂ → [0.4, 0.1, 0.05, 0.5], Σ = 1.05, P = σ̂/1.05; w = 1/(N·P) with N = 4:
#   prompt 0: 1.05/1.6 = 0.65625, prompt 1: 1.05/0.4 = 2.625; batch mean (2 samples each) 1.640625
#   → renormalised 0.4 and 1.6. Rewards (1, 0) per prompt: mean-only Â = ±0.5.

IS_BATCH = {"mask": [[1, 1]] * 4, "group_id": [0, 0, 1, 1], "rewards": [1.0, 0.0, 1.0, 0.0]}


def is_algo(**kw) -> ISGRPO:
    algo = ISGRPO(ISGRPOConfig(**kw))
    algo.sigma = torch.tensor([0.4, 0.1, 0.0, float("nan")])
    return algo


def is_adv(algo) -> torch.Tensor:
    return algo.advantages(make_batch(**IS_BATCH), ctx()).adv[:, 0]


def test_is_grpo_advantage_by_hand():
    out = is_algo().advantages(make_batch(**IS_BATCH), ctx())
    torch.testing.assert_close(out.adv[:, 0], t([0.2, -0.2, 0.8, -0.8]))
    assert out.metrics["algo/is_grpo/is_weight_mean"] == pytest.approx(1.640625)
    assert out.metrics["algo/is_grpo/is_weight_max"] == pytest.approx(2.625)


def test_is_grpo_switches():
    torch.testing.assert_close(is_adv(is_algo(is_weight=False)), t([0.5, -0.5, 0.5, -0.5]))
    # no renormalisation: 0.5·0.65625 = 0.328125, 0.5·2.625 = 1.3125
    torch.testing.assert_close(is_adv(is_algo(renormalise=False)), t([0.328125, -0.328125, 1.3125, -1.3125]))
    # GRPO z-score: 0.5/(std 1/√2 + 1e-6) = 0.707106 → × 0.4 / × 1.6
    torch.testing.assert_close(is_adv(is_algo(scale_by_std=True)), t([0.282842, -0.282842, 1.131369, -1.131369]),
                               rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(is_adv(is_algo(alpha=0.0)), t([0.5, -0.5, 0.5, -0.5]))  # uniform sampler → w ≡ 1
    # floor 0.2: σ̂ = [0.4, 0.2, ...] → w ∝ 1/0.4 : 1/0.2 = 2.5 : 5, mean 3.75 → 2/3, 4/3
    torch.testing.assert_close(is_adv(is_algo(sigma_min=0.2)), t([1 / 3, -1 / 3, 2 / 3, -2 / 3]))
    # prior 1.0 (unseen prompt 3): Σ = 1.55 → w0 = 1.55/1.6 = 0.96875 (without renormalisation)
    torch.testing.assert_close(is_adv(is_algo(sigma_prior=1.0, renormalise=False))[0], t(0.5 * 0.96875))


def test_is_grpo_sigma_table_update_last_and_ema():
    # both groups have rewards (1, 0): unbiased std = √0.5 = 0.707107
    for source, expected in (("last", [0.707107, 0.707107]), ("ema", [0.553553, 0.403553])):  # ½·0.4 + ½·0.7071
        algo = is_algo(sigma_source=source)
        algo.advantages(make_batch(**IS_BATCH), ctx())
        assert algo.sigma[:2].tolist() == pytest.approx([0.4, 0.1])  # not before the update
        algo.after_update(ctx())
        assert algo.sigma[:2].tolist() == pytest.approx(expected, abs=1e-5)
        assert math.isnan(algo.sigma[3]) and algo.pending == []
        fresh = ISGRPO(ISGRPOConfig(sigma_source=source))
        fresh.load_state_dict(algo.state_dict())
        assert torch.equal(fresh._probs(4), algo._probs(4))


def test_is_grpo_sampler_frequencies_and_replacement():
    algo = ISGRPO(ISGRPOConfig())
    algo.sigma = torch.tensor([0.3, 0.1, float("nan"), 0.1])  # → P = [0.3, 0.1, 0.5, 0.1]
    idx = torch.tensor(algo.sample_prompts(ctx(prompts_per_step=20000)))
    freq = torch.bincount(idx, minlength=4).float() / len(idx)
    torch.testing.assert_close(freq, torch.tensor([0.3, 0.1, 0.5, 0.1]), atol=0.015, rtol=0)
    no_repl = ISGRPO(ISGRPOConfig(with_replacement=False))
    no_repl.sigma = torch.tensor([0.3, 0.1, float("nan"), 0.1])
    assert sorted(no_repl.sample_prompts(ctx(prompts_per_step=4))) == [0, 1, 2, 3]
    # unbiasedness of the weights: Σ_q P(q)·w_q·x_q = mean(x) for any x
    p = algo._probs(4)
    x = torch.tensor([1.0, -2.0, 3.0, 0.5])
    assert float((p * (1 / (4 * p)) * x).sum()) == pytest.approx(0.625)


def test_is_grpo_orthogonality_statistic():
    mask, adv, gid = torch.ones(2, 1), torch.ones(2, 1), torch.tensor([0, 1])
    assert float(feature_orthogonality(t([[[1.0, 0.0]], [[0.0, 1.0]]]), adv, mask, gid)) == pytest.approx(0.0)
    # cos((1,0), (1,1)) = 1/√2
    assert float(feature_orthogonality(t([[[1.0, 0.0]], [[1.0, 1.0]]]), adv, mask, gid)) == pytest.approx(0.707107)
    assert "hidden" in ISGRPO(ISGRPOConfig(orthogonality=True)).needs


def test_weighted_group_advantage_by_hand():
    # R = (1, 0, 0), w = (2, 1, 1): m = 2/4 = 0.5; σ² = (2·¼ + ¼ + ¼)/4 · 3/2 = 0.375 → σ = 0.612372
    close(weighted_group_advantage(t([1, 0, 0]), torch.tensor([0, 0, 0]), t([2, 1, 1])),
          t([0.816497, -0.816497, -0.816497]))
    from rlsuite.suite.ops import group_normalised_advantage

    r, g = t([1, 0, 0, 1, 1, 0.5]), torch.tensor([0, 0, 0, 1, 1, 1])
    close(weighted_group_advantage(r, g, torch.ones(6)), group_normalised_advantage(r, g))  # w ≡ 1: GRPO


def test_is_grpo_response_reading_reuses_last_steps_groups():
    """Step 1: fresh rows only (stored); step 2: replay returns them, they come back appended with
    old log-probs re-scored, and get ρ·(R − m_ρ)/σ_ρ with ρ = min(exp Σ(log π_old − log μ), 2)."""
    algo = ISGRPO(ISGRPOConfig(reading="response"))
    assert algo.sample_prompts(ctx()) is None and algo.replay(ctx()) is None
    first = make_batch([[1]] * 3, [0, 0, 0], [1, 0, 0])
    out = algo.advantages(first, ctx())
    assert out.metrics["algo/is_grpo/replayed_rows"] == 0
    old = algo.replay(ctx(step=2))
    assert old is not None and old.batch_size == 3 and torch.equal(old.rewards, t([1, 0, 0]))
    # the trainer appends the stale rows (group ids shifted) and re-scores π_old: log ρ = (ln 2, 0, 0) + ln 3 cap
    both = make_batch([[1]] * 5, [0, 0, 1, 1, 1], [1, 0, 1, 0, 0],
                      old=t([[0.0], [0.0], [math.log(3.0)], [0.0], [0.0]]))
    out = algo.advantages(both, ctx(step=2))
    # fresh group: ±1/√2; re-used group with ρ = (2 [3 capped], 1, 1): ρ × (0.816497, −0.816497, −0.816497)
    close(out.adv[:, 0], t([0.707107, -0.707107, 1.632991, -0.816496, -0.816496]))  # eps 1e-6 in σ + eps
    assert out.metrics["algo/is_grpo/rho_truncated_frac"] == pytest.approx(1 / 3)
    assert algo.buffer.batch_size == 2  # only the fresh rows are kept for the next step (re-used once)
    algo2 = ISGRPO(ISGRPOConfig(reading="response"))
    algo2.load_state_dict(algo.state_dict())
    assert torch.equal(algo2.replay(ctx()).tokens, algo.buffer.tokens)
