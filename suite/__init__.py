"""rlsuite engine: config, registries, models, rollout engines, the shared trainer, run folders, CLI."""

__version__ = "0.1.0"
