"""Ray mode (`distributed.ray=true`): rollout and reward workers as Ray actors around one learner.

`RayRollouts` is a rollout source (rlvr.training.sources) like the in-process one: the trainer's
loop is the same, only where a round's completions and rewards are made differs.

Data flow of one rollout round (`RayRollouts.round`):

  driver (learner)                                  actors
  1. weights: the learner's state, put once per change (`ray.put`), versioned by a counter
  2. the round's prompts, split in contiguous shards ──▶ RolloutWorker.generate (one per shard)
     with the sampler's RNG state and the shard's          loads the weights when the version
     global first row                                      changed, samples with keyed sampling
  3. concat the shards, check every row is there once  ◀── completions
  4. the rows, split in contiguous shards            ──▶ RewardWorker.score (the trainer's Scorer)
  5. concat the rewards                              ◀── rewards, verifier failures (with
                                                          each failure's record and traceback)
  6. advantages, the update, metrics, evaluation: the trainer, on the driver

Exactness. Keyed sampling makes a row's draws a function of the call's seed (one draw from the
trainer's `sample_gen`) and the row's global index only. Every actor gets the driver's RNG state
*before* that draw and its shard's first row, so the shards together are exactly the rows one
process draws; the driver then adopts the RNG state an actor returns, so later rounds match too.
The rewards come from the same `Scorer` with the same containment, and the weights are those the
single process samples from (below), so completions and rewards equal its run's, and losses agree
to fp32 rounding: a shard decodes its rows at other batch widths than one process does, and a
row's matrix products round differently by width, which moves its sampling log-probs by
1e-5 to 1e-4 (tests/distributed/test_ray_rollouts.py checks losses to 1e-5).

Weight sync. The trainer's rollout schedule calls `sync` in its main thread right before the
weights of the next batch are fixed; that is where the driver puts them. On-policy that is before
each step's collect (after the previous update); with rollout.max_staleness=K it is before the
next batch is handed to the background thread, i.e. before this step's update, so the actors draw
from the same one-update-stale weights as the single process's snapshot. The driver's snapshot
copy (and the local engine over it) is unused in Ray mode; held-out evaluation runs on the driver.

Fault tolerance. Every actor call is a pure function of its arguments: the weights travel as an
ObjectRef (the driver holds it until the next sync, so a retry can still fetch them), the RNG
state and the row offset are arguments, and an actor's only state is a cache (the version of the
weights it last loaded). Actors are created with `max_restarts` and `max_task_retries` equal to
`distributed.max_restarts`, so when a worker dies Ray restarts it and re-runs the call, which
returns the same rows: nothing is lost and nothing is counted twice. The driver still checks
after each round that every prompt has exactly `group_size` rows, in order, and raises
otherwise. Each actor returns an incarnation id with its result; a changed id is a restart,
logged and counted in the `ray_worker_restarts` metric. When the retries are exhausted the run
stops with a one-line error naming the worker.

LoRA. The rollout actors build the same peft wrapper as the learner (same `model.*` config), and
the driver syncs only the trainable tensors (the adapters): the frozen base is loaded from the
same `model.name_or_path` on both sides and never changes, so the sync is small and exact.
Without LoRA the full state_dict is synced.

The driver keeps its local engine for held-out evaluation; scoring happens in the reward actors,
each of which runs its own pool of `reward.workers` processes when that is set.

Several learner ranks. Started by torchrun (`torchrun --nproc-per-node M -m rlvr train
distributed.ray=true ...`), the M learner ranks attach to one Ray cluster: rank 0 is the Ray
driver (it starts or joins the cluster, creates the actors, puts the weights, runs every round)
and broadcasts each round, the sampler's RNG state and the restart count to the other ranks on
the rollout source's process group (its own gloo group under rollout.max_staleness), so every
rank trains on the same batch as with LocalRollouts; a round that fails on the driver fails on
every rank with the same error. DDP or FSDP2 learners alike: the weights put are the rollout
replica's, whole on every rank.
"""

from __future__ import annotations

import math
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from rlvr.config import Config, EnvironmentConfig, ModelConfig, RolloutConfig
from rlvr.distributed.world import World
from rlvr.errors import ConfigError, UserError
from rlvr.rewards.base import Failure
from rlvr.rewards.scoring import Scorer
from rlvr.rollout import RolloutBatch, Round, SamplingParams, build_engine, concat_batches
from rlvr.rollout.types import WeightFeed


class WorkerLost(UserError):
    """A Ray worker died and Ray could not restart it (or retry its call) any more."""


class RowAccountingError(RuntimeError):
    """A round's gathered rows are not every prompt's group exactly once (a bug, never input)."""


def import_ray() -> Any:
    """The `ray` module, or a one-line UserError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise UserError(
            "distributed.ray=true needs ray: pip install 'rlvr[ray]' (or pip install ray)"
        ) from None
    return ray


# -- pure helpers --------------------------------------------------------------------------------


def shard_ranges(n: int, parts: int) -> list[tuple[int, int]]:
    """Contiguous non-empty shards [lo, hi) covering range(n), sizes differing by at most one;
    fewer than `parts` shards when n < parts."""
    if parts < 1:
        raise ValueError(f"shard_ranges: parts must be >= 1, got {parts}")
    base, extra = divmod(n, parts)
    out, lo = [], 0
    for k in range(parts):
        hi = lo + base + (1 if k < extra else 0)
        if hi > lo:
            out.append((lo, hi))
        lo = hi
    return out


def check_rows(prompt_index: Sequence[int], prompts: int, g: int) -> None:
    """Raise RowAccountingError unless prompt_index is 0 (g times), 1 (g times), ... prompts-1:
    every prompt of the round has its whole group, exactly once and in order."""
    expected = [i for i in range(prompts) for _ in range(g)]
    if list(prompt_index) == expected:
        return
    counts = Counter(prompt_index)
    for i in range(prompts):
        if counts[i] != g:
            raise RowAccountingError(
                f"ray rollout: prompt {i} of the round has {counts[i]} completions, expected {g}"
            )
    extra = sorted(set(counts) - set(range(prompts)))
    if extra:
        raise RowAccountingError(f"ray rollout: rows of unknown prompt {extra[0]} in the round")
    raise RowAccountingError("ray rollout: the round's rows are out of order")


def sync_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """What a rollout actor needs of the learner's weights, on the CPU: with LoRA the trainable
    (adapter) tensors only, else the whole state_dict."""
    from rlvr.models.lora import is_lora

    state = model.state_dict()
    if is_lora(model):
        trainable = {name for name, p in model.named_parameters() if p.requires_grad}
        state = {k: v for k, v in state.items() if k in trainable}
    return {k: v.detach().cpu() for k, v in state.items()}


# -- the actors ----------------------------------------------------------------------------------


@dataclass
class Generated:
    """A rollout actor's answer: its shard's rows, the sampler's RNG state after the call, and
    the id of the actor process that made them (it changes when Ray restarts the actor)."""

    batch: RolloutBatch
    generator_state: torch.Tensor
    incarnation: str


@dataclass
class Scored:
    """A reward actor's answer: one reward per row, failures, composite components, and the
    failures' records (rows numbered as in the round, tracebacks from the actor)."""

    rewards: list[float]
    failures: int
    incarnation: str
    components: dict[str, list[float]] = field(default_factory=dict)
    errors: list[Failure] = field(default_factory=list)


def _incarnation() -> str:
    return f"{os.getpid()}-{uuid.uuid4().hex[:8]}"


class RolloutWorker:
    """A copy of the policy and a rollout engine (run as a Ray actor), in the multi-turn loop
    of `env_cfg` when that names an environment (its tools run in the actor's process, in
    their sandbox). Stateless with respect to the run: the weights, their version and the
    sampler state come with every call."""

    def __init__(
        self,
        model_cfg: ModelConfig,
        rollout_cfg: RolloutConfig,
        env_cfg: EnvironmentConfig | None = None,
    ) -> None:
        from rlvr.models.loading import load_model, load_tokenizer, resolve_device, resolve_dtype
        from rlvr.rollout.engines import engine_options
        from rlvr.rollout.multi_turn import with_environment

        device = resolve_device(model_cfg.device)
        dtype = resolve_dtype(model_cfg.dtype, device)
        if rollout_cfg.dtype != "auto":  # rollout.dtype, as the driver's replica holds it
            dtype = getattr(torch, rollout_cfg.dtype)
        tokenizer = load_tokenizer(
            model_cfg.name_or_path, model_cfg.trust_remote_code, model_cfg.gguf_file
        )
        model = load_model(model_cfg, device, dtype, train=False)
        self.lora = bool(model_cfg.lora_rank)
        if self.lora:  # the learner's peft structure, so the adapter names match
            from rlvr.models.lora import apply_lora

            model = apply_lora(model, model_cfg)
            model.requires_grad_(False)
            model.eval()
        self.model = model
        self.engine = build_engine(
            rollout_cfg.engine, model, tokenizer, **engine_options(rollout_cfg)
        )
        if env_cfg is not None:
            self.engine = with_environment(self.engine, tokenizer, env_cfg)
        self.version: int | None = None
        self.incarnation = _incarnation()

    def generate(
        self,
        weights: list[Any],
        version: int,
        prompt_ids: list[list[int]],
        n: int,
        sampling: SamplingParams,
        seed_state: torch.Tensor,
        first_row: int,
        samples: list[Mapping[str, Any]] | None = None,
    ) -> Generated:
        """`n` completions of each prompt under the weights `weights[0]` (a `sync_state` dict or
        an ObjectRef of one, fetched only when `version` differs from the loaded one), drawing
        the call's seed from a generator in `seed_state` and keying row r as first_row + r;
        `samples`: the prompts' task samples (an environment's episodes start from them)."""
        if version != self.version:
            import ray

            state = weights[0]
            self._load(ray.get(state) if isinstance(state, ray.ObjectRef) else state)
            self.version = version
        while True:
            gen = torch.Generator()
            gen.set_state(seed_state)
            try:
                batch = self.engine.generate(
                    prompt_ids, n, sampling, generator=gen, first_row=first_row, samples=samples
                )
                return Generated(batch, gen.get_state(), self.incarnation)
            except torch.OutOfMemoryError:  # as the trainer does: fewer rows at once, same draws
                if self.engine.max_batch_size <= 1:
                    raise
                self.engine.max_batch_size = max(1, self.engine.max_batch_size // 2)
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()

    def _load(self, state: Mapping[str, torch.Tensor]) -> None:
        if not self.lora:
            self.engine.load_weights(state)
            return
        result = self.model.load_state_dict(state, strict=False)
        if result.unexpected_keys:
            raise RuntimeError(
                f"ray rollout worker: unknown adapter tensor {result.unexpected_keys[0]!r}"
            )
        self.engine.sync(self.model)  # vllm: the merged weights; fast, hf: read the modules


class RewardWorker:
    """The verifier behind the trainer's Scorer (run as a Ray actor); stateless."""

    def __init__(self, spec: str, workers: int, timeout_s: float) -> None:
        from rlvr.rewards.compose import build_verifier
        from rlvr.rewards.pool import VerifierPool

        pool = VerifierPool(spec, workers, timeout_s) if workers > 0 else None
        self.scorer = Scorer(build_verifier(spec), pool)
        self.incarnation = _incarnation()

    def score(
        self,
        texts: list[str],
        samples: list[Mapping[str, Any]],
        first_row: int = 0,
        indices: list[int] | None = None,
        skip: list[bool] | None = None,
    ) -> Scored:
        """The rows' rewards; failures numbered from `first_row` (the shard's first row in the
        round), their samples' fallback ids from `indices` (the Scorer's); `skip`: rows whose
        environment gave their reward, not scored (0)."""
        rewards, failures = self.scorer(
            texts, samples, first_row=first_row, indices=indices, skip=skip
        )
        components, errors = self.scorer.pop_components(), self.scorer.pop_failures()
        return Scored(rewards, failures, self.incarnation, components, errors)


# -- the driver ----------------------------------------------------------------------------------


def check_ray_world(world: World | None) -> Any:
    """The `ray` module (a missing extra fails here, before any model loads). Any number of
    learner ranks: under torchrun rank 0 drives the actors."""
    return import_ray()


class RayRollouts:
    """A rollout source whose rounds run in Ray actors; this process is a learner (under
    torchrun, rank 0 of `world` drives the actors and broadcasts each round to the others).

    `generator` is the run's sampler RNG: its state goes to every rollout actor with each round
    and the driver adopts the state an actor returns, so later rounds draw as one process would.
    """

    def __init__(
        self,
        cfg: Config,
        sampling: SamplingParams,
        generator: torch.Generator,
        world: World | None = None,
        *,
        log: Callable[[str], None] = print,
    ) -> None:
        self.ray = import_ray()
        self.cfg, self.sampling, self.generator, self.log = cfg, sampling, generator, log
        self.world = world if world is not None else World()
        self.driver = self.world.is_main
        self.started_ray = False
        self.cpus_per_worker = cfg.distributed.cpus_per_worker
        self.rollout_actors: list[Any] = []
        self.reward_actors: list[Any] = []
        self.worker_restarts = 0
        self.rounds = 0
        self._incarnations: dict[str, str] = {}
        self._weights: tuple[int, Any] | None = None
        self._version = 0
        if not self.driver:
            return  # the driver's rounds come broadcast
        try:
            self._start_ray()
            self._create_actors()
        except BaseException:
            self.close()
            raise

    # -- cluster -------------------------------------------------------------------------------

    def _start_ray(self) -> None:
        """Join or start Ray; `started_ray` says whether this source started (and so shuts
        down) the connection."""
        ray, d = self.ray, self.cfg.distributed
        if not ray.is_initialized():
            options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if d.ray_address is None:
                options["num_cpus"] = d.ray_num_cpus
            ray.init(address=d.ray_address, **options)
            self.started_ray = True
        self.cpus_per_worker = fit_cpus(
            self.cfg,
            self.ray.cluster_resources(),
            self.log,
            local=self.started_ray and d.ray_address is None,
        )

    def _create_actors(self) -> None:
        cfg, d = self.cfg, self.cfg.distributed
        common = {
            "num_cpus": self.cpus_per_worker,
            "max_restarts": d.max_restarts,
            "max_task_retries": d.max_restarts,
        }
        rollout_cls = self.ray.remote(num_gpus=d.gpus_per_rollout_worker, **common)(RolloutWorker)
        reward_cls = self.ray.remote(**common)(RewardWorker)
        env = cfg.environment if cfg.environment.name else None
        self.rollout_actors = [
            rollout_cls.remote(cfg.model, cfg.rollout, env) for _ in range(d.rollout_workers)
        ]
        self.reward_actors = [
            reward_cls.remote(cfg.reward.verifier, cfg.reward.workers, cfg.reward.timeout_s)
            for _ in range(d.reward_workers)
        ]

    def close(self) -> None:
        """Stop the actors, and Ray itself when this source started it."""
        ray = getattr(self, "ray", None)
        if ray is None or not self.driver or not ray.is_initialized():
            return
        for actor in [*self.rollout_actors, *self.reward_actors]:
            ray.kill(actor, no_restart=True)
        self.rollout_actors, self.reward_actors = [], []
        self._weights = None
        if self.started_ray:
            ray.shutdown()
            self.started_ray = False

    # -- one round -----------------------------------------------------------------------------

    def sync(self, model: torch.nn.Module) -> None:
        """Called in the main thread right before the weights the next batch is drawn from are
        fixed (before an on-policy collect; before an off-policy collect is handed to the
        background thread, i.e. before this step's update): put them now (the driver)."""
        self._version += 1
        if self.driver:
            self._weights = (self._version, self.ray.put(sync_state(model)))

    def dispatch_generate(
        self,
        prompts: list[list[int]],
        g: int,
        seed_state: torch.Tensor,
        samples: list[Mapping[str, Any]] | None = None,
    ) -> list[tuple[int, Any]]:
        """Send each rollout actor its contiguous shard of the prompts (and of their samples):
        [(first prompt, ref)]."""
        if self._weights is None:
            raise RuntimeError("RayRollouts.round before any sync: the actors have no weights")
        version, ref = self._weights
        shards = shard_ranges(len(prompts), len(self.rollout_actors))
        return [
            (
                lo,
                actor.generate.remote(
                    [ref],
                    version,
                    prompts[lo:hi],
                    g,
                    self.sampling,
                    seed_state,
                    lo * g,
                    None if samples is None else list(samples[lo:hi]),
                ),
            )
            for actor, (lo, hi) in zip(self.rollout_actors, shards)
        ]

    def dispatch_score(
        self,
        texts: list[str],
        row_samples: list[Mapping[str, Any]],
        prompt_index: list[int] | None = None,
        skip: list[bool] | None = None,
    ) -> list[tuple[int, Any]]:
        """Send each reward actor its contiguous shard of the rows: [(first row, ref)];
        `prompt_index`: each row's prompt, which names a failed row's sample when it has no id;
        `skip`: rows whose environment gave their reward (not scored)."""
        shards = shard_ranges(len(texts), len(self.reward_actors))
        index = prompt_index if prompt_index is not None else list(range(len(texts)))
        return [
            (
                lo,
                actor.score.remote(
                    texts[lo:hi],
                    row_samples[lo:hi],
                    lo,
                    index[lo:hi],
                    skip[lo:hi] if skip is not None else None,
                ),
            )
            for actor, (lo, hi) in zip(self.reward_actors, shards)
        ]

    def gather(self, kind: str, refs: list[tuple[int, Any]]) -> list[Any]:
        """ray.get each result in order; a worker beyond its restarts is a one-line WorkerLost.
        A changed incarnation id is a restart: logged and counted."""
        out = []
        for k, (_, ref) in enumerate(refs):
            name = f"{kind} worker {k}"
            try:
                result = self.ray.get(ref)
            except self.ray.exceptions.RayActorError:
                raise WorkerLost(
                    f"ray {name} died in rollout round {self.rounds} and could not be restarted "
                    f"or its batch retried (distributed.max_restarts="
                    f"{self.cfg.distributed.max_restarts})"
                ) from None
            seen = self._incarnations.get(name)
            if seen is not None and seen != result.incarnation:
                self.worker_restarts += 1
                self.log(f"ray: {name} was restarted in rollout round {self.rounds}; retried")
            self._incarnations[name] = result.incarnation
            out.append(result)
        return out

    def round(
        self,
        samples: list[Mapping[str, Any]],
        g: int,
        encode: Callable[[Mapping], list[int]],
        feed: WeightFeed | None = None,
    ) -> Round:
        """Generation and scoring in the actors: the same rows, rewards and sampler state as
        one process; under torchrun the driver's round, on every rank. `feed` is not read: an
        actor's call finishes on the weights it started with."""
        if not self.world.distributed:
            return self._round(samples, g, encode)
        made: Any = None
        if self.driver:
            try:
                made = self._round(samples, g, encode)
            except Exception as e:  # noqa: BLE001 - raised on every rank below
                made = e
            made = (made, self.generator.get_state(), self.worker_restarts)
        made, state, self.worker_restarts = self.world.broadcast_object(made)
        if isinstance(made, BaseException):
            raise made
        self.generator.set_state(state)
        if not self.driver:  # the driver counted it in _round
            self.rounds += 1
        return made

    def _round(
        self, samples: list[Mapping[str, Any]], g: int, encode: Callable[[Mapping], list[int]]
    ) -> Round:
        self.rounds += 1
        t0 = time.perf_counter()
        refs = self.dispatch_generate(
            [encode(s) for s in samples], g, self.generator.get_state(), samples
        )
        generated = self.gather("rollout", refs)
        batch = concat_batches([(lo, r.batch) for (lo, _), r in zip(refs, generated)])
        check_rows(batch.prompt_index, len(samples), g)
        if generated:  # every shard drew the same: continue from where one of them stopped
            self.generator.set_state(generated[0].generator_state)
        t_generate = time.perf_counter() - t0
        t0 = time.perf_counter()
        row_samples = [samples[i] for i in batch.prompt_index]
        scored = self.gather(
            "reward",
            self.dispatch_score(
                batch.completion_text, row_samples, batch.prompt_index, batch.environment_scored
            ),
        )
        rewards = [r for part in scored for r in part.rewards]
        if len(rewards) != len(batch):
            raise RowAccountingError(
                f"ray reward: {len(rewards)} rewards for the round's {len(batch)} rows"
            )
        rewards = batch.rewards_with_env(rewards)  # an environment's own reward comes first
        components: dict[str, list[float]] = {}
        for part in scored:
            for name, values in part.components.items():
                components.setdefault(name, []).extend(values)
        t_score = time.perf_counter() - t0
        failures = sum(p.failures for p in scored)
        errors = [f for part in scored for f in part.errors] + batch.environment_failures()
        return Round(batch, rewards, failures, t_generate, t_score, components, errors)

    def metrics(self) -> dict[str, float]:
        return {"ray_worker_restarts": self.worker_restarts}  # since the run started


def fit_cpus(
    cfg: Config, have: Mapping[str, float], log: Callable[[str], None], *, local: bool
) -> float:
    """CPUs to reserve per actor. Actors that do not fit would wait forever: on a local cluster
    (one machine, where a reservation is only a share of its cores) every actor reserves an
    equal share of the cluster instead; a joined cluster may still grow, so there it is only
    said. GPUs a local cluster lacks are a one-line error. `have`: the cluster's resources."""
    d = cfg.distributed
    workers = d.rollout_workers + d.reward_workers
    cpus = have.get("CPU", 0.0)
    need_gpu = d.rollout_workers * d.gpus_per_rollout_worker
    if local and need_gpu > have.get("GPU", 0.0) + 1e-9:
        raise ConfigError(
            f"distributed.gpus_per_rollout_worker: {d.rollout_workers} rollout workers need "
            f"{need_gpu:g} GPUs but the local Ray cluster has {have.get('GPU', 0.0):g}"
        )
    if workers * d.cpus_per_worker <= cpus + 1e-9:
        return d.cpus_per_worker
    if not local:
        log(
            f"warning [ray]: {workers} workers x distributed.cpus_per_worker="
            f"{d.cpus_per_worker:g} need more than the cluster's {cpus:g} CPUs; the workers "
            "wait until the cluster grows"
        )
        return d.cpus_per_worker
    share = math.floor(cpus / workers * 1000) / 1000
    log(
        f"ray: {workers} workers x distributed.cpus_per_worker={d.cpus_per_worker:g} do not "
        f"fit the local cluster's {cpus:g} CPUs; each reserves {share:g} CPUs"
    )
    return share
