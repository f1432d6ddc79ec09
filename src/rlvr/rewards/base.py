"""The verifier interface: a plain function of (completion, sample) -> float.

Verifiers import no torch and no model, so they run in worker processes, in Ray actors, or from
`rlvr verify` on a laptop. Batch and async forms are adapters around this one signature.

A verifier may also offer `score(completion, sample) -> Score` with a short human-readable
detail (the extracted answer, the test results); `score_with_detail` uses it when present.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Verifier = Callable[[str, Mapping[str, Any]], float]


@dataclass(frozen=True)
class Score:
    reward: float
    detail: str = ""


def score_with_detail(verifier: Any, completion: str, sample: Mapping[str, Any]) -> Score:
    """Call `verifier.score` when it exists, else the plain signature with an empty detail."""
    score = getattr(verifier, "score", None)
    if callable(score):
        result = score(completion, sample)
        return result if isinstance(result, Score) else Score(float(result))
    return Score(float(verifier(completion, sample)))
