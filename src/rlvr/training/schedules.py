"""Which weights a step's batch is drawn from: the schedules.

  - `OnPolicy`: the weights as they are at the start of the step;
  - `OneStepOffPolicy` (rollout.off_policy_steps=1): the next step's batch is generated in a
    background thread by a snapshot taken before this step's update, while the update runs;
    every batch is one update stale (corrected by truncated importance sampling in the loss).

Both sync the rollout weights (`sync_weights`) before a batch's weights are fixed and call the
`Collector` (rlvr.training.collect), which draws the prompts, applies dynamic sampling and
reward shaping, and returns a `ScoredRollouts`.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

from rlvr.runs.policy import Policy
from rlvr.training.collect import Collector, ScoredRollouts
from rlvr.training.sources import RolloutSource


def sync_weights(policy: Policy, source: RolloutSource) -> None:
    """Before the weights a batch is drawn from are fixed: the rollout replica and the source
    (vLLM, Ray actors) take the learner's current weights."""
    policy.sync_rollout_weights()
    source.sync(policy.rollout_model)


class OnPolicy:
    """Each step's batch is drawn from the weights as they are when the step starts."""

    staleness = 0

    def __init__(self, collector: Collector, policy: Policy) -> None:
        self.collector, self.policy = collector, policy

    def sync(self) -> None:
        sync_weights(self.policy, self.collector.source)

    def next(self, step: int, last_step: int) -> ScoredRollouts:
        self.sync()
        return self.collector.collect(step)

    def metrics(self, scored: ScoredRollouts) -> dict[str, float]:
        return {}

    def pending(self) -> ScoredRollouts | None:
        """The next step's batch when it is already made (never, on-policy)."""
        return None

    def resume_with(self, scored: ScoredRollouts | None) -> None:
        if scored is not None:
            raise ValueError("an on-policy run has no pending batch to resume with")

    def close(self) -> None:
        pass


class OneStepOffPolicy:
    """The next step's batch is generated in a background thread while this step's update runs,
    by the weights as they were before that update (one step stale)."""

    staleness = 1

    def __init__(self, collector: Collector, policy: Policy) -> None:
        self.collector, self.policy = collector, policy
        self.executor = ThreadPoolExecutor(max_workers=1)
        self._pending: Future[ScoredRollouts] | None = None

    def sync(self) -> None:
        sync_weights(self.policy, self.collector.source)

    def next(self, step: int, last_step: int) -> ScoredRollouts:
        if self._pending is not None:  # generated during the previous update
            scored = self._pending.result()
        else:
            self.sync()
            scored = self.collector.collect(step)
        self._pending = None
        if step < last_step:
            self.sync()  # the next batch is drawn from the weights as they are before this update
            self._pending = self.executor.submit(self._collect_stale, step + 1)
        return scored

    def metrics(self, scored: ScoredRollouts) -> dict[str, float]:
        return {"rollout_staleness": scored.staleness}

    def _collect_stale(self, step: int) -> ScoredRollouts:
        scored = self.collector.collect(step)
        scored.staleness = 1
        return scored

    def pending(self) -> ScoredRollouts | None:
        """The next step's batch (waits for it): saved in checkpoints, so a resumed run trains
        on exactly the batch the uninterrupted run would have."""
        return self._pending.result() if self._pending is not None else None

    def resume_with(self, scored: ScoredRollouts | None) -> None:
        if scored is not None:
            self._pending = Future()
            self._pending.set_result(scored)

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)


def build_schedule(
    off_policy_steps: int, collector: Collector, policy: Policy
) -> OnPolicy | OneStepOffPolicy:
    return (OneStepOffPolicy if off_policy_steps else OnPolicy)(collector, policy)
