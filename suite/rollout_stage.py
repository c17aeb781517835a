"""Steps 2–3 of :meth:`rlsuite.suite.trainer.Trainer.step`: the rollout stage.

Roll out G completions per prompt with the behaviour policies (``algo.before_rollout``),
grade them with the task, build each group's rewards (``algo.rewards``), and run the
feedback-conditioned second round when the algorithm asks for one (``algo.revise``). Its
input is narrow: a :class:`StageConfig` (the ``rollout`` config section, the model's
chat-template setting, the run seed, the entry's needs, the stop tokens, the policy's size for
FLOPs), the task and its splits, the tokenizer, the engine, the algorithm, the data-parallel
world, the budget it charges and the reference anchors it fills (kept in checkpoints:
:attr:`rlsuite.suite.train_state.TrainState.ref_anchors`). Grade errors are counted in
:attr:`RolloutStage.errors` (:class:`GradeErrors`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Optional

import torch

from rlsuite.suite.budget import Budget, rollout_flops
from rlsuite.suite.engines import RowNoise, SamplingParams
from rlsuite.suite.hooks import STAGES, Behaviour, Context, Group, Revision
from rlsuite.suite.prompts import encode_prompt, encode_text, seed_for
from rlsuite.suite.rollout import collect
from rlsuite.suite.types import Rollout, cat_rollouts


@dataclasses.dataclass(frozen=True)
class StageConfig:
    """What the rollout stage reads of the run besides its collaborators."""

    rollout: Any
    """The ``rollout`` config section."""
    chat_template: str
    """``model.chat_template``."""
    seed: int
    needs: frozenset[str]
    """The algorithm's declared needs (top-K, attention statistics, anchors, ...)."""
    stop_ids: tuple[int, ...]
    """Token ids that end a completion (empty: the tokenizer's EOS)."""
    n_params: int
    """The policy's non-embedding parameters P (generation FLOPs)."""


class GradeErrors:
    """A step's grade errors (``Grade.error``): counted, the first kept. ``n`` grades of which all
    errored means the grader is broken: the run stops as ``failed`` (it never trains on all-zero
    rewards)."""

    def __init__(self, task_name: str) -> None:
        self.task_name = task_name
        self.reset()

    def reset(self) -> None:
        self.count, self.first = 0, None

    def note(self, errors: list[str], n: Optional[int], step: Optional[int] = None) -> None:
        if not errors:
            return
        self.count += len(errors)
        if self.first is None:
            self.first = errors[0]
        if n is not None and len(errors) == n:
            from rlsuite.tasks.base import GraderError

            raise GraderError(f"task '{self.task_name}': the grader could not grade any of the {n} completions "
                              f"at step {step} (first error: {errors[0]})")


class RolloutStage:
    """Prompts → graded rollout records with rewards (and the second round's rows)."""

    def __init__(self, cfg: StageConfig, *, task, splits: dict, tokenizer, engine, algo, world, budget: Budget,
                 anchors: dict[int, tuple[str, ...]]) -> None:
        self.r, self.chat_template, self.seed = cfg.rollout, cfg.chat_template, cfg.seed
        self.task, self.splits, self.tok, self.engine, self.algo = task, splits, tokenizer, engine, algo
        self.needs, self.world, self.budget, self.P = cfg.needs, world, budget, cfg.n_params
        self.errors = GradeErrors(task.name)
        self.stop_ids = cfg.stop_ids or (tokenizer.eos_token_id,)
        self._prompt_cache: dict[tuple[str, int], tuple[list[int], str]] = {}
        # ``ref_anchor``: the engine's weights at construction (the base the run starts from) and the
        # anchors sampled from them, by train index (``anchors``: the training state's, checkpointed)
        self.ref_state = ({k: v.clone() for k, v in engine.state().items()} if "ref_anchor" in cfg.needs else None)
        self.ref_anchors = anchors

    def prompt(self, split: str, i: int) -> tuple[list[int], str]:
        key = (split, i)
        if key not in self._prompt_cache:
            self._prompt_cache[key] = encode_prompt(self.task, self.splits[split][i], self.tok,
                                                    self.chat_template)
        return self._prompt_cache[key]

    def rollout(self, idx: list[int], ctx: Context, attempt: int) -> tuple[Rollout, dict[str, float]]:
        r = self.r
        G = r.group_size
        rows = [i for i in idx for _ in range(G)]
        prompts = [self.prompt("train", i)[0] for i in rows]
        envs = self.episode_envs(rows)
        params = SamplingParams(max_new_tokens=r.max_new_tokens, temperature=r.temperature, top_p=r.top_p,
                                top_k=r.top_k, stop_ids=self.stop_ids, topk=r.topk if "topk" in self.needs else 0)
        behaviours = self.algo.before_rollout(ctx) or [Behaviour(0, tuple(range(len(rows))))]
        parts, order, metrics = [], [], {}
        for beh in behaviours:
            sub = list(beh.rows)
            with self.engine_weights(beh.state):
                gen = self.generator(seed_for(self.seed, "rollout", ctx.step, attempt, beh.id), sub)
                self.engine.reset_stats()
                rec, metrics = self.collect(self.engine, self.tok, [prompts[j] for j in sub], params, gen,
                                             envs=[envs[j] for j in sub] if envs else None, max_turns=r.max_turns,
                                             max_obs_tokens=r.max_obs_tokens,
                                             want_attn="behav_attn_stat" in self.needs,
                                             group_ids=[j // G for j in sub], example_idx=[rows[j] for j in sub],
                                             behaviour_ids=[beh.id] * len(sub))
                metrics.update(self.engine.stats())  # the engine's own rollout metrics (e.g. S3R's acceptance)
            parts.append(rec)
            order += sub
        rec = cat_rollouts(parts, offset_groups=False)
        if len(parts) > 1:
            rec = rec.select(torch.tensor(order).argsort())
        # 3. grade, then the algorithm's group-level reward construction
        anchors = (self.anchors(idx) if "anchor" in self.needs else
                   self.reference_anchors(idx) if "ref_anchor" in self.needs else [()] * len(idx))
        rec, grades, groups = self.grade(rec, idx, [self.prompt("train", i)[1] for i in idx], ctx, anchors)
        self.charge(rec, len(idx))
        rev = self.algo.revise(groups, ctx)
        if rev is not None:
            rec, rev_metrics = self.second_round(rec, idx, grades, rev, ctx, params, attempt)
            metrics = {**metrics, **rev_metrics}
        return rec, metrics

    def grade(self, rec: Rollout, idx: list[int], prompts: list[str], ctx: Context,
               anchors: list[tuple[str, ...]]) -> tuple[Rollout, list, list[Group]]:
        """Grade G completions per prompt group (group g answers train example ``idx[g]``, shown
        as ``prompts[g]``), then the algorithm's group-level rewards."""
        G = self.r.group_size
        examples = [self.splits["train"][i] for i in idx for _ in range(G)]
        grades = self.task.grade_batch(examples, list(rec.texts))
        self.errors.note([g.error for g in grades if g.error is not None], len(grades), ctx.step)
        scores = torch.tensor([g.reward for g in grades], dtype=torch.float)
        rewards = torch.empty_like(scores)
        groups = []
        for g, i in enumerate(idx):
            sl = slice(g * G, (g + 1) * G)
            example = self.splits["train"][i]
            group = Group(prompt=prompts[g], example=example,
                          completions=rec.texts[sl], parsed=tuple(x.parsed for x in grades[sl]), scores=scores[sl],
                          lengths=rec.loss_mask[sl].sum(-1), truncated=rec.truncated[sl],
                          grade=lambda text, ex=example: self.grade_one(ex, text), anchors=anchors[g])
            rewards[sl] = torch.as_tensor(self.algo.rewards(group, ctx), dtype=torch.float)
            groups.append(group)
        components = {k: torch.tensor([g.component(k) for g in grades], dtype=torch.float)
                      for k in self.task.reward_components}  # name → [B]; empty for one-reward tasks
        rec = rec.replace(scores=scores, rewards=rewards, parsed=tuple(g.parsed for g in grades),
                          error_class=tuple(g.error_key for g in grades),
                          grade_error=torch.tensor([g.error is not None for g in grades], dtype=torch.bool),
                          reward_components=components)
        return rec, grades, groups

    def grade_one(self, example, text: str) -> float:
        """``Group.grade``: one extra grade (judges, anchors); a grade error is counted."""
        g = self.task.grade(example, text)
        self.errors.note([g.error] if g.error is not None else [], None)
        return float(g.reward)

    # -- 3b. a feedback-conditioned second round (``revise``) ---------------------------
    def second_round(self, rec: Rollout, idx: list[int], grades: list, rev: Revision, ctx: Context,
                      params: SamplingParams, attempt: int) -> tuple[Rollout, dict[str, float]]:
        """Sample G completions from ``task.revision_prompt(prompt, answer, feedback)`` for each
        group with a source; return the rows ``rev.stages`` asks for (``Rollout.stage``)."""
        r = self.r
        G, P = r.group_size, len(idx)
        if len(rev.sources) != P or any(not -1 <= s < G for s in rev.sources):
            raise ValueError(f"revise() must return one source in [-1, {G}) per group ({P} groups), got {rev.sources}")
        first = rec.replace(stage=torch.zeros(rec.batch_size, dtype=torch.long))
        chosen = [(g, s) for g, s in enumerate(rev.sources) if s >= 0]
        if not chosen:  # nothing to revise: the first round alone (e.g. every group solved)
            return first, {"revise/groups": 0.0}
        aug_ids, aug_texts = [], []
        for g, s in chosen:
            ex, j = self.splits["train"][idx[g]], g * G + s
            fb = self.task.feedback(ex, rec.texts[j], grades[j], rev.detail)
            ids, text = encode_text(self.task.revision_prompt(ex, rec.texts[j], fb), self.tok, self.chat_template)
            aug_ids.append(ids)
            aug_texts.append(text)
        rows = [k for k in range(len(chosen)) for _ in range(G)]
        src_idx = [idx[g] for g, _ in chosen]
        envs = self.episode_envs([src_idx[k] for k in rows])
        gen = self.generator(seed_for(self.seed, "revision", ctx.step, attempt), list(range(len(rows))))
        second, _ = self.collect(self.engine, self.tok, [aug_ids[k] for k in rows], params, gen, envs=envs,
                                  max_turns=r.max_turns, max_obs_tokens=r.max_obs_tokens,
                                  want_attn="behav_attn_stat" in self.needs, group_ids=[P + k for k in rows],
                                  example_idx=[src_idx[k] for k in rows], behaviour_ids=[0] * len(rows))
        second, _, _ = self.grade(second, src_idx, aug_texts, ctx, [()] * len(chosen))
        self.charge(second, len(chosen))
        second = second.replace(stage=torch.ones(second.batch_size, dtype=torch.long))
        recontext = self.recontext(rec, second, [g for g, _ in chosen])
        parts = [p for name, p in zip(STAGES, (first, second, recontext)) if name in rev.stages]
        src_scores = torch.tensor([float(rec.scores[g * G + s]) for g, s in chosen])
        new_means = second.scores.view(len(chosen), G).mean(-1)
        metrics = {"revise/groups": float(len(chosen)), "revise/source_score": float(src_scores.mean()),
                   "revise/first_score": float(rec.scores.mean()),
                   "revise/score_mean": float(second.scores.mean()),
                   "revise/improved_frac": float((new_means > src_scores).float().mean()),
                   "revise/prompt_len_mean": sum(map(len, aug_ids)) / len(aug_ids)}
        return cat_rollouts(parts, offset_groups=False), metrics

    def recontext(self, rec: Rollout, second: Rollout, gs: list[int]) -> Rollout:
        """The second round's responses after their original prompt (``rec``'s group ``gs[k]``):
        every time-indexed field is the original prompt block + the response block; the
        behaviour log-probs stay those of the feedback-conditioned sampler (stage 2)."""
        G = self.r.group_size
        src = rec.select(torch.tensor([g * G for g in gs for _ in range(G)]))
        pw0, pw1 = rec.prompt_width, second.prompt_width
        changes: dict[str, Any] = {}
        for f in dataclasses.fields(Rollout):
            a, b = getattr(src, f.name), getattr(second, f.name)
            if isinstance(b, torch.Tensor) and b.dim() >= 2:
                changes[f.name] = torch.cat([a[:, :pw0], b[:, pw1:]], dim=1)
        changes["group_id"] = torch.tensor([g for g in gs for _ in range(G)])
        changes["stage"] = torch.full((second.batch_size,), 2, dtype=torch.long)
        return second.replace(prompt_width=pw0, **changes)

    def generator(self, key: int, rows: list[int]):
        """The noise source of one generation call: the step's generator (``rollout.rng=batch``)
        or row-invariant noise keyed by the same seed and the rows' ids in the step's batch."""
        if self.r.rng == "row":
            return RowNoise(key, rows)
        return torch.Generator().manual_seed(key)

    def collect(self, engine, tok, prompts: list[list[int]], params: SamplingParams, generator,
                 **kw: Any) -> tuple[Rollout, dict[str, float]]:
        """:func:`rlsuite.suite.rollout.collect`, sharded across data-parallel ranks: each rank generates
        a contiguous shard of the rows, then the records are all-gathered and concatenated in
        rank order (the same rows, order and samples as one process, thanks to row noise)."""
        if not self.world.active:
            return collect(engine, tok, prompts, params, generator, **kw)
        if not isinstance(generator, RowNoise):
            raise RuntimeError("data-parallel rollouts need row-invariant noise (rollout.rng=row)")
        lo, hi = self.world.shard(len(prompts))
        part = None
        if hi > lo:
            local = {k: (v[lo:hi] if isinstance(v, (list, tuple)) and len(v) == len(prompts) else v)
                     for k, v in kw.items()}
            rec, m = collect(engine, tok, prompts[lo:hi], params, generator.take(range(lo, hi)), **local)
            part = (rec, m, float(rec.loss_mask.sum()))
        parts = [p for p in self.world.all_gather_object(part) if p is not None]
        rec = cat_rollouts([p[0] for p in parts], offset_groups=False)
        tokens = sum(p[2] for p in parts)
        metrics = {k: sum(p[1].get(k, 0.0) * p[2] for p in parts) / tokens if tokens else 0.0
                   for k in parts[0][1]}  # token-weighted, as one process computes them
        return rec, metrics

    def episode_envs(self, idx: list[int]) -> Optional[list]:
        """One fresh environment per train index of ``idx`` (None for a single-turn task): anchors
        run the same episodes as the rollout, tool observations included, so they are graded alike."""
        envs = [self.task.make_env(self.splits["train"][i]) for i in idx]
        return envs if any(e is not None for e in envs) else None

    def anchors(self, idx: list[int]) -> list[tuple[str, ...]]:
        """One greedy decode of the current behaviour policy per prompt (charged as rollout), through
        the task's environment on a multi-turn task."""
        r = self.r
        params = SamplingParams(max_new_tokens=r.max_new_tokens, temperature=0.0, stop_ids=self.stop_ids)
        rec, _ = collect(self.engine, self.tok, [self.prompt("train", i)[0] for i in idx], params, None,
                         envs=self.episode_envs(idx), max_turns=r.max_turns, max_obs_tokens=r.max_obs_tokens)
        gen = int(rec.loss_mask.sum())
        self.budget.charge("gen_tokens", gen)
        self.budget.charge_flops("anchor", rollout_flops(self.P, int(rec.attn_mask.sum()) - gen, gen))
        return [(t,) for t in rec.texts]

    def reference_anchors(self, idx: list[int]) -> list[tuple[str, ...]]:
        """``Algorithm.anchors_per_prompt`` samples of the frozen base per prompt (rollout
        temperature and top-p), generated the first time a prompt is drawn from the stream (seed,
        "ref_anchor", train index), so a prompt's anchors do not depend on when it is first seen;
        through the task's environment on a multi-turn task; charged to the budget (gen_tokens,
        FLOPs ``anchor``) when generated."""
        new = [i for i in dict.fromkeys(idx) if i not in self.ref_anchors]
        if new:
            r, n = self.r, self.algo.anchors_per_prompt
            params = SamplingParams(max_new_tokens=r.max_new_tokens, temperature=r.temperature, top_p=r.top_p,
                                    top_k=r.top_k, stop_ids=self.stop_ids)
            with self.engine_weights(self.ref_state):
                for i in new:
                    gen = torch.Generator().manual_seed(seed_for(self.seed, "ref_anchor", i))
                    rec, _ = collect(self.engine, self.tok, [self.prompt("train", i)[0]] * n, params, gen,
                                     envs=self.episode_envs([i] * n), max_turns=r.max_turns,
                                     max_obs_tokens=r.max_obs_tokens)
                    g = int(rec.loss_mask.sum())
                    self.budget.charge("gen_tokens", g)
                    self.budget.charge_flops("anchor", rollout_flops(self.P, int(rec.attn_mask.sum()) - g, g))
                    self.ref_anchors[i] = tuple(rec.texts)
        return [self.ref_anchors[i] for i in idx]

    @contextlib.contextmanager
    def engine_weights(self, state: Optional[dict]):
        """The engine holds ``state`` inside the block and its own weights again after it, bit for bit
        (None: its own weights throughout)."""
        if state is None:
            yield
            return
        saved = {k: v.clone() for k, v in self.engine.state().items()}
        self.engine.load_weights(state, self.engine.version)
        try:
            yield
        finally:
            self.engine.load_weights(saved, self.engine.version)

    def charge(self, rec: Rollout, n_prompts: int) -> None:
        b = self.budget
        b.charge("prompts", n_prompts)
        b.charge("samples", rec.batch_size)
        b.charge("gen_tokens", float(rec.loss_mask.sum()))
        gen = int(rec.loss_mask.sum())
        b.charge_flops("rollout", rollout_flops(self.P, int(rec.attn_mask.sum()) - gen, gen))
