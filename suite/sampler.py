"""The old import path of the engine API, the kv sampler and HF ``generate``: a re-export of
:mod:`suite.engines` (kept so existing imports keep working; new code imports the package)."""

from suite.engines.base import (  # noqa: F401
    KV_ARCHITECTURES,
    GenOutput,
    NoStats,
    RolloutEngine,
    SamplingParams,
    _StopTracker,
    _TensorTracker,
    left_pad,
)
from suite.engines.factory import make_engine  # noqa: F401
from suite.engines.hf import HFGenerateEngine  # noqa: F401
from suite.engines.kv import KVSampler, _diag  # noqa: F401
from suite.engines.sampling import RowNoise, _signed64, _srl, sample_step, splitmix64, truncate_logits  # noqa: F401
