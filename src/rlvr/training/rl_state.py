"""What an RL checkpoint holds, and how a run continues from it bit for bit.

checkpoints/step-N/ holds the whole-weight model in HF format and trainer_state.pt with: the
exact trained state_dict, the optimizer (gathered unsharded under FSDP) and scheduler states,
every RNG (the prompt draw, the sampler, the mini-batch shuffle, and the global ones), the task's
curriculum state, the metric history (diagnostics look back over it), the evaluation before
training, with one-step off-policy rollouts the next step's batch, already generated, and with a
critic (algorithm.advantage=gae) its weights, optimizer and scheduler states and warm-up count.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlvr.data.task import Task, TaskHooks
from rlvr.observe.events import record_event
from rlvr.runs.checkpoint import (
    incomplete_checkpoints,
    latest_checkpoint,
    load_checkpoint_state,
    restore_rng_state,
    rng_state,
    save_checkpoint,
    truncate_jsonl,
)
from rlvr.runs.policy import Policy
from rlvr.training.critic import AdvantageSource
from rlvr.training.learner import Learner


class RLCheckpoints:
    def __init__(
        self,
        run_dir: Path,
        policy: Policy,
        learner: Learner,
        task: Task,
        python_rngs: dict[str, Any],
        torch_generators: dict[str, Any],
        advantages: AdvantageSource,
        *,
        keep_last: int,
        main: bool,
        log: Callable[[str], None],
    ) -> None:
        self.run_dir, self.policy, self.learner = run_dir, policy, learner
        self.task = TaskHooks.of(task)  # its state_dict / load_state_dict, where it has them
        self.rngs = (python_rngs, torch_generators)
        self.advantages = advantages  # a critic's state travels with the policy's
        self.keep_last, self.main, self.log = keep_last, main, log

    def save(self, step: int, history: list[dict], eval_before: Any, pending: Any) -> None:
        """Rank 0 writes the checkpoint; under FSDP every rank calls this (the unsharded states
        are gathered collectively) and the whole-weight replica is what gets saved."""
        self.policy.gather_whole()
        optimizer_state = self.policy.full_optimizer_state(self.learner.optimizer)
        critic_state = self.advantages.state_dict()  # under FSDP a collective too
        if not self.main:
            return
        task_state = self.task.state_dict
        state = {
            "pending": pending,
            "optimizer": optimizer_state,
            "scheduler": self.learner.scheduler.state_dict(),
            "rng": rng_state(*self.rngs),
            "task": task_state() if task_state is not None else None,
            "history": history,
            "eval_before": eval_before,
        }
        if critic_state is not None:  # no key without a critic: GRPO's checkpoints unchanged
            state["critic"] = critic_state
        tokenizer = self.policy.tokenizer
        save_checkpoint(self.run_dir, step, self.policy.whole, tokenizer, state, self.keep_last)

    def restore(self) -> dict | None:
        """Load the latest complete checkpoint of the run directory into the policy, optimizer,
        scheduler, RNGs and task; returns its state (None: nothing to resume, start afresh).
        metrics.jsonl and timings.jsonl lose the rows after the checkpoint's step."""
        skipped = incomplete_checkpoints(self.run_dir)
        if skipped:
            self.log(f"ignoring incomplete checkpoint(s) left by a crash: {', '.join(skipped)}")
        path = latest_checkpoint(self.run_dir)
        if path is None:
            return None
        state = load_checkpoint_state(path)
        self.policy.load_state(state["model"], self.learner.optimizer, state["optimizer"])
        self.learner.scheduler.load_state_dict(state["scheduler"])
        self.advantages.load_state_dict(state.get("critic"))  # the group estimators: nothing
        restore_rng_state(state["rng"], *self.rngs)
        if state.get("task") is not None:
            self.task.load_state_dict(state["task"])
        if self.main:
            truncate_jsonl(self.run_dir / "metrics.jsonl", state["step"])
            truncate_jsonl(self.run_dir / "timings.jsonl", state["step"])
            record_event(self.run_dir, "resume", step=state["step"], checkpoint=path.name)
        return state
