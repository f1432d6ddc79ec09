"""Rollout engines: turn prompts into sampled completions with per-token log-probabilities."""

from rlvr.rollout.engines import ENGINES, build_engine
from rlvr.rollout.fast_engine import FastEngine
from rlvr.rollout.hf_engine import HFEngine
from rlvr.rollout.types import (
    Engine,
    RolloutBatch,
    Round,
    SamplingParams,
    ToolRecord,
    concat_batches,
    take_rows,
)

__all__ = [
    "ENGINES",
    "Engine",
    "FastEngine",
    "HFEngine",
    "RolloutBatch",
    "Round",
    "SamplingParams",
    "build_engine",
    "ToolRecord",
    "concat_batches",
    "take_rows",
]
