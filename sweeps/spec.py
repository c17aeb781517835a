"""Sweep specs: YAML → validated :class:`SweepSpec` → one :class:`rlsuite.suite.config.RunSpec` per run.

Keys (see ``sweeps/example.yaml`` for a complete commented spec):

``name``        sweep name; results go to ``<root>/<name>/<run_id>/``
``tasks``       list of task names or ``{name, set}`` (per-task overrides, e.g. a data path)
``algorithms``  ``all`` (every registered entry) or a list of names or ``{name, variant, set}``
                (named variants / ablation arms; ``variant`` labels the arm in reports)
``seeds``       list of seeds, or an int n for ``0..n-1``
``budget``      the matched compute budget, ``{unit: value}`` with one unit for the whole sweep
``model``       model name / HF id / local path (default ``tiny``)
``base``        ``task`` (the task's shared warm start; default), ``none``, or a checkpoint
                path every run starts from
``factors``     factorial ablation: ``{section.key: [values...]}``; every combination is run
``set``         overrides for all runs (``{section.key: value}`` or nested sections)
``resources``   cluster resources (:class:`Resources`)
``lr_scaling``  optional learning-rate rule over a factor, for batch-size studies:
                ``{factor: rollout.prompts_per_step, base: 16, power: 0.5, variants: [sqrt-lr]}``
                sets ``optim.lr = lr₀·(value/base)^power`` for the listed arm variants (lr₀ is
                the lr the run would have without the rule); other arms keep lr₀ (no retuning)
``tuning``      options of ``rlsuite sweep tune`` (:mod:`rlsuite.sweeps.tune`): ``lr``, ``seeds``, ``knobs``,
                ``metric`` (and the ``record`` a tuned spec carries)
``comparisons`` the planned (confirmatory) comparisons, fixed before any pilot: a list of
                ``{a, b, direction, smallest_effect}`` (:class:`Comparison`): arm labels as reports
                show them (``name`` or ``name:variant``; ``b`` may be ``base``, the step-0 eval),
                ``direction`` ``greater`` (a > b), ``less`` or ``two-sided`` (default), and the
                smallest effect of interest in score units (0.03 = 3 points of accuracy). The
                report's Holm family is this list (× tasks); the all-pairs table is exploratory
``checks``      manipulation checks, fixed before the confirmatory runs: a list of
                ``{arm, signal, agg, op, value, seeds, after}`` (:class:`Check`): does the mechanism an
                effect is about engage? A check that fails in the pilot makes the effect "not
                testable at this preset"; one that fails later is reported beside the verdict
``score``       how the report and ``sweep plan`` score the runs for the planned comparisons, fixed
                with them (a registered study records it): ``{score, k, metric, normalise,
                per_dataset, confidence}``, the :class:`rlsuite.reports.config.ReportConfig` fields
                of the same names (e.g. ``{per_dataset: false}``: a battery's pooled metric, one
                task, instead of one task per dataset); unset fields keep the report's defaults
``allow_identical_arms``  ``true`` to run arms that resolve to the same settings under different
                ``variant`` labels (refused by default: usually a typo in an arm's ``set``)

Validation reports every problem at once, each with its location (``algorithms[2].set: …``).
``name`` must be one safe folder name (no ``/``, not ``.``/``..``, no leading dot, printable).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Optional


from rlsuite.suite.config import BUDGET_KEYS, MAX_BUDGET, RunSpec, build, read_yaml
from rlsuite.suite.errors import BadInput
from rlsuite.suite.registry import suggest

SPEC_KEYS = ("name", "tasks", "algorithms", "seeds", "budget", "model", "base", "factors", "set", "resources",
             "description", "tuning", "lr_scaling", "allow_identical_arms", "comparisons", "checks", "score")
SCORE_KEYS = ("score", "k", "metric", "normalise", "per_dataset", "confidence")
"""The report settings a spec's ``score`` may fix (the fields of ``ReportConfig`` that decide a planned
comparison's verdict)."""
COMPARISON_KEYS = ("a", "b", "direction", "smallest_effect")
DIRECTIONS = ("greater", "less", "two-sided")
CHECK_KEYS = ("arm", "signal", "agg", "op", "value", "seeds", "after")
CHECK_AGGS = ("mean", "final", "change", "rel_change")
CHECK_OPS = (">=", "<=")
TUNING_KEYS = ("lr", "seeds", "knobs", "metric", "record")
BUNDLED = Path(__file__).resolve().parent
MAX_SEEDS = 10_000
"""Most seeds per arm a spec may ask for."""
MAX_NAME_BYTES = 100
"""Longest sweep name (UTF-8 bytes): it names a folder, and run files must fit the 255-byte limit."""


@dataclass(frozen=True, kw_only=True)
class Resources:
    """Cluster resources of every job of the sweep (SLURM through submitit)."""

    partition: Optional[str] = None
    """SLURM partition (null = the cluster default)."""
    account: Optional[str] = None
    """SLURM account."""
    qos: Optional[str] = None
    """SLURM quality of service."""
    constraint: Optional[str] = None
    """SLURM node constraint (e.g. 'h100')."""
    gpus_per_node: int = 0
    """GPUs per job."""
    cpus_per_task: int = 1
    """CPUs per task (torch threads come from train.num_threads)."""
    tasks_per_node: int = 1
    """Tasks (processes) per node: a data-parallel run has one rank per task, so
    ``nodes × tasks_per_node`` must equal ``dist.world_size`` (checked before submitting)."""
    nodes: int = 1
    """Nodes per job (more than 1 only on SLURM; the run folder must be on a shared file system)."""
    mem_gb: float = 4.0
    """Memory per job in GB."""
    timeout_min: int = 60
    """Time limit per job in minutes (submitit's local default of 2 is far too short)."""
    array_parallelism: int = 64
    """Most array tasks running at once on SLURM."""
    signal_delay_s: int = 90
    """Seconds before the time limit at which SLURM sends the preemption signal."""
    max_requeues: int = 3
    """How often a timed-out or preempted job is requeued."""

    ranges: ClassVar[dict[str, str]] = {
        "gpus_per_node": "[0, inf)", "cpus_per_task": "[1, inf)", "tasks_per_node": "[1, inf)", "nodes": "[1, inf)",
        "mem_gb": "(0, inf)", "timeout_min": "[1, inf)", "array_parallelism": "[1, inf)", "signal_delay_s": "[0, inf)",
        "max_requeues": "[0, inf)"}
    """Declared ranges (:class:`rlsuite.suite.config.Range`), checked by :func:`rlsuite.suite.config.build`."""


@dataclass(frozen=True)
class Arm:
    """One algorithm arm: registry name, optional variant label, overrides."""

    name: str
    variant: Optional[str] = None
    set: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Comparison:
    """One planned comparison ``a − b`` (see the module docstring's ``comparisons``)."""

    a: str
    """Arm label (``name`` or ``name:variant``)."""
    b: str
    """Arm label, or ``base`` (the step-0 eval of the same seeds)."""
    direction: str = "two-sided"
    """``greater`` (H1: a > b), ``less`` (H1: a < b) or ``two-sided``."""
    smallest_effect: float = 0.0
    """The smallest difference of interest in score units (the plan's and the power's target)."""

    @property
    def label(self) -> str:
        op = {"greater": ">", "less": "<", "two-sided": "≠"}[self.direction]
        return f"{self.a} {op} {self.b}"


@dataclass(frozen=True)
class Check:
    """One manipulation check: per run, ``agg`` of metric ``signal`` (a ``metrics.jsonl`` key such
    as ``stats/clip_frac``) over the steps after the first ``after`` share of the run, compared
    with ``value`` by ``op``; the check passes when at least ``seeds`` (a share, e.g. 0.8 = 4 of 5)
    of the arm's runs pass."""

    arm: str
    """Arm label the check is about, or ``all``."""
    signal: str
    """The ``metrics.jsonl`` key."""
    agg: str = "mean"
    """``mean`` over the steps, ``final`` (last step), ``change`` (last − first) or ``rel_change``
    ((last − first) / |first|)."""
    op: str = ">="
    """``>=`` or ``<=``."""
    value: float = 0.0
    """The threshold, in the signal's units."""
    seeds: float = 0.8
    """Share of the arm's runs that must pass."""
    after: float = 0.0
    """Share of each run's steps left out at the start (warm-up) before aggregating."""

    @property
    def label(self) -> str:
        tail = f" after {self.after:.0%}" if self.after else ""
        return f"{self.arm}: {self.agg} {self.signal}{tail} {self.op} {self.value:g} in ≥ {self.seeds:.0%} of runs"


@dataclass(frozen=True)
class SweepSpec:
    name: str
    tasks: tuple[tuple[str, dict], ...]
    algorithms: tuple[Arm, ...]
    seeds: tuple[int, ...]
    budget: dict
    model: str = "tiny"
    base: str = "task"
    factors: dict = field(default_factory=dict)
    set: dict = field(default_factory=dict)
    resources: Resources = field(default_factory=Resources)
    tuning: dict = field(default_factory=dict)
    lr_scaling: dict = field(default_factory=dict)
    allow_identical_arms: bool = False
    comparisons: tuple[Comparison, ...] = ()
    checks: tuple[Check, ...] = ()
    score: dict = field(default_factory=dict)
    source: str = ""


def resolve_path(name_or_path: str) -> Path:
    """A bundled spec name (``leaderboard``) or a YAML path."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.exists():
            raise BadInput(f"sweep spec {p}: no such file")
        return p
    bundled = BUNDLED / f"{name_or_path}.yaml"
    if bundled.exists():
        return bundled
    names = sorted(x.stem for x in BUNDLED.glob("*.yaml"))
    raise BadInput(f"unknown sweep '{name_or_path}'; {suggest(name_or_path, names)}bundled: {', '.join(names)} "
                   f"(or give a path to a YAML file)")


def _flatten(d: Any, where: str, errors: list[str]) -> list[tuple[str, Any]]:
    """``{"rollout": {"top_p": 1}}`` or ``{"rollout.top_p": 1}`` → ``[("rollout.top_p", 1)]``."""
    if d is None:
        return []
    if not isinstance(d, dict):
        errors.append(f"{where}: expected a mapping, got {d!r}")
        return []
    out = []
    for k, v in d.items():
        if "." in str(k) or not isinstance(v, dict):
            out.append((str(k), v))
        else:
            out += [(f"{k}.{kk}", vv) for kk, vv in v.items()]
    return out


def load(name_or_path: str) -> SweepSpec:
    """Parse and structurally validate a sweep spec (names are checked by :func:`expand`)."""
    path = resolve_path(name_or_path)
    raw = read_yaml(path, f"sweep spec {path}", "give a YAML file or a bundled spec name")
    if not isinstance(raw, dict):
        raise BadInput(f"{path}: a sweep spec is a mapping with keys {', '.join(SPEC_KEYS)}")
    return parse(raw, str(path))


def parse(raw: dict, source: str = "<spec>") -> SweepSpec:
    errors: list[str] = []
    for k in raw:
        if k not in SPEC_KEYS:
            errors.append(f"{source}: unknown key '{k}'; {suggest(str(k), list(SPEC_KEYS))}"
                          f"valid: {', '.join(SPEC_KEYS)}")
    name = raw.get("name")
    if not safe_name(name):
        errors.append(f"{source}: 'name' must be one folder name (results go to <out>/<name>/): a non-empty "
                      f"printable string without '/' or '\\', not '.' or '..' and not starting with '.', got {name!r}")
    elif len(str(name).encode()) > MAX_NAME_BYTES:
        errors.append(f"{source}: 'name' is {len(str(name).encode())} bytes long; at most {MAX_NAME_BYTES} (it names "
                      f"the sweep's folder, whose files must stay under the file system's 255-byte name limit)")
    tasks = []
    tasks_raw = raw.get("tasks") or []
    if not isinstance(tasks_raw, list):
        errors.append(f"{source}: 'tasks' must be a list of task names or {{name, set}}, got {tasks_raw!r}")
        tasks_raw = []
    for i, t in enumerate(tasks_raw):
        if isinstance(t, str):
            tasks.append((t, {}))
        elif isinstance(t, dict) and isinstance(t.get("name"), str) and set(t) <= {"name", "set"}:
            tasks.append((t["name"], t.get("set") or {}))
        else:
            errors.append(f"{source}: tasks[{i}]: expected a task name or {{name, set}}, got {t!r}")
    if not raw.get("tasks"):
        errors.append(f"{source}: 'tasks' must list at least one task")
    algos_raw = raw.get("algorithms", "all")
    arms: list[Arm] = []
    if algos_raw == "all":
        from rlsuite import algorithms  # noqa: F401
        from rlsuite.algorithms.base import ALGORITHMS

        arms = [Arm(n) for n in ALGORITHMS.names() if not n.startswith("_")]
    elif isinstance(algos_raw, list) and algos_raw:
        for i, a in enumerate(algos_raw):
            if isinstance(a, str):
                arms.append(Arm(a))
            elif isinstance(a, dict) and isinstance(a.get("name"), str) and set(a) <= {"name", "variant", "set"} \
                    and isinstance(a.get("variant"), (str, type(None))):
                arms.append(Arm(a["name"], a.get("variant"), a.get("set") or {}))
            else:
                errors.append(f"{source}: algorithms[{i}]: expected a name or {{name, variant, set}}, got {a!r}")
    else:
        errors.append(f"{source}: 'algorithms' must be 'all' or a non-empty list")
    seeds_raw = raw.get("seeds", 3)
    if isinstance(seeds_raw, int) and not isinstance(seeds_raw, bool) and seeds_raw > MAX_SEEDS \
            or isinstance(seeds_raw, list) and len(seeds_raw) > MAX_SEEDS:
        seeds = ()
        n = seeds_raw if isinstance(seeds_raw, int) else len(seeds_raw)
        errors.append(f"{source}: 'seeds': {n} seeds per arm; at most {MAX_SEEDS} (a sweep of that size is a "
                      f"typo, and expanding it exhausts memory)")
    elif isinstance(seeds_raw, int) and not isinstance(seeds_raw, bool) and seeds_raw > 0:
        seeds = tuple(range(seeds_raw))
    elif isinstance(seeds_raw, list) and seeds_raw and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                                           for s in seeds_raw):
        seeds = tuple(seeds_raw)
    else:
        seeds = ()
        errors.append(f"{source}: 'seeds' must be a positive int or a list of non-negative ints, got {seeds_raw!r}")
    budget = raw.get("budget") or {}
    if not isinstance(budget, dict) or len(budget) != 1 or next(iter(budget)) not in BUDGET_KEYS:
        errors.append(f"{source}: 'budget' must set exactly one unit for the whole sweep, one of "
                      f"{', '.join(BUDGET_KEYS)} (got {budget!r})")
    elif not _finite(next(iter(budget.values())), positive=True) or float(next(iter(budget.values()))) >= MAX_BUDGET:
        unit, value = next(iter(budget.items()))
        errors.append(f"{source}: budget.{unit} must be a finite number in (0, {MAX_BUDGET:g}), got {value!r}")
    factors = raw.get("factors") or {}
    if not isinstance(factors, dict) or not all(isinstance(v, list) and v for v in factors.values()):
        errors.append(f"{source}: 'factors' maps section.key to a non-empty list of values")
        factors = {}
    res_errors: list[str] = []
    res_raw = raw.get("resources") or {}
    if not isinstance(res_raw, dict):
        res_errors.append("'resources' must be a mapping of "
                          f"{', '.join(f.name for f in dataclasses.fields(Resources))}, got {res_raw!r}")
        res_raw = {}
    resources = build(Resources, res_raw, "resources", res_errors)
    errors += [f"{source}: {e}" for e in res_errors]
    tuning = raw.get("tuning") or {}
    errors += [f"{source}: {p}" for p in _tuning_problems(tuning)]
    if not isinstance(tuning, dict):
        tuning = {}
    allow_identical = raw.get("allow_identical_arms", False)
    if not isinstance(allow_identical, bool):
        errors.append(f"{source}: 'allow_identical_arms' must be true or false, got {allow_identical!r}")
    base = raw.get("base", "task")
    if not isinstance(base, str):
        errors.append(f"{source}: 'base' must be 'task', 'none' or a checkpoint path")
    lr_scaling = raw.get("lr_scaling") or {}
    if lr_scaling and (not isinstance(lr_scaling, dict) or set(lr_scaling) != {"factor", "base", "power", "variants"}
                       or not isinstance(lr_scaling.get("factor"), str) or lr_scaling["factor"] not in factors
                       or not _finite(lr_scaling.get("base"), positive=True)
                       or not _finite(lr_scaling.get("power")) or not isinstance(lr_scaling.get("variants"), list)):
        errors.append(f"{source}: 'lr_scaling' needs factor (one of the factors), base (a number > 0), power (a "
                      f"number) and variants (a list of arm variants)")
    labels = {a.name if a.variant is None else f"{a.name}:{a.variant}" for a in arms}
    comparisons = _comparisons(raw.get("comparisons"), labels, bool(factors), source, errors)
    checks = _checks(raw.get("checks"), labels, bool(factors), source, errors)
    score = _score(raw.get("score"), source, errors)
    if errors:
        raise BadInput(errors)
    return SweepSpec(lr_scaling=dict(lr_scaling), name=name, tasks=tuple(tasks), algorithms=tuple(arms), seeds=seeds,
                     budget=dict(budget), model=str(raw.get("model", "tiny")), base=base, factors=dict(factors),
                     set=raw.get("set") or {}, resources=resources or Resources(), tuning=tuning,
                     allow_identical_arms=allow_identical,
                     comparisons=comparisons, checks=checks, score=score, source=source)


def _score(raw: Any, source: str, errors: list[str]) -> dict:
    """The spec's ``score`` settings, each checked by the report's own validation."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        errors.append(f"{source}: 'score' must be a mapping of {', '.join(SCORE_KEYS)}, got {raw!r}")
        return {}
    unknown = [k for k in raw if k not in SCORE_KEYS]
    if unknown:
        errors.append(f"{source}: score: unknown key(s) {', '.join(map(str, unknown))}; valid: {', '.join(SCORE_KEYS)}")
        return {}
    from rlsuite.reports.config import ReportConfig
    from rlsuite.reports.errors import ReportError

    if "metric" in raw and not (isinstance(raw["metric"], str) and raw["metric"]):
        errors.append(f"{source}: score: metric must be an eval metric name (e.g. greedy_acc), got {raw['metric']!r}")
        return {}
    try:
        ReportConfig(**raw)
    except (ReportError, TypeError) as exc:
        errors.append(f"{source}: score: {exc}")
        return {}
    return dict(raw)


def _known_label(label: Any, labels: set[str], factors: bool) -> bool:
    """An arm label of the sweep (with factors, arms carry factor levels after the variant: any
    label that starts with an arm's label is accepted)."""
    return isinstance(label, str) and (label in labels or (factors and any(
        label.startswith(f"{x}:") or label.startswith(f"{x.split(':')[0]}:") for x in labels)))


def _entries(raw: Any, key: str, required: tuple[str, ...], allowed: tuple[str, ...], source: str,
             errors: list[str]) -> list[tuple[str, dict]]:
    """The mappings of the list ``raw`` under spec key ``key``, each with its location; every entry
    that is not a mapping with the ``required`` keys (and only ``allowed`` ones) is an error."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        errors.append(f"{source}: '{key}' must be a list of {{{', '.join(allowed)}}}, got {raw!r}")
        return []
    out = []
    for i, c in enumerate(raw):
        where = f"{source}: {key}[{i}]"
        if not isinstance(c, dict) or not set(required) <= set(c) or set(c) - set(allowed):
            optional = [k for k in allowed if k not in required]
            errors.append(f"{where}: expected a mapping with keys {', '.join(required)} and optionally "
                          f"{', '.join(optional)}; got {c!r}")
            continue
        out.append((where, c))
    return out


def _comparisons(raw: Any, labels: set[str], factors: bool, source: str, errors: list[str]) -> tuple[Comparison, ...]:
    out = []
    for where, c in _entries(raw, "comparisons", ("a", "b"), COMPARISON_KEYS, source, errors):
        problems = [f"{where}.{k}: {c[k]!r} is not an arm of this sweep; {suggest(str(c[k]), sorted(labels))}"
                    f"valid: {', '.join(sorted(labels))}{' or base' if k == 'b' else ''}"
                    for k in ("a", "b") if not (_known_label(c[k], labels, factors) or (k == "b" and c[k] == "base"))]
        d = c.get("direction", "two-sided")
        if d not in DIRECTIONS:
            problems.append(f"{where}.direction: {d!r}; valid: {', '.join(DIRECTIONS)}")
        e = c.get("smallest_effect", 0.0)
        if not _finite(e) or e < 0:
            problems.append(f"{where}.smallest_effect: must be a number ≥ 0 in score units (0.03 = 3 points), "
                            f"got {e!r}")
        if c["a"] == c["b"]:
            problems.append(f"{where}: a and b are the same arm ({c['a']!r})")
        errors += problems
        if not problems:
            out.append(Comparison(c["a"], c["b"], d, float(e)))
    keys = [(c.a, c.b) for c in out]
    for k in sorted({k for k in keys if keys.count(k) > 1}):
        errors.append(f"{source}: comparisons: {k[0]} vs {k[1]} is listed twice")
    return tuple(out)


def _checks(raw: Any, labels: set[str], factors: bool, source: str, errors: list[str]) -> tuple[Check, ...]:
    out = []
    for where, c in _entries(raw, "checks", ("arm", "signal", "value"), CHECK_KEYS, source, errors):
        problems = []
        if not (c["arm"] == "all" or _known_label(c["arm"], labels, factors)):
            problems.append(f"{where}.arm: {c['arm']!r} is not an arm of this sweep; "
                            f"valid: {', '.join(sorted(labels))} or all")
        if not isinstance(c["signal"], str) or not c["signal"]:
            problems.append(f"{where}.signal: a metrics.jsonl key such as stats/clip_frac, got {c['signal']!r}")
        if c.get("agg", "mean") not in CHECK_AGGS:
            problems.append(f"{where}.agg: {c.get('agg')!r}; valid: {', '.join(CHECK_AGGS)}")
        if c.get("op", ">=") not in CHECK_OPS:
            problems.append(f"{where}.op: {c.get('op')!r}; valid: {', '.join(CHECK_OPS)}")
        if not _finite(c["value"]):
            problems.append(f"{where}.value: a finite number, got {c['value']!r}")
        for k, lo_open in (("seeds", True), ("after", False)):
            v = c.get(k, 0.8 if k == "seeds" else 0.0)
            if not _finite(v) or not ((0 < v <= 1) if lo_open else (0 <= v < 1)):
                problems.append(f"{where}.{k}: a share in {'(0, 1]' if lo_open else '[0, 1)'}, got {v!r}")
        errors += problems
        if not problems:
            out.append(Check(c["arm"], c["signal"], c.get("agg", "mean"), c.get("op", ">="), float(c["value"]),
                             float(c.get("seeds", 0.8)), float(c.get("after", 0.0))))
    return tuple(out)


def safe_name(name: Any) -> bool:
    """One safe path component: non-empty, printable, no separator, not ``.``/``..``, no leading dot."""
    return isinstance(name, str) and bool(name) and name.isprintable() and "/" not in name and "\\" not in name \
        and not name.startswith(".")


def _finite(x: Any, positive: bool = False) -> bool:
    try:
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and (x > 0 or not positive)
    except OverflowError:  # an int beyond float range
        return False


def _tuning_problems(t: Any) -> list[str]:
    """Problems of the ``tuning`` mapping (:mod:`rlsuite.sweeps.tune`)."""
    if not isinstance(t, dict):
        return [f"'tuning' must be a mapping with keys {', '.join(TUNING_KEYS)}, got {t!r}"]
    out = [f"unknown key 'tuning.{k}'; {suggest(str(k), list(TUNING_KEYS))}valid: {', '.join(TUNING_KEYS)}"
           for k in t if k not in TUNING_KEYS]
    if "lr" in t and not (isinstance(t["lr"], list) and t["lr"] and all(_finite(v, positive=True) for v in t["lr"])):
        out.append(f"'tuning.lr' must be a non-empty list of learning rates > 0, got {t['lr']!r}")
    if "seeds" in t and not (isinstance(t["seeds"], list) and t["seeds"] and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in t["seeds"])):
        out.append(f"'tuning.seeds' must be a non-empty list of non-negative ints, got {t['seeds']!r}")
    if "knobs" in t and not (isinstance(t["knobs"], dict) and all(
            isinstance(v, dict) and len(v) == 1 and all(isinstance(x, list) and x for x in v.values())
            for v in t["knobs"].values())):
        out.append(f"'tuning.knobs' maps an algorithm to {{field: [values]}} (one field), got {t['knobs']!r}")
    if "metric" in t and not isinstance(t["metric"], str):
        out.append(f"'tuning.metric' must be a metric name such as greedy_acc, got {t['metric']!r}")
    if "record" in t and not isinstance(t["record"], dict):
        out.append(f"'tuning.record' must be a mapping (written by rlsuite sweep tune), got {t['record']!r}")
    return out


def _factor_label(combo: dict) -> str:
    return ",".join(f"{k.split('.')[-1]}={v}" for k, v in combo.items())


def expand(sweep: SweepSpec) -> list[RunSpec]:
    """Every (task × arm × factor combination × seed) run spec; every problem reported at once."""
    from rlsuite.suite.spec import resolve

    errors: list[str] = []
    runs: list[RunSpec] = []
    arm_of: list[int] = []  # algorithms[i] of each run
    keys = list(sweep.factors)
    combos = [dict(zip(keys, vals)) for vals in itertools.product(*sweep.factors.values())] or [{}]
    model, base_sets = sweep.model, []
    if sweep.base == "none":
        base_sets = [("model.warm_start", "none")]
    elif sweep.base != "task":
        model = sweep.base  # every run starts from this checkpoint
    common = _flatten(sweep.set, "set", errors)
    for ti, (task, task_set) in enumerate(sweep.tasks):
        for ai, arm in enumerate(sweep.algorithms):
            for combo in combos:
                sets = base_sets + common + _flatten(task_set, f"tasks[{ti}].set", errors) \
                    + _flatten(arm.set, f"algorithms[{ai}].set", errors) + list(combo.items())
                variant = arm.variant
                if combo:
                    variant = f"{variant}:{_factor_label(combo)}" if variant else _factor_label(combo)
                for seed in sweep.seeds:
                    try:
                        kw = dict(sweep=sweep.name, variant=variant, factors=combo,
                                  tuning=sweep.tuning.get("record", {}) if sweep.tuning else {})
                        spec = resolve(task, arm.name, model, seed, sets=sets, budgets=list(sweep.budget.items()), **kw)
                        rule = sweep.lr_scaling
                        if rule and arm.variant in rule["variants"] and rule["factor"] in combo:
                            lr = (spec.optim.lr
                                  * (float(combo[rule["factor"]]) / float(rule["base"])) ** float(rule["power"]))
                            spec = resolve(task, arm.name, model, seed, sets=sets + [("optim.lr", lr)],
                                           budgets=list(sweep.budget.items()), **kw)
                        runs.append(spec)
                        arm_of.append(ai)
                    except BadInput as e:
                        where = f"tasks[{ti}]={task}, algorithms[{ai}]={arm.name}"
                        errors += [f"{where}: {p}" for p in e.problems]  # deduplicated below
                        break  # the same problem would repeat for every seed
    if errors:
        raise BadInput(list(dict.fromkeys(errors)))
    res = sweep.resources
    tasks = res.nodes * res.tasks_per_node  # one data-parallel rank per task (suite/distributed.py)
    for ws in sorted({r.dist.world_size for r in runs} - {tasks}):
        n = sum(r.dist.world_size == ws for r in runs)
        errors.append(f"{sweep.source}: {n} run(s) have dist.world_size={ws} but each job has {tasks} task(s) "
                      f"(resources.nodes={res.nodes} × resources.tasks_per_node={res.tasks_per_node}); they must match")
    if errors:
        raise BadInput(errors)
    ids = [r.run_id for r in runs]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise BadInput(f"{sweep.source}: arms that resolve to identical runs: {', '.join(dupes)}; "
                       "give them different settings or drop one")
    if not sweep.allow_identical_arms:
        errors += _identical_arms(sweep, runs, arm_of)
    if errors:
        raise BadInput(errors)
    return runs


def _identical_arms(sweep: SweepSpec, runs: list[RunSpec], arm_of: list[int]) -> list[str]:
    """Pairs of arms whose runs all differ only in their ``variant`` label (the same training
    twice). Arms that coincide at some factor levels only (e.g. two lr rules at the base batch
    size) are different arms."""
    ids: dict[int, set[str]] = {}
    for r, ai in zip(runs, arm_of):
        ids.setdefault(ai, set()).add(dataclasses.replace(r, variant=None, factors={}).run_id)  # id without labels
    pairs = [(i, j) for i in sorted(ids) for j in sorted(ids) if i < j and ids[i] == ids[j]]

    def arm(i: int) -> str:
        a = sweep.algorithms[i]
        return f"algorithms[{i}] ({a.name}{f', variant {a.variant!r}' if a.variant else ''})"

    return [f"{sweep.source}: {arm(i)} and {arm(j)} resolve to identical settings (only the variant label differs); "
            f"give them different settings, drop one, or set allow_identical_arms: true to run both"
            for i, j in pairs]


def as_dict(sweep: SweepSpec) -> dict:
    d = dataclasses.asdict(sweep)
    d["algorithms"] = [dataclasses.asdict(a) for a in sweep.algorithms]
    return d
