"""The verifier interface: a plain function of (completion, sample) -> float.

Verifiers import no torch and no model, so they can run in worker processes or from a laptop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Verifier = Callable[[str, Mapping[str, Any]], float]
