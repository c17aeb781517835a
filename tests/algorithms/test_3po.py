"""3PO (``3po``): the rows' perturbation signs, antithetic noise pairs, the truncated IS weight
worked by hand (π_old/μ = e, capped at C = 2), and a trainer run whose perturbation leaves the
trained weights bit-identical with FLOPs per token equal to GRPO's."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rlsuite.algorithms.three_po import assign_rows, perturbation
from tests.fakes import critic_batch, hook_ctx, make_entry


ctx, batch, make = hook_ctx, critic_batch, make_entry


def test_three_po_row_assignment():
    assert assign_rows(2, 4, 2, "mixed", 0.25) == [1, 2, 1, 2, 1, 2, 1, 2]
    assert assign_rows(3, 2, 2, "per_group", 0.25) == [1, 1, 2, 2, 1, 1]
    assert assign_rows(1, 4, 2, "partial", 0.25) == [0, 1, 2, 1]


def test_antithetic_pairs_share_the_noise_with_opposite_signs():
    params = {"w": torch.ones(3, 3)}
    gen = lambda s: torch.Generator().manual_seed(100 + s)  # noqa: E731
    p1, p2 = perturbation(params, 0.1, 1, True, gen), perturbation(params, 0.1, 2, True, gen)
    torch.testing.assert_close(p1["w"] - 1, -(p2["w"] - 1))
    assert not torch.equal(perturbation(params, 0.1, 3, True, gen)["w"], p1["w"])
    # rms(W) = 1, so the noise std is σ = 0.1
    big = perturbation({"w": torch.ones(200, 200)}, 0.1, 1, True, gen)["w"] - 1
    assert big.std().item() == pytest.approx(0.1, rel=0.05)


def test_three_po_tis_weight_by_hand():
    b = batch()
    b = dataclasses.replace(b, old_logp=b.loss_mask * -1.0, behav_logp=b.loss_mask * -2.0,
                            behaviour_id=torch.tensor([1, 1, 2, 0]))
    out = make("3po", tis_cap=2.0).advantages(b, ctx())
    # π_old/μ = e^{1} = 2.718 → capped at C = 2 on every policy token
    torch.testing.assert_close(out.extras["tis_weight"], 2.0 * b.loss_mask)
    assert out.metrics["algo/3po/kl_perturbed"] == pytest.approx(-1.0)
    assert make("3po", tis_cap=None).advantages(b, ctx()).extras["tis_weight"].max() == 1.0


def test_perturbation_leaves_trained_weights_bit_identical_and_flops_match_grpo(tmp_path):
    from rlsuite.suite.runfolder import read_jsonl
    from rlsuite.suite.runner import execute
    from rlsuite.suite.spec import resolve
    from rlsuite.suite.rollout_stage import RolloutStage
    from rlsuite.suite.scoring import Scorer

    seen = {}
    real_rollout = RolloutStage.rollout

    def spy(self, idx, c, attempt):  # c.policy: the trained policy
        before = {k: v.clone() for k, v in c.policy.state_dict().items()}
        engine_before = {k: v.clone() for k, v in self.engine.state().items()}
        out = real_rollout(self, idx, c, attempt)
        seen["model_same"] = all(torch.equal(before[k], v) for k, v in c.policy.state_dict().items())
        seen["engine_same"] = all(torch.equal(engine_before[k], v) for k, v in self.engine.state().items())
        seen["behaviours"] = sorted(set(out[0].behaviour_id.tolist()))
        return out

    sets = [("model.warm_start", "none"), ("eval.max_prompts", 4), ("eval.test_prompts", 4)]
    try:
        RolloutStage.rollout = spy
        spec = resolve("arith", "3po", "tiny", 0, sets=sets, budgets=[("updates", 1)])
        code, run = execute(spec, tmp_path / "a")
    finally:
        RolloutStage.rollout = real_rollout
    assert code == 0 and seen["model_same"] and seen["engine_same"] and seen["behaviours"] == [1, 2, 3, 4]
    three = read_jsonl(run / "metrics.jsonl")[0]
    grpo_spec = resolve("arith", "grpo", "tiny", 0, sets=sets + [("algo.kl_coef", 0.0)], budgets=[("updates", 1)])
    try:  # 3PO's perturbed rows are off-policy, so it scores π_old; so does GRPO here (not from its update)
        Scorer.old_from_update = False
        code, grun = execute(grpo_spec, tmp_path / "b")
    finally:
        Scorer.old_from_update = True
    grpo = read_jsonl(grun / "metrics.jsonl")[0]
    per_tok = lambda r: r["budget/flops"] / r["budget/train_tokens"]  # noqa: E731
    assert per_tok(three) == pytest.approx(per_tok(grpo), rel=0.05)
    assert three["budget/samples"] == grpo["budget/samples"]
