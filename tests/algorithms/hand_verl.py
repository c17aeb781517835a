"""Setup shared by the hand tests of the entries that port verl 0.9.1's advantage estimators —
OPO, GPG, ReMax, GRPO pass@k and GDPO (``test_opo.py``, ``test_gpg.py``, ``test_remax.py``,
``test_grpo_passk.py``, ``test_gdpo.py``) — and the input OPO, GPG and GDPO share.

Every hand value in those files is worked out in the comments from the formulas, never by calling
the code under test. Their ``VERL_*`` constants were produced once by running verl 0.9.1's
functions (``verl/trainer/ppo/core_algos.py``: ``compute_opo_outcome_advantage``,
``compute_gpg_outcome_advantage``, ``compute_policy_loss_gpg``, ``compute_policy_loss_vanilla``,
``compute_remax_outcome_advantage``, ``compute_grpo_passk_outcome_advantage``,
``compute_gdpo_outcome_advantage``) on the same inputs — verl's tensors are the response columns
only (the suite's batch adds one prompt column), the outcome reward on the last valid token, an
``index`` per group, float32 — and are recorded there; verl is not needed to run the tests.
"""

from __future__ import annotations

import dataclasses

import torch

from tests.algorithms.hand import D, t
from tests.fakes import hand_batch, hook_ctx

CTX = hook_ctx(gen_seed=0, max_new_tokens=4, group_size=3, prompts_per_step=3)


def with_adv(alg, batch):
    out = alg.advantages(batch, CTX)
    return out, dataclasses.replace(batch, adv=out.adv, extras={**batch.extras, **out.extras})


def close(x, want, tol=1e-6):
    torch.testing.assert_close(x.to(D), t(want), rtol=0, atol=tol)


# ========================================================================================
# Shared input of OPO, GPG and GDPO: groups a = rows 0-2, b = rows 3-4, c = row 5 (a singleton);
# one prompt column, then 4 response columns; lengths |y| = 2, 1, 3, 1, 2, 2 (11 policy tokens).
MASK = [[0, 1, 1, 0, 0], [0, 1, 0, 0, 0], [0, 1, 1, 1, 0], [0, 1, 0, 0, 0], [0, 1, 1, 0, 0], [0, 1, 1, 0, 0]]
GID = [0, 0, 0, 1, 1, 2]
R = [1.0, 0.0, 1.0, 0.5, 0.0, 0.7]
# log π_θ (the forward) and log π_old on the policy tokens; the log-ratio δ = log π_θ − log π_old is
# row 0: 0.3, −0.4 | row 1: 1.5 | row 2: 0, 0.1, −0.1 | row 3: −2.0 | row 4: 0.05, 1.3 | row 5: 0, 0
LOGP = [[0, -0.5, -1.0, 0, 0], [0, -2.0, 0, 0, 0], [0, -0.1, -0.2, -0.3, 0], [0, -1.5, 0, 0, 0],
        [0, -0.4, -0.6, 0, 0], [0, -1.0, -0.8, 0, 0]]
DELTA = [[0, 0.3, -0.4, 0, 0], [0, 1.5, 0, 0, 0], [0, 0.0, 0.1, -0.1, 0], [0, -2.0, 0, 0, 0],
         [0, 0.05, 1.3, 0, 0], [0, 0, 0, 0, 0]]


def shared_batch(rewards=R):
    return hand_batch(MASK, GID, rewards, old_logp=(t(LOGP) - t(DELTA)) * t(MASK))
