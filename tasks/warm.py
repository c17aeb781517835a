"""The supervised warm starts of the embedded tasks: one SFT loop (:func:`sft_until`, also used
by ``search_toy``'s episode SFT) and the answer SFT of the tasks whose examples are
``(text, answer)`` problems (``arith``, ``code_toy``): teacher-forced SFT on train problems until
greedy accuracy on 200 held-out train problems reaches the task's ``warm_target``. The committed bases
(``tasks/bases/``) were built by this loop: any change to its arithmetic changes their bytes
(``tests/unit/test_warmstart.py`` rebuilds arith and compares on the CPU model that built it).
"""

from __future__ import annotations

import random
from typing import Any, Callable

import torch


def sft_until(model, draw: Callable[[], Any], loss_fn: Callable[[Any], torch.Tensor], check: Callable[[], Any],
              done: Callable[[Any], bool], max_steps: int, every: int, initial: Any,
              lr: float = 2e-3) -> tuple[int, Any]:
    """The SFT loop of every embedded warm start: rounds of ``every`` AdamW steps on
    ``loss_fn(draw())`` (gradient norm clipped at 1), each round followed by ``check()``; stops
    when ``done(check result)`` or after ``max_steps`` steps. Returns (steps, last check result,
    ``initial`` when no round ran)."""
    from rlsuite.suite.progress import Meter

    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    stats, step = initial, 0
    meter = Meter("warm start (SFT)", max_steps, "steps")  # stderr (suite/progress.py); the total is a cap
    while step < max_steps:
        for _ in range(every):
            loss = loss_fn(draw())
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            meter.update(step, f"loss {loss.item():.3f}" + (f", check {_brief(stats)}" if step > every else ""))
        stats = check()
        if done(stats):
            break
    meter.close(f"check {_brief(stats)}")
    return step, stats


def _brief(stats: Any) -> str:
    """A check result for a progress line (a float, or a dict of them)."""
    if isinstance(stats, float):
        return f"{stats:.3f}"
    if isinstance(stats, dict):
        return " ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in stats.items())
    return str(stats)


def answer_sft_warm_start(task, model, tokenizer, seed: int, *, max_new_tokens: int, check_every: int,
                          batch_size: int = 64, lr: float = 2e-3,
                          target: Callable[[Any], str] = lambda p: str(p.answer),
                          check_temperature: float = 0.0) -> dict[str, Any]:
    """SFT on ``prompt target EOS`` (:func:`answer_sft_loss`; ``target``: the answer, or a
    ``chain`` problem's whole trace) of ``batch_size`` problems drawn
    with replacement from train minus 200 held-out problems, checked by greedy accuracy on those
    every ``check_every`` steps until it reaches ``task.cfg.warm_target`` (or
    ``task.cfg.warm_max_steps`` steps). ``check_temperature`` > 0 checks sampled accuracy at that
    temperature instead (one sample a problem, the same seeded generator at every check, so the
    global RNG is untouched). Returns ``{warm_steps, warm_check_acc}``."""
    from rlsuite.suite.engines.kv import KVSampler
    from rlsuite.suite.engines.base import SamplingParams

    train = task.splits()["train"]
    rng = random.Random(seed)
    check = rng.sample(train, 200)
    check_set = set(check)
    pool = [p for p in train if p not in check_set]
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=check_temperature,
                            stop_ids=(tokenizer.eos_token_id,))

    def accuracy() -> float:
        gen = torch.Generator().manual_seed(seed) if check_temperature > 0 else None
        out = KVSampler(model, tokenizer).generate(
            [tokenizer.encode(p.text, add_special_tokens=False) for p in check], params, generator=gen)
        texts = [tokenizer.decode(ids, skip_special_tokens=True) for ids in out.ids]
        return sum(g.correct for g in task.grade_batch(check, texts)) / len(check)

    step, acc = sft_until(model, lambda: [pool[rng.randrange(len(pool))] for _ in range(batch_size)],
                          lambda batch: answer_sft_loss(model, tokenizer, batch, target), accuracy,
                          lambda acc: acc >= task.cfg.warm_target, task.cfg.warm_max_steps, check_every, 0.0, lr)
    return {"warm_steps": step, "warm_check_acc": acc}


def answer_sft_loss(model, tokenizer, batch, target: Callable[[Any], str] = lambda p: str(p.answer)) -> torch.Tensor:
    """Cross-entropy on target tokens (+EOS) of ``prompt target EOS`` sequences."""
    from rlsuite.suite.engines.base import left_pad

    seqs, n_prompt = [], []
    for p in batch:
        pr = tokenizer.encode(p.text, add_special_tokens=False)
        ans = tokenizer.encode(target(p), add_special_tokens=False) + [tokenizer.eos_token_id]
        seqs.append(pr + ans)
        n_prompt.append(len(pr))
    ids, mask = left_pad(seqs, tokenizer.pad_token_id, "cpu")
    width = ids.shape[1]
    target_mask = torch.zeros_like(mask, dtype=torch.float)
    for b, (s, npr) in enumerate(zip(seqs, n_prompt)):
        target_mask[b, width - len(s) + npr:] = 1.0
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, :-1]
    logp = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    m = target_mask[:, 1:]
    return -(logp * m).sum() / m.sum()
