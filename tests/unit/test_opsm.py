"""Off-policy sequence masking (``loss.opsm_delta``; DeepSeek-V3.2, arXiv 2512.02556, eq. 9): the
policy loss of a token with a negative advantage is masked where its sequence's mean
``log μ − log π_θ`` over the policy tokens exceeds δ. Every expected number is worked out by hand
below. On the same inputs TRL 1.16.0's ``GRPOTrainer.get_off_policy_mask`` (per-token and (B, 1)
advantages) and slime's ``compute_opsm_mask`` (``slime/utils/ppo_utils.py`` at commit 624b824)
return the same masks (checked 2026-12-06 by calling them; slime's masked count was 1.5 at δ = 0.25
and 1.8333 at δ = 0.125, its ``opsm_clipfrac`` summing each row's masked share)."""

from __future__ import annotations

import pytest
import torch

from rlsuite.suite.config import LossConfig
from rlsuite.suite.loss_options import policy_masks
from rlsuite.suite.ops import off_policy_sequence_mask

# four rows of three positions; μ − π on the mask: row 0 (.5, .5) → KL .5; row 1 (.25, .25, .25)
# → .25; row 2 (−.25) → −.25; row 3 has no policy token → 0
MASK = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [0, 0, 0]], dtype=torch.float32)
MU = torch.tensor([[-1.0, -2.0, 0.0], [-1.0, -1.0, -1.0], [-0.5, 0.0, 0.0], [0.0, 0.0, 0.0]])
PI = torch.tensor([[-1.5, -2.5, 0.0], [-1.25, -1.25, -1.25], [-0.25, 0.0, 0.0], [0.0, 0.0, 0.0]])
ADV = torch.tensor([[-1.0, -1.0, -1.0], [1.0, -1.0, 0.0], [-2.0, -2.0, -2.0], [-1.0, -1.0, -1.0]])


def test_negative_advantage_sequences_beyond_delta_are_masked():
    # δ = .25: row 0 (KL .5 > .25, A < 0) masked; row 1's KL .25 is not above δ (kept: ≤);
    # row 2's KL is negative; row 3's is 0
    assert off_policy_sequence_mask(ADV, PI, MU, MASK, 0.25).tolist() == [[0, 0, 0], [1, 1, 1], [1, 1, 1], [1, 1, 1]]
    # δ = .125: row 1's KL .25 exceeds it: its tokens with A < 0 only (A = 1, −1, 0 → keep, mask, keep)
    assert off_policy_sequence_mask(ADV, PI, MU, MASK, 0.125).tolist() == [[0, 0, 0], [1, 0, 1], [1, 1, 1],
                                                                           [1, 1, 1]]
    # a sequence-level advantage [B, 1] broadcasts (TRL's shape): row 1's A = 1 keeps the row
    assert off_policy_sequence_mask(ADV[:, :1], PI, MU, MASK, 0.125).tolist() == [[0], [1], [1], [1]]


def test_the_kl_is_to_mu_and_pi_is_detached():
    pi = PI.clone().requires_grad_(True)
    keep = off_policy_sequence_mask(ADV, pi, MU, MASK, 0.25)
    assert not keep.requires_grad
    # swapping μ and π flips the signs of the KLs: row 0 (−.5) is then kept and row 2 (.25 ≤ .25) too
    assert off_policy_sequence_mask(ADV, MU, PI, MASK, 0.25).tolist() == [[1, 1, 1]] * 4


def test_the_loss_option_masks_and_logs_the_masked_share():
    lo = LossConfig(opsm_delta=0.125)
    keep, high, m = policy_masks(lo, PI, None, ADV, MU, MASK)
    assert high is None and keep.tolist() == [[0, 0, 0], [1, 0, 1], [1, 1, 1], [1, 1, 1]]
    # masked policy tokens: row 0's two and row 1's middle one, of 2 + 3 + 1 = 6
    assert m["loss/opsm_masked_frac"] == pytest.approx(3 / 6)
    assert policy_masks(LossConfig(), PI, None, ADV, MU, MASK) == (None, None, {})  # off by default


def _spec(*sets):
    from rlsuite.suite.spec import resolve
    from tests import fakes  # noqa: F401  (the _parity_test task)

    return resolve("_parity_test", "grpo", "tiny", 0, sets=[("model.warm_start", "none"), *sets],
                   budgets=[("updates", 2)])


def test_the_trainer_masks_the_policy_term(tmp_path):
    """δ = 0 under a noisy engine (μ ≠ π): every negative-advantage sequence whose mean log μ − log π is
    above 0 leaves the policy term, and the share is logged; the run id changes only when set."""
    from rlsuite.suite.runfolder import read_jsonl
    from rlsuite.suite.runner import execute

    base = _spec(("rollout.mismatch", "noise"), ("rollout.mismatch_scale", 0.05))
    spec = _spec(("rollout.mismatch", "noise"), ("rollout.mismatch_scale", 0.05), ("loss.opsm_delta", 0.0))
    assert spec.run_id != base.run_id and _spec(("loss.opsm_delta", None)).run_id == _spec().run_id
    code, run = execute(spec, tmp_path)
    assert code == 0
    rows = read_jsonl(run / "metrics.jsonl")
    assert all(0 <= r["loss/opsm_masked_frac"] < 1 for r in rows) and any(r["loss/opsm_masked_frac"] > 0 for r in rows)
