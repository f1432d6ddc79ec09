"""The run directory of `rlvr train` and `rlvr sft` (and `rlvr sample`'s output directory).

`check_run_dir` picks the directory and refuses to clobber an earlier run, `check_resumable`
checks a directory to `--resume`, `create_run_dir` creates it once the model has loaded (a failed
start leaves nothing behind). The files of a run are listed in docs/architecture.md.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

from rlvr.errors import UserError

RUN_FILES = (
    "config.yaml",
    "precision.json",
    "metrics.jsonl",
    "summary.json",
    "samples",
    "errors.jsonl",
    "final",
    "checkpoints",
)


def check_run_dir(
    output_dir: str | None,
    overwrite: bool,
    *,
    files: tuple[str, ...] = RUN_FILES,
    prefix: str = "train",
) -> Path:
    """The run directory to use; refuses to clobber an earlier run (any of `files`) unless
    `overwrite`. Without `output_dir`: runs/PREFIX-YYYYmmdd-HHMMSS."""
    run_dir = (
        Path(output_dir) if output_dir else Path("runs") / time.strftime(f"{prefix}-%Y%m%d-%H%M%S")
    )
    if run_dir.exists() and not run_dir.is_dir():
        raise UserError(f"--output-dir {run_dir}: exists and is not a directory")
    existing = [name for name in files if (run_dir / name).exists()]
    if existing and not overwrite:
        raise UserError(
            f"--output-dir {run_dir}: already holds a run ({', '.join(existing)}); "
            "choose another directory or pass --overwrite"
        )
    return run_dir


def check_resumable(output_dir: str | None, cfg: object, *, allow_change: bool = False) -> Path:
    """The run directory to resume: it must exist and hold the same config (diff named), unless
    `allow_change`, which prints the differing keys instead."""
    from rlvr.config import to_dict
    from rlvr.runs.checkpoint import check_same_config

    if not output_dir:
        raise UserError("--resume: name the run directory: --resume RUN_DIR")
    run_dir = Path(output_dir)
    check_same_config(
        to_dict(cfg),
        run_dir,
        allow_change=allow_change,
        warn=lambda msg: print(f"rlvr: {msg}", file=sys.stderr),
        defaults=to_dict(type(cfg)()),
    )
    return run_dir


def create_run_dir(run_dir: Path) -> None:
    """Create the directory, removing an earlier run's files (only reached with --overwrite)."""
    for name in RUN_FILES:
        target = run_dir / name
        if not target.exists():
            continue
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    run_dir.mkdir(parents=True, exist_ok=True)
