"""FBOS-RL's objective switches against GRPO on `arith`, 3 seeds, one matched sample budget
→ benchmarks/results/fbos.md.

    python benchmarks/fbos.py [--workers 2] [--out DIR]
"""

from _sweep import main

if __name__ == "__main__":
    main("fbos", "benchmarks/results/fbos.md", "FBOS-RL on the embedded default",
         "grpo vs fbos_rl (EPA+ECC alternating, joint, EPA only, ECC only, bare-verdict feedback), 3 seeds at "
         "25,600 samples; FBOS-RL's two groups are both charged, so it takes about half GRPO's steps. Fidelity "
         "`abstract` (a reconstruction; see `rlsuite list algorithms --json`).")
