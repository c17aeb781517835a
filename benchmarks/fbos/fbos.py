"""FBOS-RL's objective switches against GRPO on `arith`, 3 seeds, one matched sample budget
→ benchmarks/fbos/fbos.md.

    python benchmarks/fbos/fbos.py [--workers 2] [--out DIR]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared modules
from _sweep import main  # noqa: E402

if __name__ == "__main__":
    main("fbos", "benchmarks/fbos/fbos.md", "FBOS-RL on the embedded default",
         "grpo vs fbos_rl (EPA+ECC alternating, joint, EPA only, ECC only, bare-verdict feedback), 3 seeds at "
         "25,600 samples; FBOS-RL's two groups are both charged, so it takes about half GRPO's steps. Fidelity "
         "`abstract` (a reconstruction; see `rlsuite list algorithms --json`).")
