"""The fast rollout engine: static KV cache, shared prompt prefill, continuous batching.

Same contract as `HFEngine` (rows prompt-major, EOS kept, exact sampling log-probs, stop
strings), built for throughput:

1. Static cache: K/V live in `SlotKVCache` buffers [slots, kv_heads, max_len, head_dim],
   allocated once and reused across calls while the shapes fit.
2. Prefix sharing: each prompt is prefilled once; its K/V and next-token logits are copied into
   the slots of its `n` samples. Prompts are prefilled in batches of at most
   `max_prefill_tokens` padded tokens, loaded into their slots before the next batch runs.
3. Continuous batching: at most `max_batch_size` slots decode together; when a row ends, its
   slot takes the next pending (prompt, sample) row at once, so a long tail does not idle the
   batch. When nothing is pending, finished slots are compacted away and the batch narrows.
4. The forward pass is `LlamaFamilyDecoder` (written over the model's own modules; only the
   last position's logits are computed). Other architectures fall back to `HFEngine`.

Per step: one sampling call on [W, V] logits, batched EOS/length checks, one host sync to learn
whether any row finished; stop strings are decoded only when set. See docs/rollout.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from rlvr.rollout.decode_loop import DecodeLoop, as_prompt_tensor
from rlvr.rollout.hf_engine import HFEngine
from rlvr.rollout.kv_cache import SlotKVCache
from rlvr.rollout.llama_decoder import LlamaFamilyDecoder, sliding_window, unsupported_reason
from rlvr.rollout.sampling import check_sampling_params, row_keys, sampling_seed
from rlvr.rollout.types import GroupRequests, RolloutBatch, SamplingParams, WeightFeed

# The cache length is rounded up to a multiple of this, so calls with slightly different
# prompt lengths reuse the same buffers (and, when compiled, the same graph).
_LENGTH_QUANTUM = 64


PACK_MIN_HIDDEN = 512  # measured: hidden 128 ran 0.77x as fast packed, hidden 576 1.56x


class FastEngine:
    """Generate completions like `HFEngine`, faster, for Llama-family models.

    model, tokenizer, max_batch_size, eos_token_ids, pad_token_id: as in `HFEngine`
        (max_batch_size = slots decoded together).
    compile: wrap the decode step in `torch.compile` (static shapes: the width is the row count
        rounded up to a power of two, capped at max_batch_size, and never narrows). Off by
        default: its compile time is not repaid by a typical run on a CPU (docs/rollout.md).
    compile_backend: the `torch.compile` backend ("inductor"; "eager" only traces).
    fuse_projections: multiply by fused q/k/v and gate/up copies of the plain linear weights
        (more memory, fewer ops per step), kept between calls and rebuilt per layer when a
        weight they were made from changed (`weight_stamp.Stamp`; `release_cache()` frees
        them).
    pack_weights: hold those copies (and o/down projections and the output head) in oneDNN's
        pre-packed layout (fp32 on CPU only). None = auto: on when the model's
        hidden size is at least PACK_MIN_HIDDEN, where it measured faster (docs/rollout.md).
    max_prefill_tokens: padded prompt tokens prefilled in one forward (at least one prompt);
        a prefill holds activations and keys/values in proportion to them, so this bounds the
        memory prompts take on top of the K/V slots (max_batch_size rows).
    hf_rounding: in half precision, round every product, norm and sum as HF's modules do, so
        that greedy tokens and log-probs are the model's own forward's (`exact_logprobs`).
        False: the fastest kernels instead (norms folded into the weights, residual adds fused
        into the matmuls, attention regrouped by kv head as in fp32): for a bf16 replica whose
        log-probs the learner recomputes (`rollout.dtype`). No effect in float32.
    Unsupported architectures (see `llama_decoder.unsupported_reason`) are served by an
    internal `HFEngine`; `fallback_reason` says why, and is None when the fast path is used.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer,
        *,
        max_batch_size: int = 256,
        eos_token_ids: list[int] | None = None,
        pad_token_id: int | None = None,
        compile: bool = False,
        compile_backend: str = "inductor",
        fuse_projections: bool = True,
        pack_weights: bool | None = None,
        max_prefill_tokens: int = 4096,
        hf_rounding: bool = True,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"FastEngine max_batch_size must be >= 1, got {max_batch_size}")
        if max_prefill_tokens < 1:
            raise ValueError(
                f"FastEngine max_prefill_tokens must be >= 1, got {max_prefill_tokens}"
            )
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.max_prefill_tokens = max_prefill_tokens
        self.compile = compile
        # the reference engine serves unsupported calls and resolves the EOS and pad ids
        self._hf = HFEngine(
            model,
            tokenizer,
            max_batch_size=max_batch_size,
            eos_token_ids=eos_token_ids,
            pad_token_id=pad_token_id,
        )
        self.eos_token_ids = self._hf.eos_token_ids
        self.pad_token_id = self._hf.pad_token_id
        # A peft (LoRA) wrapper: run the wrapped model's modules, adapters included.
        get_base_model = getattr(model, "get_base_model", None)
        inner = get_base_model() if get_base_model is not None else model
        self.fallback_reason = unsupported_reason(inner)
        if pack_weights is None:
            pack_weights = getattr(inner.config, "hidden_size", 0) >= PACK_MIN_HIDDEN
        self._decoder = (
            LlamaFamilyDecoder(inner, fuse_projections, pack_weights, hf_rounding)
            if self.fallback_reason is None
            else None
        )
        self.window = sliding_window(inner) if self._decoder is not None else None
        self._cache: SlotKVCache | None = None
        self._decode = self._decoder.decode if self._decoder is not None else None
        if compile and self._decoder is not None:
            self._decode = torch.compile(
                self._decoder.decode, backend=compile_backend, dynamic=False
            )

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def exact_logprobs(self) -> bool:
        """The model's own weights through the same math as its forward, to fp32 rounding (or,
        in half precision, HF's rounding)."""
        if self._decoder is None or self._decoder.hf_rounding:
            return True
        return next(self.model.parameters()).dtype == torch.float32

    def sync(self, model: torch.nn.Module) -> None:
        """Generate with `model`'s current weights (see HFEngine.sync); kept copies follow their
        source weights' version counters."""
        self._hf.sync(model)

    def load_weights(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Copy `state_dict` into the engine's model (nothing when it is the model's own)."""
        self._hf.load_weights(state_dict)

    def release_cache(self) -> None:
        """Free what is kept between calls: the K/V buffers and the fused/packed weight copies
        (the next call makes them again). The GRPO trainer calls this after each rollout: its
        update needs the memory, and changes every weight, so the copies could not serve the
        next rollout anyway (making the buffers again costs one zero-fill, ~0.1 s per GB).
        Also the way to force fresh copies after writing weights behind their version
        counters, through `.data` (see `weight_stamp.Stamp`)."""
        self._cache = None
        self.release_weights()

    def release_weights(self) -> None:
        """Free the kept fused/packed weight copies only (the K/V buffers stay)."""
        if self._decoder is not None:
            self._decoder.release(weights=True)

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
        generator, first_row: as in HFEngine.generate (keyed sampling: the same seed gives the
            same completions as HFEngine, whatever the slot schedule or max_batch_size).
        feed: partial rollouts. Before each decode forward the engine polls it; when it loaded
            newer weights into the model, the decode continues every unfinished row with them
            (the kept fused/packed copies are rebuilt, the K/V cache of the tokens so far is
            kept: docs/concepts/async-rl.md), and `versions` records which version sampled each
            token. A row's draws stay keyed, so only the weights change what it samples.
        Returned tensors are on the CPU; the model runs in eval mode under no_grad and its
        training flag is restored afterwards.
        """
        check_sampling_params(sampling)
        if n < 1:
            raise ValueError(f"FastEngine.generate: n must be >= 1, got {n}")
        prompt_tokens: Sequence[Sequence[int] | torch.Tensor] = prompts
        prompt_ids = [as_prompt_tensor(p, i) for i, p in enumerate(prompt_tokens)]
        max_len = max((p.numel() for p in prompt_ids), default=0) + sampling.max_new_tokens
        decoder, decode = self._decoder, self._decode
        if (
            not prompt_ids
            or decoder is None
            or decode is None
            or (self.window is not None and max_len > self.window)
        ):
            return self._hf.generate(prompt_ids, n, sampling, generator, first_row, feed=feed)

        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                decoder.prepare()
                rows = torch.arange(len(prompt_ids) * n) + first_row
                keys = row_keys(sampling_seed(generator), rows)
                run = DecodeLoop(self, decoder, decode, prompt_ids, n, sampling, keys, feed)
                completions, logprobs, reasons = run.decode()
        finally:
            decoder.release()
            self.model.train(was_training)
        texts = [self.completion_text(c, r) for c, r in zip(completions, reasons, strict=True)]
        return RolloutBatch(
            prompt_ids=[p for p in prompt_ids for _ in range(n)],
            completion_ids=completions,
            completion_text=texts,
            logprobs=logprobs,
            finish_reason=reasons,
            prompt_index=[i for i in range(len(prompt_ids)) for _ in range(n)],
            versions=run.versions if feed is not None else None,
        )

    def stream(
        self,
        requests: GroupRequests,
        n: int,
        sampling: SamplingParams,
        generator: torch.Generator | None = None,
        feed: WeightFeed | None = None,
    ) -> None:
        """Generate groups without batch boundaries (rollout.async_unit=group): continuous
        batching over an open-ended supply of prompts. Free slots ask `requests.take` for
        prompts, and each group (the `n` rows of one prompt) goes to `requests.done` as soon
        as its last row ends, so a long completion holds back its own group only. Rows are
        keyed by their index over the call (one seed drawn from `generator`); `feed` as in
        `generate` (a call spans many weight versions). Returns when `take(wait=True)` gives
        []. The K/V buffers fit the longest prompt taken so far; a longer one waits until the
        rows in flight end, then they grow."""
        check_sampling_params(sampling)
        if n < 1:
            raise ValueError(f"FastEngine.stream: n must be >= 1, got {n}")
        decoder, decode = self._decoder, self._decode
        if decoder is None or decode is None:
            raise ValueError(
                "rollout.async_unit=group needs the fast engine's own decoder; this model is "
                f"served by the HF fallback: {self.fallback_reason}"
            )
        first = requests.take(max(1, self.max_batch_size // n), True)
        if not first:
            return
        prompts = [as_prompt_tensor(p, i) for i, p in enumerate(first)]
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                decoder.prepare()
                seed = sampling_seed(generator)
                keys = row_keys(seed, torch.arange(len(prompts) * n))
                run = DecodeLoop(
                    self, decoder, decode, prompts, n, sampling, keys, feed, self.max_batch_size
                )
                run.stream(requests, seed)
        finally:
            decoder.release()
            self.model.train(was_training)

    def slot_cache(self, decoder: LlamaFamilyDecoder, slots: int, max_len: int) -> SlotKVCache:
        """The kept buffers when they fit this call, else new ones (replacing them)."""
        param = next(self.model.parameters())
        max_len = -(-max_len // _LENGTH_QUANTUM) * _LENGTH_QUANTUM
        shape = (decoder.num_layers, slots, decoder.kv_heads, max_len, decoder.head_dim)
        if self._cache is None or not self._cache.fits(*shape, param.dtype, param.device):
            self._cache = None  # free the old buffers before allocating the new ones
            self._cache = SlotKVCache(*shape, param.dtype, param.device)
        return self._cache

    def completion_text(self, completion: torch.Tensor, reason: str) -> str:
        ids = completion[:-1] if reason == "eos" else completion
        return self.tokenizer.decode(ids.tolist(), skip_special_tokens=False)
