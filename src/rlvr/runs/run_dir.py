"""The run directory of `rlvr train`, `rlvr sft` and the Python API (and `rlvr sample`'s output
directory): one set of rules for all of them.

`check_run_dir` picks the directory and refuses to clobber an earlier run, `check_resumable`
checks a directory to resume (its config.yaml, the same config, a checkpoint to continue
from), `create_run_dir` creates it once the model has loaded (a failed start leaves nothing
behind), `write_config` records the run's config.yaml with its local paths made absolute
(`recorded_config`), so `rlvr eval --config RUN/config.yaml` finds the verifier file and the
data from any directory. The files of a run are listed in docs/architecture.md.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from rlvr.errors import UserError

RUN_FILES = (
    "config.yaml",
    "precision.json",
    "metrics.jsonl",
    "summary.json",
    "samples",
    "errors.jsonl",
    "events.jsonl",
    "final",
    "checkpoints",
)


def check_run_dir(
    output_dir: str | Path | None,
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
            "choose another directory or pass --overwrite (overwrite=True in Python)"
        )
    return run_dir


def check_resumable(output_dir: str | Path | None, cfg: Any, *, allow_change: bool = False) -> Path:
    """The run directory to resume: it must hold the run's config.yaml, the same config (the
    differing keys named; with `allow_change` printed instead) and a complete checkpoint
    (without one a resume would silently start again from step 0)."""
    from rlvr.config import to_dict
    from rlvr.runs.checkpoint import check_same_config, incomplete_checkpoints, latest_checkpoint

    if not output_dir:
        raise UserError("--resume: name the run directory: --resume RUN_DIR")
    run_dir = Path(output_dir)
    check_same_config(
        recorded_config(cfg),
        run_dir,
        allow_change=allow_change,
        warn=lambda msg: print(f"rlvr: {msg}", file=sys.stderr),
        defaults=to_dict(type(cfg)()),
        normalise=absolute_paths,
    )
    if latest_checkpoint(run_dir) is None:
        partial = incomplete_checkpoints(run_dir)
        found = f" (only the unfinished {', '.join(partial)})" if partial else ""
        raise UserError(
            f"--resume {run_dir}: no checkpoint to continue from in {run_dir / 'checkpoints'}"
            f"{found}; a run saves one every checkpoint.every steps and when stopped by "
            "Ctrl-C or SIGTERM. Start it again with --overwrite"
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


# Keys that may name a local file or directory, and how: a path, or a user-code spec whose
# 'file.py' items are paths ('rewards.py:accuracy', 'trl:my.py:fn,math:0.5').
PATH_KEYS = {
    "model.name_or_path": "path",
    "data.path": "path",
    "data.eval_path": "path",
    "data.mix_path": "path",
    "critic.name_or_path": "path",
    "reward.verifier": "spec",
    "reward.mix_verifier": "spec",
    "eval.verifier": "spec",
    "reward.judge_rubric": "path",
    "environment.name": "spec",
}
NOT_PATHS = ("embedded", "embedded-small", "embedded-tools")  # model names, whatever is on disk


def absolute_paths(tree: dict[str, Any]) -> dict[str, Any]:
    """A config tree (`to_dict`) with its relative local paths made absolute against the
    current directory. A path is changed only where it exists on disk, which is also where the
    run found it: a hub id ('org/model', 'openai/gsm8k') or 'embedded' is left as written. In a
    spec only 'file.py' items are paths ('module:function' and built-in names are not). Other
    keys are untouched."""
    from rlvr.rewards.spec import absolute_learned, absolute_spec

    out = {k: dict(v) if isinstance(v, dict) else v for k, v in tree.items()}
    for key, kind in PATH_KEYS.items():
        section, leaf = key.split(".")
        value = out[section].get(leaf) if isinstance(out.get(section), dict) else None
        if not isinstance(value, str) or not value or value in NOT_PATHS:
            continue
        if kind == "path":
            path = Path(value).expanduser()
            if not path.is_absolute() and path.exists():
                out[section][leaf] = str(path.resolve())
        else:
            if ".py:" in value:
                value = absolute_spec(value)
            out[section][leaf] = absolute_learned(value)  # rm:PATH items
    return out


def recorded_config(cfg: Any) -> dict[str, Any]:
    """The tree a run records in config.yaml and compares on resume: `to_dict(cfg)` (a Python
    function as 'module:qualname'), its local paths made absolute."""
    from rlvr.config import to_dict

    return absolute_paths(to_dict(cfg))


def write_config(run_dir: Path, cfg: Any) -> None:
    """RUN_DIR/config.yaml: `recorded_config(cfg)` as YAML."""
    text = yaml.safe_dump(recorded_config(cfg), sort_keys=False)
    (run_dir / "config.yaml").write_text(text, encoding="utf-8")
