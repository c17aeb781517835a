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
``_compute_loss`` vs rlsuite's aggregated GRPO loss on one fixed batch), then alternates
blocks of steps of the two trainers, prints per-step times and ends with the median ratio
``speedup: N.NNx``. A third side, rlsuite with the opt-in levers (all fp32): ``train.compile`` and
``train.share_prefix`` (``benchmarks/levers.py``), ``optim.fused`` (the fused AdamW kernel, which is
what TRL's side runs: HF Trainer's default ``adamw_torch_fused`` with torch ≥ 2.8 in
transformers 5.24) and ``rollout.engine=native`` (the kv sampler's forward and token loop in
C++), compiled and built before the timings, alternates with the other two and is reported on
its own line (``--no-levers`` skips it). Results go to ``benchmarks/results/vs_trl.md``.

    pip install -e ".[bench]"; python benchmarks/vs_trl.py [--rounds 3] [--steps 6] [--threads 2]
"""

from __future__ import annotations

from suite.runfolder import cpu_model
import argparse
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
P, G, NEW = 4, 8, 32
SPREAD = 2.0  # max/min step time within a side above which the result is flagged unreliable


def build_model(path: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    from suite.models import char_tokenizer

    tok = char_tokenizer()
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=128, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
                      tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)


def prompts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"{rng.randint(10, 99)}+{rng.randint(10, 99)}=" for _ in range(n)]


def reward(prompts, completions, **kw) -> list[float]:
    out = []
    for p, c in zip(prompts, completions):
        a, b = p[:-1].split("+")
        out.append(float(c.strip().split("<")[0] == str(int(a) + int(b))))
    return out


class StepTimer:
    def __init__(self) -> None:
        self.times: list[float] = []
        self.rollout: list[float] = []
        self._t = 0.0

    def callback(self):
        from transformers import TrainerCallback

        timer = self

        class CB(TrainerCallback):
            def on_step_begin(self, args, state, control, **kw):
                timer._t = time.perf_counter()

            def on_step_end(self, args, state, control, **kw):
                timer.times.append(time.perf_counter() - timer._t)

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

    def timed(*a, **kw):
        t0 = time.perf_counter()
        out = inner(*a, **kw)
        timer.rollout.append(time.perf_counter() - t0)
        return out

    trainer._generate_and_score_completions = timed
    return trainer


LEVERS = [("train.compile", True), ("train.share_prefix", True), ("optim.fused", True), ("rollout.engine", "native")]
"""The opt-in levers of the third side: the update's (benchmarks/levers.py), TRL's own optimizer
kernel (fused AdamW, HF Trainer's default) and the kv sampler in C++ (all fp32)."""
LEVER_NAMES = " + ".join(f"{k}={str(v).lower()}" for k, v in LEVERS)


def rlsuite_trainer(path: Path, out: Path, threads: int, extra: list = ()):
    import algorithms  # noqa: F401
    import tasks  # noqa: F401
    from algorithms.base import ALGORITHMS
    from suite.models import load_model
    from suite.spec import resolve
    from suite.trainer import Trainer
    from tasks.base import TASKS

    sets = [("rollout.group_size", G), ("rollout.prompts_per_step", P), ("rollout.max_new_tokens", NEW),
            ("rollout.temperature", 1.0), ("rollout.old_logp", "behaviour"), ("algo.kl_coef", 0.0),
            ("algo.aggregation", "seq-mean-token-mean"), ("optim.lr", 1e-4), ("train.num_threads", threads),
            ("eval.max_prompts", 4), *extra]
    spec = resolve("arith", "grpo", str(path), 0, sets=sets, budgets=[("updates", 10_000)])
    model, tok, _ = load_model(spec.model)
    return Trainer(spec, out / spec.run_id, TASKS.get("arith")(spec.task), ALGORITHMS.get("grpo")(spec.algo), model, tok)


def check_same_loss(path: Path, out: Path, threads: int) -> tuple[float, float]:
    """TRL's `_compute_loss` and rlsuite's aggregated GRPO loss on one fixed batch."""
    import dataclasses

    from suite.aggregation import aggregation_weights
    from suite.policy import policy_forward
    from suite.rollout import collect
    from suite.sampler import SamplingParams

    ours = rlsuite_trainer(path, out / "check", threads)
    tok = ours.tok
    ids = [tok.encode(p) for p in prompts(P, 123) for _ in range(G)]
    rec, _ = collect(ours.engine, tok, ids, SamplingParams(max_new_tokens=NEW, temperature=1.0, stop_ids=(2,)),
                     torch.Generator().manual_seed(0), group_ids=[i // G for i in range(P * G)])
    rewards = torch.randn(P * G, generator=torch.Generator().manual_seed(1))
    batch = ours._score(rec.replace(rewards=rewards, scores=rewards))
    adv = ours.algo.advantages(batch, ours.context())
    batch = dataclasses.replace(batch, adv=adv.adv)
    fwd = policy_forward(ours.model, batch.tokens, batch.attn_mask, 1.0)
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
    trl.model.load_state_dict(ours.model.state_dict())
    trl.model.train()
    trl.current_gradient_accumulation_steps = 1  # set by TRL's training loop; one step per generation batch
    trl_loss = float(trl._compute_loss(trl.model, inputs).detach())
    return ours_loss, trl_loss


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


def target_lines(med_trl: float, parts: dict, flops: dict, times: list[float], key: str, peak: float) -> list[str]:
    """The distance to the 2× target, from this run's own figures: what the rest of the step
    would have to take, next to the update's FLOP bound at the measured matmul peak."""
    med, roll = statistics.median(times), statistics.median(parts[key])
    rest, need = med - roll, med_trl / 2 - roll
    bound = statistics.median(flops[key]) / peak
    side = "rlsuite with the levers" if key == "levers" else "rlsuite"
    head = (f"2× TRL's median is ≤ {med_trl / 2:.4f} s a step; {side} takes {med:.4f} s "
            f"({med_trl / med:.2f}×): rollout {roll:.4f} s, the rest {rest:.4f} s.")
    if med <= med_trl / 2:
        body = " The target is met in this run."
    else:
        body = (f" With this rollout, 2× needs the rest of the step at ≤ {need:.4f} s; the update's FLOP bound "
                f"(6 × non-embedding parameters × positions computed, as charged: "
                f"{statistics.median(flops[key]) / 1e9:.2f} GFLOP) at the measured fp32 matmul peak "
                f"({peak / 1e9:.0f} GFLOP/s) is {bound:.4f} s, so the update runs at {bound / rest:.0%} of its bound.")
    return ["## Against the 2× target", "", head + body, "", DROPPED, ""]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6, help="steps per block (the first of each block is warm-up)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-levers", action="store_true", help="skip the third side (rlsuite with the opt-in levers)")
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "vs_trl.md")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    load_before = os.getloadavg()[0]
    tmp = Path(tempfile.mkdtemp(prefix="rlsuite-vs-trl-"))
    model_dir = tmp / "model"
    build_model(model_dir)
    ours_loss, trl_loss = check_same_loss(model_dir, tmp, args.threads)
    same = abs(ours_loss - trl_loss) <= 1e-5 * max(1.0, abs(trl_loss))
    print(f"same loss on a fixed batch: rlsuite {ours_loss:.8f}  TRL {trl_loss:.8f}  {'OK' if same else 'MISMATCH'}")
    if not args.no_levers:  # compile before timing: the first step and the first new shape compile
        warm = rlsuite_trainer(model_dir, tmp / "warm", args.threads, LEVERS)
        warm.folder.path.mkdir(parents=True, exist_ok=True)
        for _ in range(3):
            warm.step()
    trl_times, our_times, lever_times = [], [], []
    parts: dict[str, list[float]] = {}  # per timed step: the rollout part (generation, grading, scoring)

    flops: dict[str, list[float]] = {}  # per timed step: the update's FLOPs as charged (positions computed)

    def ours_block(name: str, extra: list, r: int) -> list[float]:
        ours = rlsuite_trainer(model_dir, tmp / f"{name}{r}", args.threads, extra)
        ours.folder.path.mkdir(parents=True, exist_ok=True)
        ts, before = [], 0.0
        for s in range(args.steps):
            t0 = time.perf_counter()
            row = ours.step()
            if s:
                ts.append(time.perf_counter() - t0)
                parts.setdefault(name, []).append(row["perf/rollout_time"])
                flops.setdefault(name, []).append(row["budget/flops_train"] - before)
            before = row["budget/flops_train"]
        return ts

    for r in range(args.rounds):
        timer = StepTimer()
        trl = trl_trainer(model_dir, tmp / f"trl{r}", args.steps, r, timer)
        trl.train()
        trl_times += timer.times[1:]
        parts.setdefault("trl", []).extend(timer.rollout[1:])
        ts = ours_block("ours", [], r)
        our_times += ts
        line = f"round {r}: TRL " + " ".join(f"{t:.3f}" for t in timer.times[1:]) + " | rlsuite " + \
            " ".join(f"{t:.3f}" for t in ts)
        if not args.no_levers:
            ts = ours_block("levers", LEVERS, r)
            lever_times += ts
            line += " | rlsuite+levers " + " ".join(f"{t:.3f}" for t in ts)
        print(line, flush=True)
    load_after = os.getloadavg()[0]
    from rollout import matmul_peak  # benchmarks/rollout.py

    peak = statistics.median(matmul_peak(args.threads) for _ in range(3))
    med_trl, med_ours = statistics.median(trl_times), statistics.median(our_times)
    speed = med_trl / med_ours
    spread_trl, spread_ours = max(trl_times) / min(trl_times), max(our_times) / min(our_times)
    lever_rows, lever_lines = [], []
    if lever_times:
        med_lev = statistics.median(lever_times)
        spread_ours = max(spread_ours, max(lever_times) / min(lever_times))
        lever_rows = [f"| rlsuite, {LEVER_NAMES} | {len(lever_times)} | {med_lev:.4f} | "
                      f"{min(lever_times):.4f} | {max(lever_times):.4f} |"]
        lever_lines = [f"speedup with {LEVER_NAMES} (opt-in; compiled before timing): "
                       f"{med_trl / med_lev:.2f}x", ""]
    text = "\n".join([
        "# rlsuite trainer vs TRL GRPOTrainer (side by side, one process)", "",
        f"Machine: {cpu_model()} ({platform.machine()}), {os.cpu_count()} cores (shared), torch {torch.__version__}, "
        f"{args.threads} threads on both sides; TRL {__import__('trl').__version__}, transformers "
        f"{__import__('transformers').__version__}. Command: `{' '.join(['python', 'benchmarks/vs_trl.py', *sys.argv[1:]])}`. "
        f"1-minute load average "
        f"{load_before:.2f} before, {load_after:.2f} after (other jobs share the cores: timings are noisy; "
        "the two sides alternate, so both see the same load).", "",
        "Settings (both sides): 0.54M-parameter Llama (hidden 128, 2 layers, 4 heads, vocab 100), fp32, "
        f"{P} prompts × {G} completions × ≤{NEW} new tokens, EOS ends a completion, temperature 1, no KL, "
        "GRPO loss with per-sequence token mean (TRL loss_type=grpo), one update per generation batch, "
        "π_old = detached current log-probs (TRL num_iterations=1; rlsuite rollout.old_logp=behaviour). "
        "AdamW: TRL runs its default fused kernel (adamw_torch_fused), rlsuite its default per-parameter loop "
        "(fused with optim.fused on the levers side). "
        "TRL generates with HF generate; rlsuite with its KV-cached sampler. TRL runs without gradient "
        "checkpointing (its default is on; rlsuite has none).", "",
        f"Same-loss check on one fixed batch: rlsuite {ours_loss:.8f}, TRL {trl_loss:.8f} "
        f"({'equal within 1e-5' if same else 'DIFFERENT'}).", "",
        "| side | steps timed | median s/step | min | max |", "|---|---|---|---|---|",
        f"| TRL | {len(trl_times)} | {med_trl:.4f} | {min(trl_times):.4f} | {max(trl_times):.4f} |",
        f"| rlsuite | {len(our_times)} | {med_ours:.4f} | {min(our_times):.4f} | {max(our_times):.4f} |",
        *lever_rows, "", *lever_lines,
        "Where the time goes (medians of the same timed steps): the rollout is generation, rewards and "
        "advantages (TRL: `_generate_and_score_completions`; rlsuite: `perf/rollout_time`, which also holds "
        "the scoring passes); the rest of the step is the update (forward, backward, optimizer) and bookkeeping.", "",
        "| side | rollout s | rest of the step s |", "|---|---|---|",
        *[f"| {label} | {statistics.median(parts[k]):.4f} | {statistics.median(ts) - statistics.median(parts[k]):.4f} |"
          for label, k, ts in (("TRL", "trl", trl_times), ("rlsuite", "ours", our_times),
                               ("rlsuite + levers", "levers", lever_times)) if parts.get(k)], "",
        *target_lines(med_trl, parts, flops, lever_times or our_times, "levers" if lever_times else "ours", peak),
        f"speedup: {speed:.2f}x", ""] + ([
        f"UNRELIABLE: step times vary more than {SPREAD:g}x within a side ({spread_trl:.1f}x TRL, "
        f"{spread_ours:.1f}x rlsuite): threads were fighting other jobs for the cores. Rerun on an idle "
        "machine or with --threads 1.", ""] if max(spread_trl, spread_ours) > SPREAD else []))
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
