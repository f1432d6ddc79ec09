"""The one batch type every rollout engine fills, and the sampling parameters it obeys."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class SamplingParams:
    """How completions are sampled.

    temperature: 0 means greedy decoding. Otherwise logits are divided by it.
    top_k: keep the k most likely tokens (0 = off).
    top_p: nucleus sampling, keep the smallest set of tokens whose probability reaches p
        (1.0 = off).
    max_new_tokens: hard length limit of a completion, in tokens.
    stop: strings that end a completion; the completion keeps the token that completed the string.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 128
    stop: tuple[str, ...] = ()


@dataclass
class RolloutBatch:
    """Completions for a list of prompts, `n` per prompt, grouped contiguously.

    Row i belongs to prompt `prompt_index[i]`; the rows of one prompt are adjacent, so
    `group_ids` are 0,0,..,0,1,1,..,1,... All per-row lists have the same length.

    completion_ids[i]: 1-D LongTensor of generated tokens, including the EOS token when the
        completion stopped at EOS (the policy must learn to stop), excluding any padding.
    logprobs[i]: 1-D float tensor, same length as completion_ids[i]: the log-probability (nats)
        of each sampled token under the distribution it was actually sampled from (after
        temperature, top-k and top-p). For greedy decoding it is the log-softmax of the raw logits.
    finish_reason[i]: "eos" (stopped at an EOS token), "stop" (a stop string appeared) or
        "length" (hit max_new_tokens: truncated).
    """

    prompt_ids: list[torch.Tensor]
    completion_ids: list[torch.Tensor]
    completion_text: list[str]
    logprobs: list[torch.Tensor]
    finish_reason: list[str]
    prompt_index: list[int]
    group_ids: torch.Tensor = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        n = len(self.completion_ids)
        for name in ("prompt_ids", "completion_text", "logprobs", "finish_reason", "prompt_index"):
            if len(getattr(self, name)) != n:
                raise ValueError(
                    f"RolloutBatch.{name} has {len(getattr(self, name))} rows, expected {n}"
                )
        if self.group_ids is None:
            self.group_ids = torch.tensor(self.prompt_index, dtype=torch.long)

    def __len__(self) -> int:
        return len(self.completion_ids)

    @property
    def truncated(self) -> list[bool]:
        return [r == "length" for r in self.finish_reason]

    @property
    def completion_lengths(self) -> list[int]:
        return [int(c.numel()) for c in self.completion_ids]


@dataclass
class Round:
    """One round of a rollout source: g completions of each sample, generated and scored;
    `rewards` row-aligned with `batch`."""

    batch: RolloutBatch
    rewards: list[float]
    failures: int  # verifier failures (raised, crashed, timed out, non-finite): reward 0
    time_generate_s: float
    time_score_s: float
    components: dict[str, list[float]] = field(default_factory=dict)  # composite verifier parts


def concat_batches(parts: list[tuple[int, RolloutBatch]]) -> RolloutBatch:
    """One batch from batches of consecutive prompt ranges, given as (index of the part's first
    prompt in the whole list, part) in order; prompt_index becomes the index in the whole list."""
    return RolloutBatch(
        prompt_ids=[p for _, b in parts for p in b.prompt_ids],
        completion_ids=[c for _, b in parts for c in b.completion_ids],
        completion_text=[t for _, b in parts for t in b.completion_text],
        logprobs=[lp for _, b in parts for lp in b.logprobs],
        finish_reason=[r for _, b in parts for r in b.finish_reason],
        prompt_index=[first + i for first, b in parts for i in b.prompt_index],
    )
