"""Algorithm entries. Importing this package registers every built-in entry.

Add an algorithm: write one file here (see ``grpo.py``), decorate its class with
``@register`` and import the module below. Outside packages use the entry-point group
``rlsuite.algorithms`` instead.
"""

from rlsuite.algorithms.base import ALGORITHMS, AdvOut, AlgoConfig, Algorithm, Behaviour, Context, Group, register
from rlsuite.algorithms import cispo, comppo, dapo, dppo, dr_grpo, grpo, gspo, ppo, reinforce  # noqa: F401
from rlsuite.algorithms import reinforce_pp, rloo, three_po  # noqa: F401

__all__ = ["ALGORITHMS", "AdvOut", "AlgoConfig", "Algorithm", "Behaviour", "Context", "Group", "register"]
from rlsuite.algorithms import agro, copc, dc_grpo, ggpo, sp3o  # noqa: E402,F401  (seed papers B)
from rlsuite.algorithms import judges, rrc  # noqa: E402,F401  (RRC)
from rlsuite.algorithms import dppo_pdm, drpo, edas, entrocraft, is_grpo, pnpo  # noqa: E402,F401  (seed papers A)
from rlsuite.algorithms import fbos_rl  # noqa: E402,F401  (FBOS-RL)
from rlsuite.algorithms import gdpo, gpg, grpo_passk, opo, remax  # noqa: E402,F401  (verl estimators)
from rlsuite.algorithms import bnpo, clip_cov, dro, gmpo, luspo, sapo, vespo  # noqa: E402,F401  (peer losses: verl 0.9.1, TRL 1.16.0)
from rlsuite.algorithms import rerule  # noqa: E402,F401  (ReRULE, issue 20 §3)
