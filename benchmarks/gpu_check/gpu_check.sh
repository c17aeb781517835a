#!/usr/bin/env bash
# One prepared GPU check for any CUDA GPU (reference: H200), under 12 minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
python -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'"
PYTHONUNBUFFERED=1 timeout 480 python benchmarks/gpu_check/gpu_check.py --device cuda "$@"
# sharded training (dist.shard=fsdp): one world-size-1 fully_shard bf16 step of a 1.5B-shaped model
PYTHONUNBUFFERED=1 timeout 240 python benchmarks/fsdp/fsdp.py --gpu-check
