"""The one shared trainer. It never branches on an algorithm's or a task's name.

Per step (numbers match the sections of :meth:`Trainer.step`):

1. draw prompts (``algo.sample_prompts`` or a seeded pass over the train split);
2. roll out G completions per prompt with the behaviour policies (``algo.before_rollout``);
   the engine records μ's log-probs and what the algorithm ``needs``;
3. grade with the task, then ``algo.rewards`` per group; a completion the grader could not
   grade (``Grade.error``) scores 0, is counted in ``reward/grade_errors`` and is left out of
   the policy loss (its loss mask is zeroed for the update; it still counts in its group's
   statistics as a 0); a batch whose every grade errored raises ``GraderError`` (run ``failed``);
4. scoring passes: π_old (or μ when exactly on-policy and configured), π_ref, values;
   in-reward KL; token rewards;
5. ``algo.advantages``; ``algo.filter`` with the refill loop (bounded; discarded samples
   are charged);
6. K epochs × minibatches: ``algo.loss`` (+ generic KL loss, + ``algo.value_loss``)
   aggregated with the global normaliser of the entry's mode (computed before the
   micro-batch loop), backward, clip, AdamW step, ``algo.after_update``; the rollout engine
   is re-synced per ``rollout.sync``/``rollout.staleness`` (periodic catch-up, or a fixed lag
   of k updates), through the mismatch knob (``rollout.mismatch``) when set;
7. log one metrics row, evaluate on schedule, checkpoint, stop at the budget or on
   divergence.

Checkpoints (:mod:`rlsuite.suite.checkpoint`) hold what resuming needs: the trained models, their
optimizer state and the behaviour weights only where they lag the policy; the frozen
reference and initial policy are rebuilt from the base (checked by its sha256). A completed run
keeps ``final/`` (the policy in ``model.dtype``, tied weights once) and the runner drops
``checkpoint/`` unless ``train.keep_checkpoint``.

Data parallelism (``dist.world_size`` > 1, :mod:`rlsuite.suite.distributed`): every rank holds the
same state and the same full batch; generation (2) and the update (6) are sharded by rows
(records all-gathered, gradients all-reduced with the global normaliser's weights); scoring
passes (4) run on the full batch; rank 0 alone writes the run folder and evaluates.

Sharded training (``dist.shard=fsdp``, :mod:`rlsuite.suite.sharding`): the same loop over the same
row shards, with the policy, critic, reference and optimizer state sharded across the ranks by
FSDP2 (gradients reduce-scattered as sums instead of one all-reduce; every rank runs as many
micro-batches, padding with weight-0 copies); the engine receives full weights gathered one
layer at a time; checkpoints are torch.distributed.checkpoint shards plus rank 0's counters.

Rank 0 also copies every metrics and eval row to the experiment trackers of ``log.trackers``
(:mod:`rlsuite.suite.trackers`) and prints progress on stderr (:mod:`rlsuite.suite.progress`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, Optional

import torch

from rlsuite.algorithms.base import Algorithm
from rlsuite.suite.aggregation import aggregation_weights
from rlsuite.suite.behaviour import BehaviourSync
from rlsuite.suite.budget import Budget, scoring_flops, training_flops
from rlsuite.suite.checkpoint import load as load_state
from rlsuite.suite.checkpoint import pack, state_sha256
from rlsuite.suite.checks import check_capabilities, resolve_auto
from rlsuite.suite.config import RunSpec
from rlsuite.suite.distributed import world as current_world
from rlsuite.suite.engines import RolloutEngine, make_engine
from rlsuite.suite.errors import BadInput, Diverged, Interrupted
from rlsuite.suite.evaluate import class_file_hash, evaluate, memo_base_eval, source_hash, weights_hash
from rlsuite.suite.fast_forward import shared_positions
from rlsuite.suite.hooks import Context
from rlsuite.suite.lifecycle import CountingGrader as _CountingGrader
from rlsuite.suite.lifecycle import Signals, drop_final_rows
from rlsuite.suite.mismatch_correction import correction
from rlsuite.suite.models import Critic, non_embedding_params
from rlsuite.suite.ops import masked_mean
from rlsuite.suite.policy import policy_forward
from rlsuite.suite.progress import RunProgress
from rlsuite.suite.prompts import seed_for
from rlsuite.suite.rollout_stage import RolloutStage
from rlsuite.suite.runfolder import ReadOnlyFolder, RunFolder, now_iso
from rlsuite.suite.step_metrics import merge as _merge
from rlsuite.suite.step_metrics import old_logp_metrics, rollout_metrics, s_kl
from rlsuite.suite.stop import stop_ids
from rlsuite.suite.trackers import Trackers
from rlsuite.suite.types import Batch, Rollout, cat_rollouts, real_width
from rlsuite.suite.update_plan import computed_positions, lr_factor, micro_batches, old_logp_from_update, update_fields


class Trainer:
    """Owns the policy, critic, reference, rollout engine, optimizer, budget and run folder."""

    def __init__(self, spec: RunSpec, run_dir: Path, task, algo: Algorithm, model, tokenizer) -> None:
        self.spec, self.task, self.algo, self.tok = spec, task, algo, tokenizer
        r, t, d = spec.rollout, spec.train, spec.dist
        self.device = torch.device("cuda" if t.device == "cuda" or (t.device == "auto" and torch.cuda.is_available())
                                   else "cpu")
        self.model = model.to(self.device)
        self.world = current_world()  # data parallelism: suite/distributed.py (rank 0 of 1 without it)
        if self.world.size != d.world_size:
            raise BadInput(f"dist.world_size={d.world_size} but this process group has {self.world.size} process(es); "
                           f"start runs with `rlsuite run` (it spawns the processes) or a job with that many tasks")
        self.world.broadcast_module(self.model)  # every rank starts from rank 0's weights
        self.needs = algo.needs
        # the `auto` levers by capability (train.share_prefix, optim.fused; spec.json/env.json record them)
        self.resolved: dict[str, Any] = resolve_auto(model, self._update_fields(), t, d, spec.optim)
        t = dataclasses.replace(t, share_prefix=self.resolved["train.share_prefix"])
        self.train_cfg = t  # spec.train with its levers resolved
        self.engine_info = check_capabilities(model, self.needs, algo.cfg.name, self._update_fields(), r, t, d,
                                              spec.model.name, self.device)  # exit 2: what this run cannot do
        self.resolved["rollout.engine"] = self.engine_info.kind
        self.splits = task.splits()
        for s in ("train", "val", "test"):
            if not self.splits.get(s):
                raise BadInput(f"task '{task.name}' has an empty {s} split")
        self.stop_ids = stop_ids(tokenizer, model)
        self.engine: RolloutEngine = make_engine(r.engine, self.model, tokenizer, r)
        self.behaviour = BehaviourSync(r, spec.seed, self.engine, self.model)  # staleness and the mismatch knob
        self.ref = copy.deepcopy(self.model).eval().requires_grad_(False) if "ref_logp" in self.needs else None
        # the initial policy, frozen (KL-to-initial metrics); rebuilt identically on resume
        self.init = copy.deepcopy(self.model).eval().requires_grad_(False) if "init_logp" in self.needs else None
        self._ref_refreshed = False  # π_ref is the base until an algorithm refreshes it (then checkpoints keep it)
        self._base_sha: Optional[str] = None  # of the base π_ref / π_init copy (computed when first needed)
        self.critic = None
        if "values" in self.needs:
            with torch.random.fork_rng(devices=[]):  # the critic's initial weights depend on the seed only
                torch.manual_seed(seed_for(spec.seed, "critic") % 2**63)
                self.critic = Critic(self.model, algo.critic or spec.model.critic).to(self.device)
        self.shard = None  # dist.shard=fsdp: the models sharded across the ranks (suite/sharding.py)
        if d.shard != "none":
            from rlsuite.suite.sharding import Sharding

            self.shard = Sharding(d, self.device, self.world)
            self.shard.apply(self)
        groups = [{"params": [p for p in self.model.parameters() if p.requires_grad], "lr": spec.optim.lr}]
        if self.critic is not None:
            groups.append({"params": list(self.critic.parameters()), "lr": spec.optim.critic_lr})
        o = spec.optim
        self.opt = torch.optim.AdamW(groups, lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps, weight_decay=o.weight_decay,
                                     **({"fused": True} if self.resolved["optim.fused"] else {}))
        self.base_lrs = [g["lr"] for g in self.opt.param_groups]
        self.P = non_embedding_params(self.model)
        self.P_critic = self.critic.n_params() if self.critic is not None else 0
        self.budget = Budget(spec.budget.limits())
        self.folder = RunFolder(run_dir) if self.world.main else ReadOnlyFolder(run_dir)  # rank 0 alone writes
        self.step_no, self.cursor, self.evals_done = 0, 0, 0
        self.entropy: Optional[float] = None
        self.signals = Signals()
        self._grade_errors, self._grade_error_first = 0, None  # this step's grader failures
        self._is_metrics: dict[str, float] = {}  # loss.is_correction's, of the step's first draw
        self.kl_coef = float(algo.cfg.kl_coef)  # β of the KL term; moves with algo.kl_target (adaptive)
        self._kl_reading: Optional[float] = None  # the step's KL at π_old (the adaptive controller's input)
        self._start_weights: Optional[str] = None  # sha256 of the starting weights (the base-eval memo's key)
        self.rollouts = RolloutStage(r, spec.model.chat_template, spec.seed, task, self.splits, tokenizer, self.engine,
                                     algo, self.needs, self.world, self.budget, self.P, self._note_grade_errors,
                                     self.stop_ids)
        self.trackers = Trackers.for_run(spec, run_dir, self.world.main,  # log.trackers (suite/trackers.py), rank 0
                                         stopping=lambda: self.signals.signal is not None)
        self.progress_out = RunProgress(spec.log, self.budget, self.world.main)  # stderr progress (suite/progress.py)

    def _update_fields(self) -> frozenset[str]:
        """The fields the training forward computes for this algorithm (besides logp)."""
        return update_fields(self.needs, self.algo.critic or self.spec.model.critic)

    old_from_update = True
    """Allow :meth:`_old_from_update` (False: every step runs the scoring pass; the tests compare)."""

    def _old_from_update(self, rows: int) -> bool:
        """π_old of a fresh on-policy batch of ``rows`` rows comes from the update's own forward
        (:func:`rlsuite.suite.update_plan.old_logp_from_update`): speed only, the metrics and the
        update are the scoring pass's bit for bit (tested); its FLOPs are not charged."""
        return self.old_from_update and old_logp_from_update(self.spec, self.algo, self._update_fields(), rows)

    def _amp(self):
        """The training/scoring forwards' precision context (``train.autocast``)."""
        if self.spec.train.autocast == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _fwd_opts(self, prompt_width: int) -> dict[str, Any]:
        """policy_forward's lever arguments (``train.share_prefix``, ``train.compile``), and
        ``logits_from``: log-probs from the response on (the loss mask is 0 on the prompt; the
        default forward's results are bit for bit those of the whole sequence: see
        :func:`rlsuite.suite.policy.policy_forward`)."""
        t = self.train_cfg
        return {"prompt_width": prompt_width if t.share_prefix else 0, "compiled": t.compile,
                "logits_from": prompt_width}

    @property
    def _head_critic(self) -> bool:
        """Values come from a head on the actor's forward (not from a separate critic model)."""
        return self.critic is not None and self.critic.mode != "separate"

    def context(self) -> Context:
        s = self.spec
        return Context(step=self.step_no, progress=self.budget.progress, entropy=self.entropy,
                       max_new_tokens=s.rollout.max_new_tokens, group_size=s.rollout.group_size,
                       prompts_per_step=s.rollout.prompts_per_step, n_train=len(self.splits["train"]),
                       seed=s.seed, policy=self.model,
                       generator=lambda stream: torch.Generator().manual_seed(seed_for(s.seed, stream, self.step_no)),
                       charge=self._charge_extra, refresh_reference=self._refresh_reference)

    def _refresh_reference(self) -> None:
        """Copy the current policy into π_ref (algorithms with periodic reference refresh)."""
        if self.ref is None:
            raise RuntimeError("refresh_reference() needs a reference model: declare 'ref_logp' in needs")
        self.ref.load_state_dict(self.model.state_dict())
        self._ref_refreshed = True

    def _charge_extra(self, kind: str, tokens: int, params: int) -> None:
        self.budget.charge_flops(kind, scoring_flops(params, tokens))

    def _prompt(self, split: str, i: int) -> tuple[list[int], str]:
        return self.rollouts.prompt(split, i)

    # -- 1. prompts --------------------------------------------------------------------
    def _draw_prompts(self, n: int) -> list[int]:
        """Seeded passes over the train split: a fresh permutation per pass."""
        n_train = len(self.splits["train"])
        out = []
        while len(out) < n:
            epoch, pos = divmod(self.cursor, n_train)
            perm = torch.randperm(n_train, generator=torch.Generator().manual_seed(seed_for(self.spec.seed, "data", epoch)))
            take = min(n - len(out), n_train - pos)
            out += perm[pos:pos + take].tolist()
            self.cursor += take
        return out

    # -- 2-3. rollout and rewards ------------------------------------------------------
    def _rollout(self, idx: list[int], ctx: Context, attempt: int) -> tuple[Rollout, dict[str, float]]:
        """Steps 2-3 (:class:`rlsuite.suite.rollout_stage.RolloutStage`): rollout, grades, group rewards."""
        return self.rollouts.rollout(idx, ctx, attempt)

    def _grade_one(self, example, text: str) -> float:
        """``Group.grade``: one extra grade (judges, anchors); a grade error is counted."""
        return self.rollouts.grade_one(example, text)

    def _note_grade_errors(self, errors: list[str], n: Optional[int]) -> None:
        """Count this step's grade errors; ``n`` grades of which all errored: the grader is
        broken, and the run stops as ``failed`` (never trains on all-zero rewards)."""
        if not errors:
            return
        self._grade_errors += len(errors)
        if self._grade_error_first is None:
            self._grade_error_first = errors[0]
        if n is not None and len(errors) == n:
            from rlsuite.tasks.base import GraderError

            raise GraderError(f"task '{self.task.name}': the grader could not grade any of the {n} completions "
                              f"at step {self.step_no} (first error: {errors[0]})")


    # -- 4. scoring passes -------------------------------------------------------------
    @torch.no_grad()
    def _score(self, rec: Rollout) -> Batch:
        r = self.spec.rollout
        dev = self.device
        tokens, attn, mask = rec.tokens.to(dev), rec.attn_mask.to(dev), rec.loss_mask.to(dev)
        n_tok = int(rec.attn_mask.sum())
        opts = self._fwd_opts(rec.prompt_width)

        def computed(want: frozenset[str]) -> int:  # the positions a scoring forward computes
            return n_tok - shared_positions(self.model, want, tokens, attn, opts["prompt_width"])

        on_policy = bool((rec.policy_version == self.budget.counters["updates"]).all()) and r.top_p == 1.0 and r.mismatch == "none" \
            and r.top_k == 0 and bool((rec.behaviour_id == 0).all()) and (rec.stage is None or not bool((rec.stage == 2).any()))
        fields: dict[str, Any] = {}
        head_values = self._head_critic
        aliased = False  # π_old is μ itself (an importance weight between them is exactly 1)
        if r.old_logp == "behaviour" and on_policy and not head_values:
            fields["old_logp"] = rec.behav_logp.to(dev)
            aliased = True
        elif r.old_logp == "recompute" and on_policy and rec.stage is None and self._old_from_update(rec.batch_size):
            fields["old_logp_mask"] = mask  # π_old comes from the update's forward (_update fills old_logp)
        else:
            want = frozenset({"values"}) if head_values else frozenset()
            with self._amp():
                fwd = policy_forward(self.model, tokens, attn, r.temperature, want,
                                     self.critic.head if head_values else None, **opts)
            fields["old_logp"] = fwd.logp.float() * mask
            if head_values:
                fields["values"] = fwd.values.float() * mask
            self.budget.charge_flops("score_old", scoring_flops(self.P, computed(want)))
            if r.old_logp == "behaviour" and on_policy:
                fields["old_logp"] = rec.behav_logp.to(dev)  # aliased; the pass ran for the values only
                aliased = True
        if self.critic is not None and self.critic.mode == "separate":
            with self._amp():  # the precision its training forward runs in (values are clipped against these)
                fields["values"] = self.critic.forward_separate(tokens, attn).float() * mask
            self.budget.charge_flops("score_critic", scoring_flops(self.P_critic, n_tok))
        rewards = rec.rewards.to(dev)
        kl_tok = torch.zeros_like(mask)
        if self.ref is not None:
            with self._amp():
                fields["ref_logp"] = policy_forward(self.ref, tokens, attn, r.temperature, **opts).logp.float() * mask
            self.budget.charge_flops("score_ref", scoring_flops(self.P, computed(frozenset())))
            cfg = self.algo.cfg
            if cfg.kl_where == "reward" or cfg.kl_target is not None:  # the KL at π_old, computed once
                kl_old = s_kl(cfg, fields["old_logp"], fields["ref_logp"]) * mask
                if cfg.kl_where == "reward":
                    kl_tok = kl_old
                if cfg.kl_target is not None:  # the adaptive controller's reading
                    self._kl_reading = float((kl_old.sum(-1) / mask.sum(-1).clamp(min=1)).mean())
        if self.init is not None:
            with self._amp():
                fields["init_logp"] = policy_forward(self.init, tokens, attn, r.temperature, **opts).logp.float() * mask
            self.budget.charge_flops("score_init", scoring_flops(self.P, computed(frozenset())))
        last = (mask * torch.arange(mask.shape[1], device=dev)).argmax(-1)  # last policy token
        token_rewards = -self.kl_coef * kl_tok
        token_rewards[torch.arange(mask.shape[0], device=dev), last] += rewards
        fields["rewards"] = rewards - self.kl_coef * kl_tok.sum(-1)
        fields["token_rewards"] = token_rewards * mask
        moved = {f.name: (getattr(rec, f.name).to(dev) if isinstance(getattr(rec, f.name), torch.Tensor) else getattr(rec, f.name))
                 for f in dataclasses.fields(Rollout)}
        moved.update(fields)
        lo = self.spec.loss
        if lo.is_correction != "none":  # μ → π_old, for every algorithm (suite.mismatch_correction)
            weight, keep, m = correction(fields["old_logp"], moved["behav_logp"], mask, lo.is_correction, lo.is_low,
                                         lo.is_high)
            self._is_metrics = {**m, "mismatch/is_aliased": float(aliased)}
            if weight is not None:
                moved["extras"] = {**moved.get("extras", {}), "is_weight": weight}
            if keep is not None:
                moved["loss_mask"] = keep
        return Batch(**moved)

    # -- 5. advantages and filtering with refill ---------------------------------------
    def _collect_batch(self, ctx: Context) -> tuple[Batch, dict[str, float]]:
        r = self.spec.rollout
        target = r.prompts_per_step * r.group_size
        kept: list[Batch] = []
        n_kept, discarded, tries = 0, 0, 0
        metrics: dict[str, float] = {}
        for attempt in range(1 + r.max_refill_tries):
            tries += 1
            idx = self.algo.sample_prompts(ctx) or self._draw_prompts(r.prompts_per_step)
            rec, roll_metrics = self._rollout(list(idx), ctx, attempt)
            n_fresh = rec.batch_size
            stale = self.algo.replay(ctx) if attempt == 0 else None
            if stale is not None:  # re-used rows go after the fresh ones, in groups of their own
                rec = cat_rollouts([rec, stale])
            batch = self._score(rec)
            adv = self.algo.advantages(batch, ctx)
            batch = dataclasses.replace(batch, adv=adv.adv, returns=adv.returns, extras={**batch.extras, **adv.extras},
                                        loss_mask=batch.loss_mask if adv.loss_mask is None else adv.loss_mask)
            metrics.update(adv.metrics)
            if attempt == 0:  # reward, length, group and mismatch statistics of the first draw
                metrics.update(roll_metrics)
                fresh = batch if stale is None else batch.select(torch.arange(n_fresh, device=batch.tokens.device))
                if fresh.stage is not None and bool((fresh.stage == 0).any()):  # the samples drawn on the task's prompts
                    fresh = fresh.select(torch.nonzero(fresh.stage == 0).flatten())
                metrics.update(self._rollout_metrics(fresh))
                metrics.update(self._is_metrics)
                if stale is not None:
                    metrics["replay/rows"] = float(stale.batch_size)
            keep = self.algo.filter(batch, ctx)
            filtered = keep is not None
            if keep is None:
                kept, n_kept = [batch], batch.batch_size
                break
            keep = keep.to(torch.bool).cpu()
            discarded += int((~keep).sum())
            if keep.any():
                kept.append(batch.select(torch.nonzero(keep.to(batch.tokens.device)).squeeze(-1)))
                n_kept += int(keep.sum())
            if n_kept >= target:
                break
        if not kept:
            raise RuntimeError(f"the filter discarded every sample in {tries} rollout batches; "
                               f"raise rollout.max_refill_tries or check the algorithm's filter")
        batch = cat_rollouts(kept) if len(kept) > 1 else kept[0]
        if filtered and batch.batch_size > target:  # refilled past the target: trim (a feedback round may exceed it)
            batch = batch.select(torch.arange(target, device=batch.tokens.device))
        metrics.update({"filter/discarded": float(discarded), "filter/rollout_batches": float(tries),
                        "filter/kept_frac": n_kept / max(1, n_kept + discarded)})
        if batch.grade_error is not None and bool(batch.grade_error.any()):  # ungraded rows: no policy gradient
            keep = (~batch.grade_error.to(batch.loss_mask.device)).to(batch.loss_mask.dtype)
            batch = dataclasses.replace(batch, loss_mask=batch.loss_mask * keep[:, None])
        return batch, metrics

    def _rollout_metrics(self, b: Batch) -> dict[str, float]:
        return rollout_metrics(b, self.spec.rollout.group_size, self.budget.counters["updates"], self.algo.cfg)

    # -- 6. the update -----------------------------------------------------------------

    def _update(self, batch: Batch, ctx: Context) -> dict[str, float]:
        s, t = self.spec, self.spec.train
        cfg = self.algo.cfg
        want = self._update_fields()
        head_values = self._head_critic
        opts = self._fwd_opts(batch.prompt_width)
        B = batch.batch_size
        acc: dict[str, list[tuple[float, float]]] = {}
        n_tok = int(batch.attn_mask.sum())
        computed = 0  # token positions the training forwards compute (fewer with train.share_prefix)
        from_update = None  # (rows, π_old) when the forward supplied π_old (_old_from_update)
        for epoch in range(t.epochs):
            perm = torch.randperm(B, generator=torch.Generator().manual_seed(seed_for(s.seed, "minibatch", self.step_no, epoch)))
            for mb_idx in torch.tensor_split(perm, t.minibatches):
                mb = batch.select(mb_idx.to(batch.tokens.device))
                w_all = aggregation_weights(mb.loss_mask, self.algo.aggregation, s.rollout.max_new_tokens,
                                            s.loss.empty_rows)
                self.opt.zero_grad(set_to_none=True)
                plan = self._micro_batches(mb)  # every rank's micro-batches (rows of mb)
                computed += computed_positions(self.model, mb, plan, opts["prompt_width"], want, t.bucket_by_length)
                nonfinite = None
                for rows, live in self._rank_micro_batches(plan):
                    mic, w = mb.select(rows), w_all[rows] if live else torch.zeros_like(w_all[rows])
                    if t.bucket_by_length:  # drop the micro-batch's trailing padding columns
                        width = real_width(mic.attn_mask)
                        mic, w = mic.trim(width), w[:, :width]
                    with self._amp():
                        fwd = policy_forward(self.model, mic.tokens, mic.attn_mask, s.rollout.temperature, want,
                                             self.critic.head if head_values else None, topk_ids=mic.topk_ids, **opts)
                        if self.critic is not None and self.critic.mode == "separate":
                            fwd = dataclasses.replace(fwd, values=self.critic.forward_separate(mic.tokens, mic.attn_mask))
                    if "entropy" not in self.needs:
                        fwd = dataclasses.replace(fwd, entropy=fwd.entropy.detach())
                    if mic.old_logp is None and mic.old_logp_mask is not None:  # π_old is this forward's (_old_from_update)
                        mic = dataclasses.replace(mic, old_logp=fwd.logp.detach().float() * mic.old_logp_mask)
                        from_update = (mb_idx[rows], mic.old_logp)
                    loss_tok, m = self.algo.loss(fwd, mic, ctx)
                    if "is_weight" in mic.extras:  # loss.is_correction: the policy term only
                        loss_tok = loss_tok * mic.extras["is_weight"]
                    m = dict(m)
                    policy = (w * loss_tok).sum()
                    m["loss/policy"] = policy.detach()
                    total = policy
                    if self.ref is not None and cfg.kl_where == "loss":
                        kl = (w * s_kl(cfg, fwd.logp, mic.ref_logp) * mic.loss_mask).sum()
                        total = total + self.kl_coef * kl
                        m["loss/kl"] = (self.kl_coef * kl).detach()
                    if self.critic is not None:
                        v_tok, vm = self.algo.value_loss(fwd, mic, ctx)
                        vl = (w * v_tok).sum()
                        total = total + vl
                        m.update(vm)
                        m["loss/value"] = vl.detach()
                    m["loss/total"] = total.detach()
                    m["stats/entropy"] = masked_mean(fwd.entropy.detach(), mic.loss_mask)
                    if self.shard is not None and not self.shard.all_finite(bool(torch.isfinite(total))):
                        raise Diverged(f"non-finite loss at step {self.step_no} on a sharded rank")  # agreed
                    if not torch.isfinite(total):  # data-parallel: all ranks learn of it at the all-reduce
                        nonfinite = f"non-finite loss at step {self.step_no} (loss/total={float(total.detach())})"
                        if not self.world.active:
                            raise Diverged(nonfinite)
                    else:
                        total.backward()
                    share = float(w.sum())  # this micro-batch's share of the normaliser
                    for k, v in (m.items() if live else ()):
                        acc.setdefault(k, []).append((float(v), share))
                acc.setdefault("stats/grad_norm", []).append((self._clip_and_step(nonfinite), 1.0))
                self.budget.charge("updates", 1)
                self.algo.after_update(self.context())
        self.budget.charge("train_tokens", n_tok * t.epochs)
        self.budget.charge_flops("train", training_flops(self.P, computed, 1))
        if self.critic is not None and self.critic.mode == "separate":
            self.budget.charge_flops("train_critic", training_flops(self.P_critic, n_tok, t.epochs))
        if self.world.active:  # every rank's micro-batch metrics, merged as one process merges them
            gathered = self.world.all_gather_object({k: v for k, v in acc.items() if k != "stats/grad_norm"})
            acc = {k: (acc[k] if k == "stats/grad_norm" else [x for g in gathered for x in g.get(k, [])])
                   for k in dict.fromkeys([*acc, *(k for g in gathered for k in g)])}
        out = _merge(acc)
        if from_update is not None:  # the statistics of π_old the scoring pass would have logged, in its row order
            rows, old = from_update
            full = torch.zeros_like(batch.old_logp_mask)
            full[rows.to(full.device)] = old
            out.update(old_logp_metrics(dataclasses.replace(batch, old_logp=full), self.algo.cfg))
        out["stats/lr"] = self.opt.param_groups[0]["lr"]
        self.entropy = out.get("stats/entropy")
        return out

    def _micro_batches(self, mb: Batch) -> list[list[torch.Tensor]]:
        """Per rank, the row indices of its micro-batches of ``mb`` (:func:`rlsuite.suite.update_plan.micro_batches`)."""
        return micro_batches(mb, self.world.size, self.spec.train)

    def _rank_micro_batches(self, plan: list[list[torch.Tensor]]) -> list[tuple[torch.Tensor, bool]]:
        """This rank's micro-batches as (rows, live); sharded, every rank runs as many (each
        forward/backward is a collective): a short rank pads with weight-0 copies of a real one."""
        mine = [(rows, True) for rows in plan[self.world.rank]]
        if self.shard is None:
            return mine
        n = max(len(p) for p in plan)
        pad = next(rows for p in plan for rows in p)
        return mine + [(pad, False)] * (n - len(mine))

    def _clip_and_step(self, nonfinite: Optional[str] = None) -> float:
        if self.world.active and self.shard is None:  # sum the ranks' shares of the minibatch gradient (global weights)
            params = [p for g in self.opt.param_groups for p in g["params"]]
            if self.world.all_reduce_grads(params, flag=float(nonfinite is not None)):
                raise Diverged(nonfinite or f"non-finite loss on another data-parallel rank at step {self.step_no}")
        factor = lr_factor(self.spec.optim, self.budget.counters["updates"], self.budget.progress)
        for g, base in zip(self.opt.param_groups, self.base_lrs):
            g["lr"] = base * factor
        clip = self.spec.optim.grad_clip or float("inf")
        clip_norm = self.shard.clip_grad_norm if self.shard is not None else torch.nn.utils.clip_grad_norm_
        norms = [clip_norm(g["params"], clip) for g in self.opt.param_groups]
        if not all(torch.isfinite(n) for n in norms):
            raise Diverged(f"non-finite gradient norm at step {self.step_no}")
        self.opt.step()
        return float(norms[0])

    # -- checkpoints -------------------------------------------------------------------
    def _base_copy(self):
        """A frozen copy of the base the run started from (π_init, or π_ref before any refresh)."""
        if self.init is not None:
            return self.init
        return self.ref if self.ref is not None and not self._ref_refreshed else None

    def _base_sha256(self) -> Optional[str]:
        if self._base_sha is None and self._base_copy() is not None:
            self._base_sha = state_sha256(self._base_copy().state_dict())
        return self._base_sha

    def _engine_rebuilt(self) -> bool:
        """The engine holds what :meth:`load_checkpoint` rebuilds without stored weights: the
        policy of now or one of the lag history's (through the mismatch knob)."""
        v = self.engine.version
        return v == int(self.budget.counters["updates"]) or v in self.behaviour.history

    def _state(self, packed: bool = True) -> dict[str, Any]:
        st = {"model": self.model.state_dict(), "opt": self.opt.state_dict(), "algo": self.algo.state_dict(),
              "budget": self.budget.state_dict(), "step": self.step_no, "cursor": self.cursor,
              "evals_done": self.evals_done, "entropy": self.entropy, "engine_version": self.engine.version,
              "kl_coef": self.kl_coef}
        if self.critic is not None:
            st["critic"] = self.critic.state_dict()
        if self.ref is not None and self._ref_refreshed:  # else it is the base, rebuilt on resume
            st["ref"] = self.ref.state_dict()
        if self._base_copy() is not None:
            st["base_sha256"] = self._base_sha256()
        if not self._engine_rebuilt():
            st["engine"] = self.engine.state()  # the behaviour weights (stale) as they are
        if self.behaviour.history:
            st["history"] = self.behaviour.history  # the current policy in it is stored once (pack)
        if self.rollouts.ref_anchors:
            st["ref_anchors"] = dict(self.rollouts.ref_anchors)
        return pack(st) if packed else st

    def save_checkpoint(self) -> None:
        if self.shard is not None:  # every rank writes its shards (torch.distributed.checkpoint)
            return self.shard.save(self, self._state(packed=False))
        if not self.world.main:
            return  # rank 0 alone writes the run folder
        state = self._state()
        self.folder.sync("metrics.jsonl")  # the per-step rows up to this checkpoint are durable before it exists
        self.folder.replace_dir("checkpoint", lambda d: torch.save(state, d / "state.pt"))

    def load_checkpoint(self) -> bool:
        path = self.folder.file("checkpoint") / "state.pt"
        if not path.exists():
            return False
        st = load_state(path, map_location=self.device)
        rebuilds_base = (self.ref is not None and "ref" not in st) or self.init is not None
        if rebuilds_base and st.get("base_sha256") is not None and st["base_sha256"] != self._base_sha256():
            raise BadInput(f"{path}: the run started from a base model with other weights (sha256 "
                           f"{st['base_sha256'][:12]}…, now {self._base_sha256()[:12]}… for model "
                           f"'{self.spec.model.name}'); its frozen reference is rebuilt from the base, so it cannot "
                           f"resume exactly: restore that model or start the run afresh (remove {path.parent})")
        if self.shard is not None:  # the sharded weights and optimizer state (any world size)
            self.shard.load(self, st, path.parent)
        elif "sharded" in st:
            raise BadInput(f"{path.parent}: written by a sharded run (dist.shard=fsdp); resume it with dist.shard=fsdp")
        else:
            self.model.load_state_dict(st["model"])
            self.opt.load_state_dict(st["opt"])
        self.algo.load_state_dict(st["algo"])
        self.budget.load_state_dict(st["budget"])
        self.step_no, self.cursor, self.evals_done, self.entropy = st["step"], st["cursor"], st["evals_done"], st["entropy"]
        self.kl_coef = float(st.get("kl_coef", self.algo.cfg.kl_coef))
        if self.critic is not None and self.shard is None:
            self.critic.load_state_dict(st["critic"])
        if self.ref is not None and "ref" in st and self.shard is None:  # refreshed (or a checkpoint written before refs were rebuilt)
            self.ref.load_state_dict(st["ref"])
            self._ref_refreshed = True
        if self.shard is None:
            self.behaviour.history = st.get("history", self.behaviour.history)
        self.rollouts.ref_anchors = dict(st.get("ref_anchors", {}))
        v = st["engine_version"]
        if "engine" in st:
            self.engine.load_weights(st["engine"], v)
        else:  # the policy of version v, through the mismatch knob, as BehaviourSync loaded it
            src = self.behaviour.history[v] if v in self.behaviour.history else self.model.state_dict()
            self.behaviour.load(src, v)
        return True

    # -- eval --------------------------------------------------------------------------
    def _base_eval_key(self, split: str, examples, ids, engine) -> dict[str, Any]:
        """What an eval of the starting weights depends on (:func:`rlsuite.suite.evaluate.memo_base_eval`)."""
        from rlsuite.suite.runfolder import cpu_model
        from rlsuite.suite.warmstart import cpu_isa

        s, d = self.spec, self.spec.to_dict()
        blob = json.dumps([[p[0], p[1]] for p in ids], default=str) + json.dumps(
            [str(self.task.gold(e)) for e in examples])
        if self._start_weights is None:  # the same weights for val and test: hashed once
            self._start_weights = weights_hash(self.model)
        return {"split": split, "weights": self._start_weights,
                "prompts_and_answers": hashlib.sha256(blob.encode()).hexdigest(),
                "task": d.get("task"), "identity": d.get("identity"),
                "eval": {k: v for k, v in dataclasses.asdict(s.eval).items() if k != "cache_base"},
                "rollout": d.get("rollout"), "stop_ids": list(self.stop_ids),
                "seed": s.seed if s.rollout.mismatch != "none" else None,  # the engine's perturbed weights
                "engine": [self.engine_info.kind, type(engine).__name__], "model": s.model.name,
                "source": source_hash(), "task_source": class_file_hash(type(self.task)),
                "torch": torch.__version__, "threads": torch.get_num_threads(),
                "cpu": [cpu_model(), cpu_isa()]}

    def run_eval(self, split: str, final: bool = False) -> dict[str, Any]:
        current = None  # sharded and the engine lags: every rank gathers the current policy for rank 0's eval
        if self.shard is not None and self.engine.version != self.budget.counters["updates"]:
            current = self.shard.eval_engine(self)
        if not self.world.main:
            return {}  # rank 0 evaluates alone; the other ranks wait at their next collective
        s = self.spec
        examples = self.splits[split][: s.eval.max_prompts or None]
        ids = [self._prompt(split, i) for i in range(len(examples))]
        engine = self.engine
        if engine.version != self.budget.counters["updates"]:
            engine = current or make_engine(s.rollout.engine, self.model, self.tok, s.rollout)  # the current policy

        def compute() -> dict[str, Any]:
            counted = _CountingGrader(self.task)  # grade errors of the eval, counted (never a silent "wrong")
            problems: list[dict] = []  # per-problem results of the final evals (problems.jsonl)
            res, samples = evaluate(engine, self.tok, counted, examples, [p[0] for p in ids], [p[1] for p in ids],
                                    s.eval, s.rollout.max_new_tokens, self.stop_ids, s.rollout.max_turns,
                                    s.rollout.max_obs_tokens, per_problem=problems if final else None)
            return {"res": res, "samples": samples, "problems": problems, "graded": counted.graded,
                    "errors": counted.errors, "first": counted.first}

        if s.eval.cache_base and not final and self.budget.counters["updates"] == 0 and self.shard is None:
            out, _ = memo_base_eval(self._base_eval_key(split, examples, ids, engine), compute)
        else:
            out = compute()
        res, samples, problems = out["res"], out["samples"], out["problems"]
        if out["graded"] and out["errors"] == out["graded"]:
            from rlsuite.tasks.base import GraderError

            raise GraderError(f"task '{self.task.name}': the grader could not grade any of the {out['graded']} "
                              f"{split} completions at step {self.step_no} (first error: {out['first']})")
        if out["errors"]:
            print(f"warning: {split} eval at step {self.step_no}: the grader could not grade {out['errors']} of "
                  f"{out['graded']} completions (first: {out['first']}); they count as not correct",
                  file=sys.stderr, flush=True)
        row = {"step": self.step_no, **self.budget.row(), "split": split,
               **{f"eval/{self.task.name}/{k}": v for k, v in res.items()},
               "n_samples": s.eval.n_samples, "n_prompts": len(examples), "temperature": s.eval.temperature,
               "top_p": s.eval.top_p, "eval_seed": s.eval.seed, "final": final, "grade_errors": out["errors"]}
        self.folder.append("evals.jsonl", [row])
        self.folder.append("samples.jsonl", [{"step": self.step_no, "split": split, "final": final, **x}
                                             for x in samples])
        if problems:
            self.folder.append("problems.jsonl", [{"step": self.step_no, "split": split, "final": True, **x}
                                                  for x in problems])
        self.trackers.log_eval(row)
        self.progress_out.on_eval(row)
        return row

    # -- the loop ----------------------------------------------------------------------
    def step(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        self.step_no += 1
        self._grade_errors, self._grade_error_first = 0, None
        ctx = self.context()
        batch, metrics = self._collect_batch(ctx)  # 1-5
        metrics["reward/grade_errors"] = float(self._grade_errors)
        if self._grade_errors and self.world.main:
            print(f"warning: step {self.step_no}: the grader of task '{self.task.name}' could not grade "
                  f"{self._grade_errors} completion(s) (first: {self._grade_error_first}); they score 0 and "
                  f"are left out of the loss (reward/grade_errors)", file=sys.stderr, flush=True)
        t1 = time.perf_counter()
        metrics.update(self._update(batch, ctx))  # 6
        if self.ref is not None:
            metrics["stats/kl_coef"] = self.kl_coef  # the β this step used
        cfg = self.algo.cfg
        if cfg.kl_target is not None and self._kl_reading is not None:  # adaptive β, for the next step
            err = min(max(self._kl_reading / cfg.kl_target - 1.0, -0.2), 0.2)
            self.kl_coef *= 1.0 + err * batch.batch_size / cfg.kl_horizon
        t2 = time.perf_counter()
        self.behaviour.sync(int(self.budget.counters["updates"]))
        dt = self.world.all_reduce_max([time.perf_counter() - t0])[0]  # every rank charges the same time
        self.budget.charge("wall_s", dt)
        metrics.update({"perf/step_time": dt, "perf/rollout_time": t1 - t0, "perf/train_time": t2 - t1,
                        "perf/tokens_per_s": float(batch.attn_mask.sum()) / dt})
        metrics["stability/nonfinite"] = 0
        row = {"step": self.step_no, "time": time.time(), **self.budget.row(), **metrics}
        self.folder.append("metrics.jsonl", [row], durable=False)  # fsynced before each checkpoint
        self.trackers.log_metrics(row)
        self.progress_out.on_step(row)
        return row

    def train(self, resume: bool, attempt: int) -> tuple[str, Optional[str]]:
        """Run to the budget; returns (final state, reason). Writes status throughout. The
        trackers and the progress output finish with the state in every case (``failed`` when an
        exception leaves)."""
        state = "failed"
        try:
            state, reason = self._train(resume, attempt)
            return state, reason
        finally:
            self.trackers.finish(state)
            self.progress_out.finish(state, self.step_no)

    def _train(self, resume: bool, attempt: int) -> tuple[str, Optional[str]]:
        f, s = self.folder, self.spec
        resumed = resume and self.load_checkpoint()
        if not self.world.main:
            pass  # data-parallel ranks > 0 write nothing
        elif resumed:
            for name in ("metrics.jsonl", "evals.jsonl", "samples.jsonl", "problems.jsonl"):
                f.truncate_jsonl(name, self.step_no)
            drop_final_rows(f)
        else:
            for name in ("metrics.jsonl", "evals.jsonl", "samples.jsonl", "problems.jsonl"):
                f.file(name).write_text("")
        f.set_status(state="running", reason=None, step=self.step_no, budget=self.budget.counters,
                     started_at=now_iso(), host=socket.gethostname(), pid=os.getpid(), attempt=attempt)
        f.start_heartbeat()
        self.signals.install()  # before the trackers start: a stop signal while one hangs is acted on
        try:
            self.trackers.start(s.to_dict() | {"run_id": f.path.name}, resumed, self.step_no)
            self.progress_out.start(self.step_no)
            sig = self.signals.agreed(self.world)  # arrived while a tracker started: stop before any work
            if sig is not None:
                raise sig
            if not resumed:  # the base on both splits: a final test score is compared with a step-0 test score
                self.run_eval("val")
                self.run_eval("test")
            while not self.budget.exhausted:
                self.step()
                at_end = self.budget.exhausted
                if not at_end and self.budget.progress >= (self.evals_done + 1) * s.eval.every - 1e-12:
                    self.evals_done = int(self.budget.progress / s.eval.every + 1e-12)
                    self.run_eval("val")
                f.set_status(step=self.step_no, budget=self.budget.counters, durable=False)
                sig = self.signals.agreed(self.world)
                if sig is not None:
                    raise sig
                if s.train.checkpoint_every and self.step_no % s.train.checkpoint_every == 0 and not at_end:
                    self.save_checkpoint()
            self.save_checkpoint()
            self.run_eval("val", final=True)
            self.run_eval("test", final=True)
            self._final_state = self.shard.full_state(self.model, self.world.main) if self.shard is not None else None
            f.replace_dir("final", self._save_final)
            return "completed", None
        except Diverged as e:
            f.append("metrics.jsonl", [row := {"step": self.step_no, **self.budget.row(), "stability/nonfinite": 1}])
            self.trackers.log_metrics(row)
            return "diverged", str(e)
        except Interrupted as e:
            self.save_checkpoint()
            return e.state, f"signal at step {self.step_no}"
        finally:
            f.stop_heartbeat()
            self.signals.restore()

    def _save_final(self, d: Path) -> None:
        """``final/``: the policy as ``save_pretrained`` writes it (safetensors in the weights' own
        dtype, ``model.dtype``; tied weights once) and the tokenizer; sharded: the gathered weights."""
        if getattr(self, "_final_state", None) is not None:
            from rlsuite.suite.sharding import save_pretrained

            save_pretrained(self.model, d, self._final_state)
        else:
            self.model.save_pretrained(d)
        self.tok.save_pretrained(d)
