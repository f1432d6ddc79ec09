"""The GRPO-family RL loop, top to bottom.

One step (`GRPOTrainer.train`):
  1. rollouts: draw prompts, sample G completions each, score them   (schedules, collect, sources)
  2. the update: old-policy and reference log-probs where needed, advantages within each group,
     mu passes over mini-batches of the clipped policy loss (+ KL, - entropy), AdamW  (update)
  3. metrics, samples and failed completions for audit, held-out evaluation    (step_metrics)
  4. a checkpoint when due: every N steps, every M minutes, on SIGINT/SIGTERM       (run)

Everything else is a component chosen by config: the rollout source (this process, or Ray
actors), the schedule (on-policy, or one step off-policy with truncated importance sampling), the
forward path (packed or padded micro-batches), the learner (one process, DDP or FSDP2 replicas
under torchrun). Under torchrun every rank runs this loop; rank 0 alone writes the run dir.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlvr.config import Config, to_dict
from rlvr.distributed.world import World, init_world
from rlvr.errors import UserError
from rlvr.evaluation.evaluate import heldout_eval
from rlvr.forward.packing import attention_pair_cost
from rlvr.forward.paths import build_forward
from rlvr.models.loading import resolve_device
from rlvr.observe.diagnostics import diagnose
from rlvr.observe.metrics import memory_metrics
from rlvr.reward_model.scoring import learned_reward_resolver
from rlvr.rewards.compose import build_verifier
from rlvr.rollout import SamplingParams
from rlvr.runs.allocator import keep_freed_memory
from rlvr.runs.checkpoint import save_model
from rlvr.runs.optim import build_optimizer, build_scheduler
from rlvr.runs.policy import build_policy, build_rollout_engine
from rlvr.runs.run import (
    CheckpointTriggers,
    EvalSchedule,
    RunLog,
    TrainingAborted,
    TrainingInterrupted,
    eval_line,
    transformers_progress,
    write_precision,
    write_summary,
)
from rlvr.runs.run_dir import check_resumable, check_run_dir, create_run_dir, write_config
from rlvr.runs.task import build_run_task
from rlvr.training.collect import Collector, ScoredRollouts
from rlvr.training.critic import build_advantage_source
from rlvr.training.judge_server import start_judges
from rlvr.training.learner import Learner
from rlvr.training.rl_state import RLCheckpoints
from rlvr.training.schedules import build_schedule
from rlvr.training.sources import build_rollout_source, check_rollout_source
from rlvr.training.step_metrics import ErrorLog, rollout_metrics, write_samples
from rlvr.training.update import update

__all__ = [
    "GRPOTrainer",
    "ScoredRollouts",
    "TrainResult",
    "TrainingAborted",
    "TrainingInterrupted",
]


@dataclass
class TrainResult:
    """What `GRPOTrainer.train` returns: the run directory, summary.json's content
    (`eval_before`, `eval_after`, `steps`, `wall_seconds`, ...) and every training step's
    metrics row, in order (those of a resumed run's earlier steps too): the rows of
    metrics.jsonl, as Python numbers (NaN where the file has null)."""

    run_dir: Path
    summary: dict[str, Any]
    metrics: list[dict[str, Any]]

    def history(self, key: str) -> list[Any]:
        """One metric over the steps that logged it, e.g. `result.history("reward_mean")`."""
        return [row[key] for row in self.metrics if key in row]


class GRPOTrainer:
    """Owns the run's state (policy, optimizer, step, RNGs) and composes the parts.

    `GRPOTrainer(cfg, run_dir)` checks the run directory as `rlvr train` does before it loads
    anything: an earlier run there is an error unless `overwrite` (its files are then replaced
    when `train` starts), and `resume=True` needs the run's config.yaml, the same config
    (`allow_config_change` accepts another, naming the differing keys) and a checkpoint.
    `run_dir=None` is runs/train-YYYYmmdd-HHMMSS. The directory is created by `train`, so a
    trainer that is only built (or fails to build) leaves nothing on disk. `train()` runs the
    loop and returns a `TrainResult`; `evaluate()` is the held-out evaluation of the current
    weights, a dict of metrics (`accuracy`, `pass1_t1`, ...; `eval.size=0`: no problems, and
    `bool(trainer.evaluate)` is false). With `progress=False` nothing draws a progress bar,
    transformers' loading and saving bars included.
    """

    def __init__(
        self,
        cfg: Config,
        run_dir: str | Path | None = None,
        *,
        progress: bool = True,
        log: Callable[[str], None] = print,
        resume: bool = False,
        overwrite: bool = False,
        allow_config_change: bool = False,
        world: World | None = None,
    ) -> None:
        if resume and overwrite:
            raise UserError("--resume and --overwrite: choose one")
        self.cfg, self.resume, self.overwrite = cfg, resume, overwrite
        check_rollout_source(cfg, world)  # before joining a process group: Ray needs none
        self.world = world if world is not None else init_world(cfg.distributed.backend)
        self.main = self.world.is_main  # rank 0 logs, evaluates and writes the run directory
        self.run_dir = self._check_run_dir(run_dir, allow_config_change)
        self.log = log if self.main else (lambda _msg: None)
        self.show_progress = progress and cfg.logging.progress and self.main
        with transformers_progress(self.show_progress):
            self._build(cfg, self.run_dir, resume)

    def _check_run_dir(self, run_dir: str | Path | None, allow_change: bool) -> Path:
        """Rank 0 checks (and, without one, names) the run directory; every rank gets it, or
        the error (a collective under torchrun)."""
        checked: tuple[Path | None, str | None] = (None, None)
        if self.main:
            try:
                if self.resume:
                    checked = (check_resumable(run_dir, self.cfg, allow_change=allow_change), None)
                else:
                    checked = (check_run_dir(run_dir, self.overwrite), None)
            except UserError as e:
                checked = (None, str(e))
        path, error = self.world.broadcast_object(checked)
        if error is not None:
            raise UserError(error)
        return path

    def _build(self, cfg: Config, run_dir: Path, resume: bool) -> None:
        r = cfg.rollout
        torch.manual_seed(cfg.training.seed)
        if cfg.checkpoint.deterministic:
            torch.use_deterministic_algorithms(True, warn_only=True)
        self.prompt_rng = random.Random(cfg.data.seed * 1_000_003 + cfg.training.seed)
        self.sample_gen = torch.Generator().manual_seed(cfg.training.seed)
        self.shuffle_gen = torch.Generator().manual_seed(cfg.training.seed + 1)
        self.critic_gen = torch.Generator().manual_seed(cfg.training.seed + 2)
        self.device = resolve_device(cfg.model.device)
        if self.device.type == "cuda" and self.world.distributed:
            self.device = torch.device("cuda", self.world.local_rank)
        if cfg.training.keep_freed_memory and self.device.type == "cpu":
            # before the model: its blocks come from the kept heap too
            keep_freed_memory(0 < cfg.training.map_large_blocks_from <= r.max_new_tokens)
        # LLM judges: the spec gets reward.judge_*'s settings; judge:serve a server of its own
        self.judges, cfg = start_judges(cfg, self.log)
        self.verifier = build_verifier(
            cfg.reward.verifier,
            workers=cfg.reward.workers,
            resolve=learned_reward_resolver(cfg, self.device),  # rm:PATH, on the learner's device
        )
        # data.mix_path's prompts (no reference answers) are scored by reward.mix_verifier
        self.mix_verifier = (
            build_verifier(
                cfg.reward.mix_verifier, resolve=learned_reward_resolver(cfg, self.device)
            )
            if cfg.reward.mix_verifier
            else None
        )
        self.task = build_run_task(cfg, self.verifier)  # rows checked for what it needs
        resumed = run_dir if resume else None  # a resumed run keeps its recorded precision
        self.policy = build_policy(cfg, self.world, self.device, resumed=resumed, log=self.log)
        self.model, self.tokenizer = self.policy.model, self.policy.tokenizer
        self.encode = self.policy.encode
        # multi-turn around the engine when one is named
        self.engine = build_rollout_engine(
            cfg, self.policy.rollout_model, self.tokenizer, cast=self.policy.rollout_cast
        )
        # An engine with other kernels than the learner's (vLLM) or weights in another dtype
        # (rollout.dtype), or a stale one (off-policy): the update corrects for the sampler, and
        # checks a fresh one agrees with the learner.
        exact = self.engine.exact_logprobs and not self.policy.rollout_cast
        self.correct_sampler = bool(r.staleness) or not exact
        self.drift_limit = 0.0 if exact else r.max_logprob_drift
        self.sampling = SamplingParams(
            temperature=r.temperature,
            top_p=r.top_p,
            top_k=r.top_k,
            max_new_tokens=r.max_new_tokens,
            stop=tuple(r.stop),
        )
        rows_per_step = r.prompts_per_step * r.group_size
        mini_batch = cfg.training.mini_batch_size or rows_per_step
        total_updates = cfg.training.steps * cfg.training.ppo_epochs
        total_updates *= rows_per_step // mini_batch
        optimizer = build_optimizer(self.model, cfg.optimizer)
        pad_id = self.tokenizer.pad_token_id
        forward = build_forward(cfg, pad_id, attention_pair_cost(self.policy.rollout_model))
        self.learner = Learner(
            self.policy,
            forward,
            optimizer,
            build_scheduler(optimizer, max(1, total_updates), cfg.optimizer),
            max_grad_norm=cfg.optimizer.max_grad_norm,
            max_consecutive_skips=cfg.training.max_consecutive_skips,
        )
        # the rewards of a group, or a value model trained beside the policy (gae)
        self.advantages = build_advantage_source(cfg, self.policy, forward, total_updates)
        self.data_report = self._filter_long_prompts()
        # off-policy: the engine's weights are a stale snapshot; evaluation sees the current ones
        # (the model itself, or under FSDP the whole copy `gather_whole` fills)
        # (and a replica cast to rollout.dtype: it is synced before rollouts only)
        eval_engine = (
            build_rollout_engine(cfg, self.policy.whole, self.tokenizer)
            if r.staleness or self.policy.rollout_cast
            else self.engine  # with FSDP the replica is synced before every evaluation
        )
        # held-out accuracy by a rule where the training reward is learned (eval.verifier)
        eval_verifier = build_verifier(cfg.eval.verifier) if cfg.eval.verifier else self.verifier
        self.evaluate = heldout_eval(cfg, self.task, eval_engine, self.encode, eval_verifier)
        self.checkpoints = RLCheckpoints(
            run_dir,
            self.policy,
            self.learner,
            self.task,
            {"prompt": self.prompt_rng},
            {"sample": self.sample_gen, "shuffle": self.shuffle_gen, "critic": self.critic_gen},
            self.advantages,
            keep_last=cfg.checkpoint.keep_last,
            main=self.main,
            log=self.log,
        )
        # background rollouts (max_staleness) gather their rounds on a process group of their own
        source_world = self.world.new_group() if r.staleness else self.world
        # last: a Ray source starts a cluster, which nothing after it could fail to close
        self.source = build_rollout_source(
            cfg,
            self.engine,
            self.verifier,
            self.sampling,
            self.sample_gen,
            source_world,
            self.log,
            mix_verifier=self.mix_verifier,
        )
        self.collector = Collector(cfg, self.task, self.source, self.prompt_rng, self.encode)
        self.rollouts = build_schedule(
            r.staleness,
            self.collector,
            self.policy,
            r.async_mode,
            r.partial_rollouts,
            r.partial_switch_at,
            r.async_unit,
        )
        self.step = 0

    # -- the loop ------------------------------------------------------------------------------

    def train(self) -> TrainResult:
        """Train `training.steps` steps (a resumed run: from its checkpoint's step on) into the
        run directory, created now (an earlier run's files replaced under `overwrite`)."""
        if self.main and not self.resume:
            create_run_dir(self.run_dir)
        self.world.barrier()
        with transformers_progress(self.show_progress):
            summary, history = self._loop()
        return TrainResult(self.run_dir, summary, history)

    def _loop(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        cfg, main = self.cfg, self.main
        start = time.perf_counter()
        # Restored before metrics.jsonl is opened: resuming truncates it to the checkpoint's step.
        restored = self.checkpoints.restore() if self.resume else None
        if restored is not None:
            self.step = restored["step"]
            self.rollouts.resume_with(restored.get("pending"), self.step)
        if main:
            write_config(self.run_dir, cfg)  # local paths absolute: it works from anywhere
            write_precision(self.run_dir, self.policy.precision)
        out = RunLog(
            self.run_dir,
            to_dict(cfg),
            cfg.logging,
            deterministic=cfg.checkpoint.deterministic,
            main=main,
            fresh=restored is None,  # --resume without a checkpoint starts over
        )
        # errors.jsonl: the completions whose verifier or environment failed (a resumed run's
        # file grows on); a warning when most of a step's did
        errors = ErrorLog(self.run_dir, main=main, fresh=restored is None, warn=self.log)
        triggers = CheckpointTriggers(cfg.checkpoint, self.world)
        schedule = EvalSchedule.from_config(cfg.eval, cfg.training.steps, bool(self.evaluate))
        summary, history, first_step = self._start_summary(restored)
        warned: set[str] = set()
        try:
            if schedule.before and restored is None and main:
                summary["eval_before"] = self.evaluate()
                out.write_eval_before(summary["eval_before"])  # metrics.jsonl's step-0 row
                errors.write(0, "eval", *self.evaluate.pop_failures())
                self.log(eval_line("before", summary["eval_before"]))
            progress = out.start_progress(cfg.training.steps - first_step + 1, self.show_progress)
            for self.step in range(first_step, cfg.training.steps + 1):
                t_step = time.perf_counter()
                # 1. rollouts: completions and rewards
                scored = self.rollouts.next(self.step, cfg.training.steps)
                metrics: dict[str, Any] = {"step": self.step}
                metrics.update(self.rollout_metrics(scored))
                # the failed completions' records, written before anything else can crash
                errors.write(self.step, "train", scored.errors, scored.completions)
                # 2. advantages and the policy update
                stats, advantages = self.update(scored)
                # The gradients are spent: free them now rather than at the next update's
                # zero_grad, so they do not sit beside the rollout engine's weight copies
                # through the next generation (SmolLM2: -540 MB of that phase's peak).
                self.learner.optimizer.zero_grad(set_to_none=True)
                metrics.update(stats)
                metrics["time_generate_s"] = scored.time_generate_s
                metrics["time_score_s"] = scored.time_score_s
                metrics["tokens_per_s_rollout"] = sum(scored.batch.completion_lengths) / max(
                    scored.time_generate_s, 1e-9
                )
                # 3. audit samples, held-out evaluation, metrics, diagnostics
                every_samples = cfg.logging.samples_every
                if every_samples and self.step % every_samples == 0 and main:
                    judged = self.judges.answers(self.verifier)  # an LLM judge's own words
                    write_samples(self.run_dir, self.step, scored, advantages, judged)
                if schedule.periodic(self.step):
                    self.policy.gather_whole()  # FSDP: the evaluated replica is current
                    if main:
                        metrics.update({f"eval_{k}": v for k, v in self.evaluate().items()})
                        errors.write(self.step, "eval", *self.evaluate.pop_failures())
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
                # before the row is written: deterministic mode moves step_time_s out of it
                progress.update(metrics)
                out.write(metrics, self.step)
                if stats["skipped_updates"]:  # after the step's row is written: nothing lost
                    skipped = int(stats["skipped_updates"])
                    self.learner.check_skips(self.step, skipped, self.run_dir, self.log)
                # 4. checkpoint when due
                save, signum = triggers.check(self.step)
                if save:
                    pending = self.rollouts.pending()  # off-policy: the next batches, made
                    self.checkpoints.save(self.step, history, summary.get("eval_before"), pending)
                    triggers.saved()
                if signum:
                    progress.close()
                    self.world.barrier()  # the checkpoint is complete before any rank exits
                    raise TrainingInterrupted(signum, self.step, self.run_dir)
            progress.close()
            self.policy.gather_whole()  # FSDP: evaluated and saved, the final weights
            if schedule.after and main:
                summary["eval_after"] = self.evaluate()
                out.write_eval(summary["eval_after"], cfg.training.steps)
                errors.write(cfg.training.steps, "eval", *self.evaluate.pop_failures())
                self.log(eval_line("after", summary["eval_after"]))
            if cfg.checkpoint.save_final and main:
                save_model(self.policy.whole, self.tokenizer, self.run_dir / "final")
            self.world.barrier()  # no rank leaves before rank 0 has written the final model
        finally:
            self.rollouts.close()
            triggers.close()
            out.close()
            errors.close()
            self.source.close()
            self.judges.close()
        summary["steps"] = cfg.training.steps
        summary["wall_seconds"] = time.perf_counter() - start
        if self.world.distributed:
            summary["world_size"] = self.world.size
        if main:
            write_summary(self.run_dir, summary)
        return summary, history

    # -- the parts the loop calls ----------------------------------------------------------------

    def collect(self, step: int | None = None) -> ScoredRollouts:
        """Sample and score the batch of `step` (default: the current step)."""
        return self.collector.collect(self.step if step is None else step)

    def update(self, scored: ScoredRollouts) -> tuple[dict[str, float], torch.Tensor]:
        """Optimise on one scored batch; returns the step's stats and the advantages used."""
        return update(
            self.cfg,
            self.learner,
            scored,
            self.shuffle_gen,
            self.advantages,
            correct_sampler=self.correct_sampler,
            drift_limit=self.drift_limit,
            critic_gen=self.critic_gen,
        )

    def rollout_metrics(self, scored: ScoredRollouts) -> dict[str, float]:
        dynamic = self.cfg.rollout.prompts_per_step if self.cfg.algorithm.dynamic_sampling else 0
        m = rollout_metrics(scored, dynamic)
        m.update(self.source.metrics())  # e.g. Ray worker restarts
        m.update(self.rollouts.metrics(scored))  # off-policy: the batch's staleness
        m.update(scored.task_metrics)  # e.g. the curriculum level
        return m

    # -- set-up, checkpoints and resume ----------------------------------------------------------

    def _filter_long_prompts(self) -> dict[str, Any] | None:
        cfg = self.cfg
        if not (cfg.data.max_prompt_tokens and cfg.data.task == "dataset"):
            return None
        from rlvr.data.datasets import filter_long_prompts

        report = filter_long_prompts(
            self.task, lambda sample: len(self.encode(sample)), cfg.data.max_prompt_tokens
        )
        self.log(
            f"data: dropped {report['dropped_train']} train and {report['dropped_eval']} "
            f"held-out prompts ({report['reason']})"
        )
        return report

    def _start_summary(self, restored: dict | None) -> tuple[dict[str, Any], list, int]:
        """(summary so far, metric history, first step) of a fresh or resumed run."""
        summary: dict[str, Any] = {"model": self.cfg.model.name_or_path}
        summary.update(self.policy.precision.record())  # precision, precision_probe
        if self.data_report is not None:
            summary["data_filter"] = self.data_report
        if restored is None:
            return summary, [], 1
        if restored.get("eval_before") is not None:
            summary["eval_before"] = restored["eval_before"]
        summary["resumed_from_step"] = restored["step"]
        self.log(f"resumed from checkpoint at step {restored['step']}")
        return summary, restored["history"], restored["step"] + 1
