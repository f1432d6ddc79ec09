"""The contract of a rollout engine (`Engine`), the one batch type every engine fills, and the
sampling parameters it obeys."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from rlvr.rewards.base import Failure


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

    Multi-turn rollouts (rlvr.rollout.multi_turn) also fill:
    loss_masks[i]: 1-D float tensor, same length as completion_ids[i]: 1 on tokens the policy
        sampled, 0 on tokens an environment inserted (tool output, chat-template turn markers).
        Their log-probs are 0 and they never enter the loss, the KL or a length normaliser.
        None (the single-turn case) means every completion token was sampled.
    tools[i]: what the row's environment did (`ToolRecord`).

    Partial rollouts (an engine that took new weights mid-batch, `WeightFeed`) also fill:
    versions[i]: 1-D int64 tensor, same length as completion_ids[i]: the policy version whose
        weights sampled each token. None: every token was sampled by the weights the call
        started with.
    """

    prompt_ids: list[torch.Tensor]
    completion_ids: list[torch.Tensor]
    completion_text: list[str]
    logprobs: list[torch.Tensor]
    finish_reason: list[str]
    prompt_index: list[int]
    group_ids: torch.Tensor = field(default=None)  # type: ignore[assignment]
    loss_masks: list[torch.Tensor] | None = None
    tools: list[ToolRecord] | None = None
    versions: list[torch.Tensor] | None = None

    def __post_init__(self) -> None:
        n = len(self.completion_ids)
        for name in ROW_FIELDS[1:] + OPTIONAL_ROW_FIELDS:
            if getattr(self, name) is not None and len(getattr(self, name)) != n:
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
        """Tokens the policy sampled in each completion (inserted observation tokens excluded):
        the length every metric, length penalty and budget reads."""
        if self.loss_masks is None:
            return [int(c.numel()) for c in self.completion_ids]
        return [int(m.sum()) for m in self.loss_masks]

    def rewards_with_env(self, rewards: list[float]) -> list[float]:
        """`rewards` (the verifier's, row-aligned) with each reward an environment gave in
        its place."""
        if self.tools is None:
            return rewards
        return [r if t.env_reward is None else t.env_reward for r, t in zip(rewards, self.tools)]

    @property
    def environment_scored(self) -> list[bool] | None:
        """Per row, whether its environment gave its reward (so no verifier need score it);
        None for single-turn batches."""
        if self.tools is None:
            return None
        return [t.env_reward is not None for t in self.tools]

    def environment_failures(self) -> list[Failure]:
        """The records of the rows whose environment failed (multi-turn rows only), in order."""
        return [t.failure for t in self.tools or () if t.failure is not None]

    def take(self, rows: list[int], prompt_index: list[int]) -> RolloutBatch:
        """The batch of `rows` (in that order), with the given prompt_index."""
        return take_rows([(self, r) for r in rows], prompt_index)


@dataclass(frozen=True)
class ToolRecord:
    """One multi-turn row: its environment's tool calls (errors and timeouts among them, and
    the seconds they took), the model turns it had, the reward the environment gave at the
    end (None: the verifier scores the transcript), the transcript as (who, text) parts,
    who being "model" (sampled) or "env" (inserted), in order, and `failure`: the record of
    the environment failing the row (its reset or step raised, or a step returned something
    wrong; the row ended and its env_reward is 0), else None; `metrics`: the environment's
    own figures for the row (StepResult.metrics; none when it failed)."""

    calls: int = 0
    errors: int = 0
    timeouts: int = 0
    seconds: float = 0.0
    turns: int = 1
    env_reward: float | None = None
    transcript: tuple[tuple[str, str], ...] = ()
    failure: Failure | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)


# Every per-row field of a RolloutBatch (prompt_index last: callers renumber it), then the
# optional ones (None when no row has them).
ROW_FIELDS = (
    "completion_ids",
    "prompt_ids",
    "completion_text",
    "logprobs",
    "finish_reason",
    "prompt_index",
)
OPTIONAL_ROW_FIELDS = ("loss_masks", "tools", "versions")


Prompts = Sequence[Sequence[int]] | Sequence[torch.Tensor]


class WeightFeed(Protocol):
    """Newer weights for an engine in the middle of a call (partial rollouts).

    version: the policy version the engine's model holds now.
    poll: when newer weights were published since, load them into the engine's model (the
        rollout replica) and return True; else False. The engine calls it between tokens, so
        each token is sampled by one version (the one `version` names when it is sampled).
    """

    @property
    def version(self) -> int: ...

    def poll(self) -> bool: ...


class GroupRequests(Protocol):
    """What a streaming engine call (`stream`, rollout.async_unit=group) pulls prompts from and
    hands finished groups to.

    take(limit, wait): up to `limit` prompts (token ids) to start now, [] when none may start
        yet; with `wait` (the engine has nothing left to decode) it blocks until one may, and
        [] ends the call.
    done(index, batch): the `n` rows of the index-th prompt taken (0-based, over the call),
        all finished: a RolloutBatch of n rows, prompt_index 0. Called in the engine's thread
        between decode steps, in the order groups finish.
    """

    def take(self, limit: int, wait: bool) -> list[Sequence[int]]: ...

    def done(self, index: int, batch: RolloutBatch) -> None: ...


class Engine(Protocol):
    """What every rollout engine (`fast`, `hf`, `vllm`, and `MultiTurnEngine` around one of them)
    offers the rollout source and the evaluation.

    generate: `n` completions of each prompt (token ids), rows of one prompt contiguous. One
        draw from `generator` seeds the call (keyed sampling); `first_row` is the global index
        of the call's first row, so a row's draws do not depend on how a batch is split across
        calls; `samples[i]` is the sample prompt i came from (environments reset with it);
        `feed`: newer weights to take mid-call (`fast` and `vllm` switch at a token boundary
        and fill `RolloutBatch.versions`; `hf` finishes the call on the weights it started
        with).
    sync: take `model`'s current weights (a no-op for engines that read the model's modules).
    load_weights: take the weights of a state dict (a Ray worker's engine, over its own copy).
    release_cache: free what the engine keeps between calls before the update needs the memory.
    max_batch_size: rows decoded together (halved by the out-of-memory back-off).
    exact_logprobs: the engine's log-probs are the learner's own to fp32 rounding (False: other
        kernels; the update then computes its own and corrects for the sampler).
    """

    max_batch_size: int

    @property
    def exact_logprobs(self) -> bool: ...

    def generate(
        self,
        prompts: Prompts,
        n: int,
        sampling: SamplingParams,
        generator: torch.Generator | None = None,
        first_row: int = 0,
        samples: Sequence[Mapping[str, Any]] | None = None,
        feed: WeightFeed | None = None,
    ) -> RolloutBatch: ...

    def sync(self, model: torch.nn.Module) -> None: ...

    def load_weights(self, state_dict: Mapping[str, torch.Tensor]) -> None: ...

    def release_cache(self) -> None: ...


def take_rows(rows: list[tuple[RolloutBatch, int]], prompt_index: list[int]) -> RolloutBatch:
    """One batch of the given (batch, row) pairs, in order, renumbered with `prompt_index`;
    optional per-row fields are kept when every source batch has them."""
    fields: dict[str, Any] = {
        name: [getattr(b, name)[i] for b, i in rows] for name in ROW_FIELDS[:-1]
    }
    for name in OPTIONAL_ROW_FIELDS:
        if rows and all(getattr(b, name) is not None for b, _ in rows):
            fields[name] = [getattr(b, name)[i] for b, i in rows]
    return RolloutBatch(**fields, prompt_index=prompt_index)


@dataclass
class Round:
    """One round of a rollout source: g completions of each sample, generated and scored;
    `rewards` row-aligned with `batch`; `errors`: the record of every completion of the round
    whose verifier or environment failed (rows numbered as in `batch`)."""

    batch: RolloutBatch
    rewards: list[float]
    failures: int  # verifier failures (raised, crashed, timed out, not a finite number): reward 0
    time_generate_s: float
    time_score_s: float
    components: dict[str, list[float]] = field(default_factory=dict)  # composite verifier parts
    errors: list[Failure] = field(default_factory=list)


def concat_batches(parts: list[tuple[int, RolloutBatch]]) -> RolloutBatch:
    """One batch from batches of consecutive prompt ranges, given as (index of the part's first
    prompt in the whole list, part) in order; prompt_index becomes the index in the whole list."""
    return take_rows(
        [(b, i) for _, b in parts for i in range(len(b))],
        [first + i for first, b in parts for i in b.prompt_index],
    )
