"""CompPO's ablation spec (gate × critic, shuffle and position controls, PPO) on `arith`
→ benchmarks/results/comppo_ablation.md.

    python benchmarks/comppo_ablation.py [--workers 2] [--out DIR]
"""

from _sweep import main

if __name__ == "__main__":
    main("comppo_ablation", "benchmarks/results/comppo_ablation.md", "CompPO ablation on the embedded default",
         "Gate ∈ {attention, constant (= GAE), shuffled, position} × critic ∈ {TAC, separate}, plus PPO, 3 seeds, "
         "25,600 samples per run. Whatever it shows is reported as measured.")
