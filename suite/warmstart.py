"""The supervised warm start: one shared base for every algorithm and seed, the same bytes on
every machine.

Models built from scratch (``tiny``) get the task's ``warm_start`` before RL. Float results
differ between CPUs in the last bits (MKL/oneDNN kernels pick different code paths on AMX,
AVX-512 and AVX2 machines) and those differences grow over hundreds of SFT steps into a
different base model. So the base of every embedded task at its default configuration is
**committed**: ``tasks/bases/<task>__<model>.safetensors`` with a manifest
``<task>__<model>.json`` holding its sha256, the task configuration it was built for, the
machine that built it and the base's measured greedy accuracy. A run whose task configuration
and model match a manifest loads those bytes (sha256 checked on every load), records the
sha256 in ``env.json`` and in the run identity (:meth:`rlsuite.suite.config.RunSpec.config_hash`).

Any other configuration (a changed ``max_operand``, a task without a committed base) builds
its base locally as before: cached under ``$RLSUITE_CACHE`` (default ``~/.cache/rlsuite``)
keyed by the task config and version, the model, the thread count, the torch version and the
CPU model, built under an exclusive file lock (array jobs on one node build it once) and
published atomically (write to a temporary folder, then rename). Such a base is only
reproducible on the same CPU model; the run's ``env.json`` says ``source: built``.

``rlsuite warmstart TASK --rebuild`` regenerates a committed base (:func:`rebuild`). A rebuild
on another CPU model gives different bytes (and a different base accuracy): commit it only
deliberately, since it changes every run id of that task.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any, Optional

from rlsuite.suite.cache import cache_root  # noqa: F401  (re-exported: callers name it from here)
from rlsuite.suite.runfolder import cpu_model  # re-exported: the manifests and benchmarks name the CPU with it

WARM_SEED = 0  # the same base for every run of a comparison, whatever its seed
BASES = Path(__file__).resolve().parent.parent / "tasks" / "bases"
"""The committed bases: data of the tasks package (``tasks/bases/``), not of the engine."""


_ISA = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16", "amx_int8")


def cpu_isa() -> list[str]:
    """The instruction-set extensions that select torch's CPU kernels (from ``/proc/cpuinfo``)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return [x for x in _ISA if x in flags]
    except OSError:
        pass
    return []


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _task_doc(task_cfg: Any) -> dict:
    """The task configuration as a manifest records it (every field)."""
    d = dataclasses.asdict(task_cfg) if dataclasses.is_dataclass(task_cfg) else dict(task_cfg)
    return json.loads(json.dumps(d, default=str))  # tuples → lists, as in the manifest


def manifest_path(task_name: str, model_name: str) -> Path:
    return BASES / f"{task_name}__{model_name}.json"


def _pending(manifest: Path) -> Path:
    return manifest.with_suffix(".json.pending")


def _finish_publish(manifest: Path) -> None:
    """A rebuild publishes the weights, then the manifest (:func:`rebuild`); killed between the two
    renames it leaves the new weights beside the old manifest and the new manifest pending. Finish
    that publish when the pending manifest describes the weights in place; drop a pending manifest
    whose weights never arrived (killed before the first rename: the committed pair is intact)."""
    pending = _pending(manifest)
    if not pending.exists():
        return
    try:
        man = json.loads(pending.read_text())
    except (OSError, ValueError):
        pending.unlink(missing_ok=True)
        return
    weights = manifest.with_suffix(".safetensors")
    if weights.exists() and sha256_file(weights) == man.get("sha256"):
        os.replace(pending, manifest)
    else:
        pending.unlink(missing_ok=True)


def committed_base(task_name: str, task_cfg: Any, model_name: str) -> Optional[dict]:
    """The committed base's manifest when one exists for this task configuration and model,
    else ``None`` (the base is then built locally). Reads one small JSON file; no torch."""
    path = manifest_path(task_name, model_name)
    _finish_publish(path)
    if not path.exists():
        return None
    man = json.loads(path.read_text())
    if man.get("task_config") != _task_doc(task_cfg) or man.get("model") != model_name:
        return None
    return {**man, "path": str(path.with_suffix(".safetensors"))}


def base_identity(spec) -> Optional[str]:
    """The sha256 of the committed base a spec starts from (part of its run identity), or
    ``None`` (no warm start, a Hugging Face model, or a locally built base)."""
    from rlsuite.suite.models import MODELS

    if spec.model.warm_start != "task" or spec.model.name not in MODELS or not MODELS.get(spec.model.name).embedded:
        return None
    man = committed_base(spec.task.name, spec.task, spec.model.name)
    return man["sha256"] if man else None


def _load_committed(man: dict, task, model) -> dict[str, Any]:
    from safetensors.torch import load_model

    path = Path(man["path"])
    if not path.exists():
        raise RuntimeError(f"committed base {path} is missing (its manifest {manifest_path(task.name, man['model'])} "
                           f"exists); restore it from git or rebuild it: rlsuite warmstart {task.name} --rebuild")
    digest = sha256_file(path)
    if digest != man["sha256"]:
        raise RuntimeError(f"committed base {path} has sha256 {digest}, its manifest says {man['sha256']}: the file "
                           f"was changed; restore it from git or rebuild it: rlsuite warmstart {task.name} --rebuild")
    if str(man.get("task_version")) != str(task.version):
        raise RuntimeError(f"committed base {path} was built for {task.name} version {man.get('task_version')}, "
                           f"the task is version {task.version}: rebuild it: rlsuite warmstart {task.name} --rebuild")
    load_model(model, str(path), strict=True)
    return {**man["info"], "source": "committed", "sha256": digest, "path": str(path),
            "built_on": man.get("built_on", {}), "measured": man.get("measured", {})}


def warm_key(task, model_name: str, num_threads: int) -> str:
    import torch

    blob = json.dumps({"task": _task_doc(task.cfg), "task_version": task.version, "model": model_name,
                       "threads": num_threads, "torch": torch.__version__.split("+")[0], "cpu": cpu_model(),
                       "isa": cpu_isa()},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _build(task, model, tokenizer, num_threads: int) -> Optional[dict[str, Any]]:
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(WARM_SEED)
        return task.warm_start(model, tokenizer, WARM_SEED)


def warm_started(task, model, tokenizer, model_name: str, num_threads: int) -> dict[str, Any]:
    """Load the task's base into ``model``: the committed bytes when they match the task
    configuration, else the locally built and cached base (building it first if needed).

    Returns the warm-start info (steps, check accuracy, ``source`` committed|built, sha256,
    path), or ``{}`` when the task has no warm start.
    """
    man = committed_base(task.name, task.cfg, model_name)
    if man is not None:
        return _load_committed(man, task, model)
    import torch
    from safetensors.torch import load_model, save_model

    from rlsuite.suite.cache import build_once

    folder = cache_root() / "warmstart" / f"{task.name}-{warm_key(task, model_name, num_threads)}"
    extra = {"source": "built", "cpu_model": cpu_model(), "torch": torch.__version__.split("+")[0]}

    def build(tmp: Path) -> Optional[dict]:
        info = _build(task, model, tokenizer, num_threads)
        if info is not None:
            print(f"rlsuite: built the {task.name} warm start locally (no committed base matches this task "
                  f"configuration); it is reproducible on this CPU model only ({extra['cpu_model']})", file=sys.stderr)
            save_model(model, str(tmp / "model.safetensors"))
        return info

    info, built = build_once(folder, build)
    if info is None:
        return {}
    if not built:
        load_model(model, str(folder / "model.safetensors"), strict=True)
    return {**info, **extra, "sha256": sha256_file(folder / "model.safetensors"), "path": str(folder),
            "cached": not built}


def measure(spec, model, tok) -> dict[str, float]:
    """Greedy val and test accuracy of a base as a default run's step-0 eval computes them
    (``spec``: the task's default spec, resolved without an algorithm; its preset eval settings,
    the first ``eval.max_prompts`` prompts of each split)."""
    from rlsuite import tasks  # noqa: F401
    from rlsuite.suite.engines import make_engine
    from rlsuite.suite.evaluate import evaluate
    from rlsuite.suite.stop import stop_ids
    from rlsuite.suite.prompts import encode_prompt
    from rlsuite.tasks.base import TASKS

    task = TASKS.get(spec.task.name)(spec.task)
    out = {}
    try:
        for split in ("val", "test"):
            examples = task.splits()[split][: spec.eval.max_prompts or None]
            enc = [encode_prompt(task, e, tok, spec.model.chat_template) for e in examples]
            res, _ = evaluate(make_engine(spec.rollout.engine, model, tok, spec.rollout), tok, task, examples,
                              [e[0] for e in enc], [e[1] for e in enc], spec.eval, spec.rollout.max_new_tokens,
                              stop_ids(tok, model), spec.rollout.max_turns, spec.rollout.max_obs_tokens)
            out.update({f"{split}/{k}": v for k, v in res.items()})
    finally:
        task.close()
    return out


def rebuild(spec, num_threads: int = 1) -> dict[str, Any]:
    """Build the base of ``spec`` (a task's default spec, resolved without an algorithm:
    ``resolve(task, None, model, 0, need_algo=False)``) and commit-ready write it to
    ``tasks/bases/`` (safetensors + manifest). Returns the manifest."""
    import torch
    from safetensors.torch import save_model

    from rlsuite import tasks  # noqa: F401
    from rlsuite.suite.errors import BadInput
    from rlsuite.suite.models import MODELS
    from rlsuite.suite.models import load_model as load
    from rlsuite.tasks.base import TASKS, Task

    model_name = spec.model.name
    if not MODELS.get(spec.model.name).embedded:
        raise BadInput(f"model {model_name!r} is not built from scratch; only embedded models "
                       f"({', '.join(n for n, e in MODELS.items() if e.embedded)}) have a warm start")
    task = TASKS.get(spec.task.name)(spec.task)
    torch.set_num_threads(num_threads)
    try:
        model, tok, _ = load(spec.model)
        info = _build(task, model, tok, num_threads)
    finally:
        task.close()
    if info is None:
        with_warm = [n for n, c in TASKS.items() if c.warm_start is not Task.warm_start]
        raise BadInput(f"task {spec.task.name!r} has no warm start; tasks with one: {', '.join(with_warm)}")
    BASES.mkdir(parents=True, exist_ok=True)
    weights = BASES / f"{spec.task.name}__{model_name}.safetensors"
    path = manifest_path(spec.task.name, model_name)
    tmp = weights.with_suffix(".tmp")
    save_model(model, str(tmp))
    os.chmod(tmp, 0o644)
    # everything is computed before anything published is touched; then weights and manifest are
    # renamed into place back to back, the manifest first written as pending, so a kill leaves either
    # the old pair, or the new weights with the new manifest pending (finished by _finish_publish)
    man = {"task": spec.task.name, "task_version": str(task.version), "task_config": _task_doc(spec.task),
           "model": model_name, "sha256": sha256_file(tmp), "bytes": tmp.stat().st_size, "info": info,
           "built_on": {"cpu_model": cpu_model(), "cpu_isa": cpu_isa(), "torch": torch.__version__.split("+")[0],
                        "threads": num_threads, "machine": platform.machine()},
           "measured": measure(spec, model, tok)}
    _pending(path).write_text(json.dumps(man, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, weights)
    os.replace(_pending(path), path)
    return man
