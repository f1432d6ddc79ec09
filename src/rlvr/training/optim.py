"""AdamW with linear warm-up followed by a constant, linear or cosine schedule."""

from __future__ import annotations

import math
from typing import Any

import torch

from rlvr.config import OptimizerConfig


def build_optimizer(model: Any, cfg: OptimizerConfig) -> torch.optim.AdamW:
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(
        params,
        lr=cfg.lr,
        betas=(cfg.beta1, cfg.beta2),
        eps=cfg.adam_eps,
        weight_decay=cfg.weight_decay,
    )


def lr_factor(step: int, total: int, cfg: OptimizerConfig) -> float:
    """Multiplier of the peak lr at optimizer step `step` (0-based) out of `total`.

    Warm-up: (step + 1) / warmup_steps. Then constant 1, or a linear / cosine decay from 1 to
    min_lr_ratio over the remaining steps.
    """
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return 1.0
    span = max(1, total - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    floor = cfg.min_lr_ratio
    if cfg.schedule == "linear":
        return 1.0 - (1.0 - floor) * progress
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def build_scheduler(
    optimizer: torch.optim.Optimizer, total_steps: int, cfg: OptimizerConfig
) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, total_steps, cfg)
    )
