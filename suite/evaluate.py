"""Evaluation protocols: greedy accuracy, avg@k, unbiased pass@k and maj@k.

For one prompt with n sampled completions of which c are correct:

* ``avg@k`` — mean correctness of the samples (c/n; with n = k the unbiased pass@1);
* ``pass@k`` — ``1 − C(n−c, k)/C(n, k)`` (Chen et al. 2021, arXiv 2107.03374), computed in
  the stable product form; requires n ≥ k;
* ``maj@k`` — majority vote over k samples' parsed answers (responses with no parsed answer
  do not vote; ties go to the answer seen first); with n > k, the mean over the ⌊n/k⌋
  disjoint consecutive chunks of k samples (deterministic, unbiased over chunks);
* ``greedy_acc`` — temperature 0, one completion per prompt.

Scores average over prompts. The eval seed is fixed (``eval.seed``), so every step and run
sees the same sampling noise.

A task may add its own scores of the same completions through ``task.eval_metrics(examples,
grades)`` (:meth:`rlsuite.tasks.base.Task.eval_metrics`, e.g. per-kind accuracies of ``unlearn_toy``): they
are reported as ``greedy_<name>`` (the greedy completions) and ``sampled_<name>`` (every sampled
completion, each prompt's ``n_samples`` grades).
"""

from __future__ import annotations

import hashlib
import json

from collections import Counter
from typing import Any, Optional, Sequence

import torch

from rlsuite.suite.config import EvalConfig
from rlsuite.suite.engines import SamplingParams
from rlsuite.suite.rollout import collect


def eval_prompts(cfg: EvalConfig, split: str) -> int:
    """How many of ``split``'s prompts an eval scores (its first, in the split's fixed order; 0 = all):
    ``test_prompts`` for the test split (0 by default: the whole split), ``max_prompts`` otherwise."""
    return cfg.test_prompts if split == "test" else cfg.max_prompts


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one prompt (1 when n − c < k)."""
    if k > n:
        raise ValueError(f"pass@{k} needs n ≥ k samples, got n = {n}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def maj_at_k(parsed: Sequence[Optional[str]], correct: Sequence[bool], k: int) -> float:
    """Majority-vote accuracy over disjoint chunks of k samples of one prompt."""
    chunks = len(parsed) // k
    if chunks == 0:
        raise ValueError(f"maj@{k} needs at least k samples, got {len(parsed)}")
    score = 0.0
    for c in range(chunks):
        sl = slice(c * k, (c + 1) * k)
        votes = Counter(a for a in parsed[sl] if a is not None)
        if not votes:
            continue
        best = max(votes.values())
        winner = next(a for a in parsed[sl] if a is not None and votes[a] == best)  # first seen wins ties
        score += float(next(ok for a, ok in zip(parsed[sl], correct[sl]) if a == winner))
    return score / chunks


def _generate(engine, tokenizer, task, examples, prompt_ids, n: int, params: SamplingParams,
              seed: int, batch_size: int, max_turns: int, max_obs_tokens: int):
    """All completions, n per example, in chunks; returns (texts, grades) flattened."""
    flat = [(i, j) for i in range(len(examples)) for j in range(n)]
    texts: list[str] = []
    gen = torch.Generator().manual_seed(seed)
    for start in range(0, len(flat), batch_size):
        chunk = flat[start:start + batch_size]
        envs = [task.make_env(examples[i]) for i, _ in chunk]
        record, _ = collect(engine, tokenizer, [prompt_ids[i] for i, _ in chunk], params, gen,
                            envs=envs if any(e is not None for e in envs) else None,
                            max_turns=max_turns, max_obs_tokens=max_obs_tokens)
        texts.extend(record.texts)
    grades = task.grade_batch([examples[i] for i, _ in flat], texts)
    return flat, texts, grades


def evaluate(engine, tokenizer, task, examples: Sequence[Any], prompt_ids: Sequence[list[int]],
             prompts_text: Sequence[str], cfg: EvalConfig, max_new_tokens: int, stop_ids: tuple[int, ...],
             max_turns: int = 1, max_obs_tokens: int = 256,
             per_problem: list[dict] | None = None) -> tuple[dict[str, float], list[dict]]:
    """Run the configured protocols; return (``{metric: value}`` keyed ``greedy_acc``,
    ``avg@k``, ``pass@k``, ``maj@k``, and up to ``cfg.save_samples`` sample rows).

    ``per_problem``: a list that receives one row per example, ``{"problem": key, "greedy": 0/1,
    "correct": c, "n": n}`` (``key``: :func:`problem_key` of the prompt text, the same in every run of
    the task; ``greedy`` when greedy evals run; ``correct`` of ``n`` sampled completions when
    ``n_samples`` > 0): what a report needs to resample problems as well as seeds."""
    out: dict[str, float] = {}
    samples: list[dict] = []
    rows = [{"problem": problem_key(t)} for t in prompts_text] if per_problem is not None else None
    kw = dict(seed=cfg.seed, batch_size=cfg.batch_size, max_turns=max_turns, max_obs_tokens=max_obs_tokens)
    if cfg.greedy:
        params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, stop_ids=stop_ids)
        flat, texts, grades = _generate(engine, tokenizer, task, examples, prompt_ids, 1, params, **kw)
        out["greedy_acc"] = sum(g.correct for g in grades) / max(1, len(grades))
        if rows is not None:
            for (i, _), g in zip(flat, grades):
                rows[i]["greedy"] = int(g.correct)
        out.update(_task_metrics(task, examples, flat, grades, "greedy"))
        samples += _rows(task, examples, prompts_text, flat, texts, grades, cfg.save_samples, "greedy")
    if cfg.n_samples:
        n = cfg.n_samples
        params = SamplingParams(max_new_tokens=max_new_tokens, temperature=cfg.temperature, top_p=cfg.top_p,
                                stop_ids=stop_ids)
        flat, texts, grades = _generate(engine, tokenizer, task, examples, prompt_ids, n, params, **kw)
        per = [grades[i * n:(i + 1) * n] for i in range(len(examples))]
        if rows is not None:
            for i, p in enumerate(per):
                rows[i].update(correct=sum(g.correct for g in p), n=n)
        for k in cfg.ks:
            out[f"avg@{k}"] = sum(sum(g.correct for g in p[:k]) / k for p in per) / len(per)
            out[f"pass@{k}"] = sum(pass_at_k(n, sum(g.correct for g in p), k) for p in per) / len(per)
            out[f"maj@{k}"] = sum(maj_at_k([g.parsed for g in p], [g.correct for g in p], k) for p in per) / len(per)
        out.update(_task_metrics(task, examples, flat, grades, "sampled"))
        samples += _rows(task, examples, prompts_text, flat, texts, grades,
                         max(0, cfg.save_samples - len(samples)), "sampled")
    if rows is not None:
        per_problem.extend(rows)
    return out, samples


def problem_key(prompt_text: Any) -> str:
    """A short stable key of one eval problem: the first 16 hex digits of the sha256 of its prompt
    text (chat prompts: their JSON), so runs of one task pair problem by problem."""
    text = prompt_text if isinstance(prompt_text, str) else json.dumps(prompt_text, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _task_metrics(task, examples, flat, grades, mode: str) -> dict[str, float]:
    """The task's own scores of these completions (``task.eval_metrics``), keyed ``<mode>_<name>``."""
    hook = getattr(task, "eval_metrics", None)
    if hook is None:
        return {}
    return {f"{mode}_{k}": float(v) for k, v in hook([examples[i] for i, _ in flat], grades).items()}


def _rows(task, examples, prompts_text, flat, texts, grades, cap: int, mode: str) -> list[dict]:
    return [{"prompt": prompts_text[i], "completion": texts[r], "reward": grades[r].reward,
             "parsed": grades[r].parsed, "gold": task.gold(examples[i]), "mode": mode}
            for r, (i, _) in enumerate(flat[:cap])]


_SOURCE_HASH: Optional[str] = None


def class_file_hash(cls: type) -> str:
    """sha256 of the file that defines ``cls`` (a task registered from another package)."""
    import inspect

    try:
        return hashlib.sha256(open(inspect.getsourcefile(cls) or "", "rb").read()).hexdigest()
    except (OSError, TypeError):
        return f"unreadable:{cls.__module__}.{cls.__qualname__}"


def source_hash() -> str:
    """sha256 of the suite's and the tasks' source (``.py`` and the native step's ``.cpp``): any
    code change that could change an eval changes it (computed once per process)."""
    global _SOURCE_HASH
    if _SOURCE_HASH is None:
        from pathlib import Path

        root = Path(__file__).resolve().parent.parent
        h = hashlib.sha256()
        for sub in ("suite", "tasks"):
            for f in sorted((root / sub).rglob("*")):
                if f.suffix in (".py", ".cpp") and f.is_file():
                    h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes())
        _SOURCE_HASH = h.hexdigest()
    return _SOURCE_HASH


def weights_hash(model) -> str:
    """sha256 of a model's state (names, dtypes, shapes and bytes; a LoRA policy's merged weights
    under the HF names: :func:`rlsuite.suite.lora.hf_state`)."""
    from rlsuite.suite.lora import hf_state

    h = hashlib.sha256()
    for k, v in hf_state(model).items():
        t = v.detach().cpu().contiguous()
        h.update(f"{k}|{t.dtype}|{tuple(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def memo_base_eval(parts: dict[str, Any], compute) -> tuple[dict[str, Any], bool]:
    """``compute()``'s result (a JSON-able dict with an ``errors`` count), memoised under
    ``$RLSUITE_CACHE/base_evals/<sha256 of parts>``: the evals of a run's starting weights, which
    every run from the same base repeats. ``parts`` must pin everything the result depends on
    (weights, prompts, answers, task and eval settings, engine, code, torch, threads, CPU); the
    build runs under the cache's file lock, so array jobs on one node compute it once. A result
    with grade errors is not kept (a broken grader is never frozen). Returns (result, computed)."""
    from rlsuite.suite.cache import build_once, cache_root

    key = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]
    root = cache_root() / "base_evals"
    held: dict[str, Any] = {}

    def build(tmp):
        held["r"] = r = compute()
        return {"parts": parts, "result": r} if not r["errors"] else None

    info, _ = build_once(root / key, build)
    if "r" in held:
        return held["r"], True
    return info["result"], False
