#!/usr/bin/env bash
# One prepared GPU check for any CUDA GPU (reference: H200), under 8 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
python -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'"
PYTHONUNBUFFERED=1 timeout 480 python benchmarks/gpu_check.py --device cuda "$@"
