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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rlvr.rollout.hf_engine import FINISH_REASONS, HFEngine
from rlvr.rollout.kv_cache import SlotKVCache
from rlvr.rollout.llama_decoder import LlamaFamilyDecoder, sliding_window, unsupported_reason
from rlvr.rollout.sampling import (
    check_sampling_params,
    keyed_uniform,
    row_keys,
    sample_next,
    sampling_seed,
)
from rlvr.rollout.types import RolloutBatch, SamplingParams, WeightFeed

_LENGTH, _EOS, _STOP = (FINISH_REASONS.index(r) for r in ("length", "eos", "stop"))
_STOP_TAIL_MARGIN = 8  # as in HFEngine: tokens decoded beyond the longest stop string
# The cache length is rounded up to a multiple of this, so calls with slightly different
# prompt lengths reuse the same buffers (and, when compiled, the same graph).
_LENGTH_QUANTUM = 64


@dataclass
class _Prefill:
    """One batched prefill of prompts, kept until the last sample of its prompts took a slot."""

    keys: list[torch.Tensor]  # per layer [B, kv_heads, P, head_dim], right-padded prompts
    values: list[torch.Tensor]
    logits: torch.Tensor  # [B, V] float32: the distribution of each first completion token
    lengths: torch.Tensor  # [B] prompt lengths
    version: int = 0  # partial rollouts: the weights' version that computed it


@dataclass
class _Prefix:
    """One prefilled prompt: row `row` of a `_Prefill`."""

    prefill: _Prefill
    row: int
    length: int
    rows_left: int  # samples of this prompt that have not taken a slot yet


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
            LlamaFamilyDecoder(inner, fuse_projections, pack_weights)
            if self.fallback_reason is None
            else None
        )
        self._window = sliding_window(inner) if self._decoder is not None else None
        self._cache: SlotKVCache | None = None
        self._decode = self._decoder.decode if self._decoder is not None else None
        if compile and self._decoder is not None:
            self._decode = torch.compile(
                self._decoder.decode, backend=compile_backend, dynamic=False
            )

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    exact_logprobs = True  # the model's own weights through the same math, to fp32 rounding

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
        prompt_ids = [_as_prompt_tensor(p, i) for i, p in enumerate(prompt_tokens)]
        max_len = max((p.numel() for p in prompt_ids), default=0) + sampling.max_new_tokens
        decoder, decode = self._decoder, self._decode
        if (
            not prompt_ids
            or decoder is None
            or decode is None
            or (self._window is not None and max_len > self._window)
        ):
            return self._hf.generate(prompt_ids, n, sampling, generator, first_row, feed=feed)

        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                decoder.prepare()
                rows = torch.arange(len(prompt_ids) * n) + first_row
                keys = row_keys(sampling_seed(generator), rows)
                run = _Rollout(self, decoder, decode, prompt_ids, n, sampling, keys, feed)
                completions, logprobs, reasons = run.decode()
        finally:
            decoder.release()
            self.model.train(was_training)
        texts = [self._completion_text(c, r) for c, r in zip(completions, reasons, strict=True)]
        return RolloutBatch(
            prompt_ids=[p for p in prompt_ids for _ in range(n)],
            completion_ids=completions,
            completion_text=texts,
            logprobs=logprobs,
            finish_reason=reasons,
            prompt_index=[i for i in range(len(prompt_ids)) for _ in range(n)],
            versions=run.versions if feed is not None else None,
        )

    def _slot_cache(self, decoder: LlamaFamilyDecoder, slots: int, max_len: int) -> SlotKVCache:
        """The kept buffers when they fit this call, else new ones (replacing them)."""
        param = next(self.model.parameters())
        max_len = -(-max_len // _LENGTH_QUANTUM) * _LENGTH_QUANTUM
        shape = (decoder.num_layers, slots, decoder.kv_heads, max_len, decoder.head_dim)
        if self._cache is None or not self._cache.fits(*shape, param.dtype, param.device):
            self._cache = None  # free the old buffers before allocating the new ones
            self._cache = SlotKVCache(*shape, param.dtype, param.device)
        return self._cache

    def _completion_text(self, completion: torch.Tensor, reason: str) -> str:
        ids = completion[:-1] if reason == "eos" else completion
        return self.tokenizer.decode(ids.tolist(), skip_special_tokens=False)


PACK_MIN_HIDDEN = 512  # measured: hidden 128 ran 0.77x as fast packed, hidden 576 1.56x
# Narrow the batch once at least 1/_COMPACT_IDLE of the slots idle (nothing pending). Measured on
# the embedded default's rollouts (128 slots, 2-3 ms decode steps): at "half idle" 19% of the
# decoded rows were idle; at an eighth, decode time fell 13-25% (a compaction costs ~0.6 ms).
_COMPACT_IDLE = 8


class _Rollout:
    """One `generate` call: the slot schedule and the decode loop.

    Row r = prompt r // n, sample r % n. Slot state lives in [slots] device tensors, of which
    the first `width` are decoded each step; `slot_row[s]` (host) is the row slot s serves, or
    -1 when the slot is idle.
    """

    def __init__(
        self,
        engine: FastEngine,
        decoder: LlamaFamilyDecoder,
        decode: Callable[[torch.Tensor, torch.Tensor, SlotKVCache, int], torch.Tensor],
        prompts: list[torch.Tensor],
        n: int,
        sampling: SamplingParams,
        keys: torch.Tensor,
        feed: WeightFeed | None = None,
    ) -> None:
        self.engine, self.prompts, self.n = engine, prompts, n
        self.feed = feed
        # the engine's decoder and its decode step (compiled or not)
        self.decoder, self.decode_step = decoder, decode
        self.sampling = sampling
        self.device = engine.device
        self.num_rows = len(prompts) * n
        slots = min(engine.max_batch_size, self.num_rows)
        longest = max(p.numel() for p in prompts) + sampling.max_new_tokens
        if engine.compile:
            # A compiled step has a static width: a power of two, so few widths get compiled.
            slots = min(engine.max_batch_size, 1 << (slots - 1).bit_length())
        self.cache = engine._slot_cache(decoder, slots, longest)
        self.slots = slots
        device, max_new = self.device, sampling.max_new_tokens
        self.eos_ids = torch.tensor(engine.eos_token_ids, dtype=torch.long, device=device)
        self.tokens = torch.full((slots, max_new), engine.pad_token_id, device=device)
        self.token_logprobs = torch.zeros((slots, max_new), dtype=torch.float32, device=device)
        # partial rollouts, on the host: the version of the weights that computed each slot's
        # next-token logits (a prefill's, then every decode forward's), and so of each token
        self.logits_version = torch.zeros(slots, dtype=torch.long) if feed is not None else None
        self.token_versions = (
            torch.zeros((slots, max_new), dtype=torch.long) if feed is not None else None
        )
        self.versions: list[torch.Tensor] = []
        self.generated = torch.zeros(slots, dtype=torch.long, device=device)  # tokens so far
        self.positions = torch.zeros(slots, dtype=torch.long, device=device)  # next feed pos
        self.active = torch.zeros(slots, dtype=torch.bool, device=device)
        self.row_keys = keys.to(device)  # [num_rows] sampling key of each row
        # The uniform numbers of every completion position of each slot's row, computed when the
        # row takes the slot: one gather per step instead of the ~25 small ops of keyed_uniform
        # (the same values, so the same draws). Greedy decoding draws nothing.
        self.slot_uniforms = (
            torch.zeros((slots, max_new), dtype=torch.float64, device=device)
            if sampling.temperature > 0
            else None
        )
        self.completion_positions = torch.arange(max_new, device=device)
        self.logits: torch.Tensor | None = None  # [slots, V] next-token logits
        self.slot_row = [-1] * slots
        # Host mirror of the cache length each busy slot uses: positions[s] + 1 equals
        # slot_offset[s] + forwards, since every forward advances all slots by one.
        self.slot_offset = [0] * slots
        self.forwards = 0
        self.busy = 0  # slots serving a row
        self.cache_len = 0  # max cache length over busy slots
        self.next_row = 0
        self.prefixes: dict[int, _Prefix] = {}
        self.results: list[tuple[torch.Tensor, torch.Tensor, str] | None] = [None] * self.num_rows
        self.row_versions: list[torch.Tensor | None] = [None] * self.num_rows

    # -- schedule ---------------------------------------------------------------------------

    def _prefill_from(self, first: int) -> None:
        """Prefill prompts first.. in one right-padded batch: as many prompts as the slots can
        take at once, so prefills are few and batched, but no more than fit in
        `max_prefill_tokens` padded tokens (at least one prompt), which bounds the memory of a
        prefill's activations and of the keys/values it holds until its rows take slots."""
        engine = self.engine
        count, longest = 0, 0
        for prompt in self.prompts[first : first + max(1, -(-self.slots // self.n))]:
            longest = max(longest, prompt.numel())
            if count and (count + 1) * longest > engine.max_prefill_tokens:
                break
            count += 1
        batch = self.prompts[first : first + count]
        lengths = torch.tensor([p.numel() for p in batch])
        ids = torch.full((count, int(lengths.max())), engine.pad_token_id, dtype=torch.long)
        for row, prompt in enumerate(batch):
            ids[row, : prompt.numel()] = prompt
        lengths = lengths.to(self.device)
        keys, values, logits = self.decoder.prefill(ids.to(self.device), lengths)
        version = self.feed.version if self.feed is not None else 0
        prefill = _Prefill(keys, values, logits, lengths, version)
        for row, prompt in enumerate(batch):
            self.prefixes[first + row] = _Prefix(
                prefill=prefill, row=row, length=prompt.numel(), rows_left=self.n
            )

    def _fill(self, free_slots: list[int]) -> None:
        """Give free slots the next pending rows, in row order (prompt-major, sample-minor).
        The slots assigned so far are loaded before another prefill runs, so one prefill's
        keys/values are alive at a time (besides those of prompts with samples still pending)."""
        assigned: dict[int, list[int]] = {}
        for slot in free_slots:
            if self.next_row >= self.num_rows:
                break
            row = self.next_row
            self.next_row += 1
            prompt = row // self.n
            if prompt not in self.prefixes:
                self._load(assigned)
                assigned = {}
                self._prefill_from(prompt)
            assigned.setdefault(prompt, []).append(slot)
            self.slot_row[slot] = row
        self._load(assigned)

    def _load(self, assigned: dict[int, list[int]]) -> None:
        """Load the prefilled prompts' keys/values and first-token logits into their slots
        (`assigned`: prompt -> slots) and start those slots."""
        if not assigned:
            return
        if self.logits is None:
            vocab = next(iter(self.prefixes.values())).prefill.logits.shape[-1]
            self.logits = torch.zeros((self.slots, vocab), device=self.device)
        # The slots' state is set per prefill batch (usually one) and for all slots at once,
        # not per prompt: a few ops per call instead of ~10 per prompt.
        by_prefill: dict[int, tuple[_Prefill, list[int], list[int]]] = {}
        for prompt, slots in assigned.items():
            prefix = self.prefixes[prompt]
            _, batch_slots, rows = by_prefill.setdefault(
                id(prefix.prefill), (prefix.prefill, [], [])
            )
            batch_slots += slots
            rows += [prefix.row] * len(slots)
            for slot in slots:
                self.slot_offset[slot] = prefix.length + 1 - self.forwards
            self.busy += len(slots)
            prefix.rows_left -= len(slots)
            if prefix.rows_left == 0:
                del self.prefixes[prompt]
        filled = []
        for prefill, slots, rows in by_prefill.values():
            index = torch.tensor(slots, device=self.device)
            source = torch.tensor(rows, device=self.device)
            self.cache.load_prefixes(index, prefill.keys, prefill.values, source)
            self.logits[index] = prefill.logits[source]
            self.positions[index] = prefill.lengths[source]
            if self.logits_version is not None:
                self.logits_version[slots] = prefill.version
            filled += slots
        index = torch.tensor(filled, device=self.device)
        self.generated[index] = 0
        self.active[index] = True
        if self.slot_uniforms is not None:
            keys = self.row_keys[[self.slot_row[s] for s in filled]]
            self.slot_uniforms[index] = keyed_uniform(
                keys.unsqueeze(1), self.completion_positions.unsqueeze(0)
            )
        self._refresh_cache_len()

    def _refresh_cache_len(self) -> None:
        offsets = [self.slot_offset[s] for s, row in enumerate(self.slot_row) if row >= 0]
        self.cache_len = max(offsets, default=0) + self.forwards

    def _harvest(self, finished: list[int], reasons: torch.Tensor) -> None:
        """Store the completions of finished slots and mark the slots idle."""
        index = torch.tensor(finished, device=self.device)
        lengths = self.generated[index].tolist()
        codes = reasons[index].tolist()
        tokens = self.tokens[index].cpu()
        logprobs = self.token_logprobs[index].cpu()
        versions = self.token_versions
        for i, slot in enumerate(finished):
            length = lengths[i]
            self.results[self.slot_row[slot]] = (
                tokens[i, :length].clone(),
                logprobs[i, :length].clone(),
                FINISH_REASONS[codes[i]],
            )
            if versions is not None:
                self.row_versions[self.slot_row[slot]] = versions[slot, :length].clone()
            self.slot_row[slot] = -1
        self.busy -= len(finished)
        self.active[index] = False
        # Idle slots keep being fed (their outputs are ignored); restart them at position 0 so
        # they can never run past the end of the cache.
        self.positions[index] = 0
        self.generated[index] = 0
        self._refresh_cache_len()

    def _compact(self, width: int) -> int:
        """Move the busy slots among 0..width-1 to the front; returns the new width."""
        busy = [s for s in range(width) if self.slot_row[s] >= 0]
        if busy == list(range(len(busy))):
            return len(busy)
        assert self.logits is not None  # made by _load before the first decode step
        index = torch.tensor(busy, device=self.device)
        self.cache.compact(index, self.cache_len)
        for state in (
            self.tokens,
            self.token_logprobs,
            self.generated,
            self.positions,
            self.slot_uniforms,  # None when greedy
        ):
            if state is not None:
                state[: len(busy)] = state[index]
        if self.token_versions is not None and self.logits_version is not None:
            self.token_versions[: len(busy)] = self.token_versions[busy]
            self.logits_version[: len(busy)] = self.logits_version[busy]
        self.logits[: len(busy)] = self.logits[index]
        self.active[: len(busy)] = True
        self.active[len(busy) :] = False
        self.slot_row[: len(busy)] = [self.slot_row[s] for s in busy]
        self.slot_offset[: len(busy)] = [self.slot_offset[s] for s in busy]
        for s in range(len(busy), width):
            self.slot_row[s] = -1
        return len(busy)

    # -- decode loop ------------------------------------------------------------------------

    def decode(self) -> tuple[list[torch.Tensor], list[torch.Tensor], list[str]]:
        engine, sampling = self.engine, self.sampling
        max_new = sampling.max_new_tokens
        self._fill(list(range(self.slots)))
        assert self.logits is not None  # made by _load for the first rows
        width = self.slots
        while True:
            logits = self.logits[:width]
            active = self.active[:width]
            generated = self.generated[:width]
            column = generated.unsqueeze(-1)  # idle slots sit at column 0, busy ones < max_new
            uniforms = None
            if self.slot_uniforms is not None:
                uniforms = self.slot_uniforms[:width].gather(1, column).squeeze(1)
            tokens, logprobs = sample_next(logits, sampling, uniforms=uniforms)
            self.tokens[:width].scatter_(1, column, tokens.unsqueeze(-1))
            self.token_logprobs[:width].scatter_(1, column, logprobs.unsqueeze(-1))
            if self.token_versions is not None and self.logits_version is not None:
                self.token_versions[:width].scatter_(
                    1, column.cpu(), self.logits_version[:width].unsqueeze(-1)
                )
            generated += active

            eos = torch.isin(tokens, self.eos_ids)
            finished = (eos | (generated >= max_new)) & active
            stopped = None
            if sampling.stop:
                stopped = self._stop_string_hits(width) & ~eos
                finished |= stopped & active
            finished_slots = finished.nonzero().flatten().tolist() if finished.any() else []
            if len(finished_slots) < self.busy:  # some row goes on: feed the sampled tokens
                if self.feed is not None and self.feed.poll():  # newer weights: continue on them
                    self.decoder.prepare()
                length = self.cache.max_len if engine.compile else self.cache_len
                logits = self.decode_step(tokens, self.positions[:width], self.cache, length)
                if width == self.slots:  # adopt the new tensor: no [W, V] copy per step
                    self.logits = logits
                else:
                    self.logits[:width] = logits
                self.positions[:width] += 1
                if self.logits_version is not None and self.feed is not None:
                    self.logits_version[:width] = self.feed.version
                self.forwards += 1
                self.cache_len += 1
            if finished_slots:
                reasons = torch.where(eos, _EOS, _LENGTH)
                if stopped is not None:
                    reasons = torch.where(stopped, _STOP, reasons)
                self._harvest(finished_slots, reasons)
                self._fill(finished_slots)
                if self.busy == 0:
                    break
                narrow = (width - self.busy) * _COMPACT_IDLE >= width
                if narrow and self.next_row >= self.num_rows and not engine.compile:
                    width = self._compact(width)
        completions, logprobs, reasons = zip(*self.results, strict=True)
        if self.token_versions is not None:
            self.versions = [v for v in self.row_versions if v is not None]
        return list(completions), list(logprobs), list(reasons)

    def _stop_string_hits(self, width: int) -> torch.Tensor:
        """Slots whose completion tail now contains a stop string, as [width] bool.

        Only the last max(len(stop)) + margin tokens of each busy slot are decoded: the check
        runs after every token, so a stop string found there was completed by the newest one.
        """
        stop = self.sampling.stop
        window = min(max(len(s) for s in stop) + _STOP_TAIL_MARGIN, self.tokens.shape[1])
        generated = self.generated[:width]
        columns = generated.unsqueeze(1) - window + torch.arange(window, device=self.device)
        tails = self.tokens[:width].gather(1, columns.clamp(min=0)).tolist()
        starts = (window - generated).clamp(min=0).tolist()  # columns before the first token
        hits = torch.zeros(width, dtype=torch.bool)
        for slot in range(width):
            if self.slot_row[slot] >= 0:
                text = self.engine.tokenizer.decode(
                    tails[slot][starts[slot] :], skip_special_tokens=False
                )
                hits[slot] = any(s in text for s in stop)
        return hits.to(self.device)


def _as_prompt_tensor(prompt: Sequence[int] | torch.Tensor, index: int) -> torch.Tensor:
    ids = torch.as_tensor(prompt, dtype=torch.long).detach().cpu()
    if ids.dim() != 1 or ids.numel() == 0:
        raise ValueError(
            f"FastEngine.generate: prompt {index} must be a non-empty 1-D list of token ids, "
            f"got shape {tuple(ids.shape)}"
        )
    return ids
