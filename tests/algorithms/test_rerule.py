"""ReRULE (``algorithms/rerule.py``): buffer admission by threshold and spread, the warm-up, FIFO
capacity and use limits, the mixed loss L_GRPO(fresh) + λ·L_IS(replayed) with the truncated
importance weight worked by hand on a small batch, and kill-and-resume with replay active.

Every expected number is worked out in the comments, never by the code under test.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from rlsuite.algorithms.rerule import ReRULE, ReRULEConfig
from rlsuite.suite.aggregation import aggregation_weights
from rlsuite.suite.ops import clipped_surrogate
from rlsuite.suite.types import Batch, Rollout, cat_rollouts
from tests.fakes import comparable_rows, crash_then_resume, hand_batch, hook_ctx


D = torch.float64


def t(x):
    return torch.tensor(x, dtype=D)


def ctx(step: int, max_new_tokens: int = 4):
    return hook_ctx(gen_seed=step, step=step, max_new_tokens=max_new_tokens, group_size=4, prompts_per_step=3)


def algo(**kw) -> ReRULE:
    return ReRULE(ReRULEConfig(name="rerule", **kw))


def fresh_batch(rewards, grade_error=None) -> Batch:
    """Groups of 4 rows, T = 3, every row 2 policy tokens; rewards per row."""
    B = len(rewards)
    mask = [[0, 1, 1]] * B
    kw = {"grade_error": torch.tensor(grade_error)} if grade_error is not None else {}
    return hand_batch(mask, [i // 4 for i in range(B)], rewards, old_logp=torch.zeros(B, 3, dtype=D), **kw)


# ======================================================================================
# Admission. Group 0: [0, 0, 1, 0] → mean 0.25 < 0.4, rewards differ → stored.
#            Group 1: [0, 0, 0, 0] → mean 0 < 0.4 but all equal (zero advantage) → stored only
#                     with require_spread off.
#            Group 2: [1, 0, 1, 0] → mean 0.5 ≥ 0.4 → never stored.
R3 = [0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 1, 0]


def test_admission_by_threshold_and_spread():
    a = algo()
    out = a.advantages(fresh_batch(R3), ctx(1))
    m = out.metrics
    counts = [m[f"algo/rerule/{k}"] for k in ("low_groups", "low_flat_groups", "admitted_groups")]
    assert counts == [2, 1, 1]
    assert len(a.buffer) == 1
    stored = a.buffer[0]["rows"]
    assert stored.batch_size == 4 and stored.group_id.tolist() == [0, 0, 0, 0]
    assert stored.rewards.tolist() == [0, 0, 1, 0] and stored.example_idx.tolist() == [0, 1, 2, 3]
    # require_spread off: group 1 (all zero) is stored too
    b = algo(require_spread=False)
    b.advantages(fresh_batch(R3), ctx(1))
    assert [e["rows"].example_idx.tolist() for e in b.buffer] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_threshold_is_strict():
    # group 2's mean is exactly 0.5: not below T = 0.5, below T = 0.51
    a, b = algo(threshold=0.5), algo(threshold=0.51)
    a.advantages(fresh_batch(R3), ctx(1))
    b.advantages(fresh_batch(R3), ctx(1))
    assert [e["rows"].example_idx[0].item() for e in a.buffer] == [0]
    assert [e["rows"].example_idx[0].item() for e in b.buffer] == [0, 8]


def test_groups_with_a_grade_error_are_not_stored():
    a = algo()
    a.advantages(fresh_batch(R3, grade_error=[False, True] + [False] * 10), ctx(1))
    assert a.buffer == []


def test_store_phase_and_fifo_capacity():
    # store = warmup (default): admitted at steps 1..warmup_steps only
    a = algo(warmup_steps=2)
    for step in (1, 2, 3):
        a.advantages(fresh_batch(R3), ctx(step))
    assert [e["step"] for e in a.buffer] == [1, 2]
    # store = always, capacity 2: the oldest leaves first
    b = algo(warmup_steps=2, store="always", buffer_size=2)
    for step in (1, 2, 3):
        b.advantages(fresh_batch(R3), ctx(step))
    assert [e["step"] for e in b.buffer] == [2, 3]


# ======================================================================================
# Warm-up and replay: nothing before step warmup_steps + 1; then replay_groups groups, each its
# own group id, uses counted, and dropped after max_uses.

def filled(n_groups: int, **kw) -> ReRULE:
    a = algo(**kw)
    for step in range(1, n_groups + 1):  # one qualifying group (group 0 of R3) a step
        a.advantages(fresh_batch(R3), ctx(step))
    return a


def test_warmup_then_replay():
    a = filled(3, warmup_steps=3, replay_groups=2)
    assert a.replay(ctx(3)) is None and a.n_replayed == 0  # still in the warm-up
    out = a.replay(ctx(4))
    assert out is not None and out.batch_size == 8 and a.n_replayed == 8
    assert sorted(set(out.group_id.tolist())) == [0, 1]  # two distinct groups
    assert sorted(e["uses"] for e in a.buffer) == [0, 1, 1]
    assert len(a.buffer) == 3  # max_uses = 0: no limit


def test_max_uses_drops_replayed_groups():
    a = filled(3, warmup_steps=3, replay_groups=2, max_uses=1)
    a.replay(ctx(4))
    assert len(a.buffer) == 1 and a.buffer[0]["uses"] == 0
    out = a.replay(ctx(5))  # fewer left than replay_groups
    assert out.batch_size == 4 and a.buffer == []
    assert a.replay(ctx(6)) is None and a.n_replayed == 0


def test_no_replay_is_grpo_exactly():
    from rlsuite.algorithms.grpo import GRPO, GRPOConfig

    a, g = algo(), GRPO(GRPOConfig(name="grpo"))
    b = fresh_batch(R3)
    torch.testing.assert_close(a.advantages(b, ctx(1)).adv, g.advantages(b, ctx(1)).adv)


# ======================================================================================
# The mixed loss, by hand. B = 4: rows 0-1 fresh (group 0), rows 2-3 replayed (group 1); T = 3.
#   fresh   rewards [1, 0], lengths 2, 2
#   replay  rewards [0, 1], lengths 2, 1;  log π_old − log μ: row 2 [0.2, 0.3], row 3 [1.0]
# GRPO z-score of a group [1, 0] (or [0, 1]): mean 0.5, unbiased std √(0.25+0.25) = 0.707107,
#   Â = ±0.5/(0.707107 + 1e-6) = ±0.707106.
# token-mean aggregation: w = 1/7 per policy token (7 tokens); S_f = 4/7, S_r = 3/7, S = 1.
#   s_fresh = S/S_f = 7/4 = 1.75; s_replay = λ·S/S_r = 0.5·7/3 = 1.166667 (λ = 0.5).
# Sequence IS, c = 2: row 2 ρ = e^(0.2+0.3) = e^0.5 = 1.648721; row 3 e^1 = 2.718 → truncated to 2.
#   adv row 0 = +0.707106·1.75 = 1.237435      row 1 = −1.237435
#   adv row 2 = −0.707106·1.166667·1.648721 = −0.824957·1.648721 = −1.360124 (both tokens)
#   adv row 3 = +0.824957·2 = 1.649913
# Token IS: row 2 ρ = [e^0.2, e^0.3] = [1.221403, 1.349859] → adv −0.824957·ρ = [−1.007604, −1.113575];
#   row 3 as above.
MASK = [[0, 1, 1], [0, 1, 1], [0, 1, 1], [0, 1, 0]]
OLD = [[0, 0, 0], [0, 0, 0], [0, 0.2, 0.3], [0, 1.0, 0]]


def mixed_batch() -> Batch:
    return hand_batch(MASK, [0, 0, 1, 1], [1, 0, 0, 1], old_logp=t(OLD))


def mixed_adv(**kw):
    a = algo(**{"replay_weight": 0.5, "aggregation": "token-mean", **kw})
    a.n_replayed = 2  # as replay() leaves it when it appended rows 2-3
    return a, a.advantages(mixed_batch(), ctx(30))


def test_mixed_advantage_sequence_is():
    a, out = mixed_adv()
    want = t([[0, 1.237435, 1.237435], [0, -1.237435, -1.237435], [0, -1.360124, -1.360124], [0, 1.649913, 0]])
    torch.testing.assert_close(out.adv, want, atol=2e-6, rtol=0)
    m = out.metrics
    assert m["algo/rerule/fresh_scale"] == pytest.approx(1.75) and m["algo/rerule/replay_scale"] == pytest.approx(7 / 6)
    assert m["algo/rerule/rho_mean"] == pytest.approx((math.exp(0.5) + 2) / 2)  # 1.824361
    assert m["algo/rerule/rho_truncated_frac"] == 0.5  # row 3


def test_mixed_advantage_token_is():
    _, out = mixed_adv(is_level="token")
    torch.testing.assert_close(out.adv[2], t([0, -1.007604, -1.113575]), atol=2e-6, rtol=0)
    torch.testing.assert_close(out.adv[3], t([0, 1.649913, 0]), atol=2e-6, rtol=0)


def test_mixed_loss_gradient_is_grpo_on_fresh_plus_lambda_is_on_replayed():
    """Through the trainer's path (GRPO's clipped surrogate, token-mean weights of the whole batch)
    at π_θ = π_old, the gradient on a token is −w·adv: fresh tokens −Â/4 (a token mean over the 4
    fresh tokens alone), replayed tokens −λ·ρ·Â/3 (a token mean over the 3 replayed tokens alone).
      row 0: −0.707106/4 = −0.176776;  row 1: +0.176776
      row 2: −0.5·1.648721·(−0.707106)/3 = +0.194303;  row 3: −0.5·2·0.707106/3 = −0.235702"""
    a, out = mixed_adv()
    b = dataclasses.replace(mixed_batch(), adv=out.adv)
    logp = b.old_logp.clone().requires_grad_(True)
    loss, _ = clipped_surrogate(logp, b.old_logp, b.adv, b.loss_mask, 0.2, 0.2)
    (aggregation_weights(b.loss_mask, "token-mean", 4) * loss).sum().backward()
    want = t([[0, -0.176776, -0.176776], [0, 0.176776, 0.176776], [0, 0.194303, 0.194303], [0, -0.235702, 0]])
    torch.testing.assert_close(logp.grad, want, atol=2e-6, rtol=0)


def test_seq_mean_token_mean_shares():
    # the default aggregation: w = 1/(B·|y_b|), every row sums to 1/4, S_f = S_r = 0.5
    #   s_fresh = 1/0.5 = 2, s_replay = λ·1/0.5 = 2 (λ = 1): the fresh rows' mean and the replayed
    #   rows' mean each weigh as one whole batch.
    a = algo()
    a.n_replayed = 2
    m = a.advantages(mixed_batch(), ctx(30)).metrics
    assert (m["algo/rerule/fresh_scale"], m["algo/rerule/replay_scale"]) == (2.0, 2.0)


def test_replay_weight_zero_and_flat_replayed_group():
    _, out = mixed_adv(replay_weight=0.0)  # λ = 0: replayed rows carry no gradient
    assert out.adv[2:].abs().max() == 0
    a = algo(replay_weight=0.5, aggregation="token-mean")
    a.n_replayed = 2
    flat = hand_batch(MASK, [0, 0, 1, 1], [1, 0, 0, 0], old_logp=t(OLD))  # replayed group all 0
    assert a.advantages(flat, ctx(30)).adv[2:].abs().max() == 0  # zero group-relative advantage


def test_replayed_rows_come_back_with_their_behaviour_logprobs():
    a = algo(warmup_steps=1, store="always")
    b = fresh_batch(R3)
    b = dataclasses.replace(b, behav_logp=-0.5 * b.loss_mask)
    a.advantages(b, ctx(1))
    stale = a.replay(ctx(2))
    assert stale.behav_logp[:, 1:].tolist() == [[-0.5, -0.5]] * 4 and stale.policy_version.tolist() == [0] * 4
    rec = fresh_batch(R3[:4])
    rec = Rollout(**{f.name: getattr(rec, f.name) for f in dataclasses.fields(Rollout)})
    both = cat_rollouts([rec, stale])  # as the trainer appends them to the fresh rollout
    assert both.group_id.tolist() == [0] * 4 + [1] * 4


def test_state_round_trip():
    a = filled(2, warmup_steps=2)
    a.replay(ctx(3))
    b = algo(warmup_steps=2)
    b.load_state_dict(a.state_dict())
    assert [(e["uses"], e["step"]) for e in b.buffer] == [(e["uses"], e["step"]) for e in a.buffer]
    assert torch.equal(b.buffer[0]["rows"].tokens, a.buffer[0]["rows"].tokens)


# ======================================================================================
# The trainer, with replay from step 2: rows are appended, and kill-and-resume ends the same.

def test_trainer_replays_and_resumes_identically(tmp_path, monkeypatch):
    from rlsuite.suite.runfolder import read_jsonl
    from rlsuite.suite.runner import execute
    from rlsuite.suite.spec import resolve
    from tests import fakes  # noqa: F401  (the fake tasks)

    sets = [("model.warm_start", "none"), ("train.checkpoint_every", 2), ("algo.warmup_steps", 1),
            ("algo.threshold", 1.0), ("algo.store", "always"), ("algo.replay_groups", 2)]
    spec = resolve("_parity_test", "rerule", "tiny", 0, sets=sets, budgets=[("updates", 4)])
    code, ref = execute(spec, tmp_path / "ref")
    assert code == 0
    rows = read_jsonl(ref / "metrics.jsonl")
    assert "replay/rows" not in rows[0] and all(r["replay/rows"] > 0 for r in rows[1:]), \
        [r.get("replay/rows") for r in rows]
    run = crash_then_resume(spec, tmp_path / "crash", monkeypatch)
    assert comparable_rows(read_jsonl(run / "metrics.jsonl")) == comparable_rows(rows)
