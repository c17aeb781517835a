"""The one shared trainer: the loop. It never branches on an algorithm's or a task's name, nor on
the parallel mode.

Per step (numbers match the sections of :meth:`Trainer.step`):

1. draw prompts (``algo.sample_prompts`` or a seeded pass over the train split, skipping the
   prompts ``rollout.retire_pass_rate`` retired: :mod:`rlsuite.suite.curriculum`);
2. roll out G completions per prompt with the behaviour policies (``algo.before_rollout``);
   the engine records μ's log-probs and what the algorithm ``needs``;
3. grade with the task, then ``algo.rewards`` per group; a completion the grader could not
   grade (``Grade.error``) scores 0, is counted in ``reward/grade_errors`` and is left out of
   the policy loss (its loss mask is zeroed for the update; it still counts in its group's
   statistics as a 0); a batch whose every grade errored raises ``GraderError`` (run ``failed``);
   (2-3: :class:`rlsuite.suite.rollout_stage.RolloutStage`)
4. scoring passes: π_old (or μ when exactly on-policy and configured), π_ref, values;
   in-reward KL; token rewards (:class:`rlsuite.suite.scoring.Scorer`);
5. ``algo.advantages``; ``algo.filter`` with the refill loop (bounded; discarded samples
   are charged); ``rollout.filter_zero_variance`` masks zero-variance groups before the
   advantages or drops them with the entry's filter (:mod:`rlsuite.suite.curriculum`);
6. K epochs × minibatches: ``algo.loss`` (masked by the ``loss`` options OPSM and the
   high-entropy minority; + the KL loss term, − the entropy bonus, + ``algo.value_loss``:
   :mod:`rlsuite.suite.loss_options`) aggregated with the global normaliser of the entry's mode
   (computed before the micro-batch loop), backward, clip, AdamW step, ``algo.after_update``
   (the adaptive entropy coefficient moves after each); the adaptive KL
   coefficient moves (:mod:`rlsuite.suite.kl_control`); the rollout engine is re-synced per
   ``rollout.sync``/``rollout.staleness`` (periodic catch-up, or a fixed lag of k updates),
   through the mismatch knob (``rollout.mismatch``) when set;
7. log one metrics row, evaluate on schedule (:class:`rlsuite.suite.eval_stage.EvalStage`),
   checkpoint, stop at the budget or on divergence.

What a step changes and a checkpoint keeps has one owner, :class:`rlsuite.suite.train_state.TrainState`
(models, optimizer, behaviour policy, counters, KL coefficient). Checkpoints
(:mod:`rlsuite.suite.checkpoint`) hold what resuming needs: the trained models, their optimizer
state and the behaviour weights only where they lag the policy; the frozen reference and initial
policy are rebuilt from the base (checked by its sha256). A completed run keeps ``final/`` (the
policy in ``model.dtype``, tied weights once) and the runner drops ``checkpoint/`` unless
``train.keep_checkpoint``.

The parallel mode (:mod:`rlsuite.suite.parallel`) is one object the loop calls the same way in
every mode. Data parallelism (``dist.world_size`` > 1, :mod:`rlsuite.suite.distributed`): every
rank holds the same state and the same full batch; generation (2) and the update (6) are sharded
by rows (records all-gathered, gradients all-reduced with the global normaliser's weights);
scoring passes (4) run on the full batch; rank 0 alone writes the run folder and evaluates.
Sharded training (``dist.shard=fsdp``, :mod:`rlsuite.suite.sharding`): the same loop over the
same row shards, with the policy, critic, reference and optimizer state sharded across the ranks
by FSDP2 (gradients reduce-scattered as sums instead of one all-reduce; every rank runs as many
micro-batches, padding with weight-0 copies); the engine receives full weights gathered one
layer at a time; checkpoints are torch.distributed.checkpoint shards plus rank 0's counters.

Rank 0 also copies every metrics and eval row to the experiment trackers of ``log.trackers``
(:mod:`rlsuite.suite.trackers`) and prints progress on stderr (:mod:`rlsuite.suite.progress`).
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, Optional

import torch

from rlsuite.algorithms.base import Algorithm
from rlsuite.suite import checkpoint, kl_control, lora, loss_options
from rlsuite.suite.aggregation import aggregation_weights
from rlsuite.suite.behaviour import BehaviourSync
from rlsuite.suite.budget import scoring_flops, training_flops
from rlsuite.suite.checks import check_capabilities, resolve_auto
from rlsuite.suite.config import RunSpec
from rlsuite.suite.distill import load_teacher
from rlsuite.suite.distill import loss_term as distill_term
from rlsuite.suite.distributed import world as current_world
from rlsuite.suite.engines import make_engine
from rlsuite.suite.errors import BadInput, Diverged, Interrupted
from rlsuite.suite.eval_stage import EvalStage
from rlsuite.suite.hooks import Context
from rlsuite.suite.lifecycle import Signals, drop_final_rows
from rlsuite.suite.models import non_embedding_params
from rlsuite.suite.ops import masked_mean
from rlsuite.suite.parallel import parallel_mode
from rlsuite.suite.policy import forward_options, policy_forward, precision
from rlsuite.suite.progress import RunProgress
from rlsuite.suite.prompts import seed_for
from rlsuite.suite.rollout_stage import RolloutStage, StageConfig
from rlsuite.suite.runfolder import ReadOnlyFolder, RunFolder, now_iso
from rlsuite.suite.scoring import Scorer
from rlsuite.suite.step_metrics import gather_ranks, old_logp_metrics, rollout_metrics
from rlsuite.suite.step_metrics import merge as _merge
from rlsuite.suite.stop import stop_ids
from rlsuite.suite.trackers import Trackers
from rlsuite.suite.train_state import TrainState
from rlsuite.suite.types import Batch, cat_rollouts, real_width
from rlsuite.suite.update_plan import computed_positions, lr_factor, micro_batches, update_fields


class Trainer:
    """Runs the loop over the run's :class:`~rlsuite.suite.train_state.TrainState` (``state``) with its
    stages (rollout, scoring, evals), parallel mode, budget and run folder."""

    def __init__(self, spec: RunSpec, run_dir: Path, task, algo: Algorithm, model, tokenizer) -> None:
        self.spec, self.task, self.algo, self.tok = spec, task, algo, tokenizer
        r, t, d = spec.rollout, spec.train, spec.dist
        self.device = torch.device("cuda" if t.device == "cuda" or (t.device == "auto" and torch.cuda.is_available())
                                   else "cpu")
        model = model.to(self.device)
        if spec.model.lora_rank:  # LoRA adapters through PEFT, the base frozen (suite/lora.py)
            model = lora.attach(model, spec.model, spec.seed)
        self.world = current_world()  # data parallelism: suite/distributed.py (rank 0 of 1 without it)
        if self.world.size != d.world_size:
            raise BadInput(f"dist.world_size={d.world_size} but this process group has {self.world.size} process(es); "
                           f"start runs with `rlsuite run` (it spawns the processes) or a job with that many tasks")
        self.world.broadcast_module(model)  # every rank starts from rank 0's weights
        self.needs = algo.needs | loss_options.needs(spec.loss)  # the entry's, and the loss options' (entropy)
        # the training forward's fields, besides logp
        self.fields = update_fields(self.needs, algo.critic or spec.model.critic)
        # the `auto` levers by capability (train.share_prefix, optim.fused; spec.json/env.json record them)
        self.resolved: dict[str, Any] = resolve_auto(model, self.fields, t, d, spec.optim)
        t = dataclasses.replace(t, share_prefix=self.resolved["train.share_prefix"])
        self.train_cfg = t  # spec.train with its levers resolved
        self.engine_info = check_capabilities(model, self.needs, algo.cfg.name, self.fields, r, t, d,
                                              spec.model.name, self.device)  # exit 2: what this run cannot do
        self.resolved["rollout.engine"] = self.engine_info.kind
        self.splits = task.splits()
        for s in ("train", "val", "test"):
            if not self.splits.get(s):
                raise BadInput(f"task '{task.name}' has an empty {s} split")
        self.stop_ids = stop_ids(tokenizer, model)
        engine = make_engine(r.engine, model, tokenizer, r)
        behaviour = BehaviourSync(r, spec.seed, engine, model)  # staleness and the mismatch knob
        self.state = st = TrainState.build(spec, algo, model, engine, behaviour, self.device, len(self.splits["train"]))
        st.curriculum.check(algo)  # exit 2: the curriculum with an entry that draws its own prompts
        if "teacher_logp" in self.needs:  # the distillation teacher: loaded once, frozen (exit 2: another tokenizer)
            st.teacher = load_teacher(spec, task, model, tokenizer)
        self.parallel = parallel_mode(d, self.device, self.world)  # one process, data parallel or sharded
        self.parallel.prepare(st)  # sharded: the models laid out across the ranks (before the optimizer)
        self.base_lrs = st.build_optimizer(spec.optim, self.resolved["optim.fused"])
        self.P = non_embedding_params(model)
        self.P_critic = st.critic.n_params() if st.critic is not None else 0
        self.folder = RunFolder(run_dir) if self.world.main else ReadOnlyFolder(run_dir)  # rank 0 alone writes
        self.signals = Signals()
        stage = StageConfig(r, spec.model.chat_template, spec.seed, self.needs, self.stop_ids, self.P)
        self.rollouts = RolloutStage(stage, task=task, splits=self.splits, tokenizer=tokenizer, engine=engine,
                                     algo=algo, world=self.world, budget=st.budget, anchors=st.ref_anchors)
        self.scorer = Scorer(spec, t, st, self.fields, self.device, self.P, self.P_critic)
        self.trackers = Trackers.for_run(spec, run_dir, self.world.main,  # log.trackers (suite/trackers.py), rank 0
                                         stopping=lambda: self.signals.signal is not None)
        self.progress_out = RunProgress(spec.log, st.budget, self.world.main)  # stderr progress (suite/progress.py)
        self.evals = EvalStage(spec, task=task, splits=self.splits, tokenizer=tokenizer, stop_ids=self.stop_ids,
                               engine_kind=self.engine_info.kind, prompt=self.rollouts.prompt, state=st,
                               parallel=self.parallel, world=self.world, folder=self.folder, on_row=self._eval_row)

    @property
    def step_no(self) -> int:
        """The steps taken so far (the training state's counter)."""
        return self.state.step_no

    @property
    def budget(self):
        """The run's budget (the training state's counters and limits)."""
        return self.state.budget

    def context(self) -> Context:
        s, st = self.spec, self.state
        return Context(step=st.step_no, progress=st.budget.progress, entropy=st.entropy,
                       max_new_tokens=s.rollout.max_new_tokens, group_size=s.rollout.group_size,
                       prompts_per_step=s.rollout.prompts_per_step, n_train=len(self.splits["train"]),
                       seed=s.seed, policy=st.model,
                       generator=lambda stream: torch.Generator().manual_seed(seed_for(s.seed, stream, st.step_no)),
                       charge=self._charge_extra, refresh_reference=st.refresh_reference)

    def _charge_extra(self, kind: str, tokens: int, params: int) -> None:
        self.state.budget.charge_flops(kind, scoring_flops(params, tokens))

    def _eval_row(self, row: dict[str, Any]) -> None:
        self.trackers.log_eval(row)
        self.progress_out.on_eval(row)

    # -- 1. prompts --------------------------------------------------------------------
    def _draw_prompts(self, n: int) -> list[int]:
        """Seeded passes over the train split: a fresh permutation per pass (retired prompts are
        passed over: they move the cursor, not the draw)."""
        st, n_train = self.state, len(self.splits["train"])
        out = []
        while len(out) < n:
            epoch, pos = divmod(st.cursor, n_train)
            gen = torch.Generator().manual_seed(seed_for(self.spec.seed, "data", epoch))
            perm = torch.randperm(n_train, generator=gen)
            take = min(n - len(out), n_train - pos)
            out += [i for i in perm[pos:pos + take].tolist() if st.curriculum.draws(i)]
            st.cursor += take
        return out

    # -- 2-5. rollout, rewards, scoring, advantages and filtering with refill ----------
    def _collect_batch(self, ctx: Context) -> tuple[Batch, dict[str, float]]:
        r = self.spec.rollout
        target = r.prompts_per_step * r.group_size
        kept: list[Batch] = []
        n_kept, discarded, tries = 0, 0, 0
        metrics: dict[str, float] = {}
        for attempt in range(1 + r.max_refill_tries):
            tries += 1
            idx = self.algo.sample_prompts(ctx) or self._draw_prompts(r.prompts_per_step)
            rec, roll_metrics = self.rollouts.rollout(list(idx), ctx, attempt)  # 2-3
            n_fresh = rec.batch_size
            stale = self.algo.replay(ctx) if attempt == 0 else None
            if stale is not None:  # re-used rows go after the fresh ones, in groups of their own
                rec = cat_rollouts([rec, stale])
            # 4 (+ zero-variance mask)
            batch, zv_metrics = self.state.curriculum.mask(self.scorer.score(rec, replayed=stale is not None))
            self.state.curriculum.record(batch, n_fresh)  # the curriculum's pass rates
            adv = self.algo.advantages(batch, ctx)
            batch = dataclasses.replace(batch, adv=adv.adv, returns=adv.returns, extras={**batch.extras, **adv.extras},
                                        loss_mask=batch.loss_mask if adv.loss_mask is None else adv.loss_mask)
            metrics.update(adv.metrics)
            if attempt == 0:  # reward, length, group and mismatch statistics of the first draw
                metrics.update(roll_metrics)
                fresh = batch if stale is None else batch.select(torch.arange(n_fresh, device=batch.tokens.device))
                # the samples drawn on the task's prompts
                if fresh.stage is not None and bool((fresh.stage == 0).any()):
                    fresh = fresh.select(torch.nonzero(fresh.stage == 0).flatten())
                metrics.update(rollout_metrics(fresh, r.group_size, self.state.budget.counters["updates"],
                                               self.algo.cfg))
                metrics.update(self.scorer.is_metrics)
                metrics.update(zv_metrics)
                if stale is not None:
                    metrics["replay/rows"] = float(stale.batch_size)
            keep = self.state.curriculum.keep(batch, self.algo.filter(batch, ctx))  # + zero-variance drop
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
                        "filter/kept_frac": n_kept / max(1, n_kept + discarded), **self.state.curriculum.metrics()})
        if batch.grade_error is not None and bool(batch.grade_error.any()):  # ungraded rows: no policy gradient
            keep = (~batch.grade_error.to(batch.loss_mask.device)).to(batch.loss_mask.dtype)
            batch = dataclasses.replace(batch, loss_mask=batch.loss_mask * keep[:, None])
        return batch, metrics

    # -- 6. the update -----------------------------------------------------------------
    def _update(self, batch: Batch, ctx: Context) -> dict[str, float]:
        s, t, st = self.spec, self.spec.train, self.state
        cfg, want, head, critic = self.algo.cfg, self.fields, st.value_head, st.separate_critic
        opts = forward_options(self.train_cfg, batch.prompt_width)
        B = batch.batch_size
        acc: dict[str, list[tuple[float, float]]] = {}
        n_tok = int(batch.attn_mask.sum())
        computed = 0  # token positions the training forwards compute (fewer with train.share_prefix)
        from_update = None  # (rows, π_old) when the forward supplied π_old (Scorer.from_update)
        warmup = st.critic is not None and st.step_no <= t.critic_warmup_steps  # only the critic learns
        for epoch in range(t.epochs):
            gen = torch.Generator().manual_seed(seed_for(s.seed, "minibatch", st.step_no, epoch))
            perm = torch.randperm(B, generator=gen)
            for mb_idx in torch.tensor_split(perm, t.minibatches):
                mb = batch.select(mb_idx.to(batch.tokens.device))
                w_all = aggregation_weights(mb.loss_mask, self.algo.aggregation, s.rollout.max_new_tokens,
                                            s.loss.empty_rows, group_id=mb.group_id)
                st.opt.zero_grad(set_to_none=True)
                plan = micro_batches(mb, self.world.size, t)  # every rank's micro-batches (rows of mb)
                computed += computed_positions(st.model, mb, plan, opts["prompt_width"], want, t.bucket_by_length)
                nonfinite = None
                for rows, live in self.parallel.rank_micro_batches(plan):  # sharded: padded to the longest rank
                    mic, w = mb.select(rows), w_all[rows] if live else torch.zeros_like(w_all[rows])
                    if t.bucket_by_length:  # drop the micro-batch's trailing padding columns
                        width = real_width(mic.attn_mask)
                        mic, w = mic.trim(width), w[:, :width]
                    with precision(t, self.device):
                        fwd = policy_forward(st.model, mic.tokens, mic.attn_mask, s.rollout.temperature, want, head,
                                             topk_ids=mic.topk_ids, **opts)
                        if critic is not None:  # a separate critic: its own forward
                            fwd = dataclasses.replace(fwd, values=critic.forward_separate(mic.tokens, mic.attn_mask))
                    if "entropy" not in self.needs:
                        fwd = dataclasses.replace(fwd, entropy=fwd.entropy.detach())
                    # π_old is this forward's (Scorer.from_update)
                    if mic.old_logp is None and mic.old_logp_mask is not None:
                        mic = dataclasses.replace(mic, old_logp=fwd.logp.detach().float() * mic.old_logp_mask)
                        from_update = (mb_idx[rows], mic.old_logp)
                    loss_tok, m = self.algo.loss(fwd, mic, ctx)
                    if "is_weight" in mic.extras:  # loss.is_correction: the policy term only
                        loss_tok = loss_tok * mic.extras["is_weight"]
                    # loss.opsm_delta, loss.top_entropy_quantile: the policy term only (suite/loss_options.py)
                    keep, high, om = loss_options.policy_masks(s.loss, fwd.logp, fwd.entropy, mic.adv, mic.behav_logp,
                                                               mic.loss_mask)
                    if keep is not None:
                        loss_tok = loss_tok * keep
                    m = {**m, **om}
                    policy = (w * loss_tok).sum()
                    m["loss/policy"] = policy.detach()
                    total = policy
                    kl = kl_control.loss_term(cfg, st.kl_coef, w, fwd.logp, mic.ref_logp, mic.loss_mask,
                                              mic.old_logp if s.loss.kl_is_weight else None)
                    if kl is not None:
                        total = total + kl
                        m["loss/kl"] = kl.detach()
                    bonus = None if warmup else st.entropy_control.bonus(  # warm-up: no bonus, no window
                        w, fwd.entropy, mic.loss_mask * (1 if high is None else high), live)
                    if bonus is not None:  # loss.entropy_coef (adaptive with loss.entropy_target)
                        total = total - bonus
                        m["loss/entropy_bonus"] = bonus.detach()
                        m["stats/entropy_coef"] = st.entropy_control.applied
                    dl = distill_term(cfg, w, fwd.logp, mic.old_logp, mic.teacher_logp, mic.loss_mask)
                    if dl is not None:  # algo.distill_coef: the on-policy distillation term (suite/distill.py)
                        total = total + dl[0]
                        m = {**m, **dl[1], "loss/distill": dl[0].detach()}
                    if warmup:  # train.critic_warmup_steps: the policy's terms stay out of the loss
                        total = total.new_zeros(())
                    if st.critic is not None:
                        v_tok, vm = self.algo.value_loss(fwd, mic, ctx)
                        vl = (w * v_tok).sum()
                        total = total + vl
                        m.update(vm)
                        m["loss/value"] = vl.detach()
                    m["loss/total"] = total.detach()
                    m["stats/entropy"] = masked_mean(fwd.entropy.detach(), mic.loss_mask)
                    bad = self.parallel.nonfinite(total, st.step_no)  # raises where the ranks stop at once
                    if bad is None:
                        total.backward()
                    else:  # data-parallel: every rank learns of it at the gradient all-reduce
                        nonfinite = bad
                    share = float(w.sum())  # this micro-batch's share of the normaliser
                    for k, v in (m.items() if live else ()):
                        acc.setdefault(k, []).append((float(v), share))
                norms = self._clip_and_step(nonfinite, warmup)
                acc.setdefault("stats/grad_norm", []).append((norms[0], 1.0))
                if len(norms) > 1:  # the critic's parameter group (a head or a separate critic)
                    acc.setdefault("stats/critic_grad_norm", []).append((norms[1], 1.0))
                if not warmup:
                    st.entropy_control.step(self.world)  # the adaptive entropy coefficient (loss.entropy_target)
                st.budget.charge("updates", 1)
                self.algo.after_update(self.context())
        st.budget.charge("train_tokens", n_tok * t.epochs)
        st.budget.charge_flops("train", training_flops(self.P, computed, 1))
        if critic is not None:
            st.budget.charge_flops("train_critic", training_flops(self.P_critic, n_tok, t.epochs))
        out = _merge(gather_ranks(acc, self.world))  # every rank's micro-batch metrics, as one process merges them
        if from_update is not None:  # the statistics of π_old the scoring pass would have logged, in its row order
            rows, old = from_update
            full = torch.zeros_like(batch.old_logp_mask)
            full[rows.to(full.device)] = old
            out.update(old_logp_metrics(dataclasses.replace(batch, old_logp=full), cfg))
        out["stats/lr"] = st.opt.param_groups[0]["lr"]
        if t.critic_warmup_steps:
            out["train/critic_warmup"] = float(warmup)
        st.entropy = out.get("stats/entropy")
        return out

    def critic_warmup_updates(self) -> int:
        """Optimizer updates of the critic warm-up done before this step (``train.critic_warmup_steps``
        steps of ``epochs × minibatches`` updates each; 0 without a critic)."""
        t = self.spec.train
        if self.state.critic is None or not t.critic_warmup_steps:
            return 0
        return min(self.state.step_no - 1, t.critic_warmup_steps) * t.epochs * t.minibatches

    def _clip_and_step(self, nonfinite: Optional[str] = None, critic_only: bool = False) -> list[float]:
        """Clip each parameter group's gradient (``optim.grad_clip``), step the optimizer; the groups'
        norms before clipping (policy, then the critic's where there is one)."""
        st = self.state
        self.parallel.reduce_grads(st.opt, nonfinite, st.step_no)  # data parallel: the ranks' shares summed
        if critic_only:  # train.critic_warmup_steps: the policy's parameters (group 0) are not stepped
            for p in st.opt.param_groups[0]["params"]:
                p.grad = None
        updates = st.budget.counters["updates"]
        # the policy's warm-up schedule counts its own updates: those of the critic warm-up are not its
        policy_updates = max(0.0, updates - self.critic_warmup_updates())
        for i, (g, base) in enumerate(zip(st.opt.param_groups, self.base_lrs)):
            g["lr"] = base * lr_factor(self.spec.optim, policy_updates if i == 0 else updates, st.budget.progress)
        clip = self.spec.optim.grad_clip or float("inf")
        norms = [self.parallel.clip_grad_norm(g["params"], clip) for g in st.opt.param_groups]
        if not all(torch.isfinite(n) for n in norms):
            raise Diverged(f"non-finite gradient norm at step {st.step_no}")
        st.opt.step()
        return [float(n) for n in norms]

    # -- the loop ----------------------------------------------------------------------
    def step(self) -> dict[str, Any]:
        st, t0 = self.state, time.perf_counter()
        st.step_no += 1
        errors = self.rollouts.errors
        errors.reset()
        ctx = self.context()
        batch, metrics = self._collect_batch(ctx)  # 1-5
        metrics["reward/grade_errors"] = float(errors.count)
        if errors.count and self.world.main:
            print(f"warning: step {st.step_no}: the grader of task '{self.task.name}' could not grade "
                  f"{errors.count} completion(s) (first: {errors.first}); they score 0 and "
                  f"are left out of the loss (reward/grade_errors)", file=sys.stderr, flush=True)
        t1 = time.perf_counter()
        metrics.update(self._update(batch, ctx))  # 6
        if st.ref is not None:
            metrics["stats/kl_coef"] = st.kl_coef  # the β this step used
        st.kl_coef = kl_control.adapt(st.kl_coef, self.scorer.kl_reading, self.algo.cfg, batch.batch_size)
        t2 = time.perf_counter()
        st.behaviour.sync(int(st.budget.counters["updates"]))
        dt = self.world.all_reduce_max([time.perf_counter() - t0])[0]  # every rank charges the same time
        st.budget.charge("wall_s", dt)
        metrics.update({"perf/step_time": dt, "perf/rollout_time": t1 - t0, "perf/train_time": t2 - t1,
                        "perf/tokens_per_s": float(batch.attn_mask.sum()) / dt})
        metrics["stability/nonfinite"] = 0
        row = {"step": st.step_no, "time": time.time(), **st.budget.row(), **metrics}
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
            self.progress_out.finish(state, self.state.step_no)

    def _train(self, resume: bool, attempt: int) -> tuple[str, Optional[str]]:
        f, s, st = self.folder, self.spec, self.state
        resumed = resume and checkpoint.resume(st, f, self.parallel, self.device, s.model.name)
        if not self.world.main:
            pass  # data-parallel ranks > 0 write nothing
        elif resumed:
            for name in ("metrics.jsonl", "evals.jsonl", "samples.jsonl", "problems.jsonl"):
                f.truncate_jsonl(name, st.step_no)
            drop_final_rows(f)
        else:
            for name in ("metrics.jsonl", "evals.jsonl", "samples.jsonl", "problems.jsonl"):
                f.file(name).write_text("")
        f.set_status(state="running", reason=None, step=st.step_no, budget=st.budget.counters,
                     started_at=now_iso(), host=socket.gethostname(), pid=os.getpid(), attempt=attempt)
        f.start_heartbeat()
        self.signals.install()  # before the trackers start: a stop signal while one hangs is acted on
        try:
            self.trackers.start(s.to_dict() | {"run_id": f.path.name}, resumed, st.step_no)
            self.progress_out.start(st.step_no)
            sig = self.signals.agreed(self.world)  # arrived while a tracker started: stop before any work
            if sig is not None:
                raise sig
            if not resumed:  # the base on both splits: a final test score is compared with a step-0 test score
                self.evals.run("val")
                self.evals.run("test")
            while not st.budget.exhausted:
                self.step()
                at_end = st.budget.exhausted
                if not at_end and st.budget.progress >= (st.evals_done + 1) * s.eval.every - 1e-12:
                    st.evals_done = int(st.budget.progress / s.eval.every + 1e-12)
                    self.evals.run("val")
                f.set_status(step=st.step_no, budget=st.budget.counters, durable=False)
                sig = self.signals.agreed(self.world)
                if sig is not None:
                    raise sig
                if s.train.checkpoint_every and st.step_no % s.train.checkpoint_every == 0 and not at_end:
                    checkpoint.save(st, f, self.parallel)
            checkpoint.save(st, f, self.parallel)
            self.evals.run("val", final=True)
            self.evals.run("test", final=True)
            # sharded: every rank gathers the weights now; LoRA: the merged policy and final/adapter/
            write = lora.final_writer(st.model, self.parallel.final_writer(st.model))

            def final(d: Path) -> None:  # final/: the policy as save_pretrained writes it, and the tokenizer
                write(d)
                self.tok.save_pretrained(d)

            f.replace_dir("final", final)
            return "completed", None
        except Diverged as e:
            f.append("metrics.jsonl", [row := {"step": st.step_no, **st.budget.row(), "stability/nonfinite": 1}])
            self.trackers.log_metrics(row)
            return "diverged", str(e)
        except Interrupted as e:
            checkpoint.save(st, f, self.parallel)
            return e.state, f"signal at step {st.step_no}"
        finally:
            f.stop_heartbeat()
            self.signals.restore()
