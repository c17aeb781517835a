"""LoRA adapters on the policy (``model.lora_rank`` > 0), through PEFT (the ``lora`` extra, pinned:
:data:`PEFT_PIN`), not a hand-written adapter.

What a LoRA run does differently from full fine-tuning, each in one place:

* **the trained parameters**: :func:`attach` wraps the loaded (and warm-started) policy in a PEFT
  ``PeftModel`` with rank-``r`` adapters on ``model.lora_targets`` (PEFT's ``all-linear`` by
  default: every linear layer of the decoder, not the output head); the base is frozen, so the
  optimizer (``TrainState.build_optimizer``: the parameters that require gradients) holds the
  adapters and their AdamW state only. The adapters' initial weights depend on the run seed only
  (PEFT's initialisation: A Kaiming-uniform, B zero, so the policy starts as the base);
* **the reference**: π_ref and π_init are :class:`BaseView` s, the policy's forward with its
  adapters disabled (PEFT's ``disable_adapter()``), sharing the frozen base: no second copy. An
  entry that refreshes its reference (``ctx.refresh_reference``) gets a frozen merged copy then
  (π_ref is no longer the base);
* **the rollout engines** take a plain Hugging Face model and state dicts with HF names
  (``load_weights(state, version)``): :func:`hf_state` computes the merged weights
  ``W + (α/r)·B·A`` (PEFT's ``get_delta_weight``) without touching the trained model, and
  :func:`plain` builds a merged copy for an engine's constructor;
* **checkpoints** hold the adapters (:func:`trained_state`, PEFT's ``get_peft_model_state_dict``)
  and their optimizer state; the frozen base is rebuilt on resume like the reference of a full
  fine-tuning run and checked by its sha256 (``base_sha256``);
* **final/** holds the merged policy as ``save_pretrained`` writes it (what ``rlsuite eval`` and
  every reader of a run folder load) and ``final/adapter/``, the adapter as PEFT saves it:
  ``PeftModel.from_pretrained(base, "final/adapter").merge_and_unload()`` gives ``final/``'s
  weights (:func:`final_writer`);
* **dropout** (``model.lora_dropout``) acts in forwards that build a graph (the training
  forward) only: the scoring passes (π_old, π_ref, under ``torch.no_grad``) and the engine's
  merged weights see the adapters without it (:class:`GradDropout`).

Levers: the functional forward of ``train.share_prefix`` / ``train.compile``
(:mod:`rlsuite.suite.fast_forward`) applies each decoder linear's adapter as PEFT's
``Linear.forward`` does (``W x + b + (α/r)·B·A·drop(x)``, the base frozen, so the shared-prefix
update serves a LoRA run and ``train.share_prefix=auto`` resolves to on for it, as for full
fine-tuning); π_ref / π_init take it inside ``disable_adapter()``. Adapters of another form
(:func:`layer_problem`) keep the HF forward. ``dist.shard=fsdp`` is refused (exit 2);
``rollout.engine=vllm`` takes the merged weights through its reload path like any other engine.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable, Optional

import torch
from torch import Tensor, nn

from rlsuite.suite.errors import BadInput

PEFT_PIN = "peft==0.21.2"
"""The PEFT release the ``lora`` extra pins (``pyproject.toml``); the one the tests run."""

ADAPTER = "default"
"""PEFT's name of the run's one adapter."""


def require_peft():
    """The ``peft`` module, or BadInput (exit 2) naming the extra to install."""
    try:
        import peft
    except ImportError:
        raise BadInput(f"model.lora_rank > 0 trains LoRA adapters through PEFT, which is not installed; "
                       f"install the lora extra: pip install -e \".[lora]\" ({PEFT_PIN})") from None
    return peft


def is_lora(model: Any) -> bool:
    """Whether ``model`` is a policy with PEFT LoRA adapters (:func:`attach`)."""
    return type(model).__module__.startswith("peft.") and hasattr(model, "disable_adapter")


def targets(spec: str) -> Any:
    """PEFT's ``target_modules`` of a ``model.lora_targets`` value: ``all-linear`` as it is, else
    the comma-separated module names (``q_proj,v_proj`` → ``["q_proj", "v_proj"]``)."""
    return spec if spec == "all-linear" else [t.strip() for t in spec.split(",") if t.strip()]


class GradDropout(nn.Module):
    """Dropout of probability ``p`` on the adapter's input in a forward that builds a graph (the
    training forward), the identity under ``torch.no_grad`` (scoring passes). ``x [..., H] →
    [..., H]``."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return nn.functional.dropout(x, self.p, training=torch.is_grad_enabled())


def attach(model: nn.Module, cfg, seed: int) -> nn.Module:
    """``model`` with LoRA adapters of ``cfg`` (the ``model`` section: ``lora_rank``,
    ``lora_alpha``, ``lora_dropout``, ``lora_targets``), base frozen; PEFT injects the adapters
    into ``model`` itself. The adapters' initial weights depend on ``seed`` only. BadInput when
    ``lora_targets`` names no module of the model."""
    peft = require_peft()
    from rlsuite.suite.prompts import seed_for

    config = peft.LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                             target_modules=targets(cfg.lora_targets), bias="none", task_type="CAUSAL_LM")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed_for(seed, "lora") % 2**63)
        try:
            pm = peft.get_peft_model(model, config)
        except ValueError as e:
            names = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, nn.Linear)})
            raise BadInput(f"model.lora_targets={cfg.lora_targets}: {str(e).splitlines()[0]}; valid: all-linear or "
                           f"comma-separated names of the model's linear layers ({', '.join(names)})") from None
    for m in pm.modules():  # PEFT's dropout acts in train mode; this one in forwards with gradients only
        drop = getattr(m, "lora_dropout", None)
        if isinstance(drop, nn.ModuleDict) and ADAPTER in drop and cfg.lora_dropout > 0:
            drop[ADAPTER] = GradDropout(cfg.lora_dropout)
    return pm


def _lora_layers(model) -> dict[str, nn.Module]:
    """HF module name → PEFT LoRA layer of ``model`` (a PeftModel)."""
    from peft.tuners.lora import LoraLayer

    return {n: m for n, m in model.get_base_model().named_modules() if isinstance(m, LoraLayer)}


def base_state(model) -> dict[str, Tensor]:
    """The frozen base's weights under the HF names (``q_proj.base_layer.weight`` →
    ``q_proj.weight``; the adapters left out): the state dict of the model before :func:`attach`."""
    out = {}
    for k, v in model.get_base_model().state_dict().items():
        if ".lora_" in k:
            continue
        out[k.replace(".base_layer.", ".")] = v
    return out


@torch.no_grad()
def hf_state(model: nn.Module) -> dict[str, Tensor]:
    """The policy's weights under the HF names: ``model.state_dict()``, or for a LoRA policy the
    base with each adapter merged, ``W + get_delta_weight()`` (``(α/r)·B·A``, PEFT's), as new
    tensors (the trained model is not changed)."""
    if not is_lora(model):
        return model.state_dict()
    out = dict(base_state(model))
    for name, layer in _lora_layers(model).items():
        if ADAPTER in layer.lora_A:
            w = out[name + ".weight"]
            out[name + ".weight"] = w + layer.get_delta_weight(ADAPTER).to(w.dtype)
    return out


def plain(model: nn.Module) -> nn.Module:
    """A plain Hugging Face model of the policy for an engine's constructor: ``model`` itself, or
    for a LoRA policy a merged copy (its own tensors: every engine owns a copy of the weights)."""
    if not is_lora(model):
        return model
    out = copy.deepcopy(model).merge_and_unload()  # PEFT's merge: W += get_delta_weight(), as hf_state
    return out.eval().requires_grad_(False)


class BaseView(nn.Module):
    """The LoRA policy with its adapters disabled (PEFT's ``disable_adapter()``): the frozen base,
    shared with the policy (not a copy), as π_ref / π_init. Its ``state_dict`` is the base's under
    the HF names (:func:`base_state`: what ``base_sha256`` hashes)."""

    def __init__(self, policy: nn.Module) -> None:
        super().__init__()
        object.__setattr__(self, "policy", policy)  # not a submodule: its parameters are the policy's

    @property
    def config(self):
        return self.policy.config

    def forward(self, *args, **kwargs):
        with self.policy.disable_adapter():
            return self.policy(*args, **kwargs)

    def state_dict(self, *args, **kwargs) -> dict[str, Tensor]:  # type: ignore[override]
        return base_state(self.policy)


def trained_state(model: nn.Module) -> dict[str, Tensor]:
    """What a checkpoint keeps of the policy: its state dict, or a LoRA policy's adapters only
    (PEFT's ``get_peft_model_state_dict``)."""
    if not is_lora(model):
        return model.state_dict()
    from peft import get_peft_model_state_dict

    return get_peft_model_state_dict(model, adapter_name=ADAPTER)


def load_trained(model: nn.Module, state: dict[str, Tensor]) -> None:
    """Load :func:`trained_state` into ``model`` (strict: a checkpoint of the other kind, full
    weights into adapters or the reverse, is refused with one line)."""
    if not is_lora(model):
        if any(".lora_" in k for k in state):
            raise BadInput("the checkpoint holds LoRA adapters but this run trains every weight; resume it with "
                           "the model.lora_* settings it was written with")
        model.load_state_dict(state)
        return
    from peft import set_peft_model_state_dict

    if not any(".lora_" in k for k in state):
        raise BadInput("the checkpoint holds full weights but this run trains LoRA adapters (model.lora_rank > 0); "
                       "resume it with the model.lora_* settings it was written with")
    res = set_peft_model_state_dict(model, state, adapter_name=ADAPTER)
    missing = [k for k in res.missing_keys if ".lora_" in k]
    if missing or res.unexpected_keys:
        raise BadInput(f"the checkpoint's adapters do not fit this run's (missing {missing[:3]}, unexpected "
                       f"{list(res.unexpected_keys)[:3]}); resume with the model.lora_* settings it was written with")


def final_writer(model: nn.Module, write: Callable[[Path], None]) -> Callable[[Path], None]:
    """``final/``'s writer: ``write`` (the parallel mode's ``save_pretrained``) for a plain model;
    for a LoRA policy the merged policy as ``save_pretrained`` writes it, and its adapter in
    ``adapter/`` as PEFT saves it (``adapter_config.json``, ``adapter_model.safetensors``)."""
    if not is_lora(model):
        return write

    def both(d: Path) -> None:
        plain(model).save_pretrained(d)
        model.save_pretrained(Path(d) / "adapter")
    return both


def n_trainable(model: nn.Module) -> int:
    """Parameters the optimizer updates (the adapters of a LoRA policy)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def spec_problems(model_cfg, dist) -> list[str]:
    """Settings a LoRA run cannot take (exit 2 at resolution): FSDP sharding."""
    if not model_cfg.lora_rank:
        return []
    e = []
    if dist.shard != "none":
        e.append(f"model.lora_rank={model_cfg.lora_rank} with dist.shard={dist.shard}: sharding LoRA adapters over a "
                 f"frozen FSDP base is not supported; valid: dist.shard=none (data parallelism, dist.world_size > 1, "
                 f"is), or model.lora_rank=0")
    return e


def layer_problem(layer: nn.Module) -> Optional[str]:
    """Why the functional forward (:mod:`rlsuite.suite.fast_forward`) cannot apply the adapters of
    ``layer``, one of a decoder layer's linear layers: None for a plain ``nn.Linear`` or a PEFT LoRA
    ``Linear`` holding this run's one plain adapter (what :func:`attach` builds), which it applies as
    PEFT's ``Linear.forward`` does; anything else PEFT can hold there (DoRA and other variants,
    several or merged adapters, another LoRA layer type, a dropout other than :class:`GradDropout`)
    keeps the HF forward."""
    if getattr(layer, "base_layer", None) is None:
        return None
    from peft.tuners.lora.layer import Linear

    if type(layer) is not Linear:
        return f"a {type(layer).__name__} LoRA layer"
    if list(layer.active_adapters) != [ADAPTER] or set(layer.lora_A) != {ADAPTER}:
        return f"adapters {sorted(layer.lora_A)} (active {list(layer.active_adapters)})"
    if layer.merged:
        return "a merged adapter"
    if getattr(layer, "lora_variant", None) or any(getattr(layer, "use_dora", {}).values()):
        return "a LoRA variant (DoRA)"
    if not isinstance(layer.lora_dropout[ADAPTER], (nn.Identity, GradDropout)):
        return f"adapter dropout {type(layer.lora_dropout[ADAPTER]).__name__}"
    return None
