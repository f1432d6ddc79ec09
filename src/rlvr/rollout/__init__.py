"""Rollout engines: turn prompts into sampled completions with per-token log-probabilities."""

from rlvr.rollout.hf_engine import HFEngine
from rlvr.rollout.types import RolloutBatch, SamplingParams

__all__ = ["HFEngine", "RolloutBatch", "SamplingParams"]
