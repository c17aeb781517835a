"""Contract tests over every registered algorithm (later entries are checked for free).

* metadata: summary, citation, fidelity label, switches that are real config fields, needs
  within the documented vocabulary;
* a 2-step run of the shared trainer, unchanged, on a fake two-turn environment task with
  the tiny model: completes, finite losses, the standard metric keys;
* the canonical batch: ``loss`` returns a finite ``[B, T]`` tensor that is 0 off the mask;
  ``old_logp_before_update`` says truly whether advantages and filter read π_old.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from rlsuite import algorithms  # noqa: F401
from rlsuite.algorithms.base import ALGORITHMS, NEEDS, Context
from rlsuite.suite.config import ModelConfig
from rlsuite.suite.models import load_model
from rlsuite.suite.rollout import collect
from rlsuite.suite.runfolder import read_jsonl
from rlsuite.suite.runner import execute
from rlsuite.suite.engines.kv import KVSampler
from rlsuite.suite.engines.base import SamplingParams
from rlsuite.suite.spec import resolve
from tests.fakes import OBS, TwoTurnEnv  # noqa: E402  (registers the fake tasks)

# the suite's entries: not the fakes other test modules register at import (``_test_*``), which join
# the registry first when such a module is collected before this one
ALGOS = [n for n in ALGORITHMS.names() if not n.startswith("_test")]


@pytest.mark.parametrize("name", ALGOS)
def test_metadata(name):
    cls = ALGORITHMS.get(name)
    d = cls.describe()
    assert d["name"] == name and d["summary"] and d["citation"]
    assert d["fidelity"] in ("code", "paper", "abstract", "description")
    fields = {f.name for f in dataclasses.fields(cls.Config)}
    assert set(cls.switches) <= fields, "switches must be config fields"
    assert set(d["needs"]) <= NEEDS
    if d["fidelity"] in ("abstract", "description"):
        assert d["assumptions"], "reconstructed entries must list their assumptions"
    assert cls.__module__ and (cls.__doc__ or __import__(cls.__module__).__doc__)


def test_two_turn_rollout_masks_observations():
    model, tok, _ = load_model(ModelConfig(warm_start="none"))
    eng = KVSampler(model, tok)
    prompts = [tok.encode("q1:")] * 6
    rec, _ = collect(eng, tok, prompts, SamplingParams(max_new_tokens=12, temperature=1.0,
                                                       stop_ids=(tok.eos_token_id,)),
                     torch.Generator().manual_seed(0), envs=[TwoTurnEnv() for _ in prompts], max_turns=2)
    obs_ids = tok.encode(OBS, add_special_tokens=False)
    multi = 0
    for b in range(rec.batch_size):
        resp = rec.tokens[b, rec.prompt_width:].tolist()
        mask = rec.loss_mask[b, rec.prompt_width:].tolist()
        turns = rec.turn_id[b, rec.prompt_width:].tolist()
        # observation ids are appended verbatim and masked out; policy tokens count ≤ max_new_tokens
        for i in range(len(resp) - len(obs_ids) + 1):
            if resp[i:i + len(obs_ids)] == obs_ids and all(m == 0 for m in mask[i:i + len(obs_ids)]):
                multi += 1
                assert max(turns) == 1 and turns[i] == 0
                break
        assert sum(mask) <= 12
        assert (rec.behav_logp[b] * (1 - rec.loss_mask[b])).abs().sum() == 0
        assert (rec.turn_id[b, :rec.prompt_width] == -1).all()
    assert multi >= 3, "the fake environment should make most episodes two-turn"


@pytest.mark.parametrize("name", ALGOS)
def test_every_algorithm_trains_unchanged_on_a_two_turn_task(name, tmp_path):
    spec = resolve("_two_turn_test", name, "tiny", 0, sets=[("model.warm_start", "none")])
    code, run_dir = execute(spec, tmp_path)
    assert code == 0
    rows = read_jsonl(run_dir / "metrics.jsonl")
    assert len(rows) == 2
    for r in rows:
        assert math.isfinite(r["loss/total"]) and math.isfinite(r["stats/entropy"])
        assert r["len/response_mean"] <= 12
        assert r["stability/nonfinite"] == 0
    evals = read_jsonl(run_dir / "evals.jsonl")
    assert {e["split"] for e in evals if e["final"]} == {"val", "test"}


def _canonical_batch():
    """2 prompts × 3 samples, T = 6 (prompt width 2), hand-set log-probs and rewards."""
    from rlsuite.suite.types import Batch

    B, T = 6, 6
    mask = torch.tensor([[0, 0, 1, 1, 1, 0]] * 3 + [[0, 0, 1, 1, 0, 0]] * 3, dtype=torch.float)
    logp = -torch.rand(B, T, generator=torch.Generator().manual_seed(0)) * mask
    tokens = torch.randint(4, 50, (B, T), generator=torch.Generator().manual_seed(1))
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0])
    last = torch.zeros(B, T)
    last[:3, 4] = rewards[:3]
    last[3:, 3] = rewards[3:]
    return Batch(tokens=tokens, attn_mask=(mask + torch.tensor([1, 1, 0, 0, 0, 0])).clamp(max=1).long(),
                 loss_mask=mask, behav_logp=logp, turn_id=torch.where(mask > 0, 0, -1).long(),
                 policy_version=torch.zeros(B, dtype=torch.long), behaviour_id=torch.zeros(B, dtype=torch.long),
                 group_id=torch.tensor([0, 0, 0, 1, 1, 1]), example_idx=torch.tensor([0, 0, 0, 1, 1, 1]),
                 scores=rewards, rewards=rewards, truncated=torch.zeros(B, dtype=torch.bool), prompt_width=2,
                 old_logp=logp, ref_logp=logp - 0.1 * mask, values=0.5 * mask, token_rewards=last,
                 topk_ids=torch.zeros(B, T, 4, dtype=torch.long),
                 topk_logp=torch.tensor([0.4, 0.3, 0.1, 0.05]).log().expand(B, T, 4).clone(),
                 attn_stat=0.5 * mask, teacher_logp=logp - 0.2 * mask,
                 old_sum_pi_sq=(0.2 + 0.5 * logp.exp() ** 2) * mask)


@pytest.mark.parametrize("name", ALGOS)
def test_loss_on_the_canonical_batch(name):
    from rlsuite.suite.types import Forward

    cls = ALGORITHMS.get(name)
    algo = cls(cls.Config(name=name))
    batch = _canonical_batch()
    ctx = Context(step=1, progress=0.1, entropy=1.0, max_new_tokens=4, group_size=3, prompts_per_step=2, n_train=10,
                  seed=0, policy=None, generator=lambda s: torch.Generator().manual_seed(0),
                  charge=lambda *a: None)
    adv = algo.advantages(batch, ctx)
    assert adv.adv.shape == batch.loss_mask.shape and torch.isfinite(adv.adv).all()
    assert (adv.adv * (1 - batch.loss_mask)).abs().sum() == 0
    batch = dataclasses.replace(batch, adv=adv.adv, returns=adv.returns, extras={**batch.extras, **adv.extras})
    logp = (batch.old_logp + 0.05 * batch.loss_mask).requires_grad_(True)
    fwd = Forward(logp=logp, entropy=torch.ones_like(logp), values=(0.4 * batch.loss_mask).requires_grad_(True),
                  hidden=torch.zeros(6, 6, 8), attn_stat=batch.attn_stat, topk_logp=batch.topk_logp + 0.01)
    loss, metrics = algo.loss(fwd, batch, ctx)
    assert loss.shape == batch.loss_mask.shape and torch.isfinite(loss).all()
    assert (loss * (1 - batch.loss_mask)).abs().sum() == 0
    assert all(k.count("/") >= 1 for k in metrics)
    loss.sum().backward()
    assert logp.grad is not None and torch.isfinite(logp.grad).all()


def _pre_update(cls, name, batch):
    """An entry's advantages and filter on ``batch`` (a fresh instance: some keep state)."""
    algo = cls(cls.Config(name=name))
    ctx = Context(step=1, progress=0.1, entropy=1.0, max_new_tokens=4, group_size=3, prompts_per_step=2, n_train=10,
                  seed=0, policy=None, generator=lambda s: torch.Generator().manual_seed(0), charge=lambda *a: None)
    adv = algo.advantages(batch, ctx)
    keep = algo.filter(dataclasses.replace(batch, adv=adv.adv, returns=adv.returns), ctx)
    tensors = [adv.adv, adv.returns, adv.loss_mask, keep, *(adv.extras[k] for k in sorted(adv.extras))]
    return sorted(adv.extras), tensors


@pytest.mark.parametrize("name", ALGOS)
def test_old_logp_before_update_is_declared_truthfully(name):
    """``old_logp_before_update = False`` lets the trainer take π_old from the update's forward,
    after advantages and filter ran without it: such an entry's advantages and filter must be the
    same with ``old_logp`` absent; an entry declaring True must actually read it."""
    cls = ALGORITHMS.get(name)
    batch = _canonical_batch()
    with_old = _pre_update(cls, name, batch)
    try:
        without = _pre_update(cls, name, dataclasses.replace(batch, old_logp=None))
    except (TypeError, AttributeError, ValueError):
        without = None  # read it: None has no arithmetic (or the entry refuses a batch without it)
    same = without is not None and with_old[0] == without[0] and all(
        (a is None and b is None) or (a is not None and b is not None and torch.equal(a, b))
        for a, b in zip(with_old[1], without[1]))
    declared = cls(cls.Config(name=name)).old_logp_before_update  # a class flag, or a property of the config
    assert same != declared, (
        f"{name}: old_logp_before_update={declared}, but its advantages/filter "
        f"{'do not read' if same else 'read'} batch.old_logp")
