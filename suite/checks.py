"""The start-of-run capability checks: what the algorithm needs against what the policy forward
and the resolved rollout engine can produce, and the levers' preconditions (exit 2 on a miss).

Its input: the model, the algorithm's ``needs`` and name, the fields the training forward
computes, the ``rollout`` and ``train`` config sections, the model name and the device.
"""

from __future__ import annotations

from rlsuite.suite.engines import KV_ARCHITECTURES, EngineInfo, resolve_engine
from rlsuite.suite.engines.native import cxx_compiler
from rlsuite.suite.errors import BadInput
from rlsuite.suite.fast_forward import unsupported
from rlsuite.suite.policy import capabilities


def check_capabilities(model, needs: frozenset[str], algo_name: str, update_fields: frozenset[str], rollout, train,
                       model_name: str, device) -> EngineInfo:
    """Raise BadInput naming what this run cannot do; return the resolved rollout engine."""
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
    t = train
    levers = [f"train.{k}" for k in ("share_prefix", "compile") if getattr(t, k)]
    if levers:
        why = unsupported(model, update_fields, 0)
        if why is not None:
            raise BadInput(f"{' and '.join(levers)} {'use' if len(levers) > 1 else 'uses'} the functional forward of suite/fast_forward.py, which does not "
                           f"serve {why}" + (f" (needed by algorithm '{algo_name}')" if why.startswith("fields") else "")
                           + f"; turn {' and '.join(levers)} off for this run")
    if t.compile and device.type == "cpu" and cxx_compiler() is None:
        raise BadInput("train.compile on a CPU needs a C++ compiler for torch.compile's kernels (g++, clang++ "
                       "or $CXX); install one or set train.compile=false")
    if rollout.rng == "row" and not engine.row_rng:
        raise BadInput(f"rollout.rng=row (and train.world_size > 1) needs the kv sampler, which supports "
                       f"{', '.join(KV_ARCHITECTURES)} models, not '{arch}'; valid rollout.rng for it: batch")
    if train.shard != "none" and not engine.traits.layerwise_sync:
        raise BadInput(f"train.shard={train.shard} syncs full weights into the rollout engine layer by layer; "
                       f"rollout.engine={rollout.engine} resolves to {engine.cls.__name__} for '{arch}' models, "
                       f"which does not take them; use a model the kv sampler supports ({', '.join(KV_ARCHITECTURES)}) "
                       f"or train.shard=none")
    return engine
