"""Where a step's scored completions come from: the rollout sources.

A *rollout source* generates G completions for each of a list of samples and scores them:
`round(samples, g, encode) -> Round`. Sources share one interface and are chosen by config:
  - `LocalRollouts`: the rollout engine in this process over the policy's weights (under
    torchrun every rank generates and scores its contiguous share of the prompts, keyed
    sampling with the global row offset, and the results are gathered on every rank);
  - `rlvr.distributed.ray_rollouts.RayRollouts`: rollout and reward workers as Ray actors.
A source also hears about weight changes (`sync(model)`), adds its own metrics (`metrics()`) and
is closed at the end of the run (`close()`).

`Collector` (rlvr.training.collect) calls a source for each round of a step's batch; a schedule
(rlvr.training.schedules) decides which weights the batch is drawn from.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import torch

from rlvr.config import Config
from rlvr.data.mix import MIX_ROUTE
from rlvr.distributed.world import World
from rlvr.rewards.pool import VerifierPool
from rlvr.rewards.scoring import Scorer
from rlvr.rollout import RolloutBatch, Round, SamplingParams, concat_batches
from rlvr.rollout.types import Engine, WeightFeed
from rlvr.runs.policy import Policy


class SampleRequests(Protocol):
    """What a streaming source call (`LocalRollouts.stream`, rollout.async_unit=group) draws
    samples from and hands scored groups to.

    take(limit, wait): up to `limit` samples to start now ([] when none may start yet; with
        `wait` it blocks until one may, and [] ends the call).
    done(sample, group): the sample's g completions, generated and scored (a Round of g rows).
    """

    def take(self, limit: int, wait: bool) -> list[Mapping[str, Any]]: ...

    def done(self, sample: Mapping[str, Any], group: Round) -> None: ...


class RolloutSource(Protocol):
    def round(
        self,
        samples: list[Mapping[str, Any]],
        g: int,
        encode: Callable[[Mapping], list[int]],
        feed: WeightFeed | None = None,
    ) -> Round: ...

    def sync(self, model: torch.nn.Module) -> None: ...

    def metrics(self) -> dict[str, float]: ...

    def close(self) -> None: ...


def sync_weights(policy: Policy, source: RolloutSource) -> None:
    """Before the weights a batch is drawn from are fixed: the rollout replica and the source
    (vLLM, Ray actors) take the learner's current weights."""
    policy.sync_rollout_weights()
    source.sync(policy.rollout_model)


def load_weights(policy: Policy, source: RolloutSource, weights: dict[str, torch.Tensor]) -> None:
    """The rollout replica and the source take `weights` (a `Policy.rollout_weights_copy`
    made earlier); in the thread that generates."""
    policy.load_rollout_weights(weights)
    source.sync(policy.rollout_model)


def check_rollout_source(cfg: Config, world: World | None) -> None:
    """What the chosen source needs, checked before any weights load (Ray: the `ray`
    module)."""
    if cfg.distributed.ray:
        from rlvr.distributed.ray_rollouts import check_ray_world

        check_ray_world(world)


def build_rollout_source(
    cfg: Config,
    engine: Engine,
    verifier: Callable[[str, Mapping[str, Any]], float],
    sampling: SamplingParams,
    generator: torch.Generator,
    world: World,
    log: Callable[[str], None] = print,
    mix_verifier: Callable[[str, Mapping[str, Any]], float] | None = None,
) -> RolloutSource:
    """The source `distributed.ray` selects: Ray actors, or the engine and a scorer here (in a
    pool of reward.workers processes when that is > 0). `mix_verifier`: the verifier of
    data.mix_path's prompts (reward.mix_verifier), scored in this process."""
    if cfg.distributed.ray:
        from rlvr.distributed.ray_rollouts import RayRollouts

        return RayRollouts(cfg, sampling, generator, world, log=log)
    reward = cfg.reward
    pool = (
        VerifierPool(reward.verifier, reward.workers, reward.timeout_s)
        if reward.workers > 0
        else None
    )
    routes = {MIX_ROUTE: Scorer(mix_verifier)} if mix_verifier is not None else None
    scorer = Scorer(verifier, pool, routes)
    return LocalRollouts(engine, scorer, sampling, generator, world, log)


class LocalRollouts:
    """The rollout engine and the scorer in this process (one rank's share under torchrun).

    `generator` is the run's sampler RNG (checkpointed by the trainer); each call draws the
    call's seed from it (keyed sampling). On out-of-memory while generating, the rows decoded
    together are halved and the call retried with the generator rewound, so the retry draws as
    a fresh attempt would; logged once per halving."""

    def __init__(
        self,
        engine: Engine,
        scorer: Scorer,
        sampling: SamplingParams,
        generator: torch.Generator,
        world: World,
        log: Callable[[str], None] = print,
    ) -> None:
        self.engine, self.scorer, self.sampling = engine, scorer, sampling
        self.generator, self.world, self.log = generator, world, log

    def round(
        self,
        samples: list[Mapping[str, Any]],
        g: int,
        encode: Callable[[Mapping], list[int]],
        feed: WeightFeed | None = None,
    ) -> Round:
        lo, hi = self.world.shard(len(samples))
        t0 = time.perf_counter()
        mine = samples[lo:hi]
        batch = self.generate(
            [encode(s) for s in mine], g, first_row=lo * g, samples=mine, feed=feed
        )
        t_generate = time.perf_counter() - t0
        t0 = time.perf_counter()
        rewards, failures = self.scorer(
            batch.completion_text,
            [samples[lo + i] for i in batch.prompt_index],
            first_row=lo * g,  # failures are numbered by the round's rows and prompts
            indices=[lo + i for i in batch.prompt_index],
            completion_ids=batch.completion_ids,  # read by TRL-shaped reward functions only
            skip=batch.environment_scored,
        )
        rewards = batch.rewards_with_env(rewards)  # an environment's own reward comes first
        t_score = time.perf_counter() - t0
        components, errors = self.scorer.pop_components(), self.scorer.pop_failures()
        if not self.world.distributed:
            errors += batch.environment_failures()
            return Round(batch, rewards, failures, t_generate, t_score, components, errors)
        parts = self.world.all_gather_object((lo, batch, rewards, failures, components, errors))
        batch = concat_batches([(first, part) for first, part, *_ in parts])
        rewards = [r for part in parts for r in part[2]]
        merged: dict[str, list[float]] = {}
        for part in parts:
            for name, values in part[4].items():
                merged.setdefault(name, []).extend(values)
        errors = [f for part in parts for f in part[5]] + batch.environment_failures()
        failures = sum(p[3] for p in parts)
        return Round(batch, rewards, failures, t_generate, t_score, merged, errors)

    def generate(
        self,
        prompt_ids: list[list[int]],
        g: int,
        first_row: int = 0,
        samples: list[Mapping[str, Any]] | None = None,
        feed: WeightFeed | None = None,
    ) -> RolloutBatch:
        while True:
            state = self.generator.get_state()
            try:
                batch = self.engine.generate(
                    prompt_ids,
                    g,
                    self.sampling,
                    generator=self.generator,
                    first_row=first_row,
                    samples=samples,
                    **({"feed": feed} if feed is not None else {}),  # user engines may lack it
                )
                # The update needs the memory; its new weights would make the kept copies stale.
                self.engine.release_cache()
                return batch
            except torch.OutOfMemoryError:
                size = self.engine.max_batch_size
                if size <= 1:
                    raise
                self.engine.max_batch_size = max(1, size // 2)
                self.generator.set_state(state)
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                self.log(
                    f"warning [oom]: out of memory while generating {size} rows at once; "
                    f"retrying with rollout.max_batch_size={self.engine.max_batch_size} for "
                    "the rest of the run"
                )

    def stream(
        self,
        requests: SampleRequests,
        g: int,
        encode: Callable[[Mapping], list[int]],
        feed: WeightFeed,
    ) -> None:
        """rollout.async_unit=group: the engine generates without batch boundaries
        (`FastEngine.stream`), and each group is scored as soon as it is complete and handed to
        `requests.done`, until `requests` ends the call. One process only."""
        stream = getattr(self.engine, "stream", None)
        if stream is None:
            raise ValueError(
                f"rollout.async_unit=group: the {type(self.engine).__name__} engine cannot "
                "stream groups (the fast engine can)"
            )
        stream(
            _ScoredGroups(self.scorer, requests, g, encode), g, self.sampling, self.generator, feed
        )

    def sync(self, model: torch.nn.Module) -> None:
        """The engine takes `model`'s current weights: nothing to do for `fast` and `hf`, which
        read the modules of the model they were built over; a reload for `vllm`."""
        self.engine.sync(model)

    def metrics(self) -> dict[str, float]:
        return {}

    def close(self) -> None:
        if self.scorer.pool is not None:
            self.scorer.pool.close()


class _ScoredGroups:
    """The engine's `GroupRequests` of a streaming source call: samples are encoded on the way
    in, groups scored on the way out (in the engine's thread, between decode steps)."""

    def __init__(
        self,
        scorer: Scorer,
        requests: SampleRequests,
        g: int,
        encode: Callable[[Mapping], list[int]],
    ) -> None:
        self.scorer, self.requests, self.g, self.encode = scorer, requests, g, encode
        self.samples: dict[int, tuple[Mapping[str, Any], float]] = {}  # index -> (sample, t0)
        self.taken = 0

    def take(self, limit: int, wait: bool) -> list[list[int]]:
        samples = self.requests.take(limit, wait)
        now = time.perf_counter()
        for sample in samples:
            self.samples[self.taken] = (sample, now)
            self.taken += 1
        return [self.encode(s) for s in samples]

    def done(self, index: int, batch: RolloutBatch) -> None:
        sample, started = self.samples.pop(index)
        t0 = time.perf_counter()
        rewards, failures = self.scorer(
            batch.completion_text,
            [sample] * self.g,
            completion_ids=batch.completion_ids,
            skip=batch.environment_scored,
        )
        rewards = batch.rewards_with_env(rewards)
        components, errors = self.scorer.pop_components(), self.scorer.pop_failures()
        group = Round(
            batch,
            rewards,
            failures,
            t0 - started,  # the group's latency, admission to its last token
            time.perf_counter() - t0,
            components,
            errors + batch.environment_failures(),
        )
        self.requests.done(sample, group)
