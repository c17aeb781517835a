"""PPO with GAE (Schulman et al. 2017; GAE: Schulman et al. 2015), as in verl.

Per token (Eq. 7 of arXiv 1707.06347, with the dual clip of Ye et al. 2020):

    L1 = −Â·r,  L2 = −Â·clip(r, 1−ε_low, 1+ε_high),  L = max(L1, L2);  Â < 0: L = min(L, −Â·c)

Advantages by GAE over the policy tokens (``rlsuite.suite.ops.gae``): the token reward is 0 except
the sequence score on the last policy token (minus β·k per token when the KL is in the
reward); ``δ_t = r_t + γV_{t+1} − V_t``, ``Â_t = δ_t + γλÂ_{t+1}``, ``returns = Â + V``; then
Â is whitened over all policy tokens of the batch. Value loss (verl ``compute_value_loss``):
``½·max((V − R)², (clip(V, V_old ± c_v) − R)²)``, aggregated like the policy loss and added
with weight ``vf_coef`` (the critic has its own parameter group and learning rate). verl's
critic warm-up (``trainer.critic_warmup``, 0 by default) is the trainer's ``train.critic_warmup_steps``.

Fidelity: ``code`` — verl 0.9.1 ``compute_gae_advantage_return``, ``compute_policy_loss_vanilla``,
``compute_value_loss``. Defaults (verl 0.9.1's ``ppo_trainer`` config): ε 0.2 both sides, dual
clip c = 3, γ = λ = 1, value clip 0.5, token-mean, KL off (if enabled: k1 in the reward).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from rlsuite.algorithms.base import AdvOut, AlgoConfig, Algorithm, Context, register
from rlsuite.suite.ops import clipped_surrogate, clipped_value_loss, explained_variance, gae, masked_mean, masked_whiten
from rlsuite.suite.types import Batch, Forward


@dataclass(frozen=True, kw_only=True)
class PPOConfig(AlgoConfig):
    ranges = {"clip_eps_low": "[0, 1]", "clip_eps_high": "[0, inf)", "dual_clip": "(1, inf)", "gamma": "[0, 1]",
              "lam": "[0, 1]", "value_clip": "(0, inf)", "vf_coef": "[0, inf)"}
    """Declared ranges of this class's numeric fields (see ``AlgoConfig.ranges``)."""
    clip_eps_low: float = 0.2
    """ε_low of the clipped ratio."""
    clip_eps_high: float = 0.2
    """ε_high of the clipped ratio."""
    dual_clip: Optional[float] = 3.0
    """Dual-clip constant c for Â < 0 (null = off)."""
    gamma: float = 1.0
    """Discount γ of GAE."""
    lam: float = 1.0
    """λ of GAE."""
    whiten_adv: bool = True
    """Whiten Â over all policy tokens of the batch."""
    value_clip: Optional[float] = 0.5
    """Value clipping range around V_old (null = off)."""
    vf_coef: float = 1.0
    """Weight of the value loss in the total loss."""
    kl_estimator: Literal["k1", "k2", "k3"] = "k1"
    kl_where: Literal["loss", "reward"] = "reward"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dual_clip is not None and self.dual_clip <= 1:
            raise ValueError(f"dual_clip must be > 1 (or null), got {self.dual_clip}")


@register
class PPO(Algorithm):
    name = "ppo"
    not_group_relative = "critic baseline: GAE against the learned V_t, then batch whitening"
    summary = "Clipped-ratio policy gradient with a learned critic and GAE (dual clip, value clipping)."
    citation = ("Schulman et al. 2017, Proximal Policy Optimization Algorithms, arXiv:1707.06347; "
                "GAE: Schulman et al. 2015, arXiv:1506.02438")
    fidelity = "code"
    switches = ("dual_clip", "lam", "value_clip", "whiten_adv")
    tune_knob = ("lam", (0.95, 1.0))
    Config = PPOConfig
    cfg: PPOConfig

    @property
    def needs(self) -> frozenset[str]:
        return super().needs | {"old_logp", "values"}

    def advantages(self, batch: Batch, ctx: Context) -> AdvOut:
        adv, returns = gae(batch.token_rewards, batch.values, batch.loss_mask, self.cfg.gamma, self.cfg.lam)
        if self.cfg.whiten_adv:
            adv = masked_whiten(adv, batch.loss_mask)
        metrics = {"value/returns_mean": masked_mean(returns, batch.loss_mask),
                   "value/explained_var": explained_variance(batch.values, returns, batch.loss_mask)}
        return AdvOut(adv=adv, returns=returns, metrics=metrics)

    def loss(self, fwd: Forward, batch: Batch, ctx: Context):
        return clipped_surrogate(fwd.logp, batch.old_logp, batch.adv, batch.loss_mask,
                                 self.cfg.clip_eps_low, self.cfg.clip_eps_high, self.cfg.dual_clip)

    def value_loss(self, fwd: Forward, batch: Batch, ctx: Context):
        loss, metrics = clipped_value_loss(fwd.values, batch.values, batch.returns, batch.loss_mask,
                                           self.cfg.value_clip)
        return self.cfg.vf_coef * loss, metrics
