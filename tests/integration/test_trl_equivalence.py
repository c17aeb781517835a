"""Loss equivalence against TRL's GRPOTrainer loss types on one fixed batch (the `bench` extra).

For each pair (TRL loss type → rlsuite entry) the same model, tokens, masks, advantages and
π_old give the same aggregated loss and the same gradient:

=====================  ===============================  ===========================================
TRL                    rlsuite                          intended difference (documented)
=====================  ===============================  ===========================================
grpo                   grpo (seq-mean-token-mean)       none
dr_grpo                dr_grpo (seq-mean-token-sum-norm) none: both divide by B · max_new_tokens
dapo (ε_high 0.28)     dapo (token-mean)                none for one accumulation window
cispo                  cispo                            TRL's ``epsilon_high`` *is* the cap; ours is 1 + ε
grpo + sequence IS     gspo                             none
=====================  ===============================  ===========================================
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

trl = pytest.importorskip("trl", reason="TRL is in the `bench` extra: pip install -e '.[bench]'")

from rlsuite.algorithms.base import ALGORITHMS, Context  # noqa: E402
from rlsuite.suite.aggregation import aggregation_weights  # noqa: E402
from rlsuite.suite.config import ModelConfig  # noqa: E402
from rlsuite.suite.models import load_model  # noqa: E402
from rlsuite.suite.policy import policy_forward  # noqa: E402
from rlsuite.suite.rollout import collect  # noqa: E402
from rlsuite.suite.engines.kv import KVSampler# noqa: E402
from rlsuite.suite.engines.base import SamplingParams# noqa: E402
from rlsuite.suite.types import Batch  # noqa: E402

NEW = 8


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    model, tok, _ = load_model(ModelConfig())
    prompts = ["12+34=", "56+78=", "90+12="]  # equal length: no prompt padding (TRL's forward has no position ids)
    ids = [tok.encode(p) for p in prompts for _ in range(4)]
    rec, _ = collect(KVSampler(model, tok), tok, ids,
                     SamplingParams(max_new_tokens=NEW, temperature=1.0, stop_ids=(2,)),
                     torch.Generator().manual_seed(0), group_ids=[i // 4 for i in range(12)])
    g = torch.Generator().manual_seed(1)
    mask = rec.loss_mask
    adv_seq = torch.randn(12, generator=g)
    with torch.no_grad():
        logp = policy_forward(model, rec.tokens, rec.attn_mask, 1.0).logp * mask
    old = (logp + 0.4 * torch.randn(logp.shape, generator=g)) * mask  # off-policy: ratios away from 1
    batch = Batch.from_rollout(rec, old_logp=old, adv=adv_seq[:, None] * mask)
    out = tmp_path_factory.mktemp("trl")
    args = GRPOConfig(output_dir=str(out), per_device_train_batch_size=4, num_generations=4, max_completion_length=NEW,
                      beta=0.0, bf16=False, use_cpu=True, report_to="none", save_strategy="no", max_steps=1,
                      disable_tqdm=True)
    trainer = GRPOTrainer(model=model, reward_funcs=lambda prompts, completions, **kw: [0.0] * len(prompts),
                          args=args, train_dataset=Dataset.from_dict({"prompt": prompts}), processing_class=tok)
    trainer.current_gradient_accumulation_steps = 1
    trainer.model.train()
    return model, trainer, batch, adv_seq


def _trl_loss(trainer, batch, adv_seq, loss_type, eps_low, eps_high, level="token"):
    trainer.loss_type, trainer.epsilon_low, trainer.epsilon_high = loss_type, eps_low, eps_high
    trainer.importance_sampling_level = level
    pw = batch.prompt_width
    inputs = {"prompt_ids": batch.tokens[:, :pw], "prompt_mask": batch.attn_mask[:, :pw],
              "completion_ids": batch.tokens[:, pw:], "completion_mask": batch.loss_mask[:, pw:].long(),
              "advantages": adv_seq, "old_per_token_logps": batch.old_logp[:, pw:],
              "num_items_in_batch": batch.loss_mask.sum()}
    trainer.model.zero_grad()
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    grad = torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])
    return float(loss.detach()), grad


def _our_loss(model, batch, name, **cfg):
    cls = ALGORITHMS.get(name)
    algo = cls(dataclasses.replace(cls.Config(name=name), **cfg))
    ctx = Context(step=1, progress=0.0, entropy=None, max_new_tokens=NEW, group_size=4, prompts_per_step=3, n_train=3,
                  seed=0, policy=model, generator=lambda s: torch.Generator(), charge=lambda *a: None)
    model.zero_grad()
    fwd = policy_forward(model, batch.tokens, batch.attn_mask, 1.0)
    loss_tok, _ = algo.loss(fwd, batch, ctx)
    loss = (aggregation_weights(batch.loss_mask, algo.aggregation, NEW) * loss_tok).sum()
    loss.backward()
    grad = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return float(loss.detach()), grad


@pytest.mark.slow
@pytest.mark.parametrize("trl_type, level, eps, ours, cfg", [
    ("grpo", "token", (0.2, 0.2), "grpo", {"kl_coef": 0.0}),
    ("dr_grpo", "token", (0.2, 0.2), "dr_grpo", {}),
    ("dapo", "token", (0.2, 0.28), "dapo", {}),
    ("cispo", "token", (0.2, 1.2), "cispo", {"eps_is_high": 0.2}),  # TRL's epsilon_high is the cap itself
    ("grpo", "sequence", (3e-4, 4e-4), "gspo", {}),
])
def test_same_loss_and_gradient_as_trl(setup, trl_type, level, eps, ours, cfg):
    model, trainer, batch, adv_seq = setup
    trl_value, trl_grad = _trl_loss(trainer, batch, adv_seq, trl_type, *eps, level=level)
    our_value, our_grad = _our_loss(trainer.model, batch, ours, **cfg)
    assert abs(trl_value) > 1e-4  # a non-trivial value: the clip and ratios are exercised
    assert our_value == pytest.approx(trl_value, rel=1e-5, abs=1e-7)
    torch.testing.assert_close(our_grad, trl_grad, rtol=1e-4, atol=1e-7)
