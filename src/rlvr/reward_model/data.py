"""Preference pairs for `rlvr rm`: read, checked row by row, laid out as token ids, split.

A row (the format TRL's RewardTrainer and OpenRLHF's train_rm read; column names in data.*):

    {"prompt": "347+285=", "chosen": "<think>...</think>632", "rejected": "522"}
    {"chosen": "full text A", "rejected": "full text B"}                     (no prompt)
    {"prompt": [{"role": "user", "content": "..."}],                         (conversational)
     "chosen": [{"role": "assistant", "content": "..."}],
     "rejected": [{"role": "assistant", "content": "..."}]}
    "margin": 0.5                                                            (optional)

Plain rows use the `text` layout and conversational ones the `chat` layout
(rlvr.reward_model.model); a file holds one kind only. A missing or malformed field is a
DataError naming the file, row (1-based) and field.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rlvr.errors import DataError
from rlvr.reward_model.config import RMConfig, RMDataConfig
from rlvr.reward_model.model import Messages, encode_scored


@dataclass(frozen=True)
class Pair:
    """One tokenised preference pair."""

    chosen: tuple[int, ...]
    rejected: tuple[int, ...]
    margin: float = 0.0

    def __len__(self) -> int:
        return max(len(self.chosen), len(self.rejected))


@dataclass(frozen=True)
class PairText:
    prompt: str | Messages
    chosen: str | Messages
    rejected: str | Messages
    margin: float
    chat: bool


@dataclass
class PairData:
    train: list[Pair]
    eval: list[Pair]
    layout: str  # "text" or "chat"
    dropped_long: int
    source: str


def _messages(value: list[Any], where: str, name: str) -> Messages:
    out = []
    for number, m in enumerate(value, start=1):
        if not isinstance(m, Mapping) or not isinstance(m.get("content"), str) or not m.get("role"):
            raise DataError(
                f"{where}: field {name!r} message {number}: expected an object with a 'role' "
                "and a string 'content'"
            )
        out.append({"role": str(m["role"]), "content": m["content"]})
    if not out:
        raise DataError(f"{where}: field {name!r} is an empty list of messages")
    return out


def _part(row: Mapping[str, Any], name: str, where: str, required: bool) -> str | Messages | None:
    value = row.get(name)
    if value is None or (isinstance(value, float) and math.isnan(value)) or value == "":
        if required:
            state = "is missing" if name not in row else f"is empty ({value!r})"
            raise DataError(
                f"{where}: field {name!r} {state}; expected a non-empty string or a list of "
                "chat messages"
            )
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return _messages(value, where, name)
    raise DataError(
        f"{where}: field {name!r} must be a string or a list of chat messages, got "
        f"{type(value).__name__}"
    )


def _margin(row: Mapping[str, Any], name: str, where: str) -> float:
    value = row.get(name)
    if value is None or value == "":
        return 0.0
    try:
        margin = float(value)
    except (TypeError, ValueError):
        raise DataError(f"{where}: field {name!r} must be a number, got {value!r}") from None
    if not math.isfinite(margin) or isinstance(value, bool):
        raise DataError(f"{where}: field {name!r} must be a finite number, got {value!r}")
    return margin


def rows_to_pairs(
    rows: Sequence[Mapping[str, Any]], d: RMDataConfig, origin: str
) -> list[PairText]:
    """Each row's (prompt, chosen, rejected, margin); one kind (plain or chat) per file."""
    if not rows:
        raise DataError(f"{origin}: no rows (expected at least one chosen/rejected pair)")
    out: list[PairText] = []
    for number, row in enumerate(rows, start=1):
        where = f"{origin} row {number}"
        chosen = _part(row, d.chosen_field, where, True)
        rejected = _part(row, d.rejected_field, where, True)
        prompt = _part(row, d.prompt_field, where, False) or ""
        assert chosen is not None and rejected is not None
        chat = any(isinstance(p, list) for p in (prompt, chosen, rejected))
        if out and chat != out[0].chat:
            kinds = ("plain text", "chat messages")
            raise DataError(
                f"{where}: holds {kinds[chat]} where row 1 holds {kinds[out[0].chat]}; a file "
                "holds one kind of pair"
            )
        if chat and prompt == "":  # TRL's implicit prompt: the conversation is in chosen
            prompt = []
        out.append(PairText(prompt, chosen, rejected, _margin(row, d.margin_field, where), chat))
    return out


def encode_pairs(texts: Sequence[PairText], tokenizer: Any, origin: str) -> list[Pair]:
    """Token ids of each pair in its layout (rlvr.reward_model.model.encode_scored)."""
    pairs = []
    for number, t in enumerate(texts, start=1):
        layout = "chat" if t.chat else "text"
        try:
            chosen = encode_scored(tokenizer, t.prompt, t.chosen, layout=layout)
            rejected = encode_scored(tokenizer, t.prompt, t.rejected, layout=layout)
        except Exception as e:  # a chat template's own checks (roles in turn, ...) raise many
            raise DataError(f"{origin} row {number}: cannot lay out the pair: {e}") from None
        pairs.append(Pair(tuple(chosen), tuple(rejected), t.margin))
    return pairs


def split_heldout(n: int, fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """(train, held-out) row indices: round(fraction * n) rows held out (at least 1 when the
    fraction is > 0 and n > 1), drawn with `seed`; each list in file order."""
    k = min(n - 1, max(1, round(fraction * n))) if fraction > 0 and n > 1 else 0
    held = set(random.Random(f"rlvr-rm-heldout-{seed}").sample(range(n), k))
    return [i for i in range(n) if i not in held], sorted(held)


def load_pairs(cfg: RMConfig, tokenizer: Any) -> PairData:
    """Read data.path (and data.eval_path), tokenise, split and drop pairs over max_length."""
    from rlvr.data.datasets import load_rows

    d = cfg.data
    assert d.path is not None  # RMConfig.validate
    texts = rows_to_pairs(load_rows(d.path), d, d.path)
    train = encode_pairs(texts, tokenizer, d.path)
    if d.eval_path:
        eval_texts = rows_to_pairs(load_rows(d.eval_path), d, d.eval_path)
        if eval_texts[0].chat != texts[0].chat:
            raise DataError(
                f"{d.eval_path}: holds {'chat' if eval_texts[0].chat else 'plain'} pairs, "
                f"{d.path} the other kind"
            )
        evals = encode_pairs(eval_texts, tokenizer, d.eval_path)
    else:
        keep, held = split_heldout(len(train), d.eval_fraction, d.seed)
        train, evals = [train[i] for i in keep], [train[i] for i in held]
    kept = [p for p in train if not d.max_length or len(p) <= d.max_length]
    if not kept:
        raise DataError(f"{d.path}: every pair is longer than data.max_length = {d.max_length}")
    return PairData(
        train=kept,
        eval=[p for p in evals if not d.max_length or len(p) <= d.max_length],
        layout="chat" if texts[0].chat else "text",
        dropped_long=len(train) - len(kept),
        source=d.path,
    )


@dataclass
class PairBatch:
    """A micro-batch: the chosen rows then the rejected ones, right-padded ([2P, T])."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    margin: torch.Tensor  # [P]

    @property
    def num_pairs(self) -> int:
        return int(self.margin.shape[0])


def collate_pairs(pairs: Sequence[Pair], pad_id: int) -> PairBatch:
    from rlvr.reward_model.model import pad_right

    ids, mask = pad_right([p.chosen for p in pairs] + [p.rejected for p in pairs], pad_id)
    return PairBatch(ids, mask, torch.tensor([p.margin for p in pairs], dtype=torch.float32))


def epoch_order(num_pairs: int, seed: int, epoch: int) -> list[int]:
    """The pair order of one epoch, a pure function of (seed, epoch), so a resumed run needs
    only its step number to continue the same stream (as rlvr sft's)."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(num_pairs, generator=gen).tolist()


def steps_per_epoch(num_pairs: int, batch_size: int) -> int:
    return math.ceil(num_pairs / batch_size)  # the last batch of an epoch may be smaller


def batch_indices(step: int, num_pairs: int, batch_size: int, seed: int) -> list[int]:
    """Pair indices of optimizer step `step` (1-based)."""
    epoch, position = divmod(step - 1, steps_per_epoch(num_pairs, batch_size))
    start = position * batch_size
    return epoch_order(num_pairs, seed, epoch)[start : start + batch_size]
