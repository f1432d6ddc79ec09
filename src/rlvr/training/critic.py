"""Where a step's advantages come from: the rewards of a group, or a learned value model.

The update asks its advantage source twice per batch (rlvr.training.update):

    advantages, stats = source.estimate(tokens, mask, rewards, group_ids, old_lp, ref_lp)
    ... the policy's optimizer steps ...
    stats = source.fit(tokens, mask, generator, policy_learner)

`GroupAdvantages` (grpo, dr_grpo, rloo, reinforce_pp...): one advantage per sequence from the
rewards within each group (the KL folded into the reward first with algorithm.kl_in_reward);
`fit` does nothing.

`CriticAdvantages` (algorithm.advantage=gae, PPO with a critic; Schulman et al. 2017, the RLHF
form of Ouyang et al. 2022):

    V_old(s_t)  the value model on every sampled token, no gradient       (before the update)
    r_t         the verifier's reward at the last sampled token, minus β · KL_t at every
                sampled token with algorithm.kl_in_reward                  (token_level_rewards)
    A_t, G_t    GAE with algorithm.gamma, algorithm.lam; G_t = A_t + V_old(s_t)     (gae)
    A_t         whitened over the batch's sampled tokens (critic.whiten_advantages)   (whiten)
    fit         training.ppo_epochs x mini-batches of the value loss
                ½ (V − G)², clipped around V_old with critic.value_clip        (value_loss)
                aggregated like the policy loss, one AdamW step each (critic.lr)

For the first `critic.warmup_steps` batches only the critic trains (`policy_waits`), so the
policy does not follow the advantages of a value head that is still all zero.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any, Protocol

import torch

from rlvr.algorithms import (
    aggregate_loss,
    kl_in_reward,
    kl_penalty,
    masked_mean,
    token_level_rewards,
    value_loss,
    whiten,
)
from rlvr.algorithms.gae import explained_variance, gae
from rlvr.algorithms.names import ADVANTAGE_ESTIMATOR_SPECS
from rlvr.config import Config
from rlvr.errors import UserError
from rlvr.forward.logprobs import TokenBatch
from rlvr.forward.paths import PackedForward, PaddedForward
from rlvr.runs.critic import build_critic
from rlvr.runs.optim import build_optimizer, build_scheduler
from rlvr.runs.policy import Policy
from rlvr.training.learner import Learner


class AdvantageSource(Protocol):
    def estimate(
        self,
        tokens: TokenBatch,
        mask: torch.Tensor,
        rewards: torch.Tensor,
        group_ids: torch.Tensor,
        old_lp: torch.Tensor | None,
        ref_lp: torch.Tensor | None,
    ) -> tuple[torch.Tensor, dict[str, float]]: ...

    def fit(
        self,
        tokens: TokenBatch,
        mask: torch.Tensor,
        generator: torch.Generator,
        policy: Learner,
    ) -> dict[str, float]: ...

    @property
    def policy_waits(self) -> bool: ...

    def state_dict(self) -> dict[str, Any] | None: ...

    def load_state_dict(self, state: dict[str, Any] | None) -> None: ...


def estimator_options(cfg: Config) -> dict[str, Any]:
    """The config options the selected estimator reads, as its keyword arguments."""
    alg = cfg.algorithm
    return {k: getattr(alg, k) for k in ADVANTAGE_ESTIMATOR_SPECS[alg.advantage].options}


class GroupAdvantages:
    """One advantage per sequence, from the rewards within each group; nothing to train."""

    policy_waits = False

    def __init__(self, cfg: Config) -> None:
        from rlvr.algorithms import get_advantage_estimator

        self.cfg = cfg
        self.estimator = get_advantage_estimator(cfg.algorithm.advantage)

    def estimate(
        self,
        tokens: TokenBatch,
        mask: torch.Tensor,
        rewards: torch.Tensor,
        group_ids: torch.Tensor,
        old_lp: torch.Tensor | None,
        ref_lp: torch.Tensor | None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        alg = self.cfg.algorithm
        if ref_lp is not None and alg.kl_in_reward:
            assert old_lp is not None  # the update computes pi_old for kl_in_reward
            kl = kl_penalty(old_lp, ref_lp, alg.kl_estimator)
            rewards = kl_in_reward(rewards, kl, mask, alg.kl_coef)
        return self.estimator(rewards, group_ids, **estimator_options(self.cfg)), {}

    def fit(
        self,
        tokens: TokenBatch,
        mask: torch.Tensor,
        generator: torch.Generator,
        policy: Learner,
    ) -> dict[str, float]:
        return {}  # nothing to train; the policy's gradients stay for whoever reads them

    def state_dict(self) -> None:
        return None

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        return None


class CriticAdvantages:
    """GAE over a learned value model, and that model's training (see the module docstring)."""

    def __init__(self, cfg: Config, critic: Policy, learner: Learner) -> None:
        self.cfg, self.critic, self.learner = cfg, critic, learner
        self.fits = 0  # batches the critic has trained on (warm-up counts them)
        self._batch: tuple[torch.Tensor, torch.Tensor] | None = None  # (V_old, G) of the batch

    @property
    def policy_waits(self) -> bool:
        return self.fits < self.cfg.critic.warmup_steps

    def estimate(
        self,
        tokens: TokenBatch,
        mask: torch.Tensor,
        rewards: torch.Tensor,
        group_ids: torch.Tensor,
        old_lp: torch.Tensor | None,
        ref_lp: torch.Tensor | None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        alg, c = self.cfg.algorithm, self.cfg.critic
        self.learner.model.eval()  # no dropout in V_old
        old_values = self.learner.logprobs(self.learner.model, tokens)  # the critic's values
        kl = None
        if ref_lp is not None and alg.kl_in_reward:
            assert old_lp is not None  # the update computes pi_old for kl_in_reward
            kl = kl_penalty(old_lp, ref_lp, alg.kl_estimator)
        token_rewards = token_level_rewards(
            rewards.float(), mask, kl, alg.kl_coef if kl is not None else 0.0
        )
        advantages, returns = gae(token_rewards, old_values, mask, **estimator_options(self.cfg))
        self._batch = (old_values, returns)
        stats = {
            # of the values the advantages were computed with, over the whole batch
            "explained_variance": float(explained_variance(old_values, returns, mask)),
            "value_old_mean": float(masked_mean(old_values, mask)),
            "return_mean": float(masked_mean(returns, mask)),
            "advantage_raw_mean": float(masked_mean(advantages, mask)),
        }
        if c.whiten_advantages:
            advantages = whiten(advantages, mask)
        return advantages, stats

    def fit(
        self,
        tokens: TokenBatch,
        mask: torch.Tensor,
        generator: torch.Generator,
        policy: Learner,
    ) -> dict[str, float]:
        """training.ppo_epochs passes of mini-batches of the value loss over the batch that was
        estimated last; the critic's statistics, token-weighted over its micro-batches. The
        `policy` learner's gradients are spent by now: freed first, so the two updates never
        hold their gradients at once."""
        assert self._batch is not None, "estimate() comes first"
        policy.optimizer.zero_grad(set_to_none=True)
        old_values, returns = self._batch
        cfg, n = self.cfg, len(tokens)
        mini_batch = cfg.training.mini_batch_size or n
        device = self.critic.device
        sums: dict[str, float] = {}
        weight, norms, losses, skipped = 0.0, [], [], 0
        self.learner.model.train()
        for _epoch in range(cfg.training.ppo_epochs):
            order = torch.randperm(n, generator=generator)
            for start in range(0, n, mini_batch):
                rows = order[start : start + mini_batch]
                agg = dict(
                    mode=cfg.algorithm.loss_aggregation,
                    max_tokens=cfg.rollout.max_new_tokens,
                    num_sequences=float(len(rows)),
                    num_tokens=float(mask[rows].sum()),
                )
                unit = partial(self._unit_loss, mask, old_values, returns, agg, device)
                done = self.learner.minibatch_step(tokens, rows, unit)
                for stats, w in done.unit_stats:
                    weight += w
                    for k, v in stats.items():
                        if k != "explained_variance":  # the batch's is logged by estimate
                            sums[k] = sums.get(k, 0.0) + float(v) * w
                if done.grad_norm is None:
                    skipped += 1
                    continue
                norms.append(done.grad_norm)
                losses.append(done.loss)
        self.fits += 1
        self._batch = None
        # spent: not held through the next rollout beside the engine's weight copies
        self.learner.optimizer.zero_grad(set_to_none=True)
        if self.learner.world.distributed:
            parts = self.learner.world.all_gather_object((sums, weight))
            sums = {k: sum(p[0].get(k, 0.0) for p in parts) for k in sums}
            weight = sum(p[1] for p in parts)
        out = {k: v / max(weight, 1.0) for k, v in sums.items()}
        out["critic_loss"] = sum(losses) / max(1, len(losses))
        out["critic_grad_norm"] = sum(norms) / max(1, len(norms))
        out["critic_lr"] = self.learner.scheduler.get_last_lr()[0]
        out["critic_skipped_updates"] = skipped
        return out

    def _unit_loss(
        self,
        mask: torch.Tensor,
        old_values: torch.Tensor,
        returns: torch.Tensor,
        agg: dict[str, Any],
        device: torch.device,
        rows: torch.Tensor,
        values: torch.Tensor,
        _none: torch.Tensor | None,
    ) -> tuple[torch.Tensor, dict[str, Any], float]:
        width = values.shape[1]
        m = mask[rows, :width].to(device)
        per_token, stats = value_loss(
            values,
            old_values[rows, :width].to(device),
            returns[rows, :width].to(device),
            m,
            clip=self.cfg.critic.value_clip,
        )
        return aggregate_loss(per_token, m, **agg), stats, float(m.sum())

    def state_dict(self) -> dict[str, Any]:
        """The critic's whole weights, optimizer and scheduler states, and its warm-up count
        (under FSDP gathered: a collective every rank makes)."""
        return {
            "model": self.critic.full_state(),
            "optimizer": self.critic.full_optimizer_state(self.learner.optimizer),
            "scheduler": self.learner.scheduler.state_dict(),
            "fits": self.fits,
        }

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if state is None:
            raise UserError(
                "--resume: the checkpoint holds no critic (it was saved by a run without "
                "algorithm.advantage=gae)"
            )
        self.critic.load_state(state["model"], self.learner.optimizer, state["optimizer"])
        self.learner.scheduler.load_state_dict(state["scheduler"])
        self.fits = int(state["fits"])


CRITIC_LR_RATIO = 10.0
"""critic.lr unset: this many times optimizer.lr (verl's defaults: actor 1e-6, critic 1e-5).
Measured on the embedded default (docs/ppo.md): at 1x (1e-4) the zero-initialised head was
still at V = 0.59 when the reward was 0.92 after 60 steps; at 10x V followed the reward
within 20 steps; greedy accuracy was the same (0.995)."""


def critic_lr(cfg: Config) -> float:
    """The critic's peak learning rate: critic.lr, or CRITIC_LR_RATIO x optimizer.lr."""
    return cfg.critic.lr if cfg.critic.lr is not None else CRITIC_LR_RATIO * cfg.optimizer.lr


def build_advantage_source(
    cfg: Config,
    policy: Policy,
    forward: PaddedForward | PackedForward,
    total_updates: int,
) -> GroupAdvantages | CriticAdvantages:
    """The advantage source `algorithm.advantage` names; a critic is built beside `policy`."""
    if not ADVANTAGE_ESTIMATOR_SPECS[cfg.algorithm.advantage].needs_critic:
        return GroupAdvantages(cfg)
    critic = build_critic(cfg, policy, policy.world)
    opt_cfg = replace(cfg.optimizer, lr=critic_lr(cfg))
    optimizer = build_optimizer(critic.model, opt_cfg)
    learner = Learner(
        critic,
        forward,
        optimizer,
        build_scheduler(optimizer, max(1, total_updates), opt_cfg),
        max_grad_norm=opt_cfg.max_grad_norm,
        max_consecutive_skips=cfg.training.max_consecutive_skips,
        outputs="values",
    )
    return CriticAdvantages(cfg, critic, learner)
