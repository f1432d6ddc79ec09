"""`reward.verifier=rm:PATH`: completions scored by a trained reward model, a batch at a time.

`rm:PATH` names a directory `rlvr rm` wrote (RUN_DIR/final) or any Hugging Face sequence
classifier with one label (a local directory or a hub id). It is a component like any other
and combines by weight with rule verifiers: `rm:runs/rm/final:1.0,exact_answer:0.0` trains on
the learned reward while the rule's reward/exact_answer_mean is logged beside it (the
weight is the last `:NUMBER` of the item, rlvr.rewards.compose).

`RewardModelScorer` is a TRL-shaped reward function (rlvr.rewards.batched): the trainer's
Scorer calls it once per round with every completion of it, and it lays each one out as the
model was trained (rlvr.reward_model.model: `text`, prompt + completion + EOS; `chat`, the
chat template over the conversation with the completion as the assistant's turn; the layout
recorded in config.json by rlvr rm, else `chat` exactly when the tokenizer has a chat
template), scores `reward.rm_batch_size` sequences per forward under torch.no_grad on the
learner's device, and with `reward.rm_normalize=batch` z-scores the round's scores.

This package imports torch, which rlvr.rewards may not: the trainer passes
`learned_reward_resolver(cfg, device)` to `build_verifier` (`resolve`), and `rlvr train`
checks the spec with `learned_reward_check(cfg)` before any model loads. Where no resolver
is passed (rlvr eval, rlvr sample, rlvr verify, pipelines' rule stages) an rm: item is a
one-line ConfigError. reward.workers > 0 and distributed.ray are ConfigErrors too: the model
lives in the trainer process.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from rlvr.errors import ConfigError
from rlvr.reward_model.model import (
    FORMATS,
    Messages,
    encode_scored,
    has_chat_template,
    pad_right,
    recorded_format,
    sequence_rewards,
)
from rlvr.rewards.batched import BatchedReward
from rlvr.rewards.spec import LEARNED_PREFIX

NORMALIZATIONS = ("none", "batch")


class RewardModelScorer:
    """A reward model as a TRL-shaped reward function: `(prompts, completions, **columns) ->
    list[float]`, one score per completion (module docstring)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        layout: str | None = None,
        batch_size: int = 64,
        normalize: str = "none",
    ) -> None:
        if normalize not in NORMALIZATIONS:
            raise ConfigError(
                f"reward.rm_normalize: expected one of {', '.join(NORMALIZATIONS)}, got "
                f"{normalize!r}"
            )
        self.model, self.tokenizer = model.eval(), tokenizer
        self.layout = (
            layout
            or recorded_format(model.config)
            or ("chat" if has_chat_template(tokenizer) else "text")
        )
        if self.layout not in FORMATS:
            raise ValueError(f"layout must be one of {FORMATS}, got {self.layout!r}")
        self.batch_size, self.normalize = batch_size, normalize
        self.device = next(model.parameters()).device

    def encode(
        self, prompt: str | Messages, completion: str | Messages, system: str | None = None
    ) -> list[int]:
        """The token ids the model reads for one completion of `prompt`."""
        return encode_scored(self.tokenizer, prompt, completion, layout=self.layout, system=system)

    @torch.no_grad()
    def score_ids(self, sequences: Sequence[Sequence[int]]) -> list[float]:
        """The raw reward of each token sequence, `batch_size` sequences per forward; longest
        first, so rows of like length share a batch (less padding), returned in input order."""
        order = sorted(range(len(sequences)), key=lambda i: -len(sequences[i]))
        out = [0.0] * len(sequences)
        pad = self.tokenizer.pad_token_id
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            ids, mask = pad_right([sequences[i] for i in rows], pad)
            rewards = sequence_rewards(self.model, ids.to(self.device), mask.to(self.device))
            for i, r in zip(rows, rewards.tolist()):
                out[i] = r
        return out

    def __call__(
        self,
        prompts: Sequence[str | Messages],
        completions: Sequence[str | Messages],
        system: Sequence[str | None] | None = None,
        **columns: Any,
    ) -> list[float]:
        systems = list(system) if system is not None else [None] * len(completions)
        ids = [self.encode(p, c, s) for p, c, s in zip(prompts, completions, systems)]
        scores = self.score_ids(ids)
        if self.normalize == "batch":
            scores = z_scores(scores)
        return scores


def z_scores(values: Sequence[float]) -> list[float]:
    """(v - mean) / std over `values` (population std); all 0 when they are all equal."""
    n = len(values)
    if n == 0:
        return []
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / n)
    return [(v - mean) / std if std > 0 else 0.0 for v in values]


def _where(target: str) -> str:
    return f"reward.verifier: '{target}'"


def check_reward_model_dir(target: str) -> str:
    """The model path of an `rm:PATH` item; a ConfigError when a local PATH is missing or
    holds no one-label sequence classifier (a policy's final/ is a causal LM, not a reward
    model). A hub id is left to the loader."""
    path = target[len(LEARNED_PREFIX) :].strip()
    if not path:
        raise ConfigError(f"{_where(target)}: expected rm:PATH, a reward model's directory")
    local = Path(path).expanduser()
    if not local.exists():
        if path.startswith((".", "/", "~")) or path.count("/") > 1:
            raise ConfigError(f"{_where(target)}: directory {local} not found")
        return path  # a hub id
    config = local / "config.json"
    if not config.is_file():
        raise ConfigError(
            f"{_where(target)}: {local} has no config.json (expected the final/ directory of "
            "an rlvr rm run)"
        )
    try:
        meta = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"{_where(target)}: cannot read {config}: {e}") from None
    architectures = meta.get("architectures") or []
    labels = len(meta.get("id2label") or {"0": ""})
    if not any(str(a).endswith("ForSequenceClassification") for a in architectures):
        raise ConfigError(
            f"{_where(target)}: {local} is not a reward model (config.json architectures: "
            f"{', '.join(map(str, architectures)) or 'none'}); expected a sequence classifier "
            "with one label, such as rlvr rm's RUN_DIR/final"
        )
    if labels != 1:
        raise ConfigError(
            f"{_where(target)}: {local} is a classifier with {labels} labels; a reward model "
            "has one (a scalar score)"
        )
    return str(local)


def load_reward_scorer(
    target: str,
    device: torch.device,
    dtype: torch.dtype,
    *,
    batch_size: int = 64,
    normalize: str = "none",
    trust_remote_code: bool = False,
) -> RewardModelScorer:
    """The `RewardModelScorer` of an `rm:PATH` item, its model loaded for inference."""
    from transformers import AutoModelForSequenceClassification

    from rlvr.models.loading import load_tokenizer

    path = check_reward_model_dir(target)
    tokenizer = load_tokenizer(path, trust_remote_code)
    try:
        model: Any = AutoModelForSequenceClassification.from_pretrained(
            path, dtype=dtype, trust_remote_code=trust_remote_code
        )
    except (OSError, ValueError, RuntimeError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ConfigError(f"{_where(target)}: cannot load a reward model: {first}") from None
    model.to(device).requires_grad_(False)
    if getattr(model.config, "num_labels", 1) != 1:
        raise ConfigError(f"{_where(target)}: the model has {model.config.num_labels} labels")
    return RewardModelScorer(model, tokenizer, batch_size=batch_size, normalize=normalize)


def _check_in_process(cfg: Any, target: str) -> None:
    """An rm: component lives in the trainer process; worker pools and Ray cannot reach it."""
    if cfg.reward.workers > 0:
        raise ConfigError(
            f"reward.workers: {cfg.reward.workers} worker processes cannot score '{target}' "
            "(a learned reward is scored in the trainer process); set reward.workers=0"
        )
    if cfg.distributed.ray:
        raise ConfigError(
            f"distributed.ray: Ray reward actors cannot score '{target}' yet (a learned reward "
            "is scored in the trainer process); set distributed.ray=false"
        )


def learned_reward_resolver(cfg: Any, device: torch.device) -> Callable[[str], Any]:
    """`build_verifier`'s resolver for the trainer: an `rm:PATH` item as a BatchedReward of its
    `RewardModelScorer` on `device` (model.dtype's inference dtype there; reward.rm_*
    options), named by the item; None for any other item."""
    from rlvr.models.loading import resolve_dtype

    def resolve(target: str) -> BatchedReward | None:
        if not target.startswith(LEARNED_PREFIX):
            return None
        _check_in_process(cfg, target)
        scorer = load_reward_scorer(
            target,
            device,
            resolve_dtype(cfg.model.dtype, device),
            batch_size=cfg.reward.rm_batch_size,
            normalize=cfg.reward.rm_normalize,
            trust_remote_code=cfg.model.trust_remote_code,
        )
        return BatchedReward(scorer, name=target)

    return resolve


def learned_reward_check(cfg: Any) -> Callable[[str], Any]:
    """A resolver that checks `rm:PATH` items without loading them (`rlvr train` before the
    run starts): each becomes a placeholder that must never score."""

    def unloaded(prompts: Any, completions: Any, **columns: Any) -> list[float]:
        raise RuntimeError("a checked rm: placeholder was asked to score; load it instead")

    def resolve(target: str) -> BatchedReward | None:
        if not target.startswith(LEARNED_PREFIX):
            return None
        _check_in_process(cfg, target)
        check_reward_model_dir(target)
        return BatchedReward(unloaded, name=target)

    return resolve
