"""The opt-in bf16 engine (``rollout.engine=native_bf16``, #33): its decode speed against the fp32
native engine, side by side, and the engine–trainer gap it creates with what token TIS does with it.

1. Speed: SmolLM2-135M-Instruct, 8 rows × 64 new tokens from one chat prompt, no stop token, one
   torch thread; the fp32 and bf16 engines alternate (``--reps`` rounds, best of 3 each), the
   decode step = (rollout − prefill-and-first-token) / 63.
2. Gap: GRPO on SmolLM2 at the real-model preset of ``benchmarks/mismatch/vllm_mismatch.py`` (4 prompts × 8
   samples, T 0.7, ≤ 16 new tokens, π_old recomputed) for ``--updates`` updates, arms ``native``
   (fp32), ``native_bf16`` and ``native_bf16`` + ``loss.is_correction=token_tis``; per step μ = the
   engine's log-probs, π_old = the fp32 trainer's.

Writes a section of ``benchmarks/mismatch/mismatch.md`` and prints it.

    rlsuite models fetch smollm2-135m && python benchmarks/mismatch/bf16_engine.py --updates 6
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from vllm_mismatch import BASE, run_arm_cmd, summarise, write_section

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared modules
from common import command  # noqa: E402

BEGIN, END = "<!-- bf16 engine section: benchmarks/bf16_engine.py -->", "<!-- end of the bf16 engine section -->"
"""The section's markers, as in mismatch.md (they name the script's path before the study folders)."""
ARMS = {"native (fp32)": ["rollout.engine=native"], "native_bf16": ["rollout.engine=native_bf16"],
        "native_bf16+token_tis": ["rollout.engine=native_bf16", "loss.is_correction=token_tis"]}


def decode_steps(reps: int) -> dict[str, list[float]]:
    from rlsuite.suite import pinned_models
    from rlsuite.suite.config import ModelConfig
    from rlsuite.suite.engines.base import SamplingParams
    from rlsuite.suite.engines.native import NativeBF16KVSampler, NativeKVSampler
    from rlsuite.suite.models import load_model

    model, tok, _ = load_model(ModelConfig(name=str(pinned_models.verified_dir(pinned_models.get("smollm2-135m")))))
    ids = tok.apply_chat_template([{"role": "user", "content": "What is 12 + 34? Reply with only the number."}],
                                  add_generation_prompt=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    engines = {"native (fp32)": NativeKVSampler(model, tok), "native_bf16": NativeBF16KVSampler(model, tok)}
    new, rows = 64, 8
    sp = SamplingParams(max_new_tokens=new, temperature=1.0, stop_ids=())
    sp1 = SamplingParams(max_new_tokens=1, temperature=1.0, stop_ids=())

    def best(f) -> float:
        ts = []
        for _ in range(3):
            t = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t)
        return min(ts)

    out: dict[str, list[float]] = {k: [] for k in engines}
    for r in range(reps):
        for k in (list(engines) if r % 2 == 0 else list(engines)[::-1]):
            e, g = engines[k], torch.Generator().manual_seed(r)
            full = best(lambda: e.generate([ids] * rows, sp, g))
            first = best(lambda: e.generate([ids] * rows, sp1, g))
            out[k].append((full - first) / (new - 1))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--updates", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--out", type=Path, default=Path("/tmp/bf16_engine"))
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    steps = decode_steps(a.reps)
    med = {k: statistics.median(v) for k, v in steps.items()}
    res = {}
    for arm, sets in ARMS.items():
        res[arm] = summarise(run_arm_cmd(sys.executable, arm, BASE + sets, a.seed, a.updates, a.out, 1))
    from rlsuite.suite.runfolder import cpu_model

    g = (lambda v: "—" if v is None or v != v else f"{v:.3g}")  # noqa: E731
    lines = [BEGIN, "", "## The opt-in bf16 engine (`rollout.engine=native_bf16`, #33)", "",
             f"Machine: {cpu_model() or platform.processor()} ({platform.machine()}), {os.cpu_count()} cores, one "
             f"torch thread, one process at a time; torch {torch.__version__}. "
             f"Command: `{command(__file__, *sys.argv[1:])}`.", "",
             "Decode step of SmolLM2-135M-Instruct, 8 rows × 64 new tokens, no stop token (the two engines "
             f"alternate, {a.reps} rounds, best of 3 each): "
             + "; ".join(f"**{k} {1e3 * med[k]:.1f} ms** (rounds: " + ", ".join(f"{1e3 * x:.1f}" for x in v) + ")"
                         for k, v in steps.items())
             + f"; bf16 / fp32 = {med['native (fp32)'] / med['native_bf16']:.2f}× faster.", "",
             f"GRPO, the real-model preset of `benchmarks/mismatch/vllm_mismatch.py` with `rollout.engine` per arm, "
             f"{a.updates} updates, seed {a.seed}; per step μ = the engine's log-probs, π_old = the fp32 trainer's "
             "(recomputed); means over the steps (max / min over them for the extremes).", "",
             "| arm | steps | mean k1 KL(μ‖π_old) | mean \\|Δ log p\\| | max \\|Δ log p\\| | ratio π_old/μ min | max "
             "| TIS truncated | mean IS weight | val acc start → end | rollout s/step | step s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for arm, r in res.items():
        lines.append(f"| {arm} | {r['steps']} | {g(r['kl'])} | {g(r['abs_mean'])} | {g(r['abs_max'])} | "
                     f"{g(r['ratio_min'])} | {g(r['ratio_max'])} | {g(r['truncated'])} | {g(r['weight_mean'])} | "
                     f"{g(r['val_start'])} → {g(r['val_end'])} | {r['rollout_s']:.2f} | {r['step_s']:.2f} |")
    lines += ["", END]
    write_section("\n".join(lines), BEGIN, END)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
