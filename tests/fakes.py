"""Fake tasks for tests (registered on import): a two-turn environment task and a
single-turn task whose reward a random model already earns half the time (so gradients flow
without a warm start); small model variants for the samplers' tests."""

from __future__ import annotations

import dataclasses

from rlsuite.tasks.base import TASKS, Environment, Grade, Task, TaskConfig

OBS = "<obs:42>"


class TwoTurnEnv(Environment):
    """Ends the first policy turn on a common character and answers once with OBS."""

    stop_strings = ("a", "e", "1", " ", "=")

    def __init__(self) -> None:
        self.turns = 0

    def step(self, text: str):
        self.turns += 1
        return OBS if self.turns == 1 else None


@dataclasses.dataclass(frozen=True, kw_only=True)
class TwoTurnConfig(TaskConfig):
    pass


class TwoTurnTask(Task):
    name = "_two_turn_test"
    summary = "test-only two-turn environment"
    Config = TwoTurnConfig
    presets = {"embedded": {"rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 12,
                                        "max_turns": 2}, "budget": {"updates": 2}, "eval": {"max_prompts": 4,
                                        "test_prompts": 4}}}

    def splits(self):
        items = [f"q{i}:" for i in range(12)]
        return {"train": items[:8], "val": items[8:10], "test": items[10:]}

    def prompt(self, example):
        return example

    def grade(self, example, completion):
        ok = OBS in completion and len(completion) % 2 == 0
        return Grade(reward=float(ok), correct=ok, parsed=str(len(completion)))

    def make_env(self, example):
        return TwoTurnEnv()



class ParityTask(TwoTurnTask):
    """Single turn; reward 1 when the completion has an even number of characters."""

    name = "_parity_test"
    presets = {"embedded": {"rollout": {"group_size": 4, "prompts_per_step": 4, "max_new_tokens": 8},
                            "optim": {"lr": 1e-3}, "budget": {"updates": 4}, "eval": {"max_prompts": 4,
                            "test_prompts": 4}}}

    def grade(self, example, completion):
        ok = len(completion) % 2 == 0
        return Grade(reward=float(ok), correct=ok, parsed=str(len(completion)))

    def make_env(self, example):
        return None


for _cls in (TwoTurnTask, ParityTask):
    if _cls.name not in TASKS:
        TASKS.register(_cls.name, _cls)


def tiny_variant(kind: str):
    """A small random model of one of the kv sampler's architecture variants: ``llama-gqa``,
    ``llama-bias`` (a bias on every projection, randomised) or ``qwen2`` (q/k/v biases)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from rlsuite.suite.models import char_tokenizer

    tok = char_tokenizer()
    torch.manual_seed(0)
    if kind == "llama-gqa":
        cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
                          pad_token_id=0, eos_token_id=2, rope_theta=500.0)
        return LlamaForCausalLM(cfg), tok
    if kind == "llama-bias":  # attention_bias / mlp_bias: every projection has a bias (HF zeroes them: randomise)
        cfg = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, attention_bias=True, mlp_bias=True,
                          pad_token_id=0, eos_token_id=2)
        model = LlamaForCausalLM(cfg)
        with torch.no_grad():
            for name, prm in model.named_parameters():
                if name.endswith(".bias"):
                    prm.normal_(0, 0.5)
        return model, tok
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, pad_token_id=0, eos_token_id=2,
                      tie_word_embeddings=True)
    return Qwen2ForCausalLM(cfg), tok


# -- builders shared by the hand tests (tests/algorithms/; critic entries: test_comppo.py, test_3po.py) --
def hook_ctx(gen_seed=7, **kw):
    """The hook :class:`Context` of the algorithm tests: defaults for every field, ``kw`` overrides;
    the generator of every stream is seeded with ``gen_seed`` (a callable: ``gen_seed(stream)``)."""
    import torch

    from rlsuite.algorithms.base import Context

    seed_of = gen_seed if callable(gen_seed) else (lambda s: gen_seed)
    base = dict(step=1, progress=0.0, entropy=None, max_new_tokens=4, group_size=2, prompts_per_step=2, n_train=10,
                seed=0, policy=None, generator=lambda s: torch.Generator().manual_seed(seed_of(s)),
                charge=lambda *a: None)
    return Context(**{**base, **kw})


def hand_batch(loss_mask, group_id, rewards, *, prompt_width=1, prompt_turns=True, dtype=None, **fields):
    """The :class:`Batch` of the hand-computed algorithm tests: ``loss_mask`` [B, T] (a list or a
    tensor, float64 by default), tokens 1..B·T, full attention, zero behaviour log-probs, group
    ``group_id``, example index = row, scores = rewards, nothing truncated. ``prompt_turns``: the
    first ``prompt_width`` columns get turn id −1 (else every turn id is 0). ``fields`` override
    or add any Batch field (lists become tensors of ``dtype``)."""
    import torch

    from rlsuite.suite.types import Batch

    dtype = dtype or torch.float64
    as_t = lambda x: torch.tensor(x, dtype=dtype) if isinstance(x, list) else x  # noqa: E731
    mask = as_t(loss_mask)
    B, T = mask.shape
    r = as_t(list(rewards)) if not torch.is_tensor(rewards) else rewards
    turn = (torch.where(torch.arange(T) >= prompt_width, 0, -1).expand(B, T).clone() if prompt_turns
            else torch.zeros(B, T, dtype=torch.long))
    base = dict(tokens=torch.arange(1, B * T + 1).reshape(B, T), attn_mask=torch.ones(B, T, dtype=torch.long),
                loss_mask=mask, behav_logp=torch.zeros(B, T, dtype=dtype), turn_id=turn,
                policy_version=torch.zeros(B, dtype=torch.long), behaviour_id=torch.zeros(B, dtype=torch.long),
                group_id=torch.tensor(group_id), example_idx=torch.arange(B), scores=r, rewards=r,
                truncated=torch.zeros(B, dtype=torch.bool), prompt_width=prompt_width)
    base.update({k: as_t(v) for k, v in fields.items()})
    return Batch(**base)


def critic_batch(attn=None):
    import torch

    from rlsuite.suite.types import Batch

    mask = torch.tensor([[0, 1, 1, 1, 0], [0, 1, 1, 0, 0], [0, 1, 1, 1, 1], [0, 1, 0, 0, 0]], dtype=torch.float)
    B, T = mask.shape
    g = torch.Generator().manual_seed(0)
    values = torch.rand(B, T, generator=g) * mask
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0])
    tr = torch.zeros(B, T)
    last = (mask * torch.arange(T)).argmax(-1)
    tr[torch.arange(B), last] = rewards
    z = torch.zeros(B, dtype=torch.long)
    return Batch(tokens=torch.ones(B, T, dtype=torch.long), attn_mask=torch.ones(B, T, dtype=torch.long),
                 loss_mask=mask, behav_logp=-mask, turn_id=z[:, None].expand(B, T), policy_version=z, behaviour_id=z,
                 group_id=torch.tensor([0, 0, 1, 1]), example_idx=z, scores=rewards, rewards=rewards,
                 truncated=torch.zeros(B, dtype=torch.bool), prompt_width=1, old_logp=-mask, values=values,
                 token_rewards=tr, attn_stat=attn if attn is not None else torch.rand(B, T, generator=g) * mask)


def make_entry(name, **kw):
    from rlsuite.algorithms.base import ALGORITHMS

    cls = ALGORITHMS.get(name)
    return cls(dataclasses.replace(cls.Config(name=name), **kw))


def kill_rank_when(run_dir, at_step: int, rank: int = 1, timeout_s: float = 300.0):
    """Start a watcher thread that SIGKILLs the local data-parallel process ``rlsuite-rank<rank>``
    once ``run_dir/status.json`` reports step >= ``at_step``. Returns (thread, killed): ``killed``
    gets ``{"step": s}`` when the kill happened."""
    import json
    import multiprocessing as mp
    import os
    import signal
    import threading
    import time
    from pathlib import Path

    status, killed = Path(run_dir) / "status.json", {}

    def watch():
        deadline = time.time() + timeout_s
        while time.time() < deadline and not killed:
            st = json.loads(status.read_text()) if status.exists() else {}
            if st.get("step", 0) >= at_step:
                for p in mp.active_children():
                    if p.name == f"rlsuite-rank{rank}":
                        os.kill(p.pid, signal.SIGKILL)
                        killed["step"] = st["step"]
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread, killed


def comparable_rows(rows):
    """Metrics rows without their clocks (``time``, ``budget/wall_s``, ``perf/*``): what a resumed
    run must reproduce of an uninterrupted one."""
    return [{k: v for k, v in r.items() if k not in ("time", "budget/wall_s") and not k.startswith("perf/")}
            for r in rows]


def crash_then_resume(spec, folder, monkeypatch, at_step: int = 3):
    """Run ``spec`` into ``folder`` with a crash injected once at ``Trainer.step`` number ``at_step``
    (the run exits 1), then again (it resumes from its last checkpoint and exits 0); returns the run
    folder. The caller compares its ``metrics.jsonl`` with an uninterrupted run's."""
    from rlsuite.suite.runner import execute
    from rlsuite.suite.trainer import Trainer

    real_step, crashed = Trainer.step, {"done": False}

    def flaky(self):
        if self.step_no == at_step and not crashed["done"]:
            crashed["done"] = True
            raise RuntimeError("injected crash")
        return real_step(self)

    monkeypatch.setattr(Trainer, "step", flaky)
    code, _ = execute(spec, folder)
    assert code == 1 and crashed["done"], code
    code, run = execute(spec, folder)
    assert code == 0, code
    return run
