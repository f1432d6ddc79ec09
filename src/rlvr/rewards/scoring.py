"""Scoring a batch of completions with a verifier, in this process or in a worker pool."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from rlvr.errors import UserError
from rlvr.rewards.compose import CompositeVerifier


class Scorer:
    """Applies the verifier to every completion, in this process or in a worker pool.

    A verifier that raises, returns a non-finite value, crashes its worker or times out gives
    reward 0 and is counted in `verifier_failures`: one bad sample must not kill a long run.
    User errors (a missing optional dependency, a bad verifier spec) still stop the run.
    A composite verifier ('math:1.0,format:0.1') also reports each component's reward so it can
    be logged under its own name (in-process scoring only).
    """

    def __init__(
        self, verifier: Callable[[str, Mapping[str, Any]], float], pool: Any = None
    ) -> None:
        self.verifier = verifier
        self.pool = pool
        self.components: dict[str, list[float]] = {}

    def __call__(
        self, texts: list[str], samples: list[Mapping[str, Any]]
    ) -> tuple[list[float], int]:
        if len(texts) != len(samples):
            raise ValueError(f"{len(texts)} completions for {len(samples)} samples")
        if self.pool is not None:
            rewards, failures, _ = self.pool.score_batch(texts, samples)
            return list(rewards), failures
        composite = isinstance(self.verifier, CompositeVerifier)
        rewards, failures = [], 0
        for text, sample in zip(texts, samples):
            try:
                if composite:
                    parts = self.verifier.score_components(text, sample)
                    for name, value in parts.items():
                        self.components.setdefault(name, []).append(value)
                    r = sum(w * parts[name] for name, (_, w) in self.verifier.components.items())
                else:
                    r = float(self.verifier(text, sample))
                if not math.isfinite(r):
                    raise ValueError("non-finite reward")
            except UserError:
                raise
            except Exception:  # noqa: BLE001 - any verifier bug is contained and counted
                r, failures = 0.0, failures + 1
            rewards.append(r)
        return rewards, failures

    def pop_components(self) -> dict[str, list[float]]:
        out, self.components = self.components, {}
        return out
