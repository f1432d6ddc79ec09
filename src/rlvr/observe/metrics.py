"""Metric sinks, the progress display and small statistics helpers.

metrics.jsonl is always written: one JSON object per step (after a step-0 object, the held-out
evaluation before training), flushed at once, so a crashed run keeps every step it finished.
A non-finite number (a mean over no completions, an overflowed loss) is written as `null`
(`json_safe`): JSON has no NaN or infinity, and strict parsers reject Python's bare `NaN`.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any


class JsonlWriter:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = path.open("a", encoding="utf-8")

    def write(self, row: Mapping[str, Any]) -> None:
        self._file.write(json.dumps(json_safe(_plain(row)), allow_nan=False) + "\n")
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


def json_safe(value: Any) -> Any:
    """`value` with every non-finite float (NaN, +-inf), also inside dicts, lists and tuples,
    replaced by None: what the run directory's JSON files hold instead of Python's bare `NaN`,
    which is not JSON. Readers treat `null` as "no value"."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


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


# What the bar's postfix and the plain lines show: (metric, label).
SHOWN = (
    ("reward_mean", "reward"),
    ("eval_accuracy", "acc"),
    ("completion_length_mean", "len"),
    ("entropy", "ent"),
)
PLAIN_LINES = 20  # lines a run prints when stderr is not a terminal, besides the time-based ones
PLAIN_INTERVAL_S = 30.0  # ... and at least one line this often (on the next step after it)


class Progress:
    """Progress of a run on stderr. On a terminal: a tqdm bar with ETA and headline metrics.
    Otherwise (stderr redirected to a file or a pipe) a plain line, one per line, for
    `grep`/`tail -f`:

        rlvr train: step 12/60 reward=0.412 len=23.1 ent=0.712 step_s=0.84 elapsed=10s eta=40s

    printed at the first step, every max(1, last_step // 20) steps, at the last step, on
    held-out evaluation steps (with `acc`, eval_accuracy), and at the first step that ends
    `PLAIN_INTERVAL_S` (30 s) or more after the previous line (slow steps: a line at least every
    step or 30 s). Rows without a reward (SFT) show `loss`. Silent when not `enabled`."""

    def __init__(
        self,
        total: int,
        enabled: bool,
        desc: str = "rlvr train",
        *,
        stream: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bar = None
        self.total, self.desc, self.clock = total, desc, clock
        self.stream = stream if stream is not None else sys.stderr
        self.plain = False
        self.n = 0  # updates so far, catch-up ones (a resumed run's earlier steps) included
        self.timed = 0  # updates with metrics in this process: the rate behind the ETA
        self.start = self.last_line = clock()
        self.printed = False
        if not enabled or self.stream is None:  # no stderr at all (pythonw)
            return
        isatty = getattr(self.stream, "isatty", None)
        if isatty is not None and isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, dynamic_ncols=True, file=self.stream)
        else:
            self.plain = True

    def update(self, metrics: Mapping[str, Any]) -> None:
        self.n += 1
        if self.plain:
            self._plain_line(metrics)
        if self.bar is None:
            return
        shown = {}
        for key, label in SHOWN:
            if key in metrics:
                shown[label] = f"{metrics[key]:.3g}"
        self.bar.set_postfix(shown, refresh=False)
        self.bar.update(1)

    def _plain_line(self, metrics: Mapping[str, Any]) -> None:
        if not metrics:  # a resumed run catching up on the steps it had done
            return
        self.timed += 1
        now = self.clock()
        position = int(metrics.get("step", self.n))
        last = position + self.total - self.n
        every = max(1, last // PLAIN_LINES)
        due = (
            not self.printed
            or position % every == 0
            or position >= last
            or "eval_accuracy" in metrics  # a held-out evaluation: always worth a line
            or now - self.last_line >= PLAIN_INTERVAL_S
        )
        if not due:
            return
        self.printed, self.last_line = True, now
        label = "step " if "step" in metrics else ""
        parts = [f"{self.desc}: {label}{position}/{last}"]
        for key, name in SHOWN:
            if _is_number(metrics.get(key)):
                parts.append(f"{name}={metrics[key]:.3g}")
        if "reward_mean" not in metrics and _is_number(metrics.get("loss")):
            parts.append(f"loss={metrics['loss']:.4g}")
        if _is_number(metrics.get("step_time_s")):
            parts.append(f"step_s={metrics['step_time_s']:.3g}")
        elapsed = now - self.start
        parts.append(f"elapsed={_duration(elapsed)}")
        parts.append(f"eta={_duration(elapsed / self.timed * max(0, last - position))}")
        print(" ".join(parts), file=self.stream, flush=True)

    def write(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=self.stream)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _duration(seconds: float) -> str:
    """45s, 12m05s, 3h02m."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
