"""FBOS-RL: the pooled group advantage and the truncated-IS loss of the re-placed rows worked by hand,
equality with GRPO without stages, the objective schedule and the ``revise`` decisions, and the
trainer's feedback round on the embedded task (row layout, behaviour log-probs, budget). The
tasks' feedback texts: ``tests/unit/test_task_feedback.py``."""

from __future__ import annotations

import math

import pytest
import torch

from rlsuite.algorithms.base import Group, Revision
from rlsuite.algorithms.fbos_rl import FBOSRL, FBOSConfig, truncated_is_weight
from rlsuite.suite.types import Batch, Forward
from tests.fakes import hook_ctx


D = torch.float


def t(x):
    return torch.tensor(x, dtype=D)


def ctx(step=1):
    return hook_ctx(gen_seed=0, step=step, prompts_per_step=1)


def stage_batch() -> Batch:
    """Rows: two first-round (stage 0, group 0, R = 1, 0), two feedback-conditioned (stage 1,
    group 1, R = 1, 0), two re-placed (stage 2, group 0, R = 1, 1); one response token each."""
    B = 6
    old = t([[0.0, -1.0]] * B)
    behav = old.clone()
    behav[4, 1] = -1.0 - math.log(3.0)  # π_old/μ = 3 → truncated to C = 2
    behav[5, 1] = -1.0 + math.log(2.0)  # π_old/μ = 0.5
    return Batch(tokens=torch.ones(B, 2, dtype=torch.long), attn_mask=torch.ones(B, 2, dtype=torch.long),
                 loss_mask=t([[0, 1]] * B), behav_logp=behav, turn_id=t([[-1, 0]] * B).long(),
                 policy_version=torch.zeros(B, dtype=torch.long), behaviour_id=torch.zeros(B, dtype=torch.long),
                 group_id=torch.tensor([0, 0, 1, 1, 0, 0]), example_idx=torch.zeros(B, dtype=torch.long),
                 scores=t([1, 0, 1, 0, 1, 1]), rewards=t([1, 0, 1, 0, 1, 1]),
                 truncated=torch.zeros(B, dtype=torch.bool),
                 prompt_width=1, stage=torch.tensor([0, 0, 1, 1, 2, 2]), old_logp=old)


def test_pooled_advantage_and_truncated_is_loss_by_hand():
    algo = FBOSRL(FBOSConfig(schedule="joint"))
    b = stage_batch()
    out = algo.advantages(b, ctx())
    # group 0 pools first + re-placed rows: R = (1, 0, 1, 1), mean 0.75, unbiased std
    # √((3·0.25² + 0.75²)/3) = 0.5 → Â = (0.5, −1.5, 0.5, 0.5); group 1: R = (1, 0) → ±1/√2
    s2 = 1 / math.sqrt(2)
    torch.testing.assert_close(out.adv[:, 1], t([0.5, -1.5, s2, -s2, 0.5, 0.5]), atol=1e-5, rtol=0)
    assert out.metrics["algo/fbos/recontext_rows"] == 2 and out.metrics["algo/fbos/feedback_score"] == 0.5
    b = Batch(**{**b.__dict__, "adv": out.adv})
    # at π_θ = π_old the surrogate is −Â per token; re-placed rows × min(π_old/μ, 2): 2 and 0.5
    loss, m = algo.loss(Forward(logp=b.old_logp.clone()), b, ctx())
    torch.testing.assert_close(loss[:, 1], t([-0.5, 1.5, -s2, s2, -1.0, -0.25]), atol=1e-5, rtol=0)
    assert float(m["algo/fbos/is_weight_mean"]) == pytest.approx(1.25, abs=1e-5)
    assert float(m["algo/fbos/is_truncated_frac"]) == pytest.approx(0.5)
    # is_cap moves the truncation: C = 4 keeps the weight 3
    loss4, _ = FBOSRL(FBOSConfig(is_cap=4.0)).loss(Forward(logp=b.old_logp.clone()), b, ctx())
    assert float(loss4[4, 1]) == pytest.approx(-1.5, abs=1e-5)
    w = truncated_is_weight(b.old_logp, b.behav_logp, b.stage == 2, 2.0)
    assert torch.equal(w[:4], torch.ones(4, 2))


def test_without_stages_it_is_grpo():
    from rlsuite.algorithms.grpo import GRPO, GRPOConfig

    b = stage_batch()
    b = Batch(**{**b.__dict__, "stage": None})
    a1, a2 = FBOSRL(FBOSConfig()).advantages(b, ctx()).adv, GRPO(GRPOConfig()).advantages(b, ctx()).adv
    torch.testing.assert_close(a1, a2)
    b = Batch(**{**b.__dict__, "adv": a1})
    logp = b.old_logp + 0.1
    torch.testing.assert_close(FBOSRL(FBOSConfig()).loss(Forward(logp=logp), b, ctx())[0],
                               GRPO(GRPOConfig()).loss(Forward(logp=logp), b, ctx())[0])


def groups(*score_lists):
    return [Group(prompt="p", example=None, completions=("c",) * len(s), parsed=(None,) * len(s), scores=t(s))
            for s in score_lists]


def test_schedule_and_revise_decisions():
    alt = FBOSRL(FBOSConfig(period=2))
    assert [sorted(alt.phase(s)) for s in (1, 2, 3, 4, 5)] == [["epa"], ["epa"], ["ecc"], ["ecc"], ["epa"]]
    assert FBOSRL(FBOSConfig(schedule="joint")).phase(3) == {"epa", "ecc"}
    assert FBOSRL(FBOSConfig(objective="ecc")).phase(1) == {"ecc"}
    gs = groups([1, 0, 0.5], [1, 1, 1], [0.2, 0.2, 1])
    r = alt.revise(gs, ctx(step=1))  # EPA phase: first + re-placed rows; worst answer; solved group skipped
    assert r == Revision(sources=(1, -1, 0), stages=frozenset({"first", "recontext"}), detail="full")
    assert alt.revise(gs, ctx(step=3)).stages == {"feedback"}
    joint = FBOSRL(FBOSConfig(schedule="joint", feedback="binary"))
    assert joint.revise(gs, ctx()).stages == {"first", "feedback", "recontext"} and \
        joint.revise(gs, ctx()).detail == "binary"
    assert FBOSRL(FBOSConfig(objective="epa", epa_feedback=False)).revise(gs, ctx()) is None  # = GRPO
    rnd = FBOSRL(FBOSConfig(source="random")).revise(groups([1, 0, 0, 0, 1]), ctx())
    assert rnd.sources[0] in (1, 2, 3)
    with pytest.raises(ValueError):
        FBOSConfig(period=0)
    with pytest.raises(ValueError):
        Revision(sources=(0,), stages=frozenset({"nope"}))


def test_trainer_feedback_round_on_arith(tmp_path, monkeypatch):
    """One joint step: first group, feedback-conditioned group and re-placed rows in one batch;
    the re-placed rows are the original prompt + the second round's responses with μ's log-probs;
    both rounds are charged to the sample budget."""
    from rlsuite.suite.runner import execute
    from rlsuite.suite.spec import resolve
    from rlsuite.suite.trainer import Trainer

    torch.set_num_threads(1)
    seen = []
    real = Trainer._update

    def spy(self, batch, c):
        seen.append((batch, dict(self.budget.counters)))
        return real(self, batch, c)

    monkeypatch.setattr(Trainer, "_update", spy)
    spec = resolve("arith", "fbos_rl", "tiny", 0, sets=[("model.warm_start", "none"), ("algo.schedule", "joint"),
                                                       ("rollout.prompts_per_step", 4), ("rollout.group_size", 4),
                                                       ("eval.max_prompts", 4),
                                                       ("eval.test_prompts", 4)], budgets=[("updates", 2)])
    code, run = execute(spec, tmp_path)
    assert code == 0
    b, counters = seen[0]
    st = b.stage
    k = int((st == 1).sum()) // 4  # revised groups (no group is solved without a warm start)
    assert int((st == 0).sum()) == 16 and k >= 1 and int((st == 2).sum()) == 4 * k
    assert counters["samples"] == 16 + 4 * k  # both rounds charged
    fb, rp = b.select(torch.nonzero(st == 1).flatten()), b.select(torch.nonzero(st == 2).flatten())
    for j in range(4 * k):
        assert int(rp.group_id[j]) < 4 and int(fb.group_id[j]) >= 4
        assert torch.equal(rp.tokens[j][rp.loss_mask[j].bool()], fb.tokens[j][fb.loss_mask[j].bool()])
        assert torch.equal(rp.behav_logp[j][rp.loss_mask[j].bool()], fb.behav_logp[j][fb.loss_mask[j].bool()])
        # the prompt part is the original prompt of its group (a first-round row of the same group)
        g0 = int(torch.nonzero((b.stage == 0) & (b.group_id == rp.group_id[j]))[0])
        assert torch.equal(rp.tokens[j][: b.prompt_width], b.tokens[g0][: b.prompt_width])
    on = b.loss_mask * (st != 2)[:, None]
    assert float(((b.old_logp - b.behav_logp).abs() * on).max()) < 1e-4  # on-policy rows: π_old = μ
    off = b.loss_mask * (st == 2)[:, None]
    assert float(((b.old_logp - b.behav_logp).abs() * off).max()) > 1e-3  # re-placed rows: the prompt changed
    from rlsuite.suite.runfolder import read_jsonl
    row = read_jsonl(run / "metrics.jsonl")[0]
    assert row["revise/groups"] == k and "algo/fbos/is_weight_mean" in row
    # the shared reward statistics describe the first round (the task's own prompts) only
    assert row["reward/mean"] == pytest.approx(float(b.scores[st == 0].mean())) == \
        pytest.approx(row["revise/first_score"])
