"""rlvr: reinforcement learning from verifiable rewards.

The main names, imported on first use so that `import rlvr` loads neither torch nor
transformers: `rlvr.train` and `rlvr.evaluate` (the Python API, `rlvr.api`), `rlvr.load_config`
and `rlvr.Config` (the config tree), `rlvr.GRPOTrainer` and `rlvr.TrainResult` (the trainer
`rlvr train` runs). docs/guides/python-api.md shows them at work.
"""

from __future__ import annotations

import importlib
from typing import Any

from rlvr.errors import ConfigError, DataError, UserError

__version__ = "0.1.0"

# name -> the module that defines it (imported by __getattr__ when the name is first read)
_LAZY = {
    "train": "rlvr.api",
    "evaluate": "rlvr.api",
    "build_config": "rlvr.api",
    "load_config": "rlvr.config",
    "Config": "rlvr.config",
    "GRPOTrainer": "rlvr.training.grpo",
    "TrainResult": "rlvr.training.grpo",
}

__all__ = ["ConfigError", "DataError", "UserError", "__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'rlvr' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # once imported, an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
