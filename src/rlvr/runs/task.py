"""The task of a run's config: `data.*`, or with `data.task=environment` the prompts that
environment.name's library ships with the environment (rlvr.environments.environment_rows)."""

from __future__ import annotations

from typing import Any

from rlvr.data.registry import build_task
from rlvr.environments.registry import environment_rows


def build_run_task(cfg: Any, verifier: Any = None) -> Any:
    """`build_task(cfg.data, verifier)` of the run config `cfg` (rlvr.config.Config), given
    the environment's rows when data.task is 'environment'."""
    if cfg.data.task != "environment":
        return build_task(cfg.data, verifier)
    rows = environment_rows(cfg.environment)
    return build_task(
        cfg.data, verifier, rows=rows, origin=f"environment.name={cfg.environment.name}"
    )
