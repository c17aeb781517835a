"""Step 7's evaluations (:meth:`rlsuite.suite.trainer.Trainer.step`'s loop, on schedule): the
policy of now on a split, with the protocols of :func:`rlsuite.suite.evaluate.evaluate`.

The engine: the run's own where it holds the policy of now, else one built on the current
policy (sharded: gathered by every rank first, :meth:`rlsuite.suite.parallel.ParallelMode.eval_engine`).
Rank 0 alone evaluates. The evals of the starting weights are memoised
(``eval.cache_base``: :func:`rlsuite.suite.evaluate.memo_base_eval`, keyed by everything they
depend on). A grade error counts as not correct (``grade_errors`` in the row, a warning); an
eval whose every grade errored raises ``GraderError``. Each eval appends one ``evals.jsonl`` row,
its ``samples.jsonl`` rows and (final evals, and the base's test eval at step 0) its
``problems.jsonl`` rows, and hands the row to ``on_row`` (trackers, progress).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from typing import Any, Callable, Optional

import torch

from rlsuite.suite.engines import make_engine
from rlsuite.suite.evaluate import (class_file_hash, eval_prompts, evaluate, memo_base_eval, source_hash,
                                    weights_hash)
from rlsuite.suite.lifecycle import CountingGrader
from rlsuite.suite.train_state import TrainState


class EvalStage:
    """The run's evals over its :class:`~rlsuite.suite.train_state.TrainState`."""

    def __init__(self, spec, *, task, splits: dict, tokenizer, stop_ids: tuple[int, ...], engine_kind: str,
                 prompt: Callable[[str, int], tuple[list[int], str]], state: TrainState, parallel, world, folder,
                 on_row: Callable[[dict], None]) -> None:
        """``prompt(split, i)``: example i's prompt ids and text (the rollout stage's cache);
        ``engine_kind``: the resolved ``rollout.engine``; ``parallel``: the run's parallel mode."""
        self.spec, self.task, self.splits, self.tok, self.stop_ids = spec, task, splits, tokenizer, stop_ids
        self.engine_kind, self.prompt, self.state, self.parallel = engine_kind, prompt, state, parallel
        self.world, self.folder, self.on_row = world, folder, on_row
        self.start_weights: Optional[str] = None  # sha256 of the starting weights (the base-eval memo's key)

    def base_key(self, split: str, examples, ids, engine) -> dict[str, Any]:
        """What an eval of the starting weights depends on (:func:`rlsuite.suite.evaluate.memo_base_eval`)."""
        from rlsuite.suite.runfolder import cpu_model
        from rlsuite.suite.warmstart import cpu_isa

        s, d = self.spec, self.spec.to_dict()
        blob = json.dumps([[p[0], p[1]] for p in ids], default=str) + json.dumps(
            [str(self.task.gold(e)) for e in examples])
        if self.start_weights is None:  # the same weights for val and test: hashed once
            self.start_weights = weights_hash(self.state.model)
        return {"split": split, "weights": self.start_weights,
                "prompts_and_answers": hashlib.sha256(blob.encode()).hexdigest(),
                "task": d.get("task"), "identity": d.get("identity"),
                "eval": {k: v for k, v in dataclasses.asdict(s.eval).items() if k != "cache_base"},
                "rollout": d.get("rollout"), "stop_ids": list(self.stop_ids),
                "seed": s.seed if s.rollout.mismatch != "none" else None,  # the engine's perturbed weights
                "engine": [self.engine_kind, type(engine).__name__], "model": s.model.name,
                "source": source_hash(), "task_source": class_file_hash(type(self.task)),
                "torch": torch.__version__, "threads": torch.get_num_threads(),
                "cpu": [cpu_model(), cpu_isa()]}

    def run(self, split: str, final: bool = False) -> dict[str, Any]:
        """Evaluate the policy of now on ``split``; returns the ``evals.jsonl`` row ({} on ranks > 0)."""
        s, st = self.spec, self.state
        current = self.parallel.eval_engine(st, s.rollout, self.tok)  # a collective where it gathers
        if not self.world.main:
            return {}  # rank 0 evaluates alone; the other ranks wait at their next collective
        examples = self.splits[split][: eval_prompts(s.eval, split) or None]
        ids = [self.prompt(split, i) for i in range(len(examples))]
        updates = st.budget.counters["updates"]
        engine = st.engine
        if engine.version != updates:
            engine = current or make_engine(s.rollout.engine, st.model, self.tok, s.rollout)  # the current policy

        # per-problem results (problems.jsonl): the final evals, and the base's test eval (step 0), so a
        # run holds its before and after problem by problem
        keep = final or (split == "test" and updates == 0)

        def compute() -> dict[str, Any]:
            counted = CountingGrader(self.task)  # grade errors of the eval, counted (never a silent "wrong")
            problems: list[dict] = []
            res, samples = evaluate(engine, self.tok, counted, examples, [p[0] for p in ids], [p[1] for p in ids],
                                    s.eval, s.rollout.max_new_tokens, self.stop_ids, s.rollout.max_turns,
                                    s.rollout.max_obs_tokens, per_problem=problems if keep else None)
            return {"res": res, "samples": samples, "problems": problems, "graded": counted.graded,
                    "errors": counted.errors, "first": counted.first}

        if s.eval.cache_base and not final and updates == 0 and self.parallel.base_eval_memo:
            out, _ = memo_base_eval(self.base_key(split, examples, ids, engine), compute)
        else:
            out = compute()
        res, samples, problems = out["res"], out["samples"], out["problems"]
        if out["graded"] and out["errors"] == out["graded"]:
            from rlsuite.tasks.base import GraderError

            raise GraderError(f"task '{self.task.name}': the grader could not grade any of the {out['graded']} "
                              f"{split} completions at step {st.step_no} (first error: {out['first']})")
        if out["errors"]:
            print(f"warning: {split} eval at step {st.step_no}: the grader could not grade {out['errors']} of "
                  f"{out['graded']} completions (first: {out['first']}); they count as not correct",
                  file=sys.stderr, flush=True)
        row = {"step": st.step_no, **st.budget.row(), "split": split,
               **{f"eval/{self.task.name}/{k}": v for k, v in res.items()},
               "n_samples": s.eval.n_samples, "n_prompts": len(examples), "temperature": s.eval.temperature,
               "top_p": s.eval.top_p, "eval_seed": s.eval.seed, "final": final, "grade_errors": out["errors"]}
        self.folder.append("evals.jsonl", [row])
        self.folder.append("samples.jsonl", [{"step": st.step_no, "split": split, "final": final, **x}
                                             for x in samples])
        if problems:
            self.folder.append("problems.jsonl", [{"step": st.step_no, "split": split, "final": final, **x}
                                                  for x in problems])
        self.on_row(row)
        return row


__all__ = ["EvalStage"]
