"""Rollout records (suite.types) and budget accounting (suite.budget)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rlsuite.suite.budget import Budget, rollout_flops, scoring_flops, training_flops
from rlsuite.suite.types import Batch, Rollout, cat_rollouts

L = torch.long
F = torch.float32


def _rollout(tokens, prompt_width, loss_mask, group_id, tag: int, cls=Rollout, **kw):
    """A record whose per-token tensors are derived from ``tokens`` so rows are traceable."""
    tokens = torch.tensor(tokens, dtype=L)
    B, T = tokens.shape
    loss_mask = torch.tensor(loss_mask, dtype=F)
    turn = torch.where(torch.arange(T) >= prompt_width, torch.zeros(B, T, dtype=L), torch.full((B, T), -1))
    return cls(
        tokens=tokens,
        attn_mask=(tokens > 0).long(),
        loss_mask=loss_mask,
        behav_logp=-0.1 * tokens.float() * loss_mask,
        turn_id=turn,
        policy_version=torch.full((B,), tag, dtype=L),
        behaviour_id=torch.arange(B) + 10 * tag,
        group_id=torch.tensor(group_id, dtype=L),
        example_idx=torch.arange(B) + 100 * tag,
        scores=torch.arange(B, dtype=F) + tag,
        rewards=torch.arange(B, dtype=F) * 2 + tag,
        truncated=torch.arange(B) % 2 == 0,
        prompt_width=prompt_width,
        texts=tuple(f"t{tag}{i}" for i in range(B)),
        parsed=tuple(f"p{tag}{i}" if i % 2 else None for i in range(B)),
        topk_ids=tokens[:, :, None].repeat(1, 1, 2),
        **kw,
    )


def _part_a(cls=Rollout, **kw):
    # prompt width 2, response width 2 (T = 4); 3 rows, groups 0, 0, 1
    return _rollout([[5, 6, 7, 8], [0, 6, 9, 0], [4, 5, 3, 2]], 2,
                    [[0, 0, 1, 1], [0, 0, 1, 0], [0, 0, 1, 1]], [0, 0, 1], tag=1, cls=cls, **kw)


def _part_b(cls=Rollout, **kw):
    # prompt width 3, response width 1 (T = 4); 2 rows, one group
    return _rollout([[1, 2, 3, 4], [0, 2, 3, 5]], 3, [[0, 0, 0, 1], [0, 0, 0, 1]], [0, 0], tag=2, cls=cls, **kw)


def test_select_slices_every_per_sample_field():
    r = _part_a()
    s = r.select(torch.tensor([2, 0]))
    assert s.batch_size == 2 and s.prompt_width == 2
    for f in dataclasses.fields(Rollout):
        v, w = getattr(r, f.name), getattr(s, f.name)
        if isinstance(v, torch.Tensor):
            assert torch.equal(w, v[[2, 0]]), f.name
    assert s.texts == ("t12", "t10")
    assert s.parsed == (None, None)
    assert s.tokens.tolist() == [[4, 5, 3, 2], [5, 6, 7, 8]]
    assert s.topk_ids.shape == (2, 4, 2)
    assert s.group_id.tolist() == [1, 0]
    assert s.truncated.tolist() == [True, True]


def test_select_on_batch_slices_optional_fields_and_extras():
    a = _part_a()
    old = torch.arange(12, dtype=F).reshape(3, 4)
    b = Batch.from_rollout(a, old_logp=old, adv=old * 2,
                           extras={"w": torch.tensor([0.1, 0.2, 0.3]), "tok": old + 1, "const": 7})
    s = b.select(torch.tensor([1]))
    assert isinstance(s, Batch)
    assert s.old_logp.tolist() == [[4.0, 5.0, 6.0, 7.0]]
    assert s.adv.tolist() == [[8.0, 10.0, 12.0, 14.0]]
    assert s.extras["w"].tolist() == pytest.approx([0.2])
    assert s.extras["tok"].tolist() == [[5.0, 6.0, 7.0, 8.0]]
    assert s.extras["const"] == 7
    assert s.ref_logp is None
    assert s.texts == ("t11",) and s.parsed == ("p11",)


def test_cat_rollouts_repads_and_offsets_groups():
    a, b = _part_a(), _part_b()
    c = cat_rollouts([a, b])
    # common prompt width 3 (from b), common response width 2 (from a) → T = 5
    assert c.prompt_width == 3 and c.tokens.shape == (5, 5)
    assert c.tokens.tolist() == [
        [0, 5, 6, 7, 8],   # a rows: 1 column of left padding
        [0, 0, 6, 9, 0],
        [0, 4, 5, 3, 2],
        [1, 2, 3, 4, 0],   # b rows: 1 column of right padding
        [0, 2, 3, 5, 0],
    ]
    assert c.loss_mask.tolist() == [
        [0, 0, 0, 1, 1],
        [0, 0, 0, 1, 0],
        [0, 0, 0, 1, 1],
        [0, 0, 0, 1, 0],
        [0, 0, 0, 1, 0],
    ]
    # turn_id: −1 on prompt and on the new padding, 0 on response positions
    assert c.turn_id.tolist() == [
        [-1, -1, -1, 0, 0],
        [-1, -1, -1, 0, 0],
        [-1, -1, -1, 0, 0],
        [-1, -1, -1, 0, -1],
        [-1, -1, -1, 0, -1],
    ]
    # the response starts at column prompt_width in every row
    assert (c.tokens[:, c.prompt_width] == torch.tensor([7, 9, 3, 4, 5])).all()
    # group ids: a has groups 0, 1 → b's group 0 becomes 2
    assert c.group_id.tolist() == [0, 0, 1, 2, 2]
    assert c.example_idx.tolist() == [100, 101, 102, 200, 201]
    assert c.texts == ("t10", "t11", "t12", "t20", "t21")
    assert c.parsed == (None, "p11", None, None, "p21")
    assert c.topk_ids.shape == (5, 5, 2)
    assert c.topk_ids[3, :, 0].tolist() == [1, 2, 3, 4, 0]
    assert c.behav_logp[0].tolist() == pytest.approx([0.0, 0.0, 0.0, -0.7, -0.8])


def test_cat_rollouts_without_group_offset():
    c = cat_rollouts([_part_a(), _part_b()], offset_groups=False)
    assert c.group_id.tolist() == [0, 0, 1, 0, 0]


def test_cat_batches_pads_token_fields_and_extras():
    a = _part_a(cls=Batch, old_logp=torch.ones(3, 4), extras={"w": torch.ones(3), "tok": torch.ones(3, 4)})
    b = _part_b(cls=Batch, old_logp=2 * torch.ones(2, 4), extras={"w": torch.zeros(2), "tok": torch.ones(2, 4)})
    c = cat_rollouts([a, b])
    assert isinstance(c, Batch)
    assert c.old_logp.tolist()[0] == [0, 1, 1, 1, 1] and c.old_logp.tolist()[3] == [2, 2, 2, 2, 0]
    assert c.extras["w"].tolist() == [1, 1, 1, 0, 0]
    assert c.extras["tok"].shape == (5, 5)
    assert c.extras["tok"][0].tolist() == [0, 1, 1, 1, 1]


# ----------------------------------------------------------------------------------------
# budget


def test_budget_progress_follows_the_binding_limit():
    b = Budget(limits={"samples": 100.0, "updates": 10.0})
    assert b.progress == 0.0 and not b.exhausted
    b.charge("samples", 50)
    b.charge("updates", 2)
    assert b.progress == pytest.approx(0.5)        # max(50/100, 2/10)
    assert not b.exhausted
    b.charge("updates", 7)
    assert b.progress == pytest.approx(0.9)        # max(0.5, 9/10)
    assert not b.exhausted
    b.charge("updates", 1)
    assert b.exhausted and b.progress == 1.0
    b.charge("samples", 1000)
    assert b.progress == 1.0                       # capped at 1


def test_budget_without_limits():
    b = Budget(limits={})
    b.charge("samples", 10)
    assert b.progress == 0.0 and not b.exhausted


def test_budget_flops_by_kind_and_state_roundtrip():
    b = Budget(limits={"flops": 1000.0})
    b.charge_flops("rollout", 300)
    b.charge_flops("train", 200)
    b.charge_flops("rollout", 100)
    assert b.counters["flops"] == 600
    assert b.flops_by_kind == {"rollout": 400, "train": 200}
    assert b.progress == pytest.approx(0.6)
    c = Budget(limits={"flops": 1000.0})
    c.load_state_dict(b.state_dict())
    assert c.counters == b.counters and c.flops_by_kind == b.flops_by_kind
    assert c.row()["budget/flops"] == 600 and isinstance(c.row()["budget/flops"], int)


def test_flops_formulas():
    # P = 1000 parameters
    assert rollout_flops(1000, 30, 70) == 2 * 1000 * 100 == 200_000
    assert scoring_flops(1000, 100) == 2 * 1000 * 100 == 200_000
    assert training_flops(1000, 100, 3) == 6 * 1000 * 100 * 3 == 1_800_000
    assert training_flops(1000, 100, 1) == 3 * scoring_flops(1000, 100)
