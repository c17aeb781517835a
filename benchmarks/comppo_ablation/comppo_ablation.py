"""CompPO's ablation spec (gate × critic, shuffle and position controls, PPO) on `arith`
→ benchmarks/comppo_ablation/comppo_ablation.md.

    python benchmarks/comppo_ablation/comppo_ablation.py [--workers 2] [--out DIR]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared modules
from _sweep import main  # noqa: E402

if __name__ == "__main__":
    main("comppo_ablation", "benchmarks/comppo_ablation/comppo_ablation.md", "CompPO ablation on the embedded default",
         "Gate ∈ {attention, constant (= GAE), shuffled, position} × critic ∈ {TAC, separate}, plus PPO, 3 seeds, "
         "25,600 samples per run. Whatever it shows is reported as measured.")
