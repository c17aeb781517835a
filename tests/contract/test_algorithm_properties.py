"""Property contracts over every registered algorithm, on random batches with padding.

* finite loss and gradients; extra pad columns change nothing;
* on-policy (π_θ = π_old = μ): the gradient equals the plain policy gradient −A·∇log π
  under the entry's aggregation (entries with ``on_policy_pg``);
* group-relative entries give zero advantage when a group's rewards are all equal;
* every config field changes rewards, advantages, filter or loss for some input, unless the
  entry lists it in ``inert`` (trainer-applied fields are tested with the trainer);
* accumulation over micro-batches equals one big batch in every aggregation mode;
* kill-and-resume at smoke size ends with the same metrics (algorithm state included).
"""

from __future__ import annotations

import dataclasses
import typing

import pytest
import torch

from rlsuite import algorithms  # noqa: F401
from rlsuite.algorithms.base import ALGORITHMS, Context, Group
from rlsuite.suite.aggregation import AGG_MODES, aggregation_weights
from tests.fakes import comparable_rows, crash_then_resume, hook_ctx
from rlsuite.suite.types import Batch, Forward
from tests import fakes  # noqa: F401  (fake tasks)

ALGOS = ALGORITHMS.names()
TRAINER_FIELDS = {"name", "aggregation", "kl_coef", "kl_estimator", "kl_where", "kl_target", "kl_horizon",
                  "distill_coef", "teacher"}
P, G, PW, RW, K = 3, 4, 3, 6, 4
MAX_NEW = RW


def ctx() -> Context:
    return hook_ctx(gen_seed=1, step=3, progress=0.3, entropy=0.9, max_new_tokens=MAX_NEW, group_size=G,
                    prompts_per_step=P, n_train=100)


def _topk(gen: torch.Generator, shape) -> torch.Tensor:
    """Valid top-K log-probs (descending, total mass < 1)."""
    logits = torch.randn(*shape, K + 1, generator=gen) * 2
    lp = torch.log_softmax(logits, -1)[..., :K]
    return lp.sort(-1, descending=True).values


def random_batch(seed: int = 0, equal_group: bool = True) -> tuple[Batch, Forward]:
    g = torch.Generator().manual_seed(seed)
    B, T = P * G, PW + RW
    lengths = torch.randint(1, RW + 1, (B,), generator=g)
    lengths[0], lengths[1] = RW, RW - 1  # near the length cap (overlong shaping)
    mask = torch.zeros(B, T)
    for b in range(B):
        mask[b, PW:PW + lengths[b]] = 1
    attn = mask.clone().long()
    attn[:, :PW] = 1
    attn[0, 0] = 0  # one left-padded prompt
    logp = -torch.rand(B, T, generator=g) * 3 * mask
    noise = torch.randn(B, T, generator=g) * 0.7
    noise[2, PW], noise[5, PW] = 3.0, -3.0  # far outside any trust region
    old = (logp - noise).clamp(max=0) * mask
    behav = (old + 0.3 * torch.randn(B, T, generator=g)).clamp(max=0) * mask
    old[6, PW], behav[6, PW] = -1.5, -0.45  # stale tokens: ρ = π_old/μ = e^-1.05 ≈ 0.35 ...
    behav[3, PW] = old[3, PW] - 1.1  # ... and e^1.1 ≈ 3.0 (outside [0.5, 2])
    scores = torch.randint(0, 2, (B,), generator=g).float()
    if equal_group:
        scores[:G] = 1.0  # one group with all-equal scores (dynamic sampling drops it)
    scores[G] = 1.0 - scores[G + 1] if scores[G:2 * G].std() == 0 else scores[G]
    truncated = lengths == RW
    last = torch.zeros(B, T)
    last[torch.arange(B), PW + lengths - 1] = scores
    batch = Batch(tokens=torch.randint(4, 90, (B, T), generator=g) * attn, attn_mask=attn, loss_mask=mask,
                  behav_logp=behav, turn_id=torch.where(mask > 0, 0, -1).long(),
                  policy_version=torch.zeros(B, dtype=torch.long), behaviour_id=torch.zeros(B, dtype=torch.long),
                  group_id=torch.arange(B) // G, example_idx=torch.arange(B) // G, scores=scores,
                  rewards=scores.clone(), truncated=truncated, prompt_width=PW, old_logp=old,
                  ref_logp=(old - 0.1 * torch.rand(B, T, generator=g)) * mask,
                  values=torch.randn(B, T, generator=g) * mask, token_rewards=last - 0.01 * mask,
                  topk_ids=torch.randint(4, 90, (B, T, K), generator=g), topk_logp=_topk(g, (B, T)),
                  attn_stat=torch.rand(B, T, generator=g) * mask,
                  teacher_logp=(old - 8 * torch.rand(B, T, generator=torch.Generator().manual_seed(seed + 1000)))
                  * mask,
                  old_sum_pi_sq=(old.exp() ** 2 + 0.3 * torch.rand(
                      B, T, generator=torch.Generator().manual_seed(seed + 2000))).clamp(max=1) * mask)
    fwd = Forward(logp=logp, entropy=torch.rand(B, T, generator=g), hidden=torch.randn(B, T, 8, generator=g),
                  attn_stat=torch.rand(B, T, generator=g) * mask,
                  values=(batch.values + torch.randn(B, T, generator=g)) * mask, topk_logp=_topk(g, (B, T)))
    return batch, fwd


def make(name: str, **changes):
    cls = ALGORITHMS.get(name)
    return cls(dataclasses.replace(cls.Config(name=name), **changes))


def run_hooks(algo, batch: Batch, fwd: Forward, reward_hook: bool = True) -> dict[str, torch.Tensor]:
    """rewards per group → advantages → filter → loss (+ value loss); all outputs detached."""
    c = ctx()
    rewards = [] if reward_hook else [batch.rewards]
    for gi in range(P if reward_hook else 0):
        sl = slice(gi * G, (gi + 1) * G)
        grp = Group(prompt="p", example=None, completions=("x",) * G, parsed=(None,) * G, scores=batch.scores[sl],
                    lengths=batch.loss_mask[sl].sum(-1), truncated=batch.truncated[sl])
        rewards.append(torch.as_tensor(algo.rewards(grp, c), dtype=torch.float))
    batch = batch.replace(rewards=torch.cat(rewards))
    adv = algo.advantages(batch, c)
    batch = dataclasses.replace(batch, adv=adv.adv, returns=adv.returns, extras={**batch.extras, **adv.extras},
                                loss_mask=batch.loss_mask if adv.loss_mask is None else adv.loss_mask)
    keep = algo.filter(batch, c)
    loss, _ = algo.loss(fwd, batch, c)
    out = {"rewards": batch.rewards, "adv": batch.adv, "loss": loss.detach(),
           "keep": keep.float() if keep is not None else torch.ones(1)}
    if "values" in algo.needs:
        out["value_loss"] = algo.value_loss(fwd, batch, c)[0].detach()
    return out, batch


@pytest.mark.parametrize("name", ALGOS)
def test_finite_loss_and_gradients(name):
    algo = make(name)
    for seed in range(3):
        batch, fwd = random_batch(seed)
        logp = fwd.logp.clone().requires_grad_(True)
        fwd = dataclasses.replace(fwd, logp=logp)
        out, b = run_hooks(algo, batch, fwd)
        loss, _ = algo.loss(fwd, b, ctx())
        assert torch.isfinite(loss).all() and loss.shape == b.loss_mask.shape
        assert (loss * (1 - b.loss_mask)).abs().sum() == 0
        total = (aggregation_weights(b.loss_mask, algo.aggregation, MAX_NEW) * loss).sum()
        total.backward()
        assert torch.isfinite(logp.grad).all()
        assert (logp.grad * (1 - b.loss_mask)).abs().sum() == 0


def _pad(x, n: int, fill=0):
    if x is None or not isinstance(x, torch.Tensor) or x.dim() < 2:
        return x
    pad = [0, 0] * (x.dim() - 2) + [0, n]
    return torch.nn.functional.pad(x, pad, value=fill)


@pytest.mark.parametrize("name", ALGOS)
def test_extra_pad_columns_change_nothing(name):
    algo = make(name)
    batch, fwd = random_batch(1)
    out, b = run_hooks(algo, batch, fwd)
    pb = Batch(**{f.name: _pad(getattr(batch, f.name), 3, -1 if f.name == "turn_id" else 0)
                  for f in dataclasses.fields(Batch)})
    pf = Forward(**{f.name: _pad(getattr(fwd, f.name), 3) for f in dataclasses.fields(Forward)})
    pout, pbb = run_hooks(algo, pb, pf)
    T = batch.tokens.shape[1]
    torch.testing.assert_close(pout["adv"][:, :T], out["adv"])
    assert pout["adv"][:, T:].abs().sum() == 0
    for mode in {algo.aggregation}:
        a = (aggregation_weights(b.loss_mask, mode, MAX_NEW) * out["loss"]).sum()
        pa = (aggregation_weights(pbb.loss_mask, mode, MAX_NEW) * pout["loss"]).sum()
        torch.testing.assert_close(a, pa)


@pytest.mark.parametrize("name", ALGOS)
def test_on_policy_gradient_is_the_plain_policy_gradient(name):
    algo = make(name)
    if not algo.on_policy_pg:
        pytest.skip(f"{name} declares on_policy_pg = False")
    batch, fwd = random_batch(2)
    batch = batch.replace(old_logp=fwd.logp.clone(), behav_logp=fwd.logp.clone(), topk_logp=fwd.topk_logp.clone())
    _, b = run_hooks(algo, batch, fwd)
    w = aggregation_weights(b.loss_mask, algo.aggregation, MAX_NEW)
    logp = fwd.logp.clone().requires_grad_(True)
    loss, _ = algo.loss(dataclasses.replace(fwd, logp=logp), b, ctx())
    (w * loss).sum().backward()
    ref = fwd.logp.clone().requires_grad_(True)
    (w * (-b.adv * ref * b.loss_mask)).sum().backward()
    torch.testing.assert_close(logp.grad, ref.grad, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", ALGOS)
def test_equal_rewards_in_a_group_give_zero_advantage(name):
    algo = make(name)
    if not algo.group_relative:
        pytest.skip(f"{name} is not group-relative")
    batch, fwd = random_batch(3)
    batch = batch.replace(rewards=torch.full_like(batch.scores, 0.7))
    out, _ = run_hooks(algo, batch, fwd, reward_hook=False)  # equal rewards after reward shaping
    assert out["adv"].abs().max() < 1e-6


def _candidates(value, tp) -> list:
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return [v for v in typing.get_args(tp) if v != value]
    if origin is typing.Union:
        inner = [a for a in typing.get_args(tp) if a is not type(None)][0]
        return [0.5, 2.0] if value is None else [None] + _candidates(value, inner)
    if tp is bool:
        return [not value]
    if tp is int:
        return [value + 1, max(0, value - 1)]
    if tp is float:
        return [value * 0.5, value * 2 + 0.1, value + 1.0]
    return []


@pytest.mark.parametrize("name", ALGOS)
def test_every_config_field_is_live(name):
    cls = ALGORITHMS.get(name)
    base_algo = make(name)
    batch, fwd = random_batch(4)
    base, _ = run_hooks(base_algo, batch, fwd)
    hints = typing.get_type_hints(cls.Config)
    dead = []
    for f in dataclasses.fields(cls.Config):
        if f.name in TRAINER_FIELDS or f.name in cls.inert:
            continue
        live = False
        for cand in _candidates(getattr(base_algo.cfg, f.name), hints[f.name]):
            try:
                algo = make(name, **{f.name: cand})
            except (ValueError, TypeError):
                continue
            out, _ = run_hooks(algo, batch, fwd)
            if out.keys() != base.keys() or any(not torch.equal(out[k], base[k]) for k in out):
                live = True
                break
        if not live:
            dead.append(f.name)
    assert not dead, f"{name}: fields {dead} change nothing; fix them or list them in `inert` with a reason"


@pytest.mark.parametrize("name", ALGOS)
@pytest.mark.parametrize("mode", AGG_MODES)
def test_accumulation_equals_one_big_batch(name, mode):
    algo = make(name)
    batch, fwd = random_batch(5)
    _, b = run_hooks(algo, batch, fwd)
    w = aggregation_weights(b.loss_mask, mode, MAX_NEW, group_id=b.group_id)
    full = fwd.logp.clone().requires_grad_(True)
    (w * algo.loss(dataclasses.replace(fwd, logp=full), b, ctx())[0]).sum().backward()
    acc = fwd.logp.clone().requires_grad_(True)
    for rows in (torch.arange(0, 5), torch.arange(5, 12)):
        sub_b = b.select(rows)
        sub_f = Forward(**{f.name: (getattr(fwd, f.name)[rows] if getattr(fwd, f.name) is not None else None)
                           for f in dataclasses.fields(Forward)})
        sub_f = dataclasses.replace(sub_f, logp=acc[rows])
        (w[rows] * algo.loss(sub_f, sub_b, ctx())[0]).sum().backward()
    torch.testing.assert_close(acc.grad, full.grad, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("name", ALGOS)
def test_kill_and_resume_gives_the_same_result(name, tmp_path, monkeypatch):
    from rlsuite.suite.runfolder import read_jsonl
    from rlsuite.suite.runner import execute
    from rlsuite.suite.spec import resolve

    spec = resolve("_parity_test", name, "tiny", 0, sets=[("model.warm_start", "none"), ("train.checkpoint_every", 2)],
                   budgets=[("updates", 4)])
    code, ref = execute(spec, tmp_path / "ref")
    assert code == 0
    run = crash_then_resume(spec, tmp_path / "crash", monkeypatch)
    assert comparable_rows(read_jsonl(run / "metrics.jsonl")) == comparable_rows(read_jsonl(ref / "metrics.jsonl"))
    assert comparable_rows(read_jsonl(run / "evals.jsonl")) == comparable_rows(read_jsonl(ref / "evals.jsonl"))


@pytest.mark.parametrize("name", ALGOS)
def test_clipping_entries_report_the_peers_ppo_metrics(name):
    """Every entry whose loss clips or masks a ratio (it reports ``stats/clip_frac``) also reports
    the lower and upper clip fractions and ``stats/approx_kl`` (verl's and OpenRLHF's ``ppo_kl``:
    the masked mean of log π_old − log π), under the suite's names."""
    algo = make(name)
    batch, fwd = random_batch(4)
    _, b = run_hooks(algo, batch, fwd)
    _, m = algo.loss(fwd, b, ctx())
    if "stats/clip_frac" not in m:
        pytest.skip(f"{name}: its loss clips no ratio")
    assert {"stats/clip_frac_low", "stats/clip_frac_high", "stats/approx_kl"} <= set(m), sorted(m)
    mask = b.loss_mask
    want = float(((b.old_logp - fwd.logp) * mask).sum() / mask.sum())
    assert float(m["stats/approx_kl"]) == pytest.approx(want, abs=1e-5)
