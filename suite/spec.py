"""Resolve a run spec from names, preset, config files, ``--set`` and ``--budget``.

Every problem is collected and reported at once as :class:`rlsuite.suite.errors.BadInput`, before
anything is loaded or written. See :mod:`rlsuite.suite.config` for the resolution order.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional, Sequence

import dataclasses

from rlsuite.suite.config import (BUDGET_KEYS, SECTION_CLASSES, SECTIONS, Identity, ModelConfig, RunSpec, build,
                                  check_ranges, deep_merge, suggest)
from rlsuite.suite.errors import BadInput
from rlsuite.suite.lora import spec_problems as lora_problems
from rlsuite.suite.models import MODELS, check_model_name
from rlsuite.suite.registry import UnknownName
from rlsuite.suite.warmstart import base_identity



def nest(assignments: Sequence[tuple[str, Any]], flag: str, errors: list[str]) -> dict:
    """``[("rollout.top_p", 0.9)]`` → ``{"rollout": {"top_p": 0.9}}``; ``seed`` is top level."""
    out: dict = {}
    for key, value in assignments:
        if key == "seed":
            out["seed"] = value
            continue
        section, _, field = key.partition(".")
        if section not in SECTIONS or not field:
            errors.append(f"{flag} {key}: expected section.key with section one of {', '.join(SECTIONS)}"
                          + (f"; {suggest(section, list(SECTIONS))}".rstrip("; ") if section not in SECTIONS else ""))
            continue
        out.setdefault(section, {})[field] = value
    return out


def resolve(task: Optional[str], algo: Optional[str], model: Optional[str], seed: Optional[int],
            configs: Sequence[dict] = (), sets: Sequence[tuple[str, Any]] = (),
            budgets: Sequence[tuple[str, Any]] = (), sweep: Optional[str] = None, variant: Optional[str] = None,
            factors: Optional[dict] = None, tuning: Optional[dict] = None, need_algo: bool = True,
            recorded: bool = False) -> RunSpec:
    """Build and validate a :class:`RunSpec`; raise ``BadInput`` listing every problem. The identity
    inputs (the task's version, the committed base's sha256) are computed here and stored on the
    spec. ``need_algo=False``: where no algorithm runs (an eval, a warm start), ``algo`` may be None.
    ``recorded=True``: a document written by a run (:func:`spec_from_dict`), whose ``algo.teacher``
    names a model on the machine that ran it: whether that loads here is :func:`load_teacher`'s
    question when the run resumes, not the spec's (a committed run's copy is read on any machine)."""
    from rlsuite import algorithms  # noqa: F401  (registration)
    from rlsuite import tasks  # noqa: F401
    from rlsuite.algorithms.base import ALGORITHMS
    from rlsuite.tasks.base import TASKS

    errors: list[str] = []
    user: dict = {}
    for c in configs:
        unknown = [k for k in c if k not in SECTIONS and k != "seed"]
        errors += [f"config: unknown section '{k}'; {suggest(k, list(SECTIONS))}valid: {', '.join(SECTIONS)}, seed"
                   for k in unknown]
        user = deep_merge(user, {k: v for k, v in c.items() if k not in unknown})
    user = deep_merge(user, nest(sets, "--set", errors))
    for key, value in budgets:
        if key not in BUDGET_KEYS:
            errors.append(f"--budget {key}: unknown budget key; {suggest(key, list(BUDGET_KEYS))}"
                          f"valid: {', '.join(BUDGET_KEYS)}")
        else:
            user.setdefault("budget", {})[key] = value
    for section in SECTIONS:
        if section in user and not isinstance(user[section], dict):
            errors.append(f"section '{section}' must be a mapping, got {user[section]!r}")
            user.pop(section)

    def pick(flag_value: Optional[str], section: str) -> Optional[str]:
        name = flag_value if flag_value is not None else user.get(section, {}).pop("name", None)
        if flag_value is not None:
            given = user.get(section, {}).pop("name", None)
            if given is not None and str(given) != str(flag_value):  # never silently drop one of the two
                errors.append(f"{section}.name={given} (from --set or --config) contradicts --{section} {flag_value}; "
                              f"give the {section} once")
        return name

    task_name, algo_name = pick(task, "task"), pick(algo, "algo")
    model_name = pick(model, "model") or ModelConfig().name
    task_cls = algo_cls = None
    for kind, name, reg in (("task", task_name, TASKS), ("algorithm", algo_name, ALGORITHMS)):
        if name is None and kind == "algorithm" and not need_algo:
            continue
        if name is None:
            errors.append(f"no {kind} given; valid: {', '.join(reg.names())}")
            continue
        try:
            cls = reg.get(str(name))
        except UnknownName as e:
            errors.append(str(e))
            continue
        if kind == "task":
            task_cls, task_name = cls, reg.canonical(str(name))
        else:
            algo_cls, algo_name = cls, reg.canonical(str(name))
    try:
        check_model_name(str(model_name))
    except (UnknownName, BadInput) as e:
        errors.append(str(e))
    embedded = str(model_name) in MODELS and MODELS.get(str(model_name)).embedded
    preset = dict(task_cls.presets.get("embedded" if embedded else "hf", {})) if task_cls else {}
    if "budget" in user:  # a user budget replaces the preset's, it does not add limits to it
        preset.pop("budget", None)
    merged = deep_merge(preset, user)
    seed_value = seed if seed is not None else merged.get("seed", 0)
    if isinstance(seed_value, bool) or not isinstance(seed_value, int) or seed_value < 0:
        errors.append(f"seed must be a non-negative integer, got {seed_value!r}")
        seed_value = 0
    built: dict[str, Any] = {}
    for section, cls in SECTION_CLASSES.items():
        values = dict(merged.get(section, {}))
        if section == "model":
            values["name"] = str(model_name)
        built[section] = build(cls, values, section, errors)
    built["task"] = build(task_cls.Config, {**merged.get("task", {}), "name": task_name}, "task", errors) \
        if task_cls else None
    built["algo"] = build(algo_cls.Config, {**merged.get("algo", {}), "name": algo_name}, "algo", errors) \
        if algo_cls else None
    if algo_name is None and not need_algo:
        if merged.get("algo"):
            errors.append(f"algo: settings {sorted(merged['algo'])} given without an algorithm; give --algo")
    # range checks run even when other problems were found, so every problem is reported at once
    checkable = {k: (v if v is not None or k in ("task", "algo") else SECTION_CLASSES[k]()) for k, v in built.items()}
    spec = RunSpec(seed=seed_value, sweep=sweep, variant=variant, factors=dict(factors or {}),
                   tuning=dict(tuning or {}), **checkable)
    budget_named = task_cls is None or any(p.startswith(("budget.", "--budget")) for p in errors)
    errors += [p for p in check_ranges(spec) if not (budget_named and p.startswith("no budget set"))]
    errors += lora_problems(spec.model, spec.dist)  # model.lora_* with FSDP
    own = getattr(algo_cls, "own_mismatch_weight", "") if algo_cls else ""
    if own and built["loss"] is not None and built["loss"].is_correction != "none":
        errors.append(f"loss.is_correction={built['loss'].is_correction} with algo '{algo_name}': {own}, so a "
                      f"trainer-level weight would correct twice; valid: loss.is_correction=none for this entry "
                      f"(its own knob corrects), or an entry without its own π/μ weight")
    if algo_cls is not None and task_cls is not None and built["algo"] is not None:
        errors += algo_cls.task_problems(built["algo"], task_cls)  # e.g. reward components the task lacks
    if algo_cls is not None and built["algo"] is not None:  # algo.teacher (suite/distill.py): named, and read
        errors += teacher_problems(algo_cls, built["algo"], exists=not recorded)
    if algo_cls is not None and built["algo"] is not None and built["train"] is not None \
            and built["train"].critic_warmup_steps > 0 and "values" not in algo_cls(built["algo"]).needs:
        errors.append(f"train.critic_warmup_steps={built['train'].critic_warmup_steps} with algo '{algo_name}', "
                      f"which has no critic; valid: train.critic_warmup_steps=0 for it, or an entry with a critic "
                      f"(one that needs 'values', e.g. ppo)")
    required = {k: v for k, v in built.items() if not (k == "algo" and algo_name is None and not need_algo)}
    if errors or any(v is None for v in required.values()):
        raise BadInput(errors or ["invalid run spec"])
    return dataclasses.replace(spec, identity=Identity(task_version=str(task_cls.version),
                                                       base_sha256=base_identity(spec)))


def teacher_problems(algo_cls, cfg, exists: bool = True) -> list[str]:
    """``algo.teacher`` is read: by an entry that distils (``teacher_logp`` in its needs: ``opd``, or
    ``algo.distill_coef > 0``), and (``exists``) names something loadable here (nothing loaded)."""
    from rlsuite.suite.distill import teacher_name_problem

    name = getattr(cfg, "teacher", "")
    if not name:
        return []
    if "teacher_logp" not in algo_cls(cfg).needs:
        return [f"algo.teacher={name} is read only by a distilling entry; valid: algo.distill_coef > 0 "
                f"(the distillation term on algo '{cfg.name}'), --algo opd, or no algo.teacher"]
    problem = teacher_name_problem(name) if exists else None
    return [problem] if problem else []


def spec_from_dict(d: dict) -> RunSpec:
    """Rebuild a RunSpec from a ``spec.json`` document (used by resume and sweeps; an older
    document is read through :func:`rlsuite.suite.migrate.migrate`)."""
    from rlsuite.suite.migrate import migrate

    d = migrate(d)
    sections = {k: dict(v) for k, v in d.items() if k in SECTIONS}  # (run_id and labels are not sections)
    task = sections.get("task", {}).pop("name", None)
    algo = sections.get("algo", {}).pop("name", None)
    model = sections.get("model", {}).pop("name", None)
    return resolve(task, algo, model, d.get("seed", 0), configs=[sections], sweep=d.get("sweep"),
                   variant=d.get("variant"), factors=d.get("factors"), tuning=d.get("tuning"), recorded=True)


def out_dir_problem(out: Path, flag: str = "--out", existing: Optional[Path] = None) -> Optional[str]:
    """Why nothing could be written under ``out`` (a file in the way, a folder without write
    permission), or None. Checked before anything is loaded. ``existing``: a folder under ``out``
    that already holds a run status; re-running it (``completed`` → writes nothing) is allowed in
    a read-only ``out``."""
    out = Path(out)
    probe = out
    while not probe.exists() and not probe.is_symlink() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        where = "is a file" if probe == out else f"lies under {probe}, which is a file"
        return f"{flag} {out}: {where}; give a folder (it is created when missing)"
    if existing is not None and (existing / "status.json").exists():
        return None
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{flag} {out}: {'folder ' + str(probe) if probe != out else 'the folder'} is not writable"
    return None


def check_runtime(spec: RunSpec, out: Optional[Path] = None) -> None:
    """Checks of this machine that need nothing loaded (``BadInput``, exit 2, nothing written):
    a CUDA device when ``train.device=cuda``, an ``--out`` folder that can be written, and offline
    a hub model that is in the local cache (:func:`rlsuite.suite.models.check_model_available`)."""
    from rlsuite.suite.models import check_model_available

    problems = []
    try:
        check_model_available(spec.model.name)
    except BadInput as e:
        problems += e.problems
    if spec.train.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            problems.append("train.device=cuda but torch finds no CUDA device on this machine; valid: auto (CUDA "
                            "when available, else CPU), cpu, or run where a GPU is visible")
    if out is not None:
        p = out_dir_problem(Path(out), existing=Path(out) / spec.run_id)
        if p:
            problems.append(p)
    if problems:
        raise BadInput(problems)
