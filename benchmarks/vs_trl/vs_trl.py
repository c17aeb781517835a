"""rlsuite's trainer vs TRL's GRPOTrainer, side by side in one process.

Same model (a 0.54M-parameter Llama: hidden 128, 2 layers, 4 heads, MLP 512, vocabulary 100,
character tokenizer, random init, saved locally and loaded by both sides), same prompts
(two-digit additions, so no prompt padding), same reward (exact match), same batch
(4 prompts × 8 completions × at most 32 new tokens, EOS ends a completion on both sides),
fp32, the same thread count, and matched settings:

* TRL: ``bf16=False``, ``gradient_checkpointing=False`` (TRL 1.16.0's default is True: it would
  recompute activations in the backward, which rlsuite does not), ``use_vllm=False``,
  ``report_to="none"``, ``beta=0``,
  ``num_iterations=1``, ``loss_type="grpo"`` (per-sequence token mean, then the batch mean),
  ``scale_rewards="group"``, temperature 1, ``top_k=0``, ``top_p=1``, one gradient step per
  generation batch, the tokenizer as ``processing_class``;
* rlsuite: ``grpo`` with ``kl_coef=0`` and ``aggregation=seq-mean-token-mean`` (the same
  loss), ``rollout.old_logp=behaviour`` (π_old aliased to μ when exactly on-policy, as TRL
  does with num_iterations=1), the KV-cached sampler.

It first checks that both sides compute the same loss for the same inputs (TRL's
``_compute_loss`` vs rlsuite's aggregated GRPO loss on one fixed batch), then runs blocks of steps
of the sides, the order rotating every round through every permutation of the sides (Latin
squares: with 3 sides, 6 rounds put each side in each position twice), so a drifting load or a
first-block warm-up falls on all. It prints per-step times and, per round, TRL's median over each
side's; the result is the median of the per-round ratios with a distribution-free 95% interval
(order statistics; 6 rounds at least), the load average after each round, and the thread count.
rlsuite's side runs its defaults, whose ``auto`` levers (prefix sharing, the fused AdamW, the
engine) resolve by capability. A third side, rlsuite with the opt-in levers (all fp32):
``train.compile`` and ``rollout.engine=native`` (the kv sampler's forward and token loop in C++),
compiled and built before the timings, is reported on its own line (``--no-levers`` skips it;
``--lever KEY=VALUE`` sets it by hand). Results go to ``benchmarks/vs_trl/vs_trl.md``.

``--model NAME_OR_FOLDER`` runs the same comparison on a real model instead (a pinned name such
as ``smollm2-135m``, or a local ``save_pretrained`` folder; both sides load the same folder):
chat-template prompts ``"What is a + b? Reply with only the number."`` (two-digit operands, so
every prompt has the same length and no padding), reward 1 when the last integer of the reply
equals a + b, 2 prompts × 4 completions × at most 64 new tokens (``--prompts``, ``--group``,
``--new-tokens``), the model's EOS ending a completion on both sides, and the same matched
settings. Every timed step is also split into phases on both sides (generation, scoring passes,
the update's forward with its log-probs, backward, gradient clipping, the optimizer step, the
engine's weight sync, the rest) by wall-clock wrappers around the calls that do them (the
same wrappers on both sides where the call is shared: ``torch.autograd.backward``,
``torch.nn.utils.clip_grad_norm_``, the optimizer-step hooks), and set against the machine's
FLOP bound and, for decoding, its memory-bandwidth bound (both measured in the same process).
Results go to ``benchmarks/vs_trl/vs_trl_real.md``.

    pip install -e ".[bench]"; python benchmarks/vs_trl/vs_trl.py [--rounds 6] [--steps 6] [--threads 2]
    python benchmarks/vs_trl/vs_trl.py --model smollm2-135m --threads 1 [--rounds 6] [--steps 4]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared modules
from common import command, machine, matmul_peak, memory_bandwidth, write_results  # noqa: E402

STUDY = Path(__file__).resolve().parent
TINY = "tiny"
"""``--model``'s default: the 0.54M-parameter Llama built here (not the suite's embedded ``tiny``)."""
P, G, NEW = 4, 8, 32
"""Prompts, completions per prompt and new tokens of a step; main() sets them for ``--model``."""
REAL = False
"""main() sets it for a real model: chat-template prompts and the last-integer reward."""
REAL_SHAPE = (2, 4, 64)
QUESTION = "What is {a} + {b}? Reply with only the number."
CHAT_TASK = "vs_trl_chat"
SPREAD = 2.0  # max/min step time within a side above which the result is flagged unreliable


def build_model(path: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlsuite.suite.models import char_tokenizer

    tok = char_tokenizer()
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=128, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
                      tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)


def model_folder(name: str) -> Path:
    """The local folder both sides load for ``--model``: a pinned model's verified folder, or a
    ``save_pretrained`` folder as given."""
    from rlsuite.suite import pinned_models

    if name in pinned_models.PINNED:
        return pinned_models.verified_dir(pinned_models.get(name))
    if Path(name, "config.json").is_file():
        return Path(name).resolve()
    raise SystemExit(f"--model {name}: neither a pinned model ({', '.join(pinned_models.PINNED)}) nor a folder "
                     "with a config.json")


def problems(n: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    return [(rng.randint(10, 99), rng.randint(10, 99)) for _ in range(n)]


def prompts(n: int, seed: int) -> list:
    """TRL's dataset column: ``"a+b="`` text (tiny) or one user message (a real model's chat template)."""
    if REAL:
        return [[{"role": "user", "content": QUESTION.format(a=a, b=b)}] for a, b in problems(n, seed)]
    return [f"{a}+{b}=" for a, b in problems(n, seed)]


_INT = re.compile(r"-?\d+")


def last_int_is(text: str, answer: int) -> bool:
    """The real model's reward rule: the last integer of the reply equals the sum."""
    found = _INT.findall(text)
    return bool(found) and int(found[-1]) == answer


def _operands(question: str) -> tuple[int, int]:
    a, b = _INT.findall(question)[:2]
    return int(a), int(b)


def reward(prompts, completions, **kw) -> list[float]:
    out = []
    for p, c in zip(prompts, completions):
        if REAL:  # conversational: the user message, the assistant reply
            a, b = _operands(p[-1]["content"])
            out.append(float(last_int_is(c[-1]["content"], a + b)))
            continue
        a, b = p[:-1].split("+")
        out.append(float(c.strip().split("<")[0] == str(int(a) + int(b))))
    return out


def register_chat_task() -> None:
    """rlsuite's side of the real-model prompts: a task (registered in this process only) with
    the same question through the model's chat template and the same reward rule, over every
    pair of two-digit operands (TRL's side draws from the same pairs)."""
    from rlsuite.tasks.base import TASKS, Grade, Task, TaskConfig, hash_split

    if CHAT_TASK in TASKS.names():
        return

    class ChatSum(Task):
        name = CHAT_TASK
        summary = "vs_trl benchmark: 'What is a + b?' through the chat template, last-integer reward."
        Config = TaskConfig

        def splits(self):
            if getattr(self, "_splits", None) is None:
                probs = [(a, b) for a in range(10, 100) for b in range(10, 100)]
                val = [q for q in probs if hash_split(f"{q}", 0.01, "val")]
                test = [q for q in probs if hash_split(f"{q}", 0.01, "test") and q not in val]
                held = set(val) | set(test)
                self._splits = {"train": [q for q in probs if q not in held], "val": val, "test": test}
            return self._splits

        def prompt(self, example):
            return [{"role": "user", "content": QUESTION.format(a=example[0], b=example[1])}]

        def gold(self, example):
            return str(sum(example))

        def grade(self, example, completion):
            ok = last_int_is(completion, sum(example))
            found = _INT.findall(completion)
            return Grade(reward=float(ok), correct=ok, parsed=found[-1] if found else None)

    TASKS.register(CHAT_TASK, ChatSum)


# -- per-phase wall-clock timing ------------------------------------------------------------
class Phases:
    """Seconds per phase of the current step, from wrappers around the calls that do the work;
    :meth:`flush` files them under a side at the end of a timed step."""

    KEYS = ("generate", "score", "forward", "backward", "clip", "optim", "sync")

    def __init__(self) -> None:
        self.cur: dict[str, float] = defaultdict(float)
        self.rows: dict[str, list[dict[str, float]]] = defaultdict(list)
        self.depth = 0  # > 0 inside a scoring pass: a forward there counts as scoring
        self._opt_t0 = 0.0
        self.installed = False

    def wrap(self, key: str, fn, scoring: bool = False, count=None):
        def timed(*a, **kw):
            t0 = time.perf_counter()
            self.depth += scoring
            try:
                out = fn(*a, **kw)
            finally:
                self.depth -= scoring
            if not (key == "forward" and self.depth):
                self.cur[key] += time.perf_counter() - t0
            if count is not None:
                count(out)
            return out
        return timed

    def install(self) -> None:
        """The wrappers both sides share: backward, gradient clipping, the optimizer step."""
        if self.installed:
            return
        self.installed = True
        torch.autograd.backward = self.wrap("backward", torch.autograd.backward)
        torch.nn.utils.clip_grad_norm_ = self.wrap("clip", torch.nn.utils.clip_grad_norm_)

        def pre(opt, args, kw):
            self._opt_t0 = time.perf_counter()

        def post(opt, args, kw):
            self.cur["optim"] += time.perf_counter() - self._opt_t0

        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        register_optimizer_step_pre_hook(pre)
        register_optimizer_step_post_hook(post)

    def clear(self) -> None:
        self.cur.clear()

    def flush(self, side: str, **extra: float) -> None:
        self.rows[side].append({**{k: self.cur.get(k, 0.0) for k in self.KEYS}, **extra})
        self.cur.clear()

    def median(self, side: str, key: str) -> float:
        return statistics.median(r[key] for r in self.rows[side]) if self.rows.get(side) else float("nan")


PH = Phases()


class StepTimer:
    def __init__(self) -> None:
        self.times: list[float] = []
        self.rollout: list[float] = []
        self.gen_tokens: list[int] = []
        self.widths: list[int] = []
        self._t = 0.0

    def callback(self):
        from transformers import TrainerCallback

        timer = self

        class CB(TrainerCallback):
            def on_step_begin(self, args, state, control, **kw):
                PH.clear()
                timer._t = time.perf_counter()

            def on_step_end(self, args, state, control, **kw):
                timer.times.append(time.perf_counter() - timer._t)
                PH.flush("trl_all", step=timer.times[-1], rollout=timer.rollout[-1] if timer.rollout else 0.0,
                         tokens=timer.gen_tokens[-1] if timer.gen_tokens else 0,
                         width=timer.widths[-1] if timer.widths else 0)

        return CB()


def trl_trainer(path: Path, out: Path, steps: int, seed: int, timer: StepTimer):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    ds = Dataset.from_dict({"prompt": prompts(P * steps, seed)})
    args = GRPOConfig(output_dir=str(out), per_device_train_batch_size=P * G, num_generations=G,
                      max_completion_length=NEW, learning_rate=1e-4, beta=0.0, num_iterations=1, loss_type="grpo",
                      scale_rewards="group", bf16=False, gradient_checkpointing=False, use_cpu=True, use_vllm=False,
                      report_to="none", logging_steps=10_000, save_strategy="no", max_steps=steps, temperature=1.0,
                      top_p=1.0, top_k=0, seed=seed, gradient_accumulation_steps=1, dataloader_num_workers=0,
                      disable_tqdm=True, shuffle_dataset=False)
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=ds, processing_class=tok,
                          callbacks=[timer.callback()])
    inner = trainer._generate_and_score_completions  # generation + rewards + advantages: TRL's rollout
    # log-probs inside the rollout are scoring passes (none with num_iterations=1), else the update's forward
    trainer._get_per_token_logps_and_entropies = PH.wrap("forward", trainer._get_per_token_logps_and_entropies)

    def count(out):
        ids = out[0]
        timer.gen_tokens.append(sum(len(c) for c in ids))
        timer.widths.append(max((len(c) for c in ids), default=0))

    trainer._generate_single_turn = PH.wrap("generate", trainer._generate_single_turn, count=count)

    def timed(*a, **kw):
        t0 = time.perf_counter()
        PH.depth += 1
        try:
            out = inner(*a, **kw)
        finally:
            PH.depth -= 1
        timer.rollout.append(time.perf_counter() - t0)
        return out

    trainer._generate_and_score_completions = timed
    return trainer


LEVERS = [("train.compile", True), ("rollout.engine", "native")]
"""The opt-in levers of the third side: the update's (benchmarks/levers/levers.py), TRL's own optimizer
kernel (fused AdamW, HF Trainer's default) and the kv sampler in C++ (all fp32)."""
REAL_LEVERS: list = []
"""The opt-in levers on a real model: none left in fp32. Prefix sharing, the fused AdamW and the
oneDNN engine (the kv sampler's matmuls on packed weights: a real model's decode step is bound
by reading its weights) are the defaults now (``auto``, resolved by capability); ``train.compile``
is not tried (compiling a 30-layer stack on a CPU takes minutes, more than a benchmark's steps).
``--lever KEY=VALUE`` adds a third side by hand."""
RESOLVED: dict = {}
"""What the defaults side's ``auto`` levers resolved to (the trainer's record), for the report."""


def lever_names(levers) -> str:
    return " + ".join(f"{k}={str(v).lower()}" for k, v in levers)


LEVER_NAMES = lever_names(LEVERS)


def latin_orders(sides: list[str], rounds: int) -> list[tuple[str, ...]]:
    """The order of the sides in each round: every permutation in turn (2 sides: AB, BA; 3 sides:
    the 6 orders), so over a multiple of ``len(sides)!`` rounds each side runs in each position
    equally often and a drift of the machine's load (or a warm-up of the first side) falls on all."""
    import itertools

    perms = list(itertools.permutations(sides))
    return [perms[r % len(perms)] for r in range(rounds)]


def median_interval(xs: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """A distribution-free interval for the median of ``xs`` (order statistics of a sign test):
    ``(low, high, coverage)`` with the highest coverage ≥ ``level`` that the sample allows, or
    the full range and its coverage where ``len(xs)`` is too small (6 values: the range, 96.9%)."""
    from math import comb

    xs, n = sorted(xs), len(xs)
    best = (xs[0], xs[-1], 1 - 2 * 0.5 ** n)
    for k in range(1, n // 2 + 1):  # [x_(k), x_(n+1-k)] covers with 1 - 2 P(Bin(n, 1/2) < k)
        cov = 1 - 2 * sum(comb(n, i) for i in range(k)) / 2 ** n
        if cov < level:
            break
        best = (xs[k - 1], xs[n - k], cov)
    return best


def round_lines(rounds: list[dict], sides: list[tuple[str, str]], threads: int) -> list[str]:
    """The per-round table (order, load, median s/step per side, TRL's median over each side's) and
    the median ratio over rounds with its distribution-free interval."""
    ours = [k for _, k in sides if k != "trl"]
    label = dict((k, lab) for lab, k in sides)
    lines = [f"Per round ({threads} thread(s) on every side; the order rotates through every permutation of the "
             "sides; load = the 1-minute load average after the round):", "",
             "| round | order | load | " + " | ".join(f"{label[k]} s/step" for _, k in sides) + " | "
             + " | ".join(f"TRL ÷ {label[k]}" for k in ours) + " |", "|---" * (3 + len(sides) + len(ours)) + "|"]
    ratios: dict[str, list[float]] = {k: [] for k in ours}
    for i, r in enumerate(rounds):
        med = {k: statistics.median(r["times"][k]) for _, k in sides}
        for k in ours:
            ratios[k].append(med["trl"] / med[k])
        lines.append(f"| {i} | {' > '.join(label[x] for x in r['order'])} | {r['load']:.2f} | "
                     + " | ".join(f"{med[k]:.4f}" for _, k in sides) + " | "
                     + " | ".join(f"{ratios[k][-1]:.2f}" for k in ours) + " |")
    lines.append("")
    for k in ours:
        lo, hi, cov = median_interval(ratios[k])
        lines.append(f"**{label[k]}: {statistics.median(ratios[k]):.2f}× TRL** (median of the {len(rounds)} per-round "
                     f"ratios; {cov:.1%} distribution-free interval for the median [{lo:.2f}, {hi:.2f}]).")
    return lines + [""]


def rlsuite_trainer(path: Path, out: Path, threads: int, extra: list = (), seed: int = 0):
    from rlsuite import algorithms  # noqa: F401
    from rlsuite import tasks  # noqa: F401
    from rlsuite.algorithms.base import ALGORITHMS
    from rlsuite.suite.models import load_model
    from rlsuite.suite.spec import resolve
    from rlsuite.suite.trainer import Trainer
    from rlsuite.tasks.base import TASKS

    task, task_sets = "arith", []
    if REAL:
        register_chat_task()
        task = CHAT_TASK
    elif "style" in {f.name for f in __import__("dataclasses").fields(TASKS.get("arith").Config)}:
        task_sets = [("task.style", "bare")]  # "a+b=" as TRL's prompts (a folder model gets arith's "hf" preset)
    sets = [*task_sets, ("rollout.group_size", G), ("rollout.prompts_per_step", P), ("rollout.max_new_tokens", NEW),
            ("rollout.temperature", 1.0), ("rollout.old_logp", "behaviour"), ("algo.kl_coef", 0.0),
            ("algo.aggregation", "seq-mean-token-mean"), ("optim.lr", 1e-4), ("train.num_threads", threads),
            ("eval.max_prompts", 4), *extra]
    spec = resolve(task, "grpo", str(path), seed, sets=sets, budgets=[("updates", 10_000)])
    model, tok, _ = load_model(spec.model)
    return Trainer(spec, out / spec.run_id, TASKS.get(task)(spec.task), ALGORITHMS.get("grpo")(spec.algo), model, tok)


def instrument(ours, stats: dict) -> None:
    """rlsuite's phase wrappers: generation, the scoring passes, the update's forward, the sync."""
    import rlsuite.suite.scoring as scoring_module
    import rlsuite.suite.trainer as trainer_module

    def count(out):
        stats["tokens"] = stats.get("tokens", 0) + sum(len(x) for x in out.ids)
        stats["width"] = max(stats.get("width", 0), max((len(x) for x in out.ids), default=0))

    st = ours.state  # the training state's owner (suite/train_state.py): engine, behaviour, models
    st.engine.generate = PH.wrap("generate", st.engine.generate, count=count)
    ours.scorer.score = PH.wrap("score", ours.scorer.score, scoring=True)
    st.behaviour.sync = PH.wrap("sync", st.behaviour.sync)
    for module in (trainer_module, scoring_module):  # the update's forward; the scoring passes' (inside "score")
        if not getattr(module.policy_forward, "_phase", False):
            module.policy_forward = PH.wrap("forward", module.policy_forward)
            module.policy_forward._phase = True


def chat_ids(tok, n: int, seed: int) -> list[list[int]]:
    from rlsuite.suite.prompts import encode_text

    if REAL:
        return [encode_text(p, tok, "auto")[0] for p in prompts(n, seed)]
    return [tok.encode(p) for p in prompts(n, seed)]


def check_same_loss(path: Path, out: Path, threads: int) -> tuple[float, float]:
    """TRL's `_compute_loss` and rlsuite's aggregated GRPO loss on one fixed batch."""
    import dataclasses

    from rlsuite.suite.aggregation import aggregation_weights
    from rlsuite.suite.policy import policy_forward
    from rlsuite.suite.rollout import collect
    from rlsuite.suite.engines.base import SamplingParams

    ours = rlsuite_trainer(path, out / "check", threads)
    tok = ours.tok
    ids = [x for x in chat_ids(tok, P, 123) for _ in range(G)]
    rec, _ = collect(ours.state.engine, tok, ids, SamplingParams(max_new_tokens=NEW, temperature=1.0,
                                                           stop_ids=(tok.eos_token_id,)),
                     torch.Generator().manual_seed(0), group_ids=[i // G for i in range(P * G)])
    rewards = torch.randn(P * G, generator=torch.Generator().manual_seed(1))
    batch = ours.scorer.score(rec.replace(rewards=rewards, scores=rewards))
    adv = ours.algo.advantages(batch, ours.context())
    batch = dataclasses.replace(batch, adv=adv.adv)
    fwd = policy_forward(ours.state.model, batch.tokens, batch.attn_mask, 1.0)
    # an off-policy π_old (ratios away from 1, some clipped) so the check exercises the clip, not just 0
    noise = 0.3 * torch.randn(batch.tokens.shape, generator=torch.Generator().manual_seed(2))
    batch = dataclasses.replace(batch, old_logp=(fwd.logp.detach() + noise) * batch.loss_mask)
    per_tok, _ = ours.algo.loss(fwd, batch, ours.context())
    w = aggregation_weights(batch.loss_mask, ours.algo.aggregation, NEW)
    ours_loss = float((w * per_tok).sum().detach())

    timer = StepTimer()
    trl = trl_trainer(path, out / "trl_check", 1, 0, timer)
    pw = batch.prompt_width
    adv_seq = (batch.adv * batch.loss_mask).sum(-1) / batch.loss_mask.sum(-1).clamp(min=1)
    inputs = {"prompt_ids": batch.tokens[:, :pw], "prompt_mask": batch.attn_mask[:, :pw],
              "completion_ids": batch.tokens[:, pw:], "completion_mask": batch.loss_mask[:, pw:].long(),
              "advantages": adv_seq, "old_per_token_logps": batch.old_logp[:, pw:]}
    trl.model.load_state_dict(ours.state.model.state_dict())
    trl.model.train()
    trl.current_gradient_accumulation_steps = 1  # set by TRL's training loop; one step per generation batch
    trl_loss = float(trl._compute_loss(trl.model, inputs).detach())
    return ours_loss, trl_loss


def same_prompt_tokens(path: Path) -> bool:
    """TRL tokenizes the conversational prompt itself; rlsuite through ``suite.prompts``: the same ids?"""
    from transformers import AutoTokenizer

    from rlsuite.suite.prompts import encode_text

    tok = AutoTokenizer.from_pretrained(path)
    msgs = prompts(1, 0)[0]
    trl_ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
    trl_ids = trl_ids["input_ids"] if hasattr(trl_ids, "keys") else trl_ids
    return list(trl_ids) == encode_text(msgs, tok, "auto")[0]


DROPPED = ("Measured during development and dropped: torch.compile of the decode step (slower: 39 vs 36 ms "
           "a rollout, also with inductor's C++ wrapper); two Python threads sampling half the batch each "
           "(GIL-bound, 2× slower); the native decode step run as one block of rows per thread (no faster: "
           "23–29 vs 24–26 ms a rollout); fused q/k/v and gate/up matmuls in the compiled training stack "
           "(26.6 vs 26.4 ms an update); explicit softmax attention instead of SDPA in the compiled training "
           "stack (forward + backward 32.5 / 32.0 vs 33.7 / 29.1 ms: no difference beyond the noise); a "
           "hand-written AVX-512 GEMM for the decode step's matmuls (287 vs 264 µs at 1 thread against MKL "
           "on transposed weights, and no threads). Kept: MKL on weights transposed once per sync (172 vs "
           "287 µs for a step's matmuls at 2 threads against at::linear), the token loop in C++ (a rollout "
           "23.5 → 19.2 ms), the prompt prefill through the C++ forward (19 → 15.5 ms).")


def target_lines(med_trl: float, parts: dict, flops: dict, times: list[float], key: str, peak: float,
                 target: float = 2.0, dropped: str = DROPPED) -> list[str]:
    """The distance to the ``target``× target, from this run's own figures: what the rest of the
    step would have to take, next to the update's FLOP bound at the measured matmul peak."""
    med, roll = statistics.median(times), statistics.median(parts[key])
    rest, need = med - roll, med_trl / target - roll
    bound = statistics.median(flops[key]) / peak
    side = "rlsuite with the levers" if key == "levers" else "rlsuite"
    head = (f"{target:g}× TRL's median is ≤ {med_trl / target:.4f} s a step; {side} takes {med:.4f} s "
            f"({med_trl / med:.2f}×): rollout {roll:.4f} s, the rest {rest:.4f} s.")
    if med <= med_trl / target:
        body = " The target is met in this run."
    else:
        body = (f" With this rollout, {target:g}× needs the rest of the step at ≤ {need:.4f} s; "
                "the update's FLOP bound "
                f"(6 × non-embedding parameters × positions computed, as charged: "
                f"{statistics.median(flops[key]) / 1e9:.2f} GFLOP) at the measured fp32 matmul peak "
                f"({peak / 1e9:.0f} GFLOP/s) is {bound:.4f} s, so the update runs at {bound / rest:.0%} of its bound.")
    return [f"## Against the {target:g}× target", "", head + body, "", *([dropped, ""] if dropped else [])]


REAL_DROPPED = (
    "Measured on this model during development (1 thread, the other core busy; single calls, so noisy): the "
    "decode step's matmuls through ATen's fp32 matmul (MKL) stream the weights at 3–6 GB/s where a copy reaches "
    "9–16 GB/s — the LM head at batch 8 takes 25–38 ms vs 9–15 ms through oneDNN on packed weights, the layers' "
    "matmuls about 1.5× — hence `rollout.engine=onednn` (a rollout 1.45–1.69× the kv engine's, the same tokens "
    "from the same generator); the decode step's attention as explicit matmuls instead of SDPA: no faster "
    "(0.26 ms a layer either way); repacking into new tensors instead of copying into the old ones: sync "
    "0.57 → 0.32–0.45 s. The shared-prefix update: one pass per response length, a pass overhead of 11 positions "
    "(kept) and one pass at the longest length: forward + backward 8.7, 7.7 and 9.0 s; then one embedding call "
    "and one LM-head call for the whole batch instead of one per pass (the table's 113 MB gradient formed once): "
    "7.7 → 6.4 s. On the default HF forward, `logits_to_keep` (the LM head on the response positions only) "
    "would save about a twelfth of the update but changes the tied head's weight gradient by float rounding "
    "(1.5e-7), so the defaults keep the head on every position and skip only the log-softmax there (bit for "
    "bit the old results, tested). AdamW: the defaults' per-parameter loop 0.54–1.2 s a step, `foreach` the "
    "same bits but no faster (0.8–1.0 s), fused 0.13–0.25 s (a lever: it changes the update by float rounding). "
    "`train.compile` was not tried on this model.")
"""Real-model measurements made during development, kept or dropped (written into the results)."""


def phase_rows(sides: list[tuple[str, str]], bounds: dict[str, dict[str, float]]) -> list[str]:
    """The per-phase table: medians over the timed steps of each side, with (where given) the
    bound of that side's own work for the phase in parentheses."""
    names = {"generate": "generation (prefill + decode)", "score": "scoring passes (π_old/π_ref/values)",
             "forward": "update forward + log-probs (incl. LM head, log-softmax)", "backward": "backward",
             "clip": "gradient clipping (norm)", "optim": "optimizer step (AdamW)",
             "sync": "weight sync into the engine", "other": "the rest (rewards, advantages, loss, bookkeeping)",
             "step": "step"}

    def cell(k: str, key: str) -> str:
        b = bounds.get(k, {}).get(key)
        return f"{PH.median(k, key):.3f}" + (f" ({b:.2f})" if b is not None else "")

    lines = ["| phase | " + " | ".join(label for label, _ in sides) + " |", "|---" * (len(sides) + 1) + "|"]
    for key in (*Phases.KEYS, "other", "step"):
        lines.append(f"| {names[key]} | " + " | ".join(cell(k, key) for _, k in sides) + " |")
    for key, label in (("tokens", "new tokens per step (mean)"), ("width", "decode steps per step (mean)")):
        lines.append(f"| {label} | " + " | ".join(
            f"{statistics.mean(r[key] for r in PH.rows[k]):.1f}" if PH.rows.get(k) else "–" for _, k in sides) + " |")
    lines.append("| generation ms per decode step (median; bound: weights ÷ bandwidth) | " + " | ".join(
        (f"{1e3 * statistics.median(r['generate'] / max(1, r['width']) for r in PH.rows[k]):.1f}"
         + (f" ({1e3 * bounds[k]['per_step']:.0f})" if "per_step" in bounds.get(k, {}) else ""))
        if PH.rows.get(k) else "–" for _, k in sides) + " |")
    return lines


# -- the run, step by step ------------------------------------------------------------------
@dataclass
class Timings:
    """What the timed rounds measured, per side (``trl``, ``ours``, ``levers``)."""

    trl: list[float] = field(default_factory=list)  # seconds per timed step
    ours: list[float] = field(default_factory=list)
    levers: list[float] = field(default_factory=list)
    parts: dict[str, list[float]] = field(default_factory=dict)
    """Per timed step: the rollout part (generation, grading, scoring)."""
    flops: dict[str, list[float]] = field(default_factory=dict)
    """Per timed step: the update's FLOPs as charged (positions computed)."""
    rounds: list[dict] = field(default_factory=list)
    """Per round: its order, each side's step times, the load average after it."""


NAMES_OF = {"trl": "TRL", "ours": "rlsuite", "levers": "rlsuite+levers"}
"""The sides' names in the per-round progress lines."""


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=TINY, help="a pinned model name (smollm2-135m) or a local folder; "
                    "default: the 0.54M-parameter Llama built here")
    ap.add_argument("--rounds", type=int, default=6, help="rounds; the sides' order rotates through every "
                    "permutation (6 or a multiple of 6 balances 3 sides; at least 6 for a 95%% interval)")
    ap.add_argument("--steps", type=int, default=None, help="steps per block (the first of each block is warm-up; "
                    "default 6, 4 with --model)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=None, help="prompts per step (default 4; 2 with --model)")
    ap.add_argument("--group", type=int, default=None, help="completions per prompt (default 8; 4 with --model)")
    ap.add_argument("--new-tokens", type=int, default=None, help="new tokens at most (default 32; 64 with --model)")
    ap.add_argument("--no-levers", action="store_true", help="skip the third side (rlsuite with the opt-in levers)")
    ap.add_argument("--lever", action="append", default=None, metavar="KEY=VALUE",
                    help="the third side's settings instead of the built-in levers (repeatable)")
    ap.add_argument("--note", default="", help="a sentence on the machine's load written into the results")
    ap.add_argument("--results", type=Path, default=None,
                    help="default benchmarks/vs_trl/vs_trl.md (vs_trl_real.md with --model)")
    return ap.parse_args()


def configure(args: argparse.Namespace) -> tuple[int, Path, list]:
    """Set the module's shape (``P``, ``G``, ``NEW``) and ``REAL`` from the arguments; return the steps
    per block, the results file and the third side's levers."""
    global P, G, NEW, REAL
    REAL = args.model != TINY
    P, G, NEW = REAL_SHAPE if REAL else (P, G, NEW)
    P, G, NEW = args.prompts or P, args.group or G, args.new_tokens or NEW
    steps = args.steps or (4 if REAL else 6)
    results = args.results or STUDY / ("vs_trl_real.md" if REAL else "vs_trl.md")
    levers = REAL_LEVERS if REAL else LEVERS
    if args.lever:
        levers = [tuple(kv.split("=", 1)) for kv in args.lever]
    return steps, results, levers


def prepare_model(args: argparse.Namespace, tmp: Path) -> Path:
    """The folder both sides load: a real model's (``--model``) or the tiny Llama built into ``tmp``."""
    if REAL:
        return model_folder(args.model)
    model_dir = tmp / "model"
    build_model(model_dir)
    return model_dir


def check_equivalence(model_dir: Path, tmp: Path, threads: int) -> tuple[float, float, bool, bool]:
    """The same loss on a fixed batch (and, on a real model, the same prompt token ids) on both
    sides, printed: ``(rlsuite's loss, TRL's loss, same loss, same ids)``."""
    ours_loss, trl_loss = check_same_loss(model_dir, tmp, threads)
    gc.collect()
    same = abs(ours_loss - trl_loss) <= 1e-5 * max(1.0, abs(trl_loss))
    print(f"same loss on a fixed batch: rlsuite {ours_loss:.8f}  TRL {trl_loss:.8f}  {'OK' if same else 'MISMATCH'}")
    same_ids = same_prompt_tokens(model_dir) if REAL else True
    if REAL:
        print(f"same prompt token ids on both sides: {same_ids}")
    return ours_loss, trl_loss, same, same_ids


def warm_up_levers(model_dir: Path, tmp: Path, threads: int, levers: list) -> None:
    """Compile / build before timing: the first step and the first new shape compile."""
    warm = rlsuite_trainer(model_dir, tmp / "warm", threads, levers)
    warm.folder.path.mkdir(parents=True, exist_ok=True)
    for _ in range(3):
        warm.step()
    del warm


def time_ours(t: Timings, model_dir: Path, tmp: Path, threads: int, steps: int, name: str, extra: list,
              r: int) -> list[float]:
    """One block of rlsuite's side ``name`` (``ours``: the defaults; ``levers``: with ``extra``) in
    round ``r``: the step times after the first, its rollout parts, FLOPs and phases filed in ``t``."""
    ours = rlsuite_trainer(model_dir, tmp / f"{name}{r}", threads, extra, seed=r)  # as TRL: seed r
    ours.folder.path.mkdir(parents=True, exist_ok=True)
    stats: dict = {}
    instrument(ours, stats)
    if name == "ours":
        RESOLVED.update(ours.resolved)
    ts, before = [], 0.0
    for s in range(steps):
        PH.clear()
        stats.clear()
        t0 = time.perf_counter()
        row = ours.step()
        dt = time.perf_counter() - t0
        if s:
            ts.append(dt)
            t.parts.setdefault(name, []).append(row["perf/rollout_time"])
            t.flops.setdefault(name, []).append(row["budget/flops_train"] - before)
            PH.flush(name, step=dt, rollout=row["perf/rollout_time"], tokens=stats.get("tokens", 0),
                     width=stats.get("width", 0))
        before = row["budget/flops_train"]
    del ours
    gc.collect()
    return ts


def time_trl(t: Timings, model_dir: Path, tmp: Path, steps: int, r: int) -> list[float]:
    """One block of TRL's side in round ``r``: the step times after the first (rollout parts and
    phases filed in ``t``)."""
    timer = StepTimer()
    trl = trl_trainer(model_dir, tmp / f"trl{r}", steps, r, timer)
    trl.train()
    del trl
    gc.collect()  # the trainers hold reference cycles (the phase wrappers too): free each side's memory
    t.parts.setdefault("trl", []).extend(timer.rollout[1:])
    PH.rows["trl"] += PH.rows.pop("trl_all")[1:]
    return timer.times[1:]


def time_rounds(args: argparse.Namespace, model_dir: Path, tmp: Path, steps: int, levers: list) -> Timings:
    """``args.rounds`` rounds of one block per side, the sides' order rotating (``latin_orders``);
    prints each round's times and ratios."""
    t = Timings()
    order_sides = ["trl", "ours"] + (["levers"] if levers and not args.no_levers else [])
    for r, order in enumerate(latin_orders(order_sides, args.rounds)):
        rt: dict[str, list[float]] = {}
        for side in order:
            if side == "trl":
                rt["trl"] = time_trl(t, model_dir, tmp, steps, r)
            else:
                rt[side] = time_ours(t, model_dir, tmp, args.threads, steps, side, [] if side == "ours" else levers, r)
        t.trl += rt["trl"]
        t.ours += rt["ours"]
        t.levers += rt.get("levers", [])
        t.rounds.append({"order": order, "times": rt, "load": os.getloadavg()[0]})
        print(f"round {r} (order {' > '.join(NAMES_OF[x] for x in order)}; load {t.rounds[-1]['load']:.2f}): "
              + " | ".join(f"{NAMES_OF[k]} " + " ".join(f"{x:.3f}" for x in rt[k]) for k in order_sides)
              + " | ratios " + " ".join(f"{statistics.median(rt['trl']) / statistics.median(rt[k]):.2f}"
                                        for k in order_sides[1:]), flush=True)
    return t


def per_round_ratio(t: Timings, side: str) -> float:
    """The median over rounds of TRL's median step time over ``side``'s."""
    return statistics.median(statistics.median(r["times"]["trl"]) / statistics.median(r["times"][side])
                             for r in t.rounds)


def lever_summary(t: Timings, levers: list) -> tuple[list[str], list[str]]:
    """The third side's row of the step-time table and its speedup line (both empty without it)."""
    if not t.levers:
        return [], []
    names = lever_names(levers)
    rows = [f"| rlsuite, {names} | {len(t.levers)} | {statistics.median(t.levers):.4f} | "
            f"{min(t.levers):.4f} | {max(t.levers):.4f} |"]
    lines = [f"speedup with {names} (opt-in{'' if REAL else '; compiled before timing'}; median of the "
             f"per-round ratios): {per_round_ratio(t, 'levers'):.2f}x", ""]
    return rows, lines


def tiny_report(args: argparse.Namespace, load_before: float, load_after: float, check: tuple, t: Timings,
                lever_rows: list[str], lever_lines: list[str], sides: list, per_round: list[str], peak: float,
                speed: float) -> str:
    """The results file of the tiny model's comparison (the default)."""
    ours_loss, trl_loss, same, _ = check
    med_trl, med_ours = statistics.median(t.trl), statistics.median(t.ours)
    return "\n".join([
        "# rlsuite trainer vs TRL GRPOTrainer (side by side, one process)", "",
        f"Machine: {machine()} (shared), torch {torch.__version__}, "
        f"{args.threads} threads on both sides; TRL {__import__('trl').__version__}, transformers "
        f"{__import__('transformers').__version__}. Command: `{command(__file__, *sys.argv[1:])}`. "
        f"1-minute load average "
        f"{load_before:.2f} before, {load_after:.2f} after (other jobs share the cores: timings are noisy; "
        "the sides' order rotates every round, so all see the same load).", "",
        "Settings (both sides): 0.54M-parameter Llama (hidden 128, 2 layers, 4 heads, vocab 100), fp32, "
        f"{P} prompts × {G} completions × ≤{NEW} new tokens, EOS ends a completion, temperature 1, no KL, "
        "GRPO loss with per-sequence token mean (TRL loss_type=grpo), one update per generation batch, "
        "π_old = detached current log-probs (TRL num_iterations=1; rlsuite rollout.old_logp=behaviour). "
        "AdamW: TRL runs its default fused kernel (adamw_torch_fused); rlsuite's defaults resolve "
        f"(`auto`, by capability) to {json.dumps(RESOLVED, sort_keys=True)}. "
        "TRL generates with HF generate; rlsuite with its KV-cached sampler. TRL runs without gradient "
        "checkpointing (its default is on; rlsuite has none).", "",
        f"Same-loss check on one fixed batch: rlsuite {ours_loss:.8f}, TRL {trl_loss:.8f} "
        f"({'equal within 1e-5' if same else 'DIFFERENT'}).", "",
        "| side | steps timed | median s/step | min | max |", "|---|---|---|---|---|",
        f"| TRL | {len(t.trl)} | {med_trl:.4f} | {min(t.trl):.4f} | {max(t.trl):.4f} |",
        f"| rlsuite | {len(t.ours)} | {med_ours:.4f} | {min(t.ours):.4f} | {max(t.ours):.4f} |",
        *lever_rows, "", *per_round, *lever_lines,
        "Where the time goes (medians of the same timed steps): the rollout is generation, rewards and "
        "advantages (TRL: `_generate_and_score_completions`; rlsuite: `perf/rollout_time`, which also holds "
        "the scoring passes); the rest of the step is the update (forward, backward, optimizer) and "
        "bookkeeping.", "",
        "| side | rollout s | rest of the step s |", "|---|---|---|",
        *[f"| {label} | {statistics.median(t.parts[k]):.4f} | "
          f"{statistics.median(ts) - statistics.median(t.parts[k]):.4f} |"
          for label, k, ts in (("TRL", "trl", t.trl), ("rlsuite", "ours", t.ours),
                               ("rlsuite + levers", "levers", t.levers)) if t.parts.get(k)], "",
        "Per phase (s, medians; wall-clock wrappers around the calls doing each phase):", "",
        *phase_rows(sides, {}), "",
        *target_lines(med_trl, t.parts, t.flops, t.levers or t.ours, "levers" if t.levers else "ours", peak),
        f"speedup: {speed:.2f}x", ""])


def unreliable_note(t: Timings) -> str:
    """A warning for the results file when a side's step times vary more than ``SPREAD``× ('' otherwise)."""
    spread_trl, spread_ours = max(t.trl) / min(t.trl), max(t.ours) / min(t.ours)
    if t.levers:
        spread_ours = max(spread_ours, max(t.levers) / min(t.levers))
    if max(spread_trl, spread_ours) <= SPREAD:
        return ""
    return (f"\nUNRELIABLE: step times vary more than {SPREAD:g}x within a side ({spread_trl:.1f}x TRL, "
            f"{spread_ours:.1f}x rlsuite): threads were fighting other jobs for the cores"
            f"{' or the sampled lengths differ' if REAL else ''}. Rerun on an idle machine or with --threads 1.\n")


def main() -> None:
    args = parse_args()
    steps, results, levers = configure(args)
    torch.set_num_threads(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    load_before = os.getloadavg()[0]
    tmp = Path(tempfile.mkdtemp(prefix="rlsuite-vs-trl-"))
    model_dir = prepare_model(args, tmp)
    check = check_equivalence(model_dir, tmp, args.threads)
    PH.install()
    if levers and not args.no_levers and not REAL:
        warm_up_levers(model_dir, tmp, args.threads, levers)
    t = time_rounds(args, model_dir, tmp, steps, levers)
    load_after = os.getloadavg()[0]

    peak = statistics.median(matmul_peak(args.threads, 2048 if REAL else 512) for _ in range(3))
    bw = statistics.median(memory_bandwidth() for _ in range(3)) if REAL else 0.0
    for side in ("trl", "ours", "levers"):
        for row in PH.rows.get(side, []):
            row["other"] = row["step"] - sum(row[k] for k in Phases.KEYS)
    speed = per_round_ratio(t, "ours")
    lever_rows, lever_lines = lever_summary(t, levers)
    sides = [("TRL", "trl"), ("rlsuite", "ours")] + ([("rlsuite + levers", "levers")] if t.levers else [])
    per_round = round_lines(t.rounds, sides, args.threads)
    if REAL:
        text = real_report(args, model_dir, load_before, load_after, *check, t.trl, t.ours, t.levers, lever_rows,
                           lever_lines, t.parts, t.flops, sides, peak, bw, speed, lever_names(levers), steps,
                           per_round)
    else:
        text = tiny_report(args, load_before, load_after, check, t, lever_rows, lever_lines, sides, per_round,
                           peak, speed)
    write_results(results, text + unreliable_note(t))


def real_report(args, model_dir, load_before, load_after, ours_loss, trl_loss, same, same_ids, trl_times, our_times,
                lever_times, lever_rows, lever_lines, parts, flops, sides, peak, bw, speed, names, steps,
                per_round) -> str:
    """The results file of a real-model comparison (``--model``)."""
    import json

    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(model_dir)
    V, H, L = cfg.vocab_size, cfg.hidden_size, cfg.num_hidden_layers
    from rlsuite.suite.models import load_model
    from rlsuite.suite.config import ModelConfig

    model, _, _ = load_model(ModelConfig(name=str(model_dir)))
    n_all = sum(p.numel() for p in model.parameters())
    from rlsuite.suite.models import non_embedding_params

    lm = V * H  # the LM head's weights (tied here): read once per decode step, applied at every scored position
    p_ne = non_embedding_params(model) - lm  # the layers (non_embedding_params counts the unembedding in)
    del model
    B = P * G
    prompt_len = len(chat_ids(__import__("transformers").AutoTokenizer.from_pretrained(model_dir), 1, 0)[0])
    weight_bytes = 4 * (p_ne + lm)  # fp32 weights read per decode step: the layers and the head (+ B embedding rows)
    optim_bytes = 4 * n_all * 7  # fused AdamW: reads param, grad, m, v; writes param, m, v
    bounds: dict[str, dict[str, float]] = {}
    for _, k in sides:  # each side's own work, from its median step shape
        w = statistics.median(r["width"] for r in PH.rows[k])
        tok = statistics.median(r["tokens"] for r in PH.rows[k])
        T = prompt_len + w  # the padded width of the update's batch
        if k == "trl":  # every row padded; the chunked LM head scores every position, recomputed in backward
            body, head, head_bwd = B * T, B * (T - 1), 3
        elif k == "ours" and not RESOLVED.get("train.share_prefix"):  # every row padded; the head on the responses
            body, head, head_bwd = B * T, B * w, 2
        else:  # one prompt pass per prompt (share_prefix), the response rows without their padding
            body, head, head_bwd = P * prompt_len + tok, tok, 2
        prefill = (B if k == "trl" else P) * prompt_len  # the kv engines prefill each distinct prompt once
        fwd = 2 * p_ne * body + 2 * lm * head
        bounds[k] = {"forward": fwd / peak, "backward": (4 * p_ne * body + head_bwd * 2 * lm * head) / peak,
                     "generate": 2 * p_ne * prefill / peak + max(0, w - 1) * weight_bytes / bw,
                     "optim": optim_bytes / bw, "clip": 4 * n_all / bw, "per_step": weight_bytes / bw}
        bounds[k]["step"] = sum(bounds[k][x] for x in ("forward", "backward", "generate", "optim", "clip"))
    med_trl, med_ours = statistics.median(trl_times), statistics.median(our_times)
    lines = [
        f"# rlsuite trainer vs TRL GRPOTrainer on a real model ({args.model})", "",
        f"Machine: {machine()}, {args.threads} torch thread(s) on both "
        f"sides; torch {torch.__version__}, transformers {__import__('transformers').__version__}, TRL "
        f"{__import__('trl').__version__}. Command: `{command(__file__, *sys.argv[1:])}`. "
        f"1-minute load average {load_before:.2f} before, {load_after:.2f} after. "
        + (args.note + " " if args.note else "")
        + "The sides run in one process, their order rotating every round through every permutation, so all see "
        "the same load.",
        "",
        f"Model: `{args.model}` ({n_all / 1e6:.1f}M parameters, {p_ne / 1e6:.1f}M in the layers; "
        f"{L} layers, hidden {H}, "
        f"vocabulary {V:,}, tied embeddings), fp32, loaded by both sides from the same folder.", "",
        f"Settings (both sides): {P} prompts × {G} completions × ≤{NEW} new tokens; prompts "
        f"\"{QUESTION}\" (two-digit a, b) through the model's chat template ({prompt_len} tokens, no padding; "
        f"the same token ids on both sides: {'yes' if same_ids else 'NO'}); reward 1 when the last integer of the "
        f"reply equals a + b; the model's EOS (id {cfg.eos_token_id}) ends a completion on both sides; temperature 1, "
        "no top-k/top-p; GRPO loss with per-sequence token mean (TRL `loss_type=grpo`; rlsuite "
        "`algo.aggregation=seq-mean-token-mean`), `beta=0` / `algo.kl_coef=0`, `num_iterations=1` / "
        "`rollout.old_logp=behaviour` (π_old = the behaviour log-probs, no scoring forward on either side), "
        "gradient checkpointing off, lr 1e-4, grad clip 1.0, one update per generation batch. TRL: HF `generate`, "
        "its fused AdamW (`adamw_torch_fused`), its chunked fused lm-head log-probs. rlsuite defaults (`auto`, "
        f"resolved by capability): {json.dumps(RESOLVED, sort_keys=True)}"
        + (f"; levers: {names}" if lever_times else "") + f". {steps} steps per block, the first a warm-up; "
        f"{args.rounds} rounds.", "",
        f"Same-loss check on one fixed batch: rlsuite {ours_loss:.8f}, TRL {trl_loss:.8f} "
        f"({'equal within 1e-5' if same else 'DIFFERENT'}).", "",
        "| side | steps timed | median s/step | min | max |", "|---|---|---|---|---|",
        f"| TRL | {len(trl_times)} | {med_trl:.4f} | {min(trl_times):.4f} | {max(trl_times):.4f} |",
        f"| rlsuite (defaults) | {len(our_times)} | {med_ours:.4f} | {min(our_times):.4f} | {max(our_times):.4f} |",
        *lever_rows, "", *per_round,
        f"speedup (defaults; median of the per-round ratios): {speed:.2f}x", "", *lever_lines,
        "## Per phase", "",
        "Seconds per step, medians over the timed steps (each phase's median on its own, so a column need not "
        "add up to its step). Generation is `_generate_single_turn` (TRL) / the engine's `generate` (rlsuite); "
        "the update forward is `_get_per_token_logps_and_entropies` (TRL) / `policy_forward` (rlsuite); "
        "backward, clipping and the optimizer step are timed by the same wrappers on both sides "
        "(`torch.autograd.backward`, `torch.nn.utils.clip_grad_norm_`, the global optimizer-step hooks). "
        "The sampled lengths differ between the sides (temperature 1, their own noise), so generation is "
        "also given per decode step.", "",
        *phase_rows(sides, bounds), "",
        f"In parentheses: the bound of that side's own work at this machine's measured fp32 matmul rate, "
        f"{peak / 1e9:.0f} GFLOP/s (a 2048² `torch.mm` at {args.threads} thread(s), ATen's MKL), and memory "
        f"bandwidth, {bw / 1e9:.1f} GB/s (a 512 MB `copy_`, read + write), both measured in this process after the "
        f"timings. Forward: 2 × {p_ne / 1e6:.1f}M layer parameters per position computed (TRL and rlsuite's "
        f"defaults: every row padded to the longest, {prompt_len} prompt tokens + the decode steps; the levers: each "
        f"prompt once, then the response tokens without padding) + 2 × {lm / 1e6:.1f}M LM-head weights per scored "
        "position (TRL's chunked head on CPU scores every position, the prompt's too, and recomputes its tiles in "
        "the backward; rlsuite scores the response positions); backward 2× the forward (TRL's head 3×); attention's "
        f"own FLOPs (≤ 4·T·H per position and layer) left out. Generation: the prefill's FLOPs (TRL: all {B} rows; "
        f"rlsuite: the {P} distinct prompts) + one read of the {weight_bytes / 1e6:.0f} MB of fp32 weights per decode "
        "step, whatever the batch (8 rows: matrix-vector products, bound by the bandwidth). Optimizer: fused "
        "AdamW's 4 reads and 3 writes per parameter; clipping: one read of the gradients. The step bound is the "
        "sum of those.", "",
    ]
    fast = "levers" if lever_times else "ours"
    if fast == "levers" or RESOLVED.get("train.share_prefix"):  # its update scales with the real tokens, TRL's with
        times = lever_times or our_times  # the padded width
        tok = {k: statistics.mean(r["tokens"] for r in PH.rows[k]) for k in ("trl", fast)}
        scale = (P * prompt_len + tok["trl"]) / (P * prompt_len + tok[fast])
        upd = PH.median(fast, "forward") + PH.median(fast, "backward")
        adj = statistics.median(times) + (scale - 1) * upd
        lines += [f"The sides sample their own completions (their own noise): {tok['trl']:.0f} new tokens a step on "
                  f"average for TRL, {tok[fast]:.0f} for rlsuite. TRL's update computes every row padded to the "
                  "longest (64 here in nearly every step), rlsuite's shared-prefix update only the real "
                  f"tokens: at TRL's token count its forward + backward ({upd:.2f} s) would take {scale:.2f}× as "
                  f"long, a step {adj:.2f} s, {statistics.median(trl_times) / adj:.2f}× TRL's.", ""]
    target = 2.0
    lines += target_lines(med_trl, parts, flops, lever_times or our_times, "levers" if lever_times else "ours", peak,
                          target=target, dropped=REAL_DROPPED)
    lines += ["Raw per-step phase rows (JSON, one per timed step):", "", "```"]
    for _, k in sides:
        for row in PH.rows[k]:
            lines.append(json.dumps({"side": k, **{x: round(v, 4) for x, v in row.items()}}))
    lines += ["```", "", f"speedup: {speed:.2f}x", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
