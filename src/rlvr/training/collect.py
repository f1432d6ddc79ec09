"""One step's batch: draw prompts, generate and score G completions each, shape the rewards.

    samples  = task.sample_train(rng) x prompts_per_step
    round    = source.round(samples, G)                      (generate + verify)
    rewards += overlong penalty                               (DAPO overlong shaping, optional)
    keep the groups whose rewards are not all equal          (DAPO dynamic sampling, optional:
                                                              resample until prompts_per_step
                                                              informative groups, at most
                                                              1 + max_sampling_rounds rounds)

Curricula see the step before its prompts are drawn (`task.on_step`) and the verifier's rewards
of every round (`task.observe`), through the task's hooks (rlvr.data.task). A `Collector` holds
what a step's batch is made from; the schedules (rlvr.training.schedules) call it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from rlvr.algorithms import zero_variance_groups
from rlvr.algorithms.shaping import overlong_penalties
from rlvr.config import Config
from rlvr.data.task import Task, TaskHooks
from rlvr.rewards.base import Failure
from rlvr.rollout import RolloutBatch, Round, take_rows
from rlvr.rollout.types import WeightFeed
from rlvr.training.sources import RolloutSource


@dataclass
class ScoredRollouts:
    """Completions of one step with their samples and rewards (row-aligned)."""

    batch: RolloutBatch
    samples: list[Mapping[str, Any]]
    rewards: torch.Tensor  # [N]
    verifier_failures: int
    rounds: int = 1
    groups_kept: int = 0
    time_generate_s: float = 0.0
    time_score_s: float = 0.0
    staleness: int = 0  # optimizer steps between the sampler's weights and the learner's
    version: int = 0  # the updates the weights that sampled the batch had seen (its oldest)
    weight_switches: int = 0  # partial rollouts: weight loads while the batch was made
    components: dict[str, list[float]] = field(default_factory=dict)  # composite verifier parts
    task_metrics: dict[str, float] = field(default_factory=dict)  # e.g. the curriculum level
    # Every completion of the step's rounds whose verifier or environment failed (the rows of
    # round r numbered after those of the rounds before it), and how many were scored in all.
    errors: list[Failure] = field(default_factory=list)
    completions: int = 0


def informative_groups(rewards: list[float], g: int) -> list[int]:
    """Indices of the groups (g consecutive rows each) whose rewards are not all equal.
    float64, so two rewards that differ only beyond float32's precision still differ."""
    r = torch.tensor(rewards, dtype=torch.float64)
    group_ids = torch.arange(len(rewards)) // g
    constant = zero_variance_groups(r, group_ids)[::g]
    return [j for j in range(len(rewards) // g) if not constant[j]]


class Collector:
    """Makes the scored batch of a step: the task, the rollout source, the prompt RNG (which the
    checkpoints save) and the prompts' tokenizer, with the config's sampling and shaping."""

    def __init__(
        self,
        cfg: Config,
        task: Task,
        source: RolloutSource,
        prompt_rng: random.Random,
        encode: Callable[[Mapping[str, Any]], list[int]],
    ) -> None:
        self.cfg, self.task, self.source = cfg, task, source
        self.hooks = TaskHooks.of(task)
        self.prompt_rng, self.encode = prompt_rng, encode
        self._drawing = 0  # the step `draw` last drew for

    def draw(self, step: int) -> Mapping[str, Any]:
        """One training prompt for the batch of `step`, drawn alone (rollout.async_unit=group);
        curricula hear of a new step before its first prompt is drawn."""
        if step != self._drawing:
            self._drawing = step
            self.hooks.on_step(step - 1, self.cfg.training.steps)
        return self.task.sample_train(self.prompt_rng)

    def shaped(self, result: Round, samples: list[Mapping[str, Any]]) -> list[float]:
        """The rewards of a round's rows (`samples`: each row's sample) as trained on: adaptive
        curricula see the verifier's first, then DAPO's overlong penalty is added."""
        cfg = self.cfg
        self.hooks.observe(samples, result.rewards)
        if not cfg.reward.overlong_buffer:
            return result.rewards
        penalties = overlong_penalties(
            result.batch.completion_lengths,
            cfg.rollout.max_new_tokens,
            cfg.reward.overlong_buffer,
            cfg.reward.overlong_penalty_factor,
        )
        return [r + p for r, p in zip(result.rewards, penalties)]

    def collect(self, step: int, feed: WeightFeed | None = None) -> ScoredRollouts:
        """Sample and score the batch of `step` (1-based); `feed`: newer weights the rollouts
        may take mid-batch (partial rollouts, rlvr.rollout.types.WeightFeed)."""
        cfg, task, hooks, source = self.cfg, self.task, self.hooks, self.source
        want, g = cfg.rollout.prompts_per_step, cfg.rollout.group_size
        dynamic = cfg.algorithm.dynamic_sampling
        max_rounds = 1 + (cfg.algorithm.max_sampling_rounds if dynamic else 0)
        rounds: list[tuple[Round, list[Mapping[str, Any]], list[float]]] = []
        kept: list[tuple[int, int]] = []  # (round, group within round)
        components: dict[str, list[float]] = {}
        hooks.on_step(step - 1, cfg.training.steps)  # curricula: difficulty may follow progress
        while len(rounds) < max_rounds and len(kept) < want:
            samples: list[Mapping[str, Any]] = [
                task.sample_train(self.prompt_rng) for _ in range(want)
            ]
            result = source.round(samples, g, self.encode, feed)
            for name, values in result.components.items():
                components.setdefault(name, []).extend(values)
            rewards = self.shaped(result, [samples[i] for i in result.batch.prompt_index])
            rounds.append((result, samples, rewards))
            groups = informative_groups(rewards, g) if dynamic else range(want)
            kept += [(len(rounds) - 1, j) for j in groups]
        kept = kept[:want]
        groups_kept = len(kept)
        if not kept:  # nothing informative in any round: train on the last round as it is
            kept = [(len(rounds) - 1, j) for j in range(want)]
        rows = [(r, j * g + k) for r, j in kept for k in range(g)]
        errors, scored = [], 0
        for result, _, _ in rounds:  # the rows of every round, numbered on
            errors += [replace(f, row=scored + f.row) for f in result.errors]
            scored += len(result.batch)
        batches = [result.batch for result, _, _ in rounds]
        merged = take_rows(
            [(batches[r], i) for r, i in rows], [gi for gi in range(len(kept)) for _ in range(g)]
        )
        return ScoredRollouts(
            merged,
            samples=[rounds[r][1][i // g] for r, i in rows],
            rewards=torch.tensor([rounds[r][2][i] for r, i in rows], dtype=torch.float32),
            verifier_failures=sum(result.failures for result, _, _ in rounds),
            rounds=len(rounds),
            groups_kept=groups_kept,
            time_generate_s=sum(result.time_generate_s for result, _, _ in rounds),
            time_score_s=sum(result.time_score_s for result, _, _ in rounds),
            components=components,
            task_metrics=hooks.metrics(),
            errors=errors,
            completions=scored,
        )


def token_staleness(scored: ScoredRollouts) -> float:
    """The mean staleness of the batch's sampled tokens, in updates: the learner's version
    (scored.version + scored.staleness) minus the version that sampled each token."""
    batch, learner = scored.batch, scored.version + scored.staleness
    if batch.versions is None:
        return float(scored.staleness)
    masks = batch.loss_masks or [torch.ones(v.numel()) for v in batch.versions]
    total = sum(float(((learner - v) * m).sum()) for v, m in zip(batch.versions, masks))
    tokens = sum(float(m.sum()) for m in masks)
    return total / tokens if tokens else float(scored.staleness)
