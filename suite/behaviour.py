"""The behaviour policy μ the engine samples with: staleness (``rollout.sync``,
``rollout.staleness``) and the training–inference mismatch knob (``rollout.mismatch``).

Its input is the ``rollout`` config section and the run seed; it loads weights into the
engine it is given and keeps, under ``sync=lag``, the policy's weights of the last k updates
(under the HF names; a LoRA policy's merged: :func:`rlsuite.suite.lora.hf_state`).
"""

from __future__ import annotations

import torch

from rlsuite.suite.lora import hf_state
from rlsuite.suite.prompts import seed_for


class BehaviourSync:
    """When and with what the engine's weights catch up with the trained policy."""

    def __init__(self, rollout, seed: int, engine, model) -> None:
        self.r, self.seed, self.engine, self.model = rollout, seed, engine, model
        self.history: dict[int, dict] = {0: {k: v.detach().clone() for k, v in hf_state(model).items()}} \
            if rollout.sync == "lag" else {}
        if rollout.mismatch != "none":
            engine.load_weights(self.behaviour_state(hf_state(model), 0), 0)

    def behaviour_state(self, state: dict, version: int, gen=None) -> dict:
        """The weights the engine samples with: the policy's, through the mismatch knob (``gen``:
        the version's noise generator, passed on when ``state`` comes in parts, in order)."""
        r = self.r
        if r.mismatch == "none":
            return state
        out = {}
        gen = gen if gen is not None else torch.Generator().manual_seed(seed_for(self.seed, "mismatch", version))
        for k, v in state.items():
            if not v.is_floating_point():
                out[k] = v
            elif r.mismatch == "bf16":
                out[k] = v.to(torch.bfloat16).to(v.dtype)
            else:
                noise = torch.randn(v.shape, generator=gen).to(v.device, v.dtype)
                out[k] = v + r.mismatch_scale * v.float().std().nan_to_num(0.0).to(v.dtype) * noise
        return out

    def sync(self, updates: int) -> None:
        """After a step: periodic re-sync once the lag exceeds k, or hold exactly k updates back."""
        r, u = self.r, updates
        if r.sync == "lag":
            self.history[u] = {k: v.detach().clone() for k, v in hf_state(self.model).items()}
            target = max(v for v in self.history if v <= max(0, u - r.staleness))
            for old in [v for v in self.history if v < target]:
                del self.history[old]
            if target != self.engine.version or r.staleness == 0:
                self.load(self.history[target], target)
        elif u - self.engine.version > r.staleness:
            self.load(hf_state(self.model), u)

    def load(self, state: dict, version: int) -> None:
        """Load the policy weights ``state`` of ``version`` into the engine, through the mismatch
        knob (sharded training gathers them layer by layer: :class:`rlsuite.suite.sharding.ShardedBehaviour`)."""
        self.engine.load_weights(self.behaviour_state(state, version), version)
