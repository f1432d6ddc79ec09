"""Build the prompt source named by the data config."""

from __future__ import annotations

from typing import Any

from rlvr.config import DataConfig


def build_task(cfg: DataConfig) -> Any:
    """A task with `sample_train(rng) -> sample` and `heldout(n) -> list[sample]`.

    A sample is a dict with at least "prompt" and the fields its verifier reads ("answer").
    """
    if cfg.task == "addition":
        from rlvr.data.tasks.addition import AdditionTask

        return AdditionTask(digits=cfg.digits, seed=cfg.seed)
    if cfg.task == "dataset":
        from rlvr.data.datasets import FieldMap, load_prompt_dataset

        fields = FieldMap(
            prompt=cfg.prompt_field,
            answer=cfg.answer_field,
            tests=cfg.tests_field,
            system=cfg.system_field,
            source=cfg.source_field,
        )
        return load_prompt_dataset(
            cfg.path,
            eval_path=cfg.eval_path,
            eval_fraction=cfg.eval_fraction,
            fields=fields,
            seed=cfg.seed,
        )
    raise ValueError(f"unknown task {cfg.task!r}")  # config validation makes this unreachable
