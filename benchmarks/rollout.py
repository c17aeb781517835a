"""Rollout speed: the hand-written KV-cached sampler (and its C++ version,
``rollout.engine=native``) vs HF `generate`, side by side.

Same model, prompts, sampling settings (temperature 1, no truncation, fixed length: EOS is
not a stop token so both sides generate exactly `--new-tokens`), one torch thread,
alternating the engines `--reps` times per batch size; prints per-rep times and the
median ratio `speedup: N.NNx` (kv vs generate) per batch size, the native engine's ratio to
generate on its own line, plus the distance to the FLOP bound
(2·P·tokens at the measured matmul peak), and writes `benchmarks/results/rollout.md`.

    python benchmarks/rollout.py [--batches 8 32 64] [--new-tokens 32] [--reps 5] [--threads 1] [--no-native]
"""

from __future__ import annotations

from suite.runfolder import cpu_model
import argparse
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from suite.config import ModelConfig
from suite.models import load_model, non_embedding_params
from suite.sampler import HFGenerateEngine, KVSampler, SamplingParams

ROOT = Path(__file__).resolve().parent.parent


def matmul_peak(threads: int) -> float:
    n = 512
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3):
        a @ b
    t0 = time.perf_counter()
    reps = 20
    for _ in range(reps):
        a @ b
    return 2 * n**3 * reps / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, nargs="+", default=[8, 32, 64])
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-native", action="store_true", help="skip rollout.engine=native (the kv sampler in C++)")
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "rollout.md")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok, _ = load_model(ModelConfig())
    model.eval()
    P = non_embedding_params(model)
    kv, hf = KVSampler(model, tok), HFGenerateEngine(model, tok)
    nat = None
    if not args.no_native:
        from suite.native_decode import NativeKVSampler

        nat = NativeKVSampler(model, tok)  # builds the extension first (not timed)
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0)  # no stop ids: fixed length
    peak = matmul_peak(args.threads)
    load_before = os.getloadavg()[0]
    lines = ["# Rollout: KV sampler vs HF generate (tiny model, fp32, CPU)", "",
             f"Machine: {cpu_model()} ({platform.machine()}), {args.threads} torch thread(s); model P = {P:,} non-embedding "
             f"parameters; {args.new_tokens} new tokens per sample; measured fp32 matmul peak "
             f"{peak / 1e9:.1f} GFLOP/s. Command: `python benchmarks/rollout.py`.", "",
             "| batch | HF generate s (median) | KV sampler s (median) | speedup | KV tokens/s | KV share of FLOP bound "
             "| native s (median) | native speedup | native share of FLOP bound |",
             "|---|---|---|---|---|---|---|---|---|"]
    for bsz in args.batches:
        prompts = [tok.encode(f"{i % 97}+{(7 * i) % 89}=", add_special_tokens=False) for i in range(bsz)]
        t_kv, t_hf, t_nat, ratios, nat_ratios = [], [], [], [], []
        for rep in range(args.reps + 1):
            g = torch.Generator().manual_seed(rep)
            t0 = time.perf_counter()
            hf.generate(prompts, params, g)
            t1 = time.perf_counter()
            kv.generate(prompts, params, g)
            t2 = time.perf_counter()
            if nat is not None:
                nat.generate(prompts, params, g)
            t3 = time.perf_counter()
            if rep:  # the first rep warms them up
                t_hf.append(t1 - t0)
                t_kv.append(t2 - t1)
                ratios.append((t1 - t0) / (t2 - t1))
                msg = f"batch {bsz} rep {rep}: generate {t1 - t0:.4f}s  kv {t2 - t1:.4f}s  ratio {ratios[-1]:.2f}"
                if nat is not None:
                    t_nat.append(t3 - t2)
                    nat_ratios.append((t1 - t0) / (t3 - t2))
                    msg += f"  native {t3 - t2:.4f}s  ratio {nat_ratios[-1]:.2f}"
                print(msg)
        tokens = sum(len(p) for p in prompts) + bsz * args.new_tokens
        bound = 2 * P * tokens / peak
        med_kv = statistics.median(t_kv)
        speed = statistics.median(ratios)
        print(f"batch {bsz}: speedup: {speed:.2f}x  (FLOP bound {bound:.4f}s, kv at {bound / med_kv:.1%} of it)")
        row = (f"| {bsz} | {statistics.median(t_hf):.4f} | {med_kv:.4f} | {speed:.2f}x | "
               f"{bsz * args.new_tokens / med_kv:,.0f} | {bound / med_kv:.1%} |")
        if t_nat:
            med_nat = statistics.median(t_nat)
            print(f"batch {bsz}: native vs generate {statistics.median(nat_ratios):.2f}x "
                  f"(native at {bound / med_nat:.1%} of the FLOP bound)")
            row += f" {med_nat:.4f} | {statistics.median(nat_ratios):.2f}x | {bound / med_nat:.1%} |"
        else:
            row += " – | – | – |"
        lines.append(row)
    lines += ["", f"1-minute load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after, "
              f"{os.cpu_count()} cores shared with other jobs: timings are noisy (the two engines alternate, so both "
              "see the same load; the peak is measured once, under the same load). native: `rollout.engine=native`, the kv "
              "sampler with its forward and token loop in C++ (`suite/native_decode.py`)."]
    text = "\n".join(lines) + "\n"
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
