"""The start-of-run capability checks: what the algorithm needs against what the policy forward
and the resolved rollout engine can produce, and the levers' preconditions (exit 2 on a miss).

Its input: the model, the algorithm's ``needs`` and name, the fields the training forward
computes, the ``rollout``, ``train``, ``dist`` and ``optim`` config sections, the model name and the device;
and the ``auto`` levers resolved by capability (:func:`resolve_auto`).
"""

from __future__ import annotations

from rlsuite.suite.engines import KV_ARCHITECTURES, EngineInfo, resolve_engine
from rlsuite.suite.engines.native import cxx_compiler
from rlsuite.suite.errors import BadInput
from rlsuite.suite.fast_forward import unsupported
from rlsuite.suite.policy import capabilities


def resolve_auto(model, update_fields: frozenset[str], train, dist, optim) -> dict[str, bool]:
    """The ``auto`` levers of a run, resolved by capability (never by timing, so one spec resolves
    alike on every machine): ``train.share_prefix`` is on where the fast forward serves the model
    and the fields the entry's update needs (:func:`rlsuite.suite.fast_forward.unsupported`) and
    the run is not sharded; ``optim.fused`` is on unless ``dist.shard=fsdp``. An explicit value is
    kept. Keys are the dotted settings (what ``spec.json`` and ``env.json`` record under ``resolved``)."""
    share = train.share_prefix
    if share == "auto":
        share = dist.shard == "none" and unsupported(model, update_fields, 0) is None
    fused = optim.fused
    if fused == "auto":
        fused = dist.shard == "none"
    return {"train.share_prefix": bool(share), "optim.fused": bool(fused)}


def check_capabilities(model, needs: frozenset[str], algo_name: str, update_fields: frozenset[str], rollout, train,
                       dist, model_name: str, device) -> EngineInfo:
    """Raise BadInput naming what this run cannot do; return the resolved rollout engine.
    ``train``: with its ``auto`` levers resolved (:func:`resolve_auto`)."""
    fwd_caps = capabilities(model)
    arch = getattr(model.config, "model_type", None)
    engine = resolve_engine(rollout.engine, model)  # BadInput: an unsupported architecture, vLLM or a GPU missing
    eng_caps = engine.capabilities
    missing = []
    for need, have, who in (("entropy", fwd_caps, "policy forward"), ("hidden", fwd_caps, "policy forward"),
                            ("attn_stat", fwd_caps, "policy forward (needs model.attn_implementation=eager)"),
                            ("topk", eng_caps, "rollout engine"), ("behav_attn_stat", eng_caps, "rollout engine")):
        if need in needs and need not in have:
            missing.append(f"'{need}' (from the {who})")
    if missing:
        raise BadInput(f"algorithm '{algo_name}' needs {', '.join(missing)}, which the backend of "
                       f"model '{model_name}' with rollout.engine={rollout.engine} cannot produce")
    if "topk" in needs and rollout.topk == 0:
        raise BadInput(f"algorithm '{algo_name}' (as configured) needs the behaviour's top-K log-probs, but "
                       f"rollout.topk=0; set rollout.topk > 0 (default 20)")
    t = train
    levers = [f"train.{k}" for k in ("share_prefix", "compile") if getattr(t, k) is True]
    if levers:
        why = unsupported(model, update_fields, 0)
        if why is not None:
            raise BadInput(f"{' and '.join(levers)} {'use' if len(levers) > 1 else 'uses'} the functional forward "
                           f"of suite/fast_forward.py, which does not serve {why}"
                           + (f" (needed by algorithm '{algo_name}')" if why.startswith("fields") else "")
                           + f"; turn {' and '.join(levers)} off for this run")
    if t.compile and device.type == "cpu" and cxx_compiler() is None:
        raise BadInput("train.compile on a CPU needs a C++ compiler for torch.compile's kernels (g++, clang++ "
                       "or $CXX); install one or set train.compile=false")
    if rollout.rng == "row" and not engine.row_rng:
        raise BadInput(f"rollout.rng=row (and dist.world_size > 1) needs the kv sampler, which supports "
                       f"{', '.join(KV_ARCHITECTURES)} models, not '{arch}'; valid rollout.rng for it: batch")
    if dist.shard != "none" and not engine.traits.layerwise_sync:
        raise BadInput(f"dist.shard={dist.shard} syncs full weights into the rollout engine layer by layer; "
                       f"rollout.engine={rollout.engine} resolves to {engine.cls.__name__} for '{arch}' models, "
                       f"which does not take them; use a model the kv sampler supports ({', '.join(KV_ARCHITECTURES)}) "
                       f"or dist.shard=none")
    return engine
