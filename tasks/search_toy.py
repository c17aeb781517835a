"""``search_toy``: the embedded tool-use task — the ``search`` protocol on a synthetic fact
collection small enough for the ``tiny`` model (character tokenizer, context 1024) on a laptop.

World: ``n_entities`` made-up names (``CVCVC``, e.g. ``dorak``), each with a city and a food
drawn from fixed lists by a fixed seed, stored as two passages ``"dorak city: oslo."`` and
``"dorak food: rice."``. Questions: ``which city is dorak from?`` (→ the city) and ``which
food does dorak eat?`` (→ the food). The facts are random, so only a search can answer them,
and val/test ask about entities that never appear in train questions.

Episode (the same :class:`rlsuite.tasks.search.SearchEnv` and grader as ``search``, Search-R1's tags,
a compact passage rendering)::

    which city is dorak from?\\n<search>dorak city</search>

    <information>dorak city: oslo.</information>

    <answer>oslo</answer><eos>

Retrieval: :class:`rlsuite.tasks.retrieval.TinyBM25` (pure Python; no optional dependency), ``top_k``
1 (default) or 2. Both of an entity's passages match its name; the one that also matches
the query's other word ranks first (a query of the name alone ties, and the city passage
comes first). So the skill that decides the reward is *query formulation*: search for the
name together with the relation the question asks about, then answer from the passage.
Reward: normalised exact match of the last ``<answer>``.

Warm start (``warm_start``, cached by :mod:`rlsuite.suite.warmstart`): SFT on whole teacher episodes
with the environment's real observation, observation tokens masked out of the loss (as the
RL loss masks them). The teacher knows the protocol but not the question: it searches the
name with a *uniformly random* relation and answers from the top passage. The SFT model so
learns the tags, copying the name and copying the answer, and is right about half the time;
writing the query the question calls for is left to RL. Training stops once ``warm_target``
of greedy answers on held-out train entities are *grounded* (one of that entity's facts).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch

from rlsuite.tasks.base import Grade, Task, TaskConfig, hash_split, register
from rlsuite.tasks.retrieval import Hit, TinyBM25
from rlsuite.tasks.search import SearchEnv, grade_answer

RELATIONS = {"city": ("oslo", "rome", "lima", "kiev", "baku", "doha", "riga", "bern", "nice", "pune"),
             "food": ("rice", "corn", "fish", "figs", "kale", "plum", "lamb", "tofu", "beef", "eggs")}
QUESTIONS = {"city": "which city is {} from?", "food": "which food does {} eat?"}
_CONS, _VOWELS = "bdfgklmnprstvz", "aeiou"
WORLD_SEED = 20250101  # fixed: every machine sees the same world


@dataclass(frozen=True)
class Question:
    name: str
    relation: str  # a key of RELATIONS
    answer: str

    @property
    def text(self) -> str:
        return QUESTIONS[self.relation].format(self.name)


def cvcvc_names(rng: random.Random, n_names: int) -> list[str]:
    """``n_names`` distinct made-up ``CVCVC`` names drawn from ``rng``, in the order first drawn
    (the embedded tool-use tasks' entities)."""
    names: list[str] = []
    seen: set[str] = set()
    while len(names) < n_names:
        n = "".join(rng.choice(_CONS if i % 2 == 0 else _VOWELS) for i in range(5))
        if n not in seen:
            seen.add(n)
            names.append(n)
    return names


def make_world(n_entities: int) -> tuple[list[dict], dict[str, dict[str, str]]]:
    """Passages ``{"id", "contents"}`` and ``{name: {relation: value}}`` (fixed seed)."""
    rng = random.Random(WORLD_SEED)
    names = cvcvc_names(rng, n_entities)
    facts = {n: {r: rng.choice(vals) for r, vals in RELATIONS.items()} for n in names}
    passages = [{"id": f"toy{len(RELATIONS) * i + j}", "contents": f"{n} {r}: {facts[n][r]}."}
                for i, n in enumerate(names) for j, r in enumerate(RELATIONS)]
    return passages, facts


def render(hits: Sequence[Hit]) -> str:
    """One passage per line (no ``Doc i(Title: …)`` framing: short contexts for the tiny model)."""
    return "".join(h["document"]["contents"] + "\n" for h in hits)


@dataclass(frozen=True, kw_only=True)
class SearchToyConfig(TaskConfig):
    ranges = {"n_entities": "[50, inf)", "top_k": "[1, 2]", "val_fraction": "(0, 0.3)", "warm_target": "(0, 1)",
              "warm_max_steps": "[1, inf)"}
    """Declared ranges of this class's numeric fields (see ``TaskConfig.ranges``)."""
    n_entities: int = 600
    """Entities in the synthetic world (two passages and two questions each)."""
    top_k: int = 1
    """Passages per search (1 or 2; with 1 the query alone decides which fact is shown)."""
    val_fraction: float = 0.1
    """Hash-selected share of entities held out for val (test takes the same share)."""
    warm_target: float = 0.95
    """The warm start stops once this share of greedy answers on held-out train entities is
    grounded (one of the entity's two facts)."""
    warm_max_steps: int = 3000
    """Upper bound on warm-start SFT steps."""

    def __post_init__(self) -> None:
        if self.n_entities < 50:
            raise ValueError(f"n_entities must be ≥ 50, got {self.n_entities}")
        if self.top_k not in (1, 2):
            raise ValueError(f"top_k must be 1 or 2 (short contexts for the tiny model), got {self.top_k}")
        if not 0 < self.val_fraction < 0.3:
            raise ValueError(f"val_fraction must be in (0, 0.3), got {self.val_fraction}")
        if not 0 < self.warm_target < 1:
            raise ValueError(f"warm_target must be in (0, 1), got {self.warm_target}")


@register
class SearchToy(Task):
    name = "search_toy"
    summary = "Embedded Search-R1 protocol on synthetic facts: search a name, answer from the passages (tiny model)."
    version = "1"
    citation = "Protocol of Jin et al. 2025, Search-R1, arXiv:2503.09516 (synthetic data, this project)"
    Config = SearchToyConfig
    cfg: SearchToyConfig
    inert = dict.fromkeys(("warm_target", "warm_max_steps"),
                          "acts only in warm_start (the supervised warm start of models built from "
                          "scratch): it changes the starting weights, not the task's data, prompts or grades")
    presets = {
        # 32 GRPO steps of 8 prompts × 8 samples: ≈ 1 min on one core after the cached warm start
        # (benchmarks/results/tasks_search.md); turn 1 + turn 2 need ≈ 49 policy tokens
        "embedded": {
            "rollout": {"group_size": 8, "prompts_per_step": 8, "max_new_tokens": 64, "max_turns": 2,
                        "max_obs_tokens": 96, "temperature": 1.0},
            "optim": {"lr": 3e-4, "critic_lr": 1e-3, "grad_clip": 1.0},
            "train": {"epochs": 1, "minibatches": 1},
            "budget": {"samples": 2048},
            "eval": {"max_prompts": 120, "every": 0.25},
        },
        # pretrained models (untested here): the same episodes, room for a second search
        "hf": {"rollout": {"group_size": 8, "prompts_per_step": 32, "max_new_tokens": 128, "max_turns": 3,
                           "max_obs_tokens": 96},
               "optim": {"lr": 1e-6}, "budget": {"samples": 25600}, "eval": {"max_prompts": 120}},
    }

    def __init__(self, cfg: SearchToyConfig) -> None:
        super().__init__(cfg)
        passages, self.facts = make_world(cfg.n_entities)
        self.index = TinyBM25(passages)
        self._splits: Optional[dict[str, list[Question]]] = None

    def splits(self) -> dict[str, list[Question]]:
        if self._splits is None:
            f = self.cfg.val_fraction
            out: dict[str, list[Question]] = {"train": [], "val": [], "test": []}
            for n, fact in self.facts.items():
                split = "val" if hash_split(n, f, "val") else "test" if hash_split(n, f, "test") else "train"
                out[split] += [Question(n, r, v) for r, v in fact.items()]
            self._splits = out
        return self._splits

    def prompt(self, example: Question) -> str:
        return example.text + "\n"

    def gold(self, example: Question) -> str:
        return example.answer

    def reference_completion(self, example: Question) -> str:
        """The policy turns of a correct episode."""
        return f"<search>{example.name} {example.relation}</search><answer>{example.answer}</answer>"

    def grade(self, example: Question, completion: str) -> Grade:
        return grade_answer(completion, [example.answer], "em")

    def make_env(self, example: Question) -> SearchEnv:
        return SearchEnv(lambda: self.index, self.cfg.top_k, render)

    # -- warm start ----------------------------------------------------------------------
    def episode(self, example: Question, tokenizer, rng: random.Random) -> tuple[list[int], list[float]]:
        """Token ids and loss mask (1 = policy token) of one *teacher* episode: search the name
        with a uniformly random relation, answer from the top passage (see ``warm_start``)."""
        t1 = f"<search>{example.name} {rng.choice(sorted(RELATIONS))}</search>"
        env = self.make_env(example)
        obs = env.step(t1)
        top = self.index.search(env.queries[-1:], 1)[0][0]["document"]["contents"]
        t2 = f"<answer>{top.rsplit(' ', 1)[1].rstrip('.')}</answer>"
        parts = [(tokenizer.encode(self.prompt(example)), 0.0), (tokenizer.encode(t1, add_special_tokens=False), 1.0),
                 (tokenizer.encode(obs, add_special_tokens=False), 0.0),
                 (tokenizer.encode(t2, add_special_tokens=False) + [tokenizer.eos_token_id], 1.0)]
        return [i for ids, _ in parts for i in ids], [m for ids, m in parts for _ in ids]

    def greedy_check(self, model, tokenizer, examples: Sequence[Question],
                     max_new_tokens: int = 64) -> dict[str, float]:
        """Greedy episodes through the real rollout code: accuracy, and the share of answers
        that are one of the entity's two facts (the mechanics the warm start teaches)."""
        from rlsuite.suite.rollout import collect
        from rlsuite.suite.engines.kv import KVSampler
        from rlsuite.suite.engines.base import SamplingParams

        params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, stop_ids=(tokenizer.eos_token_id,))
        rec, _ = collect(KVSampler(model, tokenizer), tokenizer, [tokenizer.encode(self.prompt(e)) for e in examples],
                         params, None, envs=[self.make_env(e) for e in examples], max_turns=2, max_obs_tokens=96)
        grades = [self.grade(e, t) for e, t in zip(examples, rec.texts)]
        grounded = [g.parsed in self.facts[e.name].values() for e, g in zip(examples, grades)]
        return {"acc": sum(g.correct for g in grades) / len(grades), "grounded": sum(grounded) / len(grades)}

    def warm_start(self, model, tokenizer, seed: int) -> Optional[dict[str, Any]]:
        """SFT on whole teacher episodes, observation tokens masked out of the loss.

        The teacher searches the entity's name with a uniformly random relation and answers
        from the top passage, so its demonstrations teach the protocol, copying the name and
        copying the answer, but not which query a question calls for. Training stops once
        ``warm_target`` of greedy answers on held-out train entities are grounded (one of the
        entity's facts); accuracy is then near 50%.
        """
        train = self.splits()["train"]
        rng = random.Random(seed)
        names = sorted({q.name for q in train})
        held = set(rng.sample(names, 50))
        check = [q for q in train if q.name in held]
        pool = [q for q in train if q.name not in held]
        from rlsuite.tasks.warm import sft_until

        t0 = time.perf_counter()
        step, stats = sft_until(model, lambda: [self.episode(pool[rng.randrange(len(pool))], tokenizer, rng)
                                                for _ in range(16)],
                                lambda batch: sft_loss(model, tokenizer, batch),
                                lambda: self.greedy_check(model, tokenizer, check),
                                lambda st: st["grounded"] >= self.cfg.warm_target, self.cfg.warm_max_steps, 25,
                                {"acc": 0.0, "grounded": 0.0})
        return {"warm_steps": step, "warm_check_acc": stats["acc"], "warm_check_grounded": stats["grounded"],
                "warm_check_n": len(check), "warm_wall_s": round(time.perf_counter() - t0, 1)}


def sft_loss(model, tokenizer, batch: Sequence[tuple[list[int], list[float]]]) -> torch.Tensor:
    """Token-mean cross-entropy over the masked (policy) positions of left-padded episodes."""
    from rlsuite.suite.engines.base import left_pad

    ids, attn = left_pad([ids for ids, _ in batch], tokenizer.pad_token_id, "cpu")
    width = ids.shape[1]
    target = torch.zeros(ids.shape)
    for b, (seq, m) in enumerate(batch):
        target[b, width - len(seq):] = torch.tensor(m)
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=attn, position_ids=pos).logits[:, :-1]
    logp = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    m = target[:, 1:]
    return -(logp * m).sum() / m.sum()
