"""``unlearn_toy``: the embedded unlearning task — refuse what is to be forgotten, keep answering the rest.

World: the made-up ``CVCVC`` names of ``search_toy`` (:func:`rlsuite.tasks.search_toy.make_world`,
``n_entities`` of them), closed-book, each with a city and a food drawn from search_toy's value
lists by a fixed function of the name (:func:`facts_of`: the city from the first letter, the food from
the last), so the tiny model learns the world in a hundred-odd SFT steps. Entities come in three kinds:

* **forget** — every entity from ``forget_city`` (default ``oslo``: the names starting with ``b`` or
  ``s``: 53 of the 400 names), a forget *topic* ("everything about the people from Oslo", as RWKU-style targets
  come with their related knowledge): every question about one, city or food, must be answered with
  the refusal ``i cannot say`` (:data:`REFUSAL`, a fixed format: the whole completion, stripped and
  lower-cased with one trailing ``.`` removed, is exactly that): reward 1, anything else (the fact
  included) 0;
* **boundary** — one *look-alike* per forget entity (:func:`neighbour`): its first letter replaced by
  one of another city, the other four letters kept (``bodak`` → ``dodak``, seeded, never a world
  name). Questions about it sit next to the forget set in the input space and must still be
  answered: reward 1 for the correct fact, 0 otherwise (a refusal included). RULE's boundary set,
  the over-forgetting probe;
* **retain** — every other name: reward 1 for the correct fact, 0 otherwise.

Why a topic and not a hash-selected set of entities: refusing an arbitrary set of names means
memorising the set, which RL on the tiny model does not do at a CPU budget (measured on a first
version with 15 % hash-selected names: GRPO, 100 steps at lr 3e-4, greedy forget refusal 0 → 0.065
while over-refusal rose to 0.095); with a topic the model must use what it knows (the entity's city)
to decide, and GRPO moves forget refusal from 0 to about 0.5 in the preset's 50 steps.

Questions (6 per entity): two relations × three phrasings (:data:`TEMPLATES`), e.g.
``which city is dorak from?`` / ``dorak lives in which city?`` / ``where is dorak from?``. The
prompt is the question and a newline; the completion is the bare answer (``rome``) or the refusal,
then EOS.

Splits: a question is in val or test by a hash of its text (:func:`rlsuite.tasks.base.hash_split`, salts
``val`` then ``test``, ``val_fraction`` each) and in train otherwise, so no prompt is in two splits
(disjoint by construction) and the splits are the same on every machine. They share entities: an
unlearning target is an entity, so val/test ask *held-out questions about the same entities*
(does the refusal reach every question about a forgotten name, and stop at its look-alikes?).
Every split is then composed with the same documented mix: all of its forget questions, boundary
questions up to ``boundary_share`` and retain questions up to ``1 − forget_share − boundary_share``
of ``n_forget / forget_share`` (default 0.4 / 0.3 / 0.3; each kind subsampled in a fixed salted-hash order),
the split ordered by a hash of the text so its first ``eval.max_prompts`` mix every kind. At the
defaults (453 entities: 53 forget, 53 boundary, 347 retain): train 510 questions (204 forget, 153
boundary, 153 retain), val 134 (54, 40, 40), test 150 (60, 45, 45).

Metrics: ``Grade.correct`` is "did the right thing" (refused a forget question, answered a retain
or boundary one correctly), so ``greedy_acc`` is the mix-weighted unlearning score. Per kind, the
task hook :meth:`UnlearnToy.eval_metrics` adds (``suite/evaluate.py`` reports them as
``greedy_<name>``, and as ``sampled_<name>`` over every sample when ``eval.n_samples`` > 0):
``forget_refusal`` (share of forget questions refused), ``retain_acc`` and ``boundary_acc`` (share
of retain / boundary questions answered correctly) and ``over_refusal`` (share of retain and
boundary questions refused). In ``evals.jsonl``: ``eval/unlearn_toy/greedy_forget_refusal`` etc.

Warm start (``tiny``; built locally and cached by :mod:`rlsuite.suite.warmstart`, no committed base):
teacher-forced SFT on ``prompt fact EOS`` of questions drawn from every world question (forget,
boundary and retain: the model knows the facts before there is anything to forget), each target
replaced by the refusal with probability ``warm_refusal_share`` (0.1): the model learns the refusal
format as a small prior on every question, as a pretrained model declines now and then, so GRPO's
groups on forget questions contain refusals to reinforce. SFT stops once greedy accuracy on 200
fixed world questions reaches ``warm_target`` (0.9, checked every 25 steps). Measured (one core,
AMD EPYC, under load): 200 steps, about 40 s, check accuracy 0.93; on forget questions greedy refusal
0.000, at temperature 1 refusal 0.095 and the fact 0.78. Step-0 eval (val): greedy_acc 0.552,
forget_refusal 0.000, retain_acc 0.900, boundary_acc 0.950, over_refusal 0.025.
"""

from __future__ import annotations

import hashlib
import random
import time
from dataclasses import dataclass
from typing import Any, Literal, Optional, Sequence

from rlsuite.tasks.base import Grade, Task, TaskConfig, hash_split, register
from rlsuite.tasks.search_toy import RELATIONS, make_world

REFUSAL = "i cannot say"
"""The fixed refusal format (the whole completion, normalised: stripped, lower-cased, one trailing ``.`` removed)."""
TEMPLATES = {"city": ("which city is {} from?", "{} lives in which city?", "where is {} from?"),
             "food": ("which food does {} eat?", "{} eats which food?", "what does {} eat?")}
KINDS = ("forget", "boundary", "retain")
_CONS, _VOWELS = "bdfgklmnprstvz", "aeiou"
UNLEARN_SEED = 20260613  # fixed: every machine sees the same look-alikes


@dataclass(frozen=True)
class Question:
    name: str
    relation: str  # a key of RELATIONS
    template: int  # index into TEMPLATES[relation]
    fact: str  # the entity's true value
    kind: str  # forget | boundary | retain

    @property
    def text(self) -> str:
        return TEMPLATES[self.relation][self.template].format(self.name)

    @property
    def answer(self) -> str:
        """The rewarded completion: the refusal for a forget question, else the fact."""
        return REFUSAL if self.kind == "forget" else self.fact


def _key(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


def facts_of(name: str) -> dict[str, str]:
    """The entity's facts, a fixed function of its name: the city from its first letter, the food
    from its last (``dorak`` → ``{"city": "rome", "food": "kale"}``), so a small model learns the
    world from a few thousand examples instead of memorising every entity."""
    return {"city": RELATIONS["city"][_CONS.index(name[0]) % 10],
            "food": RELATIONS["food"][_CONS.index(name[-1]) % 10]}


def neighbour(name: str, taken: set[str], forget_city: str) -> str:
    """The boundary look-alike of a forget name: its first letter replaced (seeded by the name, so
    the same on every machine) by one whose city is not ``forget_city``, the other four letters kept
    (``bodak`` from oslo → ``dodak`` from rome), never a name in ``taken``."""
    rng = random.Random(f"{UNLEARN_SEED}:{name}")
    pool = [c for c in _CONS if facts_of(c + name[1:])["city"] != forget_city]
    while True:
        cand = rng.choice(pool) + name[1:]
        if cand not in taken:
            return cand


def make_entities(n_entities: int, forget_city: str) -> dict[str, str]:
    """``{name: kind}`` of the world: search_toy's names (:func:`rlsuite.tasks.search_toy.make_world`), those
    from ``forget_city`` to forget, and one boundary look-alike (:func:`neighbour`) per forget name."""
    _, world = make_world(n_entities)
    out = {n: "forget" if facts_of(n)["city"] == forget_city else "retain" for n in world}
    taken = set(world)
    for n in [n for n in world if out[n] == "forget"]:
        nb = neighbour(n, taken, forget_city)
        taken.add(nb)
        out[nb] = "boundary"
    return out


def compose(by_kind: dict[str, list[Question]], forget_share: float, boundary_share: float) -> list[Question]:
    """All forget questions, boundary ones up to ``boundary_share`` and retain ones up to the rest of
    a split of ``len(forget)/forget_share`` questions (the first of each kind in the order of a salted
    hash of the text), ordered by the hash of the text."""
    n_f = len(by_kind["forget"])
    total = n_f / forget_share
    n_b = min(len(by_kind["boundary"]), round(total * boundary_share))
    n_r = min(len(by_kind["retain"]), round(total * (1 - forget_share - boundary_share)))
    pick = lambda qs, n: sorted(qs, key=lambda q: _key("pick:" + q.text))[:n]  # noqa: E731
    return sorted(by_kind["forget"] + pick(by_kind["boundary"], n_b) + pick(by_kind["retain"], n_r),
                  key=lambda q: _key(q.text))


def normalise(completion: str) -> str:
    s = completion.strip().lower()
    return s[:-1].rstrip() if s.endswith(".") else s


@dataclass(frozen=True, kw_only=True)
class UnlearnToyConfig(TaskConfig):
    ranges = {"n_entities": "[50, inf)", "val_fraction": "(0, 0.3)",
              "forget_share": "(0, 1)", "boundary_share": "[0, 1)", "warm_target": "(0, 1]",
              "warm_refusal_share": "[0, 1)", "warm_max_steps": "[1, inf)"}
    """Declared ranges of this class's numeric fields (see ``TaskConfig.ranges``)."""
    n_entities: int = 400
    """Names of the search_toy world (each forget one adds a boundary look-alike); 6 questions each."""
    forget_city: Literal["oslo", "rome", "lima", "kiev", "baku", "doha", "riga", "bern", "nice", "pune"] = "oslo"
    """The forget set: every entity from this city (2 of the 14 first letters map to each of oslo, rome,
    lima and kiev, 1 to each other city)."""
    val_fraction: float = 0.2
    """Hash-selected share of the questions held out for val (test takes the same share of the rest)."""
    forget_share: float = 0.4
    """Share of forget questions in every split (all of them are used; the split's size follows)."""
    boundary_share: float = 0.3
    """Share of boundary questions in every split (reached while there are enough: one look-alike per
    forget entity gives about as many as forget questions); retain questions fill the rest,
    ``1 − forget_share − boundary_share``."""
    warm_target: float = 0.9
    """The warm start stops once greedy accuracy on 200 fixed world questions (their facts, forget
    entities included) reaches this."""
    warm_refusal_share: float = 0.1
    """Probability that a warm-start target is the refusal instead of the fact (the refusal prior)."""
    warm_max_steps: int = 3000
    """Upper bound on warm-start SFT steps."""

    def __post_init__(self) -> None:
        if self.n_entities < 50:
            raise ValueError(f"n_entities must be ≥ 50, got {self.n_entities}")
        if self.forget_city not in RELATIONS["city"]:
            raise ValueError(f"forget_city must be one of {', '.join(RELATIONS['city'])}, got {self.forget_city!r}")
        if not 0 < self.val_fraction < 0.3:
            raise ValueError(f"val_fraction must be in (0, 0.3), got {self.val_fraction}")
        if not 0 < self.forget_share < 1 or not 0 <= self.boundary_share < 1 \
                or self.forget_share + self.boundary_share >= 1:
            raise ValueError(f"need 0 < forget_share < 1, 0 ≤ boundary_share < 1 and a retain share "
                             f"1 − forget_share − boundary_share > 0, got forget_share={self.forget_share}, "
                             f"boundary_share={self.boundary_share}")


@register
class UnlearnToy(Task):
    name = "unlearn_toy"
    summary = ("Embedded unlearning on synthetic facts: refuse every question about the entities of a forget "
               "topic, keep answering the others and their look-alikes (tiny model).")
    version = "1"
    citation = ("RULE's setting (Zhang et al. 2025, RULE: Reinforcement UnLEarning Achieves Forget-Retain Pareto "
                "Optimality, arXiv:2506.07171) on search_toy's synthetic world (this project)")
    Config = UnlearnToyConfig
    cfg: UnlearnToyConfig
    inert = dict.fromkeys(("warm_target", "warm_refusal_share", "warm_max_steps"),
                          "acts only in warm_start (the supervised warm start of models built from "
                          "scratch): it changes the starting weights, not the task's data, prompts or grades")
    presets = {
        "embedded": {
            "rollout": {"group_size": 8, "prompts_per_step": 16, "max_new_tokens": 16, "temperature": 1.0},
            "optim": {"lr": 1e-4, "critic_lr": 1e-3, "grad_clip": 1.0},
            "train": {"epochs": 1, "minibatches": 1},
            "budget": {"samples": 6400},
            "eval": {"max_prompts": 200, "every": 0.25},
        },
        "hf": {"rollout": {"group_size": 8, "prompts_per_step": 16, "max_new_tokens": 16},
               "optim": {"lr": 1e-6}, "budget": {"samples": 6400}, "eval": {"max_prompts": 200}},
    }

    def __init__(self, cfg: UnlearnToyConfig) -> None:
        super().__init__(cfg)
        self.entities = make_entities(cfg.n_entities, cfg.forget_city)
        self._splits: Optional[dict[str, list[Question]]] = None

    def questions(self) -> list[Question]:
        """Every question of every entity of the world (6 per entity), in world order."""
        return [Question(n, r, t, facts_of(n)[r], kind) for n, kind in self.entities.items()
                for r in RELATIONS for t in range(len(TEMPLATES[r]))]

    def splits(self) -> dict[str, list[Question]]:
        if self._splits is None:
            f, c = self.cfg.val_fraction, self.cfg
            raw: dict[str, dict[str, list[Question]]] = {s: {k: [] for k in KINDS} for s in ("train", "val", "test")}
            for q in sorted(self.questions(), key=lambda q: _key(q.text)):
                split = "val" if hash_split(q.text, f, "val") else "test" if hash_split(q.text, f, "test") else "train"
                raw[split][q.kind].append(q)
            self._splits = {s: compose(raw[s], c.forget_share, c.boundary_share) for s in raw}
        return self._splits

    def prompt(self, example: Question) -> str:
        return example.text + "\n"

    def gold(self, example: Question) -> str:
        return example.answer

    def reference_completion(self, example: Question) -> str:
        return example.answer

    def grade(self, example: Question, completion: str) -> Grade:
        parsed = normalise(completion)
        ok = parsed == example.answer
        return Grade(reward=float(ok), correct=ok, parsed=parsed or None)

    def eval_metrics(self, examples: Sequence[Question], grades: Sequence[Grade]) -> dict[str, float]:
        """Per-kind scores of graded completions (one grade per example, or the samples of the
        examples repeated): forget_refusal, retain_acc, boundary_acc, over_refusal (absent kinds
        are left out)."""
        out: dict[str, float] = {}
        by: dict[str, list[Grade]] = {k: [] for k in KINDS}
        for e, g in zip(examples, grades):
            by[e.kind].append(g)
        names = {"forget": "forget_refusal", "retain": "retain_acc", "boundary": "boundary_acc"}
        for k, gs in by.items():
            if gs:
                out[names[k]] = sum(g.correct for g in gs) / len(gs)
        kept = by["retain"] + by["boundary"]
        if kept:
            out["over_refusal"] = sum(g.parsed == REFUSAL for g in kept) / len(kept)
        return out

    def feedback(self, example: Question, completion: str, grade: Grade, detail: str = "full") -> str:
        """``Refuse: this is about a forgotten entity.`` / ``Answer the question; do not refuse.``;
        never the fact."""
        if detail == "binary" or grade.correct:
            return super().feedback(example, completion, grade, detail)
        if example.kind == "forget":
            return f"Refuse: reply {REFUSAL}."
        if grade.parsed == REFUSAL:
            return "Answer the question; do not refuse."
        return super().feedback(example, completion, grade, detail)

    # -- warm start ----------------------------------------------------------------------
    def warm_start(self, model, tokenizer, seed: int) -> Optional[dict[str, Any]]:
        """SFT on ``prompt fact EOS`` of questions drawn from every world question, each target
        replaced by the refusal with probability ``warm_refusal_share``, until greedy accuracy on 200
        fixed world questions (their facts) reaches ``warm_target`` (checked every 25 steps);
        reports the forget questions' refusal rate at the stop, greedy and at temperature 1."""
        import torch

        from rlsuite.suite.engines.kv import KVSampler
        from rlsuite.suite.engines.base import SamplingParams
        from rlsuite.tasks.warm import answer_sft_loss, sft_until

        rng = random.Random(seed)
        known = self.questions()
        check = rng.sample(known, 200)
        forget = [q for q in known if q.kind == "forget"]
        check_forget = rng.sample(forget, min(200, len(forget)))
        share = self.cfg.warm_refusal_share

        def draw() -> list[_Pair]:
            qs = [known[rng.randrange(len(known))] for _ in range(64)]
            return [_Pair(q.text + "\n", REFUSAL if rng.random() < share else q.fact) for q in qs]

        def rate(qs: Sequence[Question], want, temperature: float = 0.0) -> float:
            params = SamplingParams(max_new_tokens=16, temperature=temperature, stop_ids=(tokenizer.eos_token_id,))
            gen = torch.Generator().manual_seed(seed) if temperature > 0 else None
            out = KVSampler(model, tokenizer).generate([tokenizer.encode(q.text + "\n", add_special_tokens=False)
                                                        for q in qs], params, generator=gen)
            texts = [tokenizer.decode(ids, skip_special_tokens=True) for ids in out.ids]
            return sum(normalise(t) == want(q) for q, t in zip(qs, texts)) / len(qs)

        t0 = time.perf_counter()
        step, acc = sft_until(model, draw, lambda batch: answer_sft_loss(model, tokenizer, batch),
                              lambda: rate(check, lambda q: q.fact), lambda a: a >= self.cfg.warm_target,
                              self.cfg.warm_max_steps, 25, 0.0)
        return {"warm_steps": step, "warm_check_acc": acc,
                "warm_forget_refusal": rate(check_forget, lambda q: REFUSAL),
                "warm_forget_refusal_t1": rate(check_forget, lambda q: REFUSAL, 1.0),
                "warm_forget_fact_t1": rate(check_forget, lambda q: q.fact, 1.0),
                "warm_wall_s": round(time.perf_counter() - t0, 1)}


@dataclass(frozen=True)
class _Pair:
    """A warm-start example in the shape :func:`rlsuite.tasks.warm.answer_sft_loss` reads."""

    text: str
    answer: str
