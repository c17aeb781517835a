"""The peer frameworks' policy losses: the setup shared by the hand tests of GMPO, SAPO, Clip-Cov,
KL-Cov and DRO (verl 0.9.1) and BNPO, LUSPO and VESPO (TRL 1.16.0) — ``test_gmpo.py``,
``test_sapo.py``, ``test_clip_cov.py``, ``test_kl_cov.py``, ``test_dro.py``, ``test_bnpo.py``,
``test_luspo.py``, ``test_vespo.py`` — and the peer's own loss and gradient on one shared batch,
recorded below (the peers are not needed here); each of those files checks its entry's rows with
:func:`same_loss_and_gradient_as_the_peer`.

How the peer numbers were made (float64, once, outside this repository): verl's
``POLICY_LOSS_REGISTRY[name](old_log_prob, log_prob, advantages, response_mask, "token-mean",
config)`` from ``verl/trainer/ppo/core_algos.py`` with its imports stubbed and the config its
defaults plus the overrides in the table; TRL's ``GRPOTrainer._compute_loss`` called on a minimal
stand-in object (no model: ``_get_per_token_logps_and_entropies`` returns the log-probs below;
one process, no accumulation, ``num_items_in_batch`` = the batch's tokens). The recorded gradient
is d(loss)/d(log π) on the response columns, and the suite's side is aggregated with float64 weights
(``weights64``; the trainer's are the same in float32). Each peer got the advantages it computes itself from
the rewards (verl: std + 1e-6; TRL: std + 1e-4), which the suite's entries reproduce (checked).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rlsuite.algorithms import ALGORITHMS
from rlsuite.suite.aggregation import aggregation_weights
from rlsuite.suite.types import Forward
from tests.algorithms.hand import t
from tests.fakes import hand_batch, hook_ctx

CTX = hook_ctx(gen_seed=0, max_new_tokens=4, group_size=4, prompts_per_step=1)


def algo(name, **cfg):
    cls = ALGORITHMS.get(name)
    return cls(cls.Config(name=name, **cfg))


def weights64(mask, mode):
    """The aggregation weights of ``suite.aggregation`` for the modes used here, in float64 by hand;
    checked equal to the suite's to 1e-15 (they keep a float64 mask's dtype: float32 weights would
    carry ~3e-8 relative error into a float64 loss and hide differences of 1e-7 from the peers)."""
    n = mask.sum(-1, keepdim=True).clamp(min=1)
    w = {"token-mean": mask / mask.sum(), "seq-mean-token-mean": mask / (mask.shape[0] * n),
         "seq-mean-token-sum": mask / mask.shape[0]}[mode]
    got = aggregation_weights(mask, mode, 4)
    assert got.dtype == torch.float64
    torch.testing.assert_close(w, got, rtol=1e-15, atol=0)
    return w


def run_loss(a, batch, logp, adv=None, ctx=CTX):
    """(aggregated loss, d loss / d logp, metrics); ``adv`` given: set directly, else the entry's advantages."""
    if adv is None:
        out = a.advantages(batch, ctx)
        batch = dataclasses.replace(batch, adv=out.adv, extras={**batch.extras, **out.extras})
    else:
        batch = dataclasses.replace(batch, adv=t(adv)[:, None] * batch.loss_mask)
    lp = t(logp).clone().requires_grad_(True) if isinstance(logp, list) else logp.clone().requires_grad_(True)
    loss, m = a.loss(Forward(logp=lp), batch, ctx)
    value = (weights64(batch.loss_mask, a.aggregation) * loss).sum()
    value.backward()
    return value.detach(), lp.grad, m


def batch_of(mask, old_logp, rewards=None):
    rewards = rewards if rewards is not None else [0.0] * len(mask)
    return hand_batch(mask, [0] * len(mask), rewards, prompt_turns=False, old_logp=t(old_logp))


# ========================================================================================
# Clip-Cov: drop k = max(⌊ratio·n⌋, 1) random tokens with lb < Cov < ub (not PPO-clipped); KL-Cov:
# + coef·|δ| on the k tokens of largest Cov. Cov = (Â − mean Â)(log π − mean log π).

CC_MASK = [[0, 1, 1], [0, 1, 1]]
CC_LOGP = [[0, -0.5, -1.5], [0, -0.5, -1.5]]
CC_ADV = [1.0, -1.0]  # mean Â = 0, mean log π = −1 → Cov = Â·(log π + 1) = (0.5, −0.5 | −0.5, 0.5)


# ========================================================================================
# The peers' numbers on one shared batch: one group of 4, R = (1, 0, 0.6, 0.1), response columns 1..4

PEER_MASK = [[0, 1, 1, 1, 1], [0, 1, 1, 1, 0], [0, 1, 1, 0, 0], [0, 1, 1, 1, 1]]
PEER_OLD = [[0, -1.2, -0.4, -2.0, -0.7], [0, -0.9, -1.5, -0.3, 0], [0, -2.2, -0.6, 0, 0], [0, -0.5, -1.1, -1.8, -0.2]]
PEER_DELTA = [[0, 0.10, 0.30, -0.25, 0.05], [0, -0.40, 0.15, 0.22, 0], [0, 0.05, -0.10, 0, 0],
              [0, 0.35, -0.05, -0.30, 0.12]]
PEER_R = [1.0, 0.0, 0.6, 0.1]
ADV_VERL = [1.2376779416645225, -0.9148054351433429, 0.3766845909413763, -0.6995570974625563]
ADV_TRL = [1.2374142538169774, -0.91461053542994, 0.3766043381182104, -0.6994080565052483]
VERL, TRL = "verl 0.9.1", "TRL 1.16.0"

# (entry, config, on-policy (log π = log π_old), peer, its call, its loss, its d loss/d log π)
PEER_CASES = [
    ("gmpo", {}, False, VERL, "geo_mean", 0.01771442099645895,
     [[-0.079313118844, 0, -0.079313118844, -0.079313118844], [0, 0.0806784429244, 0.0806784429244, 0],
      [-0.0459230264532, -0.0459230264532, 0, 0], [0.0461944051223, 0.0461944051223, 0, 0.0461944051223]]),
    ("gmpo", {"clip_eps_low": 0.4, "clip_eps_high": 0.4}, False, VERL, "geo_mean clip_ratio_low/high 0.4",
     -0.010488627442487825,
     [[-0.0813209400016] * 4, [0.0754752469141] * 3 + [0], [-0.0459230264532] * 2 + [0, 0], [0.0450538611988] * 4]),
    ("sapo", {}, False, VERL, "sapo", -0.04193294931102248,
     [[-0.0852543885632, -0.101286998402, -0.0595130808292, -0.081267521017],
      [0.0496002448333, 0.0879347191279, 0.0934251744026, 0], [-0.0494671865823, -0.042508477911, 0, 0],
      [0.0591359849566, 0.0415627016724, 0.0317979042582, 0.0490765648323]]),
    ("clip_cov", {}, False, VERL, "clip_cov (no candidate in (1, 5))", 0.00663321829357701,
     [[-0.105218897467, 0, -0.0741465038583, -0.100087311284], [0, 0.081757867691, 0.0876859819805, 0],
      [-0.0304613556082, -0.0262183317447, 0, 0], [0.0763629827229, 0.0511876380942, 0, 0.0606729557607]]),
    ("clip_cov", {"cov_scope": "call", "clip_cov_lb": 0.2, "clip_cov_ub": 1.0, "clip_cov_ratio": 0.16}, False, VERL,
     "clip_cov lb 0.2, ub 1, ratio 0.16 (k = 2 = the candidates)", 0.024962661886700085,
     [[-0.105218897467, 0, -0.0741465038583, 0], [0, 0, 0.0876859819805, 0],
      [-0.0304613556082, -0.0262183317447, 0, 0], [0.0763629827229, 0.0511876380942, 0, 0.0606729557607]]),
    ("clip_cov", {"clip_cov_lb": 0.2, "clip_cov_ub": 1.0, "clip_cov_ratio": 0.4}, True, VERL,
     "clip_cov lb 0.2, ub 1, ratio 0.4 at log π = log π_old (k = 5 ≥ 4 candidates)", 0.05381208442019671,
     [[-0.0952059955127, 0, -0.0952059955127, 0], [0.0703696488572, 0, 0.0703696488572, 0],
      [-0.0289757377647, -0.0289757377647, 0, 0], [0.0538120844202, 0.0538120844202, 0, 0.0538120844202]]),
    ("kl_cov", {"cov_scope": "call"}, False, VERL, "kl_cov", -0.017636774089443783,
     [[-0.105218897467, -0.120822343884, -0.0741465038583, -0.100087311284],
      [0.0471701862615, 0.081757867691, 0.0876859819805, 0], [-0.0304613556082, -0.0262183317447, 0, 0],
      [0.0763629827229, 0.0511876380942, 0.0398649726313, 0.0606729557607]]),
    ("kl_cov", {}, False, VERL, "kl_cov (π_old's top-Cov token is π_θ's here)", -0.017636774089443783,
     [[-0.105218897467, -0.120822343884, -0.0741465038583, -0.100087311284],
      [0.0471701862615, 0.081757867691, 0.0876859819805, 0], [-0.0304613556082, -0.0262183317447, 0, 0],
      [0.0763629827229, 0.0511876380942, 0.0398649726313, 0.0606729557607]]),
    ("kl_cov", {"cov_scope": "call", "kl_cov_ratio": 0.3}, False, VERL, "kl_cov ratio 0.3 (k = 3)",
     -0.014944466397136062,
     [[-0.105218897467, -0.120822343884, -0.0741465038583, -0.0923950035919],
      [0.0471701862615, 0.081757867691, 0.0876859819805, 0], [-0.0304613556082, -0.0262183317447, 0, 0],
      [0.0763629827229, 0.0511876380942, 0.032172664939, 0.0606729557607]]),
    ("kl_cov", {"kl_cov_ratio": 0.3}, True, VERL, "kl_cov ratio 0.3 at log π = log π_old", -0.01241817332773758,
     [[-0.0952059955127] * 4, [0.0703696488572] * 3 + [0], [-0.0289757377647] * 2 + [0, 0], [0.0538120844202] * 4]),
    ("dro", {}, False, VERL, "dro dro_beta 0.05", 0.09477677753049552,
     [[-0.094821380128, -0.0940521493588, -0.0961675339742, -0.0950136878203],
      [0.0688311873187, 0.0709465719341, 0.0712158027033, 0], [-0.0287834300724, -0.0293603531493, 0, 0],
      [0.0551582382664, 0.0536197767279, 0.0526582382664, 0.0542736228817]]),
    ("dro", {"beta": 0.3}, False, VERL, "dro dro_beta 0.3", 0.10090946983818788,
     [[-0.092898303205, -0.0882829185896, -0.100975226282, -0.0940521493588],
      [0.0611388796264, 0.0738311873187, 0.0754465719341, 0], [-0.0278218916109, -0.0312834300724, 0, 0],
      [0.0618890074971, 0.0526582382664, 0.0468890074971, 0.0565813151894]]),
    ("bnpo", {}, False, TRL, "bnpo", 0.00663180508340719,
     [[-0.105196480533, 0, -0.074130706912, -0.100065987637], [0, 0.0817404491402, 0.0876673004423, 0],
      [-0.0304548658026, -0.0262127459172, 0, 0], [0.0763467135547, 0.0511767325447, 0, 0.0606600293599]]),
    ("bnpo", {"clip_eps_high": 0.28}, False, TRL, "bnpo epsilon_high 0.28", -0.0009830518631588347,
     [[-0.105196480533, 0, -0.074130706912, -0.100065987637], [0, 0.0817404491402, 0.0876673004423, 0],
      [-0.0304548658026, -0.0262127459172, 0, 0], [0.0763467135547, 0.0511767325447, 0, 0.0606600293599]]),
    ("luspo", {}, False, TRL, "luspo, importance_sampling_level sequence", -0.08467010190108604,
     [[-0.32521445982] * 4, [0.226377502137] * 3 + [0], [-0.0918264859699] * 2 + [0, 0], [0.180177050727] * 4]),
    ("luspo", {"clip_eps_low": 0.02, "clip_eps_high": 0.03}, False, TRL, "luspo sequence, epsilon 0.02/0.03",
     -0.05834894405107938,
     [[0] * 4, [0.226377502137] * 3 + [0], [-0.0918264859699] * 2 + [0, 0], [0.180177050727] * 4]),
    ("luspo", {"importance_sampling_level": "token"}, False, TRL, "luspo, importance_sampling_level token",
     0.021553366521073425,
     [[-0.341888561733, 0, -0.240924797464, -0.32521445982], [0, 0.265656459706, 0.284918726437, 0],
      [-0.0989783138584, -0.085191424231, 0, 0], [0.248126819053, 0.16632438077, 0, 0.19714509542]]),
    ("vespo", {}, False, TRL, "vespo", -0.008056257670694298,
     [[-0.0730848847388] * 4, [0.0682145514026] * 3 + [0], [-0.0303427468179] * 2 + [0, 0], [0.0597572954601] * 4]),
    ("vespo", {"k_pos": 1.0, "lambda_pos": 0.5, "k_neg": 0.5, "lambda_neg": 4.0}, False, TRL,
     "vespo k/λ 1, 0.5 | 0.5, 4", 0.1748553695532196,
     [[-0.104076735213] * 4, [0.0780045250656] * 3 + [0], [-0.0282369404461] * 2 + [0, 0], [0.0343052217416] * 4]),
]


def peer_batch():
    return batch_of(PEER_MASK, PEER_OLD, rewards=PEER_R)


PEER_ARGS = "name, cfg, on_policy, peer, call, loss, grad"


def peer_cases(entry: str):
    """``pytest.mark.parametrize`` over ``entry``'s rows of :data:`PEER_CASES` (ids ``entry-row``)."""
    rows = [(i, c) for i, c in enumerate(PEER_CASES) if c[0] == entry]
    return pytest.mark.parametrize(PEER_ARGS, [c for _, c in rows], ids=[f"{c[0]}-{i}" for i, c in rows])


def same_loss_and_gradient_as_the_peer(name, cfg, on_policy, peer, call, loss, grad):
    """One row of :data:`PEER_CASES`: the entry's advantages are the peer's, and its loss and gradient
    on the shared batch are the peer's recorded ones."""
    a = algo(name, **cfg)
    b = peer_batch()
    adv = a.advantages(b, CTX).adv
    torch.testing.assert_close(adv[:, 1], t(ADV_VERL if peer == VERL else ADV_TRL), rtol=1e-12, atol=1e-12)
    logp = t(PEER_OLD) if on_policy else t(PEER_OLD) + t(PEER_DELTA)
    value, g, m = run_loss(a, b, logp)
    # 1e-8: verl's seq-mean-token-mean (SAPO's) divides by |y| + 1e-8, the suite's by |y|
    assert float(value) == pytest.approx(loss, rel=1e-8, abs=1e-13), (peer, call)
    torch.testing.assert_close(g[:, 1:], t(grad), rtol=1e-8, atol=1e-12)
    assert (g[:, 0] == 0).all()
    if "stats/approx_kl" in m and not on_policy:  # verl's ppo_kl: −mean δ over the 13 tokens
        assert float(m["stats/approx_kl"]) == pytest.approx(-0.018461538447337254, rel=1e-6)

