"""The GRPO-family RL loop, top to bottom.

One step:
  1. draw prompts, sample G completions each                      (rollout engine)
  2. score every completion with the verifier                      (rewards)
  3. reference log-probs when beta > 0; old-policy log-probs when more than one optimizer
     update is made per batch (with one update, the detached current log-probs are exact)
  4. advantages within each group; zero-variance groups give zero advantage and are counted;
     DAPO dynamic sampling drops them and samples more prompts instead
  5. mu passes over mini-batches: clipped policy loss (+ KL, - entropy bonus), AdamW
  6. metrics, samples for audit, periodic held-out evaluation

The policy used for sampling is the same object the optimizer updates, so no weight sync is
needed in one process.

Under torchrun every rank runs this loop on a replica (see rlvr.distributed.world): it generates
and scores its share of the step's prompts, the scored batch is gathered everywhere, each rank
back-propagates its share of every mini-batch with the global normalisers and the gradients are
summed, so per-step losses and weights equal the single-process run's within fp32 rounding.
Keyed sampling makes the completions themselves identical. Rank 0 alone writes the run dir.

With rollout.off_policy_steps=1 the next step's batch is generated in a background thread, by a
snapshot of the weights taken before this step's update, while the update runs: every batch is
one update stale, and each token's loss is weighted by the truncated importance ratio
min(pi_old / pi_sampler, algorithm.tis_cap) (Yao et al. 2025, "truncated importance sampling").
"""

from __future__ import annotations

import copy
import json
import math
import random
import signal
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from rlvr.algorithms import (
    aggregate_loss,
    get_advantage_estimator,
    group_stats,
    kl_in_reward,
    kl_penalty,
    masked_mean,
    policy_loss,
)
from rlvr.config import Config, dump_yaml, to_dict
from rlvr.data.registry import build_task
from rlvr.distributed.world import World, init_world
from rlvr.errors import ConfigError, UserError
from rlvr.models.loading import (
    encode_prompt,
    load_model,
    load_tokenizer,
    resolve_device,
    resolve_dtype,
    uses_chat_template,
)
from rlvr.models.lora import is_lora, reference_context
from rlvr.observe.diagnostics import diagnose
from rlvr.observe.loggers import build_loggers
from rlvr.observe.metrics import JsonlWriter, Progress, memory_metrics, percentile
from rlvr.rewards.compose import build_verifier
from rlvr.rewards.exact import is_reasoning
from rlvr.rewards.length import overlong_penalties
from rlvr.rewards.pool import VerifierPool
from rlvr.rewards.scoring import Scorer
from rlvr.rollout import RolloutBatch, SamplingParams, build_engine, concat_batches
from rlvr.training.allocator import keep_freed_memory
from rlvr.training.checkpoint import (
    incomplete_checkpoints,
    latest_checkpoint,
    load_checkpoint_state,
    restore_rng_state,
    rng_state,
    save_checkpoint,
    save_model,
    truncate_jsonl,
)
from rlvr.training.evaluate import evaluate
from rlvr.training.logprobs import (
    TokenBatch,
    check_output_head,
    completion_logprobs,
    make_token_batch,
)
from rlvr.training.optim import build_optimizer, build_scheduler
from rlvr.training.packing import (
    PackedRows,
    attention_pair_cost,
    packed_completion_logprobs,
    packed_micro_batches,
)


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
    components: dict[str, list[float]] = field(default_factory=dict)  # composite verifier parts
    task_metrics: dict[str, float] = field(default_factory=dict)  # e.g. the curriculum level


class GRPOTrainer:
    """Owns the run's state (model, optimizer, step, RNGs) and composes the parts."""

    def __init__(
        self,
        cfg: Config,
        run_dir: Path,
        *,
        progress: bool = True,
        log: Callable[[str], None] = print,
        resume: bool = False,
        world: World | None = None,
    ) -> None:
        self.cfg = cfg
        self.resume = resume
        self.run_dir = run_dir
        self.world = world if world is not None else init_world(cfg.distributed.backend)
        self.main = self.world.is_main  # rank 0 logs, evaluates and writes the run directory
        self.log = log if self.main else (lambda _msg: None)
        self.show_progress = progress and cfg.logging.progress and self.main
        torch.manual_seed(cfg.training.seed)
        if cfg.checkpoint.deterministic:
            torch.use_deterministic_algorithms(True, warn_only=True)
        self.prompt_rng = random.Random(cfg.data.seed * 1_000_003 + cfg.training.seed)
        self.sample_gen = torch.Generator().manual_seed(cfg.training.seed)
        self.shuffle_gen = torch.Generator().manual_seed(cfg.training.seed + 1)

        self.device = resolve_device(cfg.model.device)
        if self.device.type == "cuda" and self.world.distributed:
            self.device = torch.device("cuda", self.world.local_rank)
        self.dtype = resolve_dtype(cfg.model.dtype, self.device)
        if cfg.training.keep_freed_memory and self.device.type == "cpu":
            keep_freed_memory()  # before the model: its blocks come from the kept heap too
        self.verifier = build_verifier(cfg.reward.verifier)
        self.pool = (
            VerifierPool(cfg.reward.verifier, cfg.reward.workers, cfg.reward.timeout_s)
            if cfg.reward.workers > 0
            else None
        )
        self.scorer = Scorer(self.verifier, self.pool)
        self.task = build_task(cfg.data)
        self.tokenizer = load_tokenizer(
            cfg.model.name_or_path, cfg.model.trust_remote_code, cfg.model.gguf_file
        )
        self.chat = uses_chat_template(self.tokenizer, cfg.model.chat_template)
        self.model = load_model(cfg.model, self.device, self.dtype, train=True)
        self.world.broadcast_parameters(self.model)  # replicas start identical
        # beta = 0 needs no reference at all; with LoRA the reference is the policy's own frozen
        # base with its adapters switched off, so no second copy of the weights is held.
        self.use_ref = cfg.algorithm.kl_coef > 0
        self.ref_model = (
            load_model(cfg.model, self.device, self.dtype, train=False)
            if self.use_ref and not is_lora(self.model)
            else None
        )
        # Off-policy rollouts run on a snapshot of the weights while the update changes the
        # policy; held-out evaluation always sees the current policy.
        self.off_policy = cfg.rollout.off_policy_steps > 0
        if self.off_policy and self.world.distributed:
            raise ConfigError(
                "rollout.off_policy_steps=1: not supported under torchrun yet (the background "
                "rollout thread would interleave collectives); use 0, or the Ray mode"
            )
        self.rollout_model = self.model
        self.fsdp_root = None
        self.fsdp = self.world.distributed and cfg.distributed.strategy == "fsdp"
        if self.fsdp and is_lora(self.model):
            raise ConfigError(
                "distributed.strategy=fsdp: LoRA adapters are small enough to replicate; use "
                "distributed.strategy=ddp with model.lora_rank"
            )
        if self.off_policy or self.fsdp:
            # FSDP shards the policy; generation needs whole weights: a replica, synced per step
            self.rollout_model = copy.deepcopy(self.model).eval().requires_grad_(False)
        if self.fsdp:
            from rlvr.distributed.fsdp import shard_policy

            self.fsdp_root = shard_policy(self.model)
        self.engine = build_engine(
            cfg.rollout.engine,
            self.rollout_model,
            self.tokenizer,
            max_batch_size=cfg.rollout.max_batch_size,
        )
        self.eval_engine = (
            build_engine(
                cfg.rollout.engine,
                self.model,
                self.tokenizer,
                max_batch_size=cfg.rollout.max_batch_size,
            )
            if self.off_policy  # with FSDP the replica is synced before every evaluation
            else self.engine
        )
        self.sampling = SamplingParams(
            temperature=cfg.rollout.temperature,
            top_p=cfg.rollout.top_p,
            top_k=cfg.rollout.top_k,
            max_new_tokens=cfg.rollout.max_new_tokens,
            stop=tuple(cfg.rollout.stop),
        )
        self.estimator = get_advantage_estimator(cfg.algorithm.advantage)
        batch = cfg.rollout.prompts_per_step * cfg.rollout.group_size
        self.mini_batch_size = cfg.training.mini_batch_size or batch
        self.updates_per_step = cfg.training.ppo_epochs * (batch // self.mini_batch_size)
        self.optimizer = build_optimizer(self.model, cfg.optimizer)
        self.scheduler = build_scheduler(
            self.optimizer, max(1, cfg.training.steps * self.updates_per_step), cfg.optimizer
        )
        self.pad_id = self.tokenizer.pad_token_id
        self._pair_cost = attention_pair_cost(self.rollout_model)  # whole weights under FSDP
        self.data_report: dict[str, Any] | None = None
        self.consecutive_skips = 0  # optimizer updates skipped in a row for a NaN/inf
        if cfg.data.max_prompt_tokens and cfg.data.task == "dataset":
            from rlvr.data.datasets import filter_long_prompts

            report = filter_long_prompts(
                self.task,
                lambda text: len(self.encode({"prompt": text})),
                cfg.data.max_prompt_tokens,
            )
            self.data_report = report
            self.log(
                f"data: dropped {report['dropped_train']} train and {report['dropped_eval']} "
                f"held-out prompts ({report['reason']})"
            )
        eval_size = cfg.eval.size
        if hasattr(self.task, "eval"):  # a dataset holds out what it holds out
            eval_size = min(eval_size, len(self.task.eval))
        self.heldout = self.task.heldout(eval_size) if eval_size else []
        self.step = 0

    # -- prompts -------------------------------------------------------------------------------

    def encode(self, sample: Mapping[str, Any]) -> list[int]:
        return encode_prompt(
            self.tokenizer,
            sample["prompt"],
            chat=self.chat,
            system_prompt=sample.get("system") or self.cfg.data.system_prompt,
        )

    # -- step 1-2: rollouts and rewards --------------------------------------------------------

    def collect(self, step: int | None = None) -> ScoredRollouts:
        """Sample and score the batch of `step` (default: the current step). With dynamic
        sampling, groups whose rewards are all equal are dropped and further rounds of prompts
        are sampled (at most max_sampling_rounds) until prompts_per_step informative groups are
        collected."""
        cfg = self.cfg
        step = self.step if step is None else step
        want = cfg.rollout.prompts_per_step
        g = cfg.rollout.group_size
        rounds: list[tuple[RolloutBatch, list, list[float]]] = []
        kept: list[tuple[int, int]] = []  # (round, group within round)
        failures, t_generate, t_score = 0, 0.0, 0.0
        max_rounds = 1 + (
            cfg.algorithm.max_sampling_rounds if cfg.algorithm.dynamic_sampling else 0
        )
        if hasattr(self.task, "on_step"):  # curricula: difficulty may follow training progress
            self.task.on_step(step - 1, cfg.training.steps)  # 0-based
        while len(rounds) < max_rounds and len(kept) < want:
            samples = [self.task.sample_train(self.prompt_rng) for _ in range(want)]
            batch, rewards, f, dt_generate, dt_score = self.rollout_round(samples, g)
            t_generate += dt_generate
            t_score += dt_score
            failures += f
            if hasattr(self.task, "observe"):  # adaptive curricula see the verifier's rewards
                self.task.observe([samples[i] for i in batch.prompt_index], rewards)
            if cfg.reward.overlong_buffer:
                penalties = overlong_penalties(
                    batch.completion_lengths,
                    cfg.rollout.max_new_tokens,
                    cfg.reward.overlong_buffer,
                    cfg.reward.overlong_penalty_factor,
                )
                rewards = [r + p for r, p in zip(rewards, penalties)]
            rounds.append((batch, samples, rewards))
            for j in range(want):
                group = rewards[j * g : (j + 1) * g]
                if cfg.algorithm.dynamic_sampling and max(group) == min(group):
                    continue
                kept.append((len(rounds) - 1, j))
        kept = kept[:want]
        groups_kept = len(kept)
        if not kept:  # nothing informative in any round: train on the last round as it is
            kept = [(len(rounds) - 1, j) for j in range(want)]
        rows = [(r, j * g + k) for r, j in kept for k in range(g)]
        merged = RolloutBatch(
            prompt_ids=[rounds[r][0].prompt_ids[i] for r, i in rows],
            completion_ids=[rounds[r][0].completion_ids[i] for r, i in rows],
            completion_text=[rounds[r][0].completion_text[i] for r, i in rows],
            logprobs=[rounds[r][0].logprobs[i] for r, i in rows],
            finish_reason=[rounds[r][0].finish_reason[i] for r, i in rows],
            prompt_index=[gi for gi in range(len(kept)) for _ in range(g)],
        )
        row_samples = [rounds[r][1][i // g] for r, i in rows]
        rewards_t = torch.tensor([rounds[r][2][i] for r, i in rows], dtype=torch.float32)
        return ScoredRollouts(
            merged,
            row_samples,
            rewards_t,
            failures,
            len(rounds),
            groups_kept,
            t_generate,
            t_score,
            components=self.scorer.pop_components(),
            task_metrics=self.task.metrics() if hasattr(self.task, "metrics") else {},
        )

    def rollout_round(
        self, samples: list[Mapping[str, Any]], g: int
    ) -> tuple[RolloutBatch, list[float], int, float, float]:
        """Generate g completions for each sample and score them: (batch, rewards, verifier
        failures, generate seconds, score seconds). With several ranks, each rank does its
        contiguous share of the prompts (keyed sampling with the global row offset, so the rows
        are those one process would draw) and the results are gathered on every rank."""
        lo, hi = self.world.shard(len(samples))
        t0 = time.perf_counter()
        batch = self._generate([self.encode(s) for s in samples[lo:hi]], g, first_row=lo * g)
        t_generate = time.perf_counter() - t0
        t0 = time.perf_counter()
        rewards, failures = self.scorer(
            batch.completion_text, [samples[lo + i] for i in batch.prompt_index]
        )
        t_score = time.perf_counter() - t0
        if not self.world.distributed:
            return batch, rewards, failures, t_generate, t_score
        parts = self.world.all_gather_object(
            (lo, batch, rewards, failures, self.scorer.pop_components())
        )
        batch = concat_batches([(first, part) for first, part, *_ in parts])
        rewards = [r for part in parts for r in part[2]]
        for *_, components in parts:
            for name, values in components.items():
                self.scorer.components.setdefault(name, []).extend(values)
        return batch, rewards, sum(p[3] for p in parts), t_generate, t_score

    # -- step 3-5: the update ------------------------------------------------------------------

    def _micro_batches(
        self, tokens: TokenBatch, rows: torch.Tensor
    ) -> list[tuple[torch.Tensor, TokenBatch | PackedRows]]:
        """The forward/backward units over `rows` (indices into tokens), each with its rows:
        padded slices of micro_batch_size rows, or with training.token_budget > 0 packed
        sequences of at most token_budget tokens (and micro_batch_size rows) in all."""
        t = self.cfg.training
        if t.token_budget == 0:
            mbs = t.micro_batch_size
            return [
                (rows[s : s + mbs], tokens.rows(rows[s : s + mbs]))
                for s in range(0, len(rows), mbs)
            ]
        prompts, completions = tokens.unpadded()
        packs = packed_micro_batches(
            prompts,
            completions,
            rows.tolist(),
            token_budget=t.token_budget,
            max_rows=t.micro_batch_size,
            pad_id=self.pad_id,
            share_prompts=t.share_prompts,
            pair_cost=self._pair_cost,
        )
        return [(p.rows, p) for p in packs]

    def _check_packed_head(self, tokens: TokenBatch) -> None:
        """Once per run: the packed path rebuilds the logits from the decoder's hidden states and
        the output head; refuse an architecture whose forward transforms them in another way."""
        if getattr(self, "_packed_head_checked", False):
            return
        prompts, completions = tokens.unpadded()
        ids = torch.cat([prompts[0], completions[0]])[None]
        model = self.rollout_model if self.fsdp else self.model  # FSDP: the whole-weight replica
        was_training = model.training
        model.eval()  # no dropout: the two forwards must see the same network
        error = check_output_head(model, ids)
        model.train(was_training)
        if error > 1e-3:
            raise ConfigError(
                "training.token_budget: this model's logits are not its output head applied to "
                f"its decoder's hidden states (relative difference {error:.2g}); set "
                "training.token_budget=0 to train it with padded micro-batches"
            )
        self._packed_head_checked = True

    def _unit_logprobs(
        self, model: Any, unit: TokenBatch | PackedRows, **options: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`_unit_logprobs_of`; for the sharded policy inside the FSDP root's forward, so its
        parameters are gathered around the call."""
        if self.fsdp_root is not None and model is self.model:
            return self.fsdp_root(self._unit_logprobs_of, unit, **options)
        return self._unit_logprobs_of(model, unit, **options)

    def _unit_logprobs_of(
        self,
        model: Any,
        unit: TokenBatch | PackedRows,
        *,
        with_entropy: bool = False,
        entropy_grad: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """[R, width] completion log-probs (and entropies) of one micro-batch's rows."""
        if isinstance(unit, PackedRows):
            return packed_completion_logprobs(
                model,
                unit,
                temperature=self._temperature(),
                chunk_size=self.cfg.training.logprob_chunk,
                with_entropy=with_entropy,
                entropy_grad=entropy_grad,
            )
        return completion_logprobs(
            model,
            unit,
            temperature=self._temperature(),
            with_entropy=with_entropy,
            entropy_grad=entropy_grad,
        )

    @torch.no_grad()
    def _logprobs_no_grad(self, model: Any, tokens: TokenBatch) -> torch.Tensor:
        """[N, T] completion log-probs of every row; each rank computes its share of the rows
        and the others' shares arrive by a sum over ranks (they are zero elsewhere)."""
        out = torch.zeros(tokens.completion_mask.shape)
        units = self._micro_batches(tokens, self.world.rows(torch.arange(len(tokens))))
        sharded = self.fsdp_root is not None and model is self.model
        idle = self._passes_behind(len(units)) if sharded else 0
        for rows, unit in units:
            lp, _ = self._unit_logprobs(model, unit)
            out[rows, : lp.shape[1]] = lp.float().cpu()
        self._idle_passes(tokens, idle)
        return self.world.all_reduce(out)

    def _passes_behind(self, mine: int) -> int:
        """FSDP gathers and reduce-scatters inside every forward/backward, so all ranks must make
        as many passes: how many fewer this rank, which makes `mine`, makes than the busiest. A
        collective, so asked before any pass (a rank still in its passes could not answer)."""
        return int(self.world.all_reduce(torch.tensor(mine), "max")) - mine

    def _idle_passes(self, tokens: TokenBatch, count: int, backward: bool = False) -> None:
        """`count` passes of one row with zero weight, to match the busiest rank's passes."""
        for _ in range(count):
            lp, _ = self._unit_logprobs(
                self.model, self._micro_batches(tokens, torch.arange(1))[0][1]
            )
            if backward:
                (lp.sum() * 0.0).backward()

    def _reference_logprobs(self, tokens: TokenBatch) -> torch.Tensor:
        if self.ref_model is not None:
            return self._logprobs_no_grad(self.ref_model, tokens)
        with reference_context(self.model) as base:
            return self._logprobs_no_grad(base, tokens)

    def _on_skipped_updates(self, skipped: int) -> None:
        limit = self.cfg.training.max_consecutive_skips
        self.log(
            f"warning [nonfinite] step {self.step}: {skipped} update(s) skipped for a NaN/inf "
            f"loss or gradient ({self.consecutive_skips} in a row, limit {limit})"
        )
        if self.consecutive_skips >= limit:
            last = latest_checkpoint(self.run_dir)
            where = f"the last good checkpoint is {last}" if last else "no checkpoint was saved"
            raise TrainingAborted(
                f"aborting at step {self.step}: {self.consecutive_skips} consecutive updates had "
                f"a NaN/inf loss or gradient (training.max_consecutive_skips={limit}); {where}"
            )

    def _generate(self, prompt_ids: list[list[int]], g: int, first_row: int = 0) -> RolloutBatch:
        """engine.generate; on out-of-memory, halve the rows decoded together and retry (the
        sampler's RNG is rewound, so the retry draws as a fresh attempt would). Logged."""
        while True:
            rng = self.sample_gen.get_state()
            try:
                batch = self.engine.generate(
                    prompt_ids, g, self.sampling, generator=self.sample_gen, first_row=first_row
                )
                self.engine.release_weights()  # the update changes them: no use keeping copies
                return batch
            except torch.OutOfMemoryError:
                size = self.engine.max_batch_size
                if size <= 1:
                    raise
                self.engine.max_batch_size = max(1, size // 2)
                self.sample_gen.set_state(rng)
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                self.log(
                    f"warning [oom] step {self.step}: out of memory while generating "
                    f"{size} rows at once; retrying with rollout.max_batch_size="
                    f"{self.engine.max_batch_size} for the rest of the run"
                )

    # -- resumable checkpoints -----------------------------------------------------------------

    def _rngs(self) -> tuple[dict[str, Any], dict[str, Any]]:
        return {"prompt": self.prompt_rng}, {"sample": self.sample_gen, "shuffle": self.shuffle_gen}

    def _save_checkpoint(
        self, history: list[dict], eval_before: Any, pending: ScoredRollouts | None = None
    ) -> None:
        """Rank 0 writes the checkpoint; under FSDP every rank calls this (the unsharded states
        are gathered collectively) and the whole-weight replica is what gets saved."""
        model, optimizer_state = self.model, None
        if self.fsdp:
            from rlvr.distributed.fsdp import full_optimizer_state

            self._sync_rollout_weights()
            model = self.rollout_model
            optimizer_state = full_optimizer_state(self.model, self.optimizer)
        if not self.main:
            return
        state = {
            "pending": pending,  # off-policy: the next step's batch, already generated
            "optimizer": optimizer_state or self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": rng_state(*self._rngs()),
            "task": self.task.state_dict() if hasattr(self.task, "state_dict") else None,
            "history": history,
            "eval_before": eval_before,
        }
        save_checkpoint(
            self.run_dir,
            self.step,
            model,
            self.tokenizer,
            state,
            self.cfg.checkpoint.keep_last,
        )

    def _restore(self) -> dict | None:
        """Load the latest complete checkpoint of run_dir, if any; None means start afresh."""
        skipped = incomplete_checkpoints(self.run_dir)
        if skipped:
            self.log(f"ignoring incomplete checkpoint(s) left by a crash: {', '.join(skipped)}")
        path = latest_checkpoint(self.run_dir)
        if path is None:
            return None
        state = load_checkpoint_state(path)
        if self.fsdp:
            from rlvr.distributed.fsdp import load_full_state

            load_full_state(self.model, self.optimizer, state["model"], state["optimizer"])
        else:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        restore_rng_state(state["rng"], *self._rngs())
        if state.get("task") is not None and hasattr(self.task, "load_state_dict"):
            self.task.load_state_dict(state["task"])
        self.step = state["step"]
        if self.main:
            truncate_jsonl(self.run_dir / "metrics.jsonl", self.step)
            truncate_jsonl(self.run_dir / "timings.jsonl", self.step)
        return state

    def _sync_rollout_weights(self) -> None:
        """The rollout replica (off-policy snapshot, FSDP's whole-weight copy) takes the
        learner's current weights; under FSDP a collective every rank makes."""
        if self.rollout_model is self.model:
            return
        if self.fsdp:
            from rlvr.distributed.fsdp import full_model_state

            state = full_model_state(self.model)
        else:
            state = self.model.state_dict()
        with torch.no_grad():
            self.rollout_model.load_state_dict(state)

    def _collect_stale(self, step: int) -> ScoredRollouts:
        scored = self.collect(step)
        scored.staleness = 1
        return scored

    def _temperature(self) -> float:
        return self.cfg.rollout.temperature if self.cfg.rollout.temperature > 0 else 1.0

    def update(self, scored: ScoredRollouts) -> tuple[dict[str, float], torch.Tensor]:
        """Optimise on one scored batch; returns the step's stats and the advantages used."""
        cfg, alg = self.cfg, self.cfg.algorithm
        batch = scored.batch
        tokens = make_token_batch(batch.prompt_ids, batch.completion_ids, self.pad_id)
        if cfg.reward.mask_truncated:  # DAPO overlong filtering: truncated rows give no gradient
            tokens.completion_mask[torch.tensor(batch.truncated, dtype=torch.bool)] = 0.0
        mask = tokens.completion_mask
        timings: dict[str, float] = {}

        if cfg.training.token_budget > 0:
            self._check_packed_head(tokens)
        t0 = time.perf_counter()
        need_old = self.updates_per_step > 1 or alg.kl_in_reward or self.off_policy
        old_lp = self._logprobs_no_grad(self.model, tokens) if need_old else None
        # the sampler's own log-probs, for the truncated importance weights of off-policy rows
        sampler_lp = _padded(batch.logprobs, mask.shape) if self.off_policy else None
        ref_lp = self._reference_logprobs(tokens) if self.use_ref else None
        timings["time_logprobs_s"] = time.perf_counter() - t0

        rewards = scored.rewards
        stats: dict[str, float] = {}
        if ref_lp is not None and alg.kl_in_reward:
            rewards = kl_in_reward(
                rewards, kl_penalty(old_lp, ref_lp, alg.kl_estimator), mask, alg.kl_coef
            )
        advantages = self._advantages(rewards, batch.group_ids)
        n = len(batch)
        # A row whose advantage is 0 everywhere has exactly zero gradient when the loss has no
        # term but the surrogate (-A * ratio, clipped, times the TIS weight): its forward and
        # backward are skipped; the normalisers below still count it (docs/training-speed.md).
        skip_zero = (
            cfg.training.skip_zero_advantage
            and alg.entropy_coef == 0
            and (ref_lp is None or alg.kl_in_reward)
        )
        active = advantages.reshape(n, -1).ne(0).any(dim=1) if skip_zero else None

        t0 = time.perf_counter()
        totals: dict[str, float] = {}
        token_weight = 0.0
        grad_norms, losses, ratio_min, ratio_max = [], [], math.inf, -math.inf
        skipped, rows_skipped = 0, 0
        forward_tokens, padding_tokens = 0, 0
        self.model.train()
        for _epoch in range(cfg.training.ppo_epochs):
            order = torch.randperm(n, generator=self.shuffle_gen)
            for start in range(0, n, self.mini_batch_size):
                mb_rows = order[start : start + self.mini_batch_size]
                num_seqs = float(len(mb_rows))
                num_tokens = float(mask[mb_rows].sum())
                if active is not None:
                    run = mb_rows[active[mb_rows]]
                    # none active: one row still runs (zero gradient), so the optimizer steps as
                    # it would unskipped (momentum, weight decay) and every rank's path is kept
                    run = run if len(run) else mb_rows[:1]
                    rows_skipped += len(mb_rows) - len(run)
                    mb_rows = run
                self.optimizer.zero_grad(set_to_none=True)
                mb_loss = 0.0
                # this rank's share; the normalisers above count the whole mini-batch
                units = self._micro_batches(tokens, self.world.rows(mb_rows))
                idle = self._passes_behind(len(units)) if self.fsdp else 0
                for rows, unit in units:
                    total, real = _token_counts(unit)
                    forward_tokens += total
                    padding_tokens += total - real
                    lp, ent = self._unit_logprobs(
                        self.model, unit, with_entropy=True, entropy_grad=alg.entropy_coef > 0
                    )
                    width = lp.shape[1]
                    mask_rows = mask[rows, :width]
                    m = mask_rows.to(self.device)
                    old = (
                        old_lp[rows, :width].to(self.device) if old_lp is not None else lp.detach()
                    )
                    per_token, pstats = policy_loss(
                        lp,
                        old,
                        advantages[rows].to(self.device),
                        m,
                        clip_ratio_low=alg.clip_ratio_low,
                        clip_ratio_high=alg.clip_ratio_high,
                        dual_clip_c=alg.dual_clip_c,
                        ratio_level=alg.ratio_level,
                    )
                    if sampler_lp is not None:
                        # truncated importance sampling: pi_old / pi_sampler, capped, no gradient
                        ratio = torch.exp(old - sampler_lp[rows, :width].to(self.device))
                        tis = ratio.clamp(max=alg.tis_cap)
                        per_token = per_token * tis
                        pstats["tis_weight_mean"] = masked_mean(tis, m)
                        pstats["tis_clip_fraction"] = masked_mean((ratio > alg.tis_cap).float(), m)
                    agg = dict(
                        mode=alg.loss_aggregation,
                        max_tokens=cfg.rollout.max_new_tokens,
                        num_sequences=num_seqs,
                        num_tokens=num_tokens,
                    )
                    loss = aggregate_loss(per_token, m, **agg)
                    if ref_lp is not None and not alg.kl_in_reward:
                        kl = kl_penalty(lp, ref_lp[rows, :width].to(self.device), alg.kl_estimator)
                        loss = loss + alg.kl_coef * aggregate_loss(kl, m, **agg)
                        pstats["kl"] = masked_mean(kl.detach(), m)
                    elif ref_lp is not None:
                        pstats["kl"] = masked_mean(
                            kl_penalty(
                                old_lp[rows, :width], ref_lp[rows, :width], alg.kl_estimator
                            ),
                            mask_rows,
                        )
                    if alg.entropy_coef > 0:
                        loss = loss - alg.entropy_coef * aggregate_loss(ent, m, **agg)
                    # FSDP averages gradients over ranks: scaled, the mean is the sum
                    (loss * self.world.size if self.fsdp else loss).backward()
                    w = float(m.sum())
                    token_weight += w
                    pstats["entropy"] = masked_mean(ent.detach(), m)
                    mb_loss += float(loss.detach())
                    for k, v in pstats.items():
                        if k == "ratio_min":
                            ratio_min = min(ratio_min, float(v))
                        elif k == "ratio_max":
                            ratio_max = max(ratio_max, float(v))
                        else:
                            totals[k] = totals.get(k, 0.0) + float(v) * w
                if self.fsdp:
                    self._idle_passes(tokens, idle, backward=True)
                else:
                    self.world.all_reduce_grads(self.model.parameters())
                mb_loss = float(self.world.all_reduce(torch.tensor(mb_loss, dtype=torch.float64)))
                max_norm = (
                    cfg.optimizer.max_grad_norm if cfg.optimizer.max_grad_norm > 0 else math.inf
                )
                grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
                if hasattr(grad_norm, "full_tensor"):  # FSDP: a DTensor
                    grad_norm = grad_norm.full_tensor()
                if not (math.isfinite(float(grad_norm)) and math.isfinite(mb_loss)):
                    # A NaN/inf loss or gradient: skip this update, keep the weights; the
                    # schedule still advances so it stays a function of the step.
                    self.optimizer.zero_grad(set_to_none=True)
                    self.scheduler.step()
                    skipped += 1
                    self.consecutive_skips += 1
                    continue
                self.consecutive_skips = 0
                grad_norms.append(float(grad_norm))
                losses.append(mb_loss)
                self.optimizer.step()
                self.scheduler.step()
        timings["time_update_s"] = time.perf_counter() - t0
        if self.world.distributed:  # the step's statistics over all ranks' rows
            parts = self.world.all_gather_object(
                (totals, token_weight, ratio_min, ratio_max, forward_tokens, padding_tokens)
            )
            totals = {}
            for part_totals, *_ in parts:
                for k, v in part_totals.items():
                    totals[k] = totals.get(k, 0.0) + v
            token_weight = sum(p[1] for p in parts)
            ratio_min, ratio_max = min(p[2] for p in parts), max(p[3] for p in parts)
            forward_tokens, padding_tokens = sum(p[4] for p in parts), sum(p[5] for p in parts)
        for k, v in totals.items():
            stats[k] = v / max(token_weight, 1.0)
        stats["ratio_min"], stats["ratio_max"] = ratio_min, ratio_max
        # share of the update's forward tokens that are padding (a few % when packed)
        stats["padding_fraction"] = padding_tokens / max(forward_tokens, 1)
        stats["update_tokens"] = forward_tokens  # fewer with shared prompts; padding included
        stats["grad_norm"] = sum(grad_norms) / max(1, len(grad_norms))
        stats["skipped_updates"] = skipped
        stats["update_rows_skipped"] = rows_skipped  # zero-advantage rows not run, all passes
        # With one update per batch the clipped loss is ~0 by construction (ratio = 1, only its
        # gradient matters); see docs. advantage_abs_mean shows the signal strength instead.
        stats["loss"] = sum(losses) / max(1, len(losses))
        stats["lr"] = self.scheduler.get_last_lr()[0]
        stats["advantage_abs_mean"] = float(advantages.abs().mean())
        stats.update(timings)
        stats["tokens_per_s_train"] = (
            float(mask.sum()) * cfg.training.ppo_epochs / max(timings["time_update_s"], 1e-9)
        )
        return stats, advantages

    def _advantages(self, rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
        alg = self.cfg.algorithm
        if alg.advantage in ("grpo", "reinforce_pp", "reinforce_pp_baseline"):
            return self.estimator(rewards, group_ids, std=alg.std, eps=alg.eps)
        return self.estimator(rewards, group_ids)

    # -- step 6: metrics -----------------------------------------------------------------------

    def rollout_metrics(self, scored: ScoredRollouts) -> dict[str, float]:
        batch, rewards = scored.batch, scored.rewards
        lengths = batch.completion_lengths
        correct = [ln for ln, r in zip(lengths, rewards.tolist()) if r >= 1.0]
        wrong = [ln for ln, r in zip(lengths, rewards.tolist()) if r < 1.0]
        m: dict[str, float] = {
            "reward_mean": float(rewards.mean()),
            "reward_std": float(rewards.std(unbiased=False)),
            "verifier_failures": scored.verifier_failures,
            "completion_length_mean": sum(lengths) / len(lengths),
            "completion_length_p95": percentile(lengths, 95),
            "completion_length_max": max(lengths),
            "completion_length_correct_mean": sum(correct) / len(correct)
            if correct
            else float("nan"),
            "completion_length_incorrect_mean": sum(wrong) / len(wrong) if wrong else float("nan"),
            "truncated_fraction": sum(batch.truncated) / len(batch),
            "reasoning_fraction": sum(is_reasoning(t) for t in batch.completion_text) / len(batch),
        }
        m.update({k: float(v) for k, v in group_stats(rewards, batch.group_ids).items()})
        for name, values in scored.components.items():
            t = torch.tensor(values)
            m[f"reward/{name}_mean"] = float(t.mean())
            m[f"reward/{name}_std"] = float(t.std(unbiased=False))
        if self.cfg.algorithm.dynamic_sampling:
            m["dynamic_sampling_fill_rate"] = scored.groups_kept / self.cfg.rollout.prompts_per_step
            m["dynamic_sampling_rounds"] = scored.rounds
        return m

    def write_samples(self, scored: ScoredRollouts, advantages: torch.Tensor) -> None:
        """samples/step-N.jsonl: every completion of the step, highest reward first."""
        out = self.run_dir / "samples"
        out.mkdir(exist_ok=True)
        rows = []
        for i in range(len(scored.batch)):
            s = scored.samples[i]
            rows.append(
                {
                    "step": self.step,
                    "group": int(scored.batch.group_ids[i]),
                    "prompt": s["prompt"],
                    "completion": scored.batch.completion_text[i],
                    "answer": s.get("answer"),
                    "reward": float(scored.rewards[i]),
                    "advantage": float(advantages[i]),
                    "finish_reason": scored.batch.finish_reason[i],
                }
            )
        rows.sort(key=lambda r: -r["reward"])
        with (out / f"step-{self.step}.jsonl").open("w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")

    def run_eval(self) -> dict[str, float]:
        cfg = self.cfg
        return evaluate(
            self.eval_engine,
            self.heldout,
            [self.encode(s) for s in self.heldout],
            self.verifier,
            max_new_tokens=cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens,
            t1_samples=cfg.eval.t1_samples,
            seed=cfg.training.seed + 12345,
            k=cfg.eval.k,
            budgets=tuple(cfg.eval.budgets),
        )

    # -- the loop ------------------------------------------------------------------------------

    def train(self) -> dict[str, Any]:
        cfg = self.cfg
        start = time.perf_counter()
        # Restored before metrics.jsonl is opened: resuming truncates it to the checkpoint's step.
        restored = self._restore() if self.resume else None
        main = self.main
        if main:
            dump_yaml(cfg, self.run_dir / "config.yaml")
        writer = JsonlWriter(self.run_dir / "metrics.jsonl") if main else _NullWriter()
        # Deterministic mode: wall-clock numbers live apart, so metrics.jsonl is reproducible.
        timings = (
            JsonlWriter(self.run_dir / "timings.jsonl") if cfg.checkpoint.deterministic else None
        )
        if timings is not None and not main:
            timings = _NullWriter()
        last_save = time.monotonic()
        stop = _StopSignals()
        executor = ThreadPoolExecutor(max_workers=1) if self.off_policy else None
        sinks = build_loggers(
            cfg.logging.report_to if main else [],
            self.run_dir,
            to_dict(cfg),
            wandb_project=cfg.logging.wandb_project,
            wandb_mode=cfg.logging.wandb_mode,
        )
        summary: dict[str, Any] = {"model": cfg.model.name_or_path}
        if self.data_report is not None:
            summary["data_filter"] = self.data_report
        history: list[dict[str, Any]] = []
        first_step = 1
        if restored is not None:
            first_step = restored["step"] + 1
            history = restored["history"]
            if restored.get("eval_before") is not None:
                summary["eval_before"] = restored["eval_before"]
            summary["resumed_from_step"] = restored["step"]
            self.log(f"resumed from checkpoint at step {restored['step']}")
        try:
            if cfg.eval.before and self.heldout and restored is None and main:
                summary["eval_before"] = self.run_eval()
                sinks.log({f"eval/{k}": v for k, v in summary["eval_before"].items()}, 0)
                self.log(_eval_line("before", summary["eval_before"]))
            progress = Progress(cfg.training.steps - first_step + 1, self.show_progress)
            warned: set[str] = set()
            pending: Future | None = None
            if restored is not None and restored.get("pending") is not None:
                pending = Future()
                pending.set_result(restored["pending"])
            for self.step in range(first_step, cfg.training.steps + 1):
                t_step = time.perf_counter()
                if pending is not None:  # generated during the previous update
                    scored = pending.result()
                else:
                    self._sync_rollout_weights()
                    scored = self.collect()
                pending = None
                if executor is not None and self.step < cfg.training.steps:
                    # the next batch is drawn from the weights as they are before this update
                    self._sync_rollout_weights()
                    pending = executor.submit(self._collect_stale, self.step + 1)
                metrics: dict[str, Any] = {"step": self.step}
                metrics.update(self.rollout_metrics(scored))
                if self.off_policy:
                    metrics["rollout_staleness"] = scored.staleness
                metrics.update(scored.task_metrics)  # e.g. the curriculum level
                stats, advantages = self.update(scored)
                # The gradients are spent: free them now rather than at the next update's
                # zero_grad, so they do not sit beside the rollout engine's weight copies
                # through the next generation (SmolLM2: -540 MB of that phase's peak).
                self.optimizer.zero_grad(set_to_none=True)
                metrics.update(stats)
                metrics["time_generate_s"] = scored.time_generate_s
                metrics["time_score_s"] = scored.time_score_s
                metrics["tokens_per_s_rollout"] = sum(scored.batch.completion_lengths) / max(
                    scored.time_generate_s, 1e-9
                )
                every_samples = cfg.logging.samples_every
                samples_due = every_samples and self.step % every_samples == 0
                if samples_due and main:
                    self.write_samples(scored, advantages)
                last = self.step == cfg.training.steps
                periodic = cfg.eval.every and self.step % cfg.eval.every == 0
                if periodic and self.heldout and not (last and cfg.eval.after):
                    if self.fsdp:
                        self._sync_rollout_weights()  # the evaluated replica is current
                    if main:
                        metrics.update({f"eval_{k}": v for k, v in self.run_eval().items()})
                metrics["step_time_s"] = time.perf_counter() - t_step
                metrics.update(memory_metrics(self.device))
                history.append(metrics)
                fired = diagnose(history)
                if fired:
                    metrics["diagnostics"] = [d.name for d in fired]
                for d in fired if main else []:
                    if d.name not in warned:  # say it once per run; metrics.jsonl has every step
                        warned.add(d.name)
                        progress.write(d.line())
                        self.log(d.line())
                if timings is not None:
                    wall = {k: metrics.pop(k) for k in list(metrics) if _is_wall_clock(k)}
                    timings.write({"step": self.step, **wall})
                writer.write(metrics)
                sinks.log(metrics, self.step)
                if stats["skipped_updates"]:  # after the step's row is written: nothing lost
                    self._on_skipped_updates(stats["skipped_updates"])
                progress.update(metrics)
                every = cfg.checkpoint.every and self.step % cfg.checkpoint.every == 0
                minutes = cfg.checkpoint.every_minutes
                due = minutes and time.monotonic() - last_save >= 60 * minutes
                # every rank stops after the same step when any of them was signalled, and
                # saves when any of them is due (rank 0's clock decides in effect)
                signum = int(self.world.all_reduce(torch.tensor(stop.signum or 0), "max"))
                save = bool(self.world.all_reduce(torch.tensor(int(bool(every or due))), "max"))
                if save or signum:  # replicas are identical: rank 0 writes
                    next_batch = pending.result() if pending is not None else None
                    self._save_checkpoint(history, summary.get("eval_before"), next_batch)
                    last_save = time.monotonic()
                if signum:
                    progress.close()
                    self.world.barrier()  # the checkpoint is complete before any rank exits
                    raise TrainingInterrupted(signum, self.step, self.run_dir)
            progress.close()
            if self.fsdp:
                self._sync_rollout_weights()  # evaluated and saved: the final weights
            if cfg.eval.after and self.heldout and main:
                summary["eval_after"] = self.run_eval()
                sinks.log(
                    {f"eval/{k}": v for k, v in summary["eval_after"].items()}, cfg.training.steps
                )
                self.log(_eval_line("after", summary["eval_after"]))
            if cfg.checkpoint.save_final and main:
                final = self.rollout_model if self.fsdp else self.model
                save_model(final, self.tokenizer, self.run_dir / "final")
            self.world.barrier()  # no rank leaves before rank 0 has written the final model
        finally:
            if executor is not None:
                executor.shutdown(wait=True, cancel_futures=True)
            stop.restore()
            writer.close()
            if timings is not None:
                timings.close()
            sinks.close()
            if self.pool is not None:
                self.pool.close()
        summary["steps"] = cfg.training.steps
        summary["wall_seconds"] = time.perf_counter() - start
        if self.world.distributed:
            summary["world_size"] = self.world.size
        if main:
            tmp = self.run_dir / "summary.json.tmp"
            tmp.write_text(json.dumps(summary, indent=2))
            tmp.replace(self.run_dir / "summary.json")
        return summary


class _NullWriter:
    """Where ranks other than 0 write their metrics: nowhere."""

    def write(self, row: Mapping[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


def _is_wall_clock(key: str) -> bool:
    """Metrics that measure time or memory, which differ between two runs of the same seed."""
    return key.startswith(("time_", "tokens_per_s", "memory_", "gpu_memory")) or key in (
        "step_time_s",
    )


class TrainingAborted(UserError):
    """Training cannot go on (e.g. repeated NaN updates); the checkpoints on disk are good."""


class TrainingInterrupted(Exception):
    """SIGINT/SIGTERM arrived: the step in progress finished and a checkpoint was saved."""

    def __init__(self, signum: int, step: int, run_dir: Path) -> None:
        self.signum, self.step, self.run_dir = signum, step, run_dir
        name = signal.Signals(signum).name
        super().__init__(
            f"{name}: stopped after step {step}, checkpoint saved; continue with "
            f"`rlvr train --resume --output-dir {run_dir}` and the same config"
        )


class _StopSignals:
    """While a run trains, SIGINT and SIGTERM ask it to stop after the current step (a second
    SIGINT stops at once, as usual). Handlers are installed only in the main thread."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.previous: dict[int, Any] = {}
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum: int, _frame: Any) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous = {}


def _eval_line(when: str, e: Mapping[str, float]) -> str:
    return (
        f"eval {when}: accuracy {e['accuracy']:.3f}  pass1_t1 {e['pass1_t1']:.3f}  "
        f"reasoning {e['reasoning_fraction']:.3f}  length {e['mean_length']:.1f}  (n={e['n']})"
    )


def _padded(rows: list[torch.Tensor], shape: torch.Size) -> torch.Tensor:
    """Per-row 1-D float tensors as one zero-padded [N, T] float32 tensor of `shape`."""
    out = torch.zeros(shape)
    for i, row in enumerate(rows):
        out[i, : row.numel()] = row.float()
    return out


def _token_counts(unit: TokenBatch | PackedRows) -> tuple[int, int]:
    """(tokens the forward pass runs over, of which real prompt/completion tokens)."""
    if isinstance(unit, PackedRows):
        return unit.num_tokens, unit.num_real_tokens
    return unit.input_ids.numel(), int(unit.attention_mask.sum())
