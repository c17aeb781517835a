"""The planned cost of a sweep (sweeps/cost.py) and ``rlsuite sweep run SPEC --dry-run``.

Run: pytest tests/sweeps/test_sweep_cost.py
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rlsuite.suite.cli import main
from rlsuite.suite.spec import resolve
from rlsuite.sweeps import cost
from rlsuite.sweeps.cost import KNOWN_CONFIGS, Arch

ROOT = Path(__file__).resolve().parents[2]


def test_smollm2_135m_parameter_count_by_hand():
    a = Arch.from_config(KNOWN_CONFIGS["HuggingFaceTB/SmolLM2-135M"])
    # per layer: q 576·576 + k,v 2·576·192 + o 576·576 = 884,736; MLP 3·576·1536 = 2,654,208; norms 1,152
    assert a.per_layer == 884_736 + 2_654_208 + 1_152 == 3_540_096
    # 30 layers + final norm 576 + one (tied) embedding 49152·576 = 28,311,552
    assert a.params == 30 * 3_540_096 + 576 + 28_311_552 == 134_515_008
    assert a.flops_params == a.params  # tied: the unembedding matmul counts, the input table does not
    arch, src = cost.model_arch("smollm2-135m")  # the pinned model: its fetched config or the table
    assert arch is not None and arch.params == 134_515_008, src


def test_qwen25_math_15b_from_the_table():
    arch, src = cost.model_arch("Qwen/Qwen2.5-Math-1.5B")
    assert arch is not None, src
    # 28 × (attention 5,505,024 + q/k/v biases 2,048 + MLP 41,287,680 + norms 3,072) + 1,536 = 1.31 B
    assert arch.trunk == 28 * 46_797_824 + 1_536 == 1_310_340_608
    assert arch.params == 1_310_340_608 + 151_936 * 1_536 == 1_543_714_304


@pytest.mark.parametrize("kind", ["llama_tiny", "qwen2_untied", "qwen3"])
def test_formula_matches_transformers_models(kind):
    import torch
    import transformers

    from rlsuite.suite.models import CHARS, SPECIAL, Critic, non_embedding_params, tiny_config

    if kind == "llama_tiny":
        cfg = tiny_config(len(SPECIAL) + len(CHARS))
        model = transformers.LlamaForCausalLM(cfg)
    elif kind == "qwen2_untied":
        cfg = transformers.Qwen2Config(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                                       num_key_value_heads=2, vocab_size=120, tie_word_embeddings=False)
        model = transformers.Qwen2ForCausalLM(cfg)
    else:
        if not hasattr(transformers, "Qwen3Config"):
            pytest.skip("this transformers has no Qwen3")
        cfg = transformers.Qwen3Config(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                                       num_key_value_heads=2, head_dim=24, vocab_size=120, tie_word_embeddings=True)
        model = transformers.Qwen3ForCausalLM(cfg)
    a = Arch.from_config(cfg.to_dict())
    unique = {id(p): p.numel() for p in model.parameters()}
    assert a.params == sum(unique.values())
    assert a.flops_params == non_embedding_params(model)
    with torch.no_grad():
        critic = Critic(model, "separate")
    h = cfg.hidden_size
    assert a.critic_params + h + 1 == sum(p.numel() for p in critic.parameters())  # + the linear value head
    assert a.critic_flops_params == critic.n_params()


def test_checkpoint_final_bytes_and_gpu_hours_by_hand():
    a = Arch.from_config(KNOWN_CONFIGS["HuggingFaceTB/SmolLM2-135M"])
    n = 134_515_008
    assert cost.checkpoint_bytes(a, "bfloat16") == n * (2 + 2 * 2) == 807_090_048  # weights + 2 bf16 moments
    assert cost.checkpoint_bytes(a, "bfloat16", behaviour=1) == 807_090_048 + 2 * n  # + one behaviour copy
    assert cost.checkpoint_bytes(a, "bfloat16", refreshed_ref=True) == 807_090_048 + 2 * n
    assert cost.checkpoint_bytes(a, "float32", separate_critic=True) == 2 * n * (4 + 2 * 4)  # tied: critic copy = n
    assert cost.final_bytes(a, "bfloat16") == 2 * n == 269_030_016
    assert cost.run_peak_bytes(807_090_048, 269_030_016) == 2 * 807_090_048  # two checkpoints at once
    assert cost.run_peak_bytes(100, 300) == 400
    # behaviour copies: periodic re-syncs every step unless k reaches a step's updates; lag keeps ceil(k/m)
    assert [cost.behaviour_copies("periodic", k, 4) for k in (0, 2, 4, 9)] == [0, 0, 1, 1]
    assert [cost.behaviour_copies("lag", k, 4) for k in (0, 1, 4, 8, 9)] == [0, 1, 1, 2, 3]
    assert cost.gpu_hours(3.6e18, 1e15) == pytest.approx(1.0)
    assert cost.DEFAULT_THROUGHPUT == pytest.approx(0.4 * 989e12)


def test_checkpoint_bytes_match_what_torch_saves(tmp_path):
    """A bfloat16 policy and its AdamW state after one step, saved with torch: AdamW keeps its
    moments in the parameter's dtype, tied weights are stored once."""
    import torch
    import transformers

    from rlsuite.suite.models import CHARS, SPECIAL, tiny_config

    cfg = tiny_config(len(SPECIAL) + len(CHARS))
    model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters())
    model(input_ids=torch.tensor([[1, 5, 7, 9]]), labels=torch.tensor([[1, 5, 7, 9]])).loss.backward()
    opt.step()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, tmp_path / "state.pt")
    want = cost.checkpoint_bytes(Arch.from_config(cfg.to_dict()), "bfloat16")
    assert want == 505_216 * 6
    assert abs((tmp_path / "state.pt").stat().st_size - want) / want < 0.05  # + pickle/zip overhead


def _tiny_run(budget, **sets):
    base = {"rollout.prompts_per_step": 4, "rollout.group_size": 4, "rollout.max_new_tokens": 64,
            "model.warm_start": "none"}
    base.update(sets)
    return resolve("arith", "grpo", "tiny", 0, sets=list(base.items()), budgets=list(budget.items()))


def test_plan_of_a_small_run_by_hand():
    arch, _ = cost.model_arch("tiny")
    P = 505_216  # 3 × (attention 65,536 + MLP 98,304 + norms 256) + 128 + the tied 100·128 table
    assert arch.params == arch.flops_params == P
    spec = _tiny_run({"samples": 1000})
    assert spec.algo.kl_coef > 0  # grpo: a reference pass
    c = cost.plan_run(spec, arch, prompt_tokens=100, throughput=1e12)
    assert (c.samples, c.bound, c.tokens_per_sample) == (63 * 16, "=", 164)  # ceil(1000 / 16) steps of 16
    # π_old comes from the update's own forward (one epoch, one minibatch): no scoring pass of its own
    assert set(c.flops_by_kind) == {"rollout", "score_ref", "train"}
    assert c.flops == 1008 * 164 * P * (2 + 2 + 6)
    two = cost.plan_run(_tiny_run({"samples": 1000}, **{"train.minibatches": 2}), arch, prompt_tokens=100)
    assert set(two.flops_by_kind) == {"rollout", "score_old", "score_ref", "train"}
    assert two.flops == 1008 * 164 * P * (2 + 2 + 2 + 6)
    assert c.gpu_hours == pytest.approx(c.flops / 1e12 / 3600)
    assert c.checkpoint == P * (4 + 2 * 4) and c.final == P * 4 and c.kept == c.final  # no keep_checkpoint
    assert c.peak == 2 * c.checkpoint
    # other budget units: updates (epochs × minibatches per step), prompts, and a token budget (≥)
    assert cost.plan_run(_tiny_run({"updates": 10}, **{"train.minibatches": 2}), arch).samples == 5 * 16
    assert cost.plan_run(_tiny_run({"prompts": 10}), arch).samples == 3 * 16
    g = cost.plan_run(_tiny_run({"gen_tokens": 2048}), arch)
    assert (g.samples, g.bound) == (2 * 16, "≥")  # 16 × 64 generated tokens per step at most
    w = cost.plan_run(_tiny_run({"wall_s": 60}), arch)
    assert w.samples is None and w.flops is None and "wall-clock" in w.why
    stale = cost.plan_run(_tiny_run({"samples": 16}, **{"rollout.staleness": 2}), arch)  # 1 update per step
    assert stale.checkpoint == P * (4 + 2 * 4) + P * 4
    # stale data: π_old is still the weights before the update, so the update's forward supplies it
    assert set(stale.flops_by_kind) == {"rollout", "score_ref", "train"}
    kept = cost.plan_run(_tiny_run({"samples": 16}, **{"train.keep_checkpoint": True}), arch)
    assert kept.kept == kept.final + kept.checkpoint


def test_unknown_hub_id_offline_prints_unknown(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    arch, why = cost.model_arch("nobody-here/not-a-model-7b")
    assert arch is None and "not in the local Hugging Face cache" in why
    spec = tmp_path / "u.yaml"
    spec.write_text("name: u\ntasks: [arith]\nalgorithms: [grpo]\nseeds: [0]\nbudget: {samples: 64}\n"
                    "model: nobody-here/not-a-model-7b\nbase: none\n")
    assert main(["sweep", "run", str(spec), "--dry-run", "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = [x for x in out if not x.startswith("#")]
    assert len(rows) == 1 and "flops=unknown" in rows[0] and "ckpt=unknown" in rows[0] and "samples=" in rows[0]
    assert any("sizes unknown" in x and "not in the local Hugging Face cache" in x for x in out)
    assert "1 run(s) of unknown size left out" in out[-1]
    assert not (tmp_path / "o").exists()


def test_leaderboard_dry_run_prints_run_rows_and_a_total(capsys):
    assert main(["sweep", "run", str(ROOT / "sweeps" / "leaderboard.yaml"), "--dry-run",
                 "--throughput", "1e15", "--cluster", "slurm"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    rows = [x for x in out if not x.startswith("#")]
    from rlsuite.algorithms import ALGORITHMS

    # every public registered entry (``all`` skips the ``_``-prefixed ones other tests register)
    # × the spec's 5 tasks × 5 seeds
    n = 25 * len([a for a in ALGORITHMS.names() if not a.startswith("_")])
    assert len(rows) == n
    for row in rows:
        run_id, task, algo, seed, variant, *cols = row.split("\t")  # the run columns come first, as before
        assert task.startswith("task=") and algo.startswith("algo=") and seed.startswith("seed=")
        kv = dict(c.split("=", 1) for c in cols)
        # 1,543,714,304 parameters in bfloat16: ×(1 + 2 moments) × 2 bytes = 8.63 GiB (ggpo: + its refreshed
        # reference, ×2 bytes more); final ×2 bytes
        ckpt = "11.50GiB" if algo == "algo=ggpo" else "8.63GiB"
        assert kv["samples"] == "65536" and kv["ckpt"] == ckpt and kv["final"] == "2.88GiB"
        assert float(kv["flops"]) > 0 and float(kv["gpu_h"]) > 0
    total = out[-1]
    assert total.startswith(f"# total: {n} runs") and f"samples={n * 65536}" in total and "gpu_h=" in total
    kept = n * 1_543_714_304 * 2 / 1024 ** 4  # every final model: 1,543,714,304 bf16 parameters (2.88 GiB) each
    assert "disk peak while running" in total and f"kept after completion {kept:.2f}TiB" in total
    assert "32 runs at once" in total  # resources.array_parallelism of the spec
    assert any("1e15" in x or "1.00e15" in x for x in out if x.startswith("# GPU-hours"))
    # the grpo row by hand: 65536 samples × (512 + 1024) tokens × P × (2 rollout + 2 π_old + 2 π_ref + 6 train)
    grpo = next(r for r in rows if r.startswith("gsm8k__grpo__s0"))
    flops = 65536 * 1536 * 1_543_714_304 * 12
    assert f"flops={cost.fmt_sci(flops)}" in grpo
    hours = flops / 1e15 / 3600
    assert f"gpu_h={cost.fmt_hours(hours)}" in grpo and math.isclose(hours, 0.518, rel_tol=1e-3)


def test_bad_throughput_is_refused(capsys):
    assert main(["sweep", "run", "quickstart", "--dry-run", "--throughput", "0"]) == 2
    assert "--throughput" in capsys.readouterr().err
