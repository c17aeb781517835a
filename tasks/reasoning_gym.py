"""``reasoning_gym``: procedural reasoning problems from `reasoning-gym` (Stojanovski et al. 2025,
arXiv 2505.24760), one dataset or a mixture (the *battery*), graded by each dataset's own scorer.

Data: ``reasoning_gym.create_dataset(name, seed=gen_seed, size=pool, **params)`` for each entry of
``task.datasets`` (``"name"`` or ``"name:key=value,key=value"``, values parsed as YAML scalars or
lists: ``"basic_arithmetic:min_terms=2,max_terms=2,max_digits=2"``; a string given for an
enum-typed parameter names its member by value or name, ``"aiw:task_types=[siblings],
task_type_weights=[1.0]"``). The package is pinned
(``reasoning-gym==0.1.25``): generators change between versions, and the dataset, its parameters,
``pool`` and ``gen_seed`` are fields of the run id, so a problem set is named by its configuration.
A dataset whose problems depend on Python's string-hash seed (a generator that draws from a set:
``ransom_note`` in 0.1.25) would give every process other problems; it is refused (exit 2) after a
probe in a second process with another ``PYTHONHASHSEED`` (:func:`hash_seed_dependence`, cached).

Splits, per dataset: the generator draws item ``idx`` from ``Random(seed + idx)``, so two seeds'
pools overlap and a seed split would leak; here the ``pool`` items are **deduplicated by their
rendered question** (the first index wins) and split by a hash of that question: the ``n_test``
questions first in ``sha256("test:" + question)`` order are test, the next ``n_val`` in
``sha256("val:" + question)`` order among the rest are val, and train is the rest (at most
``n_train`` of them, in index order), so the three are disjoint by construction and the same on
every machine and in any order. A mixture concatenates the datasets' splits (every dataset the same
test and val counts, so the split's accuracy is the macro average; a question two datasets share,
e.g. a sum in a sums dataset and in a sums-and-differences one, may be tested in both) and takes out
of every dataset's train any question that any dataset holds out for test or val, and orders val and test by
another hash of the question (salt ``order-test`` / ``order-val``), so the first
``eval.max_prompts`` mix every dataset. A dataset with fewer distinct questions than
``n_test + n_val + 1`` is refused (exit 2) with its count.

Answer balance (``max_answer_share`` < 1): many generators give one answer to most problems (letter
counting: the count ``1`` for ~80% of one-to-three-word texts; gcd: ``1`` for ~30%), so a policy that
always says it beats the base without any skill. With the cap set, each dataset's deduplicated pool is
thinned, before the split, so that no gold answer is more than that share of it: per answer the first
``k`` questions in ``sha256("balance:" + question)`` order, ``k = min(count, ⌊share · N⌋)`` with ``N``
the kept total (a fixed point, :func:`cap_answer_share`). A pool that the cap leaves too small (a
yes/no dataset under a cap below 0.5) is refused with its counts.

:meth:`ReasoningGym.problem_space` reports, per dataset, how many distinct questions the pool held
and an estimate of the space the generator draws from (the occupancy estimate from the number of
repeats; a lower bound when none repeats), so a study can check that train + test use a small
share of it (``benchmarks/rgym_battery.py`` prints it).

Prompt: the user turn of a chat model, the dataset's question followed by ``instruction`` (default:
give only the final answer inside ``<answer></answer>`` tags). Extraction (``extract``, a field
of the run id): ``tag`` = the content of the last complete ``<answer>…</answer>`` (none → nothing
extractable, reward 0); ``plain`` = the whole reply, stripped; ``auto`` = the last tag if there is
one, else, for a problem whose gold is a number, the last number of the reply (``2 + 9 = 11`` →
``11``), else the text after the last ``answer is`` / ``answer:`` (quotes, ``**`` and a trailing
period removed: ``The answer is "dunt".`` → ``dunt``), else the reply's last non-empty line; for a
one-word gold (``Yes``, a reversed word) the first word of that (``Yes, it follows.`` → ``Yes``). Small
chat models (SmolLM2-135M) do not use tags; ``auto`` is what lets their answers be read at all.

Grading: the dataset's ``score_answer(answer, entry)``. **Correct means a score of exactly 1.0**;
the scorers give partial credit (e.g. 0.01 or 0.05 for a wrong non-empty answer), so the reward is
binary unless ``partial_credit`` is set (then the reward is the score, ``correct`` still means
1.0). A scorer that raises is a grade error (``Grade.errored``: counted as ``reward/grade_errors``,
never a 0).

Eval metrics (a mixture): ``acc_<label>`` per dataset (label: the dataset's name, ``name_2`` for
its second entry…), reported as ``greedy_acc_<label>`` / ``sampled_acc_<label>``. Aggregates
across datasets of different difficulty should use the per-dataset gain over the base (or
``(s − base) / (1 − base)``), not an IQM of raw accuracies, which is about the easy datasets.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Sequence

from rlsuite.suite.errors import BadInput
from rlsuite.tasks.base import Grade, Task, TaskConfig, register

PINNED = "0.1.25"
_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class Item:
    """One problem: its dataset entry's ``label`` in the battery, the generator index and the
    rendered question and gold answer (None where the dataset's scorer accepts many answers)."""

    label: str
    idx: int
    question: str
    answer: Optional[str]


def _hash(salt: str, text: str) -> bytes:
    return hashlib.sha256(f"{salt}:{text}".encode()).digest()


def parse_dataset_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``"name:key=value,key=value"`` → ``(name, {key: value})``; values are YAML scalars or
    flow lists (``ops=[+,-]`` is a list, ``max_terms=2`` an int). Splits on commas outside
    brackets."""
    import yaml

    name, _, rest = spec.partition(":")
    params: dict[str, Any] = {}
    depth, cur, parts = 0, "", []
    for ch in rest:
        depth += 1 if ch in "[{" else -1 if ch in "]}" else 0
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    for p in parts:
        k, eq, v = p.partition("=")
        if not eq or not k.strip():
            raise ValueError(f"dataset spec {spec!r}: {p!r} is not key=value")
        try:
            params[k.strip()] = yaml.safe_load(v.strip())
        except yaml.YAMLError:
            raise ValueError(f"dataset spec {spec!r}: cannot parse the value of {k.strip()!r}: {v!r}") from None
    return name.strip(), params


def battery_labels(datasets: Sequence[str]) -> list[str]:
    """Each dataset spec's label in a battery: its dataset's name, ``name_2`` for that name's second
    entry, … (the ``<label>`` of the ``acc_<label>`` eval metrics)."""
    names = [parse_dataset_spec(s)[0] for s in datasets]
    return [n if names[:i].count(n) == 0 else f"{n}_{names[:i].count(n) + 1}" for i, n in enumerate(names)]


def enum_params(config_cls, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with the strings given for an enum-typed field of the dataset's config dataclass
    (``Enum`` or a list of one) turned into members by value or name (``aiw:task_types=[siblings]``
    → ``[TaskType.SIBLINGS]``): a spec string cannot name a member otherwise. A string that is
    neither is a ``ValueError`` listing the valid values."""
    import dataclasses
    import enum
    import typing

    try:
        hints = typing.get_type_hints(config_cls)
    except Exception:  # noqa: BLE001 - unresolvable annotations: pass the values through
        return params
    out = dict(params)
    for f in dataclasses.fields(config_cls) if dataclasses.is_dataclass(config_cls) else ():
        if f.name not in out:
            continue
        hint = hints.get(f.name)
        args = [a for a in (typing.get_args(hint) or (hint,)) if isinstance(a, type)]
        enum_cls = next((a for a in args if issubclass(a, enum.Enum)), None)
        if enum_cls is None:
            continue

        def member(v, cls=enum_cls, field=f.name):
            if isinstance(v, cls) or not isinstance(v, str):
                return v
            for m in cls:
                if v in (m.value, m.name, m.name.lower()):
                    return m
            raise ValueError(f"{field}={v!r} is not one of {', '.join(str(m.value) for m in cls)}")

        v = out[f.name]
        out[f.name] = [member(x) for x in v] if isinstance(v, list) else member(v)
    return out


PROBE_ITEMS = 64
"""Items of a dataset generated under two string-hash seeds by :func:`hash_seed_dependence`."""


def make_dataset(spec: str, gen_seed: int, size: int):
    """reasoning-gym's dataset for ``spec`` (``name:key=value,...``) with ``gen_seed`` and ``size``
    items, enum-typed parameters converted; the generator's own errors propagate (the task turns
    them into one BadInput)."""
    import reasoning_gym as rg
    from reasoning_gym.factory import DATASETS

    name, params = parse_dataset_spec(spec)
    return rg.create_dataset(name, seed=gen_seed, size=size, **enum_params(DATASETS[name][1], params))


def fingerprint(spec: str, gen_seed: int, n: int = PROBE_ITEMS) -> str:
    """sha256 of the first ``n`` questions and answers of ``spec`` generated with ``gen_seed``."""
    ds = make_dataset(spec, gen_seed, n)
    text = "\x00".join(f"{ds[i]['question']}\x01{ds[i]['answer']}" for i in range(n))
    return hashlib.sha256(text.encode()).hexdigest()


def hash_seed_dependence(spec: str, gen_seed: int) -> Optional[str]:
    """Why ``spec``'s problems depend on Python's string-hash seed, or None when they do not.

    Some generators draw from a ``set`` turned into a list (``ransom_note`` 0.1.25: ``rng.choice(
    list(self.letters))``), whose order follows ``PYTHONHASHSEED``, random per process: the same seed
    then gives other problems in every process. Probed once per machine: :data:`PROBE_ITEMS` items
    generated here and in a process with another hash seed must match; the answer is cached under
    ``$RLSUITE_CACHE/reasoning_gym/hash_seed/``. A probe process that fails is an error, never a pass.
    Such a dataset's problems are generated in a child process at :data:`PINNED_HASH_SEED`
    (:func:`pinned_entries`), so they are the same in every process.
    """
    import json
    import os
    import subprocess
    import sys

    from rlsuite.suite.cache import cache_root
    from rlsuite.suite.runfolder import atomic_write_json

    key = hashlib.sha256(f"{PINNED}|{spec}|{gen_seed}|{PROBE_ITEMS}".encode()).hexdigest()[:16]
    path = cache_root() / "reasoning_gym" / "hash_seed" / f"{key}.json"
    if path.is_file():
        return json.loads(path.read_text())["why"]
    here = os.environ.get("PYTHONHASHSEED")
    other = "2" if here == "1" else "1"  # a string-hash seed other than this process's
    code = ("import sys\nfrom rlsuite.tasks.reasoning_gym import fingerprint\n"
            "print(fingerprint(sys.argv[1], int(sys.argv[2])))")
    proc = subprocess.Popen([sys.executable, "-c", code, spec, str(gen_seed)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONHASHSEED": other})
    mine = fingerprint(spec, gen_seed)
    out, err = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"reasoning_gym: the hash-seed probe of {spec!r} failed (exit {proc.returncode}):\n"
                           f"{err[-2000:]}")
    why = None if out.strip().splitlines()[-1] == mine else (
        f"its first {PROBE_ITEMS} problems differ between this process and one with another string-hash seed "
        f"(PYTHONHASHSEED={other}): its generator iterates a set")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, {"spec": spec, "gen_seed": gen_seed, "version": PINNED, "why": why})
    return why


PINNED_HASH_SEED = "0"
"""The string-hash seed (``PYTHONHASHSEED``) under which the problems of a dataset whose generator
follows it are generated (:func:`pinned_entries`)."""


def pinned_entries(spec: str, gen_seed: int, size: int) -> list[dict[str, Any]]:
    """The first ``size`` entries of ``spec`` generated with ``gen_seed`` in a child process whose
    string-hash seed is :data:`PINNED_HASH_SEED`: for the generators that iterate a set
    (:func:`hash_seed_dependence`), the same problems in every process and on every machine. The
    entries come back as JSON; one that JSON cannot carry is an error, never a silent change. A child
    that fails is an error."""
    import json
    import os
    import subprocess
    import sys

    code = ("import json, sys\n"
            "from rlsuite.tasks.reasoning_gym import make_dataset\n"
            "n = int(sys.argv[3])\n"
            "ds = make_dataset(sys.argv[1], int(sys.argv[2]), n)\n"
            "json.dump([ds[i] for i in range(n)], sys.stdout, allow_nan=False)\n")
    proc = subprocess.run([sys.executable, "-c", code, spec, str(gen_seed), str(size)], capture_output=True,
                          text=True, env={**os.environ, "PYTHONHASHSEED": PINNED_HASH_SEED}, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"reasoning_gym: generating {spec!r} at PYTHONHASHSEED={PINNED_HASH_SEED} failed "
                           f"(exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    entries = json.loads(proc.stdout)
    if len(entries) != size:
        raise RuntimeError(f"reasoning_gym: the pinned generation of {spec!r} gave {len(entries)} entries, not {size}")
    return entries


def cap_answer_share(items: Sequence[Item], share: float) -> list[Item]:
    """``items`` thinned so that no gold answer is more than ``share`` of those kept (items without a
    gold are all kept and count in the total). Per answer ``a`` with ``c_a`` items, the first
    ``k_a = min(c_a, ⌊share · N⌋)`` in ``sha256("balance:" + question)`` order are kept, where ``N`` is
    the kept total: the largest fixed point of ``N = n_none + Σ_a min(c_a, ⌊share · N⌋)``, found by
    iterating down from ``len(items)``. The result keeps the input's order; ``share ≥ 1`` keeps all.

    By hand: answers ``1`` ×8, ``2`` ×1, ``3`` ×1 at share 0.5: N = 10 → 5 + 1 + 1 = 7 → 3 + 1 + 1 = 5 →
    2 + 1 + 1 = 4 → 2 + 1 + 1 = 4 (fixed): two ``1``s, one ``2``, one ``3``."""
    if share >= 1.0:
        return list(items)
    counts = Counter(it.answer for it in items if it.answer is not None)
    n_none = sum(it.answer is None for it in items)
    n = len(items)
    while True:
        cap = math.floor(share * n + 1e-9)
        nxt = n_none + sum(min(c, cap) for c in counts.values())
        if nxt == n:
            break
        n = nxt
    groups: dict[str, list[Item]] = {}
    for it in items:
        if it.answer is not None:
            groups.setdefault(it.answer, []).append(it)
    keep: set[str] = set()
    for group in groups.values():
        keep |= {it.question for it in sorted(group, key=lambda it: _hash("balance", it.question))[:cap]}
    return [it for it in items if it.answer is None or it.question in keep]


def space_estimate(n: int, distinct: int) -> tuple[float, bool]:
    """The size of a uniform problem space from ``n`` draws with ``distinct`` distinct values:
    the occupancy estimate solving ``distinct = N(1 − (1 − 1/N)^n)``; when no value repeats, the
    95% lower bound ``n² / (2·ln 20)`` (the birthday bound). Returns ``(N, is_lower_bound)``."""
    if distinct >= n:
        return n * n / (2 * math.log(20)), True
    if distinct <= 1:
        return float(distinct), False

    def filled(size: float) -> float:  # expected distinct values of n uniform draws from `size`
        return size * -math.expm1(n * math.log1p(-1 / size)) if size > 1 else 1.0

    lo, hi = float(distinct), 2.0 * distinct
    while filled(hi) < distinct:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if filled(mid) < distinct else (lo, mid)
    return hi, False


@dataclass(frozen=True, kw_only=True)
class ReasoningGymConfig(TaskConfig):
    ranges = {"pool": "[2, inf)", "n_test": "[1, inf)", "n_val": "[1, inf)", "n_train": "[1, inf)",
              "gen_seed": "[0, inf)", "max_answer_share": "(0, 1]"}
    """Declared ranges of this class's numeric fields (see ``TaskConfig.ranges``)."""
    datasets: tuple[str, ...] = ("basic_arithmetic:min_terms=2,max_terms=2,max_digits=2,operators=[+,-]",)
    """The battery: reasoning-gym dataset names, each optionally with parameters
    (``name:key=value,...``); two or more make a mixture that trains on all and evaluates each."""
    pool: int = 10000
    """Items generated per dataset (indices 0..pool-1) before deduplication."""
    gen_seed: int = 0
    """The generators' seed (``create_dataset(seed=...)``); the same seed gives the same pool everywhere."""
    n_test: int = 300
    """Test questions per dataset (hash-selected)."""
    n_val: int = 100
    """Val questions per dataset (hash-selected among the rest)."""
    n_train: int = 5000
    """At most this many train questions per dataset (the rest of the pool, in index order): a
    mixture's datasets are drawn about equally when each has at least this many."""
    extract: Literal["tag", "plain", "auto"] = "tag"
    """Answer extraction: the last ``<answer>…</answer>`` (``tag``), the whole reply (``plain``) or
    ``auto`` (a tag, else the last number for numeric golds, else the text after the last
    "answer is", else the last line; see the module docstring)."""
    instruction: str = "Give only the final answer, inside <answer></answer> tags."
    """Line after the question in every prompt; "" = none."""
    partial_credit: bool = False
    """Reward = the scorer's score (partial credit) instead of 1 for a score of 1.0 and 0 otherwise."""
    max_answer_share: float = field(default=1.0, metadata={"identity": "when_set"})
    """The most any one gold answer may be of a dataset's distinct questions (1.0 = no cap): above it,
    questions with that answer are dropped before the split (see the module docstring), so a constant
    answer scores about this share at most (the test split is a hash-chosen subset of the capped pool:
    its share may differ by sampling). It bounds a constant's score, not its pull: a policy can still
    converge on one reply (``benchmarks/rgym_battery/``)."""

    def __post_init__(self) -> None:
        if not self.datasets:
            raise ValueError("datasets must name at least one reasoning-gym dataset")
        for s in self.datasets:
            parse_dataset_spec(s)


@register
class ReasoningGym(Task):
    name = "reasoning_gym"
    summary = "reasoning-gym procedural datasets (one or a battery); hash splits; score == 1.0 is correct."
    version = "1"
    citation = "Stojanovski et al. 2025, Reasoning Gym: Reasoning Environments for RL, arXiv:2505.24760"
    Config = ReasoningGymConfig
    cfg: ReasoningGymConfig
    presets = {
        # tiny model: mechanics only (a character-level model cannot read these questions)
        "embedded": {"task": {"instruction": "", "extract": "plain", "pool": 2000, "n_test": 50, "n_val": 20},
                     "rollout": {"group_size": 4, "prompts_per_step": 4, "max_new_tokens": 16},
                     "budget": {"samples": 64}, "eval": {"max_prompts": 16}},
        "hf": {"rollout": {"group_size": 8, "prompts_per_step": 16, "max_new_tokens": 48, "temperature": 1.0},
               "optim": {"lr": 2e-6}, "budget": {"samples": 4096}, "eval": {"max_prompts": 0}},
    }

    def __init__(self, cfg: ReasoningGymConfig) -> None:
        super().__init__(cfg)
        self._splits: Optional[dict[str, list[Item]]] = None
        self._ds: dict[str, Any] = {}
        self._pinned: dict[str, list[dict[str, Any]]] = {}  # label -> entries generated at the pinned hash seed
        self._space: dict[str, dict[str, Any]] = {}
        self.labels = battery_labels(cfg.datasets)

    # -- data ------------------------------------------------------------------------------
    def _dataset(self, label: str):
        if label not in self._ds:
            _import_rg()  # the pinned version, or one BadInput
            from reasoning_gym.factory import DATASETS

            spec = self.cfg.datasets[self.labels.index(label)]
            name, params = parse_dataset_spec(spec)
            if name not in DATASETS:
                raise BadInput(f"reasoning_gym: unknown dataset {name!r}; valid: {', '.join(sorted(DATASETS))}")
            try:
                self._ds[label] = make_dataset(spec, self.cfg.gen_seed, self.cfg.pool)
            except (TypeError, ValueError, AssertionError) as e:
                raise BadInput(f"reasoning_gym: dataset {name!r} refuses parameters {params}: {e}") from None
            if hash_seed_dependence(spec, self.cfg.gen_seed) is not None:  # after the parameters were accepted
                self._pinned[label] = pinned_entries(spec, self.cfg.gen_seed, self.cfg.pool)
        return self._ds[label]

    def _entry(self, label: str, idx: int) -> dict[str, Any]:
        """Entry ``idx`` of dataset ``label``: generated here, or at the pinned hash seed for a
        generator that follows the process's string-hash seed (:func:`pinned_entries`)."""
        ds = self._dataset(label)
        return self._pinned[label][idx] if label in self._pinned else ds[idx]

    def splits(self) -> dict[str, list[Item]]:
        if self._splits is None:
            c = self.cfg
            out: dict[str, list[Item]] = {"train": [], "val": [], "test": []}
            pools: list[list[Item]] = []  # per dataset, its questions outside its own test
            for label in self.labels:
                seen: dict[str, Item] = {}
                for i in range(c.pool):
                    e = self._entry(label, i)
                    q = e["question"]
                    if q not in seen:
                        a = e.get("answer")
                        seen[q] = Item(label, i, q, None if a is None else str(a))
                distinct = list(seen.values())
                est, lower = space_estimate(c.pool, len(distinct))
                self._space[label] = {"dataset": c.datasets[self.labels.index(label)], "generated": c.pool,
                                      "distinct": len(distinct), "space_estimate": est, "space_is_lower_bound": lower}
                capped = ""
                if c.max_answer_share < 1.0:
                    n_distinct = len(distinct)
                    distinct = cap_answer_share(distinct, c.max_answer_share)
                    self._space[label]["kept_by_answer_cap"] = len(distinct)
                    capped = (f" after task.max_answer_share={c.max_answer_share:g} kept {len(distinct)} of "
                              f"{n_distinct} ({len({it.answer for it in distinct})} distinct answers)")
                if len(distinct) < c.n_test + c.n_val + 1:
                    raise BadInput(f"reasoning_gym: dataset {c.datasets[self.labels.index(label)]!r} has only "
                                   f"{len(distinct)} distinct questions in a pool of "
                                   f"{c.pool}{capped}; test + val need "
                                   f"{c.n_test + c.n_val} and train at least 1 (lower task.n_test / task.n_val, "
                                   f"raise task.pool{', raise task.max_answer_share' if capped else ''} "
                                   f"or make the problems harder)")
                test = sorted(distinct, key=lambda it: _hash("test", it.question))[:c.n_test]
                mine = {it.question for it in test}
                rest = [it for it in distinct if it.question not in mine]
                val = sorted(rest, key=lambda it: _hash("val", it.question))[:c.n_val]
                mine |= {it.question for it in val}
                out["test"] += test
                out["val"] += val
                pools.append(rest)
            # train: the rest of each dataset, less every question any dataset holds out (two datasets whose
            # spaces overlap select their test and val apart, and one's held-out question may rank past the
            # other's cut); then at most n_train of them, in index order
            held = {it.question for k in ("test", "val") for it in out[k]}
            for rest in pools:
                out["train"] += [it for it in rest if it.question not in held][:c.n_train]
            for k in ("val", "test"):  # a salt of its own: the selection's salt would put big pools first
                out[k].sort(key=lambda it: _hash(f"order-{k}", it.question))
            self._splits = out
        return self._splits

    def problem_space(self) -> list[dict[str, Any]]:
        """Per dataset: the spec, items generated, distinct questions, the estimated size of the
        space they are drawn from (and whether it is a lower bound) and the share of it that the
        splits use (train + val + test)."""
        s = self.splits()
        used = {lab: sum(it.label == lab for k in s for it in s[k]) for lab in self.labels}
        return [{**self._space[lab], "label": lab, "used": used[lab],
                 "used_share": used[lab] / self._space[lab]["space_estimate"]} for lab in self.labels]

    # -- prompts and grades ------------------------------------------------------------------
    def prompt(self, example: Item) -> list[dict[str, str]]:
        text = example.question.rstrip()
        if self.cfg.instruction:
            text = f"{text}\n{self.cfg.instruction}"
        return [{"role": "user", "content": text}]

    def gold(self, example: Item) -> Optional[str]:
        return example.answer

    def reference_completion(self, example: Item) -> str:
        a = example.answer if example.answer is not None else ""
        return f"<answer>{a}</answer>" if self.cfg.extract == "tag" else a

    def extract(self, example: Item, completion: str) -> Optional[str]:
        """The answer ``completion`` gives to ``example`` (None: nothing extractable); ``auto`` reads
        it by the shape of the example's gold (a number, one word, anything else)."""
        a = example.answer
        return extract_answer(completion, self.cfg.extract, numeric=_is_number(a),
                              word=a is not None and len(a.split()) == 1 and not _is_number(a))

    def grade(self, example: Item, completion: str) -> Grade:
        parsed = self.extract(example, completion)
        if parsed is None:
            return Grade(reward=0.0, correct=False, parsed=None)
        ds = self._dataset(example.label)
        try:
            score = float(ds.score_answer(parsed, self._entry(example.label, example.idx)))
        except Exception as e:  # noqa: BLE001 - a scorer failure is a grade error, never a 0
            return Grade.errored(f"reasoning_gym {example.label} scorer raised {type(e).__name__}: {e}")
        if not math.isfinite(score) or not 0.0 <= score <= 1.0:
            return Grade.errored(f"reasoning_gym {example.label} scorer returned {score!r} (not in [0, 1])")
        correct = score == 1.0
        return Grade(reward=score if self.cfg.partial_credit else float(correct), correct=correct, parsed=parsed)

    def eval_metrics(self, examples: Sequence[Item], grades: Sequence[Grade]) -> dict[str, float]:
        """``acc_<label>`` per dataset of a mixture (none for a single dataset: it is greedy_acc)."""
        if len(self.labels) < 2:
            return {}
        by: dict[str, list[bool]] = {}
        for e, g in zip(examples, grades):
            by.setdefault(e.label, []).append(g.correct)
        return {f"acc_{lab}": sum(v) / len(v) for lab, v in by.items()}

    def feedback(self, example: Item, completion: str, grade: Grade, detail: str = "full") -> str:
        if detail == "binary" or grade.correct:
            return super().feedback(example, completion, grade, detail)
        if grade.parsed is None:
            return "No final answer found: put only the final answer inside <answer></answer> tags."
        return f"Your answer {grade.parsed} is incorrect."

    @classmethod
    def describe(cls) -> dict[str, Any]:
        d = super().describe()
        d["needs"] = [f"reasoning-gym=={PINNED}"]
        return d


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_ANSWER_IS = re.compile(r"answer(?:\s+is)?\s*[:=]?\s*", re.IGNORECASE)


def _is_number(text: Optional[str]) -> bool:
    return text is not None and re.fullmatch(r"\s*-?\d+(?:\.\d+)?\s*", text) is not None


def extract_answer(completion: str, mode: str, numeric: bool = False, word: bool = False) -> Optional[str]:
    """The answer in ``completion`` under extraction ``mode`` (``tag`` / ``plain`` / ``auto``; the
    rules are the module docstring's); None when nothing is extractable."""
    found = _TAG.findall(completion)
    if mode == "tag" or (mode == "auto" and found):
        return found[-1].strip() if found else None
    text = completion.strip()
    if mode == "plain" or not text:
        return text or None
    if numeric:
        nums = _NUMBER.findall(text.replace(",", ""))
        return nums[-1] if nums else None
    hits = list(_ANSWER_IS.finditer(text))
    tail = text[hits[-1].end():] if hits and text[hits[-1].end():].strip() else text.splitlines()[-1]
    tail = tail.strip().splitlines()[0] if tail.strip() else ""
    tail = tail.strip(" \t*`'\".")
    if word and tail:  # a one-word gold (Yes / No, a reversed word): the answer's first word
        tail = tail.split()[0].strip(" \t*`'\".,:;!?")
    return tail or None


def _import_rg():
    try:
        import reasoning_gym
    except ImportError:
        raise BadInput(f"reasoning_gym: the reasoning-gym package is not installed (pip install "
                       f"reasoning-gym=={PINNED}; it needs Python >= 3.11)") from None
    from importlib.metadata import version

    v = version("reasoning-gym")
    if v != PINNED:
        raise BadInput(f"reasoning_gym: reasoning-gym {v} is installed; this task is pinned to {PINNED} "
                       f"(generators change between versions): pip install reasoning-gym=={PINNED}")
    return reasoning_gym
