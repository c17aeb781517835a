"""The seed-paper algorithms on `arith` over 3 seeds at one matched budget, the off-policy ones
at staleness 0 and 4 → benchmarks/seed_algorithms/seed_algorithms.md.

    python benchmarks/seed_algorithms/seed_algorithms.py [--workers 2] [--out DIR]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared modules
from _sweep import main  # noqa: E402

if __name__ == "__main__":
    main("seed_algorithms", "benchmarks/seed_algorithms/seed_algorithms.md",
         "Seed-paper algorithms on the embedded default",
         "11 entries × 3 seeds at 25,600 samples; pnpo, dppo_pdm, drpo, copc and dc_grpo also with the behaviour "
         "policy 4 updates stale (rollout.sync = lag). Reconstructions of abstract-only papers: see each entry's "
         "fidelity and assumptions (`rlsuite list algorithms --json`).")
