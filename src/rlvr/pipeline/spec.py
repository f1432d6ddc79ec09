"""Pipeline files: a list of stages whose outputs (models, datasets) feed later stages by name.

    name: r1                      # optional, shown in the table
    models:                       # named starting models (model: X below is short for base: X)
      base: embedded
    task: {task: addition}        # the verifiable task, as `rlvr train`'s data section; it is
                                  # every stage's task and the held-out set of the stage table
    reward: {verifier: exact_answer}
    eval: {size: 200, t1_samples: 4}   # the table's evaluation (EvalConfig keys)
    defaults:                     # per stage kind: overrides applied to every stage of that kind
      grpo: {training.steps: 30}
    stages:
      - name: cold_start
        kind: sft                 # sft | grpo | sample (alias rejection_sample) | filter | eval
        model: base               # a name in models, an earlier stage, or a model directory
        data: rs                  # an earlier sample/filter stage (its kept.jsonl; rs.curriculum
                                  # for the pass-rate band) or a file path
        config: {...}             # nested or dotted keys of that kind's config schema

Decisions:
- Stage names are identifiers, unique, and not names in `models`; a reference to a later stage
  or an unknown name is an error before anything runs.
- `model:` defaults to `base`; for `filter` and `eval` it is not used.
- A model-producing stage (sft, grpo) is evaluated on the pipeline's held-out set right after it
  finishes; its row goes into the stage table. Stage configs default to no evaluation of their
  own (the table replaces it) unless the stage's config turns it on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.config import read_yaml
from rlvr.errors import ConfigError

KINDS = ("sft", "grpo", "sample", "rejection_sample", "filter", "eval")
MODEL_KINDS = ("sft", "grpo")
DATA_KINDS = ("sample", "rejection_sample", "filter")
RECIPES_DIR = Path(__file__).resolve().parent / "recipes"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")  # used with fullmatch
TOP_KEYS = ("name", "models", "model", "task", "reward", "eval", "defaults", "stages")
STAGE_KEYS = ("name", "kind", "model", "data", "config")


@dataclass
class StageSpec:
    name: str
    kind: str
    model: str | None = None
    data: str | None = None
    config: dict = field(default_factory=dict)

    @property
    def produces_model(self) -> bool:
        return self.kind in MODEL_KINDS

    @property
    def produces_data(self) -> bool:
        return self.kind in DATA_KINDS


@dataclass
class PipelineSpec:
    name: str
    source: str
    models: dict[str, str]
    task: dict
    reward: dict
    eval: dict
    defaults: dict[str, dict]
    stages: list[StageSpec]


def recipe_names() -> list[str]:
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def resolve_pipeline_file(name_or_path: str) -> Path:
    """A pipeline YAML path, or the name of a built-in recipe (r1, r1_zero, distill)."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    recipe = RECIPES_DIR / f"{name_or_path}.yaml"
    if recipe.is_file() and "/" not in name_or_path:
        return recipe
    raise ConfigError(
        f"pipeline {name_or_path}: no such file and not a built-in recipe "
        f"(recipes: {', '.join(recipe_names())})"
    )


def load_pipeline(path: Path, model_overrides: dict[str, str] | None = None) -> PipelineSpec:
    tree = read_yaml(path, f"pipeline {path}")
    return parse_pipeline(tree, str(path), model_overrides)


def _repr(value: Any) -> str:
    """repr() for messages; an int over Python's digit limit (anywhere inside) has none."""
    try:
        return repr(value)
    except ValueError:
        return f"a {type(value).__name__} holding an integer too long to print"


def _show(text: str) -> str:
    """A name for a one-line message: as is when printable, else its repr."""
    return text if text.isprintable() else repr(text)


def _name(value: Any, where: str) -> str:
    """str(value) for a model name or path; an int over Python's digit limit is an error."""
    try:
        return str(value)
    except ValueError:
        raise ConfigError(f"{where}: expected a name or path, got an integer too long") from None


def _mapping(value: Any, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping, got {_repr(value)}")
    return value


def parse_pipeline(
    tree: Any, source: str, model_overrides: dict[str, str] | None = None
) -> PipelineSpec:
    where = f"pipeline {source}"
    tree = _mapping(tree, where)
    for key in tree:
        if key not in TOP_KEYS:
            raise ConfigError(
                f"{where}: unknown key {_repr(key)}; expected one of {', '.join(TOP_KEYS)}"
            )
    models = {
        _name(k, f"{where}: models"): _name(v, f"{where}: models")
        for k, v in _mapping(tree.get("models"), f"{where}: models").items()
    }
    if "model" in tree:
        models["base"] = _name(tree["model"], f"{where}: model")
    models.setdefault("base", "embedded")
    for model, value in (model_overrides or {}).items():
        if model not in models:
            raise ConfigError(
                f"{where}: --{_show(model)} given, but the pipeline names no model "
                f"{model!r} (models: {', '.join(map(_show, models))})"
            )
        models[model] = value
    defaults = _mapping(tree.get("defaults"), f"{where}: defaults")
    for kind, value in defaults.items():
        if kind not in KINDS:
            shown = _show(kind) if isinstance(kind, str) else _repr(kind)
            raise ConfigError(f"{where}: defaults.{shown}: not a stage kind ({', '.join(KINDS)})")
        _mapping(value, f"{where}: defaults.{kind}")
    raw_stages = tree.get("stages")
    if not isinstance(raw_stages, list) or not raw_stages:
        raise ConfigError(f"{where}: stages: expected a non-empty list of stages")
    stages: list[StageSpec] = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_stages, start=1):
        at = f"{where}: stage {i}"
        raw = _mapping(raw, at)
        for key in raw:
            if key not in STAGE_KEYS:
                raise ConfigError(
                    f"{at}: unknown key {_repr(key)}; expected {', '.join(STAGE_KEYS)}"
                )
        name = raw.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ConfigError(f"{at}: name: expected an identifier, got {_repr(name)}")
        at = f"{where}: stage '{name}'"
        if name in seen or name in models:
            raise ConfigError(f"{at}: name already used by a stage or a model")
        kind = raw.get("kind")
        if kind not in KINDS:
            raise ConfigError(f"{at}: kind: expected one of {', '.join(KINDS)}, got {_repr(kind)}")
        stage = StageSpec(
            name=name,
            kind="sample" if kind == "rejection_sample" else kind,
            model=_ref(raw.get("model"), f"{at}: model"),
            data=_ref(raw.get("data"), f"{at}: data"),
            config=_mapping(raw.get("config"), f"{at}: config"),
        )
        _check_refs(stage, stages, models, at)
        stages.append(stage)
        seen.add(name)
    return PipelineSpec(
        name=_name(tree.get("name") or Path(source).stem, f"{where}: name"),
        source=source,
        models=models,
        task=_mapping(tree.get("task"), f"{where}: task"),
        reward=_mapping(tree.get("reward"), f"{where}: reward"),
        eval=_mapping(tree.get("eval"), f"{where}: eval"),
        defaults=defaults,
        stages=stages,
    )


def _ref(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: expected a stage name, model name or path, got {_repr(value)}")
    return value


def _check_refs(stage: StageSpec, earlier: list[StageSpec], models: dict, at: str) -> None:
    by_name = {s.name: s for s in earlier}
    if stage.model is not None:
        if stage.kind in ("filter", "eval"):
            raise ConfigError(f"{at}: model: a {stage.kind} stage takes no model")
        target = by_name.get(stage.model)
        if target is not None and not target.produces_model:
            raise ConfigError(f"{at}: model: stage '{stage.model}' produces data, not a model")
        if target is None and stage.model not in models and not _looks_like_path(stage.model):
            raise ConfigError(
                f"{at}: model: {stage.model!r} is not a model name "
                f"({', '.join(map(_show, models))}), an "
                "earlier stage, or a path"
            )
    if stage.data is not None:
        head, _, part = stage.data.partition(".")
        target = by_name.get(head)
        if target is not None:
            if not target.produces_data:
                raise ConfigError(f"{at}: data: stage '{head}' produces a model, not data")
            if part and part not in ("kept", "curriculum", "samples"):
                raise ConfigError(
                    f"{at}: data: {stage.data!r}: expected {head}, {head}.kept, "
                    f"{head}.curriculum or {head}.samples"
                )
        elif not _looks_like_path(stage.data):
            raise ConfigError(
                f"{at}: data: {stage.data!r} is not an earlier sample/filter stage or a file path"
            )
        if stage.kind == "eval":
            raise ConfigError(f"{at}: data: an eval stage uses the pipeline's task")
    elif stage.kind == "filter":
        raise ConfigError(f"{at}: data: a filter stage needs data: <sample stage>")


def _looks_like_path(text: str) -> bool:
    return "/" in text or text.startswith((".", "~")) or Path(text).suffix != ""
