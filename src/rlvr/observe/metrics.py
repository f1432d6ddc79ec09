"""Metric sinks and small statistics helpers.

metrics.jsonl is always written: one JSON object per step, flushed at once, so a crashed run keeps
every step it finished.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


class JsonlWriter:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = path.open("a", encoding="utf-8")

    def write(self, row: Mapping[str, Any]) -> None:
        self._file.write(json.dumps(_plain(row), allow_nan=True) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _plain(row: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in row.items():
        if hasattr(v, "item"):
            v = v.item()
        out[k] = v
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default), q in [0, 100]."""
    if not values:
        return 0.0
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return float(xs[lo] + (xs[hi] - xs[lo]) * (pos - lo))


def memory_metrics(device: Any = None) -> dict[str, float]:
    """Peak resident memory of this process (MiB) and, on CUDA, peak allocated GPU memory."""
    import resource

    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    scale = 1 / 1024 if sys.platform != "darwin" else 1 / 2**20  # bytes on macOS
    out = {"memory_peak_mib": peak_kib * scale}
    if device is not None and getattr(device, "type", None) == "cuda":
        import torch

        out["gpu_memory_peak_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
    return out


class Progress:
    """A tqdm bar with ETA and headline metrics; silent when stderr is not a terminal."""

    def __init__(self, total: int, enabled: bool, desc: str = "rlvr train") -> None:
        self.bar = None
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, dynamic_ncols=True, file=sys.stderr)

    def update(self, metrics: Mapping[str, Any]) -> None:
        if self.bar is None:
            return
        shown = {}
        for key, label in (
            ("reward_mean", "reward"),
            ("eval_accuracy", "acc"),
            ("completion_length_mean", "len"),
            ("entropy", "ent"),
        ):
            if key in metrics:
                shown[label] = f"{metrics[key]:.3g}"
        self.bar.set_postfix(shown, refresh=False)
        self.bar.update(1)

    def write(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
