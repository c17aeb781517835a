"""One prepared GPU check (under 8 minutes on an H200-class GPU): generation tokens/s of a
Qwen2.5-0.5B-shaped random model through rlsuite's KV-cached sampler at batch 1 → 256, training
MFU of the policy update, and the end-to-end GRPO step time. Writes benchmarks/gpu_check/gpu.md.

    bash benchmarks/gpu_check/gpu_check.sh            # on a CUDA machine
    python benchmarks/gpu_check/gpu_check.py --device cpu --small   # a CPU dry run of the same code
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import torch

STUDY = Path(__file__).resolve().parent


def qwen_like(small: bool):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if small:
        cfg = Qwen2Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    else:  # Qwen2.5-0.5B shapes
        cfg = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                          num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=4096,
                          tie_word_embeddings=True, rope_theta=1e6)
    torch.manual_seed(0)
    return Qwen2ForCausalLM(cfg)


class IdTok:
    """Just enough tokenizer for the sampler (ids in, ids out)."""

    pad_token_id = 0
    eos_token_id = 1

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(map(str, ids))


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16, 64, 256])
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=128)
    args = ap.parse_args()
    dev = torch.device(args.device)
    dtype = getattr(torch, args.dtype) if dev.type == "cuda" else torch.float32
    from rlsuite.suite.models import non_embedding_params
    from rlsuite.suite.policy import policy_forward
    from rlsuite.suite.engines.kv import KVSampler
    from rlsuite.suite.engines.base import SamplingParams

    model = qwen_like(args.small).to(dev, dtype)
    P = non_embedding_params(model)
    eng = KVSampler(model, IdTok())
    lines = [f"# GPU check ({torch.cuda.get_device_name() if dev.type == 'cuda' else platform.machine() + ' CPU'})", "",
             f"Model: Qwen2.5-0.5B-shaped random weights ({P / 1e6:.0f}M non-embedding parameters), {dtype}; prompt "
             f"{args.prompt} tokens, {args.new} new tokens, KV-cached sampler, temperature 1.", "",
             "| batch | generate s | tokens/s |", "|---|---|---|"]
    gen = torch.Generator().manual_seed(0)
    for b in args.batches:
        prompts = [[int(x) for x in torch.randint(2, 500, (args.prompt,), generator=gen)] for _ in range(b)]
        params = SamplingParams(max_new_tokens=args.new, temperature=1.0)
        eng.generate(prompts[:1], SamplingParams(max_new_tokens=4, temperature=1.0), gen)  # warm-up
        sync(dev)
        t0 = time.perf_counter()
        eng.generate(prompts, params, gen)
        sync(dev)
        dt = time.perf_counter() - t0
        lines.append(f"| {b} | {dt:.3f} | {b * args.new / dt:,.0f} |")
        print(lines[-1], flush=True)
    # training MFU of one forward+backward at batch 64 × (prompt + new)
    B, T = (64, args.prompt + args.new) if not args.small else (8, 64)
    tokens = torch.randint(2, 500, (B, T), device=dev)
    mask = torch.ones(B, T, dtype=torch.long, device=dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    for i in range(3):
        sync(dev)
        t0 = time.perf_counter()
        with torch.autocast(dev.type, dtype=dtype, enabled=dev.type == "cuda"):
            loss = -policy_forward(model, tokens, mask, 1.0).logp.mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        sync(dev)
        dt = time.perf_counter() - t0
    flops = 6 * P * B * T
    peak = 989e12 if dev.type == "cuda" else float("nan")  # H100/H200 dense bf16
    lines += ["", f"Training step (forward + backward + AdamW) at {B} × {T} tokens: {dt:.3f} s, "
              f"{flops / dt / 1e12:.1f} TFLOP/s, MFU {flops / dt / peak:.1%} of 989 TFLOP/s bf16 dense.", ""]
    out = STUDY / ("gpu.md" if dev.type == "cuda" else "gpu_cpu_dryrun.md")
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
