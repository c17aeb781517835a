"""The seed-paper algorithms on `arith` over 3 seeds at one matched budget, the off-policy ones
at staleness 0 and 4 → benchmarks/results/seed_algorithms.md.

    python benchmarks/seed_algorithms.py [--workers 2] [--out DIR]
"""

from _sweep import main

if __name__ == "__main__":
    main("seed_algorithms", "benchmarks/results/seed_algorithms.md", "Seed-paper algorithms on the embedded default",
         "11 entries × 3 seeds at 25,600 samples; pnpo, dppo_pdm, drpo, copc and dc_grpo also with the behaviour "
         "policy 4 updates stale (rollout.sync = lag). Reconstructions of abstract-only papers: see each entry's "
         "fidelity and assumptions (`rlsuite list algorithms --json`).")
