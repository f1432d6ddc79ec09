"""Run a pipeline: stages in order, each in RUN_DIR/stages/NAME, resumable at stage granularity.

RUN_DIR/
  pipeline.yaml              the pipeline as given (the resolved model names included)
  stages/NAME/               each stage's own run directory (as `rlvr train|sft|sample` write it)
  stages/NAME/stage.json     written when the stage has finished: fingerprint, outputs, seconds,
                             held-out metrics of the model it produced
  models_eval.json           held-out metrics of the named starting models
  stages.md, pipeline.json   the stage table: held-out accuracy after every stage

Resuming (running the same pipeline into the same RUN_DIR again):
- A stage whose stage.json exists with the same fingerprint is not run again. The fingerprint
  hashes the stage's resolved config and the fingerprints of the stages it reads from, so
  editing a stage (or anything upstream of it) reruns it and everything that depends on it.
- A stage that started but did not finish resumes from its last checkpoint
  (checkpoints/step-N, written every `checkpoint.every` steps; the recipes set it) when its
  config is unchanged; otherwise, or without a checkpoint, it starts again from scratch.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from rlvr.config import Config, DataConfig, EvalConfig, ModelConfig, RewardConfig, load_config
from rlvr.config import to_dict as config_to_dict
from rlvr.errors import ConfigError
from rlvr.pipeline.spec import PipelineSpec, StageSpec

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

STAGE_FILE = "stage.json"
START_FILE = "stage.start.json"
# The stage table's columns: (metric key, header, format).
TABLE_COLUMNS = (
    ("accuracy", "accuracy", "{:.3f}"),
    ("pass1_t1", "pass@1 T=1", "{:.3f}"),
    ("reasoning_fraction", "reasoning", "{:.3f}"),
    ("mean_length", "length", "{:.1f}"),
)

# Defaults of every stage of a kind, before the pipeline's `defaults` and the stage's `config`:
# the stage table evaluates every model, so stages skip their own evaluation, and RL/SFT
# stages checkpoint so that an interrupted stage resumes.
KIND_DEFAULTS: dict[str, dict[str, Any]] = {
    "grpo": {
        "eval.before": False,
        "eval.after": False,
        "eval.every": 0,
        "checkpoint.every": 10,
        "checkpoint.keep_last": 1,
    },
    "sft": {
        "eval.before": False,
        "eval.after": False,
        "eval.every": 0,
        "checkpoint.every": 20,
        "checkpoint.keep_last": 1,
    },
    "sample": {},
    "filter": {},
    "eval": {},
}


# --- config trees ---------------------------------------------------------------------------


def _set(tree: dict, dotted: str, value: Any) -> None:
    node = tree
    parts = dotted.split(".")
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"'{dotted}': '{part}' is not a section")
        node = child
    node[parts[-1]] = value


def merge(tree: dict, overrides: dict, prefix: str = "") -> None:
    """Apply nested and/or dotted `overrides` onto `tree` in place."""
    for key, value in overrides.items():
        full = f"{prefix}{key}"
        if isinstance(value, dict):
            merge(tree, value, full + ".")
        else:
            _set(tree, full, value)


def _schema(kind: str) -> tuple[type[DataclassInstance], str | None]:
    """(config schema, name of its task section) of a stage kind."""
    if kind == "grpo":
        return Config, "data"
    if kind == "sft":
        from rlvr.sft.trainer import SFTConfig

        return SFTConfig, "task"
    if kind == "sample":
        from rlvr.sample.job import SampleConfig

        return SampleConfig, "data"
    if kind == "filter":
        from rlvr.pipeline.stages import filter_schema

        return filter_schema(), None
    from rlvr.pipeline.stages import EvalStageConfig

    return EvalStageConfig, "data"


class Pipeline:
    def __init__(
        self,
        spec: PipelineSpec,
        run_dir: Path,
        *,
        log: Callable[[str], None] = print,
        progress: bool = True,
    ) -> None:
        self.spec = spec
        self.run_dir = Path(run_dir)
        self.log = log
        self.progress = progress
        self.eval_cfg = self._table_eval_config()
        self.fingerprints: dict[str, str] = {}
        self.records: dict[str, dict] = {}
        self.configs = {s.name: self.stage_config(s) for s in spec.stages}  # all checked up front

    # -- resolving references ----------------------------------------------------------------

    def stage_dir(self, name: str) -> Path:
        return self.run_dir / "stages" / name

    def _stage(self, name: str) -> StageSpec | None:
        return next((s for s in self.spec.stages if s.name == name), None)

    def model_path(self, ref: str | None) -> str:
        ref = ref or "base"
        if self._stage(ref) is not None:
            return str(self.stage_dir(ref) / "final")
        if ref in self.spec.models:
            return self.spec.models[ref]
        return ref

    def data_path(self, ref: str) -> str:
        head, _, part = ref.partition(".")
        if self._stage(head) is not None:
            return str(self.stage_dir(head) / f"{part or 'kept'}.jsonl")
        return ref

    def _upstream(self, stage: StageSpec) -> list[str]:
        names = []
        for ref in (stage.model, stage.data and stage.data.partition(".")[0]):
            if ref and self._stage(ref) is not None:
                names.append(ref)
        return names

    def stage_config(self, stage: StageSpec) -> Any:
        schema, task_section = _schema(stage.kind)
        tree: dict = {}
        if task_section:
            tree[task_section] = dict(self.spec.task)
        if "reward" in {f for f in schema.__dataclass_fields__}:
            tree["reward"] = dict(self.spec.reward)
        try:
            merge(tree, KIND_DEFAULTS[stage.kind])
            merge(tree, self.spec.defaults.get(stage.kind, {}))
            merge(tree, stage.config)
            if stage.kind not in ("filter", "eval"):
                _set(tree, "model.name_or_path", self.model_path(stage.model))
            if stage.data is not None and stage.kind != "filter":
                path = self.data_path(stage.data)
                if stage.kind in ("grpo", "sample"):
                    _set(tree, "data.task", "dataset")
                _set(tree, "data.path", path)
            return load_config(None, None, schema=schema, tree=tree)
        except ConfigError as e:
            raise ConfigError(f"pipeline {self.spec.source}: stage '{stage.name}': {e}") from None

    def _table_eval_config(self) -> EvalConfig:
        tree = {"eval": {"size": 200, "t1_samples": 4, "k": 0, **self.spec.eval}}
        try:
            return load_config(None, None, schema=_EvalOnly, tree=tree).eval
        except ConfigError as e:
            raise ConfigError(f"pipeline {self.spec.source}: {e}") from None

    def fingerprint(self, stage: StageSpec) -> str:
        payload = {
            "kind": stage.kind,
            "config": config_to_dict(self.configs[stage.name]),
            "upstream": [self.fingerprints[n] for n in self._upstream(stage)],
            "table_eval": config_to_dict(self.eval_cfg),
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]

    # -- running -------------------------------------------------------------------------------

    def run(self) -> dict:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "pipeline.yaml").write_text(
            yaml.safe_dump(self._as_tree(), sort_keys=False)
        )
        start = time.perf_counter()
        rows = self._named_model_rows()
        for stage in self.spec.stages:
            record = self._run_stage(stage)
            self.records[stage.name] = record
            if "eval" in record:
                rows.append(self._row(stage.name, stage.kind, record["model"], record))
        result = {
            "pipeline": self.spec.name,
            "rows": rows,
            "stages": self.records,
            "wall_seconds": time.perf_counter() - start,
        }
        table = format_table(rows)
        _write_atomic(self.run_dir / "stages.md", table + "\n")
        _write_atomic(self.run_dir / "pipeline.json", json.dumps(result, indent=2) + "\n")
        return result

    def _run_stage(self, stage: StageSpec) -> dict:
        fp = self.fingerprint(stage)
        self.fingerprints[stage.name] = fp
        sdir = self.stage_dir(stage.name)
        done = _read_json(sdir / STAGE_FILE)
        if done is not None and done.get("fingerprint") == fp:
            self.log(f"stage {stage.name} ({stage.kind}): done already, skipped")
            return done
        started = _read_json(sdir / START_FILE)
        resume = False
        if sdir.exists():
            from rlvr.runs.checkpoint import latest_checkpoint

            same = started is not None and started.get("fingerprint") == fp and done is None
            resume = same and stage.kind in MODEL_STAGES and latest_checkpoint(sdir) is not None
            if not resume:
                shutil.rmtree(sdir)
        sdir.mkdir(parents=True, exist_ok=True)
        _write_atomic(sdir / START_FILE, json.dumps({"fingerprint": fp}) + "\n")
        self.log(f"stage {stage.name} ({stage.kind}): {'resuming' if resume else 'running'}")
        t0 = time.perf_counter()
        from rlvr.pipeline import stages as kinds

        cfg = self.configs[stage.name]
        record: dict[str, Any] = {"name": stage.name, "kind": stage.kind, "fingerprint": fp}
        if stage.kind == "grpo":
            record["summary"] = kinds.run_grpo(cfg, sdir, self.log, self.progress, resume)
        elif stage.kind == "sft":
            record["summary"] = kinds.run_sft_stage(cfg, sdir, self.log, self.progress, resume)
        elif stage.kind == "sample":
            record["summary"] = kinds.run_sample_stage(cfg, sdir, self.log, self.progress)
        elif stage.kind == "filter":
            assert stage.data is not None  # parse_pipeline refuses a filter stage without data
            source = self.data_path(stage.data.partition(".")[0] + ".samples")
            record["summary"] = kinds.run_filter(cfg, Path(source), sdir, self.log)
        else:  # eval
            models = cfg.models or self._models_so_far()
            record["summary"] = kinds.run_eval_stage(
                cfg, [self.model_path(m) for m in models], models, sdir, self.log
            )
        record["seconds"] = time.perf_counter() - t0
        if stage.produces_model:
            record["model"] = str(sdir / "final")
            record["eval"] = self.evaluate(record["model"])
            record["eval_seconds"] = time.perf_counter() - t0 - record["seconds"]
            self.log(_eval_line(stage.name, record["eval"]))
        if stage.produces_data:
            record["outputs"] = {
                part: str(sdir / f"{part}.jsonl") for part in ("kept", "curriculum", "samples")
            }
        _write_atomic(sdir / STAGE_FILE, json.dumps(record, indent=2) + "\n")
        return record

    def _models_so_far(self) -> list[str]:
        return [*self.spec.models, *(n for n, r in self.records.items() if "model" in r)]

    # -- the stage table -----------------------------------------------------------------------

    @cached_property
    def heldout(self) -> list[dict]:
        from rlvr.data.registry import build_task, heldout_size

        task_cfg = load_config(None, None, schema=_TaskOnly, tree={"data": self.spec.task}).data
        task = build_task(task_cfg)
        return task.heldout(heldout_size(task, self.eval_cfg.size))

    @cached_property
    def verifier(self) -> Any:
        from rlvr.rewards.compose import build_verifier

        reward = load_config(None, None, schema=_RewardOnly, tree={"reward": self.spec.reward})
        return build_verifier(reward.reward.verifier)

    def evaluate(self, model: str) -> dict[str, float]:
        from rlvr.evaluation.evaluate import evaluate_model

        e = self.eval_cfg
        return evaluate_model(
            ModelConfig(name_or_path=model),
            self.heldout,
            self.verifier,
            max_new_tokens=e.max_new_tokens or 64,
            t1_samples=e.t1_samples,
            seed=12345,
            k=e.k,
            budgets=tuple(e.budgets),
        )

    def _named_model_rows(self) -> list[dict]:
        """Rows of the starting models (cached in models_eval.json by path + eval settings)."""
        cache_path = self.run_dir / "models_eval.json"
        cache = _read_json(cache_path) or {}
        key_eval = json.dumps(config_to_dict(self.eval_cfg), sort_keys=True)
        rows = []
        used = [s.model or "base" for s in self.spec.stages if s.kind not in ("filter", "eval")]
        for name, path in self.spec.models.items():
            if name not in used:
                continue
            key = hashlib.sha256(f"{path}|{key_eval}|{self.spec.task}".encode()).hexdigest()[:16]
            if key not in cache:
                t0 = time.perf_counter()
                cache[key] = {"model": path, "eval": self.evaluate(path)}
                cache[key]["eval_seconds"] = time.perf_counter() - t0
                _write_atomic(cache_path, json.dumps(cache, indent=2) + "\n")
                self.log(_eval_line(name, cache[key]["eval"]))
            rows.append(self._row(name, "model", path, {**cache[key], "seconds": 0.0}))
        return rows

    def _row(self, name: str, kind: str, model: str, record: dict) -> dict:
        return {
            "stage": name,
            "kind": kind,
            "model": model,
            "num_parameters": record["eval"].get("num_parameters"),
            "seconds": record.get("seconds", 0.0),
            **{k: record["eval"].get(k) for k, _, _ in TABLE_COLUMNS},
        }

    def _as_tree(self) -> dict:
        return {
            "name": self.spec.name,
            "models": self.spec.models,
            "task": self.spec.task,
            "reward": self.spec.reward,
            "eval": self.spec.eval,
            "defaults": self.spec.defaults,
            "stages": [
                {
                    k: v
                    for k, v in {
                        "name": s.name,
                        "kind": s.kind,
                        "model": s.model,
                        "data": s.data,
                        "config": s.config,
                    }.items()
                    if v
                }
                for s in self.spec.stages
            ],
        }


MODEL_STAGES = ("grpo", "sft")


# Small schemas to validate one section on its own.


@dataclass
class _EvalOnly:
    eval: EvalConfig = field(default_factory=EvalConfig)


@dataclass
class _TaskOnly:
    data: DataConfig = field(default_factory=DataConfig)


@dataclass
class _RewardOnly:
    reward: RewardConfig = field(default_factory=RewardConfig)


def format_table(rows: list[dict]) -> str:
    """A markdown table: one row per starting model and per model-producing stage."""
    headers = ["stage", "kind", "params", *(h for _, h, _ in TABLE_COLUMNS), "stage s"]
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join(" --- " for _ in headers) + "|",
    ]
    for r in rows:
        params = r.get("num_parameters")
        cells = [r["stage"], r["kind"], _params(params)]
        for key, _, fmt in TABLE_COLUMNS:
            value = r.get(key)
            cells.append("" if value is None else fmt.format(value))
        cells.append(f"{r.get('seconds', 0.0):.0f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _params(n: int | None) -> str:
    if not n:
        return ""
    return f"{n / 1e6:.2f}M" if n >= 1e5 else f"{n / 1e3:.0f}K"


def _eval_line(name: str, e: dict) -> str:
    from rlvr.runs.run import eval_line  # the trainer's line (keys it lacks left out)

    return eval_line(name, e)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
