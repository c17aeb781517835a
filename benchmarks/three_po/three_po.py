"""3PO grouping strategies and σ = 0 vs GRPO (no KL) on `arith` → benchmarks/three_po/three_po.md.

    python benchmarks/three_po/three_po.py [--workers 2] [--out DIR]
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared modules
from _sweep import main  # noqa: E402

if __name__ == "__main__":
    main("three_po", "benchmarks/three_po/three_po.md", "3PO on the embedded default",
         "Grouping ∈ {mixed, per_group, partial} and σ = 0, against GRPO without KL; 3 seeds, 25,600 samples per run.")
