"""The generic zero-variance-group filter (``rollout.filter_zero_variance``: SkyRL's
``zero_variance_filter``, verl's ``filter_groups``) and ScaleRL's no-positive-resampling
curriculum (``rollout.retire_pass_rate``, arXiv 2510.13786). Every expected number is worked out
by hand below. The filter's cases are SkyRL's own (``tests/train/test_trainer_utils.py``,
``test_zero_variance_filter_*`` at commit a956457): the same inputs, the rows SkyRL keeps."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from rlsuite.suite.config import RolloutConfig
from rlsuite.suite.curriculum import Curriculum, zero_variance_rows
from rlsuite.suite.errors import BadInput
from rlsuite.suite.types import Batch
from tests.fakes import comparable_rows, crash_then_resume


def _flat(scores, groups, live=None):
    live = None if live is None else torch.tensor(live)
    return zero_variance_rows(torch.tensor(scores), torch.tensor(groups), live).tolist()


def test_zero_variance_groups_as_skyrl():
    # uid1 varies (keep 0, 1); uid2 has 3.0 twice (drop 2, 3); uid3 is a singleton (keep 4)
    assert _flat([1.0, 2.0, 3.0, 3.0, 5.0], [1, 1, 2, 2, 3]) == [False, False, True, True, False]
    assert _flat([1.0, 1.0, 2.0, 2.0], [0, 0, 1, 1]) == [True] * 4  # every group flat: none kept
    assert _flat([1.0, 1.0, 1.0], [0, 1, 2]) == [False] * 3  # singletons are kept
    # masked rows are not compared: (1, 1) live with (0, 0) masked is flat, so the whole group goes
    assert _flat([1.0, 1.0, 0.0, 0.0], [0, 0, 0, 0], [True, True, False, False]) == [True] * 4
    # one live row: a singleton, kept
    assert _flat([1.0, 0.0], [0, 0], [True, False]) == [False, False]
    assert _flat([1.0, 1.0], [0, 0], [False, False]) == [False, False]


def _batch(scores, groups, example=None, stage=None):
    B = len(scores)
    z = torch.zeros(B, 2)
    return Batch(tokens=torch.zeros(B, 2, dtype=torch.long), attn_mask=torch.ones(B, 2, dtype=torch.long),
                 loss_mask=torch.ones(B, 2), behav_logp=z, turn_id=torch.zeros(B, 2, dtype=torch.long),
                 policy_version=torch.zeros(B, dtype=torch.long), behaviour_id=torch.zeros(B, dtype=torch.long),
                 group_id=torch.tensor(groups), example_idx=torch.tensor(example if example else groups),
                 scores=torch.tensor(scores), rewards=torch.tensor(scores), truncated=torch.zeros(B, dtype=torch.bool),
                 prompt_width=0, stage=None if stage is None else torch.tensor(stage))


def test_mask_zeroes_the_loss_mask_and_drop_adds_to_the_entrys_filter():
    b = _batch([1.0, 1.0, 0.0, 1.0, 0.0, 0.0], [0, 0, 1, 1, 2, 2])  # groups 0 and 2 are flat
    masked, m = Curriculum(RolloutConfig(filter_zero_variance="mask"), 8).mask(b)
    assert masked.loss_mask[:, 0].tolist() == [0, 0, 1, 1, 0, 0]
    assert m == {"filter/zero_variance_frac": pytest.approx(4 / 6)}
    off = Curriculum(RolloutConfig(), 8)
    assert off.mask(b) == (b, {}) and off.keep(b, None) is None
    drop = Curriculum(RolloutConfig(filter_zero_variance="drop"), 8)
    assert drop.mask(b)[0] is b  # (the rows leave after the advantages)
    assert drop.keep(b, None).tolist() == [False, False, True, True, False, False]
    entry = torch.tensor([True, True, True, False, True, True])  # an entry's own filter: both must keep
    assert drop.keep(b, entry).tolist() == [False, False, True, False, False, False]
    assert Curriculum(RolloutConfig(filter_zero_variance="mask"), 8).keep(b, entry) is entry


def test_prompts_reaching_the_pass_rate_retire():
    cur = Curriculum(RolloutConfig(retire_pass_rate=0.75), 8)
    # prompt 3: 3 of 4 correct (0.75 ≥ 0.75: retired); prompt 5: 2 of 4 (0.5: stays)
    cur.record(_batch([1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0], [0] * 4 + [1] * 4, [3] * 4 + [5] * 4), 8)
    assert cur.retired == {3} and cur.metrics() == {"curriculum/retired_frac": 1 / 8}
    # only the first n_fresh rows (replayed rows follow) and first-round rows (stage 0) count: prompt 6's
    # first-round rows score 0.5, its feedback rows (stage 1) and a replayed row 1.0
    cur.record(_batch([1.0, 0.0, 1.0, 1.0, 1.0], [2, 2, 3, 3, 4], [6, 6, 6, 6, 6], stage=[0, 0, 1, 1, 0]), 4)
    assert cur.retired == {3}
    assert not cur.draws(3) and cur.draws(5)
    again = Curriculum(RolloutConfig(retire_pass_rate=0.75), 8)
    again.load_state_dict(cur.state_dict())
    assert cur.state_dict() == {"retired": [3]} and again.retired == {3}
    off = Curriculum(RolloutConfig(), 8)
    off.record(_batch([1.0, 1.0], [0, 0]), 2)
    assert off.retired == set() and off.state_dict() == {} and off.metrics() == {}
    full = Curriculum(RolloutConfig(retire_pass_rate=0.5), 2)
    full.retired = {0, 1}
    with pytest.raises(RuntimeError, match="every train prompt reached rollout.retire_pass_rate=0.5"):
        full.draws(0)


def test_the_draw_skips_retired_prompts_and_keeps_every_other_position():
    """The trainer's seeded passes with prompts 0..3 retired: the same sequence as without them, less
    the retired ones; the cursor counts the permutation's positions, retired or not."""
    from rlsuite.suite.trainer import Trainer

    def drawer(retired):
        cur = Curriculum(RolloutConfig(retire_pass_rate=0.9), 10)
        cur.retired = set(retired)
        return SimpleNamespace(state=SimpleNamespace(cursor=0, curriculum=cur), splits={"train": list(range(10))},
                               spec=SimpleNamespace(seed=0))

    plain, skipping = drawer(()), drawer(range(4))
    seq = [i for _ in range(5) for i in Trainer._draw_prompts(plain, 4)]  # 20 draws: two passes
    got = [i for _ in range(5) for i in Trainer._draw_prompts(skipping, 4)]
    assert sorted(seq[:10]) == list(range(10)) and sorted(seq[10:]) == list(range(10))
    assert got == [i for i in seq + [i for _ in range(3) for i in Trainer._draw_prompts(plain, 4)]
                   if i >= 4][:20]
    assert all(i >= 4 for i in got) and len(got) == 20


def _spec(*sets, algo="grpo"):
    from rlsuite.suite.spec import resolve
    from tests import fakes  # noqa: F401  (the _parity_test task)

    return resolve("_parity_test", algo, "tiny", 0, sets=[("model.warm_start", "none"), *sets],
                   budgets=[("updates", 4)])


def test_settings_identity_and_refusals():
    assert _spec(("rollout.filter_zero_variance", "off"), ("rollout.retire_pass_rate", None)).run_id == _spec().run_id
    assert _spec(("rollout.filter_zero_variance", "mask")).run_id != _spec().run_id
    assert _spec(("rollout.retire_pass_rate", 0.9)).run_id != _spec().run_id
    with pytest.raises(BadInput, match="rollout.filter_zero_variance: 'all' is not valid; valid: off, mask, drop"):
        _spec(("rollout.filter_zero_variance", "all"))
    with pytest.raises(BadInput, match=r"rollout.retire_pass_rate must be in \(0, 1\], got 0"):
        _spec(("rollout.retire_pass_rate", 0))


def test_an_entry_drawing_its_own_prompts_refuses_the_curriculum(tmp_path):
    from rlsuite.suite.runner import execute

    with pytest.raises(BadInput, match="algo 'is_grpo' draws its own prompts .*valid: rollout.retire_pass_rate=null"):
        execute(_spec(("rollout.retire_pass_rate", 0.9), algo="is_grpo"), tmp_path)


def test_the_trainer_filters_and_retires(tmp_path, monkeypatch):
    """``mask``: the flat groups' share is logged and their rows leave the loss; ``drop``: they are
    discarded and refilled; the curriculum never draws a prompt it retired, and its retired set
    survives a crash after the step-2 checkpoint (the resumed run logs what the uninterrupted one does)."""
    from rlsuite.suite.runfolder import read_jsonl
    from rlsuite.suite.runner import execute
    from rlsuite.suite.trainer import Trainer

    code, run = execute(_spec(("rollout.filter_zero_variance", "mask")), tmp_path / "mask")
    assert code == 0
    rows = read_jsonl(run / "metrics.jsonl")
    assert all(0 <= r["filter/zero_variance_frac"] <= 1 and r["filter/discarded"] == 0 for r in rows)
    code, run = execute(_spec(("rollout.filter_zero_variance", "drop")), tmp_path / "drop")
    assert code == 0
    rows = read_jsonl(run / "metrics.jsonl")
    # every row of the first draw's flat groups (16 rows a draw) is discarded, and refills may add more
    assert all(r["filter/discarded"] >= round(r["filter/zero_variance_frac"] * 16) for r in rows)
    assert any(r["filter/discarded"] > 0 for r in rows)

    seen: list[tuple[set, list]] = []
    real_draw = Trainer._draw_prompts

    def spy(self, n):
        before = set(self.state.curriculum.retired)
        out = real_draw(self, n)
        seen.append((before, out))
        return out

    monkeypatch.setattr(Trainer, "_draw_prompts", spy)
    spec = _spec(("rollout.retire_pass_rate", 1.0), ("train.checkpoint_every", 2))
    code, ref = execute(spec, tmp_path / "ref")
    assert code == 0
    full = read_jsonl(ref / "metrics.jsonl")
    # groups whose 4 samples all pass retire (here 2 of the 8 prompts at step 1, 5 by step 3)
    assert 0 < full[1]["curriculum/retired_frac"] < full[-1]["curriculum/retired_frac"] < 1
    assert all(not (before & set(out)) for before, out in seen)
    run = crash_then_resume(spec, tmp_path / "crash", monkeypatch)
    assert comparable_rows(read_jsonl(run / "metrics.jsonl")) == comparable_rows(full)


def test_dapo_keeps_its_filter():
    """DAPO's dynamic sampling is its own (a singleton group is dropped there, kept by the generic
    filter); its config and so its run ids are unchanged."""
    from rlsuite.algorithms.dapo import DAPO, DAPOConfig

    b = _batch([1.0, 1.0, 0.0, 1.0, 1.0], [0, 0, 1, 1, 2])
    assert DAPO(DAPOConfig()).filter(b, None).tolist() == [False, False, True, True, False]
    assert DAPO(dataclasses.replace(DAPOConfig(), dynamic_sampling=False)).filter(b, None) is None


def test_pi_old_from_the_update_with_the_mask_and_its_scoring_pass_with_drop(tmp_path, monkeypatch):
    """``mask`` keeps π_old from the update's own forward (``Scorer.from_update``): every metric equals
    the run with the scoring pass bit for bit; ``drop`` filters like an entry's own filter, so it keeps
    the pass (its FLOPs are charged)."""
    from rlsuite.suite.runfolder import read_jsonl
    from rlsuite.suite.runner import execute
    from rlsuite.suite.scoring import Scorer

    rows = {}
    for on in (True, False):
        monkeypatch.setattr(Scorer, "old_from_update", on)
        code, run = execute(_spec(("rollout.filter_zero_variance", "mask")), tmp_path / str(on))
        assert code == 0
        rows[on] = read_jsonl(run / "metrics.jsonl")
    timing = ("perf/", "budget/flops", "budget/wall_s", "time")
    for a, b in zip(rows[True], rows[False]):
        assert "budget/flops_score_old" not in a and b["budget/flops_score_old"] > 0
        keys = {k for k in set(a) | set(b) if not k.startswith(timing)}
        assert {k: a.get(k) for k in keys} == {k: b.get(k) for k in keys}
    monkeypatch.setattr(Scorer, "old_from_update", True)
    code, run = execute(_spec(("rollout.filter_zero_variance", "drop")), tmp_path / "drop")
    assert code == 0 and all(r["budget/flops_score_old"] > 0 for r in read_jsonl(run / "metrics.jsonl"))
