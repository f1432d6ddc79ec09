"""A run directory as `rlvr report` reads it: metrics.jsonl (required), summary.json,
config.yaml, the last samples/step-N.jsonl, errors.jsonl and events.jsonl's resumes; a file
that cannot be read is a DataError naming it (and the line)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.errors import DataError
from rlvr.observe.events import read_events

_SAMPLES_FILE = re.compile(r"^step-(\d+)\.jsonl$")


@dataclass
class Run:
    """One run directory, as read from disk."""

    path: Path
    name: str
    rows: list[dict[str, Any]]
    summary: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    samples_step: int | None = None
    samples: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] | None = None  # errors.jsonl's lines (None: no such file)
    resumes: list[int] = field(default_factory=list)  # the steps it was resumed after


def read_jsonl(path: Path, what: str) -> list[dict[str, Any]]:
    """Every non-blank line of `path` as a dict; DataError naming the file and line otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: file not found (expected {what})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: cannot read ({e})") from None
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(
                f"{path} line {number}: invalid JSON ({e.msg}); expected {what}"
            ) from None
        if not isinstance(obj, dict):
            raise DataError(
                f"{path} line {number}: expected a JSON object, got {type(obj).__name__}"
            )
        rows.append(obj)
    return rows


def load_run(path: Path) -> Run:
    """Read a run directory; only metrics.jsonl is required."""
    if not path.is_dir():
        raise DataError(f"{path}: not a directory (expected a run directory from rlvr train)")
    rows = read_jsonl(path / "metrics.jsonl", "one JSON object per step, with 'step'")
    for number, row in enumerate(rows, start=1):
        if not isinstance(row.get("step"), int):
            raise DataError(f"{path / 'metrics.jsonl'} row {number}: expected an integer 'step'")
    run = Run(path=path, name=path.resolve().name, rows=rows)
    summary_path = path / "summary.json"
    if summary_path.exists():
        try:
            run.summary = json.loads(summary_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise DataError(f"{summary_path}: invalid JSON ({e})") from None
        if not isinstance(run.summary, dict):
            raise DataError(f"{summary_path}: expected a JSON object with eval_before/eval_after")
    config_path = path / "config.yaml"
    if config_path.exists():
        import yaml

        from rlvr.config.fields import YAML_VALUE_ERRORS

        try:
            run.config = yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}
        except (yaml.YAMLError, RecursionError, *YAML_VALUE_ERRORS) as e:
            reason = (str(e).splitlines() or [type(e).__name__])[0]
            raise DataError(f"{config_path}: invalid YAML ({reason})") from None
        if not isinstance(run.config, dict):
            raise DataError(f"{config_path}: expected a mapping of config sections")
    steps = {}
    for p in (path / "samples").glob("step-*.jsonl"):
        m = _SAMPLES_FILE.match(p.name)
        if m:
            steps[int(m.group(1))] = p
    if steps:
        run.samples_step = max(steps)
        run.samples = read_jsonl(steps[run.samples_step], "one JSON object per completion")
    if (path / "errors.jsonl").exists():
        run.errors = read_jsonl(path / "errors.jsonl", "one JSON object per failed completion")
    run.resumes = [e["step"] for e in read_events(path, "resume") if isinstance(e.get("step"), int)]
    return run


def load_runs(paths: list[Path]) -> list[Run]:
    runs = [load_run(p) for p in paths]
    names = [r.name for r in runs]
    if len(set(names)) < len(names):  # same basename in two places: label by the given path
        for r in runs:
            r.name = str(r.path)
    return runs
