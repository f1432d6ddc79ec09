"""The Python API: `rlvr.train` and `rlvr.evaluate`, for a notebook or a script.

    import rlvr

    result = rlvr.train(
        {"training": {"steps": 20}},              # a config: dict, Config, YAML path or None
        reward_funcs=[my_reward],                 # functions, as TRL's reward_funcs=
        dataset=[{"prompt": "2+3=", "answer": "5"}, ...],  # rows, or a file / hub name
        output_dir="runs/notebook",
    )
    result.metrics[-1]["reward_mean"]; result.history("reward_mean"); result.summary
    rlvr.evaluate(model=result.run_dir, reward_funcs=[my_reward], dataset=rows)

Both build the config as `rlvr train` does (every key checked, TRL names translated, notes and
warnings through `log`) and run the trainer `rlvr train` runs (`GRPOTrainer`), so the run
directory holds the same files and follows the same rules: an earlier run there is an error
unless `overwrite=True`; `resume=True` continues it from its newest checkpoint. A config is
  - None: the embedded default (`rlvr train` without arguments);
  - a mapping of sections ({"rollout": {"group_size": 4}}) and/or dotted keys
    ({"rollout.group_size": 4}), or TRL GRPOConfig names ({"num_generations": 4});
  - a `Config` (`rlvr.load_config(...)`, attributes set in Python);
  - a path to a YAML config file.
Keyword `sections` are merged on top: `rlvr.train(training={"steps": 5})`.

`reward_funcs` becomes `reward.verifier`: a function (per-sample `(completion, sample) ->
float`, or TRL-shaped `f(completions, **columns) -> list`), a list of them (summed; with
`reward_weights`, weighted), or a spec string. `dataset` rows are written to the run's
dataset.jsonl (`data.task=dataset`, `data.path` that file), so the run directory is complete;
`rlvr.evaluate` writes them to a temporary file for the evaluation's length.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlvr.errors import ConfigError, DataError, UserError

if TYPE_CHECKING:
    from rlvr.config import Config
    from rlvr.training.grpo import TrainResult

Log = Callable[[str], None]
DATASET_FILE = "dataset.jsonl"  # the rows of `dataset=`, in the run directory


def build_config(
    config: Any = None,
    *,
    reward_funcs: Any = None,
    reward_weights: list[float] | None = None,
    dataset: str | Path | None = None,
    log: Log = print,
    **sections: Mapping[str, Any],
) -> Config:
    """The checked `Config` of `config` (module docstring) with `sections` merged on top,
    `reward_funcs` (and `reward_weights`) as reward.verifier, and `dataset`, a file or hub name,
    as data.path (data.task=dataset)."""
    from rlvr.config import Config, load_config, to_dict

    say: Log = lambda line: log(f"note: {line}")  # noqa: E731
    verifier: Any = None
    if config is None:
        tree: dict[str, Any] = {}
    elif isinstance(config, Config):
        tree, verifier = to_dict(config), config.reward.verifier
    elif isinstance(config, (str, Path)):
        tree = to_dict(load_config(config, note=say))
    elif isinstance(config, Mapping):
        tree = _nested(config, "config")
        verifier = tree.get("reward", {}).get("verifier") if _is_section(tree, "reward") else None
    else:
        raise ConfigError(
            f"config: expected None, a dict, a Config or a YAML path, got {type(config).__name__}"
        )
    for name, values in sections.items():
        if not isinstance(values, Mapping):
            raise ConfigError(
                f"{name}=: expected a dict of that section's keys, got {type(values).__name__}"
            )
        tree = _merge(tree, {name: dict(values)})
        if name == "reward" and "verifier" in values:
            verifier = values["verifier"]
    if reward_funcs is not None:
        verifier = _weighted(reward_funcs, reward_weights)
    elif reward_weights is not None:
        raise ConfigError("reward_weights: needs reward_funcs (one weight per function)")
    if verifier is not None and not isinstance(verifier, str):
        # a function is no YAML value: the tree is checked with a name, the function set after
        tree = _merge(tree, {"reward": {"verifier": "exact_answer"}})
    elif verifier is not None:
        tree = _merge(tree, {"reward": {"verifier": verifier}})
    if dataset is not None:
        tree = _merge(tree, {"data": {"task": "dataset", "path": str(dataset)}})
    cfg = load_config(tree=tree, note=say)
    if verifier is not None and not isinstance(verifier, str):
        cfg.reward.verifier = verifier
    return cfg


def train(
    config: Any = None,
    *,
    reward_funcs: Any = None,
    reward_weights: list[float] | None = None,
    dataset: str | Path | Iterable[Mapping[str, Any]] | None = None,
    output_dir: str | Path | None = None,
    overwrite: bool = False,
    resume: bool = False,
    allow_config_change: bool = False,
    progress: bool = True,
    log: Log = print,
    **sections: Mapping[str, Any],
) -> TrainResult:
    """Train as `rlvr train` does and return the `TrainResult` (run directory, summary, every
    step's metrics). `output_dir` defaults to runs/train-YYYYmmdd-HHMMSS; an earlier run there
    is an error unless `overwrite`, and `resume=True` continues it (the same config, the same
    rows). `progress=False` draws no progress bar (transformers' neither); `log` gets the
    eval lines, notes and warnings. The rest: the module docstring."""
    from rlvr.config import config_warnings
    from rlvr.runs.run import TrainingInterrupted
    from rlvr.runs.run_dir import check_run_dir
    from rlvr.training.grpo import GRPOTrainer

    if resume:
        if not output_dir:
            raise UserError("resume=True: name the run directory: output_dir=...")
        run_dir = Path(output_dir)
    else:
        run_dir = check_run_dir(output_dir, overwrite)
    rows = None if dataset is None or isinstance(dataset, (str, Path)) else dataset
    written = _write_rows(rows, run_dir / DATASET_FILE, resume) if rows is not None else None
    try:
        cfg = build_config(
            config,
            reward_funcs=reward_funcs,
            reward_weights=reward_weights,
            dataset=written or dataset,  # type: ignore[arg-type]
            log=log,
            **sections,
        )
        for line in config_warnings(cfg):
            log(f"warning: {line}")
        trainer = GRPOTrainer(
            cfg,
            run_dir,
            progress=progress,
            log=log,
            resume=resume,
            overwrite=overwrite,
            allow_config_change=allow_config_change,
        )
    except BaseException:
        if written is not None and not resume:  # a failed start leaves nothing behind
            _remove_rows(written)
        raise
    try:
        return trainer.train()
    except TrainingInterrupted as e:
        hint = f"`rlvr.train(..., output_dir={str(e.run_dir)!r}, resume=True)`"
        raise TrainingInterrupted(e.signum, e.step, e.run_dir, hint=hint) from None


def evaluate(
    config: Any = None,
    *,
    model: str | Path | None = None,
    reward_funcs: Any = None,
    reward_weights: list[float] | None = None,
    dataset: str | Path | Iterable[Mapping[str, Any]] | None = None,
    progress: bool = False,
    log: Log = print,
    **sections: Mapping[str, Any],
) -> dict[str, float]:
    """The held-out evaluation `rlvr train` runs before its first step, of `model` (a model
    directory, a run directory: its final/, a hub id; default: the config's
    model.name_or_path): {"accuracy": ..., "pass1_t1": ..., ...}, as `rlvr eval --config`
    reports it. The held-out problems, verifier and decoding are the config's (`eval.*`)."""
    from rlvr.evaluation.evaluate import evaluate_config
    from rlvr.runs.run import transformers_progress

    with tempfile.TemporaryDirectory(prefix="rlvr-eval-") as tmp:
        if dataset is not None and not isinstance(dataset, (str, Path)):
            dataset = _write_rows(dataset, Path(tmp) / DATASET_FILE, False)
        cfg = build_config(
            config,
            reward_funcs=reward_funcs,
            reward_weights=reward_weights,
            dataset=dataset,
            log=log,
            **sections,
        )
        if model is not None:
            path = Path(model)
            final = path / "final"
            chosen = final if not (path / "config.json").is_file() and final.is_dir() else path
            cfg.model.name_or_path = str(chosen) if path.exists() else str(model)
        with transformers_progress(progress):
            return evaluate_config(cfg, log=log)


def _weighted(funcs: Any, weights: list[float] | None) -> Any:
    """reward_funcs (and reward_weights) as reward.verifier: a list of (function, weight)
    pairs when weighted; a single function or spec as it is."""
    if weights is None:
        return funcs
    listed = list(funcs) if isinstance(funcs, (list, tuple)) else [funcs]
    if len(weights) != len(listed):
        raise ConfigError(
            f"reward_weights: {len(weights)} weights for {len(listed)} reward functions; "
            "expected one per function"
        )
    return [(fn, float(w)) for fn, w in zip(listed, weights)]


def _write_rows(rows: Iterable[Mapping[str, Any]], path: Path, resume: bool) -> str:
    """`rows` as JSONL at `path` (its directory created); a resumed run's file must hold the
    same rows. The path, absolute."""
    lines = []
    for i, row in enumerate(rows, start=1):
        if not isinstance(row, Mapping):
            raise DataError(f"dataset row {i}: expected a dict, got {type(row).__name__}")
        try:
            lines.append(json.dumps(dict(row), ensure_ascii=False, allow_nan=False))
        except (TypeError, ValueError) as e:
            raise DataError(f"dataset row {i}: not JSON-serialisable ({e})") from None
    if not lines:
        raise DataError("dataset: no rows")
    text = "".join(line + "\n" for line in lines)
    if resume and path.is_file() and path.read_text(encoding="utf-8") != text:
        raise UserError(f"resume=True: dataset differs from the run's {path}; pass the same rows")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return str(path.resolve())


def _remove_rows(path: str) -> None:
    file = Path(path)
    file.unlink(missing_ok=True)
    try:
        file.parent.rmdir()  # only when the rows were all it held
    except OSError:
        pass


def _is_section(tree: Mapping[str, Any], name: str) -> bool:
    return isinstance(tree.get(name), Mapping)


def _nested(config: Mapping[str, Any], label: str) -> dict[str, Any]:
    """Sections from a mapping whose keys may be dotted ('rollout.group_size': 4)."""
    tree: dict[str, Any] = {}
    for key, value in config.items():
        if not isinstance(key, str):
            raise ConfigError(f"{label}: keys must be strings, got {key!r}")
        if "." in key:
            section, _, leaf = key.partition(".")
            tree = _merge(tree, {section: {leaf: value}})
        else:
            tree = _merge(tree, {key: dict(value) if isinstance(value, Mapping) else value})
    return tree


def _merge(tree: dict[str, Any], more: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(tree)
    for key, value in more.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out
