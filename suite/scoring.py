"""Step 4 of the loop (:meth:`rlsuite.suite.trainer.Trainer.step`): the scoring passes over a graded
rollout, which turn it into a training :class:`rlsuite.suite.types.Batch`.

* π_old: μ's own log-probs where the batch is exactly on-policy and ``rollout.old_logp=behaviour``;
  or, with ``rollout.old_logp=recompute``, the update's own forward where that forward is π_old
  itself (:func:`rlsuite.suite.update_plan.old_logp_from_update`: the pass and its FLOPs are
  skipped, its statistics logged after the update); else a no-grad forward of the policy (with a
  head critic's values and, where the entry needs it, π_old's Σ_v π_old(v)² from the same forward);
* values of a separate critic (its own forward and FLOPs);
* π_ref (with the KL at π_old that the reward or the adaptive controller reads:
  :func:`rlsuite.suite.kl_control.reward_kl`), π_init and the distillation teacher π_T
  (:mod:`rlsuite.suite.distill`) where the entry needs them;
* rewards with the in-reward KL folded in: per token (``token_rewards``: −β·KL on every policy
  token, the reward on the last) and per row (``rewards``);
* ``loss.is_correction``: the importance weight μ → π_old or the mask it keeps, for every entry
  (:func:`rlsuite.suite.mismatch_correction.correction`).

Every pass is charged to the budget (``score_old``, ``score_critic``, ``score_ref``,
``score_init``, ``score_teacher``) at the positions it computes.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import torch

from rlsuite.suite.budget import scoring_flops
from rlsuite.suite.fast_forward import shared_positions
from rlsuite.suite.kl_control import reward_kl
from rlsuite.suite.mismatch_correction import correction
from rlsuite.suite.models import non_embedding_params
from rlsuite.suite.policy import forward_options, policy_forward, precision
from rlsuite.suite.train_state import TrainState
from rlsuite.suite.types import Batch, Rollout
from rlsuite.suite.update_plan import old_logp_from_update


class Scorer:
    """The scoring passes of a run over its :class:`~rlsuite.suite.train_state.TrainState`."""

    old_from_update = True
    """Allow π_old from the update's own forward (False: every step runs the scoring pass; the tests compare)."""

    def __init__(self, spec, train, state: TrainState, fields: frozenset[str], device: torch.device,
                 n_params: int, n_critic: int) -> None:
        """``train``: ``spec.train`` with its ``auto`` levers resolved; ``fields``: what the update's
        forward computes besides log-probs (:func:`rlsuite.suite.update_plan.update_fields`);
        ``n_params`` / ``n_critic``: the non-embedding parameters of the policy / a separate critic."""
        self.spec, self.train, self.state, self.fields, self.device = spec, train, state, fields, device
        self.P, self.P_critic = n_params, n_critic
        self.kl_reading: Optional[float] = None
        """The last pass's mean KL at π_old (the adaptive controller's input; None without ``kl_target``)."""
        self.is_metrics: dict[str, float] = {}
        """``loss.is_correction``'s statistics of the last pass (``mismatch/*``)."""

    def from_update(self, rows: int) -> bool:
        """π_old (recomputed) of a batch of ``rows`` rows comes from the update's own forward
        (:func:`rlsuite.suite.update_plan.old_logp_from_update`), on-policy or stale alike (π_old is
        the weights before the update, not the stale sampler's): speed only, the metrics and the
        update are the scoring pass's bit for bit (tested); its FLOPs are not charged."""
        return self.old_from_update and old_logp_from_update(self.spec, self.state.algo, self.fields, rows)

    @torch.no_grad()
    def score(self, rec: Rollout, replayed: bool = False) -> Batch:
        """The batch of the graded rollout ``rec`` (rows [B], tokens [B, T]) with π_old (or its
        mask), π_ref, π_init, values and KL-shaped rewards as the entry needs them. ``replayed``: rows
        an entry's ``replay`` hook brought back are appended (the entry weights them by π_old/μ in
        its advantages, so π_old is a scoring pass)."""
        r, st, dev = self.spec.rollout, self.state, self.device
        tokens, attn, mask = rec.tokens.to(dev), rec.attn_mask.to(dev), rec.loss_mask.to(dev)
        n_tok = int(rec.attn_mask.sum())
        opts = forward_options(self.train, rec.prompt_width)
        amp = lambda: precision(self.spec.train, dev)  # noqa: E731

        def computed(want: frozenset[str]) -> int:  # the positions a scoring forward computes
            return n_tok - shared_positions(st.model, want, tokens, attn, opts["prompt_width"])

        on_policy = bool((rec.policy_version == st.budget.counters["updates"]).all()) and r.top_p == 1.0 \
            and r.mismatch == "none" and r.top_k == 0 and bool((rec.behaviour_id == 0).all()) \
            and (rec.stage is None or not bool((rec.stage == 2).any()))
        fields: dict[str, Any] = {}
        head = st.value_head
        sum_sq = "old_sum_pi_sq" in st.algo.needs  # the entry reads π_old's Σπ²: only a scoring pass has it
        # π_old aliased to μ (``rollout.old_logp=behaviour``); not for an entry reading π_old's Σπ², which
        # keeps the pass's log-probs (π(y_t) and Σπ² of one distribution)
        alias = r.old_logp == "behaviour" and on_policy and not sum_sq  # then π/μ between them is exactly 1
        if alias and head is None:
            fields["old_logp"] = rec.behav_logp.to(dev)
        elif r.old_logp == "recompute" and rec.stage is None and not replayed and bool((rec.behaviour_id == 0).all()) \
                and self.from_update(rec.batch_size):  # on-policy or stale: π_old is the current weights either way
            fields["old_logp_mask"] = mask  # π_old comes from the update's forward (the trainer fills old_logp)
        else:
            want = frozenset({"values"} if head is not None else ()) | frozenset({"sum_pi_sq"} if sum_sq else ())
            with amp():
                fwd = policy_forward(st.model, tokens, attn, r.temperature, want, head, **opts)
            fields["old_logp"] = fwd.logp.float() * mask
            if head is not None:
                fields["values"] = fwd.values.float() * mask
            if sum_sq:
                fields["old_sum_pi_sq"] = fwd.sum_pi_sq.float() * mask
            st.budget.charge_flops("score_old", scoring_flops(self.P, computed(want)))
            if alias:
                fields["old_logp"] = rec.behav_logp.to(dev)  # aliased; the pass ran for the values only
        if st.separate_critic is not None:
            with amp():  # the precision its training forward runs in (values are clipped against these)
                fields["values"] = st.separate_critic.forward_separate(tokens, attn).float() * mask
            st.budget.charge_flops("score_critic", scoring_flops(self.P_critic, n_tok))
        rewards = rec.rewards.to(dev)
        kl_tok = torch.zeros_like(mask)
        if st.ref is not None:
            with amp():
                fields["ref_logp"] = policy_forward(st.ref, tokens, attn, r.temperature, **opts).logp.float() * mask
            st.budget.charge_flops("score_ref", scoring_flops(self.P, computed(frozenset())))
            # (π_old from the update's forward only where neither the reward nor the controller reads this)
            kl_tok, self.kl_reading = reward_kl(st.algo.cfg, fields.get("old_logp"), fields["ref_logp"], mask)
        if st.init is not None:
            with amp():
                fields["init_logp"] = policy_forward(st.init, tokens, attn, r.temperature, **opts).logp.float() * mask
            st.budget.charge_flops("score_init", scoring_flops(self.P, computed(frozenset())))
        if st.teacher is not None:  # the distillation teacher, scored like π_ref (its own size: its own P)
            with amp():
                fields["teacher_logp"] = policy_forward(st.teacher, tokens, attn, r.temperature,
                                                        **opts).logp.float() * mask
            shared = shared_positions(st.teacher, frozenset(), tokens, attn, opts["prompt_width"])
            st.budget.charge_flops("score_teacher", scoring_flops(non_embedding_params(st.teacher), n_tok - shared))
        last = (mask * torch.arange(mask.shape[1], device=dev)).argmax(-1)  # last policy token
        token_rewards = -st.kl_coef * kl_tok
        token_rewards[torch.arange(mask.shape[0], device=dev), last] += rewards
        fields["rewards"] = rewards - st.kl_coef * kl_tok.sum(-1)
        fields["token_rewards"] = token_rewards * mask
        moved = {f.name: (getattr(rec, f.name).to(dev) if isinstance(getattr(rec, f.name), torch.Tensor)
                          else getattr(rec, f.name)) for f in dataclasses.fields(Rollout)}
        moved.update(fields)
        lo = self.spec.loss
        if lo.is_correction != "none":  # μ → π_old, for every algorithm (suite.mismatch_correction)
            weight, keep, m = correction(fields["old_logp"], moved["behav_logp"], mask, lo.is_correction, lo.is_low,
                                         lo.is_high)
            self.is_metrics = {**m, "mismatch/is_aliased": float(alias)}
            if weight is not None:
                moved["extras"] = {**moved.get("extras", {}), "is_weight": weight}
            if keep is not None:
                moved["loss_mask"] = keep
        return Batch(**moved)


__all__ = ["Scorer"]
