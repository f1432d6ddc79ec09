"""The reference rollout engine: a batched, KV-cached decode loop over any HF causal LM.

It does not call `model.generate`: owning the loop lets us record the exact log-probability of
every sampled token (see `sampling.sample_next`) and apply stop strings the same way every engine
does. Prompts are left-padded so that the last position of every row is its next-token position.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache

from rlvr.rollout.sampling import check_sampling_params, row_keys, sample_next, sampling_seed
from rlvr.rollout.types import RolloutBatch, SamplingParams, WeightFeed

FINISH_REASONS = ("length", "eos", "stop")  # index = code stored in the decode loop
_LENGTH, _EOS, _STOP = 0, 1, 2
# Tokens decoded beyond the longest stop string when checking a row's tail, so that a stop
# string split across several multi-character or partial-byte tokens is still seen.
_STOP_TAIL_MARGIN = 8


@dataclass
class _DecodedChunk:
    """Raw decode-loop output for B rows: tensors padded to the longest completion."""

    tokens: torch.Tensor  # [B, T] long
    logprobs: torch.Tensor  # [B, T] float32, nats
    lengths: torch.Tensor  # [B] long, completion length of each row in tokens
    reasons: torch.Tensor  # [B] long, index into FINISH_REASONS


class HFEngine:
    """Generate completions with a Hugging Face causal LM, recording per-token log-probs.

    model: any `AutoModelForCausalLM`-style module accepting attention_mask, position_ids and a
        KV cache. The engine holds a reference, not a copy: when the trainer updates this same
        object, the engine generates with the new weights without any `load_weights` call.
    max_batch_size: rows (prompt x sample) decoded together; larger inputs run in chunks.
    eos_token_ids: tokens that end a completion; default = model.generation_config.eos_token_id
        together with tokenizer.eos_token_id.
    pad_token_id: fed for left padding and to finished rows; default tokenizer pad, else EOS.
    """

    exact_logprobs = (
        True  # the trainer's own modules and arithmetic: its log-probs to fp32 rounding
    )

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer,
        *,
        max_batch_size: int = 256,
        eos_token_ids: list[int] | None = None,
        pad_token_id: int | None = None,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"HFEngine max_batch_size must be >= 1, got {max_batch_size}")
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.eos_token_ids = (
            list(eos_token_ids) if eos_token_ids is not None else _default_eos_ids(model, tokenizer)
        )
        self.pad_token_id = _default_pad_id(tokenizer, self.eos_token_ids, pad_token_id)
        # A peft (LoRA) wrapper forwards **kwargs to the model it wraps: inspect that one.
        get_base_model = getattr(model, "get_base_model", None)
        inner = get_base_model() if get_base_model is not None else model
        forward_params = inspect.signature(inner.forward).parameters
        # transformers >= 5.x renamed `past_key_values` to `cache`; accept either.
        self._cache_kwarg = "cache" if "cache" in forward_params else "past_key_values"
        self._supports_logits_to_keep = "logits_to_keep" in forward_params

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def load_weights(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Copy `state_dict` into the engine's model.

        Fast path: when every tensor already *is* the engine model's own storage (the trainer
        passed `model.state_dict()` of the same object it updates in place), nothing is copied.
        """
        own = self.model.state_dict()
        if all(k in own and own[k].data_ptr() == v.data_ptr() for k, v in state_dict.items()):
            return
        self.model.load_state_dict(state_dict)

    def sync(self, model: torch.nn.Module) -> None:
        """Generate with `model`'s current weights: nothing to do when it is the engine's own
        model (the engine reads its modules), else its state is copied in."""
        if model is not self.model:
            self.load_weights(model.state_dict())

    def release_cache(self) -> None:
        """Nothing to free: this engine keeps nothing between calls and multiplies by the
        model's own weights (the fast engine keeps K/V buffers and fused/packed copies; see
        FastEngine.release_cache)."""

    def generate(
        self,
        prompts: Sequence[Sequence[int]] | Sequence[torch.Tensor],
        n: int,
        sampling: SamplingParams,
        generator: torch.Generator | None = None,
        first_row: int = 0,
        samples: Sequence[Mapping[str, Any]] | None = None,
        feed: WeightFeed | None = None,
    ) -> RolloutBatch:
        """Sample `n` completions per prompt; rows of one prompt are contiguous.

        prompts: token ids of each prompt (lists or 1-D tensors, any lengths >= 1).
        generator: one draw from it seeds the call's keyed sampling (see rollout.sampling);
            must live on the model's device. Unset: torch's global RNG.
        first_row: global index of this call's first row, for callers that split one batch
            across calls (data-parallel ranks, Ray workers): row r's draws depend only on the
            seed and first_row + r.
        samples: the samples the prompts come from; a single-turn engine does not read them
            (the engine interface carries them for multi-turn rollouts' environments).
        feed: not read: this engine finishes a call on the weights it started with (partial
            rollouts are the fast and vllm engines').
        Returned tensors are on the CPU. The model runs in eval mode under torch.no_grad and
        its training flag is restored afterwards.
        """
        check_sampling_params(sampling)
        if n < 1:
            raise ValueError(f"HFEngine.generate: n must be >= 1, got {n}")
        prompt_tokens: Sequence[Sequence[int] | torch.Tensor] = prompts
        prompt_ids = [_as_prompt_tensor(p, i) for i, p in enumerate(prompt_tokens)]
        row_prompts = [p for p in prompt_ids for _ in range(n)]
        prompt_index = [i for i in range(len(prompt_ids)) for _ in range(n)]
        keys = row_keys(sampling_seed(generator), torch.arange(len(row_prompts)) + first_row)

        completions: list[torch.Tensor] = []
        logprobs: list[torch.Tensor] = []
        reasons: list[str] = []
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                for start in range(0, len(row_prompts), self.max_batch_size):
                    chunk = row_prompts[start : start + self.max_batch_size]
                    chunk_keys = keys[start : start + self.max_batch_size]
                    decoded = self._decode_chunk(chunk, sampling, chunk_keys)
                    _append_rows(decoded, completions, logprobs, reasons)
        finally:
            self.model.train(was_training)

        texts = [self._completion_text(c, r) for c, r in zip(completions, reasons, strict=True)]
        return RolloutBatch(
            prompt_ids=row_prompts,
            completion_ids=completions,
            completion_text=texts,
            logprobs=logprobs,
            finish_reason=reasons,
            prompt_index=prompt_index,
        )

    def _decode_chunk(
        self,
        prompts: list[torch.Tensor],
        sampling: SamplingParams,
        keys: torch.Tensor,
    ) -> _DecodedChunk:
        """Prefill left-padded prompts, then decode one token per step for all rows at once."""
        device = self.device
        input_ids, attention_mask = _left_pad(prompts, self.pad_token_id, device)
        batch, max_new = input_ids.shape[0], sampling.max_new_tokens
        # Padding must not shift positions: the first real token of every row is position 0.
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache()
        logits = self._forward(input_ids, attention_mask, position_ids, cache)

        eos_ids = torch.tensor(self.eos_token_ids, dtype=torch.long, device=device)
        out_tokens = torch.full(
            (batch, max_new), self.pad_token_id, dtype=torch.long, device=device
        )
        out_logprobs = torch.zeros((batch, max_new), dtype=torch.float32, device=device)
        lengths = torch.full((batch,), max_new, dtype=torch.long, device=device)
        reasons = torch.full((batch,), _LENGTH, dtype=torch.long, device=device)
        done = torch.zeros(batch, dtype=torch.bool, device=device)
        next_position = position_ids[:, -1:] + 1
        keys = keys.to(device)

        for step in range(max_new):
            at = torch.full((batch,), step, dtype=torch.long, device=device)
            tokens, token_logprobs = sample_next(logits, sampling, keys=keys, positions=at)
            tokens = tokens.masked_fill(done, self.pad_token_id)
            out_tokens[:, step] = tokens
            out_logprobs[:, step] = token_logprobs

            finished = torch.isin(tokens, eos_ids) & ~done
            _mark_finished(finished, _EOS, step, lengths, reasons, done)
            if sampling.stop:
                finished = self._stop_string_hits(out_tokens, step, done, sampling.stop)
                _mark_finished(finished, _STOP, step, lengths, reasons, done)
            if step == max_new - 1 or bool(done.all()):
                break

            # Finished rows keep receiving pad tokens; their outputs are discarded.
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones(batch, 1)], dim=-1)
            logits = self._forward(tokens.unsqueeze(-1), attention_mask, next_position, cache)
            next_position = next_position + 1

        steps_run = int(lengths.max())
        return _DecodedChunk(
            tokens=out_tokens[:, :steps_run].cpu(),
            logprobs=out_logprobs[:, :steps_run].cpu(),
            lengths=lengths.cpu(),
            reasons=reasons.cpu(),
        )

    def _forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        cache: DynamicCache,
    ) -> torch.Tensor:
        """One cached forward pass; returns next-token logits [B, V] (last position only)."""
        kwargs = {self._cache_kwarg: cache, "use_cache": True}
        if self._supports_logits_to_keep:
            kwargs["logits_to_keep"] = 1
        out = self.model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, **kwargs
        )
        return out.logits[:, -1, :]

    def _stop_string_hits(
        self, out_tokens: torch.Tensor, step: int, done: torch.Tensor, stop: tuple[str, ...]
    ) -> torch.Tensor:
        """Rows (not yet done) whose completion tail now contains a stop string, as [B] bool.

        Only the last max(len(stop)) + margin tokens are decoded: the check runs after every
        token, so a stop string found there was completed by the token just sampled.
        """
        window = max(len(s) for s in stop) + _STOP_TAIL_MARGIN
        tails = out_tokens[:, max(0, step + 1 - window) : step + 1].tolist()
        active = (~done).nonzero().squeeze(-1).tolist()
        hits = torch.zeros_like(done)
        for row in active:
            text = self.tokenizer.decode(tails[row], skip_special_tokens=False)
            if any(s in text for s in stop):
                hits[row] = True
        return hits

    def _completion_text(self, completion: torch.Tensor, reason: str) -> str:
        """Decoded completion with special tokens kept, minus the trailing EOS token's text."""
        ids = completion[:-1] if reason == "eos" else completion
        return self.tokenizer.decode(ids.tolist(), skip_special_tokens=False)


def _mark_finished(
    finished: torch.Tensor,
    reason: int,
    step: int,
    lengths: torch.Tensor,
    reasons: torch.Tensor,
    done: torch.Tensor,
) -> None:
    """In place: rows in `finished` end after `step` (token kept) with finish code `reason`."""
    lengths.masked_fill_(finished, step + 1)
    reasons.masked_fill_(finished, reason)
    done |= finished


def _append_rows(
    decoded: _DecodedChunk,
    completions: list[torch.Tensor],
    logprobs: list[torch.Tensor],
    reasons: list[str],
) -> None:
    """Split a decoded chunk into per-row tensors trimmed to each row's length."""
    for row, length in enumerate(decoded.lengths.tolist()):
        completions.append(decoded.tokens[row, :length].clone())
        logprobs.append(decoded.logprobs[row, :length].clone())
        reasons.append(FINISH_REASONS[int(decoded.reasons[row])])


def _left_pad(
    prompts: list[torch.Tensor], pad_token_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack prompts right-aligned: returns (input_ids [B, L], attention_mask [B, L])."""
    width = max(p.numel() for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        input_ids[row, width - prompt.numel() :] = prompt
        attention_mask[row, width - prompt.numel() :] = 1
    return input_ids.to(device), attention_mask.to(device)


def _as_prompt_tensor(prompt: Sequence[int] | torch.Tensor, index: int) -> torch.Tensor:
    ids = torch.as_tensor(prompt, dtype=torch.long).detach().cpu()
    if ids.dim() != 1 or ids.numel() == 0:
        raise ValueError(
            f"HFEngine.generate: prompt {index} must be a non-empty 1-D list of token ids, "
            f"got shape {tuple(ids.shape)}"
        )
    return ids


def _default_eos_ids(model: torch.nn.Module, tokenizer) -> list[int]:
    """EOS ids from model.generation_config (int or list) plus tokenizer.eos_token_id."""
    ids: list[int] = []
    generation_config = getattr(model, "generation_config", None)
    config_eos = getattr(generation_config, "eos_token_id", None)
    if isinstance(config_eos, int):
        ids.append(config_eos)
    elif config_eos is not None:
        ids.extend(int(i) for i in config_eos)
    tokenizer_eos = getattr(tokenizer, "eos_token_id", None)
    if tokenizer_eos is not None and tokenizer_eos not in ids:
        ids.append(int(tokenizer_eos))
    if not ids:
        raise ValueError(
            "HFEngine: neither model.generation_config nor the tokenizer defines an EOS token; "
            "pass eos_token_ids=[...]"
        )
    return ids


def _default_pad_id(tokenizer, eos_token_ids: list[int], pad_token_id: int | None) -> int:
    if pad_token_id is not None:
        return pad_token_id
    tokenizer_pad = getattr(tokenizer, "pad_token_id", None)
    if tokenizer_pad is not None:
        return int(tokenizer_pad)
    if eos_token_ids:
        return eos_token_ids[0]
    raise ValueError(
        "HFEngine: the tokenizer has no pad token and no EOS id is known; pass pad_token_id"
    )
