"""SFT examples: reading or drawing prompt/completion rows, tokenising them, packing them into
rows for the forward pass, and the seeded order they are trained in.

Token layout of one example: `prompt ids (encode_prompt, chat template when the model has one) +
completion ids + EOS`; prompt and completion are tokenised separately, which is how the model
sees them at generation time (the completion continues the encoded prompt).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

import torch

from rlvr.errors import ConfigError, DataError
from rlvr.forward.packing import pack
from rlvr.sft.config import SFTConfig, SFTDataConfig

IGNORE_INDEX = -100  # label of tokens that carry no loss (prompt and padding)


@dataclass(frozen=True)
class SFTExample:
    """One tokenised example; the loss covers `completion_ids` (which end with EOS)."""

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.completion_ids)


def tokenize_example(
    tokenizer: Any, prompt: str, completion: str, *, chat: bool, system_prompt: str | None = None
) -> SFTExample:
    """prompt ids (encode_prompt) + completion ids + EOS, tokenised separately."""
    from rlvr.models.loading import encode_prompt

    prompt_ids = encode_prompt(tokenizer, prompt, chat=chat, system_prompt=system_prompt)
    completion_ids = tokenizer(completion, add_special_tokens=False)["input_ids"]
    return SFTExample(tuple(prompt_ids), (*completion_ids, tokenizer.eos_token_id))


@dataclass
class SFTData:
    train: list[SFTExample]
    eval: list[SFTExample]
    dropped_long: int
    dropped_long_eval: int
    source: str  # the file, or "<task> demonstrations"
    longest_completion: int  # tokens, EOS included


@overload
def _row_text(row: Mapping[str, Any], name: str, where: str, *, required: Literal[True]) -> str: ...
@overload
def _row_text(
    row: Mapping[str, Any], name: str, where: str, *, required: Literal[False]
) -> str | None: ...
def _row_text(row: Mapping[str, Any], name: str, where: str, *, required: bool) -> str | None:
    value = row.get(name)
    if value is None or (isinstance(value, float) and value != value):  # NaN: empty pandas cell
        value = None
    if value is None or value == "":
        if required:
            raise DataError(f"{where}: field {name!r} must be a non-empty string, got {value!r}")
        return None
    if not isinstance(value, str) or (required and not value.strip()):
        raise DataError(f"{where}: field {name!r} must be a non-empty string, got {value!r}")
    return value


def rows_to_texts(
    rows: Sequence[Mapping[str, Any]], cfg: SFTDataConfig, origin: str
) -> list[tuple[str, str, str | None]]:
    """(prompt, completion, system) of every row; DataError naming file, row and field."""
    if not rows:
        raise DataError(f"{origin}: no rows (expected at least one prompt/completion pair)")
    out = []
    for number, row in enumerate(rows, start=1):
        where = f"{origin} row {number}"
        prompt = _row_text(row, cfg.prompt_field, where, required=True)
        completion = _row_text(row, cfg.completion_field, where, required=True)
        system = _row_text(row, cfg.system_field, where, required=False)
        out.append((prompt, completion, system))
    return out


def demonstration_texts(task: Any, task_name: str, n: int, seed: int) -> list[tuple]:
    """n (prompt, completion, system) demonstrations: `task.demonstration(task.sample_train())`."""
    if not callable(getattr(task, "demonstration", None)):
        raise ConfigError(
            f"task.task: '{task_name}' has no demonstrations; set data.path to a file of "
            "prompt/completion rows"
        )
    rng = random.Random(f"rlvr-sft-demonstrations-{seed}")
    samples = [task.sample_train(rng) for _ in range(n)]
    return [(s["prompt"], task.demonstration(s), s.get("system")) for s in samples]


def load_sft_data(cfg: SFTConfig, task: Any, tokenizer: Any, chat: bool) -> SFTData:
    """Read (or draw) the rows, tokenise them and drop those longer than data.max_length."""
    from rlvr.data.datasets import load_rows

    d = cfg.data
    if d.path:
        train_texts = rows_to_texts(load_rows(d.path), d, d.path)
        source = d.path
    else:
        train_texts = demonstration_texts(task, cfg.task.task, d.num_examples, d.seed)
        source = f"{cfg.task.task} demonstrations"
    eval_texts = rows_to_texts(load_rows(d.eval_path), d, d.eval_path) if d.eval_path else []

    def encode(texts: list[tuple], origin: str) -> list[SFTExample]:
        out = []
        for number, (p, c, s) in enumerate(texts, start=1):
            ex = tokenize_example(
                tokenizer, p, c, chat=chat, system_prompt=s or cfg.task.system_prompt
            )
            # An example must open with a prompt token: in a packed row, the first completion
            # token is predicted from its own prompt, never from the previous example's EOS.
            for name, ids in (("prompt", ex.prompt_ids), ("completion", ex.completion_ids[:-1])):
                if not ids:
                    raise DataError(f"{origin} row {number}: field {name!r} encodes to no tokens")
            out.append(ex)
        return out

    train = encode(train_texts, source)
    evals = encode(eval_texts, d.eval_path or "")
    kept = [e for e in train if not d.max_length or len(e) <= d.max_length]
    kept_eval = [e for e in evals if not d.max_length or len(e) <= d.max_length]
    if not kept:
        raise DataError(
            f"{source}: every row is longer than data.max_length = {d.max_length} tokens"
        )
    return SFTData(
        train=kept,
        eval=kept_eval,
        dropped_long=len(train) - len(kept),
        dropped_long_eval=len(evals) - len(kept_eval),
        source=source,
        longest_completion=max(len(e.completion_ids) for e in kept),
    )


# -- packing ------------------------------------------------------------------------------------


@dataclass
class PackedBatch:
    """Rows of one or more examples, right-padded to a common width T.

    input_ids, labels, position_ids, segment_ids: [R, T]. labels[r, t] is the token at t when t
    is a completion token, else IGNORE_INDEX (so logits at t - 1 predict it). segment_ids number
    the examples of a row 0, 1, ...; padding is one more segment, so it never sees real tokens
    and real tokens never see it.
    """

    input_ids: torch.Tensor
    labels: torch.Tensor
    position_ids: torch.Tensor
    segment_ids: torch.Tensor
    num_real_tokens: int

    @property
    def num_loss_tokens(self) -> int:
        return int((self.labels != IGNORE_INDEX).sum())

    @property
    def padding_fraction(self) -> float:
        return 1.0 - self.num_real_tokens / self.input_ids.numel()


def collate(rows: Sequence[Sequence[SFTExample]], pad_id: int) -> PackedBatch:
    """Lay out rows of examples (see PackedBatch)."""
    width = max(sum(len(e) for e in row) for row in rows)
    shape = (len(rows), width)
    input_ids = torch.full(shape, pad_id, dtype=torch.long)
    labels = torch.full(shape, IGNORE_INDEX, dtype=torch.long)
    position_ids = torch.zeros(shape, dtype=torch.long)
    segment_ids = torch.zeros(shape, dtype=torch.long)
    real = 0
    for r, row in enumerate(rows):
        t = 0
        for s, ex in enumerate(row):
            n_p, n = len(ex.prompt_ids), len(ex)
            input_ids[r, t : t + n] = torch.tensor(ex.prompt_ids + ex.completion_ids)
            labels[r, t + n_p : t + n] = torch.tensor(ex.completion_ids)
            position_ids[r, t : t + n] = torch.arange(n)
            segment_ids[r, t : t + n] = s
            t += n
        segment_ids[r, t:] = len(row)
        position_ids[r, t:] = torch.arange(width - t)
        real += t
    return PackedBatch(input_ids, labels, position_ids, segment_ids, real)


def micro_batches(
    examples: Sequence[SFTExample],
    pad_id: int,
    *,
    packing: bool,
    pack_length: int,
    micro_batch_size: int,
) -> list[PackedBatch]:
    """The forward/backward units of one optimizer batch."""
    if packing:
        rows = [[examples[i] for i in r] for r in pack([len(e) for e in examples], pack_length)]
    else:
        rows = [[e] for e in examples]
    return [
        collate(rows[i : i + micro_batch_size], pad_id)
        for i in range(0, len(rows), micro_batch_size)
    ]


# -- data order ---------------------------------------------------------------------------------


def epoch_order(num_examples: int, seed: int, epoch: int) -> list[int]:
    """The example order of one epoch: a pure function of (seed, epoch), so resuming needs only
    the step number to continue the same stream."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(num_examples, generator=gen).tolist()


def steps_per_epoch(num_examples: int, batch_size: int) -> int:
    return math.ceil(num_examples / batch_size)  # the last batch of an epoch may be smaller


def batch_indices(step: int, num_examples: int, batch_size: int, seed: int) -> list[int]:
    """Example indices of optimizer step `step` (1-based)."""
    spe = steps_per_epoch(num_examples, batch_size)
    epoch, position = divmod(step - 1, spe)
    start = position * batch_size
    return epoch_order(num_examples, seed, epoch)[start : start + batch_size]
