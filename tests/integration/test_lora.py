"""LoRA through PEFT (``model.lora_rank``, :mod:`rlsuite.suite.lora`; issue 40 §2): adapters are
the only trained parameters; π_ref is the policy with its adapters disabled (the same base
tensors, no copy); the engine gets the merged weights ``W + (α/r)·B·A`` under the HF names
without the trained model changing; a LoRA run resumes exactly from a checkpoint that holds the
adapters and their AdamW state only (≪ the model); ``final/adapter/`` loads with PEFT and merges
into ``final/``; FSDP is refused (exit 2); the functional forward of ``train.share_prefix`` /
``train.compile`` applies the adapters as PEFT does (with and without prompt sharing, dropout
included, gradients of the adapters) and the base with them disabled, so ``train.share_prefix=auto``
resolves to on; adapters of another form (DoRA) keep the HF forward; the run id at the defaults
is unchanged."""

from __future__ import annotations

import copy
import os

import pytest
import torch

from rlsuite.suite.errors import BadInput
from tests import fakes  # noqa: F401  (the _parity_test task)

peft = pytest.importorskip("peft")  # the lora extra (.ci/run installs it)


def _tiny(rank: int = 2, alpha: float = 4.0, dropout: float = 0.0, targets: str = "all-linear"):
    from rlsuite.suite import lora
    from rlsuite.suite.config import ModelConfig
    from rlsuite.suite.models import load_model

    cfg = ModelConfig(lora_rank=rank, lora_alpha=alpha, lora_dropout=dropout, lora_targets=targets)
    base, _, _ = load_model(ModelConfig())
    original = copy.deepcopy(base)
    return original, lora.attach(base, cfg, seed=0), cfg


def _ids():
    g = torch.Generator().manual_seed(0)
    return torch.randint(4, 90, (2, 7), generator=g)


def test_merged_weights_are_w_plus_alpha_over_r_b_a_by_hand_and_the_policy_is_unchanged():
    """r = 2, α = 4: scale α/r = 2. On layer 0's q_proj, A [2, 128] is zero but A[0,0] = 0.5 and
    A[1,3] = 0.25; B [128, 2] is zero but B[5,0] = 1 and B[7,1] = 2. So ΔW = 2·B·A is zero but
    ΔW[5,0] = 2·(1·0.5) = 1.0 and ΔW[7,3] = 2·(2·0.25) = 1.0; every other merged weight is the base's."""
    from rlsuite.suite import lora

    original, pm, _ = _tiny()
    q = pm.get_base_model().model.layers[0].self_attn.q_proj
    with torch.no_grad():
        q.lora_A["default"].weight.zero_()
        q.lora_B["default"].weight.zero_()
        q.lora_A["default"].weight[0, 0], q.lora_A["default"].weight[1, 3] = 0.5, 0.25
        q.lora_B["default"].weight[5, 0], q.lora_B["default"].weight[7, 1] = 1.0, 2.0
    before = {k: v.clone() for k, v in pm.state_dict().items()}
    merged = lora.hf_state(pm)
    base = original.state_dict()
    assert set(merged) == set(base)  # the HF names of the plain model
    w0 = base["model.layers.0.self_attn.q_proj.weight"]
    want = w0.clone()
    want[5, 0] += 1.0
    want[7, 3] += 1.0
    assert torch.equal(merged["model.layers.0.self_attn.q_proj.weight"], want)
    for k in base:  # the other adapters start with B = 0: their merged weights are the base's, bit for bit
        if k != "model.layers.0.self_attn.q_proj.weight":
            assert torch.equal(merged[k], base[k]), k
    assert all(torch.equal(v, before[k]) for k, v in pm.state_dict().items())  # nothing merged in place
    plain = lora.plain(pm)  # PEFT's own merge_and_unload on a copy: the same weights
    assert not lora.is_lora(plain)
    assert all(torch.equal(v, merged[k]) for k, v in plain.state_dict().items())


def test_adapters_only_train_and_the_reference_is_the_shared_base_with_adapters_disabled():
    from rlsuite.suite import lora

    original, pm, _ = _tiny()
    trainable = [n for n, p in pm.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    # r·(in + out) per adapted linear, r = 2: q, k, v, o 128→128 (256 each), gate, up 128→256 and
    # down 256→128 (384 each): per layer 2·(4·256 + 3·384) = 4352, × 3 layers = 13056
    assert lora.n_trainable(pm) == 13056
    with torch.no_grad():  # adapters away from 0, so the policy leaves the base
        for n, p in pm.named_parameters():
            if ".lora_B." in n:
                p.fill_(0.01)
    ref = lora.BaseView(pm)
    ids = _ids()
    with torch.no_grad():
        want = original(input_ids=ids).logits
        assert torch.equal(ref(input_ids=ids).logits, want)  # the base, exactly
        assert not torch.allclose(pm(input_ids=ids).logits, want)  # the policy has moved
    base_params = {p.data_ptr() for n, p in pm.named_parameters() if not p.requires_grad}
    assert {v.data_ptr() for v in ref.state_dict().values()} <= base_params  # no second copy of the base
    assert set(ref.state_dict()) == set(original.state_dict())


def test_dropout_acts_in_forwards_with_gradients_only():
    """p = 0.5: inverted dropout keeps each input scaled by 1/(1 − 0.5) = 2 or zeroes it, only
    where a graph is built (the training forward); under no_grad (scoring) it is the identity."""
    from rlsuite.suite.lora import GradDropout

    x = torch.ones(4000)
    d = GradDropout(0.5)
    with torch.no_grad():
        assert torch.equal(d(x), x)
    y = d(x.requires_grad_(True))
    assert set(y.detach().unique().tolist()) == {0.0, 2.0}
    _, pm, _ = _tiny(dropout=0.5)
    assert isinstance(pm.get_base_model().model.layers[0].mlp.up_proj.lora_dropout["default"], GradDropout)


def test_targets_that_match_nothing_are_refused_naming_the_linear_layers():
    with pytest.raises(BadInput, match=r"model.lora_targets=qproj.*q_proj"):
        _tiny(targets="qproj")


def _spec(*sets, algo: str = "grpo", updates: int = 4):
    from rlsuite.suite.spec import resolve

    return resolve("_parity_test", algo, "tiny", 0, budgets=[("updates", updates)],
                   sets=[("model.warm_start", "none"), ("train.keep_checkpoint", True), *sets])


def test_lora_is_out_of_the_run_id_at_its_default_and_in_it_when_set():
    from rlsuite.suite.config import identity_doc

    assert not [k for k in identity_doc(_spec().to_dict())["model"] if k.startswith("lora")]
    assert _spec().run_id == _spec(("model.lora_rank", 0)).run_id
    assert _spec().run_id == _spec(("model.lora_alpha", 16.0), ("model.lora_targets", "all-linear")).run_id
    assert _spec(("model.lora_rank", 4)).run_id != _spec().run_id
    assert _spec(("model.lora_rank", 4)).run_id != _spec(("model.lora_rank", 4), ("model.lora_alpha", 8)).run_id


def test_what_lora_cannot_take_is_refused_at_resolution_and_the_levers_are_not():
    with pytest.raises(BadInput) as e:
        _spec(("model.lora_rank", 4), ("dist.shard", "fsdp"), ("dist.world_size", 2), ("rollout.rng", "row"),
              ("optim.fused", False))
    assert any("model.lora_rank=4 with dist.shard=fsdp" in p for p in e.value.problems), e.value.problems
    assert _spec(("model.lora_rank", 4), ("train.share_prefix", True), ("train.compile", True)).train.compile


def _with_adapters(dropout: float = 0.0, targets: str = "all-linear"):
    """The tiny model with rank-2 adapters whose B is not zero (PEFT starts B at 0, where an
    adapter changes nothing and a forward that ignored it would pass)."""
    _, pm, _ = _tiny(dropout=dropout, targets=targets)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for n, prm in pm.named_parameters():
            if ".lora_B." in n:
                prm.copy_(torch.randn(prm.shape, generator=g) * 0.2)
    return pm


def _adapter_grads(pm, fwd, loss_mask) -> dict[str, torch.Tensor]:
    pm.zero_grad(set_to_none=True)
    ((fwd.logp * loss_mask).sum() + 0.1 * (fwd.entropy * loss_mask).sum()).backward()
    out = {n: prm.grad.clone() for n, prm in pm.named_parameters() if prm.requires_grad}
    pm.zero_grad(set_to_none=True)
    return out


@pytest.mark.parametrize("share", [False, True])
def test_the_functional_forward_applies_the_adapters_as_peft_does(share):
    """Log-probs, entropies and the adapters' gradients of the functional forward (one prompt pass a
    group with ``share``) equal PEFT's forward to float rounding; π_ref (the adapters disabled)
    equals the base's HF forward; the adapters matter (the two differ by far more than rounding)."""
    from rlsuite.suite.fast_forward import fast_forward, unsupported
    from rlsuite.suite.lora import BaseView
    from rlsuite.suite.policy import policy_forward
    from tests.unit.test_fast_forward import _batch, _predicted

    pm = _with_adapters()
    tokens, attn, loss_mask, W = _batch(vocab=pm.config.vocab_size)
    want = frozenset({"entropy"})
    assert unsupported(pm, want, tokens.shape[1]) is None and unsupported(BaseView(pm), want, 0) is None
    ref = policy_forward(pm, tokens, attn, 0.7, want)  # PEFT's modules (no lever: the HF forward)
    g_ref = _adapter_grads(pm, ref, loss_mask)
    out = fast_forward(pm, tokens, attn, 0.7, want, prompt_width=W if share else 0)
    g = _adapter_grads(pm, out, loss_mask)
    m = _predicted(attn)
    torch.testing.assert_close(out.logp[m], ref.logp[m], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.entropy[m], ref.entropy[m], atol=1e-5, rtol=1e-5)
    assert set(g) == set(g_ref) and len(g) == 2 * 7 * pm.config.num_hidden_layers
    scale = max(float(x.abs().max()) for x in g_ref.values())
    assert scale > 0 and all(float((g[n] - g_ref[n]).abs().max()) <= 1e-4 * scale for n in g)
    with torch.no_grad():
        base_ref = policy_forward(BaseView(pm), tokens, attn, 0.7, want)
        base = fast_forward(BaseView(pm), tokens, attn, 0.7, want, prompt_width=W if share else 0)
        off = fast_forward(pm, tokens, attn, 0.7, want, prompt_width=W if share else 0)
    torch.testing.assert_close(base.logp[m], base_ref.logp[m], atol=1e-5, rtol=1e-5)
    assert float((off.logp[m] - base.logp[m]).abs().max()) > 1e-2  # the adapters act; disable_adapter undone
    assert all(not layer.disable_adapters for layer in pm.modules() if hasattr(layer, "lora_A"))


@pytest.mark.filterwarnings("ignore:Model has `tie_word_embeddings=True`")
@pytest.mark.parametrize("share", [False, True])
def test_an_adapter_on_the_output_head_acts_in_the_functional_forward_as_in_peft_s(share):
    """``lora_targets`` naming the output head (outside the decoder stack the functional forward
    rebuilds): the head is called as its PEFT module, so its adapter applies; log-probs and the head
    adapter's gradients equal PEFT's forward, and zeroing that adapter's B changes the log-probs."""
    from rlsuite.suite.fast_forward import fast_forward, unsupported
    from rlsuite.suite.policy import policy_forward
    from tests.unit.test_fast_forward import _batch, _predicted

    pm = _with_adapters(targets="q_proj,lm_head")
    head = [n for n, _ in pm.named_parameters() if "lm_head" in n and ".lora_" in n]
    assert len(head) == 2  # lora_A and lora_B of the head
    tokens, attn, loss_mask, W = _batch(vocab=pm.config.vocab_size)
    assert unsupported(pm, frozenset({"entropy"}), tokens.shape[1]) is None
    m, want = _predicted(attn), frozenset({"entropy"})
    ref = policy_forward(pm, tokens, attn, 0.7, want)
    g_ref = _adapter_grads(pm, ref, loss_mask)
    out = fast_forward(pm, tokens, attn, 0.7, want, prompt_width=W if share else 0)
    g = _adapter_grads(pm, out, loss_mask)
    torch.testing.assert_close(out.logp[m], ref.logp[m], atol=1e-5, rtol=1e-5)
    for n in head:
        scale = float(g_ref[n].abs().max())
        assert scale > 0 and float((g[n] - g_ref[n]).abs().max()) <= 1e-4 * scale, n
    with torch.no_grad():
        dict(pm.named_parameters())[next(n for n in head if ".lora_B." in n)].zero_()
        off = fast_forward(pm, tokens, attn, 0.7, want, prompt_width=W if share else 0)
    assert float((off.logp[m] - out.logp[m]).detach().abs().max()) > 1e-3


def test_adapter_dropout_in_the_functional_forward_is_peft_s_and_acts_with_gradients_only():
    """p = 0.5, four distinct prompts (no sharing: one pass, the HF forward's shapes and call order),
    the same RNG state: the dropped inputs are PEFT's, so the log-probs agree; under no_grad dropout
    is the identity in both, and differs from the training forward."""
    from rlsuite.suite.fast_forward import fast_forward
    from rlsuite.suite.policy import policy_forward
    from tests.unit.test_fast_forward import _batch, _predicted

    pm = _with_adapters(dropout=0.5)
    tokens, attn, _, W = _batch(P=4, G=1, vocab=pm.config.vocab_size)
    m = _predicted(attn)
    torch.manual_seed(11)
    ref = policy_forward(pm, tokens, attn, 1.0)
    torch.manual_seed(11)
    out = fast_forward(pm, tokens, attn, 1.0, prompt_width=W)
    torch.testing.assert_close(out.logp[m], ref.logp[m], atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        ref0 = policy_forward(pm, tokens, attn, 1.0)
        out0 = fast_forward(pm, tokens, attn, 1.0, prompt_width=W)
    torch.testing.assert_close(out0.logp[m], ref0.logp[m], atol=1e-5, rtol=1e-5)
    assert float((out.logp[m] - out0.logp[m]).detach().abs().max()) > 1e-3


def test_adapters_of_another_form_keep_the_hf_forward():
    """DoRA (PEFT's ``use_dora``) is not what :func:`rlsuite.suite.lora.attach` builds: the
    functional forward names it and a lever set explicitly is refused naming it."""
    from rlsuite.suite.config import ModelConfig
    from rlsuite.suite.fast_forward import unsupported
    from rlsuite.suite.models import load_model

    base, _, _ = load_model(ModelConfig())
    pm = peft.get_peft_model(base, peft.LoraConfig(r=2, lora_alpha=4, use_dora=True, target_modules="all-linear"))
    why = unsupported(pm, frozenset(), 10)
    assert why is not None and "DoRA" in why and "q_proj" in why


def test_a_lora_run_resumes_exactly_from_adapters_and_final_adapter_merges_into_final(tmp_path, monkeypatch):
    """GRPO with a KL (π_ref = the base with the adapters disabled), rank 2, 4 updates, a crash at
    step 3 and a resume from the step-2 checkpoint: metrics and evals equal the uninterrupted
    run's; each checkpoint holds adapters (PEFT names) and their AdamW state, < 10% of the
    model's bytes; ``final/adapter`` loaded with PEFT on the base and merged gives ``final/``."""
    from transformers import AutoModelForCausalLM

    from rlsuite.suite.checkpoint import unpack
    from rlsuite.suite.config import ModelConfig
    from rlsuite.suite.models import load_model
    from tests.integration.test_checkpoints import _crash_and_resume

    spec = _spec(("model.lora_rank", 2), ("model.lora_alpha", 4), ("algo.kl_coef", 0.1),
                 ("train.checkpoint_every", 2), ("optim.lr", 1e-2))
    read, last, size = _crash_and_resume(spec, tmp_path, monkeypatch, crash_at=3)
    base, _, _ = load_model(ModelConfig())
    model_bytes = sum(v.numel() * v.element_size() for v in base.state_dict().values())
    for raw in (read, last):
        st = unpack(raw)
        assert st["model"] and all(".lora_A." in k or ".lora_B." in k for k in st["model"])
        assert not {"ref", "engine", "history"} & set(raw) and len(raw["base_sha256"]) == 64
        n_adapter = sum(v.numel() for v in st["model"].values())
        assert sum(s["exp_avg"].numel() for s in st["opt"]["state"].values()) == n_adapter  # their AdamW state only
    assert size < 0.1 * model_bytes, (size, model_bytes)
    run = next((tmp_path / "ref").iterdir())
    final = AutoModelForCausalLM.from_pretrained(run / "final")
    merged = peft.PeftModel.from_pretrained(base, run / "final" / "adapter").merge_and_unload()
    trained = final.state_dict()
    assert any(not torch.equal(trained[k], v) for k, v in load_model(ModelConfig())[0].state_dict().items())
    for k, v in merged.state_dict().items():
        assert torch.equal(v, trained[k]), k


def test_a_lora_run_resolves_share_prefix_on_and_a_refreshed_reference_resumes_exactly(tmp_path, monkeypatch):
    """GGPO refreshes π_ref every 3 updates: under LoRA the refreshed π_ref leaves the shared base
    (a merged copy of its own, kept in the checkpoint) and the resume from it is exact; the run
    takes the shared-prefix update (``train.share_prefix=auto`` resolves to on)."""
    import json

    from tests.integration.test_checkpoints import _crash_and_resume

    spec = _spec(("model.lora_rank", 2), ("algo.refresh_every", 3), ("train.checkpoint_every", 1),
                 ("optim.lr", 1e-2), algo="ggpo", updates=6)
    read, last, _ = _crash_and_resume(spec, tmp_path, monkeypatch, crash_at=4)
    assert read["algo"]["refreshes"] == 1 and "ref" in read and "base_sha256" in read
    assert all(".lora_" in k for k in read["model"]) and not any(".lora_" in k for k in read["ref"])
    run = next((tmp_path / "ref").iterdir())
    assert json.loads((run / "spec.json").read_text())["resolved"]["train.share_prefix"] is True


@pytest.fixture(scope="module")
def real_model():
    from rlsuite.suite import pinned_models

    pm = pinned_models.SMOLLM2_135M
    try:
        return pinned_models.verified_dir(pm)
    except BadInput as e:
        msg = f"real model {pm.name} not available: {e}"
        if os.environ.get("RLSUITE_REQUIRE_REAL_MODEL") == "1":
            pytest.fail(msg + " (RLSUITE_REQUIRE_REAL_MODEL=1)")
        pytest.skip(msg)


def test_two_lora_steps_on_smollm2_complete_and_checkpoint_the_adapters_only(real_model, tmp_path):
    """SmolLM2-135M with rank-8 adapters on q_proj and v_proj: two GRPO steps complete; the
    checkpoint holds 30 layers × 2 projections × 2 matrices of adapters (< 1% of the model's
    bytes with their AdamW state)."""
    from rlsuite.suite.runner import execute
    from rlsuite.suite.spec import resolve

    sets = [("task.style", "question"), ("task.max_operand", 20), ("task.ops", "+"), ("task.val_fraction", 0.1),
            ("rollout.prompts_per_step", 2), ("rollout.group_size", 2), ("rollout.max_new_tokens", 16),
            ("eval.max_prompts", 2), ("eval.test_prompts", 2), ("eval.every", 1.0), ("optim.lr", 1e-4),
            ("model.lora_rank", 8), ("model.lora_targets", "q_proj,v_proj"), ("train.keep_checkpoint", True),
            ("eval.cache_base", False)]
    spec = resolve("arith", "grpo", "smollm2-135m", 0, sets=sets, budgets=[("updates", 2)])
    code, run = execute(spec, tmp_path)
    assert code == 0
    state = (run / "checkpoint" / "state.pt").stat().st_size
    assert state < 0.01 * 134_515_008 * 4, state
    raw = torch.load(run / "checkpoint" / "state.pt", weights_only=False, map_location="cpu")
    assert len(raw["model"]) == 30 * 2 * 2
    assert (run / "final" / "adapter" / "adapter_config.json").exists()


@pytest.mark.slow
def test_the_compiled_stack_applies_the_adapters_as_the_eager_one():
    """``train.compile`` with adapters: the compiled layer stack's log-probs and adapter gradients
    equal the eager functional forward's (with prompt sharing: both graphs, the prompt pass and
    the response pass with a shared prefix; compiling is slow on a CPU, so one setting)."""
    from rlsuite.suite.fast_forward import fast_forward
    from tests.unit.test_fast_forward import _batch, _predicted

    pm = _with_adapters()
    tokens, attn, loss_mask, W = _batch(vocab=pm.config.vocab_size)
    want = frozenset({"entropy"})
    eager = fast_forward(pm, tokens, attn, 0.7, want, prompt_width=W)
    g_eager = _adapter_grads(pm, eager, loss_mask)
    comp = fast_forward(pm, tokens, attn, 0.7, want, prompt_width=W, compiled=True)
    g = _adapter_grads(pm, comp, loss_mask)
    m = _predicted(attn)
    torch.testing.assert_close(comp.logp[m], eager.logp[m], atol=1e-5, rtol=1e-5)
    scale = max(float(x.abs().max()) for x in g_eager.values())
    assert all(float((g[n] - g_eager[n]).abs().max()) <= 1e-4 * scale for n in g)
