"""Rollout speed: the hand-written KV-cached sampler (and its C++ version,
``rollout.engine=native``) vs HF `generate`, side by side.

Same model, prompts, sampling settings (temperature 1, no truncation, fixed length: EOS is
not a stop token so both sides generate exactly `--new-tokens`), one torch thread,
alternating the engines `--reps` times per batch size; prints per-rep times and the
median ratio `speedup: N.NNx` (kv vs generate) per batch size, the native engine's ratio to
generate on its own line, plus the distance to the FLOP bound
(2·P·tokens at the measured matmul peak), and writes `benchmarks/rollout/rollout.md`.

``--model NAME_OR_FOLDER`` (a pinned name such as ``smollm2-135m``, a local folder or a hub id)
measures a real model instead: prompts are ``"What is a + b? Reply with only the number."``
(distinct two-digit operands per row, the same length) through the model's chat template, still
fixed-length (no stop token on any side), and the table adds new tokens/s of every engine and
the decode step's memory-bandwidth bound (weights read per step ÷ the measured bandwidth);
results go to ``benchmarks/rollout/rollout_real.md``.

    python benchmarks/rollout/rollout.py [--batches 8 32 64] [--new-tokens 32] [--reps 5] [--threads 1] [--no-native]
    python benchmarks/rollout/rollout.py --model smollm2-135m [--batches 8 16 32 64] [--reps 3]
    .venv-vllm/bin/python benchmarks/rollout/rollout.py --model smollm2-135m --engines kv native onednn vllm \
        --batches 8 32 64 --new-tokens 64 256 --reps 2

``--engines`` picks the engines of the real-model table (default: generate kv native onednn);
``vllm`` (vLLM on its CPU platform, ``rollout.engine=vllm``, fp32, eager) needs the interpreter of
the vLLM environment (``scripts/vllm_cpu_env.sh``). With several ``--new-tokens`` the table has a
row per (batch, length); every engine is warmed up once per batch with a 4-token call, then the
engines alternate within every timed rep.
"""

from __future__ import annotations

from rlsuite.suite.runfolder import cpu_model
import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from rlsuite.suite.config import ModelConfig
from rlsuite.suite.models import load_model, non_embedding_params
from rlsuite.suite.engines.hf import HFGenerateEngine
from rlsuite.suite.engines.kv import KVSampler
from rlsuite.suite.engines.base import SamplingParams

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared modules
from common import command, machine, matmul_peak, memory_bandwidth, write_results  # noqa: E402

STUDY = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, nargs="+", default=[8, 32, 64])
    ap.add_argument("--new-tokens", type=int, nargs="+", default=[32])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-native", action="store_true", help="skip rollout.engine=native (the kv sampler in C++)")
    ap.add_argument("--model", default=None, help="a real model (pinned name, folder or hub id); default: tiny")
    ap.add_argument("--engines", nargs="+", default=["generate", "kv", "native", "onednn"],
                    choices=["generate", "kv", "native", "onednn", "vllm"], help="--model: the engines to time")
    ap.add_argument("--results", type=Path, default=None,
                    help="default benchmarks/rollout/rollout.md (rollout_real.md with --model)")
    args = ap.parse_args()
    if args.model is not None:
        return real_main(args)
    if len(args.new_tokens) != 1:
        ap.error("several --new-tokens are for --model (the real-model table)")
    args.new_tokens = args.new_tokens[0]
    args.results = args.results or STUDY / "rollout.md"
    torch.set_num_threads(args.threads)
    model, tok, _ = load_model(ModelConfig())
    model.eval()
    P = non_embedding_params(model)
    kv, hf = KVSampler(model, tok), HFGenerateEngine(model, tok)
    nat = None
    if not args.no_native:
        from rlsuite.suite.engines.native import NativeKVSampler

        nat = NativeKVSampler(model, tok)  # builds the extension first (not timed)
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0)  # no stop ids: fixed length
    peak = matmul_peak(args.threads)
    load_before = os.getloadavg()[0]
    lines = ["# Rollout: KV sampler vs HF generate (tiny model, fp32, CPU)", "",
             f"Machine: {cpu_model()} ({platform.machine()}), {args.threads} torch thread(s); "
             f"model P = {P:,} non-embedding "
             f"parameters; {args.new_tokens} new tokens per sample; measured fp32 matmul peak "
             f"{peak / 1e9:.1f} GFLOP/s. Command: `{command(__file__)}`.", "",
             "| batch | HF generate s (median) | KV sampler s (median) | speedup | KV tokens/s "
             "| KV share of FLOP bound "
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
              "see the same load; the peak is measured once, under the same load). "
              "native: `rollout.engine=native`, the kv "
              "sampler with its forward and token loop in C++ (`suite/native_decode.py`)."]
    text = "\n".join(lines) + "\n"
    write_results(args.results, text)


def real_main(args) -> None:
    """``--model``: tokens/s of the chosen engines on a real model, per (batch, new tokens)."""
    from rlsuite.suite.prompts import encode_text

    torch.set_num_threads(args.threads)
    model, tok, _ = load_model(ModelConfig(name=args.model))
    model.eval()
    cfg = model.config
    n_all = sum(p.numel() for p in model.parameters())
    P = non_embedding_params(model)  # includes the unembedding matmul
    weight_bytes = 4 * P  # fp32 weights a decode step reads (the embedding table: only B rows of it)
    head = cfg.vocab_size * cfg.hidden_size  # the LM head's weights (a prefill applies it at the last position only)
    from rlsuite.suite.engines import make_engine
    from rlsuite.suite.spec import resolve

    rollout = resolve("arith", "grpo", args.model, 0).rollout  # only the vLLM engine reads it (its KV cache)
    engines, notes = {}, {}
    for name in args.engines:
        t0 = time.perf_counter()
        engines[name] = make_engine("hf" if name == "generate" else name, model, tok, rollout)  # native: builds first
        if name == "vllm":
            import vllm

            start_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            engines[name].load_weights(model.state_dict(), 1)  # the policy's weights (a push, as after an update)
            notes["vllm"] = (f"vLLM {vllm.__version__} on its CPU platform (`rollout.engine=vllm`: fp32, eager, "
                             f"KV cache {rollout.vllm_cpu_kv_gib} GiB, per-request seeds, `processed_logprobs`); "
                             f"its start took {start_s:.1f} s and one weight push {time.perf_counter() - t0:.2f} s "
                             "(not in the table)")
    names = list(engines)
    load_before = os.getloadavg()[0]
    times: dict[tuple[int, int, str], list[float]] = {}
    prompts_of = {}
    for bsz in args.batches:
        prompts = [encode_text([{"role": "user", "content": f"What is {10 + i % 90} + {10 + (7 * i + 3) % 90}? "
                                 "Reply with only the number."}], tok, "auto")[0] for i in range(bsz)]
        prompts_of[bsz] = prompts
        for eng in engines.values():  # warm-up (not timed)
            eng.generate(prompts, SamplingParams(max_new_tokens=4, temperature=1.0), torch.Generator().manual_seed(0))
        for L in args.new_tokens:
            params = SamplingParams(max_new_tokens=L, temperature=1.0)  # no stop ids: fixed length
            for rep in range(1, args.reps + 1):
                msg = [f"batch {bsz} new {L} rep {rep}:"]
                for name, eng in engines.items():
                    g = torch.Generator().manual_seed(rep)
                    t0 = time.perf_counter()
                    out = eng.generate(prompts, params, g)
                    dt = time.perf_counter() - t0
                    assert all(len(x) == L for x in out.ids), name
                    msg.append(f"{name} {dt:.3f}s")
                    times.setdefault((bsz, L, name), []).append(dt)
                print("  ".join(msg), flush=True)
    load_after = os.getloadavg()[0]
    peak = statistics.median(matmul_peak(args.threads, 2048) for _ in range(3))
    bw = statistics.median(memory_bandwidth() for _ in range(3))
    prompt_len = len(prompts_of[args.batches[0]][0])
    ref = "kv" if "kv" in names else names[0]
    others = [n for n in names if n != ref]
    lines = [f"# Rollout on a real model ({args.model}): the engines side by side (fp32, CPU)", "",
             f"Machine: {machine()}, {args.threads} torch thread(s); "
             f"torch {torch.__version__}, transformers {__import__('transformers').__version__}. Command: "
             f"`{command(__file__, *sys.argv[1:], python=Path(sys.executable).name)}`. "
             "1-minute load average "
             f"{load_before:.2f} before, {load_after:.2f} after (the engines alternate within every rep, so all see "
             "the same load).", "",
             f"Model: {args.model}, {n_all / 1e6:.1f}M parameters ({cfg.num_hidden_layers} layers, hidden "
             f"{cfg.hidden_size}, vocabulary {cfg.vocab_size:,}), fp32. Prompts: \"What is a + b? Reply with only the "
             f"number.\" through the chat template ({prompt_len} tokens, distinct operands per row, no padding). "
             "Sampling: temperature 1, no top-k/top-p, **fixed length: every row generates the table's new tokens on "
             "every engine (no stop token, EOS included)**. generate = `rollout.engine=hf` (`generate` with "
             "`output_logits`, then μ's log-probs); kv, native, onednn = `rollout.engine=kv|native|onednn`. "
             + "".join(f"{notes[n]}. " for n in names if n in notes)
             + f"{args.reps} timed reps per row after a 4-token warm-up per batch; medians; tok/s = new tokens ÷ the "
             "whole call (prefill included).", "",
             f"Bounds, measured after the timings in the same process: fp32 matmul {peak / 1e9:.0f} GFLOP/s (2048² "
             f"`torch.mm`), memory bandwidth {bw / 1e9:.1f} GB/s (512 MB `copy_`). A decode step reads the "
             f"{weight_bytes / 1e6:.0f} MB of fp32 weights once (bandwidth bound {1e3 * weight_bytes / bw:.0f} ms a "
             f"step at any batch) and does 2·P·B FLOPs (P = {P / 1e6:.1f}M with the LM head); the prefill "
             f"2·(P − LM head)·B·{prompt_len} FLOPs + the head at the last position; the first new token comes from "
             "the prefill. `bound s` = prefill FLOPs + (new − 1) × max(decode FLOPs, weight read); `at bound` = bound "
             "÷ the engine's time.", "",
             "| batch | new tokens | " + " | ".join(f"{n} s" for n in names) + " | "
             + " | ".join(f"{n} tok/s" for n in names) + " | " + " | ".join(f"{n} vs {ref}" for n in others)
             + " | bound s | " + " | ".join(f"{n} at bound" for n in names) + " |",
             "|---" * (3 + 3 * len(names) + len(others)) + "|"]
    for bsz in args.batches:
        for L in args.new_tokens:
            med = {n: statistics.median(times[(bsz, L, n)]) for n in names}
            per_step = max(2 * P * bsz / peak, weight_bytes / bw)
            bound = 2 * (P - head) * bsz * prompt_len / peak + 2 * head * bsz / peak + (L - 1) * per_step
            lines.append(f"| {bsz} | {L} | " + " | ".join(f"{med[n]:.2f}" for n in names) + " | "
                         + " | ".join(f"{bsz * L / med[n]:,.0f}" for n in names) + " | "
                         + " | ".join(f"{med[ref] / med[n]:.2f}x" for n in others)
                         + f" | {bound:.2f} | " + " | ".join(f"{bound / med[n]:.0%}" for n in names) + " |")
    text = "\n".join(lines) + "\n"
    results = args.results or STUDY / "rollout_real.md"
    write_results(results, text)


if __name__ == "__main__":
    main()
