"""Optional metric sinks: files a reader can open, and a clear error when a package is missing."""

import importlib.util

import pytest

from rlvr.errors import ConfigError
from rlvr.observe.loggers import build_loggers, check_available

ROWS = [
    {"step": 1, "reward_mean": 0.25, "reward/math_mean": 0.5, "diagnostics": ["x"]},
    {"step": 2, "reward_mean": 0.75, "reward/math_mean": 1.0},
]


def _log(sinks, tmp_path):
    loggers = build_loggers(sinks, tmp_path, {"optimizer": {"lr": 1e-4}})
    for row in ROWS:
        loggers.log(row, row["step"])
    loggers.close()


def test_tensorboard_event_files_are_readable(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _log(["jsonl", "tensorboard"], tmp_path)
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert {"reward_mean", "reward/math_mean"} <= set(acc.Tags()["scalars"])
    values = [(e.step, e.value) for e in acc.Scalars("reward_mean")]
    assert values == [(1, 0.25), (2, 0.75)]


def test_wandb_offline_writes_a_run_directory(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    _log(["wandb"], tmp_path)
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert list(runs[0].glob("*.wandb"))


def test_mlflow_records_metrics_in_a_local_store(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    _log(["mlflow"], tmp_path)
    metric_files = list((tmp_path / "mlruns").rglob("metrics/reward_mean"))
    assert metric_files
    lines = metric_files[0].read_text().split("\n")
    assert [line.split()[1] for line in lines if line] == ["0.25", "0.75"]


def test_a_missing_package_names_the_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )
    with pytest.raises(ConfigError, match=r"pip install 'rlvr\[wandb\]'"):
        check_available(["jsonl", "wandb"])


def test_report_to_rejects_unknown_sinks():
    from rlvr.config import load_config

    with pytest.raises(ConfigError, match=r"logging.report_to\[1\]: expected one of"):
        load_config(None, ["logging.report_to=[jsonl,tensorbord]"])
