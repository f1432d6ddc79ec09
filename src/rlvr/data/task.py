"""The contract of a task: where a run's prompts come from.

Every task (the generators in rlvr.data.tasks, a dataset, HumanEval, reasoning-gym, and the
template and few-shot wrappers around any of them) has

    sample = task.sample_train(rng)      # one training sample: a dict with at least "prompt"
    samples = task.heldout(n)            # the held-out samples evaluation scores

and may have the parts of a curriculum, which the RL loop calls through `TaskHooks`:

    task.on_step(step, total_steps)      # before a step draws its prompts (0-based step)
    task.observe(samples, rewards)       # after each round is scored
    task.metrics() -> {name: value}      # logged with the step (e.g. the curriculum's level)
    task.state_dict() / load_state_dict  # saved in checkpoints and restored on resume

A dataset also holds its held-out rows as `task.eval`, and a task that can write a correct
completion has `demonstration(sample) -> str` (SFT, few-shot examples); see docs/tasks.md.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


class Task(Protocol):
    def sample_train(self, rng: random.Random) -> dict[str, Any]: ...

    def heldout(self, n: int) -> list[dict[str, Any]]: ...


def _nothing(*_args: Any) -> None:
    return None


def _no_metrics() -> dict[str, float]:
    return {}


@dataclass(frozen=True)
class TaskHooks:
    """A task's optional curriculum parts, each a no-op where the task has none: the one place
    that asks a task what it has, so the loop calls them unconditionally."""

    on_step: Callable[[int, int], None]
    observe: Callable[[Sequence[Mapping[str, Any]], Sequence[float]], None]
    metrics: Callable[[], dict[str, float]]
    state_dict: Callable[[], dict[str, Any]] | None  # None: nothing to checkpoint
    load_state_dict: Callable[[dict[str, Any]], None]

    @classmethod
    def of(cls, task: Task) -> TaskHooks:
        return cls(
            on_step=getattr(task, "on_step", _nothing),
            observe=getattr(task, "observe", _nothing),
            metrics=getattr(task, "metrics", _no_metrics),
            state_dict=getattr(task, "state_dict", None),
            load_state_dict=getattr(task, "load_state_dict", _nothing),
        )
