"""``rollout.engine=hf``: HF ``generate`` on the engine's own copy of the model (any causal LM)."""

from __future__ import annotations

import copy
from typing import Optional, Sequence

import torch
from torch import Tensor

from rlsuite.suite.engines.base import GenOutput, NoStats, SamplingParams, _StopTracker, left_pad
from rlsuite.suite.engines.sampling import truncate_logits
from rlsuite.suite.engine_traits import TRAITS


class HFGenerateEngine(NoStats):
    """The general fallback: HF ``generate`` on the engine's own copy of the model."""

    capabilities = frozenset({"behav_logp", "topk"})
    traits = TRAITS["hf"]

    def __init__(self, model, tokenizer) -> None:
        self.model = copy.deepcopy(model).eval()
        self.tok = tokenizer
        self.device = next(model.parameters()).device
        self.version = 0

    def load_weights(self, state: dict[str, Tensor], version: int) -> None:
        self.model.load_state_dict(state, strict=False)
        self.version = version

    def state(self) -> dict[str, Tensor]:
        return {k: v.clone() for k, v in self.model.state_dict().items()}

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                 generator: Optional[torch.Generator] = None, want_attn: bool = False,
                 limits: Optional[Sequence[int]] = None) -> GenOutput:
        if want_attn:
            raise ValueError("HF generate cannot return attention statistics; use rollout.engine=kv")
        limits = list(limits) if limits is not None else [params.max_new_tokens] * len(prompts)
        track = _StopTracker(len(prompts), params, self.tok, limits)
        ids, mask = left_pad(prompts, self.tok.pad_token_id or 0, self.device)
        n_new = max(limits)
        seed = int(torch.randint(0, 2**62, (1,), generator=generator).item()) if generator is not None else 0
        gc = copy.deepcopy(self.model.generation_config)
        gc.update(max_new_tokens=n_new, do_sample=params.temperature > 0, temperature=params.temperature or 1.0,
                  top_p=params.top_p, top_k=params.top_k, pad_token_id=self.tok.pad_token_id,
                  eos_token_id=list(params.stop_ids) or None, return_dict_in_generate=True, output_logits=True)
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            torch.manual_seed(seed)
            out = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=gc)
        gen = out.sequences[:, ids.shape[1]:]
        for i, raw in enumerate(out.logits):
            scaled = raw.float() / (params.temperature or 1.0)
            logp_all = torch.log_softmax(scaled, -1)
            tok = gen[:, i]
            lp = logp_all.gather(-1, tok[:, None]).squeeze(-1)
            trunc = torch.log_softmax(truncate_logits(scaled, params.top_p, params.top_k), -1) \
                if params.temperature else logp_all
            track.add(tok, lp, trunc.gather(-1, tok[:, None]).squeeze(-1), logp_all, None)
        return track.output(False)

