"""ReRULE — GRPO reinforcement unlearning with off-policy replay of low-reward groups (a reconstruction).

Pang, Zhang, Tan, Jin, Wei, Zhong 2026, "Replay What Matters: Off-Policy Replay for Efficient LLM
Reinforcement Unlearning", arXiv 2606.15333, on top of RULE (Zhang et al. 2025, arXiv 2506.07171:
unlearning as refusal-policy optimisation with GRPO, a verifiable reward for refusing on the forget
set and for helpful answers on boundary prompts). The reward is the task's grade (``rewards`` is
GRPO's; on ``unlearn_toy`` that is RULE's reward: 1 for the refusal on a forget question, 1 for the
right answer on a retain or boundary one). ReRULE adds a replay buffer of *hard* rollout groups:

* admission: a fresh group of G rows whose mean reward is below ``threshold`` T (reported 0.4)
  enters a FIFO buffer of ``buffer_size`` groups (the oldest leave first), during the warm-up
  (``store = warmup``, the abstract's "stores … during early GRPO training") or at every step
  (``store = always``);
* replay: from step ``warmup_steps`` + 1 on (reported warm-up 26), ``replay_groups`` groups drawn
  uniformly without replacement from the buffer are trained on again (the ``replay`` hook: appended
  after the fresh rows, π_old re-scored for them by the trainer), each at most ``max_uses`` times;
* loss: the per-token loss of every row is GRPO's clipped surrogate; the advantage is
  ``Â_i · s_i · ρ_i`` with Â GRPO's group z-score of the stored rewards, ρ the truncated importance
  weight of a replayed row (1 for fresh rows) and s the row's share factor, so that the trainer's
  aggregate is exactly ``L = L_GRPO(fresh) + λ·L_IS(replayed)``:

      s_fresh = S/S_f,  s_replay = λ·S/S_r,  S_x = Σ_{rows in x, t} w_bt,  S = S_f + S_r

  with ``w`` the aggregation weights of the entry's mode (``suite.aggregation``) over the whole
  batch, λ = ``replay_weight``. ``is_level = sequence``: ``ρ_i = min(π_old(y_i)/μ(y_i), c)``
  (the product of token ratios, μ the behaviour that sampled the row, as IS-GRPO's response reading);
  ``token``: ``ρ_it = min(π_old/μ, c)`` per token; c = ``is_cap``. The clipped ratio is π_θ/π_old, so
  a replayed row's term is ``ρ·min(r·Â, clip(r)·Â)``, the decoupled off-policy surrogate.

A group whose rewards are all equal has zero group-relative advantage, so only low-mean groups
*with spread* give a gradient when replayed: ``require_spread`` (default on) stores only those (a
group of all-zero rewards would cost a scoring and training pass for nothing); off, every low-mean
group is stored, as a literal reading of the abstract.

Before replay starts (and whenever the buffer is empty) the entry is GRPO exactly (s = 1). Differs
from GRPO (``algorithms/grpo.py``; its defaults ε 0.2, β 0.04 and aggregation are kept) by the
buffer, the replayed rows and their weight. Kept in checkpoints: the buffer (rows on the CPU, uses).

Fidelity ``abstract``; [ASSUMPTION]s (= ``ReRULE.assumptions``):
[ASSUMPTION] admission on the group's mean task reward (the stored rewards are the grades, before any
  in-reward KL), strictly below T = 0.4; groups with a grade error are not stored.
[ASSUMPTION] only groups with reward spread are stored (``require_spread``; zero advantage otherwise).
[ASSUMPTION] the buffer is filled during the warm-up only (``store = warmup``), FIFO, 64 groups.
[ASSUMPTION] replay from step 27 (warm-up 26 steps), 4 groups a step, uniform without replacement,
  each group replayed without limit while in the buffer (``max_uses = 0``).
[ASSUMPTION] the mix is L_GRPO(fresh) + λ·L_IS(replayed) with λ = 1, each part normalised as if alone.
[ASSUMPTION] the IS weight is the sequence ratio π_old/μ truncated at c = 2 (no lower bound), on the
  advantage; the PPO clip acts on π_θ/π_old as for fresh rows; the KL loss covers every row unweighted.
[ASSUMPTION] the replayed rows' advantage is GRPO's z-score of their stored group, recomputed each time.
With ``train.minibatches`` > 1 the share factors are those of the whole batch, so the mix holds for the
step's aggregate in expectation over the minibatch split only.

Source (search tools, 2026-12): the arXiv abstract of 2606.15333 and a third-party summary; no
paper body or code. T = 0.4 and the 26-step warm-up are the reported values; everything else is a
reconstruction. The abstract reports +9.9 points of MUSE-Books retain quality over RULE at 5–11 %
extra training time, and little gain on the easier TOFU ("replay is most beneficial when the
hard/easy disparity is pronounced").
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal, Optional

import torch

from rlsuite.algorithms.base import AdvOut, Context, register
from rlsuite.algorithms.grpo import GRPO, GRPOConfig
from rlsuite.suite.aggregation import aggregation_weights
from rlsuite.suite.ops import group_all_equal, group_normalised_advantage, masked_sum
from rlsuite.suite.types import Batch, Rollout, cat_rollouts


@dataclass(frozen=True, kw_only=True)
class ReRULEConfig(GRPOConfig):
    ranges = {"threshold": "(-inf, inf)", "warmup_steps": "[0, inf)", "buffer_size": "[1, inf)",
              "replay_groups": "[1, inf)", "replay_weight": "[0, inf)", "is_cap": "(0, inf)", "max_uses": "[0, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    threshold: float = 0.4
    """T: a fresh group whose mean reward is strictly below this is stored (reported 0.4)."""
    require_spread: bool = True
    """Store only groups whose rewards are not all equal (the only ones with a non-zero advantage)."""
    store: Literal["warmup", "always"] = "warmup"
    """Admit groups during the warm-up only (steps 1..warmup_steps) or at every step."""
    warmup_steps: int = 26
    """Replay starts at step warmup_steps + 1 (reported 26)."""
    buffer_size: int = 64
    """Capacity of the buffer in groups (FIFO: the oldest group leaves first)."""
    replay_groups: int = 4
    """Groups replayed a step (fewer while the buffer holds fewer)."""
    max_uses: int = 0
    """Times a group may be replayed before it leaves the buffer (0 = no limit)."""
    replay_weight: float = 1.0
    """λ of L = L_GRPO(fresh) + λ·L_IS(replayed) (0: the replayed rows get zero advantage)."""
    is_cap: float = 2.0
    """c: truncation of the importance weight min(π_old/μ, c) of replayed rows."""
    is_level: Literal["sequence", "token"] = "sequence"
    """One weight per replayed row (the sequence ratio) or one per token."""


@register
class ReRULE(GRPO):
    name = "rerule"
    summary = ("GRPO unlearning (RULE) with a replay buffer of low-reward groups, replayed after a warm-up with "
               "truncated importance weights.")
    citation = ("Pang, Zhang, Tan, Jin, Wei, Zhong 2026, Replay What Matters: Off-Policy Replay for Efficient LLM "
                "Reinforcement Unlearning, arXiv:2606.15333 (on RULE, Zhang et al. 2025, arXiv:2506.07171)")
    fidelity = "abstract"
    own_mismatch_weight = "it weights replayed rows by their truncated ratio π_old/μ"
    assumptions = (
        "admission on the group's mean task reward (the grades, before any in-reward KL), strictly below T = 0.4; "
        "groups with a grade error are not stored",
        "only groups with reward spread are stored (require_spread): an all-equal group has zero advantage",
        "buffer filled during the warm-up only (store = warmup), FIFO of 64 groups",
        "replay from step 27 (warm-up 26), 4 groups a step drawn uniformly without replacement, no use limit",
        "mix L = L_GRPO(fresh) + λ·L_IS(replayed), λ = 1, each part normalised as if it were the whole batch",
        "IS weight: sequence ratio π_old/μ truncated at c = 2 on the advantage; PPO clip on π_θ/π_old; KL loss on "
        "every row unweighted",
        "replayed advantage: GRPO's z-score of the stored group; reward = the task's grade (RULE's reward)")
    switches = ("require_spread", "store", "warmup_steps", "replay_weight", "is_level")
    inert = dict.fromkeys(
        ("threshold", "require_spread", "store", "warmup_steps", "buffer_size", "replay_groups", "max_uses",
         "replay_weight", "is_cap", "is_level"),
        "acts through the replay hook (a fresh entry has an empty buffer, so it is GRPO); see its hand tests in "
        "tests/algorithms/test_rerule.py")
    Config = ReRULEConfig
    cfg: ReRULEConfig

    def __init__(self, cfg: ReRULEConfig) -> None:
        super().__init__(cfg)
        self.buffer: list[dict[str, Any]] = []  # {"rows": Rollout (CPU, group_id 0), "uses": int, "step": int}
        self.n_replayed = 0  # rows appended by replay() to the current batch

    # -- the buffer --------------------------------------------------------------------
    def admit(self, batch: Batch, n_fresh: int, step: int) -> dict[str, float]:
        """Store the fresh groups (rows ``:n_fresh``) that qualify; returns admission counts."""
        c = self.cfg
        if c.store == "warmup" and step > c.warmup_steps:
            return {}
        gid = batch.group_id[:n_fresh].cpu()
        scores = batch.scores[:n_fresh].detach().cpu().float()
        flat = group_all_equal(scores, gid)
        err = batch.grade_error[:n_fresh].cpu() if batch.grade_error is not None else torch.zeros_like(flat)
        low = admitted = low_flat = 0
        for g in torch.unique(gid).tolist():
            rows = torch.nonzero(gid == g).flatten()
            if float(scores[rows].mean()) >= c.threshold or bool(err[rows].any()):
                continue
            low += 1
            low_flat += int(bool(flat[rows[0]]))
            if c.require_spread and bool(flat[rows[0]]):
                continue
            self.buffer.append({"rows": _stored(batch, rows), "uses": 0, "step": step})
            admitted += 1
        del self.buffer[:max(0, len(self.buffer) - c.buffer_size)]  # FIFO
        return {"low_groups": float(low), "low_flat_groups": float(low_flat), "admitted_groups": float(admitted)}

    def replay(self, ctx: Context) -> Optional[Rollout]:
        c = self.cfg
        self.n_replayed = 0
        if ctx.step <= c.warmup_steps or not self.buffer:
            return None
        k = min(c.replay_groups, len(self.buffer))
        pick = torch.randperm(len(self.buffer), generator=ctx.generator("rerule/replay"))[:k].tolist()
        parts = [self.buffer[i]["rows"] for i in pick]
        for i in pick:
            self.buffer[i]["uses"] += 1
        if c.max_uses:
            self.buffer = [e for e in self.buffer if e["uses"] < c.max_uses]
        out = cat_rollouts(parts)
        self.n_replayed = out.batch_size
        return out

    # -- advantages --------------------------------------------------------------------
    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        c = self.cfg
        n = batch.batch_size - self.n_replayed
        mask = batch.loss_mask
        adv = group_normalised_advantage(batch.rewards, batch.group_id, c.scale_by_std)[:, None] * mask  # [B, T]
        m: dict[str, float] = {"replayed_groups": 0.0}
        if self.n_replayed:
            w = aggregation_weights(mask, self.aggregation, ctx.max_new_tokens, group_id=batch.group_id)  # [B, T]
            s_f, s_r = float(w[:n].sum()), float(w[n:].sum())
            total = s_f + s_r
            scale = torch.ones(batch.batch_size, dtype=adv.dtype, device=adv.device)
            scale[:n] = total / s_f if s_f > 0 else 1.0
            scale[n:] = c.replay_weight * total / s_r if s_r > 0 else 0.0
            log_r = (batch.old_logp - batch.behav_logp)[n:]  # [B_r, T] log π_old/μ
            cap = math.log(c.is_cap)
            rmask = mask[n:]
            if c.is_level == "sequence":
                log_rho = masked_sum(log_r, rmask, -1)  # [B_r]
                rho = torch.exp(log_rho.clamp(max=cap))[:, None] * rmask  # [B_r, T]
                trunc = float((log_rho > cap).float().mean())
                rho_mean = float(torch.exp(log_rho.clamp(max=cap)).mean())
            else:
                rho = torch.exp(log_r.clamp(max=cap)) * rmask
                n_tok = float(rmask.sum().clamp(min=1))
                trunc = float(((log_r > cap).float() * rmask).sum() / n_tok)
                rho_mean = float(rho.sum() / n_tok)
            adv = adv * scale[:, None]
            adv[n:] = adv[n:] * rho
            gid = batch.group_id[n:]
            m.update({"replayed_groups": float(len(torch.unique(gid))), "replayed_rows": float(self.n_replayed),
                      "rho_mean": rho_mean, "rho_truncated_frac": trunc, "fresh_scale": float(scale[0]),
                      "replay_scale": float(scale[n]), "replay_reward_mean": float(batch.rewards[n:].mean())})
        m.update(self.admit(batch, n, ctx.step))
        m["buffer_groups"] = float(len(self.buffer))
        return AdvOut(adv=adv, metrics={f"algo/rerule/{k}": v for k, v in m.items()})

    def state_dict(self) -> dict[str, Any]:
        return {"buffer": [dict(e) for e in self.buffer]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.buffer = [dict(e) for e in state.get("buffer", [])]


def _stored(batch: Batch, rows: torch.Tensor) -> Rollout:
    """Rows of one group as a CPU :class:`Rollout` (group id 0, rewards = the task's grades, so
    replaying them with an in-reward KL subtracts only the current KL)."""
    part = batch.select(rows.to(batch.tokens.device))
    fields = {f.name: _cpu(getattr(part, f.name)) for f in dataclasses.fields(Rollout)}
    fields["group_id"] = torch.zeros_like(fields["group_id"])
    fields["rewards"] = fields["scores"].clone()
    return Rollout(**fields)


def _cpu(v: Any) -> Any:
    return v.detach().cpu() if isinstance(v, torch.Tensor) else v
