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

Data parallelism (``train.world_size`` > 1, :mod:`suite.distributed`): every rank holds the
same state and the same full batch; generation (2) and the update (6) are sharded by rows
(records all-gathered, gradients all-reduced with the global normaliser's weights); scoring
passes (4) run on the full batch; rank 0 alone writes the run folder and evaluates.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import math
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any, Optional

import torch

from algorithms.base import STAGES, Algorithm, Behaviour, Context, Group, Revision
from suite.aggregation import aggregation_weights
from suite.budget import Budget, rollout_flops, scoring_flops, training_flops
from suite.config import RunSpec
from suite.distributed import world as current_world
from suite.errors import BadInput, Diverged, Interrupted
from suite.evaluate import evaluate
from suite.fast_forward import shared_positions, unsupported
from suite.models import Critic, non_embedding_params
from suite.native_decode import cxx_compiler
from suite.ops import kl_estimate, masked_mean
from suite.policy import capabilities, policy_forward
from suite.rollout import collect
from suite.runfolder import ReadOnlyFolder, RunFolder, atomic_write_text, dumps, env_info, now_iso, read_jsonl
from suite.sampler import KV_ARCHITECTURES, HFGenerateEngine, KVSampler, RowNoise, SamplingParams, make_engine
from suite.types import Batch, Rollout, cat_rollouts, real_width

TIMING_KEYS = ("time", "budget/wall_s")  # plus every perf/* key: excluded from determinism checks


def seed_for(*parts: Any) -> int:
    """A 63-bit seed from (seed, stream, step, index, ...): every draw has its own generator."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "big") >> 1


def encode_prompt(task, example, tokenizer, chat_template: str) -> tuple[list[int], str]:
    """Token ids and display text of the task's prompt (chat template when configured)."""
    return encode_text(task.prompt(example), tokenizer, chat_template)


def encode_text(p, tokenizer, chat_template: str) -> tuple[list[int], str]:
    """Token ids and display text of a prompt (text or chat messages)."""
    has_tpl = bool(getattr(tokenizer, "chat_template", None))
    use_chat = chat_template == "on" or (chat_template == "auto" and has_tpl)
    if use_chat:
        if not has_tpl:
            raise BadInput("model.chat_template=on but the tokenizer has no chat template")
        msgs = p if isinstance(p, list) else [{"role": "user", "content": p}]
        text = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        return tokenizer.encode(text, add_special_tokens=False), text
    if isinstance(p, list):
        p = "\n".join(m["content"] for m in p)
    return tokenizer.encode(p), p


class Trainer:
    """Owns the policy, critic, reference, rollout engine, optimizer, budget and run folder."""

    def __init__(self, spec: RunSpec, run_dir: Path, task, algo: Algorithm, model, tokenizer) -> None:
        self.spec, self.task, self.algo, self.tok = spec, task, algo, tokenizer
        r, t = spec.rollout, spec.train
        self.device = torch.device("cuda" if t.device == "cuda" or (t.device == "auto" and torch.cuda.is_available())
                                   else "cpu")
        self.model = model.to(self.device)
        self.world = current_world()  # data parallelism: suite/distributed.py (rank 0 of 1 without it)
        if self.world.size != t.world_size:
            raise BadInput(f"train.world_size={t.world_size} but this process group has {self.world.size} process(es); "
                           f"start runs with `rlsuite run` (it spawns the processes) or a job with that many tasks")
        self.world.broadcast_module(self.model)  # every rank starts from rank 0's weights
        self.needs = algo.needs
        self._check_capabilities()
        self.splits = task.splits()
        for s in ("train", "val", "test"):
            if not self.splits.get(s):
                raise BadInput(f"task '{task.name}' has an empty {s} split")
        self.stop_ids = (tokenizer.eos_token_id,)
        self.engine = make_engine(r.engine, self.model, tokenizer, r)
        self._history: dict[int, dict] = {0: {k: v.detach().clone() for k, v in self.model.state_dict().items()}} \
            if r.sync == "lag" else {}
        if r.mismatch != "none":
            self.engine.load_weights(self._behaviour_state(self.model.state_dict(), 0), 0)
        self.ref = copy.deepcopy(self.model).eval().requires_grad_(False) if "ref_logp" in self.needs else None
        # the initial policy, frozen (KL-to-initial metrics); rebuilt identically on resume
        self.init = copy.deepcopy(self.model).eval().requires_grad_(False) if "init_logp" in self.needs else None
        self.critic = None
        if "values" in self.needs:
            with torch.random.fork_rng(devices=[]):  # the critic's initial weights depend on the seed only
                torch.manual_seed(seed_for(spec.seed, "critic") % 2**63)
                self.critic = Critic(self.model, algo.critic or spec.model.critic).to(self.device)
        groups = [{"params": [p for p in self.model.parameters() if p.requires_grad], "lr": spec.optim.lr}]
        if self.critic is not None:
            groups.append({"params": list(self.critic.parameters()), "lr": spec.optim.critic_lr})
        o = spec.optim
        self.opt = torch.optim.AdamW(groups, lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps, weight_decay=o.weight_decay,
                                     **({"fused": True} if o.fused else {}))
        self.base_lrs = [g["lr"] for g in self.opt.param_groups]
        self.P = non_embedding_params(self.model)
        self.P_critic = self.critic.n_params() if self.critic is not None else 0
        self.budget = Budget(spec.budget.limits())
        self.folder = RunFolder(run_dir) if self.world.main else ReadOnlyFolder(run_dir)  # rank 0 alone writes
        self.step_no, self.cursor, self.evals_done = 0, 0, 0
        self.entropy: Optional[float] = None
        self._prompt_cache: dict[tuple[str, int], tuple[list[int], str]] = {}
        self._signal: Optional[Interrupted] = None
        self._grade_errors, self._grade_error_first = 0, None  # this step's grader failures

    # ---------------------------------------------------------------------------------
    def _check_capabilities(self) -> None:
        fwd_caps = capabilities(self.model)
        arch = getattr(self.model.config, "model_type", None)
        if self.spec.rollout.engine in ("kv", "native", "s3r") and arch not in KV_ARCHITECTURES:
            raise BadInput(f"rollout.engine={self.spec.rollout.engine} supports {', '.join(KV_ARCHITECTURES)} models, "
                           f"not '{arch}'; use rollout.engine=hf or auto")
        kv = self.spec.rollout.engine in ("kv", "native", "s3r") or (self.spec.rollout.engine == "auto" and arch in KV_ARCHITECTURES)
        eng_caps = (KVSampler if kv else HFGenerateEngine).capabilities
        if self.spec.rollout.engine == "vllm":
            from suite.vllm_engine import VLLMEngine, require_vllm

            require_vllm()  # BadInput (exit 2) when vllm or a CUDA device is missing
            eng_caps = VLLMEngine.capabilities
        missing = []
        for need, have, who in (("entropy", fwd_caps, "policy forward"), ("hidden", fwd_caps, "policy forward"),
                                ("attn_stat", fwd_caps, "policy forward (needs model.attn_implementation=eager)"),
                                ("topk", eng_caps, "rollout engine"), ("behav_attn_stat", eng_caps, "rollout engine")):
            if need in self.needs and need not in have:
                missing.append(f"'{need}' (from the {who})")
        if missing:
            raise BadInput(f"algorithm '{self.algo.cfg.name}' needs {', '.join(missing)}, which the backend of "
                           f"model '{self.spec.model.name}' with rollout.engine={self.spec.rollout.engine} cannot produce")
        t = self.spec.train
        levers = [f"train.{k}" for k in ("share_prefix", "compile") if getattr(t, k)]
        if levers:
            why = unsupported(self.model, self._update_fields(), 0)
            if why is not None:
                raise BadInput(f"{' and '.join(levers)} {'use' if len(levers) > 1 else 'uses'} the functional forward of suite/fast_forward.py, which does not "
                               f"serve {why}" + (f" (needed by algorithm '{self.algo.cfg.name}')" if why.startswith("fields") else "")
                               + f"; turn {' and '.join(levers)} off for this run")
        if t.compile and self.device.type == "cpu" and cxx_compiler() is None:
            raise BadInput("train.compile on a CPU needs a C++ compiler for torch.compile's kernels (g++, clang++ "
                           "or $CXX); install one or set train.compile=false")
        if self.spec.rollout.rng == "row" and not (kv and self.spec.rollout.engine != "s3r"):
            raise BadInput(f"rollout.rng=row (and train.world_size > 1) needs the kv sampler, which supports "
                           f"{', '.join(KV_ARCHITECTURES)} models, not '{arch}'; valid rollout.rng for it: batch")

    def _update_fields(self) -> frozenset[str]:
        """The fields the training forward computes for this algorithm (besides logp)."""
        want = frozenset({"entropy"}) | (self.needs & {"hidden", "attn_stat", "topk"})
        head = "values" in self.needs and (self.algo.critic or self.spec.model.critic) != "separate"
        return want | ({"values"} if head else frozenset())

    def _amp(self):
        """The training/scoring forwards' precision context (``train.autocast``)."""
        if self.spec.train.autocast == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _fwd_opts(self, prompt_width: int) -> dict[str, Any]:
        """policy_forward's lever arguments (``train.share_prefix``, ``train.compile``)."""
        t = self.spec.train
        return {"prompt_width": prompt_width if t.share_prefix else 0, "compiled": t.compile}

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

    # -- the behaviour policy: staleness and the mismatch knob -------------------------
    def _behaviour_state(self, state: dict, version: int) -> dict:
        """The weights the engine samples with: the policy's, through the mismatch knob."""
        r = self.spec.rollout
        if r.mismatch == "none":
            return state
        out = {}
        gen = torch.Generator().manual_seed(seed_for(self.spec.seed, "mismatch", version))
        for k, v in state.items():
            if not v.is_floating_point():
                out[k] = v
            elif r.mismatch == "bf16":
                out[k] = v.to(torch.bfloat16).to(v.dtype)
            else:
                noise = torch.randn(v.shape, generator=gen).to(v.device, v.dtype)
                out[k] = v + r.mismatch_scale * v.float().std().nan_to_num(0.0).to(v.dtype) * noise
        return out

    def _sync_engine(self) -> None:
        """After a step: periodic re-sync once the lag exceeds k, or hold exactly k updates back."""
        r, u = self.spec.rollout, int(self.budget.counters["updates"])
        if r.sync == "lag":
            self._history[u] = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            target = max(v for v in self._history if v <= max(0, u - r.staleness))
            for old in [v for v in self._history if v < target]:
                del self._history[old]
            if target != self.engine.version or r.staleness == 0:
                self.engine.load_weights(self._behaviour_state(self._history[target], target), target)
        elif u - self.engine.version > r.staleness:
            self.engine.load_weights(self._behaviour_state(self.model.state_dict(), u), u)

    def _charge_extra(self, kind: str, tokens: int, params: int) -> None:
        self.budget.charge_flops(kind, scoring_flops(params, tokens))

    def _prompt(self, split: str, i: int) -> tuple[list[int], str]:
        key = (split, i)
        if key not in self._prompt_cache:
            self._prompt_cache[key] = encode_prompt(self.task, self.splits[split][i], self.tok,
                                                    self.spec.model.chat_template)
        return self._prompt_cache[key]

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
        r = self.spec.rollout
        G = r.group_size
        rows = [i for i in idx for _ in range(G)]
        prompts = [self._prompt("train", i)[0] for i in rows]
        envs = [self.task.make_env(self.splits["train"][i]) for i in rows]
        envs = envs if any(e is not None for e in envs) else None
        params = SamplingParams(max_new_tokens=r.max_new_tokens, temperature=r.temperature, top_p=r.top_p,
                                top_k=r.top_k, stop_ids=self.stop_ids, topk=r.topk if "topk" in self.needs else 0)
        behaviours = self.algo.before_rollout(ctx) or [Behaviour(0, tuple(range(len(rows))))]
        parts, order, metrics = [], [], {}
        for beh in behaviours:
            saved = None
            if beh.state is not None:
                saved = {k: v.clone() for k, v in self.engine.state().items()}
                self.engine.load_weights(beh.state, self.engine.version)
            sub = list(beh.rows)
            gen = self._rollout_generator(seed_for(self.spec.seed, "rollout", self.step_no, attempt, beh.id), sub)
            if hasattr(self.engine, "reset_stats"):
                self.engine.reset_stats()
            rec, metrics = self._collect(self.engine, self.tok, [prompts[j] for j in sub], params, gen,
                                         envs=[envs[j] for j in sub] if envs else None, max_turns=r.max_turns,
                                         max_obs_tokens=r.max_obs_tokens, want_attn="behav_attn_stat" in self.needs,
                                         group_ids=[j // G for j in sub], example_idx=[rows[j] for j in sub],
                                         behaviour_ids=[beh.id] * len(sub))
            stats = getattr(self.engine, "total_stats", None)
            if stats:
                metrics.update({f"rollout/s3r_{k}": float(v) for k, v in stats.items()
                                if k in ("acceptance_rate", "mean_accepted_length", "tokens_per_verify")})
            if saved is not None:
                self.engine.load_weights(saved, self.engine.version)
            parts.append(rec)
            order += sub
        rec = cat_rollouts(parts, offset_groups=False)
        if len(parts) > 1:
            rec = rec.select(torch.tensor(order).argsort())
        # 3. grade, then the algorithm's group-level reward construction
        anchors = self._anchors(idx) if "anchor" in self.needs else [()] * len(idx)
        rec, grades, groups = self._grade(rec, idx, [self._prompt("train", i)[1] for i in idx], ctx, anchors)
        self._charge_rollout(rec, len(idx))
        rev = self.algo.revise(groups, ctx)
        if rev is not None:
            rec, rev_metrics = self._second_round(rec, idx, grades, rev, ctx, params, attempt)
            metrics = {**metrics, **rev_metrics}
        return rec, metrics

    def _grade(self, rec: Rollout, idx: list[int], prompts: list[str], ctx: Context,
               anchors: list[tuple[str, ...]]) -> tuple[Rollout, list, list[Group]]:
        """Grade G completions per prompt group (group g answers train example ``idx[g]``, shown
        as ``prompts[g]``), then the algorithm's group-level rewards."""
        G = self.spec.rollout.group_size
        examples = [self.splits["train"][i] for i in idx for _ in range(G)]
        grades = self.task.grade_batch(examples, list(rec.texts))
        self._note_grade_errors([g.error for g in grades if g.error is not None], len(grades))
        scores = torch.tensor([g.reward for g in grades], dtype=torch.float)
        rewards = torch.empty_like(scores)
        groups = []
        for g, i in enumerate(idx):
            sl = slice(g * G, (g + 1) * G)
            example = self.splits["train"][i]
            group = Group(prompt=prompts[g], example=example,
                          completions=rec.texts[sl], parsed=tuple(x.parsed for x in grades[sl]), scores=scores[sl],
                          lengths=rec.loss_mask[sl].sum(-1), truncated=rec.truncated[sl],
                          grade=lambda text, ex=example: self._grade_one(ex, text), anchors=anchors[g])
            rewards[sl] = torch.as_tensor(self.algo.rewards(group, ctx), dtype=torch.float)
            groups.append(group)
        rec = rec.replace(scores=scores, rewards=rewards, parsed=tuple(g.parsed for g in grades),
                          error_class=tuple(g.error_key for g in grades),
                          grade_error=torch.tensor([g.error is not None for g in grades], dtype=torch.bool))
        return rec, grades, groups

    def _grade_one(self, example, text: str) -> float:
        """``Group.grade``: one extra grade (judges, anchors); a grade error is counted."""
        g = self.task.grade(example, text)
        self._note_grade_errors([g.error] if g.error is not None else [], None)
        return float(g.reward)

    def _note_grade_errors(self, errors: list[str], n: Optional[int]) -> None:
        """Count this step's grade errors; ``n`` grades of which all errored: the grader is
        broken, and the run stops as ``failed`` (never trains on all-zero rewards)."""
        if not errors:
            return
        self._grade_errors += len(errors)
        if self._grade_error_first is None:
            self._grade_error_first = errors[0]
        if n is not None and len(errors) == n:
            from tasks.base import GraderError

            raise GraderError(f"task '{self.task.name}': the grader could not grade any of the {n} completions "
                              f"at step {self.step_no} (first error: {errors[0]})")

    # -- 3b. a feedback-conditioned second round (``revise``) ---------------------------
    def _second_round(self, rec: Rollout, idx: list[int], grades: list, rev: Revision, ctx: Context,
                      params: SamplingParams, attempt: int) -> tuple[Rollout, dict[str, float]]:
        """Sample G completions from ``task.revision_prompt(prompt, answer, feedback)`` for each
        group with a source; return the rows ``rev.stages`` asks for (``Rollout.stage``)."""
        r = self.spec.rollout
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
            ids, text = encode_text(self.task.revision_prompt(ex, rec.texts[j], fb), self.tok, self.spec.model.chat_template)
            aug_ids.append(ids)
            aug_texts.append(text)
        rows = [k for k in range(len(chosen)) for _ in range(G)]
        src_idx = [idx[g] for g, _ in chosen]
        envs = [self.task.make_env(self.splits["train"][src_idx[k]]) for k in rows]
        envs = envs if any(e is not None for e in envs) else None
        gen = self._rollout_generator(seed_for(self.spec.seed, "revision", self.step_no, attempt), list(range(len(rows))))
        second, _ = self._collect(self.engine, self.tok, [aug_ids[k] for k in rows], params, gen, envs=envs,
                                  max_turns=r.max_turns, max_obs_tokens=r.max_obs_tokens,
                                  want_attn="behav_attn_stat" in self.needs, group_ids=[P + k for k in rows],
                                  example_idx=[src_idx[k] for k in rows], behaviour_ids=[0] * len(rows))
        second, _, _ = self._grade(second, src_idx, aug_texts, ctx, [()] * len(chosen))
        self._charge_rollout(second, len(chosen))
        second = second.replace(stage=torch.ones(second.batch_size, dtype=torch.long))
        recontext = self._recontext(rec, second, [g for g, _ in chosen])
        parts = [p for name, p in zip(STAGES, (first, second, recontext)) if name in rev.stages]
        src_scores = torch.tensor([float(rec.scores[g * G + s]) for g, s in chosen])
        new_means = second.scores.view(len(chosen), G).mean(-1)
        metrics = {"revise/groups": float(len(chosen)), "revise/source_score": float(src_scores.mean()),
                   "revise/first_score": float(rec.scores.mean()),
                   "revise/score_mean": float(second.scores.mean()),
                   "revise/improved_frac": float((new_means > src_scores).float().mean()),
                   "revise/prompt_len_mean": sum(map(len, aug_ids)) / len(aug_ids)}
        return cat_rollouts(parts, offset_groups=False), metrics

    def _recontext(self, rec: Rollout, second: Rollout, gs: list[int]) -> Rollout:
        """The second round's responses after their original prompt (``rec``'s group ``gs[k]``):
        every time-indexed field is the original prompt block + the response block; the
        behaviour log-probs stay those of the feedback-conditioned sampler (stage 2)."""
        G = self.spec.rollout.group_size
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

    def _rollout_generator(self, key: int, rows: list[int]):
        """The noise source of one generation call: the step's generator (``rollout.rng=batch``)
        or row-invariant noise keyed by the same seed and the rows' ids in the step's batch."""
        if self.spec.rollout.rng == "row":
            return RowNoise(key, rows)
        return torch.Generator().manual_seed(key)

    def _collect(self, engine, tok, prompts: list[list[int]], params: SamplingParams, generator,
                 **kw: Any) -> tuple[Rollout, dict[str, float]]:
        """:func:`suite.rollout.collect`, sharded across data-parallel ranks: each rank generates
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

    def _anchors(self, idx: list[int]) -> list[tuple[str, ...]]:
        """One greedy decode of the current behaviour policy per prompt (charged as rollout)."""
        r = self.spec.rollout
        params = SamplingParams(max_new_tokens=r.max_new_tokens, temperature=0.0, stop_ids=self.stop_ids)
        rec, _ = collect(self.engine, self.tok, [self._prompt("train", i)[0] for i in idx], params, None)
        gen = int(rec.loss_mask.sum())
        self.budget.charge("gen_tokens", gen)
        self.budget.charge_flops("anchor", rollout_flops(self.P, int(rec.attn_mask.sum()) - gen, gen))
        return [(t,) for t in rec.texts]

    def _charge_rollout(self, rec: Rollout, n_prompts: int) -> None:
        b = self.budget
        b.charge("prompts", n_prompts)
        b.charge("samples", rec.batch_size)
        b.charge("gen_tokens", float(rec.loss_mask.sum()))
        gen = int(rec.loss_mask.sum())
        b.charge_flops("rollout", rollout_flops(self.P, int(rec.attn_mask.sum()) - gen, gen))

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
        if r.old_logp == "behaviour" and on_policy and not head_values:
            fields["old_logp"] = rec.behav_logp.to(dev)
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
            if self.algo.cfg.kl_where == "reward":
                kl_tok = s_kl(self.algo.cfg, fields["old_logp"], fields["ref_logp"]) * mask
        if self.init is not None:
            with self._amp():
                fields["init_logp"] = policy_forward(self.init, tokens, attn, r.temperature, **opts).logp.float() * mask
            self.budget.charge_flops("score_init", scoring_flops(self.P, computed(frozenset())))
        last = (mask * torch.arange(mask.shape[1], device=dev)).argmax(-1)  # last policy token
        token_rewards = -self.algo.cfg.kl_coef * kl_tok
        token_rewards[torch.arange(mask.shape[0], device=dev), last] += rewards
        fields["rewards"] = rewards - self.algo.cfg.kl_coef * kl_tok.sum(-1)
        fields["token_rewards"] = token_rewards * mask
        moved = {f.name: (getattr(rec, f.name).to(dev) if isinstance(getattr(rec, f.name), torch.Tensor) else getattr(rec, f.name))
                 for f in dataclasses.fields(Rollout)}
        moved.update(fields)
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
        G = self.spec.rollout.group_size
        m = b.loss_mask
        L = m.sum(-1)
        sc = b.scores.view(-1, G) if b.batch_size % G == 0 else b.scores[None]
        same = (sc == sc[:, :1]).all(-1)
        term = ~b.truncated.to(L.device)
        out = {
            "reward/mean": float(b.scores.mean()), "reward/std": float(b.scores.std()) if b.batch_size > 1 else 0.0,
            "reward/min": float(b.scores.min()), "reward/max": float(b.scores.max()),
            "reward/shaped_mean": float(b.rewards.mean()),
            "adv/mean": float(masked_mean(b.adv, m)), "adv/std": float(b.adv[m > 0].std()) if m.sum() > 1 else 0.0,
            "adv/min": float(b.adv[m > 0].min()) if m.any() else 0.0, "adv/max": float(b.adv[m > 0].max()) if m.any() else 0.0,
            "adv/zero_frac": float(((b.adv.abs() * m).sum(-1) == 0).float().mean()),
            "group/zero_std_frac": float(same.float().mean()),
            "group/all_correct_frac": float((same & (sc[:, 0] >= 1)).float().mean()),
            "group/all_wrong_frac": float((same & (sc[:, 0] <= 0)).float().mean()),
            "group/mixed_frac": float((~same).float().mean()),
            "len/response_mean": float(L.mean()), "len/response_min": float(L.min()), "len/response_max": float(L.max()),
            "len/terminated_mean": float(L[term].mean()) if term.any() else float("nan"),
            "len/truncated_frac": float(b.truncated.float().mean()),
            "len/prompt_mean": float((b.attn_mask.sum(-1) - L).float().mean()),
            "offpolicy/staleness_mean": float((self.budget.counters["updates"] - b.policy_version).float().mean()),
            "offpolicy/staleness_max": float((self.budget.counters["updates"] - b.policy_version).max()),
        }
        if b.old_logp is not None:
            # re-contextualised rows (stage 2) differ from μ by design: their prompt changed
            mm = m if b.stage is None else m * (b.stage != 2)[:, None]
            d = (b.old_logp - b.behav_logp) * mm
            out["mismatch/kl"] = float(masked_mean(b.behav_logp - b.old_logp, mm))
            out["mismatch/logp_abs_diff_mean"] = float(masked_mean(d.abs(), mm))
            out["mismatch/logp_abs_diff_max"] = float(d.abs().max())
            ratio = torch.exp(d)[mm > 0]
            if ratio.numel():
                out.update({"mismatch/ratio_mean": float(ratio.mean()), "mismatch/ratio_min": float(ratio.min()),
                            "mismatch/ratio_max": float(ratio.max())})
        if b.values is not None:
            out["value/mean"] = float(masked_mean(b.values, m))
        if b.ref_logp is not None and b.old_logp is not None:
            out["stats/kl_ref"] = float(masked_mean(s_kl(self.algo.cfg, b.old_logp, b.ref_logp), m))
            out["stats/kl_coef"] = self.algo.cfg.kl_coef
        return out

    # -- 6. the update -----------------------------------------------------------------
    def _lr_factor(self) -> float:
        o, u = self.spec.optim, self.budget.counters["updates"]
        if o.warmup_updates and u < o.warmup_updates:
            return (u + 1) / o.warmup_updates
        p = self.budget.progress
        return {"constant": 1.0, "linear": 1.0 - p, "cosine": 0.5 * (1 + math.cos(math.pi * p))}[o.schedule]

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
        for epoch in range(t.epochs):
            perm = torch.randperm(B, generator=torch.Generator().manual_seed(seed_for(s.seed, "minibatch", self.step_no, epoch)))
            for mb_idx in torch.tensor_split(perm, t.minibatches):
                mb = batch.select(mb_idx.to(batch.tokens.device))
                w_all = aggregation_weights(mb.loss_mask, self.algo.aggregation, s.rollout.max_new_tokens)
                self.opt.zero_grad(set_to_none=True)
                plan = self._micro_batches(mb)  # every rank's micro-batches (rows of mb)
                computed += self._computed_positions(mb, plan, opts["prompt_width"], want)
                nonfinite = None
                for rows in plan[self.world.rank]:
                    mic, w = mb.select(rows), w_all[rows]
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
                    loss_tok, m = self.algo.loss(fwd, mic, ctx)
                    m = dict(m)
                    policy = (w * loss_tok).sum()
                    m["loss/policy"] = policy.detach()
                    total = policy
                    if self.ref is not None and cfg.kl_where == "loss":
                        kl = (w * s_kl(cfg, fwd.logp, mic.ref_logp) * mic.loss_mask).sum()
                        total = total + cfg.kl_coef * kl
                        m["loss/kl"] = (cfg.kl_coef * kl).detach()
                    if self.critic is not None:
                        v_tok, vm = self.algo.value_loss(fwd, mic, ctx)
                        vl = (w * v_tok).sum()
                        total = total + vl
                        m.update(vm)
                        m["loss/value"] = vl.detach()
                    m["loss/total"] = total.detach()
                    m["stats/entropy"] = masked_mean(fwd.entropy.detach(), mic.loss_mask)
                    if not torch.isfinite(total):  # data-parallel: all ranks learn of it at the all-reduce
                        nonfinite = f"non-finite loss at step {self.step_no} (loss/total={float(total.detach())})"
                        if not self.world.active:
                            raise Diverged(nonfinite)
                    else:
                        total.backward()
                    share = float(w.sum())  # this micro-batch's share of the normaliser
                    for k, v in m.items():
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
        out["stats/lr"] = self.opt.param_groups[0]["lr"]
        self.entropy = out.get("stats/entropy")
        return out

    def _micro_batches(self, mb: Batch) -> list[list[torch.Tensor]]:
        """Per rank, the row indices of its micro-batches of minibatch ``mb``: the rank's
        contiguous shard in ``train.micro_batch_size`` chunks, its rows ordered longest first
        under ``train.bucket_by_length`` (stable, so equal lengths keep their order)."""
        n, size, t = mb.batch_size, self.world.size, self.spec.train
        dev = mb.tokens.device
        plan = []
        for r in range(size):
            lo_r, hi_r = n * r // size, n * (r + 1) // size
            rows = torch.arange(lo_r, hi_r, device=dev)
            if t.bucket_by_length:  # by the last real column: what trimming a micro-batch keeps
                am = mb.attn_mask[lo_r:hi_r]
                last = (am * torch.arange(1, am.shape[1] + 1, device=dev)).amax(-1)
                rows = rows[torch.argsort(last, descending=True, stable=True)]
            micro = t.micro_batch_size or max(1, hi_r - lo_r)
            plan.append(list(torch.split(rows, micro)) if len(rows) else [])  # an empty shard: no micro-batch
        return plan

    def _computed_positions(self, mb: Batch, plan: list[list[torch.Tensor]], prompt_width: int,
                            want: frozenset[str]) -> int:
        """Real token positions the training forwards of minibatch ``mb`` compute, over all
        ranks' micro-batches ``plan`` (the same number on every rank): all of them, less the
        prompt positions that ``train.share_prefix`` computes once per group within a micro-batch
        (as the forward of each, trimmed under ``train.bucket_by_length``, actually does)."""
        total = int(mb.attn_mask.sum())
        if not prompt_width:
            return total
        for rows in (r for rank in plan for r in rank):
            tokens, attn = mb.tokens[rows], mb.attn_mask[rows]
            if self.spec.train.bucket_by_length:
                width = real_width(attn)
                tokens, attn = tokens[:, :width], attn[:, :width]
            total -= shared_positions(self.model, want, tokens, attn, prompt_width)
        return total

    def _clip_and_step(self, nonfinite: Optional[str] = None) -> float:
        if self.world.active:  # sum the ranks' shares of the minibatch gradient (global weights)
            params = [p for g in self.opt.param_groups for p in g["params"]]
            if self.world.all_reduce_grads(params, flag=float(nonfinite is not None)):
                raise Diverged(nonfinite or f"non-finite loss on another data-parallel rank at step {self.step_no}")
        factor = self._lr_factor()
        for g, base in zip(self.opt.param_groups, self.base_lrs):
            g["lr"] = base * factor
        clip = self.spec.optim.grad_clip or float("inf")
        norms = [torch.nn.utils.clip_grad_norm_(g["params"], clip) for g in self.opt.param_groups]
        if not all(torch.isfinite(n) for n in norms):
            raise Diverged(f"non-finite gradient norm at step {self.step_no}")
        self.opt.step()
        return float(norms[0])

    # -- checkpoints -------------------------------------------------------------------
    def _state(self) -> dict[str, Any]:
        st = {"model": self.model.state_dict(), "opt": self.opt.state_dict(), "algo": self.algo.state_dict(),
              "budget": self.budget.state_dict(), "step": self.step_no, "cursor": self.cursor,
              "evals_done": self.evals_done, "entropy": self.entropy, "engine_version": self.engine.version}
        if self.critic is not None:
            st["critic"] = self.critic.state_dict()
        if self.ref is not None:
            st["ref"] = self.ref.state_dict()
        st["engine"] = self.engine.state()  # the behaviour weights (stale or perturbed) as they are
        if self._history:
            st["history"] = self._history
        return st

    def save_checkpoint(self) -> None:
        state = self._state()
        self.folder.sync("metrics.jsonl")  # the per-step rows up to this checkpoint are durable before it exists
        self.folder.replace_dir("checkpoint", lambda d: torch.save(state, d / "state.pt"))

    def load_checkpoint(self) -> bool:
        path = self.folder.file("checkpoint") / "state.pt"
        if not path.exists():
            return False
        st = torch.load(path, weights_only=False, map_location=self.device)
        self.model.load_state_dict(st["model"])
        self.opt.load_state_dict(st["opt"])
        self.algo.load_state_dict(st["algo"])
        self.budget.load_state_dict(st["budget"])
        self.step_no, self.cursor, self.evals_done, self.entropy = st["step"], st["cursor"], st["evals_done"], st["entropy"]
        if self.critic is not None:
            self.critic.load_state_dict(st["critic"])
        if self.ref is not None:
            self.ref.load_state_dict(st["ref"])
        self.engine.load_weights(st["engine"], st["engine_version"])
        self._history = st.get("history", self._history)
        return True

    # -- eval --------------------------------------------------------------------------
    def run_eval(self, split: str, final: bool = False) -> dict[str, Any]:
        if not self.world.main:
            return {}  # rank 0 evaluates alone; the other ranks wait at their next collective
        s = self.spec
        examples = self.splits[split][: s.eval.max_prompts or None]
        ids = [self._prompt(split, i) for i in range(len(examples))]
        engine = self.engine
        if engine.version != self.budget.counters["updates"]:
            engine = make_engine(s.rollout.engine, self.model, self.tok, s.rollout)  # the current policy
        counted = _CountingGrader(self.task)  # grade errors of the eval, counted (never a silent "wrong")
        res, samples = evaluate(engine, self.tok, counted, examples, [p[0] for p in ids], [p[1] for p in ids],
                                s.eval, s.rollout.max_new_tokens, self.stop_ids, s.rollout.max_turns,
                                s.rollout.max_obs_tokens)
        if counted.graded and counted.errors == counted.graded:
            from tasks.base import GraderError

            raise GraderError(f"task '{self.task.name}': the grader could not grade any of the {counted.graded} "
                              f"{split} completions at step {self.step_no} (first error: {counted.first})")
        if counted.errors:
            print(f"warning: {split} eval at step {self.step_no}: the grader could not grade {counted.errors} of "
                  f"{counted.graded} completions (first: {counted.first}); they count as not correct",
                  file=sys.stderr, flush=True)
        row = {"step": self.step_no, **self.budget.row(), "split": split,
               **{f"eval/{self.task.name}/{k}": v for k, v in res.items()},
               "n_samples": s.eval.n_samples, "n_prompts": len(examples), "temperature": s.eval.temperature,
               "top_p": s.eval.top_p, "eval_seed": s.eval.seed, "final": final, "grade_errors": counted.errors}
        self.folder.append("evals.jsonl", [row])
        self.folder.append("samples.jsonl", [{"step": self.step_no, "split": split, "final": final, **x}
                                             for x in samples])
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
        t2 = time.perf_counter()
        self._sync_engine()
        dt = self.world.all_reduce_max([time.perf_counter() - t0])[0]  # every rank charges the same time
        self.budget.charge("wall_s", dt)
        metrics.update({"perf/step_time": dt, "perf/rollout_time": t1 - t0, "perf/train_time": t2 - t1,
                        "perf/tokens_per_s": float(batch.attn_mask.sum()) / dt})
        metrics["stability/nonfinite"] = 0
        row = {"step": self.step_no, "time": time.time(), **self.budget.row(), **metrics}
        self.folder.append("metrics.jsonl", [row], durable=False)  # fsynced before each checkpoint
        return row

    def _install_signals(self) -> None:
        def handler(state: str, code: int):
            def h(signum, frame):
                self._signal = Interrupted(state, code)
            return h
        self._old_handlers = {}
        try:
            for sig, (state, code) in ((signal.SIGINT, ("preempted", 130)),
                                       (signal.SIGUSR2, ("preempted", 130)),  # submitit's preemption/timeout
                                       (signal.SIGTERM, ("cancelled", 143))):
                self._old_handlers[sig] = signal.signal(sig, handler(state, code))
        except ValueError:  # not in the main thread
            pass

    def _agreed_signal(self) -> Optional[Interrupted]:
        """The stop signal, agreed across data-parallel ranks (the strongest exit code wins), so
        every rank stops after the same step."""
        if not self.world.active:
            return self._signal
        code = int(self.world.all_reduce_max([self._signal.code if self._signal else 0])[0])
        return Interrupted({130: "preempted", 143: "cancelled"}[code], code) if code else None

    def _restore_signals(self) -> None:
        for sig, old in getattr(self, "_old_handlers", {}).items():
            signal.signal(sig, old)

    def train(self, resume: bool, attempt: int) -> tuple[str, Optional[str]]:
        """Run to the budget; returns (final state, reason). Writes status throughout."""
        f, s = self.folder, self.spec
        resumed = resume and self.load_checkpoint()
        if not self.world.main:
            pass  # data-parallel ranks > 0 write nothing
        elif resumed:
            for name in ("metrics.jsonl", "evals.jsonl", "samples.jsonl"):
                f.truncate_jsonl(name, self.step_no)
            _drop_final_rows(f)
        else:
            for name in ("metrics.jsonl", "evals.jsonl", "samples.jsonl"):
                f.file(name).write_text("")
        f.set_status(state="running", reason=None, step=self.step_no, budget=self.budget.counters,
                     started_at=now_iso(), host=socket.gethostname(), pid=os.getpid(), attempt=attempt)
        f.start_heartbeat()
        self._install_signals()
        try:
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
                sig = self._agreed_signal()
                if sig is not None:
                    raise sig
                if s.train.checkpoint_every and self.step_no % s.train.checkpoint_every == 0 and not at_end:
                    self.save_checkpoint()
            self.save_checkpoint()
            self.run_eval("val", final=True)
            self.run_eval("test", final=True)
            f.replace_dir("final", self._save_final)
            return "completed", None
        except Diverged as e:
            f.append("metrics.jsonl", [{"step": self.step_no, **self.budget.row(), "stability/nonfinite": 1}])
            return "diverged", str(e)
        except Interrupted as e:
            self.save_checkpoint()
            return e.state, f"signal at step {self.step_no}"
        finally:
            f.stop_heartbeat()
            self._restore_signals()

    def _save_final(self, d: Path) -> None:
        self.model.save_pretrained(d)
        self.tok.save_pretrained(d)


class _CountingGrader:
    """The task, with the grade errors (``Grade.error``) of its ``grade``/``grade_batch`` counted."""

    def __init__(self, task) -> None:
        self._task, self.graded, self.errors, self.first = task, 0, 0, None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._task, name)

    def _count(self, grades: list) -> list:
        errs = [g.error for g in grades if g.error is not None]
        self.graded += len(grades)
        self.errors += len(errs)
        if errs and self.first is None:
            self.first = errs[0]
        return grades

    def grade(self, example, completion: str):
        return self._count([self._task.grade(example, completion)])[0]

    def grade_batch(self, examples, completions):
        return self._count(list(self._task.grade_batch(examples, completions)))


def s_kl(cfg, logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """The configured per-token KL estimator of KL(π‖π_ref)."""
    return kl_estimate(logp, ref_logp, cfg.kl_estimator)


def _merge(acc: dict[str, list[tuple[float, float]]]) -> dict[str, float]:
    """Combine micro-batch metrics: ``*_min``/``*_max`` by min/max, ``loss/*`` summed (they are
    already weighted shares of the aggregated loss), the rest weighted by normaliser share."""
    out = {}
    for k, vals in acc.items():
        xs = [v for v, _ in vals]
        if k.endswith("_min"):
            out[k] = min(xs)
        elif k.endswith("_max"):
            out[k] = max(xs)
        elif k.startswith("loss/"):
            n_updates = max(1, len(acc.get("stats/grad_norm", [])))
            out[k] = sum(xs) / n_updates
        elif k == "stats/grad_norm":
            out[k] = sum(xs) / len(xs)
        else:
            wsum = sum(w for _, w in vals)
            out[k] = sum(v * w for v, w in vals) / wsum if wsum > 0 else sum(xs) / len(xs)
    return out


def _drop_final_rows(f: RunFolder) -> None:
    """Resuming after the last checkpoint re-runs the final evals: drop their old rows."""
    for name in ("evals.jsonl", "samples.jsonl"):
        path = f.file(name)
        rows = [r for r in read_jsonl(path) if not r.get("final")]
        atomic_write_text(path, "".join(dumps(r) + "\n" for r in rows))


def run_env(spec: RunSpec, trainer: Trainer) -> dict[str, Any]:
    return env_info(str(trainer.device), spec.model.dtype, spec.train.num_threads)
