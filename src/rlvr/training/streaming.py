"""Free-running rollouts in groups: rollout.async_mode=free with rollout.async_unit=group.

    generator thread:  engine.stream  (continuous batching without batch boundaries)
        take:  a free slot asks for a prompt; admitted while fewer than K x prompts_per_step
               groups are in flight or ready (admission control)
        done:  a group's last row ended -> scored -> dynamic sampling drops it if its rewards
               are all equal -> the ready buffer
    learner, at step s:  publish the weights of update s-1 (taken at the next token boundary),
        then take prompts_per_step ready groups, those with the oldest first tokens first (the
        first to expire); a group more than K updates old is dropped (and counted)

So a slow group holds back nothing but itself: the batch is made of the groups that finished
first. Not deterministic (which groups finish first depends on timing); docs/concepts/async-rl.md.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import torch

from rlvr.rollout import Round, take_rows
from rlvr.runs.policy import Policy
from rlvr.training.collect import Collector, ScoredRollouts, informative_groups, token_staleness
from rlvr.training.sources import load_weights, sync_weights


class GroupStream:
    """The schedule of rollout.async_unit=group (see the module docstring). It is the stream's
    `SampleRequests` (the generator thread's side) and its `WeightFeed`.

    Admission bounds the staleness as FreeRunning's does in batches: a group admitted at
    version v found fewer than K x P groups (P = prompts_per_step) ahead of it, and the learner
    takes P per step, so unless later groups overtake it (they finish sooner) it is taken by
    step v + K + 1. A group overtaken so often that it is more than K updates old when taken is
    dropped (`rollout_dropped_groups`) and a new prompt takes its place. Dynamic sampling acts
    on each group as it arrives; at most max_sampling_rounds x P groups are dropped so per step,
    then groups are kept as they come (as the batch schedule trains on its last round).

    A checkpoint (`pending`) admits nothing new and waits for the groups in flight; the ready
    ones are saved, each as a ScoredRollouts of one group, and come back on resume.
    """

    def __init__(self, collector: Collector, policy: Policy, k: int) -> None:
        if k < 1:
            raise ValueError(f"GroupStream needs k >= 1, got {k}")
        cfg = collector.cfg
        self.collector, self.policy, self.k = collector, policy, k
        self.p, self.g = cfg.rollout.prompts_per_step, cfg.rollout.group_size
        self.limit = k * self.p  # groups admitted and not taken yet
        self.dynamic = cfg.algorithm.dynamic_sampling
        self.filter_cap = cfg.algorithm.max_sampling_rounds * self.p
        self.cond = threading.Condition()
        self.ready: deque[ScoredRollouts] = deque()
        self.admitted = 0  # in flight or ready
        self.paused = False  # a checkpoint is being taken: admit nothing
        self.stopped = False
        self.error: BaseException | None = None
        self.published: tuple[int, dict[str, torch.Tensor] | None] = (0, None)
        self.loaded = 0  # the version the replica holds
        self.step = 1  # the learner's step: prompts are drawn for it
        self.dropped = self.filtered = self.filtered_step = 0
        self.switches = 0  # weight loads since the last batch was handed out
        self.idle_s = 0.0  # the generator waiting for admission, since the last batch
        self.busy_since = 0.0
        self.last_idle_s = 0.0
        self.depth = 0
        self.waited_s = 0.0
        self.thread: threading.Thread | None = None

    # -- the learner's side -------------------------------------------------------------------

    def next(self, step: int, last_step: int) -> ScoredRollouts:
        t0 = time.perf_counter()
        with self.cond:
            self.paused = False
            self.step, self.filtered_step = step, 0
            if self.thread is None:  # the first step of the run (or of a resumed one)
                sync_weights(self.policy, self.collector.source)
                self.published, self.loaded = (step - 1, None), step - 1
                self.busy_since = time.perf_counter()
                self.thread = threading.Thread(target=self._generate, name="rlvr-rollouts")
                self.thread.daemon = True
                self.thread.start()
            else:  # the learner's weights after update step - 1, taken at a token boundary
                self.published = (step - 1, self.policy.rollout_weights_copy())
            self.depth = len(self.ready)
            self.cond.notify_all()
            groups: list[ScoredRollouts] = []
            while len(groups) < self.p:
                while not self.ready and self.error is None:
                    self.cond.wait()
                if self.error is not None:
                    raise self.error
                first = min(range(len(self.ready)), key=lambda i: self.ready[i].version)
                group = self.ready[first]  # the first to expire
                del self.ready[first]
                self.admitted -= 1
                self.cond.notify_all()  # room for another group
                group.staleness = step - 1 - group.version
                if group.staleness > self.k:
                    self.dropped += 1
                else:
                    groups.append(group)
            now = time.perf_counter()
            busy, self.busy_since = now - self.busy_since - self.idle_s, now
            busy = max(0.0, busy)
            self.last_idle_s, self.idle_s = self.idle_s, 0.0
            switches, self.switches = self.switches, 0
        self.waited_s = time.perf_counter() - t0
        return self._batch(groups, busy, switches)

    def _batch(self, groups: list[ScoredRollouts], busy_s: float, switches: int) -> ScoredRollouts:
        """The step's batch of `groups` (in the order they finished)."""
        g = self.g
        rewards = torch.cat([group.rewards for group in groups])
        components: dict[str, list[float]] = {}
        for group in groups:
            for name, values in group.components.items():
                components.setdefault(name, []).extend(values)
        return ScoredRollouts(
            take_rows(
                [(group.batch, i) for group in groups for i in range(g)],
                [j for j in range(len(groups)) for _ in range(g)],
            ),
            samples=[s for group in groups for s in group.samples],
            rewards=rewards,
            verifier_failures=sum(group.verifier_failures for group in groups),
            groups_kept=len(informative_groups(rewards.tolist(), g)),
            time_generate_s=busy_s,  # the generator's busy time since the last batch
            time_score_s=sum(group.time_score_s for group in groups),
            staleness=max(group.staleness for group in groups),  # the oldest token's
            version=min(group.version for group in groups),
            weight_switches=switches,
            components=components,
            task_metrics=self.collector.hooks.metrics(),
            errors=[
                replace(f, row=j * g + f.row) for j, grp in enumerate(groups) for f in grp.errors
            ],
            completions=len(groups) * g,
        )

    def metrics(self, scored: ScoredRollouts) -> dict[str, float]:
        return {
            "rollout_staleness": scored.staleness,
            "rollout_staleness_token_mean": token_staleness(scored),
            "rollout_buffer_depth": self.depth,
            "rollout_dropped_groups": self.dropped,
            "rollout_filtered_groups": self.filtered,
            "rollout_weight_switches": scored.weight_switches,
            "time_rollout_wait_s": self.waited_s,
            "time_generator_idle_s": self.last_idle_s,
        }

    def pending(self) -> list[ScoredRollouts]:
        """The ready groups, once those in flight are done; nothing new is admitted until the
        next step (the checkpoint's RNG states are those after the last prompt drawn)."""
        with self.cond:
            self.paused = True
            self.cond.notify_all()
            while self.admitted > len(self.ready) and self.error is None:
                self.cond.wait()
            return list(self.ready)

    def resume_with(self, pending: ScoredRollouts | list[ScoredRollouts] | None, step: int) -> None:
        if pending is None:
            return
        groups = pending if isinstance(pending, list) else [pending]
        self.ready.extend(groups)
        self.admitted += len(groups)

    def close(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify_all()
        if self.thread is not None:
            self.thread.join()

    # -- the generator's side (SampleRequests), in the generator thread -----------------------

    def _generate(self) -> None:
        collector = self.collector
        try:
            collector.source.stream(self, self.g, collector.encode, self)  # type: ignore[attr-defined]
        except BaseException as e:  # noqa: BLE001 - handed to the learner's thread
            with self.cond:
                self.error = e
                self.cond.notify_all()

    def take(self, limit: int, wait: bool) -> list[Mapping[str, Any]]:
        with self.cond:
            t0 = time.perf_counter()
            while True:
                room = 0 if self.paused or self.stopped else min(limit, self.limit - self.admitted)
                if room > 0 or not wait or self.stopped:
                    break
                self.cond.wait()
            if wait:
                self.idle_s += time.perf_counter() - t0
            if room <= 0:
                return []
            self.admitted += room
            step = self.step
        return [self.collector.draw(step) for _ in range(room)]

    def done(self, sample: Mapping[str, Any], group: Round) -> None:
        rewards = self.collector.shaped(group, [sample] * self.g)
        versions = group.batch.versions or []
        scored = ScoredRollouts(
            group.batch,
            samples=[sample] * self.g,
            rewards=torch.tensor(rewards, dtype=torch.float32),
            verifier_failures=group.failures,
            time_generate_s=group.time_generate_s,
            time_score_s=group.time_score_s,
            version=min((int(v.min()) for v in versions if v.numel()), default=self.loaded),
            components=group.components,
            errors=group.errors,
            completions=self.g,
        )
        with self.cond:
            constant = self.dynamic and not informative_groups(rewards, self.g)
            if constant and self.filtered_step < self.filter_cap:
                self.filtered += 1
                self.filtered_step += 1
                self.admitted -= 1  # another prompt takes its place
            else:
                self.ready.append(scored)
            self.cond.notify_all()

    # -- WeightFeed: the engine polls between tokens ------------------------------------------

    @property
    def version(self) -> int:
        return self.loaded

    def poll(self) -> bool:
        with self.cond:
            version, weights = self.published
        if version == self.loaded or weights is None:
            return False
        load_weights(self.policy, self.collector.source, weights)
        self.loaded = version
        self.switches += 1
        return True
