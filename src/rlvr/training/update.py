"""The policy update of one step: (scored batch, learner) -> (statistics, advantages).

old log-probs   π_old of every token when more than one optimizer update is made per batch,
                when the KL goes into the reward, or to mask far-off sequences (MIS); with one
                update per batch the detached log-probs of the update's own forward are π_old
                exactly and no extra pass is made, also when another policy sampled the batch
                (its drift and importance weights then come from that same forward)
reference       π_ref of every token when kl_coef > 0
advantages      from the advantage source (rlvr.training.critic): per sequence from the rewards
                within each group (the KL folded into the reward first with
                algorithm.kl_in_reward), or per token by GAE over a learned value model
mu epochs x mini-batches, each one optimizer step over micro-batches:
    loss = aggregate(policy loss · TIS weight) + β · aggregate(KL) − c_H · aggregate(entropy)
with the mini-batch's global normalisers in every micro-batch, so gradient accumulation (and
data parallelism) gives the gradient of one pass over the whole mini-batch; then the advantage
source trains on the batch (a critic: its value loss; the group estimators: nothing).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from rlvr.algorithms import (
    TOKEN_CORRECTIONS,
    aggregate_loss,
    get_policy_loss,
    kl_penalty,
    masked_mean,
    masked_sequence_importance,
    sampler_drift,
)
from rlvr.algorithms.names import POLICY_LOSS_SPECS
from rlvr.config import Config
from rlvr.errors import UserError
from rlvr.forward.logprobs import TokenBatch, make_token_batch
from rlvr.training.collect import ScoredRollouts
from rlvr.training.critic import AdvantageSource
from rlvr.training.learner import Learner


@dataclass
class UpdateStats:
    """Statistics of an update, accumulated over micro-batches and merged over ranks.

    Keys ending in `_min` / `_max` keep the extreme; every other key is a token-weighted mean
    (sum of value x completion tokens, divided by the tokens at the end)."""

    sums: dict[str, float] = field(default_factory=dict)
    weight: float = 0.0
    extremes: dict[str, float] = field(default_factory=dict)
    forward_tokens: int = 0
    padding_tokens: int = 0

    def add(self, stats: Mapping[str, Any], weight: float) -> None:
        self.weight += weight
        for k, v in stats.items():
            if k.endswith("_min"):
                self.extremes[k] = min(self.extremes.get(k, math.inf), float(v))
            elif k.endswith("_max"):
                self.extremes[k] = max(self.extremes.get(k, -math.inf), float(v))
            else:
                self.sums[k] = self.sums.get(k, 0.0) + float(v) * weight

    @classmethod
    def merge(cls, parts: list[UpdateStats]) -> UpdateStats:
        out = cls(weight=sum(p.weight for p in parts))
        for part in parts:
            for k, v in part.sums.items():
                out.sums[k] = out.sums.get(k, 0.0) + v
            for k, v in part.extremes.items():
                pick = min if k.endswith("_min") else max
                out.extremes[k] = pick(out.extremes[k], v) if k in out.extremes else v
        out.forward_tokens = sum(p.forward_tokens for p in parts)
        out.padding_tokens = sum(p.padding_tokens for p in parts)
        return out

    def means(self) -> dict[str, float]:
        out = {k: v / max(self.weight, 1.0) for k, v in self.sums.items()}
        out.update(self.extremes)
        # share of the update's forward tokens that are padding (a few % when packed)
        out["padding_fraction"] = self.padding_tokens / max(self.forward_tokens, 1)
        out["update_tokens"] = self.forward_tokens  # fewer with shared prompts; padding included
        return out


def options(alg: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """The config options a registered function reads, as its keyword arguments."""
    return {name: getattr(alg, name) for name in names}


class SamplerDriftError(UserError):
    """The sampler's log-probs are far from the learner's on a batch drawn right after a sync."""


def check_drift(drift_mean: float, limit: float, staleness: int) -> None:
    """Stop when a freshly synced sampler disagrees with the learner beyond `limit` (mean nats
    per token): the weights it sampled with are probably not the learner's."""
    if limit and staleness == 0 and drift_mean > limit:
        raise SamplerDriftError(
            f"rollout_logprob_drift_mean {drift_mean:.3g} > rollout.max_logprob_drift {limit:g} "
            "on a batch drawn right after a weight sync: the sampler's weights are probably not "
            "the learner's (a missing or failed sync); raise rollout.max_logprob_drift only if "
            "the sampler runs in lower precision"
        )


@dataclass
class UpdateBatch:
    """One scored batch as the loss reads it: tokens, the loss mask, advantages, and the
    log-probs the loss compares against (each None where the config needs none)."""

    tokens: TokenBatch
    mask: torch.Tensor  # [N, T] completion tokens that count (sampled, not truncated, kept)
    advantages: torch.Tensor
    old_lp: torch.Tensor | None  # the learner's own log-probs before the update
    sampler_lp: torch.Tensor | None  # the sampler's, when it may differ from the learner's
    ref_lp: torch.Tensor | None  # the reference policy's, when kl_coef > 0
    active: torch.Tensor | None  # rows with a non-zero advantage, when the others are skipped
    sampler_stats: dict[str, float]  # and the advantage source's
    time_logprobs_s: float
    drift_limit: float = 0.0  # checked after the update when its own forward measures drift
    staleness: int = 0


def prepare_batch(
    cfg: Config,
    learner: Learner,
    scored: ScoredRollouts,
    source: AdvantageSource,
    *,
    correct_sampler: bool,
    drift_limit: float,
) -> UpdateBatch:
    """Tokens and masks, old / sampler / reference log-probs where needed, the sampler's drift
    and masked importance sampling, and the advantages from `source`."""
    alg = cfg.algorithm
    batch = scored.batch
    pad_id = learner.policy.tokenizer.pad_token_id
    # inserted tokens (tool output) are masked: the loss, KL and normalisers see sampled ones
    tokens = make_token_batch(batch.prompt_ids, batch.completion_ids, pad_id, batch.loss_masks)
    if cfg.reward.mask_truncated:  # DAPO overlong filtering: truncated rows give no gradient
        tokens.completion_mask[torch.tensor(batch.truncated, dtype=torch.bool)] = 0.0
    mask = tokens.completion_mask
    n = len(batch)
    mini_batch = cfg.training.mini_batch_size or n
    updates_per_step = cfg.training.ppo_epochs * (n // mini_batch)

    learner.forward.check(learner.policy.whole, tokens)
    t0 = time.perf_counter()
    # One update per batch: pi_old is the update's own forward, detached (unit_loss), also for
    # the sampler's drift and importance weights; a pass before the update is needed only to
    # fold the KL into the reward, to mask sequences by MIS, or for later updates' pi_old.
    need_old = updates_per_step > 1 or alg.kl_in_reward or (correct_sampler and alg.mis_cap > 0)
    old_lp = learner.logprobs(learner.model, tokens) if need_old else None
    # the sampler's own log-probs, for the importance weights of rows another policy sampled
    sampler_lp = _padded(batch.logprobs, mask.shape) if correct_sampler else None
    ref_lp = learner.reference_logprobs(tokens) if learner.policy.use_reference else None
    sampler_stats: dict[str, float] = {}
    if sampler_lp is not None and old_lp is not None:
        drift = sampler_drift(old_lp, sampler_lp, mask)
        sampler_stats = {k: float(v) for k, v in drift.items()}
        check_drift(sampler_stats["rollout_logprob_drift_mean"], drift_limit, scored.staleness)
        if alg.mis_cap:
            keep, mis = masked_sequence_importance(old_lp, sampler_lp, mask, alg.mis_cap)
            mask[~keep] = 0.0  # dropped sequences give no gradient; they still count in B
            sampler_stats.update({k: float(v) for k, v in mis.items()})

    advantages, source_stats = source.estimate(
        tokens, mask, scored.rewards, batch.group_ids, old_lp, ref_lp
    )
    sampler_stats.update(source_stats)
    time_logprobs = time.perf_counter() - t0  # the passes before the update (a critic's too)
    # A row whose advantage is 0 everywhere has exactly zero gradient when the loss has no
    # term but the surrogate (-A * ratio, clipped, times the TIS weight) and the surrogate of a
    # token depends on its own row only: its forward and backward are skipped; the normalisers
    # still count it (docs/training-speed.md).
    skip_zero = (
        cfg.training.skip_zero_advantage
        and alg.entropy_coef == 0
        and (ref_lp is None or alg.kl_in_reward)
        and not POLICY_LOSS_SPECS[alg.policy_loss].couples_rows
    )
    active = advantages.reshape(n, -1).ne(0).any(dim=1) if skip_zero else None
    return UpdateBatch(
        tokens,
        mask,
        advantages,
        old_lp,
        sampler_lp,
        ref_lp,
        active,
        sampler_stats,
        time_logprobs,
        drift_limit,
        scored.staleness,
    )


def unit_loss(
    cfg: Config,
    b: UpdateBatch,
    agg: dict[str, Any],
    device: torch.device,
    rows: torch.Tensor,
    lp: torch.Tensor,
    ent: torch.Tensor | None,
) -> tuple[torch.Tensor, dict[str, Any], float]:
    """The loss of one micro-batch's `rows` (log-probs `lp`, entropies `ent`), aggregated with
    the mini-batch's normalisers `agg`; its statistics, and their weight (its loss tokens):

        loss = aggregate(policy loss · TIS weight) + β · aggregate(KL) − c_H · aggregate(entropy)
    """
    alg = cfg.algorithm
    assert ent is not None  # the pass runs with_entropy
    loss_spec = POLICY_LOSS_SPECS[alg.policy_loss]
    loss_fn, loss_options = get_policy_loss(loss_spec.name), options(alg, loss_spec.options)
    width = lp.shape[1]
    mask_rows = b.mask[rows, :width]
    m = mask_rows.to(device)
    old = b.old_lp[rows, :width].to(device) if b.old_lp is not None else lp.detach()
    advantages = b.advantages[rows]  # [R], or a critic's [R, T]: cut to the unit's width
    advantages = advantages if advantages.dim() == 1 else advantages[:, :width]
    per_token, pstats = loss_fn(lp, old, advantages.to(device), m, **loss_options)
    if b.sampler_lp is not None:
        # the sampler's correction, no gradient: pi_old / pi_sampler truncated (tis) or
        # masked outside [1/C, C] (icepop)
        sampler = b.sampler_lp[rows, :width].to(device)
        tis, tis_stats = TOKEN_CORRECTIONS[alg.token_correction](old, sampler, m, alg.tis_cap)
        per_token = per_token * tis
        pstats.update(tis_stats)
        if b.old_lp is None:  # pi_old is this forward: the drift is measured here too
            pstats.update(sampler_drift(old, sampler, m))
    loss = aggregate_loss(per_token, m, **agg)
    if b.ref_lp is not None and not alg.kl_in_reward:
        kl = kl_penalty(lp, b.ref_lp[rows, :width].to(device), alg.kl_estimator)
        loss = loss + alg.kl_coef * aggregate_loss(kl, m, **agg)
        pstats["kl"] = masked_mean(kl.detach(), m)
    elif b.ref_lp is not None:
        assert b.old_lp is not None  # kl_in_reward needs the old log-probs
        pstats["kl"] = masked_mean(
            kl_penalty(b.old_lp[rows, :width], b.ref_lp[rows, :width], alg.kl_estimator),
            mask_rows,
        )
    if alg.entropy_coef > 0:
        loss = loss - alg.entropy_coef * aggregate_loss(ent, m, **agg)
    pstats["entropy"] = masked_mean(ent.detach(), m)
    return loss, pstats, float(m.sum())


def update(
    cfg: Config,
    learner: Learner,
    scored: ScoredRollouts,
    shuffle_gen: torch.Generator,
    source: AdvantageSource,
    *,
    correct_sampler: bool,
    drift_limit: float = 0.0,
    critic_gen: torch.Generator | None = None,
) -> tuple[dict[str, float], torch.Tensor]:
    """Optimise on one scored batch; returns the step's statistics and the advantages used.

    source: where the advantages come from (rlvr.training.critic), trained on the batch after
    the policy (a critic; `critic_gen` shuffles its mini-batches); while it says the policy
    waits (critic warm-up), only it trains.

    correct_sampler: the batch's sampling log-probs may differ from the learner's (one-step
    off-policy rollouts, an inference engine with other kernels): the learner's own old
    log-probs are computed, the drift logged and checked, each token's loss weighted by the
    truncated importance ratio and, with algorithm.mis_cap, far-off sequences masked out.
    drift_limit: the most mean drift a batch drawn right after a sync may show (0 = unchecked:
    an engine that computes the learner's own log-probs drifts only by staleness)."""
    alg, world, device = cfg.algorithm, learner.world, learner.policy.device
    b = prepare_batch(
        cfg, learner, scored, source, correct_sampler=correct_sampler, drift_limit=drift_limit
    )
    policy_epochs = 0 if source.policy_waits else cfg.training.ppo_epochs
    n, mask = len(scored.batch), b.mask
    mini_batch = cfg.training.mini_batch_size or n

    t0 = time.perf_counter()
    record = UpdateStats()
    grad_norms, losses, skipped, rows_skipped = [], [], 0, 0
    learner.model.train()
    for _epoch in range(policy_epochs):
        order = torch.randperm(n, generator=shuffle_gen)
        for start in range(0, n, mini_batch):
            mb_rows = order[start : start + mini_batch]
            agg = dict(
                mode=alg.loss_aggregation,
                max_tokens=cfg.rollout.max_new_tokens,
                num_sequences=float(len(mb_rows)),
                num_tokens=float(mask[mb_rows].sum()),
            )
            if b.active is not None:
                run = mb_rows[b.active[mb_rows]]
                # none active: one row still runs (zero gradient), so the optimizer steps as
                # it would unskipped (momentum, weight decay) and every rank's path is kept
                run = run if len(run) else mb_rows[:1]
                rows_skipped += len(mb_rows) - len(run)
                mb_rows = run
            # this rank's share in micro-batches; the normalisers above count the mini-batch
            done = learner.minibatch_step(
                b.tokens,
                mb_rows,
                partial(unit_loss, cfg, b, agg, device),
                with_entropy=True,
                entropy_grad=alg.entropy_coef > 0,
            )
            record.forward_tokens += done.forward_tokens
            record.padding_tokens += done.padding_tokens
            for unit_stats, weight in done.unit_stats:
                record.add(unit_stats, weight)
            if done.grad_norm is None:
                skipped += 1
                continue
            grad_norms.append(done.grad_norm)
            losses.append(done.loss)
    time_update = time.perf_counter() - t0
    t0 = time.perf_counter()
    source_stats = source.fit(
        b.tokens, mask, critic_gen if critic_gen is not None else shuffle_gen, learner
    )
    time_source = time.perf_counter() - t0
    if world.distributed:  # the step's statistics over all ranks' rows
        record = UpdateStats.merge(world.all_gather_object(record))
    stats = record.means()
    stats["grad_norm"] = sum(grad_norms) / max(1, len(grad_norms))
    stats["skipped_updates"] = skipped
    stats["update_rows_skipped"] = rows_skipped  # zero-advantage rows not run, all passes
    # With one update per batch the clipped loss is ~0 by construction (ratio = 1, only its
    # gradient matters); see docs. advantage_abs_mean shows the signal strength instead.
    stats["loss"] = sum(losses) / max(1, len(losses))
    stats["lr"] = learner.scheduler.get_last_lr()[0]
    stats["advantage_abs_mean"] = _abs_mean(b.advantages, mask)
    stats.update(b.sampler_stats)
    if source_stats:  # a critic's
        stats.update(source_stats)
        stats["time_critic_s"] = time_source
        stats["policy_waits"] = int(policy_epochs == 0)
    if b.sampler_lp is not None and b.old_lp is None:  # measured by the update's forward
        check_drift(stats["rollout_logprob_drift_mean"], b.drift_limit, b.staleness)
    stats["time_logprobs_s"] = b.time_logprobs_s
    stats["time_update_s"] = time_update
    stats["tokens_per_s_train"] = (
        float(mask.sum()) * cfg.training.ppo_epochs / max(time_update, 1e-9)
    )
    return stats, b.advantages


def _abs_mean(advantages: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean |A|: over the sequences, or for per-token advantages over the sampled tokens."""
    if advantages.dim() == 1:
        return float(advantages.abs().mean())
    return float(masked_mean(advantages.abs(), mask))


def _padded(rows: list[torch.Tensor], shape: torch.Size) -> torch.Tensor:
    """Per-row 1-D float tensors as one zero-padded [N, T] float32 tensor of `shape`."""
    out = torch.zeros(shape)
    for i, row in enumerate(rows):
        out[i, : row.numel()] = row.float()
    return out
