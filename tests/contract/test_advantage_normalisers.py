"""Equal rewards in a group give an advantage of exactly 0.0 — for every advantage normaliser.

Fractional rewards (shares of tests passed, format rewards, judges) are not exact in binary, so
a group mean computed by summation can miss the common value by a rounding residual, which a
division by ``std + 1e-6`` (or ``rsqrt(var + 1e-8)``) then amplifies into a sizeable, same-sign
advantage on every sample of the group. The contracts here:

* every normaliser in :mod:`rlsuite.suite.ops` (and the group baselines entries implement themselves:
  RLOO's leave-one-out, IS-GRPO's weighted z-score, GGPO/AGRO's contrast), in float32 and
  float64, G ∈ {2, 3, 8, 16, 64}, on mixed batches with shuffled, non-contiguous group labels:
  the all-equal groups get exactly 0.0 (``==``) and the other groups match a float64 reference
  computed by hand; ``masked_whiten`` of an all-equal batch is exactly 0 (``shift_mean``) or the
  batch itself (``shift_mean=False``);
* every registered algorithm entry: the ``[B, T]`` advantages of the rows of an all-equal group
  are exactly 0.0, except the entries whose advantages are legitimately not a function of the
  group's rewards alone; each says why in its ``not_group_relative`` (:data:`EXCEPTIONS`).
"""

from __future__ import annotations

import math

import pytest
import torch

from rlsuite import algorithms  # noqa: F401  (registers the entries)
from rlsuite.algorithms.base import ALGORITHMS, Context
from rlsuite.algorithms.ggpo import group_contrast
from rlsuite.algorithms.is_grpo import weighted_group_advantage
from rlsuite.algorithms.rloo import leave_one_out_advantage
from rlsuite.suite.ops import group_all_equal, group_mean_std, group_normalised_advantage, masked_whiten
from tests.fakes import hook_ctx
from rlsuite.suite.types import Batch

EQUAL_VALUES = (0.7, 0.97, 0.1, 1 / 3, 123.456)
GROUP_SIZES = (2, 3, 8, 16, 64)
DTYPES = (torch.float32, torch.float64)

#: Registered entries whose advantages may be non-zero for a group of equal rewards, and why.
def exceptions() -> dict[str, str]:
    """Entry name → why its equal groups need not get 0: the entry's own ``not_group_relative``
    reason, for the entries whose advantages (at their defaults) are not group-relative."""
    out = {}
    for name, cls in ALGORITHMS.items():
        algo = cls(cls.Config(name=name))
        if not algo.group_relative:
            out[name] = cls.not_group_relative
    return out


EXCEPTIONS = exceptions()

#: Exceptions whose source of non-zero advantage can be switched off in the batch; then the
#: equal groups must again get exactly 0.
NEUTRALISE = {
    "dc_grpo": lambda b: b.replace(behav_logp=b.old_logp.clone()),
    "ggpo": lambda b: b.replace(ref_logp=b.old_logp.clone()),
    "agro": lambda b: b.replace(ref_logp=b.old_logp.clone()),
}

#: Group-relative entries whose equal groups are zero before a *batch-level* step that then
#: shifts every row by the same constant when the batch also holds unequal groups.
BATCH_SHIFTED: dict[str, str] = {
    "reinforce_pp_baseline": "global whitening of the group-centred rewards: an equal group's 0 becomes "
                             "−mean/std of the batch's tokens (the same value on all of them); exactly 0 "
                             "when every group of the batch is equal",
    "gdpo": "one-component GDPO: GRPO's z-score whitened over the batch's tokens (as reinforce_pp_baseline)",
}


def test_exception_sets_name_registered_entries_and_match_group_relative():
    names = set(ALGORITHMS.names())
    assert set(NEUTRALISE) <= set(EXCEPTIONS) and set(BATCH_SHIFTED) <= names
    assert not set(BATCH_SHIFTED) & set(EXCEPTIONS)
    for name in names:
        cls = ALGORITHMS.get(name)
        algo = cls(cls.Config(name=name))
        why = cls.not_group_relative
        assert bool(why) is (not algo.group_relative), (
            f"{name}: group_relative = {algo.group_relative} but not_group_relative = {why!r}: an entry "
            f"that is not group-relative at its defaults says why in `not_group_relative`, and only then")
    assert all(BATCH_SHIFTED.values())


# ----------------------------------------------------------------------------------------
# mixed batches of [B] rewards


def mixed_rewards(G: int, dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Groups of size G: one all-equal group per value of EQUAL_VALUES, three unequal ones (random
    fractional, 0/1, fractional around 123.456), and a singleton; rows shuffled, labels sparse.
    Returns (rewards [B], group_ids [B], equal [B] bool: the row's group is all-equal with G ≥ 2)."""
    g = torch.Generator().manual_seed(seed)
    rows, labels, equal = [], [], []
    for k, v in enumerate(EQUAL_VALUES):
        rows.append(torch.full((G,), v, dtype=torch.float64))
        labels += [7 * k + 3] * G
        equal += [True] * G
    unequal = [torch.rand(G, generator=g, dtype=torch.float64),
               torch.tensor([1.0, 0.0] * (G // 2) + [1.0] * (G % 2), dtype=torch.float64),
               123.456 + torch.randn(G, generator=g, dtype=torch.float64)]
    for k, u in enumerate(unequal):
        rows.append(u)
        labels += [1000 + 5 * k] * G
        equal += [False] * G
    rows.append(torch.tensor([0.37], dtype=torch.float64))  # singleton: verl's (0, 1) convention
    labels += [99]
    equal += [False]
    perm = torch.randperm(len(labels), generator=g)
    r = torch.cat(rows).to(dtype)[perm]
    return r, torch.tensor(labels)[perm], torch.tensor(equal)[perm]


def _groups(gids: torch.Tensor) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for i, k in enumerate(gids.tolist()):
        out.setdefault(k, []).append(i)
    return out


def _mean(xs):
    return math.fsum(xs) / len(xs)


def _std(xs):
    m = _mean(xs)
    return math.sqrt(math.fsum((x - m) ** 2 for x in xs) / max(1, len(xs) - 1))


def ref_grpo(xs, scale=True, eps=1e-6):
    if len(xs) == 1:  # verl: mean 0, std 1
        return [x / (1 + eps) if scale else x for x in xs]
    m, s = _mean(xs), _std(xs)
    return [(x - m) / (s + eps) if scale else x - m for x in xs]


def ref_centred(xs):
    m = 0.0 if len(xs) == 1 else _mean(xs)
    return [x - m for x in xs]


def ref_loo(xs):
    n = len(xs)
    return [0.0] * n if n == 1 else [x - (math.fsum(xs) - x) / (n - 1) for x in xs]


def ref_weighted(xs, ws, eps=1e-6):
    n, sw = len(xs), math.fsum(ws)
    m = math.fsum(w * x for w, x in zip(ws, xs)) / sw
    var = math.fsum(w * (x - m) ** 2 for w, x in zip(ws, xs)) / sw * n / max(1, n - 1)
    return [(x - m) / (math.sqrt(var) + eps) for x in xs]


def ref_gap(xs, beta, kind):
    if kind == "mean":
        return [x - _mean(xs) for x in xs]
    top = max(x / beta for x in xs)
    phi = beta * (top + math.log(_mean([math.exp(x / beta - top) for x in xs])))
    return [x - phi for x in xs]


def _weights(r: torch.Tensor) -> torch.Tensor:
    return (0.5 + torch.rand(len(r), generator=torch.Generator().manual_seed(5), dtype=torch.float64)).to(r.dtype)


#: name → (normaliser (rewards, group_ids) → [B] advantages, per-group float64 reference)
NORMALISERS = {
    "group_normalised_advantage": (lambda r, g: group_normalised_advantage(r, g), ref_grpo),
    "group_normalised_advantage/mean_only": (lambda r, g: group_normalised_advantage(r, g, scale_by_std=False),
                                             lambda xs: ref_grpo(xs, scale=False)),
    "r-group_mean_std": (lambda r, g: r - group_mean_std(r, g)[0], ref_centred),
    "rloo.leave_one_out_advantage": (leave_one_out_advantage, ref_loo),
    "is_grpo.weighted_group_advantage": (lambda r, g: weighted_group_advantage(r, g, _weights(r)), None),
    "ggpo.group_contrast/log_mean_exp": (lambda r, g: r - group_contrast(r, g, 0.05, "log_mean_exp"),
                                         lambda xs: ref_gap(xs, 0.05, "log_mean_exp")),
    "ggpo.group_contrast/mean": (lambda r, g: r - group_contrast(r, g, 0.05, "mean"),
                                 lambda xs: ref_gap(xs, 0.05, "mean")),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("G", GROUP_SIZES)
@pytest.mark.parametrize("name", list(NORMALISERS))
def test_equal_groups_get_exactly_zero_and_the_others_match_float64(name, G, dtype):
    fn, ref = NORMALISERS[name]
    r, gids, equal = mixed_rewards(G, dtype, seed=G)
    adv = fn(r, gids)
    assert adv.dtype == dtype and adv.shape == r.shape
    assert (adv[equal] == 0.0).all(), f"{name}: equal groups got {adv[equal].abs().max().item():.3g}"
    want = torch.zeros(len(r), dtype=torch.float64)
    r64, w64 = r.double(), _weights(r).double()
    for rows in _groups(gids).values():
        xs = r64[rows].tolist()
        want[rows] = torch.tensor(ref(xs) if ref is not None else ref_weighted(xs, w64[rows].tolist()),
                                  dtype=torch.float64)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-10)
    other = ~equal
    torch.testing.assert_close(adv[other].double(), want[other], **tol)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("G", GROUP_SIZES)
def test_group_mean_std_of_an_equal_group_is_exact(G, dtype):
    r, gids, equal = mixed_rewards(G, dtype, seed=G + 1)
    mean, std = group_mean_std(r, gids)
    assert mean.dtype == std.dtype == dtype
    assert (mean[equal] == r[equal]).all() and (std[equal] == 0.0).all()
    flag = group_all_equal(r, gids)
    sizes = torch.tensor([len(_groups(gids)[k]) for k in gids.tolist()])
    assert torch.equal(flag, equal | (sizes == 1))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", GROUP_SIZES)
@pytest.mark.parametrize("value", EQUAL_VALUES)
def test_masked_whiten_of_equal_values_is_exactly_zero(value, n, dtype):
    g = torch.Generator().manual_seed(n)
    T = n + 3
    mask = torch.zeros(2, T, dtype=dtype)
    mask[0, 1:1 + (n + 1) // 2] = 1
    mask[1, 2:2 + n // 2] = 1  # n masked tokens in all, at different offsets
    x = torch.where(mask > 0, torch.tensor(value, dtype=dtype), 50 * torch.randn(2, T, generator=g, dtype=dtype))
    out = masked_whiten(x, mask)
    assert out.dtype == dtype and (out == 0.0).all()
    kept = masked_whiten(x, mask, shift_mean=False)  # the mean is added back: the batch itself
    assert (kept == x * mask).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_masked_whiten_of_unequal_values_matches_float64(dtype):
    g = torch.Generator().manual_seed(3)
    x = (0.7 + 1e-3 * torch.randn(4, 9, generator=g, dtype=torch.float64)).to(dtype)
    mask = (torch.rand(4, 9, generator=g) > 0.3).to(dtype)
    vals = x.double()[mask > 0].tolist()
    m, s = _mean(vals), _std(vals)
    want = (x.double() - m) / math.sqrt(s * s + 1e-8) * mask.double()
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(masked_whiten(x, mask).double(), want, **tol)


# ----------------------------------------------------------------------------------------
# every registered algorithm entry

PW, RW = 2, 6


def ctx(G: int, P: int) -> Context:
    return hook_ctx(gen_seed=1, step=3, progress=0.3, entropy=0.9, max_new_tokens=RW, group_size=G,
                    prompts_per_step=P, n_train=100)


def algo_batch(G: int, dtype: torch.dtype, all_equal: bool, seed: int = 0) -> tuple[Batch, torch.Tensor]:
    """One group per EQUAL_VALUES value (all rewards equal) plus, unless ``all_equal``, three groups
    with unequal fractional rewards; varied lengths, a critic, stale behaviour log-probs.
    Returns (batch, equal [B] bool)."""
    gen = torch.Generator().manual_seed(seed)
    vals = [torch.full((G,), v, dtype=torch.float64) for v in EQUAL_VALUES]
    if not all_equal:
        vals += [torch.rand(G, generator=gen, dtype=torch.float64),
                 torch.tensor([1.0, 0.25] * (G // 2) + [0.5] * (G % 2), dtype=torch.float64),
                 0.5 + 0.01 * torch.randn(G, generator=gen, dtype=torch.float64)]
    P = len(vals)
    B, T = P * G, PW + RW
    rewards = torch.cat(vals).to(dtype)
    equal = torch.arange(B) < len(EQUAL_VALUES) * G
    lengths = torch.randint(1, RW + 1, (B,), generator=gen)
    lengths[0] = RW
    mask = torch.zeros(B, T, dtype=dtype)
    for b in range(B):
        mask[b, PW:PW + lengths[b]] = 1
    attn = mask.long().clone()
    attn[:, :PW] = 1
    rnd = lambda *s: torch.rand(*s, generator=gen, dtype=torch.float64).to(dtype)  # noqa: E731
    old = -rnd(B, T) * 3 * mask
    behav = (old - 0.3 * rnd(B, T)).clamp(max=0) * mask
    last = torch.zeros(B, T, dtype=dtype)
    last[torch.arange(B), PW + lengths - 1] = rewards
    K = 4
    topk = torch.log_softmax(torch.randn(B, T, K + 1, generator=gen, dtype=torch.float64), -1)[..., :K]
    batch = Batch(tokens=torch.randint(4, 90, (B, T), generator=gen) * attn, attn_mask=attn, loss_mask=mask,
                  behav_logp=behav, turn_id=torch.where(mask > 0, 0, -1).long(),
                  policy_version=torch.zeros(B, dtype=torch.long), behaviour_id=torch.zeros(B, dtype=torch.long),
                  group_id=torch.arange(B) // G * 3 + 1, example_idx=torch.arange(B) // G, scores=rewards.clone(),
                  rewards=rewards, truncated=lengths == RW, prompt_width=PW, old_logp=old,
                  ref_logp=(old - 0.1 * rnd(B, T)) * mask, values=torch.randn(B, T, generator=gen).to(dtype) * mask,
                  token_rewards=last, topk_ids=torch.randint(4, 90, (B, T, K), generator=gen),
                  topk_logp=topk.sort(-1, descending=True).values.to(dtype), attn_stat=rnd(B, T) * mask,
                  old_sum_pi_sq=(old.exp() ** 2 + 0.3 * rnd(B, T)).clamp(max=1) * mask)
    return batch, equal


def advantages(name: str, batch: Batch, G: int) -> torch.Tensor:
    cls = ALGORITHMS.get(name)
    algo = cls(cls.Config(name=name))
    P = batch.batch_size // G
    out = algo.advantages(batch, ctx(G, P))
    assert out.adv.shape == batch.loss_mask.shape
    return out.adv


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", ALGORITHMS.names())
def test_every_entry_gives_equal_reward_groups_exactly_zero_advantage(name, dtype):
    if name in EXCEPTIONS and name not in NEUTRALISE:
        pytest.skip(f"{name}: {EXCEPTIONS[name]}")
    for G in GROUP_SIZES:
        for all_equal in (False, True):
            batch, equal = algo_batch(G, dtype, all_equal, seed=G)
            if name in NEUTRALISE:
                batch = NEUTRALISE[name](batch)
            adv = advantages(name, batch, G)
            eq = adv[equal]
            if name in BATCH_SHIFTED and not all_equal:
                on = batch.loss_mask[equal] > 0
                assert (eq[on] == eq[on][0]).all(), f"{name}, G={G}: the equal groups' shift is not one constant"
                continue
            assert (eq == 0.0).all(), (f"{name}, G={G}, {dtype}, all_equal={all_equal}: equal-reward groups got "
                                       f"|Â| up to {eq.abs().max().item():.3g}")
            if not all_equal:
                assert (adv[~equal] != 0).any(), f"{name}: the unequal groups should carry a signal"

