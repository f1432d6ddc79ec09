"""`Scorer`: the verifier applied to a step's completions, with failures contained and counted.

    rewards, failures = Scorer(verifier, pool)(texts, samples)

In this process (`pool=None`) or in a `VerifierPool` (`reward.workers > 0`). A verifier that
raises, returns a non-finite value, crashes its worker or times out gives reward 0 and is counted
in `failures`: one bad sample must not kill a long run. User errors (a missing optional
dependency, a bad verifier spec) still stop the run.

A composite verifier ('math:1.0,format:0.1') also reports each component's unweighted reward,
appended to `components[name]` in sample order, so the trainer can log reward/<name>; in process
the reward is `CompositeVerifier.weighted_sum` of those components.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rlvr.errors import UserError
from rlvr.rewards.base import Verifier
from rlvr.rewards.compose import CompositeVerifier

if TYPE_CHECKING:
    from rlvr.rewards.pool import VerifierPool


class Scorer:
    """Applies the verifier to every completion, in this process or in a worker pool."""

    def __init__(self, verifier: Verifier, pool: VerifierPool | None = None) -> None:
        self.verifier = verifier
        self.pool = pool
        self.components: dict[str, list[float]] = {}

    def __call__(
        self, texts: list[str], samples: list[Mapping[str, Any]]
    ) -> tuple[list[float], int]:
        """(reward per completion, number of failures); raises ValueError on unequal lengths."""
        if len(texts) != len(samples):
            raise ValueError(f"{len(texts)} completions for {len(samples)} samples")
        if self.pool is not None:
            scores, components = self.pool.score_batch_with_components(texts, samples)
            for name, values in components.items():
                self.components.setdefault(name, []).extend(values)
            return list(scores.rewards), scores.failures
        composite = self.verifier if isinstance(self.verifier, CompositeVerifier) else None
        rewards, failures = [], 0
        for text, sample in zip(texts, samples):
            try:
                if composite is not None:
                    parts = composite.score_components(text, sample)
                    for name, value in parts.items():
                        self.components.setdefault(name, []).append(value)
                    r = composite.weighted_sum(parts)
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
        """The components gathered since the last call, and start afresh."""
        out, self.components = self.components, {}
        return out
