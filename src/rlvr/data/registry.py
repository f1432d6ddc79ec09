"""Build the prompt source named by the data config."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlvr.config import DataConfig
from rlvr.errors import ConfigError
from rlvr.rewards.compose import verifier_needs


def build_task(
    cfg: DataConfig,
    verifier: Any = None,
    rows: tuple[list[dict], list[dict]] | None = None,
    origin: str = "the environment",
) -> Any:
    """The task of `cfg`, its prompts rewritten by `data.prompt_template` when one is set and
    preceded by `data.fewshot` solved training problems when that is > 0, and
    `data.mix_path`'s prompts mixed in at `data.mix_fraction` (rlvr.data.mix). With the run's
    `verifier`, a dataset's rows are checked for what it needs before anything else runs
    (`verifier_needs`: the reference answer of math, a TRL function's named columns).
    `data.task=environment` needs `rows`, (training rows, held-out rows; none: a split of
    the training rows by data.eval_fraction) that come from `origin`
    (rlvr.runs.task.build_run_task gives them)."""
    needs = verifier_needs(verifier) if verifier is not None else {}
    if cfg.task == "environment":
        if rows is None:
            raise ConfigError("data.task: 'environment' needs a run with environment.name set")
        from rlvr.data.datasets import FieldMap, rows_dataset

        task: Any = rows_dataset(
            rows[0],
            rows[1] or None,
            name=origin.rpartition(":")[2] or "environment",
            origin=origin,
            eval_fraction=cfg.eval_fraction,
            fields=FieldMap(prompt=cfg.prompt_field, answer=cfg.answer_field),
            seed=cfg.seed,
            needs=needs,
        )
    else:
        task = _build_task(cfg, needs)
    if cfg.prompt_template:
        from rlvr.data.template import TemplatedTask

        task = TemplatedTask(task, cfg.prompt_template)
    if cfg.fewshot:
        from rlvr.data.fewshot import FewShotTask

        task = FewShotTask(task, cfg.fewshot, seed=cfg.seed)
    if cfg.mix_path:  # outermost: the mixed prompts take no template and no solved examples
        from rlvr.data.mix import load_mix

        task = load_mix(cfg, task)
    return task


def heldout_size(task: Any, n: int) -> int:
    """`n` held-out problems, capped at what `task` holds out: a dataset holds out a fixed set
    (`task.eval`), a generator makes as many as asked."""
    return min(n, len(task.eval)) if hasattr(task, "eval") else n


def _build_task(cfg: DataConfig, needs: Mapping[str, str]) -> Any:
    """A task with `sample_train(rng) -> sample` and `heldout(n) -> list[sample]`.

    A sample is a dict with at least "prompt" and the fields its verifier reads ("answer").
    A task may also have `on_step(step, total_steps)` (called before a step draws prompts),
    `observe(samples, rewards)` (after scoring) and `demonstration(sample) -> str` (a correct
    completion, for SFT); see docs/tasks.md.
    """
    if cfg.task == "addition":
        from rlvr.data.tasks.addition import AdditionTask

        return AdditionTask(digits=cfg.digits, seed=cfg.seed)
    cfg.validate()
    if cfg.task == "arithmetic":
        from rlvr.data.tasks.arithmetic import ArithmeticTask

        return ArithmeticTask(
            level=cfg.level,
            max_level=cfg.max_level,
            difficulty=cfg.difficulty,
            promote_at=cfg.promote_at,
            promote_window=cfg.promote_window,
            seed=cfg.seed,
        )
    if cfg.task == "multiplication":
        from rlvr.data.tasks.multiplication import MultiplicationTask

        # 3 x 2 digits, what embedded-tools was pretrained on; data.digits is addition's key
        return MultiplicationTask(seed=cfg.seed)
    if cfg.task == "countdown":
        from rlvr.data.tasks.countdown import CountdownTask

        return CountdownTask(
            min_numbers=cfg.countdown_min_numbers,
            max_numbers=cfg.countdown_max_numbers,
            max_value=cfg.countdown_max_value,
            max_target=cfg.countdown_max_target,
            seed=cfg.seed,
        )
    if cfg.task == "gym":
        from rlvr.data.tasks.gym import GymTask, parse_gym_config

        return GymTask(
            cfg.gym_name,  # type: ignore[arg-type]  # validate() requires it
            parse_gym_config(cfg.gym_config),
            size=cfg.gym_size,
            seed=cfg.seed,
        )
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
            cfg.path,  # type: ignore[arg-type]  # validate() requires it
            eval_path=cfg.eval_path,
            eval_fraction=cfg.eval_fraction,
            fields=fields,
            seed=cfg.seed,
            needs=needs,
        )
    raise ValueError(f"unknown task {cfg.task!r}")  # config validation makes this unreachable
