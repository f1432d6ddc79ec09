"""What each stage kind runs. Every kind writes into its own stage directory.

- grpo    `rlvr train` (GRPOTrainer); output: final/
- sft     `rlvr sft` (run_sft); output: final/
- sample  `rlvr sample` (run_sample): samples.jsonl, kept.jsonl (rejection-sampled SFT data),
          pass_rates.jsonl, curriculum.jsonl (prompts in the pass-rate band)
- filter  re-filter an earlier sample stage's samples.jsonl with other options (no model):
          kept.jsonl, pass_rates.jsonl, curriculum.jsonl, summary.json
- eval    evaluate models (default: every model so far) with its own settings: eval.json
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from rlvr.config import DataConfig, EvalConfig, RewardConfig, option

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

Log = Callable[[str], None]


def run_grpo(cfg: Any, run_dir: Path, log: Log, progress: bool, resume: bool) -> dict:
    from rlvr.config import config_warnings
    from rlvr.training.grpo import GRPOTrainer

    for line in config_warnings(cfg):  # as `rlvr train` says them
        log(f"warning: {line}")
    summary = GRPOTrainer(cfg, run_dir, progress=progress, log=log, resume=resume).train().summary
    return {k: summary[k] for k in ("steps", "wall_seconds") if k in summary}


def run_sft_stage(cfg: Any, run_dir: Path, log: Log, progress: bool, resume: bool) -> dict:
    from rlvr.sft.trainer import run_sft

    summary = run_sft(cfg, run_dir, log=log, progress=progress, resume=resume)
    return {k: v for k, v in summary.items() if not isinstance(v, dict)}


def run_sample_stage(cfg: Any, run_dir: Path, log: Log, progress: bool) -> dict:
    from rlvr.sample.job import run_sample

    summary = run_sample(cfg, run_dir, log=log, progress=progress)
    return {k: v for k, v in summary.items() if not isinstance(v, (dict, list))}


# --- filter ----------------------------------------------------------------------------------


def filter_schema() -> type[DataclassInstance]:
    """The config of a filter stage: the `filter` section of `rlvr sample`, on its own."""
    import dataclasses

    from rlvr.sample.job import FilterSection

    schema = dataclasses.make_dataclass(
        "FilterConfig",
        [("filter", FilterSection, field(default_factory=FilterSection))],
        namespace={"validate": lambda self: self.filter.check("filter.")},
    )
    return cast("type[DataclassInstance]", schema)  # make_dataclass is typed as giving a type


def run_filter(cfg: Any, samples_path: Path, out_dir: Path, log: Log) -> dict:
    from rlvr.data.datasets import load_rows
    from rlvr.sample.job import write_filtered

    rows = load_rows(str(samples_path))
    summary = write_filtered(rows, cfg.filter, out_dir)
    log(
        f"filter: {summary.get('kept', 0)} of {len(rows)} completions kept, "
        f"{summary.get('band_kept', 0)} prompts in the pass-rate band"
    )
    return {k: v for k, v in summary.items() if not isinstance(v, (dict, list))}


# --- eval ------------------------------------------------------------------------------------


@dataclass
class EvalStageConfig:
    models: list[str] = option(
        [], "models to evaluate (default: the starting models and every stage)"
    )
    data: DataConfig = field(default_factory=DataConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)


def run_eval_stage(
    cfg: EvalStageConfig, paths: list[str], names: list[str], out_dir: Path, log: Log
) -> dict:
    from rlvr.config import ModelConfig
    from rlvr.data.registry import build_task, heldout_size
    from rlvr.evaluation.evaluate import evaluate_model
    from rlvr.rewards.compose import build_verifier

    task = build_task(cfg.data)
    samples = task.heldout(heldout_size(task, cfg.eval.size))
    verifier = build_verifier(cfg.reward.verifier)
    results = {}
    for name, path in zip(names, paths):
        results[name] = evaluate_model(
            ModelConfig(name_or_path=path),
            samples,
            verifier,
            max_new_tokens=cfg.eval.max_new_tokens or 64,
            t1_samples=cfg.eval.t1_samples,
            seed=12345,
            k=cfg.eval.k,
            budgets=tuple(cfg.eval.budgets),
        )
        log(f"eval {name}: accuracy {results[name]['accuracy']:.3f} (n={results[name]['n']})")
    (out_dir / "eval.json").write_text(json.dumps(results, indent=2) + "\n")
    return {"models": len(results)}
