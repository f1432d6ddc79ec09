"""The fast engine's decode loop: the slot schedule of one call and its decode steps.

A `DecodeLoop` serves one `FastEngine.generate` call (a fixed list of prompts, rows returned
prompt-major) or one `FastEngine.stream` call (prompts taken while slots free up, groups handed
over as they finish). Slots hold rows; each step samples one token for every decoded slot and
feeds it back in one forward; a finished row's slot takes the next pending row at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from rlvr.rollout.hf_engine import FINISH_REASONS
from rlvr.rollout.kv_cache import SlotKVCache
from rlvr.rollout.llama_decoder import LlamaFamilyDecoder
from rlvr.rollout.sampling import keyed_uniform, row_keys, sample_next
from rlvr.rollout.types import GroupRequests, RolloutBatch, SamplingParams, WeightFeed

_LENGTH, _EOS, _STOP = (FINISH_REASONS.index(r) for r in ("length", "eos", "stop"))
_STOP_TAIL_MARGIN = 8  # as in HFEngine: tokens decoded beyond the longest stop string


class SlotEngine(Protocol):
    """What a decode loop reads of its engine (`FastEngine`)."""

    model: torch.nn.Module
    tokenizer: Any
    max_batch_size: int
    max_prefill_tokens: int
    compile: bool
    eos_token_ids: list[int]
    pad_token_id: int
    window: int | None  # the model's sliding window, if any

    @property
    def device(self) -> torch.device: ...

    @property
    def exact_logprobs(self) -> bool: ...  # False: a cast replica, sampled by the blocked CDF

    def slot_cache(self, decoder: LlamaFamilyDecoder, slots: int, max_len: int) -> SlotKVCache: ...

    def completion_text(self, completion: torch.Tensor, reason: str) -> str: ...


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


# Narrow the batch once at least 1/_COMPACT_IDLE of the slots idle (nothing pending). Measured on
# the embedded default's rollouts (128 slots, 2-3 ms decode steps): at "half idle" 19% of the
# decoded rows were idle; at an eighth, decode time fell 13-25% (a compaction costs ~0.6 ms).
_COMPACT_IDLE = 8


class DecodeLoop:
    """One `generate` call: the slot schedule and the decode loop.

    Row r = prompt r // n, sample r % n. Slot state lives in [slots] device tensors, of which
    the first `width` are decoded each step; `slot_row[s]` (host) is the row slot s serves, or
    -1 when the slot is idle. `slots`: a streaming call's (FastEngine.stream), else as many as
    the rows, up to max_batch_size.
    """

    def __init__(
        self,
        engine: SlotEngine,
        decoder: LlamaFamilyDecoder,
        decode: Callable[[torch.Tensor, torch.Tensor, SlotKVCache, int], torch.Tensor],
        prompts: list[torch.Tensor],
        n: int,
        sampling: SamplingParams,
        keys: torch.Tensor,
        feed: WeightFeed | None = None,
        slots: int | None = None,
    ) -> None:
        self.engine, self.prompts, self.n = engine, prompts, n
        self.feed = feed
        # the engine's decoder and its decode step (compiled or not)
        self.decoder, self.decode_step = decoder, decode
        self.sampling = sampling
        self.device = engine.device
        self.num_rows = len(prompts) * n
        slots = slots or min(engine.max_batch_size, self.num_rows)
        longest = max(p.numel() for p in prompts) + sampling.max_new_tokens
        if engine.compile:
            # A compiled step has a static width: a power of two, so few widths get compiled.
            slots = min(engine.max_batch_size, 1 << (slots - 1).bit_length())
        self.cache = engine.slot_cache(decoder, slots, longest)
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
        # a streaming call's: where finished groups go, the keys' seed, rows done per prompt
        self.requests: GroupRequests | None = None
        self.seed = 0
        self.rows_done: dict[int, int] = {}

    # -- schedule ---------------------------------------------------------------------------

    def _prefill_from(self, first: int) -> None:
        """Prefill prompts first.. in one right-padded batch: as many prompts as the slots can
        take at once, so prefills are few and batched, but no more than fit in
        `max_prefill_tokens` padded tokens (at least one prompt), which bounds the memory of a
        prefill's activations and of the keys/values it holds until its rows take slots."""
        engine = self.engine
        count, longest = 0, 0
        for index in range(first, min(len(self.prompts), first + max(1, -(-self.slots // self.n)))):
            longest = max(longest, self.prompts[index].numel())
            if count and (
                (count + 1) * longest > engine.max_prefill_tokens or not self._fits(index)
            ):
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
            prompt = row // self.n
            if prompt not in self.prefixes:
                if not self._fits(prompt):  # streaming: it waits for the rows in flight
                    break
                self._load(assigned)
                assigned = {}
                self._prefill_from(prompt)
            self.next_row += 1
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
            keys = self._keys([self.slot_row[s] for s in filled])
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
            if self.requests is not None:
                self._row_done(self.slot_row[slot])
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
        engine = self.engine
        self._fill(list(range(self.slots)))
        assert self.logits is not None  # made by _load for the first rows
        width = self.slots
        while True:
            finished = self._step(width)
            if finished:
                self._harvest(*finished)
                self._fill(finished[0])
                if self.busy == 0:
                    break
                narrow = (width - self.busy) * _COMPACT_IDLE >= width
                if narrow and self.next_row >= self.num_rows and not engine.compile:
                    width = self._compact(width)
        completions, logprobs, reasons = zip(*self.results, strict=True)
        if self.token_versions is not None:
            self.versions = [v for v in self.row_versions if v is not None]
        return list(completions), list(logprobs), list(reasons)

    def _step(self, width: int) -> tuple[list[int], torch.Tensor] | None:
        """Sample a token for the first `width` slots and feed it back (one decode forward,
        when a row goes on); returns the slots that finished and every slot's finish code, or
        None when none finished."""
        engine, sampling = self.engine, self.sampling
        assert self.logits is not None  # made by _load before the first decode step
        logits = self.logits[:width]
        active = self.active[:width]
        generated = self.generated[:width]
        column = generated.unsqueeze(-1)  # idle slots sit at column 0, busy ones < max_new
        uniforms = None
        if self.slot_uniforms is not None:
            uniforms = self.slot_uniforms[:width].gather(1, column).squeeze(1)
        tokens, logprobs = sample_next(
            logits, sampling, uniforms=uniforms, blocked=not engine.exact_logprobs
        )
        self.tokens[:width].scatter_(1, column, tokens.unsqueeze(-1))
        self.token_logprobs[:width].scatter_(1, column, logprobs.unsqueeze(-1))
        if self.token_versions is not None and self.logits_version is not None:
            self.token_versions[:width].scatter_(
                1, column.cpu(), self.logits_version[:width].unsqueeze(-1)
            )
        generated += active

        eos = torch.isin(tokens, self.eos_ids)
        finished = (eos | (generated >= sampling.max_new_tokens)) & active
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
        if not finished_slots:
            return None
        reasons = torch.where(eos, _EOS, _LENGTH)
        if stopped is not None:
            reasons = torch.where(stopped, _STOP, reasons)
        return finished_slots, reasons

    # -- streaming (FastEngine.stream) ------------------------------------------------------

    def stream(self, requests: GroupRequests, seed: int) -> None:
        """Decode until `requests` ends the call: free slots take new prompts' rows at every
        step, each group goes to `requests.done` when its last row ends, and the decoded width
        is the busy slots' span (idle slots are refilled lowest first)."""
        self.requests, self.seed = requests, seed
        self._fill(list(range(self.slots)))
        while True:
            if self.busy == 0 and not self._refill():
                return
            busy = [s for s, row in enumerate(self.slot_row) if row >= 0]
            width = self.slots if self.engine.compile else busy[-1] + 1
            finished = self._step(width)
            if finished:
                self._harvest(*finished)
            if self.busy < self.slots:
                self._take(wait=False)
                self._fill([s for s, row in enumerate(self.slot_row) if row < 0])

    def _refill(self) -> bool:
        """Nothing in flight: start the next rows, growing the K/V buffers for a longer prompt,
        else wait for prompts; False when the call is over."""
        if self.next_row >= self.num_rows and not self._take(wait=True):
            return False
        prompt = self.next_row // self.n
        if not self._fits(prompt):
            longest = self.prompts[prompt].numel() + self.sampling.max_new_tokens
            self.cache = self.engine.slot_cache(self.decoder, self.slots, longest)
        self._fill(list(range(self.slots)))
        return True

    def _take(self, wait: bool) -> bool:
        """Ask for prompts for the free slots (at least one prompt when `wait`) and queue their
        rows; False when `wait` got none."""
        assert self.requests is not None
        free = self.slots - self.busy - (self.num_rows - self.next_row)
        if free <= 0 and not wait:
            return True
        taken = self.requests.take(max(1, -(-free // self.n)), wait)
        window = self.engine.window
        for ids in taken:
            prompt = as_prompt_tensor(ids, len(self.prompts))
            if window is not None and prompt.numel() + self.sampling.max_new_tokens > window:
                raise ValueError(
                    f"FastEngine.stream: a prompt of {prompt.numel()} tokens plus "
                    f"{self.sampling.max_new_tokens} new ones exceeds the model's sliding "
                    f"window ({window})"
                )
            self.prompts.append(prompt)
        if taken and self.feed is not None and self.feed.poll():  # they start on the newest
            self.decoder.prepare()
        added = len(taken) * self.n
        self.num_rows += added
        self.results += [None] * added
        self.row_versions += [None] * added
        return bool(taken) or not wait

    def _fits(self, prompt: int) -> bool:
        """The K/V buffers hold prompt `prompt` and its completion (always, outside streaming:
        they were sized for the longest prompt)."""
        return self.prompts[prompt].numel() + self.sampling.max_new_tokens <= self.cache.max_len

    def _keys(self, rows: list[int]) -> torch.Tensor:
        """The sampling keys of `rows`: made from the seed when streaming (rows go on without
        end), else the call's."""
        if self.requests is not None:
            return row_keys(self.seed, torch.tensor(rows)).to(self.device)
        return self.row_keys[rows]

    def _row_done(self, row: int) -> None:
        """Streaming: count `row` finished; when its group is complete, hand it over and drop
        what the call kept of it."""
        assert self.requests is not None
        prompt, n = row // self.n, self.n
        self.rows_done[prompt] = self.rows_done.get(prompt, 0) + 1
        if self.rows_done[prompt] < n:
            return
        del self.rows_done[prompt]
        rows = range(prompt * n, prompt * n + n)
        done = [r for r in (self.results[i] for i in rows) if r is not None]
        completions, logprobs, reasons = (list(x) for x in zip(*done, strict=True))
        versions = [v for v in (self.row_versions[i] for i in rows) if v is not None]
        batch = RolloutBatch(
            prompt_ids=[self.prompts[prompt]] * n,
            completion_ids=completions,
            completion_text=[
                self.engine.completion_text(c, r) for c, r in zip(completions, reasons)
            ],
            logprobs=logprobs,
            finish_reason=reasons,
            prompt_index=[0] * n,
            versions=versions if self.token_versions is not None else None,
        )
        for i in rows:
            self.results[i] = self.row_versions[i] = None
        self.prompts[prompt] = _DONE
        self.requests.done(prompt, batch)

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


_DONE = torch.zeros(1, dtype=torch.long)  # streaming: the place of a prompt whose group ended


def as_prompt_tensor(prompt: Sequence[int] | torch.Tensor, index: int) -> torch.Tensor:
    ids = torch.as_tensor(prompt, dtype=torch.long).detach().cpu()
    if ids.dim() != 1 or ids.numel() == 0:
        raise ValueError(
            f"FastEngine.generate: prompt {index} must be a non-empty 1-D list of token ids, "
            f"got shape {tuple(ids.shape)}"
        )
    return ids
