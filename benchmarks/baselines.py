"""Every baseline on `arith` over 3 seeds at one matched budget → benchmarks/results/baselines.md.

    python benchmarks/baselines.py [--workers 2] [--out DIR]
"""

from _sweep import main

if __name__ == "__main__":
    main("baselines", "benchmarks/results/baselines.md", "Baselines on the embedded default (arith, tiny model)",
         "12 entries × 3 seeds at 25,600 samples each, from the committed base (tasks/bases/arith__tiny, "
         "sha256 629a0740…). At the default (one on-policy epoch) dppo's divergence mask never binds, so dppo "
         "computes dr_grpo's update (same gains, grad norms equal to 6 digits).")
