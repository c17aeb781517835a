"""Where a real model's decode step goes, against the bounds measured on this machine.

Loads a real model (default the pinned ``smollm2-135m``) and runs rollouts of 8 rows × 64 new
tokens from one chat prompt on three engines, alternating: the default's resolution
(``rollout.engine=auto`` → ``native`` where a C++ toolchain is found, its matmuls on oneDNN-packed
weights), the Python ``onednn`` engine, and the opt-in ``native_bf16`` (where oneDNN has bf16 on
this CPU). It reports:

- each decode step (ms; the best rollout over its decode steps, the prefill's share removed);
- the matmuls alone: one decode step's inner products on the native engines' own packed weights
  (every layer's and the head, batch 8, in order, so the weights stream from memory as in the
  step), which leaves the rest of the step (attention, norms, RoPE, sampling, the loop) as the
  difference;
- the ``onednn`` engine's split from ``torch.profiler`` (self CPU time): matmuls, attention (SDPA),
  sampling (Gumbel draw, log-softmax, argmax over the vocabulary) and the rest;
- the bounds: the weights' bytes ÷ the measured **read** bandwidth (a 512 MB ``sum``; half the bytes
  for bf16), and the matmuls' FLOPs (2 × weights × rows) ÷ the measured fp32 GEMM peak (a 2048²
  ``torch.mm``); and the bandwidth each matmul kernel reaches at batch 8 on the model's shapes.

Writes ``benchmarks/decode_bound/decode_bound.md``.

    python benchmarks/decode_bound/decode_bound.py [--model smollm2-135m] [--threads 1] [--reps 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared modules
from common import command, machine, matmul_peak, write_results  # noqa: E402


ROWS, NEW = 8, 64


def best(f, n: int) -> float:
    f()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def read_bandwidth(mb: int = 512) -> float:
    x = torch.randn(mb * (1 << 20) // 4)
    return x.numel() * 4 / best(lambda: x.sum(), 5)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "decode_bound.md")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    from torch.profiler import ProfilerActivity, profile

    from rlsuite.suite import pinned_models
    from rlsuite.suite.config import ModelConfig
    from rlsuite.suite.engines.base import SamplingParams
    from rlsuite.suite.engines import make_engine
    from rlsuite.suite.engines.native import NativeBF16KVSampler, NativeKVSampler, bf16_supported
    from rlsuite.suite.engines.onednn import OneDNNKVSampler
    from rlsuite.suite.config import RolloutConfig
    from rlsuite.suite.models import load_model

    folder = pinned_models.verified_dir(pinned_models.get(a.model)) if a.model in pinned_models.PINNED else a.model
    model, tok, _ = load_model(ModelConfig(name=str(folder)))
    auto = make_engine("auto", model, tok, RolloutConfig())
    auto_kind = {NativeKVSampler: "native", OneDNNKVSampler: "onednn"}.get(type(auto), type(auto).__name__)
    engines = {f"auto ({auto_kind})": auto, "onednn": OneDNNKVSampler(model, tok)}
    if bf16_supported() is None:
        engines["native_bf16"] = NativeBF16KVSampler(model, tok)
    eng = engines["onednn"]
    msgs = [{"role": "user", "content": "What is 12 + 34? Reply with only the number."}]
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    sp = SamplingParams(max_new_tokens=NEW, temperature=1.0, stop_ids=())  # no stop: every row decodes NEW tokens
    sp1 = SamplingParams(max_new_tokens=1, temperature=1.0, stop_ids=())
    g = torch.Generator().manual_seed(0)
    steps: dict[str, list[float]] = {k: [] for k in engines}
    for r in range(a.reps):  # the engines alternate, so they see the same machine
        for k, e in (list(engines.items()) if r % 2 == 0 else list(engines.items())[::-1]):
            rollout = best(lambda: e.generate([ids] * ROWS, sp, g), 2)
            prefill = best(lambda: e.generate([ids] * ROWS, sp1, g), 2)
            steps[k].append((rollout - prefill) / (NEW - 1))
    step_of = {k: min(v) for k, v in steps.items()}
    step = step_of["onednn"]

    def matmuls_alone(e) -> float:
        """One decode step's inner products on engine ``e``'s packed weights, in layer order."""
        ws = [w for i, w in enumerate(e._flat) if e._transposed(i)] + [e._head_t]
        dt = torch.bfloat16 if ws[0].dtype == torch.bfloat16 else torch.float32
        xs = {w.shape[1]: torch.randn(ROWS, w.shape[1], dtype=dt) for w in ws}
        return best(lambda: [torch.ops.mkldnn._linear_pointwise(xs[w.shape[1]], w, None, "none", [], "")
                             for w in ws], a.reps)

    alone = {k: matmuls_alone(e) for k, e in engines.items() if isinstance(e, NativeKVSampler) and e._packed}
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        eng.generate([ids] * ROWS, sp, g)
    groups = {"matmuls (oneDNN inner product)": ("mkldnn::_linear_pointwise",),
              "attention (SDPA)": ("aten::_scaled_dot_product_flash_attention_for_cpu",),
              "sampling (Gumbel draw, log-softmax, argmax over the vocabulary)":
                  ("aten::uniform_", "aten::log_", "aten::_log_softmax", "aten::argmax", "aten::sub",
                   "aten::exponential_")}
    self_us = {e.key: e.self_cpu_time_total for e in prof.key_averages()}
    total = sum(self_us.values())
    split = {k: sum(self_us.get(n, 0.0) for n in names) for k, names in groups.items()}
    split["the rest (norms, RoPE, cache writes, other ops)"] = total - sum(split.values())

    p = {n: t for n, t in model.named_parameters()}
    layer_w = [t for n, t in p.items() if t.dim() == 2 and "embed" not in n and "lm_head" not in n]
    head = eng.w["lm_head.weight"]
    n_w = sum(t.numel() for t in layer_w) + head.numel()
    wbytes = 4 * n_w
    bw = statistics.median(read_bandwidth() for _ in range(3))
    peak = statistics.median(matmul_peak(a.threads, 2048) for _ in range(3))
    bound_bw, bound_fl = wbytes / bw, 2 * ROWS * n_w / peak
    kernels = []
    shapes = sorted({tuple(t.shape) for t in layer_w} | {tuple(head.shape)}, key=lambda s: -s[0] * s[1])
    for o, i in shapes:
        w, x = torch.randn(o, i), torch.randn(ROWS, i)
        packed = torch.ops.mkldnn._reorder_linear_weight(w)
        t_dnn = best(lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], ""), 20)
        t_aten = best(lambda: torch.nn.functional.linear(x, w), 20)
        kernels.append(f"| {o} × {i} | {1e6 * t_dnn:.0f} ({4 * o * i / t_dnn / 1e9:.1f} GB/s) | "
                       f"{1e6 * t_aten:.0f} ({4 * o * i / t_aten / 1e9:.1f} GB/s) |")
    hb, xb = head.detach().bfloat16(), torch.randn(ROWS, head.shape[1]).bfloat16()
    t_bf16 = best(lambda: torch.nn.functional.linear(xb, hb), 10)
    bf16_rows = []
    try:
        torch.ops.mkldnn._reorder_linear_weight(hb)
        dnn_bf16 = "available"
        for o, i in shapes:  # the lever's kernels: oneDNN packed bf16 weights on the model's shapes
            wb, xb2 = torch.randn(o, i).bfloat16(), torch.randn(ROWS, i).bfloat16()
            pb = torch.ops.mkldnn._reorder_linear_weight(wb)
            t = best(lambda: torch.ops.mkldnn._linear_pointwise(xb2, pb, None, "none", [], ""), 20)
            bf16_rows.append(f"| {o} × {i} | {1e6 * t:.0f} ({2 * o * i / t / 1e9:.1f} GB/s of bf16 weights) |")
    except RuntimeError as e:
        dnn_bf16 = f"refused: `{str(e).splitlines()[0]}`"
    prof_step = total / 1e6 / NEW
    rows = [f"| {k} | {1e3 * v / 1e6 / NEW:.1f} | {v / total:.0%} |" for k, v in split.items()]
    text = "\n".join([
        f"# The decode step of `{a.model}` against its bounds", "",
        f"Machine: {machine()}, {a.threads} torch thread(s); torch "
        f"{torch.__version__}. Command: `{command(__file__, *sys.argv[1:])}`. "
        f"1-minute load average {os.getloadavg()[0]:.2f} at the end.", "",
        f"{ROWS} rows × {NEW} new tokens from one chat prompt ({len(ids)} tokens), no stop token; the engines "
        f"alternate ({a.reps} rounds, best of 2 each; the decode step = (rollout − prefill and first token) / "
        f"{NEW - 1}).", "",
        "| engine | decode step ms (best; rounds) | × the fp32 step's larger bound | matmuls alone ms | "
        "rest of the step ms |",
        "|---|---|---|---|---|",
        *[f"| `{k}` | **{1e3 * step_of[k]:.1f}** ({', '.join(f'{1e3 * x:.1f}' for x in steps[k])}) | "
          f"{step_of[k] / max(bound_bw, bound_fl):.2f} | "
          + (f"{1e3 * alone[k]:.1f} | {1e3 * (step_of[k] - alone[k]):.1f} |" if k in alone else "— | — |")
          for k in engines], "",
        f"Bounds: the {wbytes / 1e6:.0f} MB of fp32 matmul weights (layers + LM head) at the measured read bandwidth "
        f"{bw / 1e9:.1f} GB/s (a 512 MB `sum`) take **{1e3 * bound_bw:.1f} ms** (bf16: half the bytes, "
        f"{1e3 * bound_bw / 2:.1f} ms); their {2 * ROWS * n_w / 1e9:.2f} GFLOP "
        f"at the fp32 GEMM peak {peak / 1e9:.0f} GFLOP/s (2048² `torch.mm`) take **{1e3 * bound_fl:.1f} ms**. The "
        f"default's step is {step_of[next(iter(engines))] / max(bound_bw, bound_fl):.2f}× the larger bound (the goal: "
        "≤ 1.5×). Matmuls alone: one step's oneDNN inner products on the engine's own packed weights, every layer's "
        "and the head's in order (so the weights stream from memory as in a step); the rest is attention, norms, "
        "RoPE, cache writes, sampling over the vocabulary and the token loop.", "",
        f"Split of one profiled rollout of the Python `onednn` engine (decode step {1e3 * step:.1f} ms; "
        f"{1e3 * prof_step:.1f} ms a token with the profiler's overhead), self CPU time:", "",
        "| part | ms per token | share |", "|---|---|---|", *rows, "",
        f"Batch-{ROWS} matmuls on the model's shapes, µs per call (weight bytes ÷ time):", "",
        "| weight [out × in] | oneDNN packed (the engine) | ATen `linear` (MKL) |", "|---|---|---|", *kernels, "",
        f"bf16 lever: oneDNN bf16 inner product on this CPU: {dnn_bf16}; ATen bf16 `linear` on the LM head's shape "
        f"{1e3 * t_bf16:.1f} ms (fp32 oneDNN: see the table)"
        + (", so half the bytes does not pay here without a bf16 kernel of the CPU's." if not bf16_rows else
           ". oneDNN packed bf16, µs per call:"), "",
        *(["| weight [out × in] | oneDNN packed bf16 |", "|---|---|", *bf16_rows, ""] if bf16_rows else [])])
    write_results(a.results, text)


if __name__ == "__main__":
    main()
