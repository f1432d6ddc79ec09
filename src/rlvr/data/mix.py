"""Prompts no rule can check, mixed into a task's training prompts: DeepSeek-R1's last RL stage.

DeepSeek-R1 (Guo et al. 2025, §2.3.4) trains its last RL stage on reasoning prompts scored by
rules and on general prompts scored by a reward model. `data.mix_path` names a prompt dataset
(any format `data.path` reads, the same `data.prompt_field` and `data.system_field`, no answer
column needed) and `data.mix_fraction` the share of training draws taken from it; its rows
carry `reward_route: "mix"`, by which the scorer hands them to `reward.mix_verifier` (a
learned reward `rm:PATH`, an LLM judge, any verifier spec) instead of `reward.verifier`
(rlvr.rewards.scoring.Scorer's `routes`). Held-out evaluation stays on the task's own held-out
prompts, whose accuracy a rule measures.
"""

from __future__ import annotations

from typing import Any

from rlvr.errors import DataError

MIX_ROUTE = "mix"  # the reward_route of a mixed-in row


class MixedTask:
    """`task`'s prompts, and with probability `fraction` per draw one of `rows` instead."""

    def __init__(self, task: Any, rows: list[dict], fraction: float, origin: str) -> None:
        if not rows:
            raise DataError(f"{origin}: no rows (expected at least one prompt)")
        if not 0.0 < fraction <= 1.0:
            raise DataError(f"data.mix_fraction: must be in (0, 1], got {fraction}")
        self.task, self.rows, self.fraction = task, rows, fraction

    def sample_train(self, rng: Any) -> dict:
        """One draw of the run's prompt RNG decides the source, a second picks the mixed row
        (the task's own draw otherwise): a function of the RNG, so resumes repeat it."""
        if rng.random() < self.fraction:
            return {**self.rows[rng.randrange(len(self.rows))], "reward_route": MIX_ROUTE}
        return self.task.sample_train(rng)

    def heldout(self, n: int) -> list[dict]:
        return self.task.heldout(n)

    def observe(self, samples: list[dict], rewards: list[float]) -> None:
        """A curriculum sees its own prompts only (a reward model's score is no accuracy)."""
        own = getattr(self.task, "observe", None)
        if own is None:
            return
        keep = [i for i, s in enumerate(samples) if s.get("reward_route") != MIX_ROUTE]
        own([samples[i] for i in keep], [rewards[i] for i in keep])

    def __getattr__(self, name: str) -> Any:
        # on_step, metrics, state_dict, eval, demonstration ... are the task's (a method it
        # lacks stays missing: the trainer asks with hasattr)
        return getattr(self.task, name)

    def __len__(self) -> int:
        return len(self.task)


def load_mix(cfg: Any, task: Any) -> Any:
    """`task` with data.mix_path's prompts mixed in (DataConfig `cfg`), or `task` itself."""
    if not cfg.mix_path:
        return task
    from rlvr.data.datasets import FieldMap, load_prompt_dataset

    fields = FieldMap(prompt=cfg.prompt_field, system=cfg.system_field)
    prompts = load_prompt_dataset(cfg.mix_path, eval_fraction=0.0, fields=fields, seed=cfg.seed)
    return MixedTask(task, prompts.train, cfg.mix_fraction, cfg.mix_path)
