"""Metric sinks named by `logging.report_to`, following the ecosystem's convention.

`jsonl` (RUN_DIR/metrics.jsonl) is always written by the trainer; the others are optional:

  tensorboard  event files in RUN_DIR/tensorboard      (extra: rlvr[tensorboard])
  wandb        a W&B run; offline mode writes RUN_DIR/wandb without a network (extra: rlvr[wandb])
  mlflow       an MLflow run; default tracking URI: file store RUN_DIR/mlruns (rlvr[mlflow])

A sink whose package is missing is a one-line ConfigError naming the extra, raised before the
run starts. Only finite-or-NaN numeric scalars are forwarded; lists (e.g. `diagnostics`) stay in
metrics.jsonl.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, cast

from rlvr.errors import ConfigError

SINKS = ("jsonl", "tensorboard", "wandb", "mlflow")
_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}


def check_available(report_to: list[str]) -> None:
    """Fail fast, before any work, when a requested sink's package is not installed."""
    for sink in report_to:
        package = _PACKAGES.get(sink)
        if package and importlib.util.find_spec(package) is None:
            raise ConfigError(
                f"logging.report_to: '{sink}' needs the {package} package; "
                f"install it with: pip install 'rlvr[{sink}]'"
            )


def _scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    out = {}
    for key, value in metrics.items():
        if key == "step" or isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            out[key] = float(value)
    return out


class TensorBoardLogger:
    def __init__(self, run_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_dir / "tensorboard"))

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        for key, value in _scalars(metrics).items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbLogger:
    def __init__(self, run_dir: Path, config: Mapping[str, Any], project: str, mode: str) -> None:
        import wandb

        os.environ.setdefault("WANDB_SILENT", "true")
        self.run = wandb.init(
            project=project,
            dir=str(run_dir),
            config=dict(config),
            mode=cast(Literal["offline", "online", "disabled"], mode),  # logging.wandb_mode
            name=run_dir.name,
            reinit="finish_previous",
        )

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        self.run.log(_scalars(metrics), step=step)

    def close(self) -> None:
        self.run.finish()


class MlflowLogger:
    def __init__(self, run_dir: Path, config: Mapping[str, Any]) -> None:
        import mlflow

        if not os.environ.get("MLFLOW_TRACKING_URI"):
            # A local file store needs no server and no database driver; MLflow 3 keeps it
            # behind an explicit opt-in.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            mlflow.set_tracking_uri((run_dir / "mlruns").resolve().as_uri())
        self.mlflow = mlflow
        self.run = mlflow.start_run(run_name=run_dir.name)
        flat = _flatten(config)
        mlflow.log_params({k: str(v)[:500] for k, v in flat.items()})

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        # MLflow metric names may not contain '/': reward/math_mean -> reward.math_mean
        self.mlflow.log_metrics(
            {k.replace("/", "."): v for k, v in _scalars(metrics).items()}, step=step
        )

    def close(self) -> None:
        self.mlflow.end_run()


def _flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


class MultiLogger:
    """Fans one metrics row out to every optional sink."""

    def __init__(self, loggers: list[Any]) -> None:
        self.loggers = loggers

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        for logger in self.loggers:
            logger.log(metrics, step)

    def close(self) -> None:
        for logger in self.loggers:
            logger.close()


def build_loggers(
    report_to: list[str],
    run_dir: Path,
    config: Mapping[str, Any],
    *,
    wandb_project: str = "rlvr",
    wandb_mode: str = "offline",
) -> MultiLogger:
    check_available(report_to)
    loggers: list[Any] = []
    for sink in dict.fromkeys(report_to):  # de-duplicated, in order
        if sink == "tensorboard":
            loggers.append(TensorBoardLogger(run_dir))
        elif sink == "wandb":
            loggers.append(WandbLogger(run_dir, config, wandb_project, wandb_mode))
        elif sink == "mlflow":
            loggers.append(MlflowLogger(run_dir, config))
    return MultiLogger(loggers)
