"""Run scaffolding shared by `rlvr train` and `rlvr sft`: what a run writes and when it saves.

- `RunLog`: metrics.jsonl (one object per step, flushed at once, and a step-0 object for the
  held-out evaluation before training), timings.jsonl in deterministic mode (wall-clock numbers
  apart, so metrics.jsonl is identical across reruns and resumes), the optional sinks
  (TensorBoard, W&B, MLflow) and the progress (a bar on a terminal, plain lines otherwise);
  rank 0 writes, other ranks write nowhere.
- `EvalSchedule`: the held-out evaluations before, every N steps and after training.
- `CheckpointTriggers`: a checkpoint every N steps, every M minutes, and on SIGINT/SIGTERM (the
  step in progress finishes, a checkpoint is written, `TrainingInterrupted` says how to resume;
  a second Ctrl-C does not cut it short, a third quits at once: `StopSignals`); under torchrun
  every rank agrees on the decision.
- `write_summary`: summary.json, atomically (a non-finite number as null, as in metrics.jsonl).
- `run_precision`, `write_precision`: model.precision as the run resolves it, recorded in
  precision.json so that a resumed run keeps it (auto on a CPU is measured: it could differ).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlvr.config import CheckpointConfig, EvalConfig, LoggingConfig, ModelConfig
from rlvr.distributed.world import World
from rlvr.errors import UserError
from rlvr.models.loading import Precision, resolve_precision
from rlvr.observe.loggers import build_loggers
from rlvr.observe.metrics import JsonlWriter, Progress, json_safe


def is_wall_clock(key: str) -> bool:
    """Metrics that measure time or memory, which differ between two runs of the same seed."""
    return key.startswith(("time_", "tokens_per_s", "memory_", "gpu_memory")) or key in (
        "step_time_s",
    )


class _NullWriter:
    """Where ranks other than 0 write their metrics: nowhere."""

    def write(self, row: Mapping[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


class RunLog:
    """Where a run's per-step rows go: metrics.jsonl, timings.jsonl (deterministic mode), the
    configured sinks and the progress display. Appends: a resumed run's files were truncated to
    its checkpoint's step before this opens them; `fresh` empties them first (a run that
    restored no checkpoint starts over, leaving no row of an earlier attempt behind)."""

    def __init__(
        self,
        run_dir: Path,
        config: dict[str, Any],
        logging: LoggingConfig,
        *,
        deterministic: bool,
        main: bool = True,
        fresh: bool = False,
    ) -> None:
        if main and fresh:
            for name in ("metrics.jsonl", "timings.jsonl", "events.jsonl"):
                (run_dir / name).unlink(missing_ok=True)
        self.writer = JsonlWriter(run_dir / "metrics.jsonl") if main else _NullWriter()
        self.timings = None
        if deterministic:
            self.timings = JsonlWriter(run_dir / "timings.jsonl") if main else _NullWriter()
        self.sinks = build_loggers(
            logging.report_to if main else [],
            run_dir,
            config,
            wandb_project=logging.wandb_project,
            wandb_mode=logging.wandb_mode,
        )
        self.progress: Progress | None = None

    def start_progress(self, total: int, enabled: bool, desc: str = "rlvr train") -> Progress:
        self.progress = Progress(total, enabled, desc=desc)
        return self.progress

    def write(self, metrics: dict[str, Any], step: int) -> None:
        """One step's row. In deterministic mode its wall-clock keys are moved (out of
        `metrics`, in place) to timings.jsonl."""
        if self.timings is not None:
            wall = {k: metrics.pop(k) for k in list(metrics) if is_wall_clock(k)}
            self.timings.write({"step": step, **wall})
        self.writer.write(metrics)
        self.sinks.log(metrics, step)

    def write_eval(self, results: Mapping[str, float], step: int) -> None:
        """A held-out evaluation outside the step rows (before or after training): to the
        sinks as eval/<name>."""
        self.sinks.log({f"eval/{k}": v for k, v in results.items()}, step)

    def write_eval_before(self, results: Mapping[str, float]) -> None:
        """The held-out evaluation before training: metrics.jsonl's step-0 row, `step` and the
        results as `eval_<name>` (the keys of an evaluation step's row; training rows count
        from 1, so step 0 is never a training step), and the sinks' eval/<name> at step 0. Not
        in timings.jsonl: it holds no wall-clock key."""
        self.writer.write({"step": 0, **{f"eval_{k}": v for k, v in results.items()}})
        self.write_eval(results, 0)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.close()
        self.writer.close()
        if self.timings is not None:
            self.timings.close()
        self.sinks.close()


@dataclass(frozen=True)
class EvalSchedule:
    """When the held-out set is evaluated: before training, every `every` steps, after
    training (the last step's periodic evaluation is left to the one after training)."""

    before: bool
    every: int
    after: bool
    total_steps: int

    @classmethod
    def from_config(cls, cfg: EvalConfig, total_steps: int, has_heldout: bool) -> EvalSchedule:
        if not has_heldout:
            return cls(False, 0, False, total_steps)
        return cls(cfg.before, cfg.every, cfg.after, total_steps)

    def periodic(self, step: int) -> bool:
        last = step == self.total_steps
        return bool(self.every) and step % self.every == 0 and not (last and self.after)


class TrainingAborted(UserError):
    """Training cannot go on (e.g. repeated NaN updates); the checkpoints on disk are good."""


class TrainingInterrupted(Exception):
    """SIGINT/SIGTERM arrived: the step in progress finished and a checkpoint was saved."""

    def __init__(
        self,
        signum: int,
        step: int,
        run_dir: Path,
        command: str = "train",
        *,
        hint: str | None = None,
    ) -> None:
        self.signum, self.step, self.run_dir = signum, step, run_dir
        name = signal.Signals(signum).name
        how = hint or (
            f"`rlvr {command} --resume --output-dir {run_dir}` (it reads the run's config.yaml)"
        )
        super().__init__(
            f"{name}: stopped after step {step}, checkpoint saved; continue with " + how
        )


class StopSignals:
    """While a run trains, SIGINT (Ctrl-C) and SIGTERM ask it to stop after the current step,
    which then writes a checkpoint. A second Ctrl-C does not cut that short (people press it
    again when nothing seems to happen; the steps since the last checkpoint would be lost): it
    says again what is under way. A third quits at once (KeyboardInterrupt), with only the
    checkpoints already written. Each is acknowledged on stderr when `announce` (rank 0).
    Handlers are installed only in the main thread."""

    QUIT_AFTER = 3  # the Ctrl-C that stops at once, without the checkpoint

    def __init__(self, announce: bool = True) -> None:
        self.signum: int | None = None
        self.presses = 0
        self.announce = announce
        self.previous: dict[int, Any] = {}
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, _frame: Any) -> None:
        if signum == signal.SIGINT:
            self.presses += 1
            if self.presses >= self.QUIT_AFTER:
                raise KeyboardInterrupt
        first = self.signum is None
        self.signum = self.signum or signum
        name = signal.Signals(signum).name
        if first:
            self._say(
                f"rlvr: {name}: stopping after this step, which then writes a checkpoint "
                f"(Ctrl-C {self.QUIT_AFTER - max(self.presses, 1)} more times quits at once, "
                "without it)"
            )
        elif signum == signal.SIGINT:
            self._say(
                "rlvr: SIGINT again: still finishing the step and writing its checkpoint "
                "(one more Ctrl-C quits at once, without it)"
            )

    def _say(self, line: str) -> None:
        # os.write, not print: a handler runs between two bytecodes, maybe inside a print
        if self.announce:
            try:
                os.write(2, (line + "\n").encode())
            except OSError:  # pragma: no cover - no stderr
                pass

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous = {}


class CheckpointTriggers:
    """Whether to save after a step: every `checkpoint.every` steps, when
    `checkpoint.every_minutes` passed since the last save, or when a stop signal arrived.
    Installs the SIGINT/SIGTERM handlers for its lifetime (`close` restores them). Under
    torchrun every rank stops after the same step when any of them was signalled, and saves
    when any of them is due (rank 0's clock decides in effect)."""

    def __init__(self, cfg: CheckpointConfig, world: World | None = None) -> None:
        self.every, self.minutes = cfg.every, cfg.every_minutes
        self.world = world if world is not None else World()
        self.last_save = time.monotonic()
        self.signals = StopSignals(announce=self.world.is_main)

    def check(self, step: int) -> tuple[bool, int]:
        """(save now, the signal that asks to stop after this step or 0); a collective."""
        every = self.every and step % self.every == 0
        due = self.minutes and time.monotonic() - self.last_save >= 60 * self.minutes
        signum = int(self.world.all_reduce(torch.tensor(self.signals.signum or 0), "max"))
        save = bool(self.world.all_reduce(torch.tensor(int(bool(every or due))), "max"))
        return save or bool(signum), signum

    def saved(self) -> None:
        self.last_save = time.monotonic()

    def close(self) -> None:
        self.signals.restore()


@contextlib.contextmanager
def transformers_progress(enabled: bool) -> Iterator[None]:
    """Inside it, transformers' and huggingface_hub's own progress bars (loading and writing
    weights, downloads) are off unless `enabled`; the setting before is restored after."""
    if enabled:
        yield
        return
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars
    except ImportError:  # pragma: no cover - huggingface_hub always comes with transformers
        hub_was_off = True
    else:
        hub_was_off = are_progress_bars_disabled()
        disable_progress_bars()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()
        if not hub_was_off:
            from huggingface_hub.utils import enable_progress_bars

            enable_progress_bars()


def write_summary(run_dir: Path, summary: Mapping[str, Any]) -> None:
    """RUN_DIR/summary.json, written to a temp file and renamed into place."""
    _write_json(run_dir / "summary.json", summary)


def _write_json(path: Path, obj: Mapping[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(json_safe(obj), indent=2, allow_nan=False))
    tmp.replace(path)


PRECISION_FILE = "precision.json"


def run_precision(cfg: ModelConfig, device: torch.device, resumed: Path | None) -> Precision:
    """model.precision of a run (`resolve_precision`). A resumed run (`resumed`: its directory)
    under auto with model.dtype auto takes the layout its precision.json recorded and never
    probes again: the same CPU may measure otherwise another day, another machine surely. A
    directory without one predates the probe, whose auto was fp32 on a CPU: so it stays."""
    path = resumed / PRECISION_FILE if resumed is not None else None
    if path is not None and path.is_file() and (cfg.precision, cfg.dtype) == ("auto", "auto"):
        try:
            record = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise UserError(f"--resume: {path}: not JSON ({e})") from None
        return Precision.from_record(record, f"--resume: {path}")
    return resolve_precision(cfg, device, probe=resumed is None)


def write_precision(run_dir: Path, precision: Precision) -> None:
    """RUN_DIR/precision.json: the run's `Precision.record()`, for a resume to keep."""
    _write_json(run_dir / PRECISION_FILE, precision.record())


# (metric key, label, format) of an eval line, in order; a key the metrics lack is left out
EVAL_LINE_FIELDS = (
    ("accuracy", "accuracy", ".3f"),
    ("pass1_t1", "pass1_t1", ".3f"),
    ("reasoning_fraction", "reasoning", ".3f"),
    ("mean_length", "length", ".1f"),
    ("tool_call_fraction", "tool calls", ".3f"),
)


def eval_line(when: str, e: Mapping[str, float]) -> str:
    """One line of held-out results: generation metrics and, for SFT, the held-out loss."""
    parts = []
    if "accuracy" in e:  # the temperature-1 keys are absent with eval.t1_samples=0, eval.k=0
        shown = "".join(
            f"{label} {e[key]:{fmt}}  " for key, label, fmt in EVAL_LINE_FIELDS if key in e
        )
        parts.append(f"{shown}(n={e['n']})")
    if "loss" in e:
        parts.append(f"sft loss {e['loss']:.4f}")
    return f"eval {when}: " + "  ".join(parts)
