"""Every baseline on `arith` over 3 seeds at one matched budget → benchmarks/baselines/baselines.md.

    python benchmarks/baselines/baselines.py [--workers 2] [--out DIR]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared modules
from _sweep import main  # noqa: E402

if __name__ == "__main__":
    main("baselines", "benchmarks/baselines/baselines.md", "Baselines on the embedded default (arith, tiny model)",
         "12 entries × 3 seeds at 25,600 samples each, from the committed base (tasks/bases/arith__tiny, "
         "sha256 629a0740…). At the default (one on-policy epoch) dppo's divergence mask never binds, so dppo "
         "computes dr_grpo's update (same gains, grad norms equal to 6 digits).")
