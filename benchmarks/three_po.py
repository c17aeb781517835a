"""3PO grouping strategies and σ = 0 vs GRPO (no KL) on `arith` → benchmarks/results/three_po.md.

    python benchmarks/three_po.py [--workers 2] [--out DIR]
"""

from _sweep import main

if __name__ == "__main__":
    main("three_po", "benchmarks/results/three_po.md", "3PO on the embedded default",
         "Grouping ∈ {mixed, per_group, partial} and σ = 0, against GRPO without KL; 3 seeds, 25,600 samples per run.")
