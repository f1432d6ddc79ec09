"""RUN_DIR/events.jsonl: what happened to a run besides its steps, one JSON object a line.

    {"event": "resume", "step": 4, "checkpoint": "step-4", "time": 1767000000.0}

A resume (`rlvr train --resume`) is written when a checkpoint was restored: the run continues
after `step` (metrics.jsonl was cut back to it). Not in metrics.jsonl, whose rows stay identical
across reruns and resumes in deterministic mode; `rlvr report` marks each resume on its plots.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

EVENTS_FILE = "events.jsonl"


def record_event(run_dir: Path, event: str, **fields: Any) -> None:
    """Append one event line, with the wall-clock `time` (seconds since the epoch)."""
    row = {"event": event, **fields, "time": round(time.time(), 3)}
    with (Path(run_dir) / EVENTS_FILE).open("a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def read_events(run_dir: Path, event: str | None = None) -> list[dict[str, Any]]:
    """The events of a run (of one kind, with `event`); a line that is not a JSON object, as a
    crash mid-write leaves, is skipped. [] when there is no events file."""
    try:
        text = (Path(run_dir) / EVENTS_FILE).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    out = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and (event is None or row.get("event") == event):
            out.append(row)
    return out
