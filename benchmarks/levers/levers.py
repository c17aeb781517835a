"""The trainer's update levers, side by side in one process: the training step (forward,
backward, AdamW) with ``train.share_prefix``, ``train.compile``, ``optim.fused`` (AdamW as one
fused kernel), ``train.autocast=bf16`` and, with micro-batches of 4 sequences,
``train.bucket_by_length``, against the default HF fp32 forward on the whole batch, on two shapes:

* ``vs_trl``: the 0.54M-parameter Llama of ``benchmarks/vs_trl/vs_trl.py`` (hidden 128, 2 layers),
  4 prompts × 8 completions, 6 prompt tokens, 20–32 response tokens;
* ``gsm8k``: a 3.4M-parameter Llama (hidden 256, 4 layers, MLP 768, vocabulary 1,000),
  2 prompts × 8 completions, 128 prompt tokens (a few-shot GSM8K prompt's order), 48–96
  response tokens.

Every setting trains its own copy of the same initial model on the same batches, in rounds
that alternate the settings (so all see the same machine load); each round's first step is a
warm-up (``train.compile`` compiles there and on the next new shape, outside the timings). It
prints the median step time per setting, the ratio to the default and the largest log-prob
difference from the default forward on the first batch, and writes
``benchmarks/levers/levers.md``.

    python benchmarks/levers/levers.py [--rounds 3] [--steps 4] [--threads 2] [--shapes vs_trl gsm8k]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch
import torch._dynamo

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared modules
from common import command, machine, write_results  # noqa: E402

SHAPES = {  # model (hidden, layers, heads, mlp, vocab), batch (P, G, prompt, min resp, max resp)
    "vs_trl": ((128, 2, 4, 512, 100), (4, 8, 6, 20, 32)),
    "gsm8k": ((256, 4, 8, 768, 1000), (2, 8, 128, 48, 96)),
}
SETTINGS = {  # name: (share_prefix, compile, autocast, micro_batch_size, bucket_by_length, fused AdamW)
    "default (HF fp32)": (False, False, "none", 0, False, False),
    "share_prefix": (True, False, "none", 0, False, False),
    "compile": (False, True, "none", 0, False, False),
    "share_prefix + compile": (True, True, "none", 0, False, False),
    "optim.fused": (False, False, "none", 0, False, True),
    "share_prefix + compile + optim.fused": (True, True, "none", 0, False, True),
    "autocast=bf16": (False, False, "bf16", 0, False, False),
    "autocast=bf16 + share_prefix": (True, False, "bf16", 0, False, False),
    "autocast=bf16 + share_prefix + compile + optim.fused": (True, True, "bf16", 0, False, True),
    "micro_batch_size=4": (False, False, "none", 4, False, False),
    "micro_batch_size=4 + bucket_by_length": (False, False, "none", 4, True, False),
}


def build(shape: str):
    from transformers import LlamaConfig, LlamaForCausalLM

    (h, n_layers, heads, mlp, vocab), _ = SHAPES[shape]
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=h, intermediate_size=mlp, num_hidden_layers=n_layers,
                      num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=512,
                      tie_word_embeddings=True)
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg)


def batches(shape: str, n: int, seed: int = 0):
    """n batches: P prompts (random tokens) × G responses of random lengths, right-padded."""
    (_, _, _, _, vocab), (P, G, W, lo, hi) = SHAPES[shape]
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        prompts = torch.randint(3, vocab, (P, W), generator=g).repeat_interleave(G, 0)
        resp = torch.randint(3, vocab, (P * G, hi), generator=g)
        lens = torch.randint(lo, hi + 1, (P * G,), generator=g)
        keep = torch.arange(hi)[None] < lens[:, None]
        tokens = torch.cat([prompts, resp * keep], 1)
        attn = torch.cat([torch.ones(P * G, W, dtype=torch.long), keep.long()], 1)
        width = W + int(lens.max())  # the batch is as wide as its longest response
        loss_mask = attn.float()
        loss_mask[:, :W] = 0
        adv = torch.randn(P * G, generator=g)
        out.append((tokens[:, :width], attn[:, :width], loss_mask[:, :width], adv, W))
    return out


class Side:
    def __init__(self, model, share: bool, compiled: bool, autocast: str, micro: int, bucket: bool,
                 fused: bool) -> None:
        self.model = copy.deepcopy(model)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, **({"fused": True} if fused else {}))
        self.share, self.compiled, self.autocast, self.micro, self.bucket = share, compiled, autocast, micro, bucket

    def forward(self, tokens, attn, W):
        from rlsuite.suite.policy import policy_forward

        amp = torch.autocast("cpu", dtype=torch.bfloat16) if self.autocast == "bf16" else nullcontext()
        with amp:
            return policy_forward(self.model, tokens, attn, 1.0, frozenset({"entropy"}),
                                  prompt_width=W if self.share else 0, compiled=self.compiled)

    def step(self, batch) -> float:
        """One update; with ``micro`` the batch goes through in micro-batches (gradient
        accumulation), ordered longest first and trimmed of trailing padding with ``bucket``
        (what the trainer does under ``train.bucket_by_length``)."""
        from rlsuite.suite.types import real_width

        tokens, attn, loss_mask, adv, W = batch
        t0 = time.perf_counter()
        B = tokens.shape[0]
        rows = torch.arange(B)
        if self.bucket:
            rows = rows[torch.argsort(attn.sum(-1), descending=True, stable=True)]
        self.opt.zero_grad(set_to_none=True)
        for idx in torch.split(rows, self.micro or B):
            tok, am, lm, a = tokens[idx], attn[idx], loss_mask[idx], adv[idx]
            if self.bucket:
                width = real_width(am)
                tok, am, lm = tok[:, :width], am[:, :width], lm[:, :width]
            fwd = self.forward(tok, am, W)
            ratio = torch.exp(fwd.logp - fwd.logp.detach())  # on-policy GRPO surrogate, seq-mean-token-mean
            per_tok = -ratio * a[:, None] * lm
            loss = (per_tok.sum(-1) / lm.sum(-1)).sum() / B
            loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        return time.perf_counter() - t0


def run_shape(shape: str, rounds: int, steps: int) -> tuple[list[str], dict]:
    model = build(shape)
    n_params = sum(p.numel() for n, p in model.named_parameters() if "embed" not in n)
    data = batches(shape, rounds * steps)
    sides = {name: Side(model, *cfg) for name, cfg in SETTINGS.items()}
    # agreement with the default forward on the first batch (before any update)
    tokens, attn, _, _, W = data[0]
    pred = attn.bool().clone()
    pred[:, 1:] &= attn[:, :-1].bool()
    pred[:, 0] = False
    t_first: dict[str, float] = {}
    with torch.no_grad():
        ref = sides["default (HF fp32)"].forward(tokens, attn, W).logp
        diffs = {}
        for name, side in sides.items():
            t0 = time.perf_counter()
            diffs[name] = float((side.forward(tokens, attn, W).logp.float() - ref)[pred].abs().max())
            t_first[name] = time.perf_counter() - t0
    times: dict[str, list[float]] = {name: [] for name in sides}
    for r in range(rounds):
        for name, side in sides.items():
            block = data[r * steps:(r + 1) * steps]
            ts = [side.step(b) for b in block]
            times[name] += ts[1:]  # the first step of each block is a warm-up
        print(f"[{shape}] round {r}: " + "  ".join(f"{n} {statistics.median(times[n][-(steps - 1):]) * 1e3:.1f} ms"
                                                   for n in sides), flush=True)
    base = statistics.median(times["default (HF fp32)"])
    (_, _, _, _, vocab), (P, G, W, lo, hi) = SHAPES[shape]
    lines = [f"## {shape}: {n_params / 1e6:.2f}M non-embedding parameters, vocabulary {vocab}, "
             f"{P} prompts × {G} completions, {W} prompt tokens, {lo}–{hi} response tokens", "",
             "| setting | median ms/step | vs default | max abs Δlogp vs default (first batch) | first call s |",
             "|---|---|---|---|---|"]
    summary = {}
    for name in sides:
        med = statistics.median(times[name])
        summary[name] = base / med
        lines.append(f"| {name} | {med * 1e3:.1f} | {base / med:.2f}x | {diffs[name]:.1e} | {t_first[name]:.1f} |")
    return lines + [""], summary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4, help="steps per block (the first of each block is warm-up)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "levers.md")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    body = []
    for shape in args.shapes:
        torch._dynamo.reset()  # each shape compiles its own graphs (and pays its own first call)
        lines, _ = run_shape(shape, args.rounds, args.steps)
        body += lines
    cpuinfo = open("/proc/cpuinfo").read()
    bf16 = "yes" if "amx_bf16" in cpuinfo or "avx512_bf16" in cpuinfo else "no"
    text = "\n".join([
        "# Update levers: train.share_prefix, train.compile, optim.fused, train.autocast=bf16, "
        "train.bucket_by_length", "",
        f"Machine: {machine()} (shared), bf16 instructions (AVX-512 BF16/AMX): {bf16}, "
        f"torch {torch.__version__}, {args.threads} threads. Command: `{command(__file__, *sys.argv[1:])}`. "
        f"1-minute load average {load_before:.2f} "
        f"before, {os.getloadavg()[0]:.2f} after.", "",
        "One training step = policy forward (log-probs and entropy), GRPO surrogate, backward, gradient clip, "
        "AdamW, on the same batches for every setting; settings alternate in rounds; medians over "
        f"{args.rounds} × {args.steps - 1} timed steps per setting. `first call s`: the first forward of the "
        "setting (compilation for `compile`). Δlogp: the forward's log-probs against the default's on the first "
        "batch (fp32 levers change summation order only; bf16 changes precision).", ""] + body)
    write_results(args.results, text)


if __name__ == "__main__":
    main()
