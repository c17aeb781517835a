"""``hops_toy``: the embedded long-horizon task — follow a chain of made-up names for ``h`` hops
with one search per hop (4–8 tool calls), then answer; one sparse outcome reward at the end.

World: ``n_entities`` made-up names (``CVCVC``, as in ``search_toy``), put on one cycle in a
fixed random order (seed ``WORLD_SEED``): every name has exactly one successor, and no chain of
fewer than ``n_entities`` hops comes back to its start. Questions: ``who is 5 hops after dorak?``
for every start name and every ``h`` in ``min_hops..max_hops``; the answer is the name ``h``
successors on. The successors are random, so only searching can answer, and val/test ask about
start names that begin no train question.

Episode (``search`` protocol tags; the observation names the hop it answers)::

    who is 5 hops after dorak?\\n<search>dorak</search>
    <information>hop 1: kipol</information>
    <search>kipol</search>
    <information>hop 2: davum</information>
    … (five searches in all) …
    <answer>tubel</answer><eos>

A ``<search>`` turn looks its query up by exact name and shows its successor (``no entry`` for
an unknown name), an
``<answer>`` turn ends the episode, a turn with neither gets a short ``invalid action``
observation; the hop counter counts the searches so far. ``rollout.max_turns`` bounds the
policy turns (the embedded preset: ``max_hops + 2``). Reward: normalised exact match of the last
``<answer>`` (the ``search`` grader), 1 or 0: nothing before the last turn is rewarded, and the
turn that decides it (stopping after the ``h``-th search, not before or after) comes 4–8 turns
after the first. ``Grade.error_class`` is ``searches=k`` (the searches the episode made), so
wrong answers that stopped at the same hop are "the same error"; ``eval_metrics`` reports the
mean number of searches and the share of episodes that made exactly ``h``.

Turn-level records: the environment keeps one :class:`TurnRecord` per policy turn (the action,
its argument, the observation and the state it acted in), :meth:`HopsToy.turn_records` replays a
completion into them, and :meth:`HopsEnv.state` is the hashable environment state each turn acts
in — ``(searches so far, last observation)`` — that the rollout records per turn
(``Rollout.turn_states``) for turn-level estimators such as GiGPO's anchor-state groups.

Warm start (embedded model): SFT on whole teacher episodes, observation tokens masked out of the
loss. The teacher follows the chain correctly and, in ``warm_read_share`` of its episodes (0.6),
stops after exactly ``h`` searches; in the rest it stops after a number drawn uniformly from
``min_hops..max_hops`` *whatever the question asks*; it answers with the last name it was shown.
The SFT model so learns the protocol and copying (the answer is the chain's name at the hop where it
stopped: "grounded") and to read ``h`` part of the time. Training stops once ``warm_target`` (0.95)
of greedy answers on held-out train questions are grounded. The committed base
(``tasks/bases/hops_toy__tiny.*``, sha256 c370e869…, built on an AMD EPYC: 300 steps, 299 s on one
thread) solves 40.0% of the test episodes greedy (38.6% of val), with 7.2 searches an episode on
average; stopping at the right hop every time is left to RL: a credit-assignment problem across
the episode's turns. (The first committed base, 83e0d394, had a blind teacher, share 0: its greedy
policy made 7 searches on every episode, right on one in five, and RL never learned to read ``h``
from it: ``benchmarks/long_horizon/README.md``.)
"""

from __future__ import annotations

import hashlib
import random
import re
import time
from dataclasses import dataclass
from typing import Any, Hashable, Optional, Sequence

from rlsuite.tasks.base import Environment, Grade, Task, TaskConfig, hash_split, register
from rlsuite.tasks.search import grade_answer
from rlsuite.tasks.search_toy import cvcvc_names, sft_loss

WORLD_SEED = 20250420  # fixed: every machine sees the same world
STOP_STRINGS = ("</search>", "</answer>")
_ACTION = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)
_INFO = re.compile(r"<information>.*?</information>", re.DOTALL)
INVALID = "\n<information>invalid action.</information>\n"
"""The observation after a turn with neither a search nor an answer."""


@dataclass(frozen=True)
class Hop:
    """One question: the name ``h`` successors after ``start``."""

    start: str
    hops: int
    answer: str

    @property
    def text(self) -> str:
        return f"who is {self.hops} hops after {self.start}?"


@dataclass(frozen=True)
class TurnRecord:
    """What one policy turn did: ``action`` ``search`` | ``answer`` | ``invalid``, its argument
    (the query or the answer; ``""`` for an invalid turn), the observation it got (None after an
    answer) and the environment state it acted in (:meth:`HopsEnv.state` before the turn)."""

    action: str
    arg: str
    observation: Optional[str]
    state: Hashable


def make_world(n_entities: int) -> dict[str, str]:
    """``{name: successor}``: ``n_entities`` distinct ``CVCVC`` names on one cycle (fixed seed)."""
    rng = random.Random(WORLD_SEED)
    names = cvcvc_names(rng, n_entities)
    rng.shuffle(names)
    return {n: names[(i + 1) % n_entities] for i, n in enumerate(names)}


def follow(world: dict[str, str], start: str, hops: int) -> list[str]:
    """The chain ``[start, successor, …]`` of ``hops + 1`` names."""
    out = [start]
    for _ in range(hops):
        out.append(world[out[-1]])
    return out


class HopsEnv(Environment):
    """One episode: a ``<search>`` turn gets the queried name's successor, an ``<answer>`` turn ends it."""

    stop_strings = STOP_STRINGS

    def __init__(self, world: dict[str, str]) -> None:
        self.world = world
        self.searches = 0
        self.last_obs = ""
        self.records: list[TurnRecord] = []

    def state(self) -> Hashable:
        """The state the next policy turn acts in: (searches so far, the last observation; ``""``
        before the first). The question is the same for every episode of a prompt group, so two
        turns of one group share a state exactly when they saw the same hop of the same chain."""
        return (self.searches, self.last_obs)

    def step(self, text: str) -> Optional[str]:
        before = self.state()
        m = _ACTION.search(text)
        if m is None:
            obs: Optional[str] = INVALID
            self.records.append(TurnRecord("invalid", "", obs, before))
        elif m.group(1) == "answer":
            self.records.append(TurnRecord("answer", m.group(2).strip(), None, before))
            return None
        else:
            query = m.group(2).strip()
            self.searches += 1
            succ = self.world.get(query.lower())
            obs = f"\n<information>hop {self.searches}: {succ if succ is not None else 'no entry'}</information>\n"
            self.records.append(TurnRecord("search", query, obs, before))
        self.last_obs = obs
        return obs


@dataclass(frozen=True, kw_only=True)
class HopsToyConfig(TaskConfig):
    ranges = {"n_entities": "[20, inf)", "min_hops": "[1, inf)", "max_hops": "[1, 12]",
              "val_fraction": "(0, 0.3)", "warm_target": "(0, 1)", "warm_max_steps": "[1, inf)",
              "warm_read_share": "[0, 1]"}
    """Declared ranges of this class's numeric fields (see ``TaskConfig.ranges``)."""
    n_entities: int = 300
    """Names in the synthetic world (each starts ``max_hops − min_hops + 1`` questions)."""
    min_hops: int = 4
    """Fewest hops a question asks for (searches a correct episode makes)."""
    max_hops: int = 8
    """Most hops a question asks for (the episode then has ``max_hops + 1`` policy turns)."""
    val_fraction: float = 0.1
    """Hash-selected share of start names held out for val (test takes the same share)."""
    warm_target: float = 0.95
    """The warm start stops once this share of greedy answers on held-out train questions is
    grounded (the chain's name at the hop where the episode stopped)."""
    warm_max_steps: int = 600
    """Upper bound on warm-start SFT steps."""
    warm_read_share: float = 0.6
    """Share of the warm start's teacher episodes that stop at the question's ``h`` (the rest stop at a
    uniformly random hop): at 0 the base reads no ``h`` at all (its greedy policy makes one fixed number
    of searches, right on one question in five, and RL at the preset never learned to read ``h`` from
    it); at the default 0.6 it reads it part of the time, so RL has a gradient towards reading it. A
    base at another share than the committed one's is built locally (not committed)."""

    def __post_init__(self) -> None:
        if not 1 <= self.min_hops <= self.max_hops <= 12:
            raise ValueError(f"min_hops and max_hops must satisfy 1 ≤ min_hops ≤ max_hops ≤ 12 (the tiny model's "
                             f"context), got {self.min_hops} and {self.max_hops}")
        if self.n_entities <= self.max_hops:
            raise ValueError(f"n_entities must exceed max_hops ({self.max_hops}), got {self.n_entities}")
        if not 0 < self.val_fraction < 0.3:
            raise ValueError(f"val_fraction must be in (0, 0.3), got {self.val_fraction}")
        if not 0 < self.warm_target < 1:
            raise ValueError(f"warm_target must be in (0, 1), got {self.warm_target}")


@register
class HopsToy(Task):
    name = "hops_toy"
    summary = ("Embedded long-horizon tool use: follow a chain of names for 4–8 searches, then answer "
               "(sparse outcome reward; per-turn states for turn-level credit; tiny model).")
    version = "1"
    citation = ("Search protocol of Jin et al. 2025, Search-R1, arXiv:2503.09516 "
                "(synthetic multi-hop world, this project)")
    Config = HopsToyConfig
    cfg: HopsToyConfig
    inert = dict.fromkeys(("warm_target", "warm_max_steps", "warm_read_share"),
                          "acts only in warm_start (the supervised warm start of models built from "
                          "scratch): it changes the starting weights, not the task's data, prompts or grades")
    presets = {
        # a correct 8-hop episode: 8 × 22 + 23 policy tokens (EOS included) and 8 observations of 36
        "embedded": {
            "rollout": {"group_size": 8, "prompts_per_step": 8, "max_new_tokens": 256, "max_turns": 10,
                        "max_obs_tokens": 64, "temperature": 1.0},
            "optim": {"lr": 3e-4, "critic_lr": 1e-3, "grad_clip": 1.0},
            "train": {"epochs": 1, "minibatches": 1},
            "budget": {"samples": 2048},
            "eval": {"max_prompts": 150, "every": 0.25},
        },
        "hf": {"rollout": {"group_size": 8, "prompts_per_step": 32, "max_new_tokens": 512, "max_turns": 10,
                           "max_obs_tokens": 64},
               "optim": {"lr": 1e-6}, "budget": {"samples": 25600}, "eval": {"max_prompts": 150}},
    }

    def __init__(self, cfg: HopsToyConfig) -> None:
        super().__init__(cfg)
        self.world = make_world(cfg.n_entities)
        self._splits: Optional[dict[str, list[Hop]]] = None

    def splits(self) -> dict[str, list[Hop]]:
        if self._splits is None:
            f = self.cfg.val_fraction
            out: dict[str, list[Hop]] = {"train": [], "val": [], "test": []}
            for n in self.world:
                split = "val" if hash_split(n, f, "val") else "test" if hash_split(n, f, "test") else "train"
                out[split] += [Hop(n, h, follow(self.world, n, h)[-1])
                               for h in range(self.cfg.min_hops, self.cfg.max_hops + 1)]
            # a fixed hash order, so the first eval.max_prompts of a split mix every h
            self._splits = {k: sorted(v, key=lambda q: _order(q.text)) for k, v in out.items()}
        return self._splits

    def prompt(self, example: Hop) -> str:
        return example.text + "\n"

    def gold(self, example: Hop) -> str:
        return example.answer

    def reference_completion(self, example: Hop) -> str:
        """The policy turns of a correct episode."""
        chain = follow(self.world, example.start, example.hops)
        return "".join(f"<search>{n}</search>" for n in chain[:-1]) + f"<answer>{example.answer}</answer>"

    def grade(self, example: Hop, completion: str) -> Grade:
        g = grade_answer(completion, [example.answer], "em")
        k = sum(a == "search" for a, _ in actions(completion))
        return Grade(reward=g.reward, correct=g.correct, parsed=g.parsed, error_class=f"searches={k}")

    def eval_metrics(self, examples: Sequence[Hop], grades: Sequence[Grade]) -> dict[str, float]:
        """``searches``: mean searches an episode made; ``hop_exact``: share that made exactly ``h``;
        ``acc_h<h>``: accuracy on the questions asking for ``h`` hops, for each ``h`` among ``examples``
        (which hop counts a policy has learned to stop at: a policy that stops at one count whatever
        the question scores 1 on that ``h`` and 0 on the others)."""
        k = [int(g.error_class.split("=")[1]) if g.error_class else 0 for g in grades]
        n = max(1, len(grades))
        out = {"searches": sum(k) / n, "hop_exact": sum(ki == e.hops for ki, e in zip(k, examples)) / n}
        for h in sorted({e.hops for e in examples}):
            mine = [float(g.correct) for e, g in zip(examples, grades) if e.hops == h]
            out[f"acc_h{h}"] = sum(mine) / len(mine)
        return out

    def make_env(self, example: Hop) -> HopsEnv:
        return HopsEnv(self.world)

    def turn_records(self, example: Hop, completion: str) -> list[TurnRecord]:
        """Replay a completion's actions (``<search>``/``<answer>`` tags outside observations, in
        order) through a fresh environment: what each turn did. A turn with no action leaves no
        tag, so the replay skips it (the rollout's own environment recorded it as ``invalid``)."""
        env = self.make_env(example)
        for kind, arg in actions(completion):
            if env.step(f"<{kind}>{arg}</{kind}>") is None:
                break
        return env.records

    # -- warm start ----------------------------------------------------------------------
    def episode(self, example: Hop, tokenizer, rng: random.Random) -> tuple[list[int], list[float]]:
        """Token ids and loss mask (1 = policy token) of one *teacher* episode: follow the chain
        for a uniformly random number of searches in ``min_hops..max_hops`` (not the question's
        ``h``; with probability ``warm_read_share``, exactly ``h``), then answer with the last name shown."""
        read = self.cfg.warm_read_share > 0 and rng.random() < self.cfg.warm_read_share  # no draw at 0: same base
        stop = example.hops if read else rng.randint(self.cfg.min_hops, self.cfg.max_hops)
        chain = follow(self.world, example.start, stop)
        env = self.make_env(example)
        parts = [(tokenizer.encode(self.prompt(example)), 0.0)]
        for n in chain[:-1]:
            turn = f"<search>{n}</search>"
            parts += [(tokenizer.encode(turn, add_special_tokens=False), 1.0),
                      (tokenizer.encode(env.step(turn), add_special_tokens=False), 0.0)]
        parts.append((tokenizer.encode(f"<answer>{chain[-1]}</answer>", add_special_tokens=False)
                      + [tokenizer.eos_token_id], 1.0))
        return [i for ids, _ in parts for i in ids], [m for ids, m in parts for _ in ids]

    def greedy_check(self, model, tokenizer, examples: Sequence[Hop], max_new_tokens: int = 256) -> dict[str, float]:
        """Greedy episodes through the real rollout code: accuracy, and the share of answers that
        are the chain's name at the hop where the episode stopped (what the warm start teaches)."""
        from rlsuite.suite.engines.base import SamplingParams
        from rlsuite.suite.engines.kv import KVSampler
        from rlsuite.suite.rollout import collect

        params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, stop_ids=(tokenizer.eos_token_id,))
        rec, _ = collect(KVSampler(model, tokenizer), tokenizer, [tokenizer.encode(self.prompt(e)) for e in examples],
                         params, None, envs=[self.make_env(e) for e in examples], max_turns=self.cfg.max_hops + 2,
                         max_obs_tokens=64)
        grades = [self.grade(e, t) for e, t in zip(examples, rec.texts)]
        grounded = []
        for e, g in zip(examples, grades):
            k = int(g.error_class.split("=")[1])
            grounded.append(g.parsed is not None and k >= 1 and g.parsed == follow(self.world, e.start, k)[-1])
        return {"acc": sum(g.correct for g in grades) / len(grades), "grounded": sum(grounded) / len(grades)}

    def warm_start(self, model, tokenizer, seed: int) -> Optional[dict[str, Any]]:
        """SFT on whole teacher episodes (:meth:`episode`), observation tokens masked out of the loss,
        checked every 50 steps on 60 held-out train questions until ``warm_target`` of the greedy
        answers are grounded; greedy accuracy is then near ``1 / (max_hops − min_hops + 1)``."""
        train = self.splits()["train"]
        rng = random.Random(seed)
        check = rng.sample(train, 60)
        held = set(check)
        pool = [q for q in train if q not in held]
        from rlsuite.tasks.warm import sft_until

        t0 = time.perf_counter()
        step, stats = sft_until(model, lambda: [self.episode(pool[rng.randrange(len(pool))], tokenizer, rng)
                                                for _ in range(16)],
                                lambda batch: sft_loss(model, tokenizer, batch),
                                lambda: self.greedy_check(model, tokenizer, check),
                                lambda st: st["grounded"] >= self.cfg.warm_target, self.cfg.warm_max_steps, 50,
                                {"acc": 0.0, "grounded": 0.0})
        return {"warm_steps": step, "warm_check_acc": stats["acc"], "warm_check_grounded": stats["grounded"],
                "warm_check_n": len(check), "warm_wall_s": round(time.perf_counter() - t0, 1)}


def _order(text: str) -> str:
    """A fixed, machine-independent order of questions (sha256 of the text)."""
    return hashlib.sha256(text.encode()).hexdigest()


def actions(completion: str) -> list[tuple[str, str]]:
    """The policy turns of a completion as ``(kind, argument)``: ``search``/``answer`` with the
    tag's content, in order; observation blocks are dropped first, so an observation never counts."""
    text = _INFO.sub(" ", completion)
    return [(m.group(1), m.group(2).strip()) for m in _ACTION.finditer(text)]


